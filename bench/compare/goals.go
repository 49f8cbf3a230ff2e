package compare

import (
	"slices"
	"strings"

	"github.com/xdpndk/xdpndk/bench/internal/report"
)

// Goal is a target on the ratio of a figure to a baseline measured in the same run. The
// baseline is one figure, or the best of several (the lowest with Best "min", the highest
// with "max"), chosen in each repetition.
type Goal struct {
	// Name says what is compared, for people; Scenario is the scenario it is about.
	Name     string
	Scenario string
	// Numerator is xdpndk's figure, Denominator the baseline's (or the baselines', the
	// best of which counts in each repetition: the lowest with Best "min", the highest
	// with "max").
	Numerator   Ref
	Denominator []Ref
	Best        string
	// Cmp (report.AtMost, AtLeast, ...) and Limit: the ratio must satisfy Cmp Limit.
	Cmp   string
	Limit float64
	// Required is false for a comparison reported for context; Reason then says why it is
	// not required.
	Required bool
	Reason   string
	// Note is said beside the outcome.
	Note string
}

// Reasons beside the goals.
const (
	// ReasonTCP is why the message-rate and bulk ratios against kernel TCP are reported,
	// not required.
	ReasonTCP = "TCP coalesces small messages into one segment and sends 64 KiB GSO super-packets across veth; AF_XDP copy mode pays per frame"
	// NoteMeans is the note of the goal against libfabric.
	NoteMeans = "fi_pingpong prints only the mean transfer time (usec/xfer, half the round trip), so the goal, named on p50, compares mean round trips"
)

// DefaultGoals returns the goals of the comparison, each evaluated whether met or not:
// xdpndk's 64 B round trip at most 0.25 × sockperf's (blocking), 0.6 × sockperf's with
// polling, 0.5 × the better libfabric provider's; its CPU per 64 B message at most 0.5 ×
// kernel TCP's (qperf tcp_bw -m 64, both processes); and, reported with the reason they are
// not required, the message rate and bulk ratios against qperf tcp_bw and iperf3, and the
// same CPU ratio in event mode.
func DefaultGoals() []Goal {
	pp := func(sys, metric string) Ref { return Ref{ScenarioPingPong, sys, OpPingPong, PingSize, metric, ""} }
	stream := func(sys, op string, size int, metric string) Ref {
		return Ref{ScenarioStream, sys, op, size, metric, ""}
	}
	return []Goal{
		{Name: "xdpndk 64 B RTT p50 / sockperf UDP ping-pong p50 (blocking)", Scenario: ScenarioPingPong,
			Numerator: pp(SystemXDPNDK, report.MetricRTTP50), Denominator: []Ref{pp(SystemSockperfUDP, report.MetricRTTP50)},
			Cmp: report.AtMost, Limit: 0.25, Required: true},
		{Name: "xdpndk 64 B RTT p50 / sockperf UDP ping-pong p50 (busy polling)", Scenario: ScenarioPingPong,
			Numerator: pp(SystemXDPNDK, report.MetricRTTP50), Denominator: []Ref{pp(SystemSockperfUDPPoll, report.MetricRTTP50)},
			Cmp: report.AtMost, Limit: 0.6, Required: true},
		{Name: "xdpndk 64 B RTT / best libfabric provider's fi_pingpong RTT (means)", Scenario: ScenarioPingPong,
			Numerator:   pp(SystemXDPNDK, report.MetricRTTMean),
			Denominator: []Ref{pp(SystemFabricTCP, report.MetricRTTMean), pp(SystemFabricUDPRxd, report.MetricRTTMean)}, Best: "min",
			Cmp: report.AtMost, Limit: 0.5, Required: true, Note: NoteMeans},
		{Name: "xdpndk CPU per 64 B Write / qperf tcp_bw -m 64 CPU per message (both processes)", Scenario: ScenarioStream,
			Numerator: stream(SystemXDPNDK, OpWrite, 64, report.MetricCPUMsg), Denominator: []Ref{stream(SystemQperfTCP, OpSend, 64, report.MetricCPUMsg)},
			Cmp: report.AtMost, Limit: 0.5, Required: true, Note: "xdpndk polls: a whole core per side whatever the rate"},
		{Name: "xdpndk-events CPU per 64 B Write / qperf tcp_bw -m 64 CPU per message (both processes)", Scenario: ScenarioStream,
			Numerator: stream(SystemXDPNDKEvents, OpWrite, 64, report.MetricCPUMsg), Denominator: []Ref{stream(SystemQperfTCP, OpSend, 64, report.MetricCPUMsg)},
			Cmp: report.AtMost, Limit: 0.5, Reason: "the goal is on the default, polling; event mode is shown beside it"},
		{Name: "xdpndk 64 B Write msg/s / qperf tcp_bw -m 64 msg/s", Scenario: ScenarioStream,
			Numerator: stream(SystemXDPNDK, OpWrite, 64, report.MetricMsgRate), Denominator: []Ref{stream(SystemQperfTCP, OpSend, 64, report.MetricMsgRate)},
			Cmp: report.AtLeast, Limit: 1, Reason: ReasonTCP},
		{Name: "xdpndk 64 KiB Write Gbit/s / iperf3 -l 64K Gbit/s", Scenario: ScenarioStream,
			Numerator: stream(SystemXDPNDK, OpWrite, 64<<10, report.MetricGbps), Denominator: []Ref{stream(SystemIperf3TCP, OpSend, 64<<10, report.MetricGbps)},
			Cmp: report.AtLeast, Limit: 1, Reason: ReasonTCP},
		{Name: "xdpndk 64 KiB Write Gbit/s / qperf tcp_bw -m 64K Gbit/s", Scenario: ScenarioStream,
			Numerator: stream(SystemXDPNDK, OpWrite, 64<<10, report.MetricGbps), Denominator: []Ref{stream(SystemQperfTCP, OpSend, 64<<10, report.MetricGbps)},
			Cmp: report.AtLeast, Limit: 1, Reason: ReasonTCP},
	}
}

// Evaluate returns goals evaluated against records: in every repetition that has the
// numerator and a denominator, their ratio (the best denominator of that repetition); the
// value is the median of those ratios. A goal without such a repetition, or whose
// denominator is zero, is not evaluated.
func Evaluate(goals []Goal, records []report.Record) []report.Goal {
	out := make([]report.Goal, 0, len(goals))
	for _, g := range goals {
		rg := report.Goal{Bench: Tool, Scenario: g.Scenario, Name: g.Name, Comparison: g.Cmp, Limit: g.Limit,
			Unit: report.UnitRatio, Required: g.Required, Reason: g.Reason, Note: g.Note}
		var den []string
		for _, d := range g.Denominator {
			den = append(den, d.String())
		}
		rg.Compared = g.Numerator.String() + " / "
		if len(den) > 1 {
			rg.Compared += g.Best + "(" + strings.Join(den, ", ") + ")"
		} else {
			rg.Compared += strings.Join(den, "")
		}
		num := findRecord(records, g.Numerator)
		var runs []float64
		if num != nil {
			for _, rep := range num.Reps {
				n, _ := valueAt(num, rep)
				d, ok := bestAt(records, g.Denominator, g.Best, rep)
				if !ok || d == 0 {
					continue
				}
				runs = append(runs, n/d)
			}
		}
		if len(runs) > 0 {
			rg.Evaluated, rg.Runs = true, runs
			rg.Value = report.Median(runs)
			rg.Met = report.Meets(rg.Value, g.Cmp, g.Limit)
		}
		out = append(out, rg)
	}
	return out
}

// bestAt returns the best of the refs' values in repetition rep: the lowest with best
// "min", the highest with "max" (the only one for a single ref).
func bestAt(records []report.Record, refs []Ref, best string, rep int) (float64, bool) {
	var vals []float64
	for _, ref := range refs {
		if v, ok := valueAt(findRecord(records, ref), rep); ok {
			vals = append(vals, v)
		}
	}
	switch {
	case len(vals) == 0:
		return 0, false
	case best == "max":
		return slices.Max(vals), true
	}
	return slices.Min(vals), true
}
