// Command linkbench measures raw datagram links side by side on a two-namespace veth test
// bed: our AF_XDP link (xdpndk), asavie/xdp, and kernel UDP. It prints a table and writes
// the figures as JSON (bench/README.md describes both). It needs root.
//
//	go run ./bench/cmd/linkbench             # full run, about two minutes
//	go run ./bench/cmd/linkbench -quick      # a few seconds
//	go run ./bench/cmd/linkbench -systems xdpndk,asavie -sizes 64 -runs 5
package main

import (
	"context"
	"flag"
	"fmt"
	"github.com/xdpndk/xdpndk/bpf"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/xdpndk/xdpndk/bench/linkbench"
)

func main() {
	os.Exit(run())
}

func run() int {
	def := linkbench.DefaultOptions()
	var (
		out       = flag.String("out", "bench/out/results.json", "write the JSON results to this `path`")
		quick     = flag.Bool("quick", false, "short run (300 ms windows, 1 run, 2000 round trips); explicit flags still win")
		duration  = flag.Duration("duration", def.Duration, "measured window of each one-way measurement")
		warmup    = flag.Duration("warmup", def.Warmup, "warm-up before each one-way window")
		runs      = flag.Int("runs", def.Runs, "repeat every measurement this many times and report the median")
		pingN     = flag.Int("pingpong-n", def.PingPongN, "round trips per ping-pong measurement (0 skips it)")
		pingWarm  = flag.Int("pingpong-warmup", def.PingPongWarmup, "first round trips left out of the statistics")
		sizes     = flag.String("sizes", "64,1500,9000", "one-way `sizes` (IP packet length in bytes, comma-separated; empty skips one-way)")
		systems   = flag.String("systems", "all", "systems to measure: comma-separated from xdpndk,xdpndk-no-wakeup,asavie,kernel-udp, or all")
		batch     = flag.Int("batch", def.Batch, "datagrams per send call")
		attach    = flag.String("attach", "auto", "XDP attach mode of the steering program: auto (native, then generic), native or generic")
		cpuprof   = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this `file` (go tool pprof)")
		verbose   = flag.Bool("v", false, "log what the xdp package got from the kernel")
		noProgres = flag.Bool("q", false, "do not print progress lines")
	)
	flag.Parse()
	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		if err != nil {
			fmt.Fprintf(os.Stderr, "linkbench: %v\n", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "linkbench: start cpu profile: %v\n", err)
			os.Exit(1)
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}

	o := def
	if *quick {
		o = linkbench.QuickOptions()
	}
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["duration"] || !*quick {
		o.Duration = *duration
	}
	if set["warmup"] || !*quick {
		o.Warmup = *warmup
	}
	if set["runs"] || !*quick {
		o.Runs = *runs
	}
	if set["pingpong-n"] || !*quick {
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
		os.Exit(2)
	}
	var err error
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

	// Ctrl-C or SIGTERM stops the measurement in progress; Run then removes the bed. A
	// second signal kills the process (the next run sweeps what it left).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop()
	}()

	start := time.Now()
	res, err := linkbench.Run(ctx, o)
	if res == nil {
		fmt.Fprintln(os.Stderr, "linkbench:", err)
		return 1
	}
	fmt.Println()
	if werr := res.WriteTable(os.Stdout); werr != nil {
		fmt.Fprintln(os.Stderr, "linkbench: print table:", werr)
	}
	fmt.Println()
	for _, sys := range linkbench.AllSystems {
		if m, ok := res.Header.Modes[sys]; ok {
			fmt.Printf("mode %-16s %s\n", sys, m)
		}
	}
	fmt.Printf("kernel %s, %s, %d CPUs, %s, MTU %d, %v\n", res.Header.Kernel, res.Header.CPU, res.Header.CPUs,
		res.Header.Go, res.Header.MTU, time.Since(start).Round(time.Second))
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "linkbench: interrupted; results not written")
		return 130
	}
	if werr := res.WriteJSON(*out); werr != nil {
		fmt.Fprintln(os.Stderr, "linkbench:", werr)
		return 1
	}
	fmt.Println("results written to", *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "linkbench:", err)
		return 1
	}
	return 0
}
