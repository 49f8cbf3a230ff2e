// Command transportbench measures the transport engine in virtual time over the simulated
// network (transport/simlink), in four scenarios (-scenarios, default all):
//
//   - loss: goodput under random loss on one short path, one QP pipelining 64 KiB Writes,
//     selective retransmission against go-back-N, at several loss rates and seeds;
//   - rtt: one QP through a 10 Gbit/s bottleneck at RTTs 10 µs, 100 µs, 1 ms, 10 ms,
//     lossless and at 1 % loss, selective and go-back-N;
//   - fairness: 2 and 8 QPs with staggered starts on one bottleneck (Jain index, queueing
//     delay, drops);
//   - incast: 16 senders into one receiver at once.
//
// It prints tables and every goal of the issue (met or not) and writes the figures as JSON
// (-out). It needs no privileges.
//
//	go run ./bench/cmd/transportbench                       # full run, about 2-3 minutes
//	go run ./bench/cmd/transportbench -quick                # well under a minute
//	go run ./bench/cmd/transportbench -scenarios fairness,incast
//	go run ./bench/cmd/transportbench -scenarios loss -losses 0,1 -seeds 5 -duration 500ms
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/bench/transportbench"
	"github.com/xdpndk/xdpndk/transport"
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
		target      = flag.Duration("swift-target", 0, "diagnosis: use the Swift controller (the previous default) with this BaseTarget (0: the default Delay controller)")
		fixedWin    = flag.Int("fixed-window", 0, "diagnosis: replace the controller by a fixed window of this many `bytes` (0: the default)")
		parallel    = flag.Int("parallel", 0, "runs at once (0: GOMAXPROCS)")
		scenarios   = flag.String("scenarios", "all", "comma-separated: loss, rtt, fairness, incast, or all")
		scSeeds     = flag.String("scenario-seeds", "1", "seeds of the rtt, fairness and incast scenarios: `N` or a list")
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
	sel := transportbench.ParseScenarios(*scenarios)
	if len(sel) == 0 {
		fmt.Fprintf(os.Stderr, "transportbench: no known scenario in %q\n", *scenarios)
		return 2
	}
	so := transportbench.DefaultScenarioOptions()
	so.Scenarios = nil
	for _, s := range sel {
		if s != transportbench.ScenarioLoss {
			so.Scenarios = append(so.Scenarios, s)
		}
	}
	if so.Seeds, err = transportbench.ParseSeeds(*scSeeds); err != nil {
		fmt.Fprintln(os.Stderr, "transportbench:", err)
		return 2
	}
	so.Bandwidth, so.MaxPayload, so.MsgSize = int64(*gbps*1e9), *payload, *size
	so.Quick, so.Parallel = cf.Quick, *parallel
	so.Engine = func(c *transport.Config) { o.Tweak(c, transportbench.ModeSelective) }
	so.Overrides = o.Overrides()
	o.Parallel = *parallel
	if !*quiet {
		o.Progress = os.Stderr
		so.Progress = os.Stderr
	}

	// Ctrl-C or SIGTERM stops the runs in progress; the results are then not written.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	start := time.Now()
	var runErr error
	var loss *transportbench.Results
	if slices.Contains(sel, transportbench.ScenarioLoss) {
		var err error
		loss, _, err = transportbench.Run(ctx, o)
		if loss == nil {
			fmt.Fprintln(os.Stderr, "transportbench:", err)
			return 2
		}
		runErr = err
	}
	suite, _, err := transportbench.RunScenarios(ctx, so)
	if runErr == nil {
		runErr = err
	}
	if loss != nil {
		suite.AddLoss(loss)
	}
	return cf.Finish(ctx, suite, func() {
		fmt.Printf("\n%s, %d CPUs, %s, %v real\n", suite.Header.CPU, suite.Header.CPUs, suite.Header.Go, time.Since(start).Round(time.Millisecond))
	}, runErr)
}
