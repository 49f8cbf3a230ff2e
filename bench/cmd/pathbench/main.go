// Command pathbench measures congestion control and loss recovery of the NDK verbs on real
// paths between network namespaces: a routed test bed with a tc tbf bottleneck (one QP,
// two QPs, one QP beside an iperf3 TCP flow, 1% random loss on the router) and the plain
// bed with the XDP programs dropping 1% and 10% (bench/README.md, "bench: real paths"). It
// prints the figures and the goals with met / NOT met, then, when ndkbench's results are
// there, ndkbench's lossless goodput beside them, and writes the figures as JSON. It needs
// root, and iperf3 for the tcp scenario.
//
//	go run ./bench/cmd/pathbench                      # every scenario 3 times, about two minutes (make bench-path)
//	go run ./bench/cmd/pathbench -scenarios xdp -runs 5 -duration 2s
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/bench/ndkbench"
	"github.com/xdpndk/xdpndk/bench/pathbench"
)

func main() {
	os.Exit(run())
}

func run() int {
	def := pathbench.DefaultOptions()
	var (
		scenarios = flag.String("scenarios", "all", "comma-separated from single,two,tcp,loss,xdp, or all")
		runs      = flag.Int("runs", def.Runs, "repeat every scenario this many times and report the medians")
		duration  = flag.Duration("duration", def.Duration, "measured window of every scenario")
		warmup    = flag.Duration("warmup", def.Warmup, "warm-up before each window (also the two-QP stagger)")
		out       = flag.String("json", "bench/out/path.json", "write the JSON results to this `path`")
		ndkJSON   = flag.String("ndk-json", "bench/out/ndk.json", "ndkbench's results, shown beside ours when the file exists")
		quiet     = flag.Bool("q", false, "do not print progress lines")
	)
	flag.Parse()
	report.ThisBuild() // the commit at the start of the run (git may be asked), not at its end
	o := def
	o.Scenarios = pathbench.ParseScenarios(*scenarios)
	o.Runs, o.Duration, o.Warmup = *runs, *duration, *warmup
	if o.Sample > o.Duration/2 {
		o.Sample = o.Duration / 2
	}
	if !*quiet {
		o.Progress = os.Stderr
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "pathbench: needs root (network namespaces, XDP programs, AF_XDP sockets, tc)")
		return 2
	}
	ctx, stop := report.SignalContext()
	defer stop()

	start := time.Now()
	res, err := pathbench.Run(ctx, o)
	if res == nil {
		fmt.Fprintln(os.Stderr, "pathbench:", err)
		return 1
	}
	cf := report.Flags{Name: "pathbench", Out: *out}
	return cf.Finish(ctx, res, func() {
		fmt.Println()
		for _, k := range []string{"routed", "plain", pathbench.SystemTCP} {
			if m, ok := res.Header.Modes[k]; ok {
				fmt.Printf("mode %-10s %s\n", k, m)
			}
		}
		for _, n := range res.Header.Notes {
			if report.IsFailed(n) {
				fmt.Println(n)
			}
		}
		besideNDK(*ndkJSON, res)
		fmt.Printf("kernel %s, %s, %d CPUs, %s, MTU %d, %v\n", res.Header.Kernel, res.Header.CPU, res.Header.CPUs,
			res.Header.Go, res.Header.MTU, time.Since(start).Round(time.Second))
	}, err)
}

// besideNDK prints ndkbench's 64 KiB Write goodput (from its results file, if there) next
// to ours on the plain bed without loss and through the bottleneck.
func besideNDK(path string, res *pathbench.Results) {
	nres, err := ndkbench.ReadJSON(path)
	if err != nil {
		return
	}
	rec := nres.Find(report.Key{Bench: ndkbench.Tool, Scenario: ndkbench.BenchGoodput, System: ndkbench.SystemNDK(ndkbench.ModeInline),
		Operation: ndkbench.OpWriteUMEM, Size: ndkbench.GoodputSize, Metric: ndkbench.MetricGbps})
	if rec == nil {
		return
	}
	fmt.Printf("\nbeside ndkbench (%s, %s): 64 KiB Write goodput, plain bed, no loss: %.2f Gbit/s\n", path, nres.Header.Time, rec.Value)
	w := func(sc string) *pathbench.Record {
		return res.Find(pathbench.Ref{Benchmark: sc, System: pathbench.SystemNDK, Op: pathbench.OpWrite, Size: pathbench.WriteSize, Metric: pathbench.MetricGoodput})
	}
	if r := w(pathbench.ScenarioXDP); r != nil {
		fmt.Printf("  pathbench xdp, no loss (plain bed, one QP, A's CQ polled inline, B adaptive): %.2f Gbit/s\n", r.Value)
	}
	if r := w(pathbench.ScenarioSingle); r != nil {
		fmt.Printf("  pathbench single (through the %.1f Gbit/s bottleneck):                     %.2f Gbit/s\n", float64(res.Header.Config.RateBps)/1e9, r.Value)
	}
}
