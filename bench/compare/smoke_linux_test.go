//go:build linux

package compare

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/internal/privileged"
	"github.com/xdpndk/xdpndk/internal/testbed"
)

// smokeOptions is the smallest run that still measures every system: one repetition at
// 64 B, short windows, and one long path (10 ms, write, one run of 3 s).
func smokeOptions() Options {
	o := DefaultOptions()
	o.Runs = 1
	o.Sizes, o.Iperf3Sizes, o.SockperfSizes, o.FabricSizes = []int{64}, []int{64}, []int{64}, []int{64}
	o.NdkpeerWindow = 200 * time.Millisecond
	o.FabricTarget, o.FabricCPUTarget = 100*time.Millisecond, 200*time.Millisecond
	o.LinkWindow, o.LinkWarmup, o.LinkPingPongN = 200*time.Millisecond, 50*time.Millisecond, 1000
	o.LongPathRTTs, o.LongPathOps, o.LongPathRuns = []time.Duration{10 * time.Millisecond}, []string{"write"}, 1
	o.LongPathDuration, o.LongPathSkip = 3*time.Second, time.Second
	return o
}

// TestSmoke runs compare in its smallest mode on a bed of the test's (removed by the
// test's cleanup) and checks that every system gave its figures, each positive, that the
// required goals are evaluated and that the document survives the JSON round trip. It
// asserts sanity only, never speed.
func TestSmoke(t *testing.T) {
	privileged.Require(t)
	o := smokeOptions()
	if testing.Verbose() {
		o.Progress = os.Stderr
	}
	bed := testbed.NewT(t, BedOptions(o.Runs))
	res, err := RunBed(t.Context(), bed, o)
	if err != nil {
		t.Fatalf("RunBed: %v", err)
	}
	pp := func(sys, metric string) Ref { return Ref{ScenarioPingPong, sys, OpPingPong, 64, metric, ""} }
	st := func(sys, op string, size int, metric string) Ref {
		return Ref{ScenarioStream, sys, op, size, metric, ""}
	}
	lp := paramsKey(loadParams(LoadSize))
	var want []Ref
	for _, sys := range []string{SystemXDPNDK, SystemXDPNDKEvents} {
		want = append(want,
			pp(sys, report.MetricRTTP50), pp(sys, report.MetricRTTP99), pp(sys, report.MetricRTTMean), pp(sys, report.MetricCPUMsg), pp(sys, report.MetricCores),
			Ref{ScenarioLatency, sys, OpWrite, 64, report.MetricRTTP50, ""}, Ref{ScenarioLatency, sys, OpRead, 64, report.MetricRTTP99, ""},
			st(sys, OpSend, 64, report.MetricMsgRate), st(sys, OpWrite, 64, report.MetricGbps), st(sys, OpRead, 64, report.MetricMsgRate),
			st(sys, OpWrite, 64, report.MetricCPUMsg), st(sys, OpWrite, 64, report.MetricCores),
			Ref{ScenarioLoaded, sys, OpPingPong, 64, report.MetricRTTP50, lp}, Ref{ScenarioLoaded, sys, OpPingPong, 64, report.MetricRTTP99, lp},
			Ref{ScenarioLoaded, sys, OpWrite, LoadSize, report.MetricGbps, lp})
	}
	for _, sys := range []string{SystemRawXDPNDK, SystemRawAsavie} {
		want = append(want, pp(sys, report.MetricRTTP50), pp(sys, report.MetricRTTP99), pp(sys, report.MetricCPUMsg),
			st(sys, OpSend, 64, report.MetricMsgRate), st(sys, OpSend, 64, report.MetricGbps), st(sys, OpSend, 64, report.MetricCPUMsg))
	}
	want = append(want, st(SystemRawXDPNDK, OpSend, 9000, report.MetricGbps),
		pp(SystemQperfTCP, report.MetricRTTMean), pp(SystemQperfTCP, report.MetricCPUMsg),
		st(SystemQperfTCP, OpSend, 64, report.MetricMsgRate), st(SystemQperfTCP, OpSend, 64, report.MetricGbps), st(SystemQperfTCP, OpSend, 64, report.MetricCPUMsg),
		Ref{ScenarioLoaded, SystemQperfTCP, OpPingPong, 64, report.MetricRTTMean, lp},
		st(SystemIperf3TCP, OpSend, 64, report.MetricGbps), st(SystemIperf3TCP, OpSend, 64, report.MetricMsgRate), st(SystemIperf3TCP, OpSend, 64, report.MetricCPUMsg),
		Ref{ScenarioLoaded, SystemIperf3TCP, OpSend, LoadSize, report.MetricGbps, lp})
	for _, sys := range []string{SystemSockperfUDP, SystemSockperfUDPPoll} {
		want = append(want, pp(sys, report.MetricRTTP50), pp(sys, report.MetricRTTP99), pp(sys, report.MetricCPUMsg),
			st(sys, OpSend, 64, report.MetricMsgRate), st(sys, OpSend, 64, report.MetricGbps), st(sys, OpSend, 64, report.MetricCPUMsg))
	}
	for _, sys := range []string{SystemFabricTCP, SystemFabricUDPRxd} {
		want = append(want, pp(sys, report.MetricRTTMean), pp(sys, report.MetricCPUMsg), pp(sys, report.MetricCores))
	}
	lpp := paramsKey(longPathParams(10, 1e9))
	for _, sc := range []string{ScenarioLongPath, ScenarioLongPathShared} {
		for _, sys := range []string{SystemXDPNDK, SystemIperf3TCP} {
			want = append(want, Ref{sc, sys, "write", 0, report.MetricGbps, lpp})
		}
	}
	for _, ref := range want {
		r := res.Find(ref)
		if r == nil || len(r.Runs) != 1 || !(r.Value > 0) {
			t.Errorf("%v: record %+v, want one positive run", ref, r)
		}
	}
	if r := res.Find(Ref{ScenarioStream, SystemRawAsavie, OpSend, 9000, report.MetricUnsup, ""}); r == nil || r.Note == "" {
		t.Errorf("raw-asavie at 9000 B: %+v, want unsupported with a reason", r)
	}
	for _, sys := range AllSystems {
		if res.Header.Modes[sys] == "" {
			t.Errorf("%s: no mode in the header", sys)
		}
	}
	for _, n := range res.Header.Notes {
		if report.IsFailed(n) {
			t.Errorf("failed: %s", n)
		}
	}
	for _, g := range res.Goals {
		if g.Required && !g.Evaluated {
			t.Errorf("required goal %q not evaluated", g.Name)
		}
	}

	path := filepath.Join(t.TempDir(), "compare.json")
	if err := res.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, res.Document()) {
		t.Errorf("the JSON round trip changed the document")
	}
	var b strings.Builder
	if err := res.WriteTable(&b); err != nil || !strings.Contains(b.String(), SystemFabricUDPRxd) {
		t.Errorf("summary table (%v):\n%s", err, b.String())
	}
}
