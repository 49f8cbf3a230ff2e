package report

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// HeadlineMetrics are the metrics of a summary table (MarkdownOptions.Metrics): latency
// (the mean too: qperf and fi_pingpong report nothing else), message rate, bandwidth and
// CPU.
var HeadlineMetrics = []string{
	MetricRTTP50, MetricRTTP99, MetricRTTMean, MetricMsgRate, MetricGbps, MetricCPUMsg, MetricCores,
}

// MarkdownOptions select what WriteMarkdown shows.
type MarkdownOptions struct {
	// Metrics, when not empty, are the only metrics shown, in this order within a row
	// group; otherwise every metric is. A system that cannot do an operation at a size
	// (a MetricUnsup record) shows "unsupported" in the rows of that operation and size.
	Metrics []string
	// NoGoals leaves the goals table out.
	NoGoals bool
	// Sizes, per bench, are the only sizes whose rows that bench's table shows (a bench
	// without an entry shows every size): a summary of a bench that measures many.
	Sizes map[string][]int
}

// WriteMarkdown writes d as Markdown tables: for each bench, a caption (the bed, the
// number of runs) and a table with the systems as columns and one row per (scenario,
// operation, size, params, metric), each cell the median, and the list of the bench's
// failed measurements (its FAILED notes, without their counters); then one table of every goal,
// with its value, its target and "met" or "NOT met" (a required goal not met in bold; a
// goal that is only reported says so, with its reason).
func WriteMarkdown(w io.Writer, d *Document, o MarkdownOptions) error {
	var b strings.Builder
	for _, tool := range d.Tools() {
		writeBenchTable(&b, d, tool, o)
	}
	if !o.NoGoals && len(d.Goals) > 0 {
		writeGoals(&b, d.Goals)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// row is a row of a bench's table.
type row struct {
	scenario, op string
	size         int
	params       string
	metric, unit string
}

// cellKey finds a cell: a row's figure of one system.
type cellKey struct {
	scenario, op string
	size         int
	params       string
	metric       string
	system       string
}

// writeBenchTable writes tool's caption and table to b (nothing if it has no records to
// show).
func writeBenchTable(b *strings.Builder, d *Document, tool string, o MarkdownOptions) {
	cells := map[cellKey]*Record{}
	var rows []row
	var systems, scenarios, ops, params, metrics []string
	runs := 0
	hasParams := false
	shown := func(metric string) bool { return len(o.Metrics) == 0 || slices.Contains(o.Metrics, metric) }
	for i := range d.Records {
		r := &d.Records[i]
		if r.Bench != tool {
			continue
		}
		p := paramString(r.Params)
		cells[cellKey{r.Scenario, r.Operation, r.Size, p, r.Metric, r.System}] = r
		if !shown(r.Metric) {
			continue
		}
		if sizes, ok := o.Sizes[tool]; ok && !slices.Contains(sizes, r.Size) {
			continue
		}
		rw := row{r.Scenario, r.Operation, r.Size, p, r.Metric, r.Unit}
		if !slices.ContainsFunc(rows, func(x row) bool { return x.sameFigure(rw) }) {
			rows = append(rows, rw)
		}
		for _, v := range []struct {
			list *[]string
			s    string
		}{{&systems, r.System}, {&scenarios, r.Scenario}, {&ops, r.Operation}, {&params, p}, {&metrics, r.Metric}} {
			if !slices.Contains(*v.list, v.s) {
				*v.list = append(*v.list, v.s)
			}
		}
		runs = max(runs, len(r.Runs))
		hasParams = hasParams || p != ""
	}
	if len(rows) == 0 {
		return
	}
	if len(o.Metrics) > 0 {
		metrics = o.Metrics
	}
	// Rows in the order the bench measured scenarios, operations and params; within those
	// by metric (the options' order), then by size.
	idx := slices.Index[[]string]
	slices.SortStableFunc(rows, func(x, y row) int {
		return cmp.Or(
			cmp.Compare(idx(scenarios, x.scenario), idx(scenarios, y.scenario)),
			cmp.Compare(idx(ops, x.op), idx(ops, y.op)),
			cmp.Compare(idx(params, x.params), idx(params, y.params)),
			cmp.Compare(idx(metrics, x.metric), idx(metrics, y.metric)),
			cmp.Compare(x.size, y.size),
		)
	})

	h := d.HeaderOf(tool)
	fmt.Fprintf(b, "**%s**: %s", tool, bedString(h.Bed))
	if runs > 0 {
		fmt.Fprintf(b, "; median of %d run%s", runs, plural(runs))
	}
	b.WriteString("\n\n")
	head := []string{"scenario", "operation", "size"}
	align := []string{"---", "---", "--:"}
	if hasParams {
		head, align = append(head, "params"), append(align, "---")
	}
	head, align = append(head, "metric"), append(align, "---")
	for _, s := range systems {
		head, align = append(head, s), append(align, "--:")
	}
	writeRow(b, head)
	writeRow(b, align)
	for _, rw := range rows {
		line := []string{rw.scenario, rw.op, sizeString(rw.size)}
		if hasParams {
			line = append(line, rw.params)
		}
		line = append(line, rw.metric)
		for _, s := range systems {
			line = append(line, cellString(cells, rw, s))
		}
		writeRow(b, line)
	}
	b.WriteString("\n")
	writeFailures(b, h.Notes)
}

// writeFailures lists the failed measurements among a header's notes (FailedNote), each
// up to its diagnostic counters.
func writeFailures(b *strings.Builder, notes []string) {
	n := 0
	for _, note := range notes {
		if !IsFailed(note) {
			continue
		}
		if n == 0 {
			b.WriteString("Failed in this run (the figures hold the other runs):\n\n")
		}
		n++
		short, _, _ := strings.Cut(note, "; counters")
		fmt.Fprintf(b, "- %s\n", short)
	}
	if n > 0 {
		b.WriteString("\n")
	}
}

// sameFigure reports whether x and y are the same row (the unit aside).
func (x row) sameFigure(y row) bool {
	return x.scenario == y.scenario && x.op == y.op && x.size == y.size && x.params == y.params && x.metric == y.metric
}

// cellString is system's cell in rw: the median, "unsupported", "failed" (a figure without
// runs), or empty.
func cellString(cells map[cellKey]*Record, rw row, system string) string {
	if r := cells[cellKey{rw.scenario, rw.op, rw.size, rw.params, rw.metric, system}]; r != nil {
		switch {
		case r.Metric == MetricUnsup:
			return "unsupported"
		case len(r.Runs) == 0:
			return "failed"
		}
		return FormatValue(r.Value)
	}
	if cells[cellKey{rw.scenario, rw.op, rw.size, rw.params, MetricUnsup, system}] != nil {
		return "unsupported"
	}
	return ""
}

// writeGoals writes the goals table to b.
func writeGoals(b *strings.Builder, goals []Goal) {
	writeRow(b, []string{"bench", "goal", "value", "target", "verdict", "note"})
	writeRow(b, []string{"---", "---", "--:", "---", "---", "---"})
	for i := range goals {
		g := &goals[i]
		value := "-"
		if g.Evaluated {
			value = FormatValue(g.Value)
		}
		target := fmt.Sprintf("%s %s", g.Comparison, FormatValue(g.Limit))
		if g.Unit != "" && g.Unit != UnitRatio {
			target += " " + g.Unit
		}
		verdict := g.Verdict()
		note := g.Note
		if !g.Required {
			verdict = "reported: " + verdict
			note = strings.TrimSpace("not required: " + g.Reason + " " + note)
		} else if g.Evaluated && !g.Met {
			verdict = "**" + verdict + "**"
		}
		writeRow(b, []string{g.Bench, g.Name, value, target, verdict, note})
	}
	b.WriteString("\n")
}

// writeRow writes one Markdown table row; a | in a cell is escaped.
func writeRow(b *strings.Builder, cells []string) {
	b.WriteString("|")
	for _, c := range cells {
		b.WriteString(" ")
		b.WriteString(strings.ReplaceAll(c, "|", `\|`))
		b.WriteString(" |")
	}
	b.WriteString("\n")
}

// FormatValue formats a figure for a table with about three significant digits: 431k,
// 1.52M, 12.3, 0.0123; an integer below 10000 as one (a count, a limit of 2).
func FormatValue(v float64) string {
	a := math.Abs(v)
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return strconv.FormatFloat(v, 'g', -1, 64)
	case v == 0:
		return "0"
	case a < 1e4 && v == math.Trunc(v):
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 1e10:
		return strconv.FormatFloat(v/1e9, 'f', 0, 64) + "G"
	case a >= 1e9:
		return sig3(v/1e9) + "G"
	case a >= 1e6:
		return sig3(v/1e6) + "M"
	case a >= 1e4:
		return sig3(v/1e3) + "k"
	}
	return sig3(v)
}

// sig3 formats v (|v| < 10000) with three significant digits, or as an integer from 100 up.
func sig3(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return fmt.Sprintf("%#.3g", v)
}

// sizeString formats a size in bytes: 64, 9000, 64 KiB, 1 MiB.
func sizeString(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return strconv.Itoa(n)
}

// paramString formats a record's params: "flows=2 loss_pct=1 rtt_us=100", sorted by name.
func paramString(p map[string]float64) string {
	var parts []string
	for _, k := range sortedKeys(p) {
		parts = append(parts, k+"="+strconv.FormatFloat(p[k], 'g', -1, 64))
	}
	return strings.Join(parts, " ")
}

// bedString describes a bed in a caption: "veth, MTU 9000, 2 queues (detail)".
func bedString(bed Bed) string {
	s := bed.Link
	if s == "" {
		s = "unknown link"
	}
	if bed.MTU > 0 {
		s += fmt.Sprintf(", MTU %d", bed.MTU)
	}
	if bed.Queues > 0 {
		s += fmt.Sprintf(", %d queue%s", bed.Queues, plural(bed.Queues))
	}
	if bed.Detail != "" {
		s += " (" + bed.Detail + ")"
	}
	return s
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
