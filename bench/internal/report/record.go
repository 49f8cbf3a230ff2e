package report

import (
	"cmp"
	"maps"
	"slices"
)

// Subject says what a figure is about: the first fields of a benchmark's in-memory record
// (its Record embeds a Subject, its own fields, then a Figure). ToRecord turns it into the
// Record of a Document.
type Subject struct {
	Benchmark string // the scenario of the bench (Record.Scenario)
	System    string // what was measured (a link, a mode, a ratio)
	Op        string // the operation timed
	Size      int    // bytes; what of is the benchmark's to say
}

// Figure is one metric's values: the last fields of a benchmark's in-memory record.
type Figure struct {
	Metric string    // the benchmark's Metric* constants
	Value  float64   // normally the median of Runs
	Unit   string    // the benchmark's Unit* constants
	Runs   []float64 // every run's value, in run order
	Note   string
}

// ToRecord returns the Document record of figure f about s, measured by bench under params
// (nil for none). It copies Runs (never nil in the record) and params.
func ToRecord(bench string, s Subject, params map[string]float64, f Figure) Record {
	runs := make([]float64, len(f.Runs))
	copy(runs, f.Runs)
	var p map[string]float64
	if len(params) > 0 {
		p = maps.Clone(params)
	}
	return Record{
		Bench: bench, Scenario: s.Benchmark, System: s.System, Operation: s.Op, Size: s.Size,
		Params: p, Metric: f.Metric, Unit: f.Unit, Value: f.Value, Runs: runs, Note: f.Note,
	}
}

// NewFigure returns the Figure of metric over runs (which it keeps), valued at their median.
func NewFigure(metric, unit string, runs []float64) Figure {
	return Figure{Metric: metric, Value: Median(runs), Unit: unit, Runs: runs}
}

// Values returns the distinct values key returns for the records it accepts (its ok
// result), ascending: the rows or columns of a table.
func Values[R any, V cmp.Ordered](records []R, key func(R) (V, bool)) []V {
	var out []V
	for _, rec := range records {
		if v, ok := key(rec); ok && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// Verdict is a goal's word in the tables: "met", "NOT met", or "not evaluated" when the
// figure it needs is missing.
func Verdict(evaluated, met bool) string {
	switch {
	case !evaluated:
		return "not evaluated"
	case met:
		return "met"
	}
	return "NOT met"
}
