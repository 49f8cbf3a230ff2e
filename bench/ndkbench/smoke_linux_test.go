//go:build linux

package ndkbench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/privileged"
	"github.com/xdpndk/xdpndk/internal/testbed"
)

// TestSmokeQuick runs a tiny quick pass (inline mode, the scale figures with 64 QP pairs,
// and the baselines) on its own bed and checks that every figure exists, is positive, that
// every goal is evaluated and that the results survive the JSON round trip. It asserts
// sanity only, never speed.
func TestSmokeQuick(t *testing.T) {
	privileged.Require(t)
	o := QuickOptions()
	o.PingPongN, o.PingPongWarmup, o.LatencyN = 400, 50, 400
	// A window long enough that a stream completes something even when the shared machine
	// stalls a goroutine for a while (a 100 ms window once saw no Write complete while other
	// packages' tests ran beside it).
	o.Duration, o.Warmup = 400*time.Millisecond, 50*time.Millisecond
	res, err := Run(t.Context(), o)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	inline := SystemNDK(ModeInline)
	for _, ref := range []Ref{
		{BenchPingPong, inline, OpSendRecv, MsgSize, MetricP50},
		{BenchPingPong, inline, OpSendRecv, MsgSize, MetricP99},
		{BenchPingPong, inline, OpSendRecvUnresolved, MsgSize, MetricP99},
		{BenchPingPong, SystemRaw, OpRTT, 64, MetricP50},
		{BenchPingPong, SystemTCP, OpRTT, MsgSize, MetricP50},
		{BenchLatency, inline, OpWrite, MsgSize, MetricP50},
		{BenchLatency, inline, OpRead, MsgSize, MetricP50},
		{BenchMsgRate, inline, OpWrite, MsgSize, MetricOps},
		{BenchMsgRate, inline, OpWriteSilent, MsgSize, MetricOps},
		{BenchGoodput, inline, OpWriteUMEM, GoodputSize, MetricGbps},
		{BenchGoodput, inline, OpWriteHeap, GoodputSize, MetricGbps},
		{BenchGoodput, inline, OpWriteUMEM, GoodputSize, MetricCPUOp},
		{BenchMsgRate, inline, OpWrite, MsgSize, MetricCore},
		{BenchOneWay, SystemRaw, OpSend, 64, MetricPPS},
		{BenchOneWay, SystemRaw, OpSend, 9000, MetricGbps},
		{BenchEngines, SystemEngines(1), OpWriteSilent, MsgSize, MetricCPUOp},
		{BenchEngines, SystemEngines(2), OpWriteSilent, MsgSize, MetricCPUOp},
		{BenchEngines, SystemEngines(2), OpWriteSilent, MsgSize, MetricOps},
		{BenchScale, inline, OpWriteOneQP, MsgSize, MetricOps},
		{BenchScale, inline, OpWriteAllQPs, MsgSize, MetricOps},
		{BenchScale, inline, OpWriteAllQPs, MsgSize, MetricQPMin},
		{BenchIdle, inline, OpIdleWaitScale, 0, MetricCore},
	} {
		r := res.Find(ref)
		if r == nil || len(r.Runs) != 1 || !(r.Value > 0) {
			t.Errorf("%v: record %+v, want one positive run", ref, r)
		}
	}
	for _, g := range res.Header.Goals {
		if !g.Info && !g.Evaluated {
			t.Errorf("goal %q not evaluated", g.Name)
		}
	}
	for _, sys := range []string{SystemRaw, SystemTCP, inline} {
		if res.Header.Modes[sys] == "" {
			t.Errorf("%s: no mode in the header", sys)
		}
	}

	path := filepath.Join(t.TempDir(), "ndk.json")
	if err := res.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Records) != len(res.Records) || len(back.Goals) != len(res.Header.Goals) {
		t.Errorf("JSON round trip: %d records, %d goals", len(back.Records), len(back.Goals))
	}

	// Run removed its bed.
	entries, err := os.ReadDir("/run/netns")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	mine := fmt.Sprintf("%s%d-", testbed.NSPrefix, os.Getpid())
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), mine) {
			t.Errorf("namespace %s left behind", e.Name())
		}
	}
}
