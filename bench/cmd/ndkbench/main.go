// Command ndkbench measures the NDK verbs (package ndk) between the two hosts of a
// two-namespace veth test bed, together with their baselines in the same run: the raw
// AF_XDP link (bench/linkbench) and kernel TCP. It prints a table, the goal ratios with
// met / not met, and writes the figures as JSON (bench/README.md describes both). It needs
// root.
//
//	go run ./bench/cmd/ndkbench              # full run, about a minute (make bench)
//	go run ./bench/cmd/ndkbench -quick       # a few seconds (bench/cmd/rawdemo runs it)
//	go run ./bench/cmd/ndkbench -modes inline -runs 5 -cpuprofile cpu.out
//	go run ./bench/cmd/ndkbench -scale-only -scale 1024 -runs 5   # 1024 QPs on one adapter pair
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/bench/ndkbench"
)

func main() {
	os.Exit(run())
}

func run() int {
	def := ndkbench.DefaultOptions()
	cf := report.Flags{Name: "ndkbench"}
	cf.Define("bench/out/ndk.json", "short run (1 repetition, inline mode only, 2000 round trips, 300 ms windows); explicit flags still win")
	var (
		runs        = flag.Int("runs", def.Runs, "repeat every measurement this many times and report the median")
		modes       = flag.String("modes", "all", "ndk progress modes: comma-separated from inline,busy,adaptive, or all")
		pingN       = flag.Int("pingpong-n", def.PingPongN, "round trips per ping-pong (ndk, raw, TCP), warm-up included")
		pingWarm    = flag.Int("pingpong-warmup", def.PingPongWarmup, "first round trips (and latency samples) left out")
		latN        = flag.Int("latency-n", def.LatencyN, "Writes and Reads per latency measurement, warm-up included")
		bound       = flag.Duration("bound", def.Bound, "time bound of each ping-pong or latency measurement")
		duration    = flag.Duration("duration", def.Duration, "measured window of the rate, goodput and raw one-way figures")
		warmup      = flag.Duration("warmup", def.Warmup, "warm-up before each window")
		outstanding = flag.Int("outstanding", def.Outstanding, "64-byte Writes kept posted by the message-rate figure")
		signalEvery = flag.Int("signal-every", def.SignalEvery, "in the silent message-rate variant, every N-th Write is signaled (1 skips the variant)")
		gOut        = flag.Int("goodput-outstanding", def.GoodputOutstanding, "64 KiB Writes kept posted by the goodput figure")
		idle        = flag.Duration("idle", def.Idle, "window of the idle figure (process CPU while the inline pair sits idle, B in CQ.Wait)")
		noBase      = flag.Bool("no-baselines", false, "skip the raw and TCP baselines (goals are then not evaluated)")
		quiet       = flag.Bool("q", false, "do not print progress lines")
		counters    = flag.Bool("v", false, "add QP and link counters (retransmissions, timeouts, drops) to the progress lines")
		allQueues   = flag.Bool("all-queues", false, "the ndk adapters serve every queue of the bed (as ndk.Open does by default), not queue 0 only")
		engines     = flag.String("engines", "1,2", "engine counts of the engines figure (adapters of that many engines on both hosts); empty skips it")
		engineQPs   = flag.Int("engine-qps", def.EngineQPs, "QP pairs of the engines figure, spread over the engines")
		engineLoops = flag.String("engine-loops", def.EngineLoops, "who drives the engines figure's QPs: side (one loop per host) or engine (one per engine and host)")
		onlyEngines = flag.Bool("only-engines", false, "measure the engines figure alone")
		scale       = flag.Int("scale", def.Scale, "QP pairs of the scale figures (64-byte Write rate on one of them and over all, idle CPU with all connected); 0 skips them")
		scaleOut    = flag.Int("scale-outstanding", def.ScaleOutstanding, "64-byte Writes kept outstanding on each QP by the rate over all scale QPs")
		scaleIdle   = flag.Duration("scale-idle", def.ScaleIdle, "window of the idle figure with all scale QP pairs connected")
		scaleOnly   = flag.Bool("scale-only", false, "measure the scale figures only (no baselines, no other ndk figure)")
	)
	stopProfile, set, err := cf.Parse()
	if err != nil {
		fmt.Fprintf(os.Stderr, "ndkbench: %v\n", err)
		return 1
	}
	defer stopProfile()

	o := def
	if cf.Quick {
		o = ndkbench.QuickOptions()
	}
	pick := func(name string, dst *int, v int) {
		if set[name] || !cf.Quick {
			*dst = v
		}
	}
	pickD := func(name string, dst *time.Duration, v time.Duration) {
		if set[name] || !cf.Quick {
			*dst = v
		}
	}
	pick("runs", &o.Runs, *runs)
	pick("pingpong-n", &o.PingPongN, *pingN)
	pick("pingpong-warmup", &o.PingPongWarmup, *pingWarm)
	pick("latency-n", &o.LatencyN, *latN)
	pickD("bound", &o.Bound, *bound)
	pickD("duration", &o.Duration, *duration)
	pickD("warmup", &o.Warmup, *warmup)
	pick("outstanding", &o.Outstanding, *outstanding)
	pick("signal-every", &o.SignalEvery, *signalEvery)
	pick("goodput-outstanding", &o.GoodputOutstanding, *gOut)
	pickD("idle", &o.Idle, *idle)
	pick("scale", &o.Scale, *scale)
	pick("scale-outstanding", &o.ScaleOutstanding, *scaleOut)
	pickD("scale-idle", &o.ScaleIdle, *scaleIdle)
	o.ScaleOnly = *scaleOnly
	if set["modes"] || !cf.Quick {
		o.Modes = ndkbench.ParseModes(*modes)
	}
	if set["engines"] || !cf.Quick {
		o.Engines = nil
		if *engines != "" {
			sizes, err := report.ParseSizes(*engines)
			if err != nil {
				fmt.Fprintf(os.Stderr, "ndkbench: -engines: %v\n", err)
				return 1
			}
			o.Engines = sizes
		}
	}
	pick("engine-qps", &o.EngineQPs, *engineQPs)
	o.EngineLoops = *engineLoops
	o.OnlyEngines = *onlyEngines
	o.Baselines = !*noBase
	o.Counters = *counters
	o.AllQueues = *allQueues
	if !*quiet {
		o.Progress = os.Stderr
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "ndkbench: needs root (network namespaces, XDP programs, AF_XDP sockets)")
		return 2
	}

	// Ctrl-C or SIGTERM stops the measurement in progress; Run then removes the bed.
	ctx, stop := report.SignalContext()
	defer stop()

	start := time.Now()
	res, err := ndkbench.Run(ctx, o)
	if res == nil {
		fmt.Fprintln(os.Stderr, "ndkbench:", err)
		return 1
	}
	return cf.Finish(ctx, res, func() {
		fmt.Println()
		for _, sys := range []string{ndkbench.SystemRaw, ndkbench.SystemTCP, ndkbench.SystemNDK(ndkbench.ModeInline),
			ndkbench.SystemNDK(ndkbench.ModeBusy), ndkbench.SystemNDK(ndkbench.ModeAdaptive),
			ndkbench.SystemEngines(1), ndkbench.SystemEngines(2)} {
			if m, ok := res.Header.Modes[sys]; ok {
				fmt.Printf("mode %-13s %s\n", sys, m)
			}
		}
		for _, n := range res.Header.Notes {
			if report.IsFailed(n) {
				fmt.Println(n)
			}
		}
		fmt.Printf("kernel %s, %s, %d CPUs, %s, MTU %d, %v\n", res.Header.Kernel, res.Header.CPU, res.Header.CPUs,
			res.Header.Go, res.Header.MTU, time.Since(start).Round(time.Second))
	}, err)
}
