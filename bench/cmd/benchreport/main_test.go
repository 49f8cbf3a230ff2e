package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xdpndk/xdpndk/bench/internal/report"
)

// doc returns a small document of tool.
func doc(tool string) *report.Document {
	h := report.NewHeader(tool)
	h.Time = "2025-01-02T03:04:05Z"
	h.Bed = report.Bed{Link: "veth", MTU: 9000, Queues: 2}
	d := report.NewDocument(h)
	d.Records = append(d.Records, report.Record{Bench: tool, Scenario: "pingpong", System: "raw-xdpndk", Operation: "ping-pong",
		Size: 64, Metric: report.MetricRTTP50, Unit: report.UnitMicros, Value: 12.5, Runs: []float64{12.5}})
	d.Goals = append(d.Goals, report.Goal{Bench: tool, Name: tool + " goal", Comparison: report.AtMost, Limit: 1, Unit: report.UnitRatio,
		Evaluated: true, Value: 2, Required: true})
	return d.Canonical()
}

// TestMergeTableReadme: merge two documents, print the table, write the README section
// twice (the second run replaces the first) with the figures that exist.
func TestMergeTableReadme(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	if err := doc("linkbench").WriteJSON(a); err != nil {
		t.Fatal(err)
	}
	if err := doc("ndkbench").WriteJSON(b); err != nil {
		t.Fatal(err)
	}
	merged := filepath.Join(dir, "out", "results.json")
	if err := merge([]string{"-out", merged, a, b}); err != nil {
		t.Fatal(err)
	}
	if err := merge([]string{"-out", merged, a, a}); err == nil {
		t.Error("merging a bench twice: no error")
	}
	var tb strings.Builder
	if err := table([]string{merged}, &tb); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"by linkbench, ndkbench.", "**linkbench**: veth, MTU 9000, 2 queues", "| pingpong | ping-pong | 64 | rtt_p50_us | 12.5 |", "| ndkbench | ndkbench goal | 2 | <= 1 | **NOT met** |"} {
		if !strings.Contains(tb.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tb.String())
		}
	}

	readmePath := filepath.Join(dir, "README.md")
	svg := filepath.Join(dir, "docs", "bench")
	if err := os.MkdirAll(svg, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(svg, "latency.svg"), []byte("<svg/>"), 0o644); err != nil {
		t.Fatal(err)
	}
	const before, after = "# x\n\n## Benchmarks\n\n", "\n\n## Next\n"
	if err := os.WriteFile(readmePath, []byte(before+beginMarker+"\nold\n"+endMarker+after), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := readme([]string{"-in", merged, "-readme", readmePath, "-svg", svg}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	s := string(got)
	if !strings.HasPrefix(s, before+beginMarker+"\n<!-- Generated") || !strings.HasSuffix(s, "\n"+endMarker+after) || strings.Contains(s, "old") {
		t.Errorf("section not replaced in place:\n%s", s)
	}
	for _, want := range []string{"![Round-trip latency (median) against message size](docs/bench/latency.svg)", "noisy", "| pingpong | ping-pong |"} {
		if !strings.Contains(s, want) {
			t.Errorf("README lacks %q:\n%s", want, s)
		}
	}
	// -sizes limits a bench's rows and says so.
	if err := readme([]string{"-in", merged, "-readme", readmePath, "-svg", svg, "-sizes", "linkbench=9000", "-sizes", "ndkbench=64,128"}); err != nil {
		t.Fatal(err)
	}
	got, err = os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(got); !strings.Contains(s, "The linkbench table shows the sizes 9000 B;") || strings.Count(s, "| pingpong | ping-pong | 64 |") != 1 {
		t.Errorf("-sizes:\n%s", s)
	}
	var tb2 strings.Builder
	if err := table([]string{"-sizes", "linkbench=9000", merged}, &tb2); err != nil || strings.Count(tb2.String(), "| pingpong | ping-pong | 64 |") != 1 {
		t.Errorf("table -sizes (%v):\n%s", err, tb2.String())
	}
	if err := table([]string{"-sizes", "linkbench", merged}, &tb2); err == nil {
		t.Error("-sizes without sizes: no error")
	}
	if strings.Contains(s, "cpu.svg") {
		t.Errorf("README links a figure that does not exist:\n%s", s)
	}
	if err := os.WriteFile(readmePath, []byte("no markers"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := readme([]string{"-in", merged, "-readme", readmePath, "-svg", svg}); err == nil {
		t.Error("a README without markers: no error")
	}
}
