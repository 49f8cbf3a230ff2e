package compare

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/xdpndk/xdpndk/bench/internal/report"
)

// Results is what a run measured: its header (bed, modes, params, notes), one record per
// figure and the goals, evaluated.
type Results struct {
	Header  report.Header
	Records []report.Record
	Goals   []report.Goal
}

// Document returns r in the shared results schema.
func (r *Results) Document() *report.Document {
	d := report.NewDocument(r.Header)
	d.Header.Notes = slices.Clone(r.Header.Notes)
	d.Records = slices.Clone(r.Records)
	d.Goals = slices.Clone(r.Goals)
	return d.Canonical()
}

// WriteJSON writes r's Document as indented JSON to path, creating its directory.
func (r *Results) WriteJSON(path string) error { return r.Document().WriteJSON(path) }

// ReadJSON reads a Document written by WriteJSON.
func ReadJSON(path string) (*report.Document, error) { return report.ReadDocument(path) }

// Find returns the record ref names, or nil.
func (r *Results) Find(ref Ref) *report.Record { return findRecord(r.Records, ref) }

// summaryCol is a column of the summary: a figure of each system (the first of its refs
// found), or with max the highest Gbit/s of the system's streams.
type summaryCol struct {
	title string
	refs  func(system string) []Ref // candidates, the first found wins (or the max, with max)
	max   bool
}

// streamOp is the operation of a system's 64 B and 64 KiB stream figures in the summary:
// xdpndk's Write (the verb RDMA applications stream with), the others' sends.
func streamOp(system string) string {
	if system == SystemXDPNDK || system == SystemXDPNDKEvents {
		return OpWrite
	}
	return OpSend
}

var summaryCols = []summaryCol{
	{"64 B RTT p50 us", func(s string) []Ref {
		return []Ref{{ScenarioPingPong, s, OpPingPong, PingSize, report.MetricRTTP50, ""}}
	}, false},
	{"64 B RTT mean us", func(s string) []Ref {
		return []Ref{{ScenarioPingPong, s, OpPingPong, PingSize, report.MetricRTTMean, ""}}
	}, false},
	{"64 B msg/s", func(s string) []Ref {
		return []Ref{{ScenarioStream, s, streamOp(s), 64, report.MetricMsgRate, ""}}
	}, false},
	{"64 KiB Gbit/s", func(s string) []Ref {
		return []Ref{{ScenarioStream, s, streamOp(s), 64 << 10, report.MetricGbps, ""}, {ScenarioStream, s, OpSend, 65507, report.MetricGbps, ""}}
	}, false},
	{"peak Gbit/s", nil, true},
	{"CPU us/64 B msg", func(s string) []Ref {
		return []Ref{{ScenarioStream, s, streamOp(s), 64, report.MetricCPUMsg, ""}}
	}, false},
	{"64 B RTT loaded mean us", func(s string) []Ref {
		return []Ref{{ScenarioLoaded, s, OpPingPong, PingSize, report.MetricRTTMean, paramsKey(loadParams(LoadSize))}}
	}, false},
}

// WriteTable prints the summary: per system, its 64 B round trip, 64 B message rate,
// 64 KiB and peak bandwidth, CPU per 64 B message and loaded round trip (medians); then
// the goals.
func (r *Results) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "compare: medians of %v repetitions; the streams are xdpndk's Writes and the others' sends; the raw link's sizes are IP packets\n", r.Header.Params["runs"])
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "system\t")
	for _, c := range summaryCols {
		fmt.Fprintf(tw, "%s\t", c.title)
	}
	fmt.Fprintln(tw)
	for _, sys := range r.systems() {
		fmt.Fprintf(tw, "%s\t", sys)
		for _, c := range summaryCols {
			fmt.Fprintf(tw, "%s\t", r.summaryCell(sys, c))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b.WriteString("\n")
	for _, g := range r.Goals {
		kind := "goal"
		if !g.Required {
			kind = "info"
		}
		v := "-"
		if g.Evaluated {
			v = report.FormatValue(g.Value)
		}
		fmt.Fprintf(&b, "%s %-90s %8s %s %-5s %s\n", kind, g.Name, v, g.Comparison, report.FormatValue(g.Limit), g.Verdict())
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// summaryCell is system's cell of column c.
func (r *Results) summaryCell(system string, c summaryCol) string {
	if c.max {
		best, size := 0.0, 0
		for _, rec := range r.Records {
			if rec.System == system && rec.Scenario == ScenarioStream && rec.Metric == report.MetricGbps && len(rec.Runs) > 0 && rec.Value > best {
				best, size = rec.Value, rec.Size
			}
		}
		if size == 0 {
			return "-"
		}
		return fmt.Sprintf("%s (%s)", report.FormatValue(best), sizeName(size))
	}
	for _, ref := range c.refs(system) {
		if rec := r.Find(ref); rec != nil && len(rec.Runs) > 0 {
			return report.FormatValue(rec.Value)
		}
	}
	return "-"
}

// systems returns the systems of the records in the order of AllSystems.
func (r *Results) systems() []string {
	var out []string
	for _, s := range AllSystems {
		if slices.ContainsFunc(r.Records, func(rec report.Record) bool { return rec.System == s }) {
			out = append(out, s)
		}
	}
	return out
}

// sizeName formats a size: 64 B, 4 KiB, 1 MiB.
func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
