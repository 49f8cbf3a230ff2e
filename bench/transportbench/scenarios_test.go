package transportbench

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Jain's index: 1 for equal shares, 1/n for one taking all.
func TestJain(t *testing.T) {
	if j := Jain([]float64{3, 3, 3}); j != 1 {
		t.Errorf("equal: %v", j)
	}
	if j := Jain([]float64{4, 0, 0, 0}); j != 0.25 {
		t.Errorf("one of four: %v", j)
	}
	if Jain(nil) != 0 || Jain([]float64{0, 0}) != 0 {
		t.Error("empty or zero")
	}
}

func TestSizing(t *testing.T) {
	const bw = 10_000_000_000
	if w := WindowFor(bw, 10*time.Millisecond, 1472); w != 65536 {
		t.Errorf("window at 10 ms: %d", w)
	}
	if w := WindowFor(bw, 10*time.Microsecond, 1472); w != 1024 {
		t.Errorf("window at 10 us: %d", w)
	}
	if w := WindowFor(bw, time.Second, 1472); w != 65536 {
		t.Errorf("window at 1 s: %d", w)
	}
	if q := QueueFor(bw, time.Millisecond); q != 1_250_000 {
		t.Errorf("queue at 1 ms: %d", q)
	}
	if q := QueueFor(bw, 10*time.Microsecond); q != 64<<10 {
		t.Errorf("queue at 10 us: %d", q)
	}
	if n := OutstandingFor(bw, 10*time.Millisecond, 64<<10); n != 763 { // 4 x 12.5 MB / 64 KiB
		t.Errorf("outstanding at 10 ms: %d", n)
	}
}

// A short run of every scenario moves data through the shared bottleneck, is
// deterministic, reports every goal (evaluated), and survives the JSON round trip.
func TestRunScenarios(t *testing.T) {
	o := DefaultScenarioOptions()
	o.Quick = true
	o.RTTs = []time.Duration{10 * time.Microsecond, 100 * time.Microsecond}
	o.FairRTTs = []time.Duration{100 * time.Microsecond}
	o.FairFlows = []int{2}
	o.IncastSenders = 4
	su, runs, err := RunScenarios(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2*2*2+1+1 {
		t.Fatalf("%d runs", len(runs))
	}
	for _, r := range runs {
		if r.GoodputGbps <= 0 || len(r.FlowGbps) != r.Spec.Senders || r.Steps == 0 {
			t.Errorf("%d senders rtt %v loss %v %s: goodput %v, flows %v", r.Spec.Senders, r.Spec.RTT, r.Spec.Loss, r.Spec.Mode, r.GoodputGbps, r.FlowGbps)
		}
		if r.Spec.Loss > 0 && r.Retransmits == 0 {
			t.Errorf("rtt %v %s at %v loss: no retransmission", r.Spec.RTT, r.Spec.Mode, r.Spec.Loss)
		}
	}
	// 2 rtt goals per RTT plus the go-back-N ratio at 100 us; 3 fairness; 3 incast.
	if len(su.Header.Goals) != 2+3+3+3 {
		t.Errorf("%d goals: %+v", len(su.Header.Goals), su.Header.Goals)
	}
	for _, g := range su.Header.Goals {
		if !g.Evaluated {
			t.Errorf("goal %q not evaluated", g.Name)
		}
	}
	again := RunFlows(context.Background(), runs[3].Spec)
	if again.GoodputGbps != runs[3].GoodputGbps || again.Retransmits != runs[3].Retransmits || again.Steps != runs[3].Steps {
		t.Errorf("same spec, different runs: %+v vs %+v", again, runs[3])
	}
	path := filepath.Join(t.TempDir(), "s.json")
	if err := su.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(path)
	if err != nil || len(back.Records) != len(su.Records) || len(back.Goals) != len(su.Header.Goals) {
		t.Fatalf("round trip: %v", err)
	}
	if want := su.Document(); !reflect.DeepEqual(back, want) {
		t.Errorf("the document changed in the JSON round trip:\n got %+v\nwant %+v", back, want)
	}
	for _, r := range back.Records {
		if _, ok := r.Params[ParamRTT]; !ok || r.Params[ParamFlows] < 1 {
			t.Fatalf("scenario record without rtt_us and flows: %+v", r)
		}
	}
	for _, g := range back.Goals {
		if g.Compared == "" || !g.Required {
			t.Errorf("goal %+v: nothing compared, or not required", g)
		}
	}
	var b strings.Builder
	if err := su.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fairness", "incast", "rtt", "Goals (issue)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q", want)
		}
	}
}
