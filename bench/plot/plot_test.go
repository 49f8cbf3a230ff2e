package main

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/plot"
)

// samplePath is the sample document the main module's bench/internal/report writes and
// checks (its TestSampleGolden): a fabricated merged document using every field of the
// schema.
const samplePath = "../internal/report/testdata/sample.json"

// subset reports where got, the JSON of this module's types, differs from want, the JSON
// report wrote: every key of got must be in want with the same value (recursively), lists
// must have the same length. It returns the path of the first difference, or "".
func subset(got, want any, path string) string {
	switch g := got.(type) {
	case map[string]any:
		w, ok := want.(map[string]any)
		if !ok {
			return path
		}
		for k, v := range g {
			wv, ok := w[k]
			if !ok {
				return path + "." + k + " (not in report's JSON)"
			}
			if d := subset(v, wv, path+"."+k); d != "" {
				return d
			}
		}
	case []any:
		w, ok := want.([]any)
		if !ok || len(w) != len(g) {
			return path + " (length)"
		}
		for i := range g {
			if d := subset(g[i], w[i], path+"[]"); d != "" {
				return d
			}
		}
	default:
		if !reflect.DeepEqual(got, want) {
			return path
		}
	}
	return ""
}

// TestSchemaCopy: the sample document report writes round-trips through this module's
// copy of the schema's types. Decoded and encoded again, it gives back a part of the
// original, value for value: every field here has the schema's JSON name and type (a
// misnamed field would be written under a name the original lacks, a mistyped one would
// fail to decode or come back changed); and the fields the plots use are all there.
func TestSchemaCopy(t *testing.T) {
	raw, err := os.ReadFile(samplePath)
	if err != nil {
		t.Fatal(err)
	}
	d, err := readDocument(samplePath)
	if err != nil {
		t.Fatal(err)
	}
	again, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var want, got map[string]any
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(again, &got); err != nil {
		t.Fatal(err)
	}
	if diff := subset(got, want, "document"); diff != "" {
		t.Errorf("this module's types do not round-trip report's sample: first difference at %s", diff)
	}
	// Every field of the copy is exercised by the sample (none decodes to its zero value
	// everywhere), so the check above covers all of them.
	h, src := d.Header, d.Sources[0]
	if d.SchemaVersion != schemaVersion || h.Tool == "" || len(h.Benches) == 0 || h.Version == "" || h.Commit == "" ||
		h.Time == "" || h.Host == "" || h.Kernel == "" || h.CPU == "" || h.CPUs == 0 || h.Go == "" ||
		h.Bed.Link == "" || h.Bed.Detail == "" || src.Bed.MTU == 0 || src.Bed.Queues == 0 {
		t.Errorf("header fields missing: %+v, source %+v", h, src)
	}
	var params, note, runs bool
	for _, r := range d.Records {
		if r.Bench == "" || r.Scenario == "" || r.System == "" || r.Operation == "" || r.Metric == "" {
			t.Fatalf("record fields missing: %+v", r)
		}
		params = params || len(r.Params) > 0
		note = note || r.Note != ""
		runs = runs || len(r.Runs) > 0 && r.Value != 0 && r.Size != 0 && r.Unit != ""
	}
	if !params || !note || !runs {
		t.Errorf("the sample lacks params (%v), notes (%v) or complete figures (%v)", params, note, runs)
	}
}

func TestReadDocumentVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v2.json")
	if err := os.WriteFile(path, []byte(`{"schema_version": 2, "header": {}, "records": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readDocument(path); err == nil || !strings.Contains(err.Error(), "schema version 2") {
		t.Errorf("readDocument of version 2: %v", err)
	}
}

func sample(t *testing.T) *document {
	t.Helper()
	d, err := readDocument(samplePath)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func labels(ss []series) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.label)
	}
	return out
}

func TestSelectSeries(t *testing.T) {
	d := sample(t)
	ss := selectSeries(d, selection{metric: metricRTTP50})
	if got, want := labels(ss), []string{"xdpndk-inline", "raw-xdpndk", "qperf-tcp", "sockperf-udp", "raw-asavie"}; !slices.Equal(got, want) {
		t.Errorf("latency series %q, want %q", got, want)
	}
	if n := len(ss[0].points); n != 6 || ss[0].points[0].size != 64 || ss[0].points[5].size != 65536 || ss[0].note == "" {
		t.Errorf("first series %+v", ss[0])
	}
	// Records with params (the transport's loss figures) are not on a curve over size.
	for _, s := range selectSeries(d, selection{metric: metricGbps}) {
		if s.key.bench == "transportbench" {
			t.Errorf("a record with params was drawn: %+v", s)
		}
	}
	// Colors go to the systems the figures draw: not to transportbench's modes.
	if st := newStyler(d, metricRTTP50, metricGbps); slices.Contains(st.systems, "selective") || st.systems[0] != "xdpndk-inline" {
		t.Errorf("styled systems %q", st.systems)
	}
	ss = selectSeries(d, selection{metric: metricCPUMsg, sizes: []int{64}, skip: regexp.MustCompile(`/qperf-tcp/`)})
	if got := labels(ss); !slices.Equal(got, []string{"xdpndk-inline", "raw-xdpndk", "sockperf-udp"}) || len(ss[0].points) != 1 {
		t.Errorf("cpu series at 64 B without qperf: %q", got)
	}
}

// A system without a median is drawn with its mean, labelled so; a CPU figure near 64 KiB
// (UDP's 65507 B) is drawn in the 64 KiB panel with its size.
func TestMeanFallbackAndNearSizes(t *testing.T) {
	d := sample(t)
	add := func(system, metric string, size int, v float64) {
		d.Records = append(d.Records, record{Bench: "compare", Scenario: "pingpong", System: system, Operation: "ping-pong",
			Size: size, Metric: metric, Unit: "us", Value: v, Runs: []float64{v}})
	}
	add("fabric-tcp", metricRTTAvg, 64, 60)
	add("fabric-tcp", metricRTTAvg, 4096, 80)
	add("sockperf-udp-poll", metricRTTP50, 64, 20)
	add("sockperf-udp-poll", metricRTTAvg, 64, 25) // has a median: its mean is not drawn
	add("sockperf-udp-poll", metricCPUMsg, 65507, 3)
	ss := selectSeries(d, selection{metric: metricRTTP50, fallback: metricRTTAvg, suffix: " (mean)"})
	got := labels(ss)
	if !slices.Contains(got, "fabric-tcp (mean)") || !slices.Contains(got, "sockperf-udp-poll") || slices.Contains(got, "sockperf-udp-poll (mean)") {
		t.Errorf("latency series %q", got)
	}
	for _, s := range ss {
		if s.key.system == "sockperf-udp-poll" && (len(s.points) != 1 || s.points[0].value != 20) {
			t.Errorf("sockperf-udp-poll drew %+v, want its median only", s.points)
		}
	}
	if !near(65507, 65536) || near(65000, 65536) || !near(64, 64) || near(63, 64) {
		t.Error("near")
	}
	sizes := []int{64, 64 << 10}
	ss = selectSeries(d, selection{metric: metricCPUMsg, sizes: sizes})
	f, err := cpuFigure("CPU", "host", ss, sizes, newStyler(d, metricCPUMsg))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cpu.svg")
	if err := writeSVG(path, f); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "sockperf-udp-poll (65507 B)") {
		t.Errorf("the 64 KiB panel lacks sockperf's 65507 B bar")
	}
}

// Labels name the operation only for a system with several, the bench only for a system
// and operation measured by several benches, the scenario only when still ambiguous.
func TestLabels(t *testing.T) {
	ss := []series{
		{key: seriesKey{"linkbench", "pingpong", "raw-xdpndk", "ping-pong"}},
		{key: seriesKey{"ndkbench", "pingpong", "raw-xdpndk", "ping-pong"}},
		{key: seriesKey{"ndkbench", "pingpong", "xdpndk-inline", "send/recv"}},
		{key: seriesKey{"ndkbench", "latency", "xdpndk-inline", "write"}},
		{key: seriesKey{"ndkbench", "msgrate", "xdpndk-inline", "write"}},
		{key: seriesKey{"ndkbench", "pingpong", "kernel-tcp", "ping-pong"}},
	}
	label(ss)
	want := []string{
		"raw-xdpndk (linkbench)", "raw-xdpndk (ndkbench)", "xdpndk-inline send/recv",
		"xdpndk-inline write (latency)", "xdpndk-inline write (msgrate)", "kernel-tcp",
	}
	if got := labels(ss); !slices.Equal(got, want) {
		t.Errorf("labels\n got %q\nwant %q", got, want)
	}
}

// wellFormed fails unless b is well-formed XML.
func wellFormed(t *testing.T, name string, b []byte) {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(string(b)))
	for {
		if _, err := dec.Token(); err != nil {
			if errors.Is(err, io.EOF) {
				return
			}
			t.Fatalf("%s is not well-formed XML: %v", name, err)
		}
	}
}

// TestDrawAll draws the sample: every figure, well-formed SVG with its title, the machine
// and every series named; a figure with no data is not written and its old file goes.
func TestDrawAll(t *testing.T) {
	dir := t.TempDir()
	written, err := drawAll(sample(t), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(written) != len(Files) {
		t.Fatalf("wrote %q, want all of %q", written, Files)
	}
	for name, want := range map[string][]string{
		fileLatency:   {"Round-trip latency (median; mean where a tool reports only that)", "xdpndk-inline [1]", "qperf-tcp [2]", "raw-asavie", "64 KiB", "log scale"},
		fileBandwidth: {"Bandwidth (median)", "Gbit/s", "sockperf-udp"},
		fileMsgRate:   {"Message rate (median)", "messages/s"},
		fileCPU:       {"CPU per message (median)", "at 64 B", "at 64 KiB", "[1] both sides poll: a whole core each"},
	} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		wellFormed(t, name, b)
		for _, s := range append(want, "benchhost: Example CPU @ 3.0GHz, 2 CPUs, Linux 6.18.0; 2025-01-02, commit 0123456789ab", "sans-serif") {
			if !strings.Contains(string(b), s) {
				t.Errorf("%s lacks %q", name, s)
			}
		}
	}

	// Without CPU figures, cpu.svg is not drawn, and the earlier one is removed; a metric
	// at one size only is drawn as bars.
	d := sample(t)
	d.Records = slices.DeleteFunc(d.Records, func(r record) bool { return r.Metric == metricCPUMsg || r.Size != 64 })
	written, err = drawAll(d, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, fileCPU)); !os.IsNotExist(err) || len(written) != 3 {
		t.Errorf("cpu.svg without data: stat %v, wrote %q", err, written)
	}
	b, err := os.ReadFile(filepath.Join(dir, fileLatency))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "at 64 B, the only size measured") {
		t.Errorf("one-size latency is not drawn as bars")
	}
}

func TestTicksAndFormats(t *testing.T) {
	var got []string
	for _, tk := range (logTicks{}).Ticks(7, 1500) {
		if tk.Label != "" {
			got = append(got, tk.Label)
		}
	}
	if want := []string{"10", "20", "50", "100", "200", "500", "1000"}; !slices.Equal(got, want) {
		t.Errorf("log ticks %q, want %q", got, want)
	}
	for _, tk := range (linearTicks{}).Ticks(0, 500) {
		if strings.Contains(tk.Label, ".") {
			t.Errorf("linear tick label %q", tk.Label)
		}
	}
	if ticks := (logTicks{}).Ticks(0, 10); ticks != nil {
		t.Errorf("log ticks from 0: %v", ticks)
	}
	for v, want := range map[float64]string{0: "0", 0.914: "0.914", 1.22: "1.22", 20.4: "20.4", 51: "51", 431000: "431k", 1.5e6: "1.5M", 2e9: "2G"} {
		if got := formatValue(v); got != want {
			t.Errorf("formatValue(%v) = %q, want %q", v, got, want)
		}
	}
	if got := bytesName(64) + "," + bytesName(65536) + "," + sizeName(9000); got != "64 B,64 KiB,9000" {
		t.Errorf("size names %q", got)
	}
	if got := (sizeTicks{64, 1500, 65536}).Ticks(100, 70000); len(got) != 2 || got[0].Label != "1500" || got[1].Label != "64 KiB" {
		t.Errorf("size ticks %+v", got)
	}
	// Labels do not collide: 65507 beside 64 KiB and 9000 beside 8 KiB go unlabelled (a
	// tick still), 9000 between 4 KiB and 64 KiB is labelled; of 23 powers of two every
	// other one is.
	tickLabels := func(tk []plot.Tick) []string {
		var l []string
		for _, x := range tk {
			l = append(l, x.Label)
		}
		return l
	}
	if got := tickLabels((sizeTicks{64, 4096, 9000, 65507, 65536}).Ticks(1, 1e9)); !slices.Equal(got, []string{"64", "4 KiB", "9000", "", "64 KiB"}) {
		t.Errorf("near sizes: %q", got)
	}
	var full sizeTicks
	for s := 2; s <= 8<<20; s *= 2 {
		full = append(full, s)
	}
	full = append(full, 9000)
	slices.Sort(full)
	got = tickLabels(full.Ticks(1, 1e9))
	if len(got) != 24 || got[0] != "" || got[1] != "4" || got[5] != "64" || got[13] != "" || got[23] != "" || got[22] != "4M" || got[16] != "64K" {
		t.Errorf("23 powers of two and 9000: %q", got)
	}
}
