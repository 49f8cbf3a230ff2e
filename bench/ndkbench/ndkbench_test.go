package ndkbench

import (
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/xdpndk/xdpndk/bench/internal/report"
)

// rec builds a record with values per repetition.
func rec(ref Ref, reps []int, runs ...float64) Record {
	return Record{
		Subject: report.Subject{Benchmark: ref.Benchmark, System: ref.System, Op: ref.Op, Size: ref.Size},
		Figure:  report.NewFigure(ref.Metric, "x", runs),
		Reps:    reps,
	}
}

func TestEvaluate(t *testing.T) {
	num := Ref{BenchPingPong, SystemNDK(ModeInline), OpSendRecv, 64, MetricP50}
	den := Ref{BenchPingPong, SystemRaw, OpRTT, 64, MetricP50}
	goals := []Goal{
		{Name: "at most", Numerator: num, Denominator: den, Cmp: AtMost, Limit: 1.5},
		{Name: "at least", Numerator: num, Denominator: den, Cmp: AtLeast, Limit: 1.5},
		{Name: "missing", Numerator: num, Denominator: Ref{BenchOneWay, SystemRaw, OpSend, 64, MetricPPS}, Cmp: AtLeast, Limit: 1},
	}
	// Repetition 1 failed for the numerator: ratios pair repetitions 0 and 2 only.
	records := []Record{
		rec(num, []int{0, 2}, 6, 8),
		rec(den, []int{0, 1, 2}, 4, 100, 4),
	}
	got := Evaluate(goals, records)
	if !got[0].Evaluated || !reflect.DeepEqual(got[0].Runs, []float64{1.5, 2}) || !reflect.DeepEqual(got[0].Reps, []int{0, 2}) {
		t.Fatalf("goal 0 = %+v", got[0])
	}
	if got[0].Ratio != 1.75 || got[0].Met || got[0].Verdict() != "NOT met" {
		t.Errorf("goal 0: ratio %v met %v", got[0].Ratio, got[0].Met)
	}
	if !got[1].Met || got[1].Verdict() != "met" {
		t.Errorf("goal 1: %+v", got[1])
	}
	if got[2].Evaluated || got[2].Verdict() != "not evaluated" || !strings.Contains(got[2].Line(), "not evaluated") {
		t.Errorf("goal 2: %+v", got[2])
	}
	if goals[0].Evaluated {
		t.Error("Evaluate modified its input")
	}
	// Exactly at the limit counts as met for both comparisons.
	at := Evaluate([]Goal{{Numerator: num, Denominator: den, Cmp: AtMost, Limit: 2}, {Numerator: num, Denominator: den, Cmp: AtLeast, Limit: 2}},
		[]Record{rec(num, []int{0}, 8), rec(den, []int{0}, 4)})
	if !at[0].Met || !at[1].Met {
		t.Errorf("ratio at the limit: %+v", at)
	}
	// A zero denominator is left out.
	z := Evaluate(goals[:1], []Record{rec(num, []int{0}, 8), rec(den, []int{0}, 0)})
	if z[0].Evaluated {
		t.Errorf("zero denominator evaluated: %+v", z[0])
	}
}

func TestDefaultGoals(t *testing.T) {
	goals := DefaultGoals()
	n := 0
	for _, g := range goals {
		if g.Name == "" || (g.Cmp != AtMost && g.Cmp != AtLeast) || g.Limit <= 0 {
			t.Errorf("malformed goal %+v", g)
		}
		if !g.Info {
			n++
		}
	}
	if n != 9 {
		t.Errorf("%d goals, want 9", n)
	}
}

func TestCollectorAndJSON(t *testing.T) {
	c := newCollector()
	pp := Ref{BenchPingPong, SystemNDK(ModeInline), OpSendRecv, MsgSize, MetricP50}
	c.addLatency(BenchPingPong, SystemNDK(ModeInline), OpSendRecv, MsgSize, 0, LatencyStats{N: 10, P50: 3, P90: 4, P99: 5, Mean: 3.5}, 0)
	c.addLatency(BenchPingPong, SystemNDK(ModeInline), OpSendRecv, MsgSize, 1, LatencyStats{N: 10, P50: 1, P90: 4, P99: 5, Mean: 3.5}, 0)
	c.addLatency(BenchPingPong, SystemNDK(ModeInline), OpSendRecv, MsgSize, 2, LatencyStats{N: 10, P50: 2, P90: 4, P99: 5, Mean: 3.5}, 0)
	c.add(Ref{BenchPingPong, SystemRaw, OpRTT, 64, MetricP50}, UnitMicros, 0, 2)
	c.add(Ref{BenchPingPong, SystemRaw, OpRTT, 64, MetricP50}, UnitMicros, 1, 1)
	c.add(Ref{BenchPingPong, SystemRaw, OpRTT, 64, MetricP50}, UnitMicros, 2, 0.5)
	c.add(Ref{BenchMsgRate, SystemNDK(ModeInline), OpWrite, MsgSize, MetricOps}, UnitPerSec, 0, math.Inf(1)) // dropped
	res := &Results{Header: Header{Host: report.ThisHost(), MTU: 9000, Modes: map[string]string{"x": "y"},
		Config: Config{Runs: 3}, Notes: []string{"n"}}, Records: c.records()}
	res.Header.Goals = Evaluate(DefaultGoals(), res.Records)
	if r := res.Find(pp); r == nil || r.Value != 2 || !reflect.DeepEqual(r.Reps, []int{0, 1, 2}) {
		t.Fatalf("Find = %+v", r)
	}
	if res.Find(Ref{BenchMsgRate, SystemNDK(ModeInline), OpWrite, MsgSize, MetricOps}) != nil {
		t.Error("a non-finite value was recorded")
	}
	g := res.Header.Goals[0]
	if !g.Evaluated || !reflect.DeepEqual(g.Runs, []float64{1.5, 1, 4}) || g.Ratio != 1.5 || !g.Met {
		t.Errorf("goal 0 = %+v", g)
	}

	path := filepath.Join(t.TempDir(), "out", "ndk.json")
	if err := res.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := res.Document(); !reflect.DeepEqual(back, want) {
		t.Errorf("JSON round trip:\n got %+v\nwant %+v", back, want)
	}
	if len(back.Goals) != len(DefaultGoals()) || back.Header.Tool != Tool || back.Header.Bed.MTU != 9000 {
		t.Errorf("document: %d goals, tool %q, bed %+v", len(back.Goals), back.Header.Tool, back.Header.Bed)
	}
	dg := back.Goals[0]
	if dg.Bench != Tool || !dg.Required || !dg.Evaluated || dg.Value != 1.5 || !dg.Met || dg.Comparison != AtMost ||
		!reflect.DeepEqual(dg.Runs, []float64{1.5, 1, 4}) || !strings.Contains(dg.Compared, " / ") {
		t.Errorf("document goal 0 = %+v", dg)
	}
	for _, g := range back.Goals {
		if !g.Required && g.Reason == "" {
			t.Errorf("reported goal %q has no reason", g.Name)
		}
	}
	if r := back.Find(report.Key{Bench: Tool, Scenario: BenchPingPong, System: SystemNDK(ModeInline), Operation: OpSendRecv, Size: MsgSize, Metric: MetricP50}); r == nil || !reflect.DeepEqual(r.Reps, []int{0, 1, 2}) {
		t.Errorf("document record = %+v", r)
	}

	var b strings.Builder
	if err := res.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"Ping-pong", SystemNDK(ModeInline), SystemRaw, "Goals", "met", "not evaluated"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, b.String())
		}
	}
}

func TestOptions(t *testing.T) {
	for _, o := range []Options{DefaultOptions(), QuickOptions()} {
		if _, err := o.normalize(); err != nil {
			t.Errorf("normalize(%+v): %v", o, err)
		}
	}
	o := DefaultOptions()
	o.Modes = []string{ModeAdaptive, ModeInline}
	n, err := o.normalize()
	if err != nil || !reflect.DeepEqual(n.Modes, []string{ModeInline, ModeAdaptive}) {
		t.Errorf("modes %v, %v", n.Modes, err)
	}
	for _, bad := range []func(*Options){
		func(o *Options) { o.Runs = 0 },
		func(o *Options) { o.Modes = []string{"turbo"} },
		func(o *Options) { o.Modes = nil },
		func(o *Options) { o.PingPongN = 1 },
		func(o *Options) { o.Duration = 0 },
		func(o *Options) { o.Outstanding = 0 },
		func(o *Options) { o.SignalEvery = o.Outstanding + 1 },
		func(o *Options) { o.GoodputOutstanding = 65 },
		func(o *Options) { o.Bound = 0 },
		func(o *Options) { o.Idle = 0 },
		func(o *Options) { o.Scale = MaxScale + 1 },
		func(o *Options) { o.ScaleOutstanding = 0 },
		func(o *Options) { o.ScaleIdle = 0 },
		func(o *Options) { o.Scale, o.ScaleOnly = 0, true },
	} {
		o := DefaultOptions()
		bad(&o)
		if _, err := o.normalize(); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%+v: err %v, want ErrInvalidOptions", o, err)
		}
	}
	if got := ParseModes(" inline, all ,"); !reflect.DeepEqual(got, []string{ModeInline, ModeInline, ModeBusy, ModeAdaptive}) {
		t.Errorf("ParseModes = %v", got)
	}
}
