// Command longpath measures ndkpeer's write-bw and read-bw against iperf3 (one TCP
// stream) on the routed test bed made a long path by its delay line: 1 Gbit/s, round
// trips of 2 ms and 10 ms, MTU 1500; each alone and both sharing the path (package
// bench/longpath). It builds ndkpeer unless -ndkpeer names a binary, prints the figures
// and the goals (met / NOT met) and writes them as JSON. It needs root, iperf3 and ping.
//
//	go run ./bench/cmd/longpath                          # 2 and 10 ms, write and read, 3 runs (about 8 minutes)
//	go run ./bench/cmd/longpath -rtts 10ms -ops write -runs 1
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/xdpndk/xdpndk/bench/longpath"
)

func main() { os.Exit(run()) }

func run() int {
	def := longpath.DefaultOptions()
	var (
		rtts     = flag.String("rtts", "2ms,10ms", "comma-separated round trips")
		ops      = flag.String("ops", "write,read", "comma-separated from write, read")
		runs     = flag.Int("runs", def.Runs, "repeat every measurement this many times (medians)")
		duration = flag.Duration("duration", def.Duration, "each run's length (whole seconds)")
		skip     = flag.Duration("skip", def.Skip, "cut from each run's start")
		rate     = flag.Uint64("rate", def.Rate, "the delay line's rate in bit/s")
		queue    = flag.Int("queue", 0, "the delay line's queue in bytes (0: one BDP of the round trip)")
		depth    = flag.Int("t", 0, "ndkpeer -t (0: its default)")
		ndkpeer  = flag.String("ndkpeer", "", "the ndkpeer binary (default: go build ./cmd/ndkpeer)")
		out      = flag.String("json", "bench/out/longpath.json", "write the JSON results to this `path`")
	)
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "longpath: needs root (network namespaces, XDP, AF_PACKET)")
		return 2
	}
	o := def
	o.RTTs = nil
	for _, s := range strings.Split(*rtts, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintf(os.Stderr, "longpath: -rtts %q: %v\n", s, err)
			return 2
		}
		o.RTTs = append(o.RTTs, d)
	}
	o.Ops = strings.Split(*ops, ",")
	o.Runs, o.Duration, o.Skip, o.Rate, o.QueueBytes, o.Depth = *runs, *duration, *skip, *rate, *queue, *depth
	o.Progress = os.Stderr
	o.Ndkpeer = *ndkpeer
	if o.Ndkpeer == "" {
		dir, err := os.MkdirTemp("", "longpath")
		if err != nil {
			fmt.Fprintln(os.Stderr, "longpath:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		o.Ndkpeer = filepath.Join(dir, "ndkpeer")
		if b, err := exec.Command("go", "build", "-o", o.Ndkpeer, "./cmd/ndkpeer").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "longpath: build ndkpeer (run from the module's root): %v\n%s", err, b)
			return 1
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := longpath.Run(ctx, o)
	if res != nil {
		res.Print(os.Stdout)
		if *out != "" {
			if werr := writeJSON(*out, res); werr != nil {
				fmt.Fprintln(os.Stderr, "longpath:", werr)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "longpath:", err)
		return 1
	}
	return 0
}
