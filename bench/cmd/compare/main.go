// Command compare measures xdpndk against the tools a user would run instead (qperf,
// iperf3, sockperf, libfabric's fi_pingpong) and against the raw AF_XDP links, every
// system in every repetition on one two-namespace bed, and writes the figures and goals in
// the shared results schema (bench/README.md, "bench: compare"). Progress lines go to
// stderr; the summary, the Markdown table and the goals to stdout. It needs root.
//
//	go run ./bench/cmd/compare            # full run: 3 repetitions, 2 B to 8 MiB (make bench)
//	go run ./bench/cmd/compare -quick     # 2 repetitions at 64 B, 4 KiB, 64 KiB, 1 MiB (BENCH_QUICK=1 make bench)
//	go run ./bench/cmd/compare -systems xdpndk,sockperf-udp -sizes 64,4K -runs 5 -longpath=false
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/xdpndk/xdpndk/bench/compare"
	"github.com/xdpndk/xdpndk/bench/internal/report"
)

func main() {
	os.Exit(run())
}

func run() int {
	def := compare.DefaultOptions()
	cf := report.Flags{Name: "compare"}
	cf.Define("bench/out/compare.json", "quick run: 2 repetitions at 64 B, 4 KiB, 64 KiB and 1 MiB (sockperf at 64 and 65507 B), shorter windows; explicit flags still win")
	var (
		runs      = flag.Int("runs", def.Runs, "repetitions (each measures every system once; medians are reported)")
		systems   = flag.String("systems", "all", "systems to measure: comma-separated from "+fmt.Sprint(compare.AllSystems)+", or all")
		sizes     = flag.String("sizes", "", "message sizes of xdpndk and qperf, comma-separated, K and M suffixes (default: 2 B to 8 MiB by powers of two; quick: 64,4K,64K,1M)")
		iperf     = flag.String("iperf3-sizes", "", "iperf3's write sizes (-l) (default 64,4K,64K,1M)")
		sockperf  = flag.String("sockperf-sizes", "", "sockperf's message sizes, at most 65507 (default 64,1K,4K,16K,65507; quick: 64,65507)")
		fabric    = flag.String("fabric-sizes", "", "fi_pingpong's message sizes (default 2,64,1K,4K,64K,256K,1M,8M; quick: 64,4K,64K,1M)")
		window    = flag.Duration("window", def.NdkpeerWindow, "ndkpeer's measured window per size (-D)")
		toolTime  = flag.Duration("tool-time", def.ToolTime, "qperf's, iperf3's and sockperf's -t (whole seconds)")
		linkWin   = flag.Duration("link-window", def.LinkWindow, "the raw link's one-way window")
		fabTarget = flag.Duration("fabric-target", def.FabricTarget, "time fi_pingpong's iterations are chosen to take at a size")
		lp        = flag.Bool("longpath", def.LongPath, "after the repetitions, the long paths (bench/longpath: ndkpeer write-bw, read-bw against iperf3 through a delay line)")
		lpRuns    = flag.Int("longpath-runs", def.LongPathRuns, "runs of each long-path measurement (quick: 1)")
		ndkpeer   = flag.String("ndkpeer", "", "the ndkpeer `binary` to run (default: go build ./cmd/ndkpeer into a temporary directory)")
		quiet     = flag.Bool("q", false, "do not print progress lines")
	)
	stopProfile, set, err := cf.Parse()
	if err != nil {
		fmt.Fprintf(os.Stderr, "compare: %v\n", err)
		return 1
	}
	defer stopProfile()

	o := def
	if cf.Quick {
		o = compare.QuickOptions()
	}
	pickInt := func(name string, dst *int, v int) {
		if set[name] || !cf.Quick {
			*dst = v
		}
	}
	pickD := func(name string, dst *time.Duration, v time.Duration) {
		if set[name] || !cf.Quick {
			*dst = v
		}
	}
	pickInt("runs", &o.Runs, *runs)
	pickD("window", &o.NdkpeerWindow, *window)
	pickD("tool-time", &o.ToolTime, *toolTime)
	pickD("link-window", &o.LinkWindow, *linkWin)
	pickD("fabric-target", &o.FabricTarget, *fabTarget)
	pickInt("longpath-runs", &o.LongPathRuns, *lpRuns)
	o.LongPath = *lp
	o.Systems = compare.ParseSystems(*systems)
	for _, s := range []struct {
		flag string
		v    string
		dst  *[]int
	}{{"sizes", *sizes, &o.Sizes}, {"iperf3-sizes", *iperf, &o.Iperf3Sizes}, {"sockperf-sizes", *sockperf, &o.SockperfSizes}, {"fabric-sizes", *fabric, &o.FabricSizes}} {
		if !set[s.flag] {
			continue
		}
		v, err := compare.ParseSizes(s.v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "compare: -%s: %v\n", s.flag, err)
			return 2
		}
		*s.dst = v
	}
	o.Ndkpeer = *ndkpeer
	if !*quiet {
		o.Progress = os.Stderr
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "compare: needs root (network namespaces, XDP programs, AF_XDP sockets)")
		return 2
	}

	// Ctrl-C or SIGTERM stops the measurement in progress; Run then removes the bed.
	ctx, stop := report.SignalContext()
	defer stop()

	start := time.Now()
	res, err := compare.Run(ctx, o)
	if res == nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		return 1
	}
	return cf.Finish(ctx, res, func() {
		fmt.Println()
		for _, n := range res.Header.Notes {
			if report.IsFailed(n) {
				fmt.Println(n)
			}
		}
		fmt.Printf("%s, %d CPUs, kernel %s, %s; %d repetitions in %v\n", res.Header.CPU, res.Header.CPUs, res.Header.Kernel,
			res.Header.Go, o.Runs, time.Since(start).Round(time.Second))
	}, err)
}
