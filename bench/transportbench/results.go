package transportbench

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// Tool is the bench's name in its Document (report.Header.Tool, report.Record.Bench).
const Tool = "transportbench"

// Record params of the Document (report.Record.Params).
const (
	ParamLoss  = "loss_pct" // random loss of each direction, %
	ParamRTT   = "rtt_us"   // base round trip, µs
	ParamFlows = "flows"    // QPs sharing the bottleneck
)

// Benchmark names, operations, metrics and units used in Records.
const (
	// BenchGoodput is the goodput-under-loss benchmark; its Records' System is a mode.
	BenchGoodput = "goodput"
	// BenchRatio holds the ratios of goodput medians; System names the ratio (RatioLossless
	// or RatioGoBackN).
	BenchRatio = "goodput_ratio"

	// OpWrite: the traffic is RDMA Writes of Size bytes.
	OpWrite = "write"

	MetricGoodput     = report.MetricGbps   // completed Write bytes per virtual second, in Gbit/s
	MetricRetxPerPkt  = "retx_per_pkt"      // retransmitted data packets / data packets sent
	MetricTxPackets   = "tx_pkts"           // data packets sent (retransmissions included)
	MetricTimeouts    = "timeouts"          // retransmission timer expiries
	MetricLossEvents  = "loss_events"       // loss events the congestion controller saw
	MetricLossDecr    = "loss_decreases"    // window decreases they caused (at most one per RTT)
	MetricDelayDecr   = "delay_decreases"   // window decreases caused by delay above target
	MetricCwnd        = "cwnd_mean"         // time-weighted congestion window, bytes
	MetricInFlight    = "inflight_mean"     // time-weighted bytes in flight (after acks: a lower bound)
	MetricSRTT        = "srtt_mean"         // time-weighted smoothed RTT, us
	MetricRTO         = "rto_mean"          // time-weighted retransmission timeout, us
	MetricFabricDelay = "fabric_delay_mean" // time-weighted congestion controller delay sample, us
	MetricTarget      = "target_delay_mean" // time-weighted congestion controller target, us
	MetricWireUtil    = "wire_util"         // A→B bytes delivered / capacity of the window, %
	MetricDataLost    = "data_lost"         // A→B datagrams lost at random
	MetricDataQueue   = "data_queue_drops"  // A→B datagrams tail-dropped at the bandwidth queue
	MetricAckLost     = "ack_lost"          // B→A datagrams lost at random
	MetricDuplicates  = "dup_rx"            // data packets B received more than once
	MetricRealSeconds = "real_s"            // real time the run took
	MetricFailed      = "failed"            // 1 if the run stopped early (a Write failed, a limit), else 0
	MetricRatio       = "ratio"             // BenchRatio records
	UnitGbps          = report.UnitGbps
	UnitRatio         = report.UnitRatio
	UnitCount         = report.UnitCount
	UnitBytes         = "bytes"
	UnitMicros        = report.UnitMicros
	UnitPercent       = "%"
	UnitSeconds       = "s"
	RatioLossless     = "selective/lossless" // selective at a loss rate / selective at 0
	RatioGoBackN      = "selective/gobackn"  // selective / go-back-N at the same loss rate
)

// Results is what a run of the goodput-under-loss benchmark measured: a header and one
// Record per figure. Document turns it into the report.Document that WriteJSON writes.
type Results struct {
	Header  Header
	Records []Record
}

// Header describes where and how the figures were measured.
type Header struct {
	report.Host        // host, kernel, cpu, cpus, go
	Date        string // start of the run, RFC 3339
	// Modes maps each mode to what it means.
	Modes map[string]string
	// Config is the options the run used (the Document's params).
	Config Config
	// Goals are the goals, every one listed, and whether the medians meet them.
	Goals []Goal
	// Notes are definitions and anything unusual that happened.
	Notes []string
}

// Config is the part of Options that shapes the figures, as recorded in the header (its
// JSON is the Document's params).
type Config struct {
	DurationMS  float64   `json:"duration_ms"` // virtual
	WarmupMS    float64   `json:"warmup_ms"`   // virtual
	Seeds       []uint64  `json:"seeds"`
	LossesPct   []float64 `json:"losses_pct"` // each direction
	Modes       []string  `json:"modes"`
	LatencyUS   float64   `json:"latency_us"` // one way
	Gbps        float64   `json:"bandwidth_gbps"`
	QueueBytes  int       `json:"queue_bytes"`
	MaxPayload  int       `json:"max_payload"` // datagram bytes (MTU - 28)
	MsgSize     int       `json:"msg_size"`
	Outstanding int       `json:"outstanding"`
	// Overrides lists changes to the engine's default configuration ("" for none).
	Overrides string `json:"engine_overrides"`
}

// Record is one figure: the median over the seeds of one metric of one mode at one loss
// rate. The fields are those of bench/linkbench's records plus Loss.
type Record struct {
	// Benchmark is BenchGoodput or BenchRatio, System a mode or a ratio's name, Op OpWrite,
	// Size the Write length in bytes.
	report.Subject
	Loss float64 // random loss of each direction, in % (the Document's param loss_pct)
	// Value is the median of Runs (a ratio: the ratio of the medians), one value per seed in
	// seed order.
	report.Figure
}

// Goal is one of the goals for the ratios. Every goal is listed, with Evaluated
// and Met false when its ratio was not measured; the Document holds it as a report.Goal.
type Goal struct {
	// Name says what is compared, for people.
	Name string
	// System is the ratio record's system (RatioLossless or RatioGoBackN), Loss its loss
	// rate in %.
	System string
	Loss   float64
	// Cmp is AtLeast (the ratio must reach Limit) or AtMost (must not exceed it).
	Cmp   string
	Limit float64

	// Evaluated is false when the ratio was not measured (its loss rate or a mode not run).
	Evaluated bool
	// Value is the measured ratio of medians (0 when not evaluated).
	Value float64
	// Met says whether Value satisfies Cmp Limit.
	Met bool
}

// Comparisons of a goal (Goal.Cmp, ScenarioGoal.Cmp).
const (
	AtLeast = report.AtLeast
	AtMost  = report.AtMost
)

// compared names the ratio record g is about, as report.Goal.Compared does.
func (g Goal) compared(size int) string {
	return fmt.Sprintf("%s %s %s %d B %s [%s=%g]", g.System, BenchRatio, OpWrite, size, MetricRatio, ParamLoss, g.Loss)
}

// meets reports whether v satisfies cmp limit.
func meets(v float64, cmp string, limit float64) bool {
	if cmp == AtMost {
		return v <= limit
	}
	return v >= limit
}

// Verdict is "met", "NOT met", or "not evaluated".
func (g Goal) Verdict() string { return report.Verdict(g.Evaluated, g.Met) }

// Goals lists the goals: at 1 % loss, goodput at least 0.7× lossless and 2×
// go-back-N; at 0.1 %, at least 0.9× lossless.
var Goals = []Goal{
	{Name: "1% loss: selective >= 0.7x lossless", System: RatioLossless, Loss: 1, Cmp: AtLeast, Limit: 0.7},
	{Name: "1% loss: selective >= 2x go-back-N", System: RatioGoBackN, Loss: 1, Cmp: AtLeast, Limit: 2},
	{Name: "0.1% loss: selective >= 0.9x lossless", System: RatioLossless, Loss: 0.1, Cmp: AtLeast, Limit: 0.9},
}

// writeOverhead is what a Write packet carries besides payload: header, RDMA extension,
// CRC trailer (transport/wire).
const writeOverhead = wire.HeaderLen + wire.RDMAExtLen + wire.TrailerLen

// pct converts a probability to the percent the records carry, rounded to 1e-9 so that
// 0.001 reads 0.1.
func pct(p float64) float64 { return math.Round(p*100*1e9) / 1e9 }

// Collect turns the runs into Results for the options they ran with: per (loss, mode,
// metric) one Record with one value per seed, then the ratio Records and the goals.
func Collect(o Options, runs []CaseResult) *Results {
	r := &Results{Header: machineHeader()}
	r.Header.Modes = map[string]string{
		ModeSelective: "engine default: SACK bitmap (64 PSNs after the cumulative ack) + RACK/packet-threshold loss detection, only lost packets resent; Swift delay-based window",
		ModeGoBackN:   "transport.Config.GoBackN: on a SACK or sequence NAK, everything unacknowledged is resent; same Swift window",
	}
	r.Header.Config = Config{
		DurationMS: ms(o.Duration), WarmupMS: ms(o.Warmup), Seeds: o.Seeds, Modes: o.Modes,
		LatencyUS: float64(o.Latency) / 1e3, Gbps: float64(o.Bandwidth) / 1e9,
		QueueBytes: o.QueueBytes, MaxPayload: o.MaxPayload, MsgSize: o.MsgSize, Outstanding: o.Outstanding,
		Overrides: o.Overrides(),
	}
	for _, l := range o.Losses {
		r.Header.Config.LossesPct = append(r.Header.Config.LossesPct, pct(l))
	}
	r.Header.Notes = append(r.Header.Notes,
		"virtual time: two engines and transport/simlink on one simlink.ManualClock, polled by one goroutine; figures do not depend on the machine, real_s does",
		"goodput = bytes of Writes completed in the window x 8 / window; retx_per_pkt = QP retransmits / QP data packets sent (both at A); loss applies to both directions (acks too)",
		fmt.Sprintf("wire_util = bytes of the A->B datagrams B received (duplicates included; the simulated wire has no headers) / (bandwidth x window); a Write packet carries %d payload bytes in a %d-byte datagram, so goodput <= %.1f%% of the bandwidth",
			o.MaxPayload-writeOverhead, o.MaxPayload, 100*float64(o.MaxPayload-writeOverhead)/float64(o.MaxPayload)),
		"means are weighted by virtual time, of the values QPStats publishes after each ack (inflight_mean is taken after the ack, before the sends it allows: a lower bound) and of the congestion controller's Stats (fabric_delay_mean: smoothed RTT less ack holding time; target_delay_mean: Swift's target)",
		"failed = 1 for a run that stopped early (a Write completed with an error, e.g. StatusTimeout once a packet went unacknowledged for RetryTimeout); its goodput counts only what completed in the window before (0 if it failed during warm-up) and its other figures are left out",
		"ratios: value = ratio of the medians; runs = per-seed ratios (same seed in numerator and denominator)",
	)
	type key struct {
		loss         float64
		mode, metric string
	}
	type fig struct {
		unit string
		runs []float64
	}
	figs := map[key]*fig{}
	var order []key
	add := func(k key, unit string, v float64) {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return
		}
		f := figs[k]
		if f == nil {
			f = &fig{unit: unit, runs: []float64{}}
			figs[k] = f
			order = append(order, k)
		}
		f.runs = append(f.runs, v)
	}
	// Runs in canonical order: loss, mode, then seed order.
	byCase := map[Case]*CaseResult{}
	for i := range runs {
		if runs[i].Mode == "" {
			continue // never started (interrupted)
		}
		byCase[runs[i].Case] = &runs[i]
		if runs[i].Err != nil {
			r.Header.Notes = append(r.Header.Notes, fmt.Sprintf("FAILED: loss %g%% %s seed %d: %v",
				pct(runs[i].Loss), runs[i].Mode, runs[i].Seed, runs[i].Err))
		}
	}
	for _, l := range o.Losses {
		for _, m := range o.Modes {
			for _, s := range o.Seeds {
				c := byCase[Case{Loss: l, Mode: m, Seed: s}]
				if c == nil {
					continue
				}
				lp := pct(l)
				k := func(metric string) key { return key{lp, m, metric} }
				add(k(MetricGoodput), UnitGbps, c.GoodputGbps)
				failed := 0.0
				if c.Err != nil {
					failed = 1
				}
				add(k(MetricFailed), UnitCount, failed)
				add(k(MetricRealSeconds), UnitSeconds, c.Real.Seconds())
				if c.Err != nil {
					continue // the other figures of a run that stopped early mislead
				}
				add(k(MetricRetxPerPkt), UnitRatio, c.RetxPerPkt)
				add(k(MetricTxPackets), UnitCount, float64(c.TxPackets))
				add(k(MetricTimeouts), UnitCount, float64(c.Timeouts))
				add(k(MetricLossEvents), UnitCount, float64(c.CC.LossEvents))
				add(k(MetricLossDecr), UnitCount, float64(c.CC.LossDecreases))
				add(k(MetricDelayDecr), UnitCount, float64(c.CC.DelayDecreases))
				add(k(MetricCwnd), UnitBytes, c.CwndMean)
				add(k(MetricInFlight), UnitBytes, c.InFlightMean)
				add(k(MetricSRTT), UnitMicros, c.SRTTMean/1e3)
				add(k(MetricRTO), UnitMicros, c.RTOMean/1e3)
				if c.TargetMean > 0 { // a controller that tracks delay (Swift)
					add(k(MetricFabricDelay), UnitMicros, c.FabricDelayMean/1e3)
					add(k(MetricTarget), UnitMicros, c.TargetMean/1e3)
				}
				add(k(MetricWireUtil), UnitPercent, c.WireUtil*100)
				add(k(MetricDataLost), UnitCount, float64(c.DataLost))
				add(k(MetricDataQueue), UnitCount, float64(c.DataQueueDrops))
				add(k(MetricAckLost), UnitCount, float64(c.AckLost))
				add(k(MetricDuplicates), UnitCount, float64(c.Duplicates))
			}
		}
	}
	for _, k := range order {
		f := figs[k]
		r.Records = append(r.Records, Record{
			Subject: report.Subject{Benchmark: BenchGoodput, System: k.mode, Op: OpWrite, Size: o.MsgSize},
			Loss:    k.loss,
			Figure:  report.NewFigure(k.metric, f.unit, f.runs),
		})
	}

	// Ratios of goodput, for every loss rate that has both sides, with per-seed ratios.
	goodput := func(loss float64, mode string, seed uint64) (float64, bool) {
		c := byCase[Case{Loss: loss, Mode: mode, Seed: seed}]
		if c == nil {
			return 0, false
		}
		return c.GoodputGbps, true
	}
	for _, l := range o.Losses {
		if l == 0 {
			continue
		}
		for _, q := range []struct {
			name      string
			numL      float64
			numM      string
			denL      float64
			denM      string
			available bool
		}{
			{RatioLossless, l, ModeSelective, 0, ModeSelective, slices.Contains(o.Losses, 0)},
			{RatioGoBackN, l, ModeSelective, l, ModeGoBackN, slices.Contains(o.Modes, ModeGoBackN)},
		} {
			if !q.available || !slices.Contains(o.Modes, ModeSelective) {
				continue
			}
			per := []float64{}
			var nums, dens []float64
			for _, s := range o.Seeds {
				x, okx := goodput(q.numL, q.numM, s)
				y, oky := goodput(q.denL, q.denM, s)
				if okx {
					nums = append(nums, x)
				}
				if oky {
					dens = append(dens, y)
				}
				if okx && oky && y > 0 {
					per = append(per, x/y)
				}
			}
			if len(nums) == 0 || len(dens) == 0 || report.Median(dens) == 0 {
				continue
			}
			rec := Record{
				Subject: report.Subject{Benchmark: BenchRatio, System: q.name, Op: OpWrite, Size: o.MsgSize},
				Loss:    pct(l),
				Figure:  report.Figure{Metric: MetricRatio, Value: report.Median(nums) / report.Median(dens), Unit: UnitRatio, Runs: per},
			}
			for _, g := range Goals {
				if g.System == q.name && g.Loss == pct(l) {
					rec.Note = fmt.Sprintf("goal %s %g: %s", g.Cmp, g.Limit, report.Verdict(true, meets(rec.Value, g.Cmp, g.Limit)))
				}
			}
			r.Records = append(r.Records, rec)
		}
	}
	r.Header.Goals = []Goal{}
	for _, g := range Goals {
		g.Evaluated, g.Value, g.Met = false, 0, false
		if rec := r.Find(BenchRatio, g.System, g.Loss, MetricRatio); rec != nil && !math.IsNaN(rec.Value) {
			g.Evaluated, g.Value, g.Met = true, rec.Value, meets(rec.Value, g.Cmp, g.Limit)
		}
		r.Header.Goals = append(r.Header.Goals, g)
	}
	return r
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// Find returns the record of one figure (loss in %), or nil.
func (r *Results) Find(bench, system string, loss float64, metric string) *Record {
	for i := range r.Records {
		rec := &r.Records[i]
		if rec.Benchmark == bench && rec.System == system && rec.Metric == metric && math.Abs(rec.Loss-loss) < 1e-9 {
			return rec
		}
	}
	return nil
}

// Document returns r in the shared results schema: tool transportbench, the simulated
// path as the bed, the options as params, every record (its loss as the param loss_pct)
// and every goal.
func (r *Results) Document() *report.Document {
	h := report.NewHeader(Tool)
	h.Time, h.Host = r.Header.Date, r.Header.Host
	c := r.Header.Config
	h.Bed = simBed(c.MaxPayload, fmt.Sprintf("virtual time; one path: %g us one way, %g Gbit/s, %d-byte tail-drop queue, random loss both ways", c.LatencyUS, c.Gbps, c.QueueBytes))
	h.Modes = maps.Clone(r.Header.Modes)
	h.Params = report.ParamsOf(c)
	h.Notes = slices.Clone(r.Header.Notes)
	d := report.NewDocument(h)
	d.Records = r.records()
	for _, g := range r.Header.Goals {
		d.Goals = append(d.Goals, report.Goal{
			Bench: Tool, Scenario: ScenarioLoss, Name: g.Name, Compared: g.compared(c.MsgSize),
			Comparison: g.Cmp, Limit: g.Limit, Unit: UnitRatio,
			Evaluated: g.Evaluated, Value: g.Value, Met: g.Met, Required: true,
		})
	}
	return d.Canonical()
}

// records returns r's records as the Document's.
func (r *Results) records() []report.Record {
	out := make([]report.Record, 0, len(r.Records))
	for _, rec := range r.Records {
		out = append(out, report.ToRecord(Tool, rec.Subject, map[string]float64{ParamLoss: rec.Loss}, rec.Figure))
	}
	return out
}

// simBed is the bed of the simulated network: datagrams of up to maxPayload bytes (an MTU
// 28 bytes more), one queue.
func simBed(maxPayload int, detail string) report.Bed {
	return report.Bed{Link: "simlink", MTU: maxPayload + 28, Queues: 1, Detail: detail}
}

// WriteJSON writes r's Document as indented JSON to path, creating its directory. It
// writes a temporary file first and renames it, so a reader never sees half a document.
func (r *Results) WriteJSON(path string) error { return r.Document().WriteJSON(path) }

// ReadJSON reads a Document written by WriteJSON (of a Results or a Suite).
func ReadJSON(path string) (*report.Document, error) { return report.ReadDocument(path) }

// losses returns the loss rates that have goodput records, ascending.
func (r *Results) losses() []float64 {
	return report.Values(r.Records, func(rec Record) (float64, bool) { return rec.Loss, rec.Benchmark == BenchGoodput })
}

// WriteTable prints the goodput table (one line per loss rate and mode: medians), the
// ratios and the goals.
func (r *Results) WriteTable(w io.Writer) error {
	var b strings.Builder
	c := r.Header.Config
	fmt.Fprintf(&b, "Goodput under loss: one QP, %d-byte Writes, %d outstanding; %g Gbit/s, %g us one way, %d-byte queue, %d-byte datagrams;\n",
		c.MsgSize, c.Outstanding, c.Gbps, c.LatencyUS, c.QueueBytes, c.MaxPayload)
	fmt.Fprintf(&b, "%g ms of virtual time after %g ms of warm-up; loss on both directions; median of %d seed(s)\n",
		c.DurationMS, c.WarmupMS, len(c.Seeds))
	if c.Overrides != "" {
		fmt.Fprintf(&b, "ENGINE OVERRIDES (diagnosis, not the defaults): %s\n", c.Overrides)
	}
	fmt.Fprintf(&b, "%7s %-9s %8s %7s %9s %8s %5s %6s %7s %7s %8s %7s %7s %7s %6s %6s\n",
		"loss %", "mode", "Gbit/s", "wire %", "retx/pkt", "dup rx", "RTOs", "lossev", "lossdec", "dlydec", "cwnd KB", "srtt us", "fab us", "tgt us", "real s", "failed")
	cell := func(sys string, loss float64, metric string, scale float64, prec int) string {
		rec := r.Find(BenchGoodput, sys, loss, metric)
		if rec == nil || len(rec.Runs) == 0 {
			return report.Cell(0, false, scale, prec)
		}
		return report.Cell(rec.Value, true, scale, prec)
	}
	for _, l := range r.losses() {
		for _, m := range AllModes {
			if r.Find(BenchGoodput, m, l, MetricGoodput) == nil {
				continue
			}
			failed := "0"
			if rec := r.Find(BenchGoodput, m, l, MetricFailed); rec != nil {
				n := 0
				for _, v := range rec.Runs {
					n += int(v)
				}
				failed = fmt.Sprintf("%d/%d", n, len(rec.Runs))
			}
			fmt.Fprintf(&b, "%7g %-9s %8s %7s %9s %8s %5s %6s %7s %7s %8s %7s %7s %7s %6s %6s\n", l, m,
				cell(m, l, MetricGoodput, 1, 3),
				cell(m, l, MetricWireUtil, 1, 1),
				cell(m, l, MetricRetxPerPkt, 1, 4),
				cell(m, l, MetricDuplicates, 1, 0),
				cell(m, l, MetricTimeouts, 1, 0),
				cell(m, l, MetricLossEvents, 1, 0),
				cell(m, l, MetricLossDecr, 1, 0),
				cell(m, l, MetricDelayDecr, 1, 0),
				cell(m, l, MetricCwnd, 1e-3, 1),
				cell(m, l, MetricSRTT, 1, 1),
				cell(m, l, MetricFabricDelay, 1, 1),
				cell(m, l, MetricTarget, 1, 1),
				cell(m, l, MetricRealSeconds, 1, 2),
				failed)
		}
	}
	var ratios []Record
	for _, rec := range r.Records {
		if rec.Benchmark == BenchRatio {
			ratios = append(ratios, rec)
		}
	}
	if len(ratios) > 0 {
		b.WriteString("\nRatios of goodput medians (per-seed ratios in brackets)\n")
		for _, rec := range ratios {
			per := make([]string, len(rec.Runs))
			for i, v := range rec.Runs {
				per[i] = fmt.Sprintf("%.2f", v)
			}
			fmt.Fprintf(&b, "  %-19s at %5g%% loss: %6.3f  [%s]  %s\n", rec.System, rec.Loss, rec.Value, strings.Join(per, " "), rec.Note)
		}
	}
	if len(r.Header.Goals) > 0 {
		b.WriteString("\nGoals (issue)\n")
		for _, g := range r.Header.Goals {
			if !g.Evaluated {
				fmt.Fprintf(&b, "  %-40s not measured\n", g.Name)
				continue
			}
			fmt.Fprintf(&b, "  %-40s %6.3f  %s\n", g.Name, g.Value, g.Verdict())
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// machineHeader returns the header fields that describe this machine and the time.
func machineHeader() Header {
	return Header{
		Host:  report.ThisHost(),
		Date:  time.Now().UTC().Format(time.RFC3339),
		Modes: map[string]string{},
		Notes: []string{},
	}
}
