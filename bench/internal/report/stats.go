package report

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Percentile returns the p-th percentile (0 <= p <= 100) of sorted, by the nearest-rank
// method: the smallest value such that at least p percent of the values are <= it. It
// returns 0 for an empty slice.
func Percentile(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

// Latency summarises latencies or round-trip times.
type Latency struct {
	N                  int
	P50, P90, P99, Max float64 // microseconds
	Mean               float64 // microseconds
}

// Summarize returns the statistics of samples (nanoseconds); it sorts samples in place.
func Summarize(samples []int64) Latency {
	if len(samples) == 0 {
		return Latency{}
	}
	slices.Sort(samples)
	var sum float64
	for _, v := range samples {
		sum += float64(v)
	}
	us := func(ns int64) float64 { return float64(ns) / 1e3 }
	return Latency{
		N:    len(samples),
		P50:  us(Percentile(samples, 50)),
		P90:  us(Percentile(samples, 90)),
		P99:  us(Percentile(samples, 99)),
		Max:  us(samples[len(samples)-1]),
		Mean: sum / float64(len(samples)) / 1e3,
	}
}

// SignalContext returns a context that Ctrl-C or SIGTERM cancels, so that a benchmark
// command stops the measurement in progress and removes its test bed; a second signal then
// kills the process (the next run sweeps what it left). Call stop when done.
func SignalContext() (ctx context.Context, stop context.CancelFunc) {
	ctx, stop = signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // restore the default handling: the second signal kills
	}()
	return ctx, stop
}

// ParseList parses a comma-separated list of names (a command's -modes or -systems flag);
// "all" stands for every name of all. Empty fields are ignored; unknown names are kept, for
// the options' validation to refuse.
func ParseList(s string, all []string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		switch f = strings.TrimSpace(f); f {
		case "":
		case "all":
			out = append(out, all...)
		default:
			out = append(out, f)
		}
	}
	return out
}

// Worker runs fn on a new goroutine, locked to its OS thread if lock is set (a polling loop
// measured as if it had a core), and returns a channel that gets its error, or its panic
// as an error.
func Worker(lock bool, fn func() error) <-chan error {
	done := make(chan error, 1)
	go func() {
		if lock {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
		}
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("panic: %v\n%s", r, debug.Stack())
			}
		}()
		done <- fn()
	}()
	return done
}

// ParseSizes parses a comma-separated list of sizes in bytes (a command's -sizes flag),
// each a positive number with an optional K or M suffix (powers of 1024): "64,4K,1M".
// Empty fields are ignored; a list with no size is an error.
func ParseSizes(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		num, mult := f, 1
		switch {
		case strings.HasSuffix(f, "K"), strings.HasSuffix(f, "k"):
			num, mult = f[:len(f)-1], 1<<10
		case strings.HasSuffix(f, "M"), strings.HasSuffix(f, "m"):
			num, mult = f[:len(f)-1], 1<<20
		}
		n, err := strconv.Atoi(num)
		if err != nil || n <= 0 || num[0] == '+' || n > math.MaxInt32/mult {
			return nil, fmt.Errorf("size %q: a positive number of bytes with an optional K or M", f)
		}
		out = append(out, n*mult)
	}
	if len(out) == 0 {
		return nil, errors.New("no size given")
	}
	return out, nil
}
