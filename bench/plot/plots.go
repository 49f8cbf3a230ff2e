package main

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"image/color"
	"math"
	"math/bits"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

func init() {
	// Sans-serif text (the SVGs name the font and fall back to the viewer's sans-serif).
	plot.DefaultFont = font.Font{Typeface: "Liberation", Variant: "Sans"}
	plotter.DefaultFont = plot.DefaultFont
}

// seriesKey says which records make a series: one system doing one operation in one
// scenario of one bench.
type seriesKey struct {
	bench, scenario, system, op string
}

// point is one figure of a series: a size and the median there.
type point struct {
	size  int
	value float64
}

// series is one line (or bar) of a plot.
type series struct {
	key    seriesKey
	label  string
	suffix string  // appended to the label: " (mean)" for a fallback metric's series
	note   string  // the records' note, if any (footnoted)
	points []point // ascending size
}

// selection says which records a plot draws.
type selection struct {
	metric string
	// fallback, when set, is drawn for the series that have no record of metric, their
	// label saying so (suffix): the mean round trip of a tool that reports no median.
	fallback, suffix string
	// sizes, when not empty, are the only sizes drawn (a size within 0.2% of one counts:
	// UDP's largest payload, 65507 B, stands for 64 KiB).
	sizes []int
	// skip leaves out the records whose "bench/scenario/system/operation" it matches.
	skip *regexp.Regexp
}

// near reports whether size is size want, or within 0.2% of it.
func near(size, want int) bool {
	d := size - want
	return d == 0 || (want > 0 && 500*max(d, -d) <= want)
}

// nearAny reports whether size is near one of sizes.
func nearAny(size int, sizes []int) bool {
	return slices.ContainsFunc(sizes, func(w int) bool { return near(size, w) })
}

// selectSeries returns the series of d that s selects, in the order of their first
// records. A record with params (a figure measured under extra conditions: loss, RTT,
// flows) is no point of a curve over size and is left out, as is one without runs (failed,
// unsupported). Labels say the system, then, only where needed to tell series apart, the
// operation, the bench and the scenario.
func selectSeries(d *document, s selection) []series {
	var out []series
	index := map[seriesKey]int{}
	primary := map[seriesKey]bool{}
	for _, r := range d.Records {
		if r.Metric == s.metric {
			primary[seriesKey{r.Bench, r.Scenario, r.System, r.Operation}] = true
		}
	}
	for _, r := range d.Records {
		k := seriesKey{r.Bench, r.Scenario, r.System, r.Operation}
		fallback := s.fallback != "" && r.Metric == s.fallback && !primary[k]
		if (r.Metric != s.metric && !fallback) || len(r.Params) > 0 || len(r.Runs) == 0 || math.IsNaN(r.Value) ||
			(len(s.sizes) > 0 && !nearAny(r.Size, s.sizes)) {
			continue
		}
		if s.skip != nil && s.skip.MatchString(strings.Join([]string{k.bench, k.scenario, k.system, k.op}, "/")) {
			continue
		}
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			out = append(out, series{key: k, note: r.Note})
			if fallback {
				out[i].suffix = s.suffix
			}
		}
		out[i].points = append(out[i].points, point{r.Size, r.Value})
	}
	for i := range out {
		slices.SortStableFunc(out[i].points, func(a, b point) int { return cmp.Compare(a.size, b.size) })
	}
	label(out)
	return out
}

// label sets the series' labels: the system; with the operation when the system has
// several; with the bench when that system and operation come from several; with the
// scenario when that is not enough.
func label(ss []series) {
	distinct := func(group func(seriesKey) string, part func(seriesKey) string) map[string]int {
		seen := map[string]map[string]bool{}
		for _, s := range ss {
			g := group(s.key)
			if seen[g] == nil {
				seen[g] = map[string]bool{}
			}
			seen[g][part(s.key)] = true
		}
		n := map[string]int{}
		for g, parts := range seen {
			n[g] = len(parts)
		}
		return n
	}
	bySystem := func(k seriesKey) string { return k.system }
	byOp := func(k seriesKey) string { return k.system + "\x00" + k.op }
	byBench := func(k seriesKey) string { return k.system + "\x00" + k.op + "\x00" + k.bench }
	ops := distinct(bySystem, func(k seriesKey) string { return k.op })
	benches := distinct(byOp, func(k seriesKey) string { return k.bench })
	scenarios := distinct(byBench, func(k seriesKey) string { return k.scenario })
	for i := range ss {
		k := ss[i].key
		l := k.system
		if ops[bySystem(k)] > 1 {
			l += " " + k.op
		}
		var qual []string
		if benches[byOp(k)] > 1 {
			qual = append(qual, k.bench)
		}
		if scenarios[byBench(k)] > 1 {
			qual = append(qual, k.scenario)
		}
		if len(qual) > 0 {
			l += " (" + strings.Join(qual, " ") + ")"
		}
		ss[i].label = l + ss[i].suffix
	}
}

// style is how a series is drawn: its system's color, and a dash and glyph per series of
// that system.
type style struct {
	color color.Color
	dash  []vg.Length
	shape draw.GlyphDrawer
}

// palette holds distinguishable colors (a color-blind-friendly qualitative set).
var palette = []color.RGBA{
	{0x00, 0x72, 0xb2, 0xff}, // blue
	{0xd5, 0x5e, 0x00, 0xff}, // vermilion
	{0x00, 0x9e, 0x73, 0xff}, // green
	{0xcc, 0x79, 0xa7, 0xff}, // purple
	{0xe6, 0x9f, 0x00, 0xff}, // orange
	{0x56, 0xb4, 0xe9, 0xff}, // sky blue
	{0x55, 0x55, 0x55, 0xff}, // grey
	{0x99, 0x66, 0x33, 0xff}, // brown
	{0x00, 0x00, 0x00, 0xff}, // black
	{0xa0, 0xa0, 0x00, 0xff}, // olive
}

var (
	dashes = [][]vg.Length{nil, {vg.Points(6), vg.Points(3)}, {vg.Points(2), vg.Points(2)}, {vg.Points(8), vg.Points(3), vg.Points(2), vg.Points(3)}}
	shapes = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{}, draw.RingGlyph{}, draw.BoxGlyph{}, draw.PyramidGlyph{}}
)

// styler gives every system of a document the same color in every plot.
type styler struct {
	systems []string
}

// newStyler orders the systems of d's records that the figures may draw (no params, one
// of metrics) by their first record.
func newStyler(d *document, metrics ...string) *styler {
	st := &styler{}
	for _, r := range d.Records {
		if len(r.Params) == 0 && slices.Contains(metrics, r.Metric) && !slices.Contains(st.systems, r.System) {
			st.systems = append(st.systems, r.System)
		}
	}
	return st
}

// styles returns the style of each of ss.
func (st *styler) styles(ss []series) []style {
	out := make([]style, len(ss))
	nth := map[string]int{}
	for i, s := range ss {
		c := slices.Index(st.systems, s.key.system)
		if c < 0 {
			c = len(st.systems)
		}
		k := nth[s.key.system]
		nth[s.key.system]++
		out[i] = style{color: palette[c%len(palette)], dash: dashes[k%len(dashes)], shape: shapes[(c+k)%len(shapes)]}
	}
	return out
}

// figure is one SVG: a title and a subtitle over a body, and numbered notes under it.
type figure struct {
	title    string
	subtitle string   // the machine, the date, the commit; what the body shows
	notes    []string // footnotes, numbered from 1
	body     func(dc draw.Canvas) error
}

// footnote returns the marker of note in f's footnotes (adding it), or "" for no note.
func (f *figure) footnote(note string) string {
	if note == "" {
		return ""
	}
	i := slices.Index(f.notes, note)
	if i < 0 {
		f.notes = append(f.notes, note)
		i = len(f.notes) - 1
	}
	return fmt.Sprintf(" [%d]", i+1)
}

// Figure geometry.
var (
	figWidth  = 8 * vg.Inch
	bodyH     = 4.2 * vg.Inch
	titleSize = vg.Points(13)
	subSize   = vg.Points(9.5)
	textSize  = vg.Points(10)
	noteSize  = vg.Points(8.5)
	margin    = vg.Points(8)
)

// textStyle returns a text style of plot's default font at size.
func textStyle(size vg.Length) text.Style {
	return text.Style{
		Color:   color.Black,
		Font:    font.From(plot.DefaultFont, size),
		Handler: plot.DefaultTextHandler,
		XAlign:  draw.XLeft,
		YAlign:  draw.YTop,
	}
}

// writeSVG draws f and writes it to path.
func writeSVG(path string, f *figure) error {
	noteSty := textStyle(noteSize)
	titleSty := textStyle(titleSize)
	subSty := textStyle(subSize)
	titleH := titleSty.Height(f.title) + subSty.Height(f.subtitle) + 2*margin
	var notesH vg.Length
	var notes []string
	for i, n := range f.notes {
		for j, line := range wrap(fmt.Sprintf("[%d] %s", i+1, n), noteSty, figWidth-2*margin) {
			if j > 0 {
				line = "     " + line
			}
			notes = append(notes, line)
			notesH += noteSty.Height(line)
		}
	}
	if notesH > 0 {
		notesH += margin
	}
	h := titleH + bodyH + notesH
	c := vgsvg.New(figWidth, h)
	dc := draw.New(c)
	// An opaque background, so that the figure reads on a dark page too.
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	dc.FillText(titleSty, vg.Point{X: margin, Y: h - margin}, f.title)
	dc.FillText(subSty, vg.Point{X: margin, Y: h - margin - titleSty.Height(f.title)}, f.subtitle)
	body := draw.Crop(dc, 0, 0, notesH, -titleH)
	if err := f.body(body); err != nil {
		return err
	}
	y := notesH - margin/2
	for _, line := range notes {
		dc.FillText(noteSty, vg.Point{X: margin, Y: y}, line)
		y -= noteSty.Height(line)
	}
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return err
	}
	// Name fallbacks after the font, for viewers without Liberation Sans.
	out := strings.ReplaceAll(buf.String(), "font-family:Liberation Sans;", "font-family:Liberation Sans,Arial,Helvetica,sans-serif;")
	return os.WriteFile(path, []byte(out), 0o644)
}

// wrap splits s into lines no wider than width in sty.
func wrap(s string, sty text.Style, width vg.Length) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		next := strings.TrimSpace(line + " " + w)
		if line != "" && sty.Width(next) > width {
			lines = append(lines, line)
			next = w
		}
		line = next
	}
	return append(lines, line)
}

// errNoData reports a plot with nothing to draw.
var errNoData = errors.New("no data")

// sizeFigure returns the figure of ss over size: lines on a log size axis when the series
// span several sizes, else horizontal bars at the one size.
func sizeFigure(title, subtitle, quantity string, logY bool, ss []series, st *styler) (*figure, error) {
	if len(ss) == 0 {
		return nil, errNoData
	}
	f := &figure{title: title, subtitle: subtitle}
	var sizes []int
	for _, s := range ss {
		for _, p := range s.points {
			if !slices.Contains(sizes, p.size) {
				sizes = append(sizes, p.size)
			}
		}
	}
	slices.Sort(sizes)
	labels := make([]string, len(ss))
	for i, s := range ss {
		labels[i] = s.label + f.footnote(s.note)
	}
	styles := st.styles(ss)
	if len(sizes) == 1 {
		f.title += " at " + bytesName(sizes[0]) + ", the only size measured"
		f.body = func(dc draw.Canvas) error {
			p, err := barPlot(quantity, ss, labels, styles, 0)
			if err != nil {
				return err
			}
			p.Draw(draw.Crop(dc, margin, -margin, 0, 0))
			return nil
		}
		return f, nil
	}
	f.body = func(dc draw.Canvas) error {
		p := plot.New()
		p.X.Label.Text = "message size (bytes, log scale)"
		p.Y.Label.Text = quantity
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = sizeTicks(sizes)
		if logY {
			p.Y.Label.Text += ", log scale"
			p.Y.Scale = plot.LogScale{}
			p.Y.Tick.Marker = logTicks{}
		} else {
			p.Y.Min = 0
			p.Y.Tick.Marker = linearTicks{}
		}
		p.Add(plotter.NewGrid())
		leg := plot.NewLegend()
		leg.Top, leg.Left = true, true
		leg.TextStyle.Font.Size = textSize
		leg.ThumbnailWidth = vg.Points(28)
		for i, s := range ss {
			xys := make(plotter.XYs, len(s.points))
			for j, pt := range s.points {
				xys[j] = plotter.XY{X: float64(pt.size), Y: pt.value}
			}
			line, points, err := plotter.NewLinePoints(xys)
			if err != nil {
				return err
			}
			line.Color, line.Dashes, line.Width = styles[i].color, styles[i].dash, vg.Points(1.5)
			points.Color, points.Shape, points.Radius = styles[i].color, styles[i].shape, vg.Points(3)
			p.Add(line, points)
			leg.Add(labels[i], line, points)
		}
		// The legend's width as measured, and a tenth more for a viewer whose fallback
		// font is wider.
		lr := leg.Rectangle(dc)
		legW := (lr.Max.X-lr.Min.X)*1.1 + 2*margin
		p.Draw(draw.Crop(dc, margin, -legW, 0, 0))
		leg.Draw(draw.Crop(dc, dc.Max.X-dc.Min.X-legW+margin, -margin, 0, -margin))
		return nil
	}
	return f, nil
}

// barPlot returns horizontal bars, one per series (its value at size, or its only value
// when size is 0), labelled on the vertical axis, the first at the top, each with its
// value at its end.
func barPlot(quantity string, ss []series, labels []string, styles []style, size int) (*plot.Plot, error) {
	p := plot.New()
	p.X.Label.Text = quantity
	p.X.Min = 0
	p.X.Tick.Marker = linearTicks{}
	p.Add(plotter.NewGrid())
	var names []string
	var marks plotter.XYLabels
	n := len(ss)
	for i := range ss {
		v := math.NaN()
		for _, pt := range ss[i].points {
			if size == 0 || near(pt.size, size) {
				v = pt.value
			}
		}
		if math.IsNaN(v) {
			continue
		}
		y := float64(n - 1 - i) // the first series at the top
		bc, err := plotter.NewBarChart(plotter.Values{v}, barWidth(n))
		if err != nil {
			return nil, err
		}
		bc.Horizontal, bc.XMin = true, y
		bc.Color, bc.LineStyle.Width = styles[i].color, 0
		p.Add(bc)
		marks.XYs = append(marks.XYs, plotter.XY{X: v, Y: y})
		marks.Labels = append(marks.Labels, " "+formatValue(v))
		names = append(names, labels[i])
	}
	if len(names) == 0 {
		return nil, errNoData
	}
	lab, err := plotter.NewLabels(marks)
	if err != nil {
		return nil, err
	}
	for i := range lab.TextStyle {
		lab.TextStyle[i].YAlign = draw.YCenter
		lab.TextStyle[i].Font.Size = vg.Points(9)
	}
	lab.Offset = vg.Point{X: vg.Points(2)}
	p.Add(lab)
	// Room for the value labels right of the longest bar.
	_, xmax, _, _ := plotter.XYRange(marks)
	p.X.Max = xmax * 1.18
	all := make([]string, n)
	for i := range ss {
		all[n-1-i] = labels[i]
	}
	p.NominalY(all...)
	p.Y.Tick.Label.Font.Size = textSize
	p.Y.Min, p.Y.Max = -0.6, float64(n)-0.4
	return p, nil
}

// barWidth is the thickness of each of n bars in a figure's body.
func barWidth(n int) vg.Length {
	return min(vg.Points(26), bodyH*0.55/vg.Length(max(n, 1)))
}

// cpuFigure returns the figure of the CPU per message: a panel of bars per size, where a
// series measured near the size (within 0.2%: sockperf's 65507 B for 64 KiB) says its own.
func cpuFigure(title, subtitle string, ss []series, sizes []int, st *styler) (*figure, error) {
	var have []int
	for _, size := range sizes {
		for _, s := range ss {
			if slices.ContainsFunc(s.points, func(p point) bool { return near(p.size, size) }) && !slices.Contains(have, size) {
				have = append(have, size)
			}
		}
	}
	if len(have) == 0 {
		return nil, errNoData
	}
	f := &figure{title: title, subtitle: subtitle}
	styles := st.styles(ss)
	type panel struct {
		size   int
		series []series
		labels []string
		styles []style
	}
	var panels []panel
	for _, size := range have {
		pn := panel{size: size}
		for i, s := range ss {
			j := slices.IndexFunc(s.points, func(p point) bool { return near(p.size, size) })
			if j < 0 {
				continue
			}
			l := s.label
			if at := s.points[j].size; at != size {
				l += " (" + bytesName(at) + ")"
			}
			pn.series = append(pn.series, s)
			pn.labels = append(pn.labels, l+f.footnote(s.note))
			pn.styles = append(pn.styles, styles[i])
		}
		panels = append(panels, pn)
	}
	f.body = func(dc draw.Canvas) error {
		tiles := draw.Tiles{Rows: 1, Cols: len(panels), PadX: vg.Points(24), PadLeft: margin, PadRight: 2 * margin}
		for col, pn := range panels {
			p, err := barPlot("µs", pn.series, pn.labels, pn.styles, pn.size)
			if err != nil {
				return err
			}
			p.Title.Text = "at " + bytesName(pn.size)
			p.Title.TextStyle.Font.Size = textSize + 1
			p.Draw(tiles.At(dc, col, 0))
		}
		return nil
	}
	return f, nil
}

// linearTicks are gonum's default ticks of a linear axis, labelled by formatValue (250,
// not 250.00).
type linearTicks struct{}

// Ticks returns the ticks of [min, max].
func (linearTicks) Ticks(min, max float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = formatValue(ticks[i].Value)
		}
	}
	return ticks
}

// sizeTicks marks the sizes on a log axis.
type sizeTicks []int

// Ticks returns a tick at every size within [lo, hi], labelled so that labels do not
// collide: every power of two (only every other one, 4, 16, 64, ..., in short form, 1K,
// 64K, 1M, when there are more than 12 of them), and another size (1500, 9000, 65507) only when no labelled power of two
// is within a factor of 1.6 of it (3 when the labels are every other power of two).
func (t sizeTicks) Ticks(lo, hi float64) []plot.Tick {
	pow2 := func(s int) bool { return s > 0 && s&(s-1) == 0 }
	var in []int
	n := 0
	for _, s := range t {
		if v := float64(s); v >= lo && v <= hi {
			in = append(in, s)
			if pow2(s) {
				n++
			}
		}
	}
	var labelled []int
	for _, s := range in {
		if pow2(s) && (n <= 12 || bits.TrailingZeros(uint(s))%2 == 0) {
			labelled = append(labelled, s)
		}
	}
	var out []plot.Tick
	for _, s := range in {
		label := slices.Contains(labelled, s)
		if !pow2(s) {
			label = !slices.ContainsFunc(labelled, func(l int) bool {
				r := float64(max(s, l)) / float64(min(s, l))
				return r < 1.6 || (n > 12 && r < 3)
			})
		}
		tk := plot.Tick{Value: float64(s)}
		switch {
		case label && n > 12:
			tk.Label = shortSizeName(s)
		case label:
			tk.Label = sizeName(s)
		}
		out = append(out, tk)
	}
	return out
}

// logTicks marks a log axis at every integer times a power of ten: labelled at the powers
// of ten, also at 2 and 5 times them when the axis spans under three decades, and at every
// tick when it spans under one.
type logTicks struct{}

// Ticks returns the ticks of [min, max].
func (logTicks) Ticks(min, max float64) []plot.Tick {
	if min <= 0 || max <= min {
		return nil
	}
	var out []plot.Tick
	decades := math.Log10(max / min)
	for e := math.Floor(math.Log10(min)); e <= math.Ceil(math.Log10(max)); e++ {
		base := math.Pow(10, e)
		for m := 1.0; m < 10; m++ {
			v := m * base
			if v < min || v > max {
				continue
			}
			labelled := m == 1 || (decades < 3 && (m == 2 || m == 5)) || decades < 0.7
			t := plot.Tick{Value: v}
			if labelled {
				t.Label = formatValue(v)
			}
			out = append(out, t)
		}
	}
	return out
}

// sizeName formats a size in bytes: 64, 1500, 4 KiB, 1 MiB.
func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return strconv.Itoa(n)
}

// shortSizeName formats a size in bytes in a few characters: 64, 4K, 1M (powers of 1024).
func shortSizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return strconv.Itoa(n)
}

// bytesName is sizeName with "B" after a plain number: 64 B, 4 KiB.
func bytesName(n int) string {
	s := sizeName(n)
	if !strings.HasSuffix(s, "iB") {
		s += " B"
	}
	return s
}

// formatValue formats a value with about three significant digits: 431k, 1.52M, 12.3.
func formatValue(v float64) string {
	a := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case a >= 1e9:
		return trim(v/1e9) + "G"
	case a >= 1e6:
		return trim(v/1e6) + "M"
	case a >= 1e4:
		return trim(v/1e3) + "k"
	}
	return trim(v)
}

// trim formats v with three significant digits, without trailing zeros.
func trim(v float64) string {
	s := strconv.FormatFloat(v, 'f', max(0, 2-int(math.Floor(math.Log10(math.Abs(v))))), 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}
