package pathbench

import (
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/xdpndk/xdpndk/bench/internal/report"
)

func TestJain(t *testing.T) {
	for _, tc := range []struct {
		x    []float64
		want float64
	}{
		{[]float64{1, 1}, 1},
		{[]float64{2, 0}, 0.5},
		{[]float64{1, 0, 0, 0}, 0.25},
		{[]float64{3, 1}, 16.0 / 20},
	} {
		if got := Jain(tc.x); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Jain(%v) = %v, want %v", tc.x, got, tc.want)
		}
	}
	if !math.IsNaN(Jain(nil)) || !math.IsNaN(Jain([]float64{0, 0})) {
		t.Error("Jain of nothing or of zeros is not NaN")
	}
}

func TestNormalize(t *testing.T) {
	o := DefaultOptions()
	o.Scenarios = []string{ScenarioXDP, ScenarioSingle, ScenarioXDP}
	n, err := o.normalize()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(n.Scenarios, []string{ScenarioSingle, ScenarioXDP}) {
		t.Errorf("scenarios %v, want canonical order without duplicates", n.Scenarios)
	}
	for name, mod := range map[string]func(*Options){
		"unknown scenario": func(o *Options) { o.Scenarios = []string{"bogus"} },
		"no scenario":      func(o *Options) { o.Scenarios = nil },
		"zero duration":    func(o *Options) { o.Duration = 0 },
		"sample too long":  func(o *Options) { o.Sample = o.Duration },
		"outstanding":      func(o *Options) { o.Outstanding = 0 },
		"burst below MTU":  func(o *Options) { o.Burst = 1500 },
		"router loss 0":    func(o *Options) { o.RouterLoss = 0 },
		"xdp loss 1":       func(o *Options) { o.XDPLosses = []float64{1} },
		"rate":             func(o *Options) { o.Rate = 0 },
	} {
		o := DefaultOptions()
		mod(&o)
		if _, err := o.normalize(); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: normalize = %v, want ErrInvalidOptions", name, err)
		}
	}
	if _, err := QuickOptions().normalize(); err != nil {
		t.Errorf("QuickOptions: %v", err)
	}
	if got := ParseScenarios("all"); !slices.Equal(got, AllScenarios) {
		t.Errorf("ParseScenarios(all) = %v", got)
	}
	if got := ParseScenarios("xdp, two,"); !slices.Equal(got, []string{ScenarioXDP, ScenarioTwo}) {
		t.Errorf("ParseScenarios = %v", got)
	}
}

// Every goal of the selected scenarios is listed, and Evaluate marks each met, not met or
// not evaluated by its figure.
func TestGoals(t *testing.T) {
	o := DefaultOptions()
	gs := Goals(o)
	if len(gs) != 1+1+2+1+2*2 {
		t.Fatalf("%d goals for every scenario: %+v", len(gs), gs)
	}
	o.Scenarios = []string{ScenarioTwo}
	if g := Goals(o); len(g) != 1 || g[0].Figure.Metric != MetricJain || g[0].Limit != 0.95 {
		t.Errorf("two-QP goals: %+v", g)
	}
	res := &Results{}
	w := func(sc string, loss float64, m string) Ref { return Ref{sc, SystemNDK, OpWrite, WriteSize, loss, m} }
	res.add(w(ScenarioSingle, 0, MetricShare), UnitRatio, 0.95)
	res.add(w(ScenarioXDP, 1, MetricRatio), UnitRatio, 0.5)
	res.add(w(ScenarioXDP, 10, MetricRTOShare), UnitRatio, 0.05)
	res.add(w(ScenarioXDP, 1, MetricRTOShare), UnitRatio, 0.1)
	ev := Evaluate(gs, res)
	verdict := map[Ref]string{}
	for _, g := range ev {
		verdict[g.Figure] = g.Verdict()
	}
	for ref, want := range map[Ref]string{
		w(ScenarioSingle, 0, MetricShare):  "met",
		w(ScenarioXDP, 1, MetricRatio):     "NOT met",
		w(ScenarioXDP, 10, MetricRTOShare): "met",
		w(ScenarioXDP, 1, MetricRTOShare):  "NOT met", // < 0.1 is strict
		w(ScenarioXDP, 10, MetricRatio):    "not evaluated",
		w(ScenarioLoss, 1, MetricRatio):    "not evaluated",
	} {
		if verdict[ref] != want {
			t.Errorf("%v: %q, want %q", ref, verdict[ref], want)
		}
	}
	for _, g := range ev {
		if g.Figure == w(ScenarioXDP, 10, MetricRatio) && g.Limit != 0.3 {
			t.Errorf("10%% goal limit %v, want 0.3", g.Limit)
		}
	}
}

func TestResultsJSON(t *testing.T) {
	res := &Results{Header: Header{MTU: MTU, Goals: Goals(QuickOptions())}}
	ref := Ref{ScenarioTwo, SystemQP(1), OpWrite, WriteSize, 0, MetricGoodput}
	res.add(ref, UnitGbps, 1)
	res.add(ref, UnitGbps, 3)
	res.add(ref, UnitGbps, math.NaN()) // dropped
	if r := res.Find(ref); r == nil || r.Value != 2 || len(r.Runs) != 2 {
		t.Fatalf("record %+v", r)
	}
	path := filepath.Join(t.TempDir(), "path.json")
	if err := res.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := res.Document(); !reflect.DeepEqual(back, want) || len(back.Goals) != len(res.Header.Goals) {
		t.Errorf("round trip: %+v, want %+v", back, want)
	}
	if r := back.Records[0]; r.Bench != Tool || r.Params[ParamLoss] != 0 || r.Metric != report.MetricGbps || back.Header.Bed.MTU != MTU {
		t.Errorf("document record %+v, bed %+v", r, back.Header.Bed)
	}
	for _, g := range back.Goals {
		if g.Bench != Tool || !g.Required || g.Evaluated || g.Compared == "" || (g.Comparison != AtLeast && g.Comparison != Below) {
			t.Errorf("document goal %+v", g)
		}
	}
	var b strings.Builder
	if err := res.WriteTable(&b); err != nil || !strings.Contains(b.String(), "ndk-qp1") || !strings.Contains(b.String(), "not evaluated") {
		t.Errorf("WriteTable: %v\n%s", err, b.String())
	}
}
