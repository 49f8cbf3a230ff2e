package transportbench

import (
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/transport"
)

// Scenario names (the -scenarios flag of the command).
const (
	// ScenarioLoss is Run: goodput under random loss on one short path (the older benchmark).
	ScenarioLoss = "loss"
	// ScenarioRTT is one QP at each RTT, lossless and at 1 % loss, selective and go-back-N.
	ScenarioRTT = "rtt"
	// ScenarioFairness is 2 and 8 QPs with staggered starts on one bottleneck.
	ScenarioFairness = "fairness"
	// ScenarioIncast is 16 senders into one receiver at once.
	ScenarioIncast = "incast"
)

// AllScenarios lists the scenarios in the order they run.
var AllScenarios = []string{ScenarioLoss, ScenarioRTT, ScenarioFairness, ScenarioIncast}

// ParseScenarios parses a comma-separated list of scenarios; "all" means AllScenarios.
func ParseScenarios(s string) []string { return report.ParseList(s, AllScenarios) }

// ScenarioOptions configures RunScenarios.
type ScenarioOptions struct {
	Scenarios []string // from AllScenarios (ScenarioLoss is run by Run, not here)
	Seeds     []uint64
	Bandwidth int64 // the bottleneck, bit/s
	// MaxPayload and MsgSize are the datagram and Write sizes.
	MaxPayload, MsgSize int
	// RTTs of the rtt scenario; FairRTTs of the fairness scenario; IncastRTT of incast.
	RTTs, FairRTTs []time.Duration
	IncastRTT      time.Duration
	// FairFlows are the QP counts of the fairness scenario; IncastSenders incast's.
	FairFlows     []int
	IncastSenders int
	// Loss is the lossy case of the rtt scenario.
	Loss float64
	// Quick shortens every measured window (see Scenario durations in the package doc).
	Quick bool
	// Engine, if not nil, adjusts every engine's configuration (diagnosis overrides).
	Engine func(*transport.Config)
	// Overrides describes Engine for the header ("" for none).
	Overrides string
	Parallel  int
	MaxReal   time.Duration
	Progress  io.Writer
}

// DefaultScenarioOptions returns the scenarios: 10 Gbit/s, 1500-byte MTU, 64 KiB
// Writes; RTTs 10 µs, 100 µs, 1 ms, 10 ms at 0 and 1 % loss; 2 and 8 QPs at 100 µs and
// 1 ms; 16:1 incast at 100 µs; one seed.
func DefaultScenarioOptions() ScenarioOptions {
	return ScenarioOptions{
		Scenarios:  []string{ScenarioRTT, ScenarioFairness, ScenarioIncast},
		Seeds:      []uint64{1},
		Bandwidth:  10_000_000_000,
		MaxPayload: 1472, MsgSize: 64 << 10,
		RTTs:      []time.Duration{10 * time.Microsecond, 100 * time.Microsecond, time.Millisecond, 10 * time.Millisecond},
		FairRTTs:  []time.Duration{100 * time.Microsecond, time.Millisecond},
		IncastRTT: 100 * time.Microsecond, FairFlows: []int{2, 8}, IncastSenders: 16,
		Loss: 0.01,
	}
}

// scenarioRun is one FlowSpec of a scenario, with what it is in the scenario.
type scenarioRun struct {
	scenario string
	spec     FlowSpec
}

// specs returns every run of o.
func (o *ScenarioOptions) specs() []scenarioRun {
	base := func(n int, rtt time.Duration) FlowSpec {
		return FlowSpec{
			Senders: n, RTT: rtt, Mode: ModeSelective, Bandwidth: o.Bandwidth,
			QueueBytes: QueueFor(o.Bandwidth, rtt), MaxPayload: o.MaxPayload, MsgSize: o.MsgSize,
			Outstanding: OutstandingFor(o.Bandwidth, rtt, o.MsgSize),
			Window:      WindowFor(o.Bandwidth, rtt, o.MaxPayload),
			Sample:      10 * rtt, Engine: o.Engine, MaxReal: o.MaxReal,
		}
	}
	long := func(floor time.Duration, rtts int, rtt time.Duration) time.Duration {
		return max(floor, time.Duration(rtts)*rtt)
	}
	var out []scenarioRun
	for _, sc := range o.Scenarios {
		for _, seed := range o.Seeds {
			switch sc {
			case ScenarioRTT:
				for _, rtt := range o.RTTs {
					for _, loss := range []float64{0, o.Loss} {
						for _, m := range AllModes {
							s := base(1, rtt)
							s.Seed, s.Loss, s.Mode = seed, loss, m
							s.Warmup, s.Measure = long(20*time.Millisecond, 50, rtt), long(200*time.Millisecond, 200, rtt)
							if o.Quick {
								s.Warmup, s.Measure = long(5*time.Millisecond, 20, rtt), long(20*time.Millisecond, 50, rtt)
							}
							s.Sample = s.Measure / 20
							out = append(out, scenarioRun{sc, s})
						}
					}
				}
			case ScenarioFairness:
				for _, rtt := range o.FairRTTs {
					for _, n := range o.FairFlows {
						s := base(n, rtt)
						s.Seed, s.Stagger = seed, 10*rtt
						s.Warmup, s.Measure = 100*rtt, 200*rtt
						if o.Quick {
							s.Measure = 50 * rtt
						}
						out = append(out, scenarioRun{sc, s})
					}
				}
			case ScenarioIncast:
				s := base(o.IncastSenders, o.IncastRTT)
				s.Seed, s.Outstanding = seed, 16
				s.Warmup, s.Measure = 20*o.IncastRTT, 300*o.IncastRTT
				if o.Quick {
					s.Measure = 100 * o.IncastRTT
				}
				out = append(out, scenarioRun{sc, s})
			}
		}
	}
	return out
}

// ScenarioRecord is one figure of a scenario run (median over the seeds). Its RTT, flows
// and loss are the Document record's params rtt_us, flows and loss_pct.
type ScenarioRecord struct {
	// Benchmark is the scenario, System the mode, Op OpWrite, Size the Write length.
	report.Subject
	RTTUS float64 // base round trip
	Flows int     // QPs sharing the bottleneck
	Loss  float64 // random loss of each direction, %
	report.Figure
}

// ScenarioGoal is one of the goals and whether the figures meet it, as
// bench/ndkbench reports its goals: every goal is listed, Evaluated false (and Met false)
// when its figures are missing.
type ScenarioGoal struct {
	Scenario string
	Name     string
	// Compared names the figure, or the ratio of figures, the goal is about
	// (report.Goal.Compared).
	Compared  string
	Value     float64
	Cmp       string // AtLeast or AtMost
	Limit     float64
	Unit      string
	Evaluated bool
	Met       bool
	Note      string
}

// report returns g as a goal of the shared results schema.
func (g *ScenarioGoal) report() report.Goal {
	return report.Goal{
		Bench: Tool, Scenario: g.Scenario, Name: g.Name, Compared: g.Compared,
		Comparison: g.Cmp, Limit: g.Limit, Unit: g.Unit,
		Evaluated: g.Evaluated, Value: g.Value, Met: g.Met, Required: true, Note: g.Note,
	}
}

// Verdict is "met", "NOT met", or "not evaluated".
func (g *ScenarioGoal) Verdict() string {
	return report.Verdict(g.Evaluated, g.Met)
}

func (g *ScenarioGoal) eval(v float64, ok bool) {
	g.Value, g.Evaluated = v, ok && !math.IsNaN(v)
	if !g.Evaluated {
		g.Value = 0
		return
	}
	g.Met = meets(v, g.Cmp, g.Limit)
}

// Suite is what the command measured: the scenarios' records and goals, and the
// goodput-under-loss benchmark's own Results when it ran. Document turns it into the
// report.Document that WriteJSON writes.
type Suite struct {
	Header  SuiteHeader
	Records []ScenarioRecord
	Loss    *Results
}

// SuiteHeader describes the run. Goals holds every goal of every scenario that ran (those
// of ScenarioLoss converted), met or not.
type SuiteHeader struct {
	report.Host
	Date       string
	Scenarios  []string
	Seeds      []uint64
	Gbps       float64
	MaxPayload int // datagram bytes (MTU - 28)
	Quick      bool
	Overrides  string
	Goals      []ScenarioGoal
	Notes      []string
}

// suiteParams are the Document's params of a Suite.
type suiteParams struct {
	Scenarios  []string `json:"scenarios"`
	Seeds      []uint64 `json:"scenario_seeds"`
	Gbps       float64  `json:"bandwidth_gbps"`
	MaxPayload int      `json:"max_payload"`
	Quick      bool     `json:"quick"`
	Overrides  string   `json:"engine_overrides"`
	Loss       *Config  `json:"loss,omitempty"` // the goodput-under-loss options, when it ran
}

// Document returns the suite in the shared results schema: tool transportbench, the
// simulated network as the bed, the options as params (the loss benchmark's under "loss"),
// the loss benchmark's records then the scenarios' (their RTT, flows and loss as the params
// rtt_us, flows and loss_pct), and every goal.
func (su *Suite) Document() *report.Document {
	h := report.NewHeader(Tool)
	h.Time, h.Host = su.Header.Date, su.Header.Host
	h.Bed = simBed(su.Header.MaxPayload, "virtual time; scenarios: every sender's path feeds one bottleneck (bandwidth, tail-drop queue) at the receiver's ingress")
	p := suiteParams{Scenarios: su.Header.Scenarios, Seeds: su.Header.Seeds, Gbps: su.Header.Gbps,
		MaxPayload: su.Header.MaxPayload, Quick: su.Header.Quick, Overrides: su.Header.Overrides}
	d := report.NewDocument(h)
	if su.Loss != nil {
		ld := su.Loss.Document()
		d.Header.Modes = ld.Header.Modes
		d.Header.Notes = append(d.Header.Notes, ld.Header.Notes...)
		d.Records = append(d.Records, ld.Records...)
		p.Loss = &su.Loss.Header.Config
		if len(su.Header.Scenarios) == 0 {
			d.Header.Bed = ld.Header.Bed
		}
	}
	d.Header.Params = report.ParamsOf(p)
	d.Header.Notes = append(d.Header.Notes, su.Header.Notes...)
	for _, rec := range su.Records {
		params := map[string]float64{ParamRTT: rec.RTTUS, ParamFlows: float64(rec.Flows), ParamLoss: rec.Loss}
		d.Records = append(d.Records, report.ToRecord(Tool, rec.Subject, params, rec.Figure))
	}
	for i := range su.Header.Goals {
		d.Goals = append(d.Goals, su.Header.Goals[i].report())
	}
	return d.Canonical()
}

// RunScenarios runs every run of o, Parallel at a time, and collects the Suite. The error
// is the context's or the first failed run's (the Suite still holds every run).
func RunScenarios(ctx context.Context, o ScenarioOptions) (*Suite, []FlowResult, error) {
	if o.Parallel <= 0 {
		o.Parallel = runtime.GOMAXPROCS(0)
	}
	if len(o.Seeds) == 0 {
		o.Seeds = []uint64{1}
	}
	runs := o.specs()
	out := make([]FlowResult, len(runs))
	work := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range min(o.Parallel, max(len(runs), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				out[i] = RunFlows(ctx, runs[i].spec)
				if o.Progress != nil {
					mu.Lock()
					r, s := &out[i], &runs[i].spec
					status := "ok"
					if r.Err != nil {
						status = "FAILED: " + r.Err.Error()
					}
					fmt.Fprintf(o.Progress, "  %-8s %2d QP rtt %7v loss %4.1f%% %-9s seed %d: %7.3f Gbit/s jain %.3f p99q %v drops %d rto %d, %v real: %s\n",
						runs[i].scenario, s.Senders, s.RTT, s.Loss*100, s.Mode, s.Seed, r.GoodputGbps, r.Jain, r.QueueP99, r.Drops, r.TimeoutsRun, r.Real.Round(time.Millisecond), status)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range runs {
		if ctx.Err() != nil {
			break
		}
		work <- i
	}
	close(work)
	wg.Wait()
	suite := collectScenarios(&o, runs, out)
	for i := range out {
		if out[i].Err != nil {
			return suite, out, fmt.Errorf("%s %d QP rtt %v: %w", runs[i].scenario, runs[i].spec.Senders, runs[i].spec.RTT, out[i].Err)
		}
	}
	return suite, out, ctx.Err()
}

// Metrics of the scenario records (besides those of the goodput benchmark).
const (
	MetricFlowGoodput  = "flow_goodput_min"  // the smallest per-QP goodput, Gbit/s
	MetricJain         = "jain"              // Jain's index of per-QP goodput over the window
	MetricConverge     = "jain_converge_rtt" // RTTs after the last start until Jain stays >= 0.95 (-1: never)
	MetricQueueP50     = "queue_p50"         // bottleneck queueing delay, us
	MetricQueueP99     = "queue_p99"         // bottleneck queueing delay, us
	MetricQueueMax     = "queue_max"         // bottleneck queueing delay, us
	MetricDrops        = "queue_drops"       // bottleneck tail drops in the window
	MetricDropsTotal   = "queue_drops_total" // bottleneck tail drops since the first start
	MetricRetx         = "retransmits"       // QP retransmissions in the window (all QPs)
	MetricTimeoutsRun  = "timeouts_run"      // RTO expiries since the first start (all QPs)
	MetricTimeoutsMax  = "timeouts_run_max"  // the most RTO expiries one QP had since the first start
	MetricWindow       = "engine_window"     // transport.Config.Window used, packets
	MetricOutstanding  = "outstanding"       // Writes each sender kept posted
	MetricQueueBytes   = "queue_bytes"       // the bottleneck's queue limit
	MetricUtilization  = "goodput_per_bw"    // goodput / bottleneck bandwidth
	MetricMeasuredMS   = "measured_ms"       // the measured window, virtual ms
	UnitMillis         = "ms"
	UnitRTTs           = "rtt"
	UnitPackets        = "packets"
	goalConvergeLimit  = 100 // RTTs
	goalJainIncast     = 0.9
	goalUtilization    = 0.9
	goalLossRetention  = 0.7
	goalSelectiveRatio = 2
)

// collectScenarios builds the Suite: per (scenario, flows, rtt, loss, mode, metric) one
// record over the seeds, then the goals.
func collectScenarios(o *ScenarioOptions, runs []scenarioRun, res []FlowResult) *Suite {
	h := report.ThisHost()
	su := &Suite{Header: SuiteHeader{
		Host: h, Date: time.Now().UTC().Format(time.RFC3339), Scenarios: o.Scenarios,
		Seeds: o.Seeds, Gbps: float64(o.Bandwidth) / 1e9, MaxPayload: o.MaxPayload, Quick: o.Quick, Overrides: o.Overrides,
		Goals: []ScenarioGoal{}, Notes: []string{},
	}, Records: []ScenarioRecord{}}
	su.Header.Notes = append(su.Header.Notes,
		"topology (bench/transportbench.Fabric): N sender hosts, each an engine with one QP, connected to N QPs on one receiver engine; every sender->receiver path feeds one simlink.Bottleneck at the receiver's ingress (bandwidth, tail-drop queue); latency RTT/2 each way; random loss on every path both ways (after the bottleneck); acks have no bandwidth limit",
		"engine Config.Window = next power of two >= 4 x BDP packets, at least 1024, at most 65536; each sender keeps max(16, 4 x BDP / Write size) Writes posted (at most 1024; incast: 16); bottleneck queue = max(1 BDP, 64 KiB) (engine_window, outstanding, queue_bytes records)",
		"rtt: warm-up max(20 ms, 50 RTT), measured max(200 ms, 200 RTT) (quick: max(5 ms, 20 RTT) and max(20 ms, 50 RTT)); fairness: flow i starts at i x 10 RTT, measured from 100 RTT after the last start for 200 RTT (quick 50); incast: all start at once, warm-up 20 RTT, measured 300 RTT (quick 100)",
		"goodput = bytes of Writes completed in the window x 8 / window; per-QP goodput (fairness, Jain) = new payload bytes the receiver QP accepted in the window; Jain windows are 10 RTT long from the last start",
		"queueing delay = time a datagram waits at the bottleneck before its first bit is sent (simlink.BottleneckStats.Delay over the window; a bucket's upper bound, <= 1/32 above)",
		"fairness p99 goal: base RTT + p99 queueing delay <= base RTT + target, target = mean of the senders' congestion controller Stats().TargetDelay sampled every 10 RTT over the window (not evaluated when the controller reports none); for a controller whose target is an absolute fabric delay (the current Swift) this uses it as the queueing allowance, as the issue states it",
		"incast 'no RTO storm': RTO expiries of all QPs since the synchronized start (warm-up included) <= the number of QPs, i.e. at most one per QP on average (QPStats counts no RTO-caused retransmissions separately)",
	)
	type key struct {
		sc         string
		flows      int
		rtt        time.Duration
		loss       float64
		mode, metr string
	}
	type fig struct {
		unit string
		runs []float64
	}
	figs := map[key]*fig{}
	var order []key
	add := func(k key, unit string, v float64) {
		f := figs[k]
		if f == nil {
			f = &fig{unit: unit, runs: []float64{}}
			figs[k] = f
			order = append(order, k)
		}
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			f.runs = append(f.runs, v)
		}
	}
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	for i := range runs {
		sc, s, r := runs[i].scenario, &runs[i].spec, &res[i]
		k := func(m string) key { return key{sc, s.Senders, s.RTT, pct(s.Loss), s.Mode, m} }
		if r.Spec.Senders == 0 {
			continue // never started
		}
		failed := 0.0
		if r.Err != nil {
			failed = 1
			su.Header.Notes = append(su.Header.Notes, report.FailedNote(fmt.Errorf("%s %d QP rtt %v loss %g%% %s seed %d: %w",
				sc, s.Senders, s.RTT, pct(s.Loss), s.Mode, s.Seed, r.Err)))
		}
		add(k(MetricFailed), UnitCount, failed)
		add(k(MetricGoodput), UnitGbps, r.GoodputGbps)
		add(k(MetricUtilization), UnitRatio, r.GoodputGbps*1e9/float64(s.Bandwidth))
		add(k(MetricRealSeconds), UnitSeconds, r.Real.Seconds())
		add(k(MetricWindow), UnitPackets, float64(s.Window))
		add(k(MetricOutstanding), UnitCount, float64(s.Outstanding))
		add(k(MetricQueueBytes), UnitBytes, float64(s.QueueBytes))
		add(k(MetricMeasuredMS), UnitMillis, ms(s.Measure))
		if r.Err != nil {
			continue
		}
		if len(r.FlowGbps) > 0 {
			add(k(MetricFlowGoodput), UnitGbps, slices.Min(r.FlowGbps))
		}
		add(k(MetricJain), UnitRatio, r.Jain)
		add(k(MetricConverge), UnitRTTs, r.ConvergeRTTs)
		add(k(MetricQueueP50), UnitMicros, us(r.QueueP50))
		add(k(MetricQueueP99), UnitMicros, us(r.QueueP99))
		add(k(MetricQueueMax), UnitMicros, us(r.QueueMax))
		add(k(MetricDrops), UnitCount, float64(r.Drops))
		add(k(MetricDropsTotal), UnitCount, float64(r.DropsTotal))
		add(k(MetricRetx), UnitCount, float64(r.Retransmits))
		if r.TxPackets > 0 {
			add(k(MetricRetxPerPkt), UnitRatio, float64(r.Retransmits)/float64(r.TxPackets))
		}
		add(k(MetricTimeouts), UnitCount, float64(r.Timeouts))
		add(k(MetricTimeoutsRun), UnitCount, float64(r.TimeoutsRun))
		add(k(MetricTimeoutsMax), UnitCount, float64(r.MaxTimeoutsRun))
		add(k(MetricSRTT), UnitMicros, us(r.SRTTMean))
		if r.TargetMean > 0 {
			add(k(MetricTarget), UnitMicros, us(r.TargetMean))
		}
	}
	for _, k := range order {
		f := figs[k]
		su.Records = append(su.Records, ScenarioRecord{
			Subject: report.Subject{Benchmark: k.sc, System: k.mode, Op: OpWrite, Size: o.MsgSize},
			RTTUS:   us(k.rtt), Flows: k.flows, Loss: k.loss,
			Figure: report.NewFigure(k.metr, f.unit, f.runs),
		})
	}
	// get returns a record's median (false if missing or without runs). A -1 convergence
	// (never) counts as never whatever the other seeds say.
	get := func(sc string, flows int, rtt time.Duration, loss float64, mode, metric string) (float64, bool) {
		rec := su.Find(sc, flows, us(rtt), pct(loss), mode, metric)
		if rec == nil || len(rec.Runs) == 0 {
			return 0, false
		}
		if metric == MetricConverge && slices.Contains(rec.Runs, -1) {
			return -1, true
		}
		return rec.Value, true
	}
	has := func(sc string) bool { return slices.Contains(o.Scenarios, sc) }
	goal := func(sc, name, cmp string, limit float64, unit string) ScenarioGoal {
		return ScenarioGoal{Scenario: sc, Name: name, Cmp: cmp, Limit: limit, Unit: unit}
	}
	// figName names a record as report.Goal.Compared does.
	figName := func(sc string, flows int, rtt time.Duration, loss float64, mode, metric string) string {
		return fmt.Sprintf("%s %s %s %d B %s [%s=%d %s=%g %s=%g]", mode, sc, OpWrite, o.MsgSize, metric,
			ParamFlows, flows, ParamLoss, pct(loss), ParamRTT, us(rtt))
	}
	bw := float64(o.Bandwidth) / 1e9
	if has(ScenarioRTT) {
		for _, rtt := range o.RTTs {
			g := goal(ScenarioRTT, fmt.Sprintf("rtt %v: 1 QP goodput / bottleneck at 0 loss", rtt), AtLeast, goalUtilization, UnitRatio)
			g.Compared = figName(ScenarioRTT, 1, rtt, 0, ModeSelective, MetricGoodput) + " / bottleneck bandwidth"
			v, ok := get(ScenarioRTT, 1, rtt, 0, ModeSelective, MetricGoodput)
			g.eval(v/bw, ok)
			su.Header.Goals = append(su.Header.Goals, g)
			g = goal(ScenarioRTT, fmt.Sprintf("rtt %v: goodput at %g%% loss / lossless", rtt, pct(o.Loss)), AtLeast, goalLossRetention, UnitRatio)
			g.Compared = figName(ScenarioRTT, 1, rtt, o.Loss, ModeSelective, MetricGoodput) + " / " + figName(ScenarioRTT, 1, rtt, 0, ModeSelective, MetricGoodput)
			l, okl := get(ScenarioRTT, 1, rtt, o.Loss, ModeSelective, MetricGoodput)
			g.eval(ratio(l, v), ok && okl && v > 0)
			su.Header.Goals = append(su.Header.Goals, g)
			if rtt >= 100*time.Microsecond {
				g = goal(ScenarioRTT, fmt.Sprintf("rtt %v: selective / go-back-N at %g%% loss", rtt, pct(o.Loss)), AtLeast, goalSelectiveRatio, UnitRatio)
				g.Compared = figName(ScenarioRTT, 1, rtt, o.Loss, ModeSelective, MetricGoodput) + " / " + figName(ScenarioRTT, 1, rtt, o.Loss, ModeGoBackN, MetricGoodput)
				gb, okg := get(ScenarioRTT, 1, rtt, o.Loss, ModeGoBackN, MetricGoodput)
				g.eval(ratio(l, gb), okl && okg && gb > 0)
				if okl && okg && gb == 0 && l > 0 {
					g.Note = "go-back-N moved nothing"
					g.eval(math.MaxFloat64, true)
				}
				su.Header.Goals = append(su.Header.Goals, g)
			}
		}
	}
	if has(ScenarioFairness) {
		for _, rtt := range o.FairRTTs {
			for _, n := range o.FairFlows {
				pre := fmt.Sprintf("%d QPs rtt %v: ", n, rtt)
				g := goal(ScenarioFairness, pre+fmt.Sprintf("RTTs after the last start until Jain stays >= %g", JainConverged), AtMost, goalConvergeLimit, UnitRTTs)
				g.Compared = figName(ScenarioFairness, n, rtt, 0, ModeSelective, MetricConverge)
				v, ok := get(ScenarioFairness, n, rtt, 0, ModeSelective, MetricConverge)
				g.eval(v, ok)
				if ok && v < 0 {
					g.Met, g.Note = false, "never: the last window is below"
				}
				su.Header.Goals = append(su.Header.Goals, g)
				g = goal(ScenarioFairness, pre+"base RTT + p99 queueing delay (limit: base RTT + target)", AtMost, 0, UnitMicros)
				g.Compared = "base RTT + " + figName(ScenarioFairness, n, rtt, 0, ModeSelective, MetricQueueP99) + " (limit: base RTT + " + MetricTarget + ")"
				q, okq := get(ScenarioFairness, n, rtt, 0, ModeSelective, MetricQueueP99)
				t, okt := get(ScenarioFairness, n, rtt, 0, ModeSelective, MetricTarget)
				g.Limit = us(rtt) + t
				g.eval(us(rtt)+q, okq && okt)
				if okq && !okt {
					g.Note = "the controller reports no target delay"
				}
				su.Header.Goals = append(su.Header.Goals, g)
				g = goal(ScenarioFairness, pre+"bottleneck drops in steady state (queue >= 1 BDP)", AtMost, 0, UnitCount)
				g.Compared = figName(ScenarioFairness, n, rtt, 0, ModeSelective, MetricDrops)
				d, okd := get(ScenarioFairness, n, rtt, 0, ModeSelective, MetricDrops)
				g.eval(d, okd)
				su.Header.Goals = append(su.Header.Goals, g)
			}
		}
	}
	if has(ScenarioIncast) {
		n, rtt := o.IncastSenders, o.IncastRTT
		pre := fmt.Sprintf("incast %d:1 rtt %v: ", n, rtt)
		g := goal(ScenarioIncast, pre+"aggregate goodput / bottleneck", AtLeast, goalUtilization, UnitRatio)
		g.Compared = figName(ScenarioIncast, n, rtt, 0, ModeSelective, MetricGoodput) + " / bottleneck bandwidth"
		v, ok := get(ScenarioIncast, n, rtt, 0, ModeSelective, MetricGoodput)
		g.eval(v/bw, ok)
		su.Header.Goals = append(su.Header.Goals, g)
		g = goal(ScenarioIncast, pre+"no RTO storm: RTO expiries since the start, all QPs", AtMost, float64(n), UnitCount)
		g.Compared = figName(ScenarioIncast, n, rtt, 0, ModeSelective, MetricTimeoutsRun)
		v, ok = get(ScenarioIncast, n, rtt, 0, ModeSelective, MetricTimeoutsRun)
		g.eval(v, ok)
		su.Header.Goals = append(su.Header.Goals, g)
		g = goal(ScenarioIncast, pre+"Jain index of per-QP goodput", AtLeast, goalJainIncast, UnitRatio)
		g.Compared = figName(ScenarioIncast, n, rtt, 0, ModeSelective, MetricJain)
		v, ok = get(ScenarioIncast, n, rtt, 0, ModeSelective, MetricJain)
		g.eval(v, ok)
		su.Header.Goals = append(su.Header.Goals, g)
	}
	return su
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// AddLoss adds the goodput-under-loss benchmark's results and its goals to the suite.
func (su *Suite) AddLoss(r *Results) {
	su.Loss = r
	for _, g := range r.Header.Goals {
		sg := ScenarioGoal{Scenario: ScenarioLoss, Name: g.Name, Compared: g.compared(r.Header.Config.MsgSize), Cmp: g.Cmp, Limit: g.Limit, Unit: UnitRatio}
		sg.eval(g.Value, g.Evaluated)
		su.Header.Goals = append(su.Header.Goals, sg)
	}
}

// Find returns the record of one figure (rtt in µs, loss in %), or nil.
func (su *Suite) Find(scenario string, flows int, rttUS, loss float64, mode, metric string) *ScenarioRecord {
	for i := range su.Records {
		r := &su.Records[i]
		if r.Benchmark == scenario && r.Flows == flows && math.Abs(r.RTTUS-rttUS) < 1e-6 &&
			math.Abs(r.Loss-loss) < 1e-9 && r.System == mode && r.Metric == metric {
			return r
		}
	}
	return nil
}

// WriteJSON writes the suite's Document as indented JSON to path (report.WriteJSON).
func (su *Suite) WriteJSON(path string) error { return su.Document().WriteJSON(path) }

// WriteTable prints the goodput-under-loss table (if it ran), one line per scenario run
// (medians over the seeds), and every goal.
func (su *Suite) WriteTable(w io.Writer) error {
	var b strings.Builder
	if su.Loss != nil {
		if err := su.Loss.WriteTable(&b); err != nil {
			return err
		}
		b.WriteString("\n")
	}
	if su.Header.Overrides != "" {
		fmt.Fprintf(&b, "ENGINE OVERRIDES (diagnosis, not the defaults): %s\n", su.Header.Overrides)
	}
	type row struct {
		sc    string
		flows int
		rtt   float64
		loss  float64
		mode  string
	}
	var rows []row
	for _, r := range su.Records {
		k := row{r.Benchmark, r.Flows, r.RTTUS, r.Loss, r.System}
		if !slices.Contains(rows, k) {
			rows = append(rows, k)
		}
	}
	if len(rows) > 0 {
		fmt.Fprintf(&b, "Scenarios: %g Gbit/s bottleneck, median of %d seed(s), virtual time%s\n", su.Header.Gbps, len(su.Header.Seeds), map[bool]string{true: " (quick)", false: ""}[su.Header.Quick])
		fmt.Fprintf(&b, "%-8s %3s %8s %5s %-9s %7s %6s %7s %6s %6s %8s %8s %6s %6s %6s %6s %7s %6s %7s %6s %6s\n",
			"scenario", "QPs", "rtt us", "loss%", "mode", "Gbit/s", "x bw", "minQP", "jain", "conv", "q50 us", "q99 us", "drops", "retx", "RTOs", "tgt us", "srtt us", "window", "queueKB", "real s", "failed")
	}
	for _, k := range rows {
		cell := func(metric string, scale float64, prec int) string {
			rec := su.Find(k.sc, k.flows, k.rtt, k.loss, k.mode, metric)
			if rec == nil || len(rec.Runs) == 0 {
				return "-"
			}
			return report.Cell(rec.Value, true, scale, prec)
		}
		failed := "0"
		if rec := su.Find(k.sc, k.flows, k.rtt, k.loss, k.mode, MetricFailed); rec != nil {
			n := 0
			for _, v := range rec.Runs {
				n += int(v)
			}
			failed = fmt.Sprintf("%d/%d", n, len(rec.Runs))
		}
		fmt.Fprintf(&b, "%-8s %3d %8g %5g %-9s %7s %6s %7s %6s %6s %8s %8s %6s %6s %6s %6s %7s %6s %7s %6s %6s\n",
			k.sc, k.flows, k.rtt, k.loss, k.mode,
			cell(MetricGoodput, 1, 3), cell(MetricUtilization, 1, 3), cell(MetricFlowGoodput, 1, 3),
			cell(MetricJain, 1, 3), cell(MetricConverge, 1, 0), cell(MetricQueueP50, 1, 1), cell(MetricQueueP99, 1, 1),
			cell(MetricDrops, 1, 0), cell(MetricRetx, 1, 0), cell(MetricTimeoutsRun, 1, 0), cell(MetricTarget, 1, 1),
			cell(MetricSRTT, 1, 1), cell(MetricWindow, 1, 0), cell(MetricQueueBytes, 1e-3, 0), cell(MetricRealSeconds, 1, 2), failed)
	}
	if len(rows) > 0 {
		b.WriteString("(drops, retx: in the measured window; RTOs: since the first start; conv: RTTs after the last start until Jain stays >= 0.95, -1 never)\n")
	}
	if len(su.Header.Goals) > 0 {
		met := 0
		for _, g := range su.Header.Goals {
			if g.Met {
				met++
			}
		}
		fmt.Fprintf(&b, "\nGoals (issue): %d of %d met\n", met, len(su.Header.Goals))
		for _, g := range su.Header.Goals {
			v := "-"
			if g.Evaluated {
				v = fmt.Sprintf("%.3f", g.Value)
			}
			note := ""
			if g.Note != "" {
				note = " (" + g.Note + ")"
			}
			fmt.Fprintf(&b, "  %-9s %-78s %10s %s %-8.4g %s%s\n", g.Scenario, g.Name, v, g.Cmp, g.Limit, g.Verdict(), note)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
