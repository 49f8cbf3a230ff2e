//go:build linux

package pathbench

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/privileged"
)

// TestSmoke runs every scenario with short windows and checks only that the figures were
// produced and that data arrived: every flow's goodput is positive, the loss programs
// dropped something, every goal of the run is listed (evaluated, since nothing failed),
// and the results survive the JSON round trip. It asserts nothing about speed.
func TestSmoke(t *testing.T) {
	privileged.Require(t)
	o := QuickOptions()
	if _, err := exec.LookPath("iperf3"); err != nil {
		t.Fatalf("iperf3 not found (make test's prerequisite step, go run ./internal/prereq test, installs it): %v", err)
	}
	o.Duration, o.Warmup, o.Sample = 400*time.Millisecond, 200*time.Millisecond, 50*time.Millisecond
	o.XDPLosses = []float64{0.01}
	res, err := Run(t.Context(), o)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	w := func(sc, sys string, loss float64, m string) Ref { return Ref{sc, sys, OpWrite, WriteSize, loss, m} }
	for _, ref := range []Ref{
		w(ScenarioSingle, SystemNDK, 0, MetricGoodput),
		w(ScenarioTwo, SystemQP(1), 0, MetricGoodput),
		w(ScenarioTwo, SystemQP(2), 0, MetricGoodput),
		w(ScenarioTCP, SystemNDK, 0, MetricGoodput),
		{ScenarioTCP, SystemTCP, OpTCP, 0, 0, MetricGoodput},
		w(ScenarioLoss, SystemNDK, 0, MetricGoodput),
		w(ScenarioLoss, SystemNDK, 1, MetricGoodput),
		w(ScenarioLoss, SystemPath, 1, MetricDrops),
		w(ScenarioXDP, SystemNDK, 0, MetricGoodput),
		w(ScenarioXDP, SystemNDK, 1, MetricGoodput),
		w(ScenarioXDP, SystemPath, 1, MetricDrops),
		w(ScenarioXDP, SystemNDK, 1, MetricTxPackets),
	} {
		if r := res.Find(ref); r == nil || len(r.Runs) != 1 || !(r.Value > 0) {
			t.Errorf("%v: record %+v, want one positive value", ref, r)
		}
	}
	for _, ref := range []Ref{w(ScenarioTwo, SystemAll, 0, MetricJain), w(ScenarioLoss, SystemNDK, 1, MetricRatio), w(ScenarioXDP, SystemNDK, 1, MetricRatio)} {
		if r := res.Find(ref); r == nil || len(r.Runs) != 1 {
			t.Errorf("%v: record %+v, want one value", ref, r)
		}
	}
	if want := len(Goals(o)); len(res.Header.Goals) != want {
		t.Errorf("%d goals, want %d", len(res.Header.Goals), want)
	}
	for _, g := range res.Header.Goals {
		if !g.Evaluated {
			t.Errorf("goal %q not evaluated", g.Name)
		}
	}
	path := filepath.Join(t.TempDir(), "path.json")
	if err := res.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(path)
	if err != nil || len(back.Records) != len(res.Records) {
		t.Fatalf("round trip: %v, %d records of %d", err, len(back.Records), len(res.Records))
	}
}
