package linkbench

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
const Tool = "linkbench"

// Benchmark names, operations, metrics and units used in Records. The metrics several
// benches share are bench/internal/report's.
const (
	BenchOneWay   = "oneway"
	BenchPingPong = "pingpong"

	OpSend = "send"
	OpRTT  = "ping-pong"

	MetricPPS         = report.MetricMsgRate // received datagrams per second (the headline)
	MetricGbps        = report.MetricGbps    // received IP packet bytes, in Gbit/s
	MetricTxPPS       = "tx_msg_per_s"       // datagrams the sender handed over per second
	MetricLoss        = "loss_pct"           // percent of sent datagrams never received
	MetricKicksPerPkt = "kicks_per_msg"      // TX system calls per datagram sent
	MetricAllocs      = "allocs"             // heap objects the whole process allocated in the window
	MetricCPUMsg      = report.MetricCPUMsg  // the process's CPU (both hosts) per datagram received, us
	MetricCores       = report.MetricCores   // the process's CPU over the window's wall time
	MetricRTTP50      = report.MetricRTTP50
	MetricRTTP90      = report.MetricRTTP90
	MetricRTTP99      = report.MetricRTTP99
	MetricRTTMean     = report.MetricRTTMean
	MetricRTTLost     = "rtt_lost"         // round trips with no echo within the per-trip timeout
	MetricUnsupported = report.MetricUnsup // the system cannot carry this size; Note says why

	UnitPPS     = report.UnitMsgRate
	UnitGbps    = report.UnitGbps
	UnitPercent = "%"
	UnitRatio   = report.UnitRatio
	UnitObjects = "objects"
	UnitMicros  = report.UnitMicros
	UnitCount   = report.UnitCount
	UnitCPUMsg  = report.UnitCPUMsg
	UnitCores   = report.UnitCores
)

// Results is what a run measured: the header describing the machine and the modes, and one
// Record per figure. Document turns it into the report.Document that WriteJSON writes.
type Results struct {
	Header  Header
	Records []Record
}

// Header describes where and how the figures were measured.
type Header struct {
	report.Host        // host, kernel, cpu, cpus, go
	MTU         int    // of the veth pair, bytes
	Queues      int    // per veth end
	Date        string // start of the run, RFC 3339
	// Modes maps each measured system to what it ran with (for xdpndk, xdp.Device's Mode).
	Modes map[string]string
	// Config is the options the run used (the Document's params).
	Config Config
	// Notes are definitions and anything unusual that happened.
	Notes []string
}

// Config is the part of Options that shapes the figures, as recorded in the header.
type Config struct {
	DurationMS     int64    `json:"duration_ms"`
	WarmupMS       int64    `json:"warmup_ms"`
	Runs           int      `json:"runs"`
	PingPongN      int      `json:"pingpong_n"`
	PingPongWarmup int      `json:"pingpong_warmup"`
	Sizes          []int    `json:"sizes"`
	Systems        []string `json:"systems"`
	Batch          int      `json:"batch"`
	AsavieQueue    int      `json:"asavie_queue"`
}

// Record is one figure: the median over the runs of one metric of one system at one size.
type Record struct {
	// Benchmark is BenchOneWay or BenchPingPong, System one of the System* names, Op
	// OpSend or OpRTT, Size the IP packet length in bytes.
	report.Subject
	// Value is the median of Runs, one value per run in run order.
	report.Figure
}

// key identifies the figure a Record is about, without its values.
type key struct {
	bench, system, op string
	size              int
	metric            string
}

// collector gathers the per-run values of each figure, keeping first-seen order.
type collector struct {
	order []key
	recs  map[key]*Record
}

func newCollector() *collector { return &collector{recs: map[key]*Record{}} }

// add appends one run's value of a figure. Non-finite values are not recorded.
func (c *collector) add(bench, system, op string, size int, metric, unit string, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	r := c.get(key{bench, system, op, size, metric})
	r.Unit = unit
	r.Runs = append(r.Runs, v)
}

// unsupported records that system cannot carry size, with the reason.
func (c *collector) unsupported(bench, system, op string, size int, why string) {
	r := c.get(key{bench, system, op, size, MetricUnsupported})
	r.Note = why
}

func (c *collector) get(k key) *Record {
	r, ok := c.recs[k]
	if !ok {
		r = &Record{
			Subject: report.Subject{Benchmark: k.bench, System: k.system, Op: k.op, Size: k.size},
			Figure:  report.Figure{Metric: k.metric, Runs: []float64{}},
		}
		c.recs[k] = r
		c.order = append(c.order, k)
	}
	return r
}

// records returns the figures with their medians, in first-seen order.
func (c *collector) records() []Record {
	out := make([]Record, 0, len(c.order))
	for _, k := range c.order {
		r := *c.recs[k]
		r.Runs = slices.Clone(r.Runs)
		r.Value = report.Median(r.Runs)
		out = append(out, r)
	}
	return out
}

// RTTStats summarises round-trip times (microseconds).
type RTTStats = report.Latency

// Document returns r in the shared results schema: tool linkbench, the veth bed, the
// options as params, every record (systems and metrics as named here), no goals.
func (r *Results) Document() *report.Document {
	h := report.NewHeader(Tool)
	h.Time, h.Host = r.Header.Date, r.Header.Host
	h.Bed = report.Bed{Link: "veth", MTU: r.Header.MTU, Queues: r.Header.Queues,
		Detail: fmt.Sprintf("two network namespaces, static neighbours; our link on queue 0, asavie's on queue %d", max(r.Header.Config.AsavieQueue, 1))}
	h.Modes = maps.Clone(r.Header.Modes)
	h.Params = report.ParamsOf(r.Header.Config)
	h.Notes = slices.Clone(r.Header.Notes)
	d := report.NewDocument(h)
	for _, rec := range r.Records {
		dr := report.ToRecord(Tool, rec.Subject, nil, rec.Figure)
		if dr.Metric == MetricGbps && dr.Note == "" {
			dr.Note = "IP packet bytes"
		}
		if (dr.Metric == MetricCPUMsg || dr.Metric == MetricCores) && dr.Note == "" {
			dr.Note = cpuNote(dr.System)
		}
		d.Records = append(d.Records, dr)
	}
	return d.Canonical()
}

// cpuNote is what a reader of a CPU figure of system needs beside it.
func cpuNote(system string) string {
	if system == SystemKernelUDP {
		return "process CPU (user+system, both hosts in one process) over the window, per datagram received (ping-pong: per datagram each way); the receivers block, the sender loops"
	}
	return "process CPU (user+system, both hosts in one process) over the window, per datagram received (ping-pong: per datagram each way); polls: a whole core per side whatever the rate"
}

// Find returns the record of one figure, or nil.
func (r *Results) Find(bench, system string, size int, metric string) *Record {
	for i := range r.Records {
		rec := &r.Records[i]
		if rec.Benchmark == bench && rec.System == system && rec.Size == size && rec.Metric == metric {
			return rec
		}
	}
	return nil
}

// WriteJSON writes r's Document as indented JSON to path, creating its directory. It
// writes a temporary file first and renames it, so a reader never sees half a document.
func (r *Results) WriteJSON(path string) error { return r.Document().WriteJSON(path) }

// ReadJSON reads a Document written by WriteJSON.
func ReadJSON(path string) (*report.Document, error) { return report.ReadDocument(path) }

// WriteTable prints the figures as three tables: one-way, ping-pong, and the ratio of
// xdpndk to asavie for each figure both have.
func (r *Results) WriteTable(w io.Writer) error {
	var b strings.Builder
	systems := r.systems()
	sizes := r.sizes(BenchOneWay)
	val := func(bench, sys string, size int, metric string) (float64, bool) {
		rec := r.Find(bench, sys, size, metric)
		if rec == nil || len(rec.Runs) == 0 {
			return 0, false
		}
		return rec.Value, true
	}
	cell := func(bench, sys string, size int, metric string, scale float64, prec int) string {
		v, ok := val(bench, sys, size, metric)
		return report.Cell(v, ok, scale, prec)
	}
	runs := r.Header.Config.Runs

	if len(sizes) > 0 {
		fmt.Fprintf(&b, "One-way, B receiving from A (median of %d; size = IP packet length; rates are what B received)\n", runs)
		fmt.Fprintf(&b, "%-20s %5s %9s %9s %9s %8s %7s\n", "system", "size", "rx Mpps", "rx Gb/s", "tx Mpps", "loss %", "kicks/p")
		for _, sys := range systems {
			for _, size := range sizes {
				if rec := r.Find(BenchOneWay, sys, size, MetricUnsupported); rec != nil {
					fmt.Fprintf(&b, "%-20s %5d   unsupported: %s\n", sys, size, rec.Note)
					continue
				}
				if _, ok := val(BenchOneWay, sys, size, MetricPPS); !ok {
					continue
				}
				fmt.Fprintf(&b, "%-20s %5d %9s %9s %9s %8s %7s\n", sys, size,
					cell(BenchOneWay, sys, size, MetricPPS, 1e-6, 3),
					cell(BenchOneWay, sys, size, MetricGbps, 1, 2),
					cell(BenchOneWay, sys, size, MetricTxPPS, 1e-6, 3),
					cell(BenchOneWay, sys, size, MetricLoss, 1, 2),
					cell(BenchOneWay, sys, size, MetricKicksPerPkt, 1, 3))
			}
		}
		b.WriteString("\n")
	}

	if r.has(BenchPingPong) {
		fmt.Fprintf(&b, "Ping-pong, %d-byte datagrams, A<->B round trip in us (median of %d)\n", PingSize, runs)
		fmt.Fprintf(&b, "%-20s %8s %8s %8s %8s %6s\n", "system", "p50", "p90", "p99", "mean", "lost")
		for _, sys := range systems {
			if _, ok := val(BenchPingPong, sys, PingSize, MetricRTTP50); !ok {
				continue
			}
			fmt.Fprintf(&b, "%-20s %8s %8s %8s %8s %6s\n", sys,
				cell(BenchPingPong, sys, PingSize, MetricRTTP50, 1, 2),
				cell(BenchPingPong, sys, PingSize, MetricRTTP90, 1, 2),
				cell(BenchPingPong, sys, PingSize, MetricRTTP99, 1, 2),
				cell(BenchPingPong, sys, PingSize, MetricRTTMean, 1, 2),
				cell(BenchPingPong, sys, PingSize, MetricRTTLost, 1, 0))
		}
		b.WriteString("\n")
	}

	type ratio struct {
		bench  string
		size   int
		metric string
		label  string
	}
	var ratios []ratio
	for _, size := range sizes {
		ratios = append(ratios,
			ratio{BenchOneWay, size, MetricPPS, fmt.Sprintf("one-way %d B rx pkt/s (higher is better)", size)},
			ratio{BenchOneWay, size, MetricGbps, fmt.Sprintf("one-way %d B rx Gbit/s (higher is better)", size)})
	}
	for _, m := range []string{MetricRTTP50, MetricRTTP90, MetricRTTP99, MetricRTTMean} {
		ratios = append(ratios, ratio{BenchPingPong, PingSize, m, fmt.Sprintf("ping-pong %s (lower is better)", strings.TrimSuffix(strings.TrimPrefix(m, "rtt_"), "_us"))})
	}
	header := false
	for _, q := range ratios {
		x, okx := val(q.bench, SystemXDPNDK, q.size, q.metric)
		y, oky := val(q.bench, SystemAsavie, q.size, q.metric)
		var line string
		switch {
		case okx && oky && y != 0:
			line = fmt.Sprintf("  %-45s %6.2f\n", q.label, x/y)
		case okx && r.Find(q.bench, SystemAsavie, q.size, MetricUnsupported) != nil:
			line = fmt.Sprintf("  %-45s %s\n", q.label, "  n/a (asavie: unsupported)")
		default:
			continue
		}
		if !header {
			b.WriteString("Ratio xdpndk / asavie (medians)\n")
			header = true
		}
		b.WriteString(line)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// systems returns the systems that have records, in measuring order.
func (r *Results) systems() []string {
	var out []string
	for _, s := range systemOrder {
		for _, rec := range r.Records {
			if rec.System == s {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// sizes returns the sizes that have records of bench, ascending.
func (r *Results) sizes(bench string) []int {
	return report.Values(r.Records, func(rec Record) (int, bool) { return rec.Size, rec.Benchmark == bench })
}

func (r *Results) has(bench string) bool {
	for _, rec := range r.Records {
		if rec.Benchmark == bench {
			return true
		}
	}
	return false
}
