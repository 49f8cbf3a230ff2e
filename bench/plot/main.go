// Command plot draws the results of the benchmarks under bench/ (a document of the shared
// results schema, bench/README.md: normally bench/out/results.json, which make bench
// writes) as SVG figures:
//
//   - latency.svg: the round trip's median (rtt_p50_us) against the message size, log-log,
//     and for a system that reports no median its mean (rtt_mean_us), labelled "(mean)";
//   - bandwidth.svg: Gbit/s (gbit_per_s) against the message size;
//   - msgrate.svg: messages per second (msg_per_s) against the message size, log-log;
//   - cpu.svg: the CPU per message (cpu_us_per_msg) at 64 B and 64 KiB, as bars (a figure
//     within 0.2% of the size, such as UDP's largest payload of 65507 B, says its size).
//
// One line per system (and operation, where a system has several), each system in the
// same color in every figure; a metric measured at one size only is drawn as bars. The
// title names the machine, the date and the commit. Figures measured under extra
// conditions (records with params: loss, RTT, flows) are not drawn: these figures compare
// systems by size. A figure without data is not written, and an earlier file of its name
// is removed, so that the directory holds only what the document shows.
//
// It is a module of its own (its plotting library stays out of the main module):
//
//	cd bench/plot && go run . -in ../out/results.json -out ../out
//
// make bench runs it into bench/out, make bench-readme into docs/bench.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

func main() {
	in := flag.String("in", "../out/results.json", "the results `document` to draw")
	out := flag.String("out", "../out", "write the SVG files into this `directory`")
	skip := flag.String("skip", "", "leave out the records whose bench/scenario/system/operation matches this `regexp`")
	flag.Parse()
	var re *regexp.Regexp
	if *skip != "" {
		var err error
		if re, err = regexp.Compile(*skip); err != nil {
			fmt.Fprintln(os.Stderr, "plot: -skip:", err)
			os.Exit(2)
		}
	}
	d, err := readDocument(*in)
	if err != nil {
		fmt.Fprintln(os.Stderr, "plot:", err)
		os.Exit(1)
	}
	written, err := drawAll(d, *out, re)
	for _, w := range written {
		fmt.Println("plot: wrote", w)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "plot:", err)
		os.Exit(1)
	}
}

// Figure files, in the order they are drawn (the README shows them in this order).
const (
	fileLatency   = "latency.svg"
	fileBandwidth = "bandwidth.svg"
	fileMsgRate   = "msgrate.svg"
	fileCPU       = "cpu.svg"
)

// Files lists every figure file the command may write.
var Files = []string{fileLatency, fileBandwidth, fileMsgRate, fileCPU}

// drawAll writes d's figures into dir (created) and removes the files of figures without
// data; it returns the paths written.
func drawAll(d *document, dir string, skip *regexp.Regexp) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	st := newStyler(d, metricRTTP50, metricRTTAvg, metricGbps, metricMsg, metricCPUMsg)
	host := hostLine(d)
	figs := map[string]func() (*figure, error){
		fileLatency: func() (*figure, error) {
			return sizeFigure("Round-trip latency (median; mean where a tool reports only that)", host, "µs", true,
				selectSeries(d, selection{metric: metricRTTP50, fallback: metricRTTAvg, suffix: " (mean)", skip: skip}), st)
		},
		fileBandwidth: func() (*figure, error) {
			return sizeFigure("Bandwidth (median)", host, "Gbit/s", false,
				selectSeries(d, selection{metric: metricGbps, skip: skip}), st)
		},
		fileMsgRate: func() (*figure, error) {
			return sizeFigure("Message rate (median)", host, "messages/s", true,
				selectSeries(d, selection{metric: metricMsg, skip: skip}), st)
		},
		fileCPU: func() (*figure, error) {
			sizes := []int{64, 64 << 10}
			return cpuFigure("CPU per message (median)", host,
				selectSeries(d, selection{metric: metricCPUMsg, sizes: sizes, skip: skip}), sizes, st)
		},
	}
	var written []string
	var errs []error
	for _, name := range Files {
		path := filepath.Join(dir, name)
		f, err := figs[name]()
		if errors.Is(err, errNoData) {
			if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
				errs = append(errs, err)
			}
			continue
		}
		if err == nil {
			err = writeSVG(path, f)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		written = append(written, path)
	}
	return written, errors.Join(errs...)
}

// hostLine describes where and when the figures were measured: the host, its CPU, the
// date and the commit.
func hostLine(d *document) string {
	h := d.Header
	date, _, _ := strings.Cut(h.Time, "T")
	s := fmt.Sprintf("%s: %s, %d CPUs, Linux %s; %s", h.Host, h.CPU, h.CPUs, h.Kernel, date)
	if h.Commit != "" {
		c := h.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		s += ", commit " + c
		if h.Modified {
			s += " (modified)"
		}
	}
	return s
}
