package report

import (
	"cmp"
	"slices"
)

// Subject says what a figure is about: the first fields of every benchmark's JSON record.
// A benchmark's Record embeds it, then its own fields, then a Figure.
type Subject struct {
	Benchmark string `json:"benchmark"` // the benchmark's name
	System    string `json:"system"`    // what was measured (a link, a mode, a ratio)
	Op        string `json:"op"`        // the operation timed
	Size      int    `json:"size"`      // bytes; what of is the benchmark's to say
}

// Figure is one metric's values: the last fields of every benchmark's JSON record.
type Figure struct {
	Metric string    `json:"metric"` // the benchmark's Metric* constants
	Value  float64   `json:"value"`  // normally the median of Runs
	Unit   string    `json:"unit"`   // the benchmark's Unit* constants
	Runs   []float64 `json:"runs"`   // every run's value, in run order
	Note   string    `json:"note,omitempty"`
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
