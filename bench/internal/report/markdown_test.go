package report

import (
	"errors"
	"strings"
	"testing"
)

func TestWriteMarkdown(t *testing.T) {
	var b strings.Builder
	if err := WriteMarkdown(&b, sampleDocument(), MarkdownOptions{Metrics: HeadlineMetrics}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"**comparebench**: veth, MTU 9000, 2 queues (two network namespaces); median of 3 runs\n",
		"| scenario | operation | size | metric | xdpndk-inline | raw-xdpndk | qperf-tcp | sockperf-udp | raw-asavie |\n",
		"| --- | --- | --: | --- | --: | --: | --: | --: | --: |\n",
		"| pingpong | ping-pong | 64 | rtt_p50_us |  | 7.35 |  | 26.2 | 8 |\n",
		"| pingpong | ping-pong | 16 KiB | rtt_p50_us |  | 96.6 |  | 345 | unsupported |\n",
		"| pingpong | send/recv | 64 KiB | cpu_us_per_msg | 20.4 |",
		"**transportbench**: simlink, MTU 1500, 1 queue (virtual time); median of 1 run\n",
		"| scenario | operation | size | params | metric | selective |\n",
		"| goodput | write | 64 KiB | loss_pct=1 | gbit_per_s | 8 |\n",
		"| bench | goal | value | target | verdict | note |\n",
		"| comparebench | ndk ping-pong p50 / raw ping-pong p50 | 1.29 | <= 1.50 | met |  |\n",
		"| comparebench | ndk 64 KiB goodput / iperf3 TCP goodput | 0.400 | >= 1 | reported: NOT met | not required: TCP coalesces",
		"| comparebench | ndk 64 B msg/s / raw msg/s | 0.500 | >= 0.700 | **NOT met** |  |\n",
		"| comparebench | idle CPU | - | < 0.0100 cores | not evaluated | the idle figure failed |\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, out)
		}
	}
	// Headline metrics only, in their order within a row group; rows of one metric by size.
	if strings.Contains(out, "samples") || strings.Index(out, "| 64 | rtt_p50_us |") > strings.Index(out, "| 64 | rtt_p99_us |") {
		t.Errorf("rows not as selected and ordered:\n%s", out)
	}

	// A failed measurement is listed under its bench's table, without its counters.
	d := sampleDocument()
	d.Sources[1].Notes = append(d.Sources[1].Notes, FailedNote(errors.New("selective, seed 2: stalled; counters: [A: ...]")))
	b.Reset()
	if err := WriteMarkdown(&b, d, MarkdownOptions{NoGoals: true}); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "| 8 |\n\nFailed in this run (the figures hold the other runs):\n\n- FAILED: selective, seed 2: stalled\n") || strings.Contains(out, "counters") {
		t.Errorf("failures not listed under their bench:\n%s", out)
	}

	// A bench's sizes filter keeps its rows at those sizes only; the other benches keep all.
	b.Reset()
	if err := WriteMarkdown(&b, sampleDocument(), MarkdownOptions{Metrics: HeadlineMetrics, NoGoals: true, Sizes: map[string][]int{"comparebench": {64}}}); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "| pingpong | ping-pong | 64 | rtt_p50_us |") || strings.Contains(out, "16 KiB") ||
		!strings.Contains(out, "| goodput | write | 64 KiB | loss_pct=1 | gbit_per_s | 8 |") {
		t.Errorf("sizes filter:\n%s", out)
	}

	// Without a metric filter every metric shows, unsupported as its own row.
	b.Reset()
	if err := WriteMarkdown(&b, sampleDocument(), MarkdownOptions{NoGoals: true}); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "| pingpong | ping-pong | 16 KiB | unsupported |") || strings.Contains(out, "| bench | goal |") {
		t.Errorf("all metrics, no goals:\n%s", out)
	}
}

func TestFormatValue(t *testing.T) {
	for v, want := range map[float64]string{
		0: "0", 7: "7", 7.5: "7.50", 12.34: "12.3", 431: "431", 9999: "9999", 43100: "43.1k", 431000: "431k",
		1.5e6: "1.50M", 2.5e9: "2.50G", 1.5e11: "150G", 0.0123: "0.0123", -3.5: "-3.50",
	} {
		if got := FormatValue(v); got != want {
			t.Errorf("FormatValue(%v) = %q, want %q", v, got, want)
		}
	}
	if got := sizeString(65536) + "," + sizeString(9000) + "," + sizeString(1<<20); got != "64 KiB,9000,1 MiB" {
		t.Errorf("sizes %q", got)
	}
}
