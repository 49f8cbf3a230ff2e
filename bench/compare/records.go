package compare

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/xdpndk/xdpndk/bench/internal/report"
)

// Ref names a figure: a record without its values. Params is the canonical form of the
// record's params ("load_bytes=65536"; "" for none).
type Ref struct {
	Scenario, System, Op string
	Size                 int
	Metric               string
	Params               string
}

// String names the figure as a goal's compared does: "system scenario op size B metric
// [params]".
func (r Ref) String() string {
	s := fmt.Sprintf("%s %s %s %d B %s", r.System, r.Scenario, r.Op, r.Size, r.Metric)
	if r.Params != "" {
		s += " [" + r.Params + "]"
	}
	return s
}

// paramsKey is the canonical form of params: "name=value" sorted by name, space-separated.
func paramsKey(p map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(p)) {
		parts = append(parts, k+"="+strconv.FormatFloat(p[k], 'g', -1, 64))
	}
	return strings.Join(parts, " ")
}

// figure is one value a measurement produced, before it joins its record.
type figure struct {
	ref    Ref
	params map[string]float64
	unit   string
	value  float64
	note   string
	// unsupported: the system cannot do this (note says why); value is not a figure
	unsupported bool
}

// fig returns the figure of a metric (its unit the metric's) about a subject.
func fig(scenario, system, op string, size int, params map[string]float64, metric string, v float64, note string) figure {
	return figure{ref: Ref{scenario, system, op, size, metric, paramsKey(params)}, params: params,
		unit: unitOf(metric), value: v, note: note}
}

// unsupported returns the figure that says system cannot do op at size.
func unsupported(scenario, system, op string, size int, why string) figure {
	return figure{ref: Ref{scenario, system, op, size, report.MetricUnsup, ""}, note: why, unsupported: true}
}

// unitOf is the unit of a shared metric.
func unitOf(metric string) string {
	switch metric {
	case report.MetricRTTP50, report.MetricRTTP90, report.MetricRTTP99, report.MetricRTTMean:
		return report.UnitMicros
	case report.MetricMsgRate:
		return report.UnitMsgRate
	case report.MetricGbps:
		return report.UnitGbps
	case report.MetricCPUMsg:
		return report.UnitCPUMsg
	case report.MetricCores:
		return report.UnitCores
	}
	return ""
}

// collector gathers each figure's values over the repetitions, in first-seen order.
type collector struct {
	order []Ref
	recs  map[Ref]*report.Record
}

func newCollector() *collector { return &collector{recs: map[Ref]*report.Record{}} }

// get returns the record of ref, creating it (without runs) if needed.
func (c *collector) get(ref Ref, params map[string]float64, unit string) *report.Record {
	r, ok := c.recs[ref]
	if !ok {
		r = &report.Record{Bench: Tool, Scenario: ref.Scenario, System: ref.System, Operation: ref.Op,
			Size: ref.Size, Metric: ref.Metric, Unit: unit, Runs: []float64{}, Reps: []int{}}
		if len(params) > 0 {
			r.Params = maps.Clone(params)
		}
		c.recs[ref] = r
		c.order = append(c.order, ref)
	}
	return r
}

// add records repetition rep's figures. A non-finite or negative value is left out (a
// figure the tool could not give); an unsupported figure keeps its note and no runs.
func (c *collector) add(rep int, figs ...figure) {
	for _, f := range figs {
		r := c.get(f.ref, f.params, f.unit)
		if f.note != "" {
			r.Note = f.note
		}
		if f.unsupported || math.IsNaN(f.value) || math.IsInf(f.value, 0) || f.value < 0 {
			continue
		}
		if i := slices.Index(r.Reps, rep); i >= 0 { // a figure measured twice in a repetition: the last counts
			r.Runs[i] = f.value
			continue
		}
		r.Runs = append(r.Runs, f.value)
		r.Reps = append(r.Reps, rep)
	}
}

// failed makes sure the figures a failed measurement would have given have records, so
// that a figure that failed in every repetition shows as failed rather than missing.
func (c *collector) failed(figs ...figure) {
	for _, f := range figs {
		if !f.unsupported {
			c.get(f.ref, f.params, f.unit)
		}
	}
}

// records returns the records with their medians, in first-seen order.
func (c *collector) records() []report.Record {
	out := make([]report.Record, 0, len(c.order))
	for _, k := range c.order {
		r := *c.recs[k]
		r.Runs = slices.Clone(r.Runs)
		r.Reps = slices.Clone(r.Reps)
		r.Params = maps.Clone(r.Params)
		r.Value = report.Median(r.Runs)
		if len(r.Reps) == 0 {
			r.Reps = nil
		}
		out = append(out, r)
	}
	return out
}

// findRecord returns the record ref names in recs, or nil.
func findRecord(recs []report.Record, ref Ref) *report.Record {
	for i := range recs {
		r := &recs[i]
		if r.Scenario == ref.Scenario && r.System == ref.System && r.Operation == ref.Op && r.Size == ref.Size &&
			r.Metric == ref.Metric && paramsKey(r.Params) == ref.Params {
			return r
		}
	}
	return nil
}

// valueAt returns the value of rec in repetition rep.
func valueAt(rec *report.Record, rep int) (float64, bool) {
	if rec == nil {
		return 0, false
	}
	i := slices.Index(rec.Reps, rep)
	if i < 0 || i >= len(rec.Runs) {
		return 0, false
	}
	return rec.Runs[i], true
}

// consecutive splits ascending sizes into runs of consecutive powers of two (each twice
// the one before), which one ndkpeer -a run measures; any other size is a run of its own.
func consecutive(sizes []int) [][]int {
	var out [][]int
	for i, s := range sizes {
		pow2 := s > 0 && s&(s-1) == 0
		if i > 0 && pow2 && sizes[i-1] == s/2 && len(out) > 0 {
			last := out[len(out)-1]
			if l := last[len(last)-1]; l&(l-1) == 0 {
				out[len(out)-1] = append(last, s)
				continue
			}
		}
		out = append(out, []int{s})
	}
	return out
}

// filterFigs returns the figures keep accepts.
func filterFigs(figs []figure, keep func(figure) bool) []figure {
	var out []figure
	for _, f := range figs {
		if keep(f) {
			out = append(out, f)
		}
	}
	return out
}

// containsInt reports whether v is in s.
func containsInt(s []int, v int) bool { return slices.Contains(s, v) }
