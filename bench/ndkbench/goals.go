package ndkbench

import (
	"fmt"
	"slices"
	"strings"

	"github.com/xdpndk/xdpndk/bench/internal/report"
)

// Goal is a target on the ratio of an ndk figure to a baseline figure measured in the same
// run. Evaluate fills in its outcome.
type Goal struct {
	// Name says what is compared, for people.
	Name string
	// Numerator is the ndk figure, Denominator the baseline figure.
	Numerator   Ref
	Denominator Ref
	// Cmp is "<=" (the ratio must not exceed Limit) or ">=" (must reach it).
	Cmp   string
	Limit float64
	// Info marks a comparison reported for context, not one of the goals; Reason says why
	// it is not required.
	Info   bool
	Reason string

	// Evaluated is false when a figure is missing (a failed or skipped measurement).
	Evaluated bool
	// Ratio is the median of Runs: the ratios of the repetitions that have both figures,
	// each taken within one repetition.
	Ratio float64
	Runs  []float64
	// Reps holds the repetition (0-based) of each value of Runs.
	Reps []int
	// Met says whether Ratio satisfies Cmp Limit.
	Met bool
}

// Comparisons of a Goal.
const (
	AtMost  = report.AtMost
	AtLeast = report.AtLeast
)

// report returns g as a goal of the shared results schema.
func (g Goal) report() report.Goal {
	var runs []float64
	if len(g.Runs) > 0 {
		runs = slices.Clone(g.Runs)
	}
	return report.Goal{
		Bench: Tool, Scenario: g.Numerator.Benchmark, Name: g.Name,
		Compared:   g.Numerator.String() + " / " + g.Denominator.String(),
		Comparison: g.Cmp, Limit: g.Limit, Unit: report.UnitRatio,
		Evaluated: g.Evaluated, Value: g.Ratio, Runs: runs, Met: g.Met,
		Required: !g.Info, Reason: g.Reason,
	}
}

// DefaultGoals returns the goals of the verbs benchmark, then the comparisons reported for
// context: ping-pong p50 at most 1.5 × the raw link's and 0.4 × kernel TCP's; the 64-byte
// Write message rate at least 0.7 × the raw link's 64-byte packets per second; the 64 KiB
// Write goodput (UMEM buffers) at least 0.85 × the raw link's multi-buffer throughput at
// MTU 9000; ping-pong p99 while unresolvable peers are being resolved at most 2 × the
// p99 without (next-hop resolution never waits on the engine); the ping-pong p50 with both
// applications waiting in CQ.Wait at most 1.5 × the one with both polling (Wait polls for
// Options.Spin before it sleeps: while results come quickly it is polling); an idle pair
// (two adapters with a connected QP each, one application blocked in CQ.Wait) at most 1%
// of one core (CPU seconds / wall seconds: nothing spins while nothing happens); 64-byte
// Writes over adapters of two engines at most 1.1 × the CPU per message of one engine
// (docs/DATAPATH.md, "Several engines"); the 64-byte Write message rate over
// Options.Scale (1024) connected QPs at least 0.8 × the rate of one of them, measured on
// the same adapters (a round's cost follows the QPs with work, not the QPs connected).
func DefaultGoals() []Goal {
	inline := SystemNDK(ModeInline)
	pp := Ref{BenchPingPong, inline, OpSendRecv, MsgSize, MetricP50}
	rawPP := Ref{BenchPingPong, SystemRaw, OpRTT, 64, MetricP50}
	tcpPP := Ref{BenchPingPong, SystemTCP, OpRTT, MsgSize, MetricP50}
	rawPPS := Ref{BenchOneWay, SystemRaw, OpSend, 64, MetricPPS}
	rawGbps := Ref{BenchOneWay, SystemRaw, OpSend, 9000, MetricGbps}
	rate := func(op string) Ref { return Ref{BenchMsgRate, inline, op, MsgSize, MetricOps} }
	gput := func(op string) Ref { return Ref{BenchGoodput, inline, op, GoodputSize, MetricGbps} }
	return []Goal{
		{Name: "ndk ping-pong p50 / raw-xdp ping-pong p50", Numerator: pp, Denominator: rawPP, Cmp: AtMost, Limit: 1.5},
		{Name: "ndk ping-pong p50 / kernel-tcp ping-pong p50", Numerator: pp, Denominator: tcpPP, Cmp: AtMost, Limit: 0.4},
		{Name: "ndk 64 B Write op/s / raw-xdp 64 B one-way pkt/s", Numerator: rate(OpWrite), Denominator: rawPPS, Cmp: AtLeast, Limit: 0.7},
		{Name: "ndk 64 KiB Write goodput (UMEM) / raw-xdp 9000 B one-way Gbit/s", Numerator: gput(OpWriteUMEM), Denominator: rawGbps, Cmp: AtLeast, Limit: 0.85},
		{Name: "ndk ping-pong p99, unresolved peers pending / without", Numerator: Ref{BenchPingPong, inline, OpSendRecvUnresolved, MsgSize, MetricP99},
			Denominator: Ref{BenchPingPong, inline, OpSendRecv, MsgSize, MetricP99}, Cmp: AtMost, Limit: 2},
		{Name: "ndk ping-pong p50, both waiting in CQ.Wait / both polling", Numerator: Ref{BenchPingPong, inline, OpSendRecvWait, MsgSize, MetricP50},
			Denominator: pp, Cmp: AtMost, Limit: 1.5},
		{Name: "ndk idle pair, B in CQ.Wait: process CPU s / wall s", Numerator: Ref{BenchIdle, inline, OpIdleWait, 0, MetricCPU},
			Denominator: Ref{BenchIdle, inline, OpIdleWait, 0, MetricWall}, Cmp: AtMost, Limit: 0.01},
		{Name: "ndk 2 engines / 1 engine per adapter: CPU per 64 B Write", Numerator: Ref{BenchEngines, SystemEngines(2), OpWriteSilent, MsgSize, MetricCPUOp},
			Denominator: Ref{BenchEngines, SystemEngines(1), OpWriteSilent, MsgSize, MetricCPUOp}, Cmp: AtMost, Limit: 1.1},
		{Name: "ndk 2 engines / 1 engine per adapter: 64 B Writes per second", Numerator: Ref{BenchEngines, SystemEngines(2), OpWriteSilent, MsgSize, MetricOps},
			Denominator: Ref{BenchEngines, SystemEngines(1), OpWriteSilent, MsgSize, MetricOps}, Cmp: AtLeast, Limit: 1, Info: true,
			Reason: "the bed's two CPUs carry both hosts: a second engine per adapter has no core of its own to add rate with; the goal is on its cost"},
		{Name: "ndk 64 B Write op/s over all scale QPs / on one of them", Numerator: Ref{BenchScale, inline, OpWriteAllQPs, MsgSize, MetricOps},
			Denominator: Ref{BenchScale, inline, OpWriteOneQP, MsgSize, MetricOps}, Cmp: AtLeast, Limit: 0.8},
		{Name: "ndk 64 B Write op/s, silent / raw-xdp 64 B one-way pkt/s", Numerator: rate(OpWriteSilent), Denominator: rawPPS, Cmp: AtLeast, Limit: 0.7, Info: true,
			Reason: "the goal is on signaled Writes; the silent variant shows what fewer completions buy"},
		{Name: "ndk 64 KiB Write goodput (Go heap) / raw-xdp 9000 B Gbit/s", Numerator: gput(OpWriteHeap), Denominator: rawGbps, Cmp: AtLeast, Limit: 0.85, Info: true,
			Reason: "the goal is on the zero-copy path (UMEM sources); Go heap sources are copied into the UMEM"},
		{Name: "ndk idle, all scale QP pairs connected, B in CQ.Wait: CPU s / wall s", Numerator: Ref{BenchIdle, inline, OpIdleWaitScale, 0, MetricCPU},
			Denominator: Ref{BenchIdle, inline, OpIdleWaitScale, 0, MetricWall}, Cmp: AtMost, Limit: 0.02, Info: true,
			Reason: "the idle goal is on one QP pair; with many, each idle QP sends a keepalive probe every KeepAlive/3 (10 s) and answers its peer's"},
		{Name: "ndk-busy ping-pong p50 / raw-xdp ping-pong p50", Numerator: Ref{BenchPingPong, SystemNDK(ModeBusy), OpSendRecv, MsgSize, MetricP50}, Denominator: rawPP, Cmp: AtMost, Limit: 1.5, Info: true,
			Reason: "the goal is on inline progress (the default); busy progress runs an engine goroutine per adapter that needs a core of its own, beside the application's loop, and the bed has two CPUs for both hosts"},
		{Name: "ndk-adaptive ping-pong p50 / raw-xdp ping-pong p50", Numerator: Ref{BenchPingPong, SystemNDK(ModeAdaptive), OpSendRecv, MsgSize, MetricP50}, Denominator: rawPP, Cmp: AtMost, Limit: 1.5, Info: true,
			Reason: "the goal is on inline progress (the default); adaptive progress pays a goroutine hand-off per completion so that an idle adapter costs no CPU"},
	}
}

// Evaluate returns goals evaluated against records: for every repetition that has both
// figures, the ratio numerator/denominator of that repetition; the goal's ratio is their
// median. A goal without a common repetition (or with a zero denominator) stays
// unevaluated.
func Evaluate(goals []Goal, records []Record) []Goal {
	out := slices.Clone(goals)
	for i := range out {
		g := &out[i]
		g.Evaluated, g.Ratio, g.Runs, g.Reps, g.Met = false, 0, []float64{}, []int{}, false
		num, den := findRecord(records, g.Numerator), findRecord(records, g.Denominator)
		if num == nil || den == nil {
			continue
		}
		for j, rep := range num.Reps {
			k := slices.Index(den.Reps, rep)
			if k < 0 || j >= len(num.Runs) || k >= len(den.Runs) || den.Runs[k] == 0 {
				continue
			}
			g.Runs = append(g.Runs, num.Runs[j]/den.Runs[k])
			g.Reps = append(g.Reps, rep)
		}
		if len(g.Runs) == 0 {
			continue
		}
		g.Evaluated = true
		g.Ratio = report.Median(g.Runs)
		switch g.Cmp {
		case AtMost:
			g.Met = g.Ratio <= g.Limit
		case AtLeast:
			g.Met = g.Ratio >= g.Limit
		}
	}
	return out
}

// Verdict is "met", "NOT met", or "not evaluated".
func (g Goal) Verdict() string {
	return report.Verdict(g.Evaluated, g.Met)
}

// Line formats the goal for the table: name, ratio, target, verdict, per-repetition ratios.
func (g Goal) Line() string {
	kind := "goal"
	if g.Info {
		kind = "info"
	}
	if !g.Evaluated {
		return fmt.Sprintf("%-4s %-66s %7s  %s %-5g  not evaluated (a figure is missing)", kind, g.Name, "-", g.Cmp, g.Limit)
	}
	runs := make([]string, len(g.Runs))
	for i, v := range g.Runs {
		runs[i] = fmt.Sprintf("%.2f", v)
	}
	verdict := g.Verdict()
	if g.Info {
		verdict = strings.ToLower(verdict)
	}
	return fmt.Sprintf("%-4s %-66s %7.3f  %s %-5g  %-8s (runs %s)", kind, g.Name, g.Ratio, g.Cmp, g.Limit, verdict, strings.Join(runs, " "))
}
