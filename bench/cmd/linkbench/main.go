// Command linkbench measures raw datagram links side by side on a two-namespace veth test
// bed: our AF_XDP link (xdpndk), asavie/xdp, and kernel UDP. It prints a table and writes
// the figures as JSON (bench/README.md describes both). It needs root.
//
//	go run ./bench/cmd/linkbench             # full run, about two minutes
//	go run ./bench/cmd/linkbench -quick      # a few seconds
//	go run ./bench/cmd/linkbench -systems xdpndk,asavie -sizes 64 -runs 5
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/xdpndk/xdpndk/bpf"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/bench/linkbench"
)

func main() {
	os.Exit(run())
}

func run() int {
	def := linkbench.DefaultOptions()
	cf := report.Flags{Name: "linkbench"}
	cf.Define("bench/out/link.json", "short run (300 ms windows, 1 run, 2000 round trips); explicit flags still win")
	var (
		duration  = flag.Duration("duration", def.Duration, "measured window of each one-way measurement")
		warmup    = flag.Duration("warmup", def.Warmup, "warm-up before each one-way window")
		runs      = flag.Int("runs", def.Runs, "repeat every measurement this many times and report the median")
		pingN     = flag.Int("pingpong-n", def.PingPongN, "round trips per ping-pong measurement (0 skips it)")
		pingWarm  = flag.Int("pingpong-warmup", def.PingPongWarmup, "first round trips left out of the statistics")
		sizes     = flag.String("sizes", "64,1500,9000", "one-way `sizes` (IP packet length in bytes, comma-separated; empty skips one-way)")
		systems   = flag.String("systems", "all", "systems to measure: comma-separated from raw-xdpndk,raw-xdpndk-no-wakeup,raw-asavie,kernel-udp (or xdpndk,xdpndk-no-wakeup,asavie), or all")
		batch     = flag.Int("batch", def.Batch, "datagrams per send call")
		attach    = flag.String("attach", "auto", "XDP attach mode of the steering program: auto (native, then generic), native or generic")
		verbose   = flag.Bool("v", false, "log what the xdp package got from the kernel")
		noProgres = flag.Bool("q", false, "do not print progress lines")
	)
	stopProfile, set, err := cf.Parse()
	if err != nil {
		fmt.Fprintf(os.Stderr, "linkbench: %v\n", err)
		return 1
	}
	defer stopProfile()

	o := def
	if cf.Quick {
		o = linkbench.QuickOptions()
	}
	if set["duration"] || !cf.Quick {
		o.Duration = *duration
	}
	if set["warmup"] || !cf.Quick {
		o.Warmup = *warmup
	}
	if set["runs"] || !cf.Quick {
		o.Runs = *runs
	}
	if set["pingpong-n"] || !cf.Quick {
		o.PingPongN = *pingN
	}
	o.PingPongWarmup = *pingWarm
	o.Batch = *batch
	switch *attach {
	case "auto":
		o.Attach = bpf.AttachAuto
	case "native":
		o.Attach = bpf.AttachNative
	case "generic":
		o.Attach = bpf.AttachGeneric
	default:
		fmt.Fprintf(os.Stderr, "linkbench: -attach %q: want auto, native or generic\n", *attach)
		return 2
	}
	if o.Sizes, err = linkbench.ParseSizes(*sizes); err != nil {
		fmt.Fprintln(os.Stderr, "linkbench:", err)
		return 2
	}
	o.Systems = linkbench.ParseSystems(*systems)
	if *verbose {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if !*noProgres {
		o.Progress = os.Stderr
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "linkbench: needs root (network namespaces, XDP programs, AF_XDP sockets)")
		return 2
	}

	// Ctrl-C or SIGTERM stops the measurement in progress; Run then removes the bed.
	ctx, stop := report.SignalContext()
	defer stop()

	start := time.Now()
	res, err := linkbench.Run(ctx, o)
	if res == nil {
		fmt.Fprintln(os.Stderr, "linkbench:", err)
		return 1
	}
	return cf.Finish(ctx, res, func() {
		fmt.Println()
		for _, sys := range linkbench.AllSystems {
			if m, ok := res.Header.Modes[sys]; ok {
				fmt.Printf("mode %-20s %s\n", sys, m)
			}
		}
		fmt.Printf("kernel %s, %s, %d CPUs, %s, MTU %d, %v\n", res.Header.Kernel, res.Header.CPU, res.Header.CPUs,
			res.Header.Go, res.Header.MTU, time.Since(start).Round(time.Second))
	}, err)
}
