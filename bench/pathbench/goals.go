package pathbench

import (
	"fmt"
	"math"
	"slices"

	"github.com/xdpndk/xdpndk/bench/internal/report"
)

// Goal is one of the targets on one figure. Evaluate fills in its outcome.
type Goal struct {
	// Name says what is compared, for people.
	Name string
	// Figure is the record the goal is about.
	Figure Ref
	// Cmp is ">=" (the value must reach Limit) or "<" (it must stay below).
	Cmp   string
	Limit float64

	// Evaluated is false when the figure is missing (a failed measurement).
	Evaluated bool
	// Value is the figure's value.
	Value float64
	// Met says whether Value satisfies Cmp Limit.
	Met bool
}

// Comparisons of a Goal.
const (
	AtLeast = report.AtLeast
	Below   = report.Below
)

// pct converts a probability to the percent the records carry, rounded so that 0.01
// reads 1.
func pct(p float64) float64 { return float64(int64(p*100*1e6+0.5)) / 1e6 }

// Goals returns the goals for the scenarios of o: the single QP's share of the
// bottleneck >= 0.9; two QPs' Jain index >= 0.95; the QP's and TCP's shares each >= 0.25;
// goodput under router loss >= 0.7 x lossless; under XDP loss >= 0.7 x lossless at 1% and
// >= 0.3 x at 10% (other rates: reported, with the 1% goal's limit below 5%, else the
// 10% goal's), and the share of retransmissions caused by the timer below 0.1 at each.
func Goals(o Options) []Goal {
	var gs []Goal
	w := func(sc, sys string, loss float64, metric string) Ref {
		return Ref{sc, sys, OpWrite, WriteSize, loss, metric}
	}
	if o.has(ScenarioSingle) {
		gs = append(gs, Goal{Name: "single: QP goodput / bottleneck rate", Figure: w(ScenarioSingle, SystemNDK, 0, MetricShare), Cmp: AtLeast, Limit: 0.9})
	}
	if o.has(ScenarioTwo) {
		gs = append(gs, Goal{Name: "two: Jain's index of the two QPs, second half", Figure: w(ScenarioTwo, SystemAll, 0, MetricJain), Cmp: AtLeast, Limit: 0.95})
	}
	if o.has(ScenarioTCP) {
		gs = append(gs,
			Goal{Name: "tcp: QP goodput / bottleneck rate", Figure: w(ScenarioTCP, SystemNDK, 0, MetricShare), Cmp: AtLeast, Limit: 0.25},
			Goal{Name: "tcp: TCP goodput / bottleneck rate", Figure: Ref{ScenarioTCP, SystemTCP, OpTCP, 0, 0, MetricShare}, Cmp: AtLeast, Limit: 0.25})
	}
	if o.has(ScenarioLoss) {
		l := pct(o.RouterLoss)
		gs = append(gs, Goal{Name: fmt.Sprintf("loss: goodput at %g%% router loss / lossless", l), Figure: w(ScenarioLoss, SystemNDK, l, MetricRatio), Cmp: AtLeast, Limit: 0.7})
	}
	if o.has(ScenarioXDP) {
		for _, p := range o.XDPLosses {
			l := pct(p)
			limit := 0.7
			if l >= 5 {
				limit = 0.3
			}
			gs = append(gs,
				Goal{Name: fmt.Sprintf("xdp: goodput at %g%% XDP loss / lossless", l), Figure: w(ScenarioXDP, SystemNDK, l, MetricRatio), Cmp: AtLeast, Limit: limit},
				Goal{Name: fmt.Sprintf("xdp: timer retransmissions / retransmissions at %g%% XDP loss", l), Figure: w(ScenarioXDP, SystemNDK, l, MetricRTOShare), Cmp: Below, Limit: 0.1})
		}
	}
	return gs
}

// Evaluate returns goals evaluated against records.
func Evaluate(goals []Goal, res *Results) []Goal {
	out := slices.Clone(goals)
	for i := range out {
		g := &out[i]
		g.Evaluated, g.Value, g.Met = false, 0, false
		rec := res.Find(g.Figure)
		if rec == nil || len(rec.Runs) == 0 {
			continue
		}
		g.Evaluated, g.Value = true, rec.Value
		switch g.Cmp {
		case AtLeast:
			g.Met = g.Value >= g.Limit
		case Below:
			g.Met = g.Value < g.Limit
		}
	}
	return out
}

// Verdict is "met", "NOT met", or "not evaluated".
func (g Goal) Verdict() string {
	return report.Verdict(g.Evaluated, g.Met)
}

// Line formats the goal for the table: name, value, target, verdict.
func (g Goal) Line() string {
	if !g.Evaluated {
		return fmt.Sprintf("%-52s %7s  %-2s %-5g  not evaluated (the figure is missing)", g.Name, "-", g.Cmp, g.Limit)
	}
	return fmt.Sprintf("%-52s %7.3f  %-2s %-5g  %s", g.Name, g.Value, g.Cmp, g.Limit, g.Verdict())
}

// Jain returns Jain's fairness index of x: (sum x)^2 / (n * sum x^2), 1 when all are
// equal, 1/n when one has everything; NaN for no values or all zero.
func Jain(x []float64) float64 {
	var s, s2 float64
	for _, v := range x {
		s += v
		s2 += v * v
	}
	if len(x) == 0 || s2 == 0 {
		return math.NaN()
	}
	return s * s / (float64(len(x)) * s2)
}
