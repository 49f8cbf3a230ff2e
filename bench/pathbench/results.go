package pathbench

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/xdpndk/xdpndk/bench/internal/report"
)

// Tool is the bench's name in its Document (report.Header.Tool, report.Record.Bench).
const Tool = "pathbench"

// Systems of Records.
const (
	SystemNDK        = "xdpndk"     // the QP of a one-QP scenario
	SystemTCP        = "iperf3-tcp" // the iperf3 flow
	SystemBottleneck = "bottleneck" // the router's tbf (its counters)
	SystemPath       = "path"       // the loss injected on the path (its counters)
	SystemLinks      = "links"      // both adapters' links (their receive drops)
	SystemVeth       = "veth"       // every veth end of the bed (the kernel's drops)
	SystemAll        = "all"        // figures over every flow of a scenario (Jain's index)
)

// SystemQP returns the system name of QP i (1-based) of a multi-QP scenario: "xdpndk-qp1".
func SystemQP(i int) string { return fmt.Sprintf("xdpndk-qp%d", i) }

// Operations of Records.
const (
	OpWrite = "write" // 64 KiB RDMA Writes
	OpTCP   = "tcp"   // an iperf3 TCP stream
)

// Metrics and units of Records.
const (
	MetricGoodput    = report.MetricGbps // payload bytes delivered x 8 / window, Gbit/s
	MetricShare      = "share"           // goodput / bottleneck rate
	MetricJain       = "jain"            // Jain's fairness index of the flows' goodputs
	MetricRatio      = "ratio"           // goodput under loss / lossless goodput
	MetricTxPackets  = "tx_pkts"         // data packets the QP sent, retransmissions included
	MetricRetransmit = "retransmits"     // data packets the QP sent again
	MetricTimeouts   = "timeouts"        // the QP's retransmission-timer expiries
	MetricRTOShare   = "rto_share"       // retransmissions the timer sent / retransmissions
	MetricDrops      = "drops"           // packets dropped (tbf queue full, random loss)
	MetricSRTT       = "srtt_us"         // the QP's smoothed RTT at the end of the window, us
	MetricCwnd       = "cwnd_bytes"      // the QP's congestion window at the end of the window, bytes

	UnitGbps  = report.UnitGbps
	UnitRatio = report.UnitRatio
	UnitCount = report.UnitCount
	UnitMicro = report.UnitMicros
	UnitBytes = "bytes"
)

// Results is what a run measured. Document turns it into the report.Document that
// WriteJSON writes.
type Results struct {
	Header  Header
	Records []Record
}

// Header describes where and how the figures were measured.
type Header struct {
	report.Host
	MTU   int
	Date  string            // start of the run, RFC 3339
	Modes map[string]string // what each system ran with
	// Config is the options the run used (the Document's params).
	Config Config
	// Goals are the goals for the scenarios run, each with met or not.
	Goals []Goal
	// Notes are definitions and anything unusual (failures start with "FAILED:").
	Notes []string
}

// Config is the part of Options that shapes the figures (its JSON is the Document's
// params).
type Config struct {
	Scenarios   []string  `json:"scenarios"`
	Runs        int       `json:"runs"`
	DurationMS  int64     `json:"duration_ms"`
	WarmupMS    int64     `json:"warmup_ms"`
	SampleMS    int64     `json:"sample_ms"`
	Outstanding int       `json:"outstanding"`
	WriteSize   int       `json:"write_size"`
	RateBps     uint64    `json:"rate_bps"`
	BurstBytes  int       `json:"burst_bytes"`
	LimitBytes  int       `json:"limit_bytes"`
	RouterLoss  float64   `json:"router_loss"` // percent, each direction
	XDPLosses   []float64 `json:"xdp_losses"`  // percent, each direction
}

// Record is one figure. The scenario is the benchmark field; Loss is the random drop in
// percent, each direction, in effect while it was measured (0 for none).
type Record struct {
	report.Subject
	Loss float64
	report.Figure
}

// Ref names a figure: a Record without its values.
type Ref struct {
	Benchmark string
	System    string
	Op        string
	Size      int
	Loss      float64
	Metric    string
}

// String names the figure.
func (r Ref) String() string {
	return fmt.Sprintf("%s %s %s %d B loss %g%% %s", r.Benchmark, r.System, r.Op, r.Size, r.Loss, r.Metric)
}

// ref returns the Ref of rec.
func (rec *Record) ref() Ref {
	return Ref{rec.Benchmark, rec.System, rec.Op, rec.Size, rec.Loss, rec.Metric}
}

// Find returns the record ref names, or nil.
func (r *Results) Find(ref Ref) *Record {
	for i := range r.Records {
		if r.Records[i].ref() == ref {
			return &r.Records[i]
		}
	}
	return nil
}

// add records one measured value of a figure (a run is one value; a second add of the
// same figure appends a run). Non-finite values are dropped.
func (r *Results) add(ref Ref, unit string, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	if rec := r.Find(ref); rec != nil {
		rec.Runs = append(rec.Runs, v)
		rec.Value = report.Median(rec.Runs)
		return
	}
	r.Records = append(r.Records, Record{
		Subject: report.Subject{Benchmark: ref.Benchmark, System: ref.System, Op: ref.Op, Size: ref.Size},
		Loss:    ref.Loss,
		Figure:  report.NewFigure(ref.Metric, unit, []float64{v}),
	})
}

// Document returns r in the shared results schema: tool pathbench, the veth beds, the
// options as params, every record (its loss as the param loss_pct) and every goal.
func (r *Results) Document() *report.Document {
	h := report.NewHeader(Tool)
	h.Time, h.Host = r.Header.Date, r.Header.Host
	h.Bed = report.Bed{Link: "veth", MTU: r.Header.MTU, Queues: 1,
		Detail: "single, two, tcp, loss: A - router - B, tc tbf bottleneck on the router; xdp: A - B, the XDP programs dropping"}
	h.Modes = maps.Clone(r.Header.Modes)
	h.Params = report.ParamsOf(r.Header.Config)
	h.Notes = slices.Clone(r.Header.Notes)
	d := report.NewDocument(h)
	for _, rec := range r.Records {
		d.Records = append(d.Records, report.ToRecord(Tool, rec.Subject, map[string]float64{ParamLoss: rec.Loss}, rec.Figure))
	}
	for _, g := range r.Header.Goals {
		d.Goals = append(d.Goals, report.Goal{
			Bench: Tool, Scenario: g.Figure.Benchmark, Name: g.Name, Compared: g.Figure.String(),
			Comparison: g.Cmp, Limit: g.Limit, Unit: report.UnitRatio,
			Evaluated: g.Evaluated, Value: g.Value, Met: g.Met, Required: true,
		})
	}
	return d.Canonical()
}

// ParamLoss is the record param that holds a figure's random loss, in percent of each
// direction.
const ParamLoss = "loss_pct"

// WriteJSON writes r's Document as indented JSON to path, creating its directory.
func (r *Results) WriteJSON(path string) error { return r.Document().WriteJSON(path) }

// ReadJSON reads a Document written by WriteJSON.
func ReadJSON(path string) (*report.Document, error) { return report.ReadDocument(path) }

// WriteTable prints the figures, one section per scenario, then the goals.
func (r *Results) WriteTable(w io.Writer) error {
	var b strings.Builder
	titles := map[string]string{
		ScenarioSingle: "single: one QP through the bottleneck",
		ScenarioTwo:    "two: two QPs through the bottleneck, the second started a warm-up later; Jain over the second half of the window",
		ScenarioTCP:    "tcp: one QP and one iperf3 TCP flow through the bottleneck",
		ScenarioLoss:   "loss: one QP through the bottleneck, the router dropping at random in both directions",
		ScenarioXDP:    "xdp: one QP on the plain bed, the XDP programs dropping at random in both directions",
	}
	for _, sc := range AllScenarios {
		first := true
		for _, rec := range r.Records {
			if rec.Benchmark != sc {
				continue
			}
			if first {
				fmt.Fprintf(&b, "%s; median of %d runs\n  %-11s %-5s %6s %7s %-12s %12s %s\n", titles[sc], r.Header.Config.Runs, "system", "op", "size", "loss %", "metric", "value", "unit")
				first = false
			}
			prec := 3
			if rec.Unit == UnitCount || rec.Unit == UnitBytes {
				prec = 0
			}
			fmt.Fprintf(&b, "  %-11s %-5s %6d %7g %-12s %12s %s\n", rec.System, rec.Op, rec.Size, rec.Loss, rec.Metric,
				report.Cell(rec.Value, true, 1, prec), rec.Unit)
		}
		if !first {
			b.WriteString("\n")
		}
	}
	if len(r.Header.Goals) > 0 {
		b.WriteString("Goals\n")
		for _, g := range r.Header.Goals {
			fmt.Fprintf(&b, "  %s\n", g.Line())
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
