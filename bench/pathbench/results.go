package pathbench

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/xdpndk/xdpndk/bench/internal/report"
)

// Systems of Records.
const (
	SystemNDK        = "ndk"        // the QP of a one-QP scenario
	SystemTCP        = "kernel-tcp" // the iperf3 flow
	SystemBottleneck = "bottleneck" // the router's tbf (its counters)
	SystemPath       = "path"       // the loss injected on the path (its counters)
	SystemLinks      = "links"      // both adapters' links (their receive drops)
	SystemVeth       = "veth"       // every veth end of the bed (the kernel's drops)
	SystemAll        = "all"        // figures over every flow of a scenario (Jain's index)
)

// SystemQP returns the system name of QP i (1-based) of a multi-QP scenario: "ndk-qp1".
func SystemQP(i int) string { return fmt.Sprintf("ndk-qp%d", i) }

// Operations of Records.
const (
	OpWrite = "write" // 64 KiB RDMA Writes
	OpTCP   = "tcp"   // an iperf3 TCP stream
)

// Metrics and units of Records.
const (
	MetricGoodput    = "goodput"     // payload bytes delivered x 8 / window, Gbit/s
	MetricShare      = "share"       // goodput / bottleneck rate
	MetricJain       = "jain"        // Jain's fairness index of the flows' goodputs
	MetricRatio      = "ratio"       // goodput under loss / lossless goodput
	MetricTxPackets  = "tx_pkts"     // data packets the QP sent, retransmissions included
	MetricRetransmit = "retransmits" // data packets the QP sent again
	MetricTimeouts   = "timeouts"    // the QP's retransmission-timer expiries
	MetricRTOShare   = "rto_share"   // retransmissions the timer sent / retransmissions
	MetricDrops      = "drops"       // packets dropped (tbf queue full, random loss)
	MetricSRTT       = "srtt"        // the QP's smoothed RTT at the end of the window, us
	MetricCwnd       = "cwnd"        // the QP's congestion window at the end of the window, bytes

	UnitGbps  = "Gbit/s"
	UnitRatio = "1"
	UnitCount = "count"
	UnitMicro = "us"
	UnitBytes = "bytes"
)

// Results is what a run measured: the JSON document WriteJSON writes.
type Results struct {
	Header  Header   `json:"header"`
	Records []Record `json:"records"`
}

// Header describes where and how the figures were measured.
type Header struct {
	report.Host
	MTU   int               `json:"mtu"`
	Date  string            `json:"date"`  // start of the run, RFC 3339
	Modes map[string]string `json:"modes"` // what each system ran with
	// Config is the options the run used.
	Config Config `json:"config"`
	// Goals are the goals for the scenarios run, each with met or not.
	Goals []Goal `json:"goals"`
	// Notes are definitions and anything unusual (failures start with "FAILED:").
	Notes []string `json:"notes"`
}

// Config is the part of Options that shapes the figures.
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
	Loss float64 `json:"loss"`
	report.Figure
}

// Ref names a figure: a Record without its values.
type Ref struct {
	Benchmark string  `json:"benchmark"`
	System    string  `json:"system"`
	Op        string  `json:"op"`
	Size      int     `json:"size"`
	Loss      float64 `json:"loss"`
	Metric    string  `json:"metric"`
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

// WriteJSON writes r as indented JSON to path, creating its directory.
func (r *Results) WriteJSON(path string) error { return report.WriteJSON(path, r) }

// ReadJSON reads results written by WriteJSON.
func ReadJSON(path string) (*Results, error) { return report.ReadJSON[Results](path) }

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
