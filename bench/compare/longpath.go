package compare

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/bench/longpath"
)

// The long-path scenarios (bench/longpath: the routed bed's router a delay line of 1
// Gbit/s and a round trip of 2 or 10 ms, MTU 1500): each flow alone, and both started
// together. Their records have params rtt_us and rate_gbit_per_s, and size 0: ndkpeer
// sends 64 KiB messages, iperf3 writes its default.
const (
	ScenarioLongPath       = "longpath"
	ScenarioLongPathShared = "longpath-shared"
)

// longPathParams are the params of a long path's records.
func longPathParams(rttMS float64, rateBps uint64) map[string]float64 {
	return map[string]float64{"rtt_us": rttMS * 1000, "rate_gbit_per_s": float64(rateBps) / 1e9}
}

// longPathSystem maps bench/longpath's systems to compare's.
var longPathSystem = map[string]string{"ndk": SystemXDPNDK, "tcp": SystemIperf3TCP}

// longPathMetric maps bench/longpath's metrics to records' metrics and units; the ones
// not here are left out (they stay in longpath's own output).
var longPathMetric = map[string][2]string{
	"gbps":        {report.MetricGbps, report.UnitGbps},
	"retransmits": {"retransmits", report.UnitCount},
	"line_drops":  {"line_drops", report.UnitCount},
	"outstanding": {"outstanding", report.UnitCount},
}

// longPathRecords turns a bench/longpath run into records: per path and operation, each
// system's Gbit/s alone (its own intervals) and shared (what the delay line forwarded of
// it), xdpndk's retransmissions, the line's drops and ndkpeer's depth alone. Runs are
// longpath's runs (reps their index).
func longPathRecords(res *longpath.Results) []report.Record {
	var out []report.Record
	for _, f := range res.Figures {
		sys, ok := longPathSystem[f.System]
		m, mok := longPathMetric[f.Metric]
		if !ok || !mok || len(f.Runs) == 0 {
			continue
		}
		scenario, note := ScenarioLongPath, "alone on the path: the tool's own one-second intervals over the window"
		if f.Scenario == "shared" {
			if f.Metric != "gbps" {
				continue
			}
			scenario, note = ScenarioLongPathShared, "both started together: what the delay line forwarded of each over the window both flowed"
		} else if f.Scenario != "alone" {
			continue
		}
		switch {
		case sys == SystemXDPNDK:
			note = fmt.Sprintf("ndkpeer %s-bw, %d KiB messages; %s", f.Op, longpath.MessageSize>>10, note)
		case f.Op == "write":
			note = "iperf3 A to B, one TCP stream (CUBIC), beside ndkpeer write-bw; " + note
		default:
			note = "iperf3 -R (B to A), one TCP stream (CUBIC), beside ndkpeer read-bw; " + note
		}
		reps := make([]int, len(f.Runs))
		for i := range reps {
			reps[i] = i
		}
		out = append(out, report.Record{Bench: Tool, Scenario: scenario, System: sys, Operation: f.Op,
			Params: longPathParams(f.RTTMS, res.Options.RateBps), Metric: m[0], Unit: m[1],
			Value: report.Median(f.Runs), Runs: slices.Clone(f.Runs), Reps: reps, Note: note})
	}
	return out
}

// longPathGoals evaluates bench/longpath's goals on every path and operation asked for:
// xdpndk alone at least GoalAlone times iperf3 alone on the same path (the median of the
// runs' ratios); sharing, each flow at least GoalShared of the line's rate. A path without
// its figures (failed) leaves its goals unevaluated.
func longPathGoals(res *longpath.Results, rtts []time.Duration, ops []string) []report.Goal {
	var rate uint64 = 1e9
	if res != nil && res.Options.RateBps > 0 {
		rate = res.Options.RateBps
	}
	find := func(rttMS float64, op, sc, sys, metric string) *longpath.Figure {
		if res == nil {
			return nil
		}
		for i := range res.Figures {
			f := &res.Figures[i]
			if f.RTTMS == rttMS && f.Op == op && f.Scenario == sc && f.System == sys && f.Metric == metric && len(f.Runs) > 0 {
				return f
			}
		}
		return nil
	}
	var out []report.Goal
	for _, rtt := range rtts {
		ms := float64(rtt) / 1e6
		p := paramsKey(longPathParams(ms, rate))
		for _, op := range ops {
			ref := func(sc, sys string) Ref { return Ref{sc, sys, op, 0, report.MetricGbps, p} }
			g := report.Goal{Bench: Tool, Scenario: ScenarioLongPath, Comparison: report.AtLeast, Limit: longpath.GoalAlone,
				Unit: report.UnitRatio, Required: true,
				Name:     fmt.Sprintf("long path %g ms, %s: xdpndk alone / iperf3 alone", ms, op),
				Compared: ref(ScenarioLongPath, SystemXDPNDK).String() + " / " + ref(ScenarioLongPath, SystemIperf3TCP).String()}
			if f := find(ms, op, "alone", "ndk", "ratio_to_tcp"); f != nil {
				g.Evaluated, g.Runs = true, slices.Clone(f.Runs)
				g.Value = report.Median(f.Runs)
				g.Met = report.Meets(g.Value, g.Comparison, g.Limit)
			}
			out = append(out, g)
			for _, sys := range []string{"ndk", "tcp"} {
				r := ref(ScenarioLongPathShared, longPathSystem[sys])
				g := report.Goal{Bench: Tool, Scenario: ScenarioLongPathShared, Comparison: report.AtLeast, Limit: longpath.GoalShared,
					Unit: report.UnitRatio, Required: true,
					Name:     fmt.Sprintf("long path %g ms, %s, sharing: %s's share of the line", ms, op, longPathSystem[sys]),
					Compared: fmt.Sprintf("%s / %g Gbit/s", r.String(), float64(rate)/1e9)}
				if f := find(ms, op, "shared", sys, "gbps"); f != nil {
					for _, v := range f.Runs {
						g.Runs = append(g.Runs, v*1e9/float64(rate))
					}
					g.Evaluated = true
					g.Value = report.Median(f.Runs) * 1e9 / float64(rate)
					g.Met = report.Meets(g.Value, g.Comparison, g.Limit)
				}
				out = append(out, g)
			}
		}
	}
	return out
}

// longPathNotes are the header notes of a long-path run: its paths as ping measured them,
// and its own notes (a failure's as a FAILED note).
func longPathNotes(res *longpath.Results) []string {
	if res == nil {
		return nil
	}
	var out []string
	for _, p := range res.Paths {
		out = append(out, fmt.Sprintf("long path %g ms: ping p50 %.3g ms, p99 %.3g ms; the delay line's queue %d B, %d packets dropped by it over every run",
			p.RTTMS, p.PingP50MS, p.PingP99MS, p.QueueBytes, p.LineDropped))
	}
	for _, n := range res.Notes {
		if rest, ok := strings.CutPrefix(n, "failed: "); ok {
			out = append(out, report.FailedNote(errors.New("long path "+rest)))
			continue
		}
		out = append(out, "long path: "+n)
	}
	return out
}
