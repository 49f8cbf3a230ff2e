// Command transportbench measures the transport engine's goodput under random loss, in
// virtual time over the simulated network (transport/simlink): one QP pipelining 64 KiB
// Writes, selective retransmission against go-back-N, at several loss rates and seeds. It
// prints a table with the ratios the issue sets goals for and writes the figures as JSON
// (bench/README.md describes both). It needs no privileges.
//
//	go run ./bench/cmd/transportbench            # full run
//	go run ./bench/cmd/transportbench -quick     # a few seconds
//	go run ./bench/cmd/transportbench -losses 0,1 -seeds 5 -duration 500ms
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/bench/transportbench"
)

func main() {
	os.Exit(run())
}

func run() int {
	def := transportbench.DefaultOptions()
	cf := report.Flags{Name: "transportbench"}
	cf.Define("bench/out/transport.json", "short run (50 ms of virtual time, 1 seed); explicit flags still win")
	var (
		duration    = flag.Duration("duration", def.Duration, "measured virtual time of each run")
		warmup      = flag.Duration("warmup", def.Warmup, "virtual warm-up before each measured window")
		seeds       = flag.String("seeds", "3", "`N` (seeds 1..N) or a comma-separated list of seeds")
		losses      = flag.String("losses", "0,0.1,1,5", "random loss rates of each direction, in `percent`, comma-separated")
		modes       = flag.String("modes", "all", "retransmission modes: selective, gobackn, or all")
		latency     = flag.Duration("latency", def.Latency, "one-way latency")
		gbps        = flag.Float64("gbps", float64(def.Bandwidth)/1e9, "bandwidth of each direction, Gbit/s")
		queue       = flag.Int("queue", def.QueueBytes, "bandwidth queue limit of each direction, `bytes`")
		payload     = flag.Int("payload", def.MaxPayload, "largest datagram, bytes (MTU - 28)")
		size        = flag.Int("size", def.MsgSize, "Write length, bytes")
		outstanding = flag.Int("outstanding", def.Outstanding, "Writes kept posted")
		ackEvery    = flag.Int("ack-every", 0, "diagnosis: override transport.Config.AckEvery (0: engine default)")
		ackDelay    = flag.Duration("ack-delay", 0, "diagnosis: override transport.Config.AckDelay (0: engine default)")
		target      = flag.Duration("swift-target", 0, "diagnosis: override the Swift controller's BaseTarget (0: default)")
		fixedWin    = flag.Int("fixed-window", 0, "diagnosis: replace Swift by a fixed window of this many `bytes` (0: Swift)")
		parallel    = flag.Int("parallel", 0, "runs at once (0: GOMAXPROCS)")
		quiet       = flag.Bool("q", false, "do not print progress lines")
	)
	stopProfile, set, err := cf.Parse()
	if err != nil {
		fmt.Fprintf(os.Stderr, "transportbench: %v\n", err)
		return 1
	}
	defer stopProfile()

	o := def
	if cf.Quick {
		o = transportbench.QuickOptions()
	}
	if set["duration"] || !cf.Quick {
		o.Duration = *duration
	}
	if set["warmup"] || !cf.Quick {
		o.Warmup = *warmup
	}
	if set["seeds"] || !cf.Quick {
		if o.Seeds, err = transportbench.ParseSeeds(*seeds); err != nil {
			fmt.Fprintln(os.Stderr, "transportbench:", err)
			return 2
		}
	}
	if o.Losses, err = transportbench.ParseLosses(*losses); err != nil {
		fmt.Fprintln(os.Stderr, "transportbench:", err)
		return 2
	}
	o.Modes = transportbench.ParseModes(*modes)
	o.Latency = *latency
	o.Bandwidth = int64(*gbps * 1e9)
	o.QueueBytes = *queue
	o.MaxPayload = *payload
	o.MsgSize = *size
	o.Outstanding = *outstanding
	o.AckEvery, o.AckDelay, o.SwiftTarget, o.FixedWindow = *ackEvery, *ackDelay, *target, *fixedWin
	o.Parallel = *parallel
	if !*quiet {
		o.Progress = os.Stderr
	}

	// Ctrl-C or SIGTERM stops the runs in progress; the results are then not written.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	start := time.Now()
	res, _, err := transportbench.Run(ctx, o)
	if res == nil {
		fmt.Fprintln(os.Stderr, "transportbench:", err)
		return 2
	}
	return cf.Finish(ctx, res, func() {
		fmt.Printf("\n%s, %d CPUs, %s, %v real\n", res.Header.CPU, res.Header.CPUs, res.Header.Go, time.Since(start).Round(time.Millisecond))
	}, err)
}
