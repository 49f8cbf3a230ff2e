package ndkbench

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
const Tool = "ndkbench"

// Benchmark names of Records (report.Record.Scenario).
const (
	BenchPingPong = "pingpong" // round trips: ndk Send/Receive, raw datagrams, TCP
	BenchLatency  = "latency"  // post one ndk request, poll its completion
	BenchMsgRate  = "msgrate"  // pipelined 64-byte ndk Writes
	BenchGoodput  = "goodput"  // pipelined 64 KiB ndk Writes
	BenchOneWay   = "oneway"   // raw link one-way (bench/linkbench)
	BenchIdle     = "idle"     // an idle ndk pair: the process's CPU over a window
	BenchEngines  = "engines"  // pipelined 64-byte ndk Writes over adapters of several engines
	BenchScale    = "scale"    // 64-byte ndk Writes on one of many connected QPs, and over all
	BenchGoal     = "goal"     // a goal's ratio
)

// Systems of Records besides the ndk ones (SystemNDK).
const (
	// SystemRaw is our AF_XDP link without transport or verbs (bench/linkbench's
	// raw-xdpndk).
	SystemRaw = "raw-xdpndk"
	// SystemTCP is a kernel TCP connection with TCP_NODELAY, between the namespaces.
	SystemTCP = "kernel-tcp"
)

// SystemNDK returns the system name of ndk in a progress mode: "xdpndk-inline" and so on.
func SystemNDK(mode string) string { return "xdpndk-" + mode }

// SystemEngines returns the system name of the engines figure's adapters of n engines:
// "xdpndk-inline-1engine", "xdpndk-inline-2engines".
func SystemEngines(n int) string {
	if n == 1 {
		return "xdpndk-inline-1engine"
	}
	return fmt.Sprintf("xdpndk-inline-%dengines", n)
}

// Operations of Records.
const (
	OpRTT                = "ping-pong"            // raw and TCP ping-pong
	OpSendRecv           = "send/recv"            // ndk ping-pong: Send answered by a Send
	OpSendRecvUnresolved = "send/recv+unresolved" // ndk ping-pong while the adapter resolves peers nobody answers for
	OpSendRecvWait       = "send/recv+wait"       // ndk ping-pong, both loops wait in CQ.Wait instead of polling
	OpSendRecvDelay      = "send/recv+1ms"        // ndk ping-pong, B answers 1 ms after each receive
	OpSendRecvDelayWait  = "send/recv+1ms+wait"   // the same, A waits for the answer in CQ.Wait (it sleeps)
	OpIdleWait           = "wait"                 // idle pair: B blocked in CQ.Wait, nobody polls A
	OpWrite              = "write"                // ndk Write, every request signaled
	OpWriteSilent        = "write-silent"         // ndk Write, NDK_OP_FLAG_SILENT_SUCCESS but every SignalEvery-th
	OpRead               = "read"                 // ndk Read
	OpWriteUMEM          = "write-umem"           // goodput Writes from Adapter.Alloc memory (zero-copy path)
	OpWriteHeap          = "write-heap"           // goodput Writes from Go heap memory (copy path)
	OpWriteOneQP         = "write-1qp"            // scale: Writes on QP 0 of Options.Scale connected QPs
	OpWriteAllQPs        = "write-allqp"          // scale: Writes spread over all Options.Scale QPs
	OpIdleWaitScale      = "wait-allqp"           // idle with Options.Scale QP pairs connected, B in CQ.Wait
	OpSend               = "send"                 // raw one-way
	OpRatio              = "ratio"                // goal records
)

// Metrics and units of Records. The latencies (a ping-pong's round trip, or a request's
// from its post to its completion) are round trips: bench/internal/report's rtt_* metrics.
const (
	MetricP50       = report.MetricRTTP50  // microseconds
	MetricP90       = report.MetricRTTP90  // microseconds
	MetricP99       = report.MetricRTTP99  // microseconds
	MetricMean      = report.MetricRTTMean // microseconds
	MetricSamples   = "samples"            // round trips or requests timed (after warm-up)
	MetricLost      = "lost"               // round trips not completed within their timeout
	MetricOps       = report.MetricMsgRate // requests completed per second
	MetricCQEs      = "cqe_per_s"          // completions taken from the CQ per second
	MetricAllocs    = "allocs_per_op"      // heap objects the process allocated per request
	MetricPPS       = report.MetricMsgRate // datagrams received per second
	MetricGbps      = report.MetricGbps    // Gbit/s: payload bytes (ndk), IP packet bytes (raw)
	MetricRatio     = "ratio"              // a goal's ratio
	MetricCPU       = "cpu_s"              // user+system CPU seconds of the process in the window
	MetricWall      = "wall_s"             // the window's length in seconds
	MetricCore      = report.MetricCores   // cpu_s / wall_s: cores kept busy
	MetricCPUOp     = report.MetricCPUMsg  // user+system CPU of the process (both hosts) per completed request, us
	MetricForwarded = "forwarded"          // datagrams forwarded between engines in the window (both hosts)
	MetricQPMin     = "qp_min_per_s"       // scale: the Writes per second of the QP that completed fewest
	MetricQPMax     = "qp_max_per_s"       // scale: the Writes per second of the QP that completed most

	UnitMicros  = report.UnitMicros
	UnitCount   = report.UnitCount
	UnitPerSec  = report.UnitMsgRate
	UnitObjects = "objects"
	UnitGbps    = report.UnitGbps
	UnitRatio   = report.UnitRatio
	UnitSeconds = "s"
	UnitCores   = report.UnitCores
	UnitCPUOp   = report.UnitCPUMsg
)

// Results is what a run measured: the header and one Record per figure. Document turns it
// into the report.Document that WriteJSON writes.
type Results struct {
	Header  Header
	Records []Record
}

// Header describes where and how the figures were measured.
type Header struct {
	report.Host
	MTU    int               // of the veth pair, bytes
	Queues int               // per veth end
	Date   string            // start of the run, RFC 3339
	Modes  map[string]string // what each system ran with
	// Config is the options the run used (the Document's params).
	Config Config
	// Goals are the goal ratios, evaluated.
	Goals []Goal
	// Notes are definitions and anything unusual (failures start with "FAILED:").
	Notes []string
}

// Config is the part of Options that shapes the figures (its JSON is the Document's
// params).
type Config struct {
	Runs               int      `json:"runs"`
	Modes              []string `json:"modes"`
	PingPongN          int      `json:"pingpong_n"`
	PingPongWarmup     int      `json:"pingpong_warmup"`
	LatencyN           int      `json:"latency_n"`
	BoundMS            int64    `json:"bound_ms"`
	DurationMS         int64    `json:"duration_ms"`
	WarmupMS           int64    `json:"warmup_ms"`
	Outstanding        int      `json:"outstanding"`
	SignalEvery        int      `json:"signal_every"`
	GoodputOutstanding int      `json:"goodput_outstanding"`
	Baselines          bool     `json:"baselines"`
	IdleMS             int64    `json:"idle_ms"`
	AllQueues          bool     `json:"all_queues"`
	Engines            []int    `json:"engines,omitempty"`
	EngineQPs          int      `json:"engine_qps,omitempty"`
	EngineLoops        string   `json:"engine_loops,omitempty"`
	OnlyEngines        bool     `json:"only_engines,omitempty"`
	Scale              int      `json:"scale_qps"`
	ScaleOutstanding   int      `json:"scale_outstanding"`
	ScaleIdleMS        int64    `json:"scale_idle_ms"`
}

// Record is one figure: the median over the repetitions of one metric.
type Record struct {
	report.Subject
	report.Figure
	// Reps holds the repetition (0-based) each value of Runs comes from, so that figures
	// of one repetition can be paired even when a repetition failed for one system.
	Reps []int
}

// Ref names a figure: a Record without its values.
type Ref struct {
	Benchmark string
	System    string
	Op        string
	Size      int
	Metric    string
}

// String names the figure: system, benchmark, operation, size and metric.
func (r Ref) String() string {
	return fmt.Sprintf("%s %s %s %d B %s", r.System, r.Benchmark, r.Op, r.Size, r.Metric)
}

// collector gathers the per-repetition values of each figure, keeping first-seen order.
type collector struct {
	order []Ref
	recs  map[Ref]*Record
}

func newCollector() *collector { return &collector{recs: map[Ref]*Record{}} }

// add records repetition rep's value v of figure ref. Non-finite values are dropped.
func (c *collector) add(ref Ref, unit string, rep int, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	r, ok := c.recs[ref]
	if !ok {
		r = &Record{
			Subject: report.Subject{Benchmark: ref.Benchmark, System: ref.System, Op: ref.Op, Size: ref.Size},
			Figure:  report.Figure{Metric: ref.Metric, Runs: []float64{}},
			Reps:    []int{},
		}
		c.recs[ref] = r
		c.order = append(c.order, ref)
	}
	r.Unit = unit
	r.Runs = append(r.Runs, v)
	r.Reps = append(r.Reps, rep)
}

// addLatency records the statistics of one latency or round-trip measurement.
func (c *collector) addLatency(bench, system, op string, size, rep int, s LatencyStats, lost int) {
	ref := func(m string) Ref { return Ref{bench, system, op, size, m} }
	c.add(ref(MetricP50), UnitMicros, rep, s.P50)
	c.add(ref(MetricP90), UnitMicros, rep, s.P90)
	c.add(ref(MetricP99), UnitMicros, rep, s.P99)
	c.add(ref(MetricMean), UnitMicros, rep, s.Mean)
	c.add(ref(MetricSamples), UnitCount, rep, float64(s.N))
	c.add(ref(MetricLost), UnitCount, rep, float64(lost))
}

// records returns the figures with their medians, in first-seen order.
func (c *collector) records() []Record {
	out := make([]Record, 0, len(c.order))
	for _, k := range c.order {
		r := *c.recs[k]
		r.Runs = slices.Clone(r.Runs)
		r.Reps = slices.Clone(r.Reps)
		r.Value = report.Median(r.Runs)
		out = append(out, r)
	}
	return out
}

// Find returns the record of a figure, or nil.
func (r *Results) Find(ref Ref) *Record { return findRecord(r.Records, ref) }

// findRecord returns the record of recs that ref names, or nil.
func findRecord(recs []Record, ref Ref) *Record {
	for i := range recs {
		rec := &recs[i]
		if rec.Benchmark == ref.Benchmark && rec.System == ref.System && rec.Op == ref.Op &&
			rec.Size == ref.Size && rec.Metric == ref.Metric {
			return rec
		}
	}
	return nil
}

// Document returns r in the shared results schema: tool ndkbench, the veth bed, the
// options as params, every record (with the repetitions of its runs) and every goal.
func (r *Results) Document() *report.Document {
	h := report.NewHeader(Tool)
	h.Time, h.Host = r.Header.Date, r.Header.Host
	detail := "two network namespaces, static neighbours; the ndk adapters serve queue 0"
	if r.Header.Config.AllQueues {
		detail = "two network namespaces, static neighbours; the ndk adapters serve every queue"
	}
	h.Bed = report.Bed{Link: "veth", MTU: r.Header.MTU, Queues: r.Header.Queues, Detail: detail}
	h.Modes = maps.Clone(r.Header.Modes)
	h.Params = report.ParamsOf(r.Header.Config)
	h.Notes = slices.Clone(r.Header.Notes)
	d := report.NewDocument(h)
	for _, rec := range r.Records {
		dr := report.ToRecord(Tool, rec.Subject, nil, rec.Figure)
		if len(rec.Reps) > 0 {
			dr.Reps = slices.Clone(rec.Reps)
		}
		if dr.Note == "" {
			dr.Note = recordNote(rec)
		}
		d.Records = append(d.Records, dr)
	}
	for _, g := range r.Header.Goals {
		d.Goals = append(d.Goals, g.report())
	}
	return d.Canonical()
}

// recordNote is what a reader of a figure needs to know beside it.
func recordNote(rec Record) string {
	switch {
	case rec.Metric == MetricCPUOp || rec.Metric == MetricCore && rec.Benchmark != BenchIdle:
		return "process CPU (user+system, both hosts in one process) over the window; with inline progress both loops poll, a whole core each when they get one"
	case rec.Benchmark == BenchOneWay && rec.Metric == MetricGbps:
		return "IP packet bytes"
	case rec.Benchmark == BenchGoodput && rec.Metric == MetricGbps:
		return "payload bytes"
	}
	return ""
}

// WriteJSON writes r's Document as indented JSON to path, creating its directory.
func (r *Results) WriteJSON(path string) error { return r.Document().WriteJSON(path) }

// ReadJSON reads a Document written by WriteJSON.
func ReadJSON(path string) (*report.Document, error) { return report.ReadDocument(path) }

// column is one column of a table section: a metric shown with a scale and precision.
type column struct {
	title  string
	metric string
	scale  float64
	prec   int
}

var (
	latencyCols = []column{{"p50", MetricP50, 1, 2}, {"p90", MetricP90, 1, 2}, {"p99", MetricP99, 1, 2},
		{"mean", MetricMean, 1, 2}, {"samples", MetricSamples, 1, 0}, {"lost", MetricLost, 1, 0}}
	rateCols    = []column{{"Mop/s", MetricOps, 1e-6, 3}, {"CQE M/s", MetricCQEs, 1e-6, 3}, {"allocs/op", MetricAllocs, 1, 3}, cpuCols[0], cpuCols[1]}
	onewayCols  = []column{{"Mpps", MetricPPS, 1e-6, 3}, {"Gbit/s", MetricGbps, 1, 2}}
	scaleCols   = []column{{"Mop/s", MetricOps, 1e-6, 3}, {"QP min/s", MetricQPMin, 1, 0}, {"QP max/s", MetricQPMax, 1, 0}, {"allocs/op", MetricAllocs, 1, 3}, cpuCols[0], cpuCols[1]}
	goodputCols = []column{{"Gbit/s", MetricGbps, 1, 2}, {"Mop/s", MetricOps, 1e-6, 4}, {"allocs/op", MetricAllocs, 1, 3}, cpuCols[0], cpuCols[1]}
	idleCols    = []column{{"CPU s", MetricCPU, 1, 4}, {"wall s", MetricWall, 1, 2}, {"% core", MetricCore, 100, 3}}
	cpuCols     = []column{{"CPU us/op", MetricCPUOp, 1, 3}, {"cores", MetricCore, 1, 2}}
)

// WriteTable prints the figures, one section per benchmark, then the goals.
func (r *Results) WriteTable(w io.Writer) error {
	var b strings.Builder
	runs := r.Header.Config.Runs
	c := r.Header.Config
	sections := []struct {
		bench, title string
		cols         []column
	}{
		{BenchPingPong, fmt.Sprintf("Ping-pong, round trip in us (ndk: %d-byte Send answered by a Send; raw-xdp: 64-byte IP packets; kernel-tcp: 64-byte messages)", MsgSize), latencyCols},
		{BenchLatency, fmt.Sprintf("ndk latency in us: post one %d-byte request, poll until it completes", MsgSize), latencyCols},
		{BenchMsgRate, fmt.Sprintf("ndk %d-byte Write message rate on one QP, %d outstanding (write-silent: every %d-th signaled)", MsgSize, c.Outstanding, c.SignalEvery), rateCols},
		{BenchScale, fmt.Sprintf("ndk %d-byte Write message rate with %d connected QP pairs: on QP 0 alone (%d outstanding), over all (%d outstanding on each)", MsgSize, c.Scale, c.Outstanding, c.ScaleOutstanding), scaleCols},
		{BenchGoodput, fmt.Sprintf("ndk %d KiB Write goodput at MTU %d, %d outstanding (payload bytes)", GoodputSize>>10, r.Header.MTU, c.GoodputOutstanding), goodputCols},
		{BenchOneWay, "raw-xdp one-way, what B received (size = IP packet length; Gbit/s counts IP packet bytes)", onewayCols},
		{BenchIdle, "ndk idle: both adapters open with their connected QP (wait-allqp: all the scale figures' QP pairs), B's application blocked in CQ.Wait, A's polling nothing; the process's CPU (user+system) over the window", idleCols},
	}
	for _, s := range sections {
		rows := r.rows(s.bench)
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(&b, "%s, median of %d\n", s.title, runs)
		opw := 12 // the op column fits the longest op of the section
		for _, row := range rows {
			opw = max(opw, len(row.Op))
		}
		fmt.Fprintf(&b, "  %-13s %-*s %6s", "system", opw, "op", "size")
		for _, col := range s.cols {
			fmt.Fprintf(&b, " %9s", col.title)
		}
		b.WriteString("\n")
		for _, row := range rows {
			fmt.Fprintf(&b, "  %-13s %-*s %6d", row.System, opw, row.Op, row.Size)
			for _, col := range s.cols {
				rec := r.Find(Ref{s.bench, row.System, row.Op, row.Size, col.metric})
				ok := rec != nil && len(rec.Runs) > 0
				v := 0.0
				if ok {
					v = rec.Value
				}
				fmt.Fprintf(&b, " %9s", report.Cell(v, ok, col.scale, col.prec))
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	if len(r.Header.Goals) > 0 {
		fmt.Fprintf(&b, "Goals: ratio = median over repetitions of (ndk figure / baseline figure of the same repetition)\n")
		for _, g := range r.Header.Goals {
			fmt.Fprintf(&b, "  %s\n", g.Line())
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// rows returns the distinct (system, op, size) of bench's records, in first-seen order.
func (r *Results) rows(bench string) []report.Subject {
	var out []report.Subject
	for _, rec := range r.Records {
		if rec.Benchmark == bench && !slices.Contains(out, rec.Subject) {
			out = append(out, rec.Subject)
		}
	}
	return out
}
