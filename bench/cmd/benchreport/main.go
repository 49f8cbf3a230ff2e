// Command benchreport works on the results documents the benchmarks under bench/ write
// (the shared schema of bench/internal/report, bench/README.md):
//
//	benchreport merge -out bench/out/results.json bench/out/link.json bench/out/transport.json ...
//	benchreport table [-all] [-no-goals] [-sizes BENCH=SIZE,...] bench/out/results.json
//	benchreport readme -in bench/out/results.json -readme README.md -svg docs/bench [-sizes BENCH=SIZE,...]
//
// merge writes one document holding the records and goals of the given ones (each from
// another bench): make bench runs it after the benches, so bench/out/results.json is the
// merged document of the latest make bench. table prints a document as Markdown tables
// (the headline metrics, or -all of them, then the goals). readme rewrites the part of
// README.md between the lines <!-- bench:begin --> and <!-- bench:end -->: where and when
// the figures were measured, the figures that bench/plot drew into the -svg directory (run
// it first), and the table; make bench-readme runs both. -sizes (repeatable) limits a
// bench's rows to some sizes, for a bench that measures many (compare: 2 B to 8 MiB).
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/xdpndk/xdpndk/bench/internal/report"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "merge":
		err = merge(args)
	case "table":
		err = table(args, os.Stdout)
	case "readme":
		err = readme(args)
	case "-h", "-help", "--help", "help":
		usage()
		return
	default:
		fmt.Fprintf(os.Stderr, "benchreport: unknown command %q\n", cmd)
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  benchreport merge -out FILE DOCUMENT...   merge documents of different benches into one
  benchreport table [-all] [-no-goals] [-sizes BENCH=SIZE,...] DOCUMENT
                                            print a document as Markdown tables
  benchreport readme -in DOCUMENT -readme README.md -svg DIR [-sizes BENCH=SIZE,...]
                                            rewrite README.md between <!-- bench:begin --> and <!-- bench:end -->
`)
}

// merge merges the documents named by args into -out.
func merge(args []string) error {
	fs := flag.NewFlagSet("merge", flag.ContinueOnError)
	out := fs.String("out", "bench/out/results.json", "write the merged document to this `file`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("merge: no documents given")
	}
	docs, err := report.ReadDocuments(fs.Args()...)
	if err != nil {
		return err
	}
	m, err := report.Merge(docs...)
	if err != nil {
		return err
	}
	if err := m.WriteJSON(*out); err != nil {
		return err
	}
	fmt.Printf("benchreport: merged %s into %s\n", strings.Join(fs.Args(), ", "), *out)
	return nil
}

// table prints the document named by args as Markdown to w.
func table(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("table", flag.ContinueOnError)
	all := fs.Bool("all", false, "every metric, not only the headline ones (latency, rate, bandwidth, CPU)")
	noGoals := fs.Bool("no-goals", false, "leave the goals out")
	sizes := sizesFlag{}
	fs.Var(sizes, "sizes", "show only these sizes of a bench's rows: `BENCH=SIZE,...` (bytes; repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("table: give one document")
	}
	d, err := report.ReadDocument(fs.Arg(0))
	if err != nil {
		return err
	}
	o := report.MarkdownOptions{Metrics: report.HeadlineMetrics, NoGoals: *noGoals, Sizes: sizes}
	if *all {
		o.Metrics = nil
	}
	fmt.Fprintf(w, "%s\n\n", measuredOn(d))
	for _, n := range d.Header.Notes {
		fmt.Fprintf(w, "Note: %s.\n\n", n)
	}
	return report.WriteMarkdown(w, d, o)
}

// Markers of the generated section of README.md.
const (
	beginMarker = "<!-- bench:begin -->"
	endMarker   = "<!-- bench:end -->"
)

// figures are the SVG files of bench/plot, in the order shown, with their alt text.
var figures = []struct{ file, alt string }{
	{"latency.svg", "Round-trip latency (median) against message size"},
	{"bandwidth.svg", "Bandwidth (median) against message size"},
	{"msgrate.svg", "Message rate (median) against message size"},
	{"cpu.svg", "CPU per message (median) at 64 B and 64 KiB"},
}

// readme rewrites the generated section of the README.
func readme(args []string) error {
	fs := flag.NewFlagSet("readme", flag.ContinueOnError)
	in := fs.String("in", "bench/out/results.json", "the results `document`")
	path := fs.String("readme", "README.md", "the `file` whose section between the markers is rewritten")
	svg := fs.String("svg", "docs/bench", "the `directory` holding the figures bench/plot drew")
	sizes := sizesFlag{}
	fs.Var(sizes, "sizes", "show only these sizes of a bench's rows: `BENCH=SIZE,...` (bytes; repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	d, err := report.ReadDocument(*in)
	if err != nil {
		return err
	}
	old, err := os.ReadFile(*path)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(*path), *svg)
	if err != nil {
		return err
	}
	var figs []string
	for _, f := range figures {
		if _, err := os.Stat(filepath.Join(*svg, f.file)); err == nil {
			figs = append(figs, fmt.Sprintf("![%s](%s)", f.alt, filepath.ToSlash(filepath.Join(rel, f.file))))
		}
	}
	section, err := section(d, *in, figs, sizes)
	if err != nil {
		return err
	}
	out, err := replaceSection(old, section)
	if err != nil {
		return fmt.Errorf("%s: %w", *path, err)
	}
	if err := os.WriteFile(*path, out, 0o644); err != nil {
		return err
	}
	fmt.Printf("benchreport: rewrote the benchmark section of %s from %s (%d figures)\n", *path, *in, len(figs))
	return nil
}

// section returns the generated section: its origin, the caption, the figures, the table
// (a bench of sizes at those sizes only).
func section(d *report.Document, in string, figs []string, sizes sizesFlag) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "<!-- Generated by make bench-readme (bench/cmd/benchreport, bench/plot) from %s: edit those, not this. -->\n\n", filepath.ToSlash(in))
	fmt.Fprintf(&b, "%s\n\n", measuredOn(d))
	for _, n := range d.Header.Notes {
		fmt.Fprintf(&b, "Note: %s.\n\n", n)
	}
	fmt.Fprintf(&b, "The machine is shared with other work and noisy: the %d CPUs serve both hosts of the test bed and "+
		"everything else, and throughput moves by tens of percent between runs. Compare systems within one run, and read "+
		"the medians as rough. bench/README.md says what each bench measures and how; every figure, with every run's "+
		"value, is in the JSON.\n\n", d.Header.CPUs)
	for _, f := range figs {
		fmt.Fprintf(&b, "%s\n\n", f)
	}
	for _, tool := range d.Tools() {
		if s, ok := sizes[tool]; ok {
			var names []string
			for _, n := range s {
				names = append(names, sizeWords(n))
			}
			fmt.Fprintf(&b, "The %s table shows the sizes %s; the figures and the JSON have every size measured.\n\n", tool, strings.Join(names, ", "))
		}
	}
	if err := report.WriteMarkdown(&b, d, report.MarkdownOptions{Metrics: report.HeadlineMetrics, Sizes: sizes}); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// sizeWords formats a size for a sentence: 64 B, 9000 B, 4 KiB, 1 MiB.
func sizeWords(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// sizesFlag is -sizes: per bench, the sizes its table shows (BENCH=SIZE,SIZE; repeatable).
type sizesFlag map[string][]int

func (f sizesFlag) String() string {
	var parts []string
	for k, v := range f {
		parts = append(parts, k+"="+f.list(v))
	}
	return strings.Join(parts, " ")
}

// list formats sizes as -sizes takes them.
func (sizesFlag) list(sizes []int) string {
	var p []string
	for _, n := range sizes {
		p = append(p, strconv.Itoa(n))
	}
	return strings.Join(p, ",")
}

func (f sizesFlag) Set(v string) error {
	bench, list, ok := strings.Cut(v, "=")
	if !ok || bench == "" || list == "" {
		return fmt.Errorf("%q: BENCH=SIZE,SIZE", v)
	}
	for _, s := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			return fmt.Errorf("%q: %q is not a size in bytes", v, s)
		}
		f[bench] = append(f[bench], n)
	}
	return nil
}

// measuredOn says where, when and with what the document's figures were measured.
func measuredOn(d *report.Document) string {
	h := d.Header
	date, _, _ := strings.Cut(h.Time, "T")
	return fmt.Sprintf("Measured on **%s** (%s, %d CPUs, Linux %s, %s) on %s at %s by %s.",
		h.Host.Name, h.CPU, h.CPUs, h.Kernel, h.Go, date, h.Build, strings.Join(d.Tools(), ", "))
}

// replaceSection returns readme with the lines between the markers replaced by section.
func replaceSection(readme, section []byte) ([]byte, error) {
	begin := bytes.Index(readme, []byte(beginMarker))
	end := bytes.Index(readme, []byte(endMarker))
	if begin < 0 || end < 0 || end < begin {
		return nil, fmt.Errorf("no %s ... %s section", beginMarker, endMarker)
	}
	var out bytes.Buffer
	out.Write(readme[:begin+len(beginMarker)])
	out.WriteString("\n")
	out.Write(section)
	out.WriteString("\n")
	out.Write(readme[end:])
	return out.Bytes(), nil
}
