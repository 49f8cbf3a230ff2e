package ndkbench

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/ndk"
)

// Progress mode names, as they appear in system names ("ndk-" + mode) and in Options.Modes.
const (
	ModeInline   = "inline"
	ModeBusy     = "busy"
	ModeAdaptive = "adaptive"
)

// AllModes lists every progress mode, in measuring order.
var AllModes = []string{ModeInline, ModeBusy, ModeAdaptive}

// progressOf returns the ndk.Progress of a mode name.
func progressOf(mode string) (ndk.Progress, bool) {
	switch mode {
	case ModeInline:
		return ndk.ProgressInline, true
	case ModeBusy:
		return ndk.ProgressBusy, true
	case ModeAdaptive:
		return ndk.ProgressAdaptive, true
	}
	return 0, false
}

// Fixed parameters of the traffic.
const (
	// MsgSize is the length in bytes of the ping-pong Sends, the latency Writes and Reads and
	// the message-rate Writes (the NDK payload; the raw baseline's 64 is the IP packet).
	MsgSize = 64
	// GoodputSize is the length in bytes of each goodput Write.
	GoodputSize = 64 << 10
	// NDKPort is the UDP port both adapters receive on (the raw baseline's port).
	NDKPort = 4793
	// TCPPort is the port of the kernel TCP baseline's listener on host B.
	TCPPort = 4794
	// ServicePort is the NDK listener's port (a service multiplexed on NDKPort).
	ServicePort = 7
)

// Options configures Run and RunBed. Start from DefaultOptions or QuickOptions.
type Options struct {
	// Runs is how many times every measurement is repeated; medians are reported.
	Runs int
	// Modes are the ndk progress modes measured (ModeInline, ModeBusy, ModeAdaptive). The
	// ping-pong runs in each; the other ndk figures only with ModeInline.
	Modes []string
	// PingPongN is the round trips of each ping-pong (ndk, raw, TCP), warm-up included.
	PingPongN int
	// PingPongWarmup is the first round trips left out (clamped to PingPongN/2).
	PingPongWarmup int
	// LatencyN is the Writes (and, separately, Reads) of the latency figures, warm-up
	// (PingPongWarmup) included.
	LatencyN int
	// Bound limits the time of each ping-pong or latency measurement: what is not done by
	// then is not made.
	Bound time.Duration
	// Duration is the measured window of the rate and goodput figures, after Warmup; it is
	// also the raw one-way window.
	Duration time.Duration
	// Warmup precedes each rate, goodput and raw one-way window.
	Warmup time.Duration
	// Outstanding is the 64-byte Writes kept posted by the message-rate figure.
	Outstanding int
	// SignalEvery is how often a SILENT_SUCCESS message-rate Write is signaled: every
	// SignalEvery-th Write asks for a completion, the others are silent.
	SignalEvery int
	// GoodputOutstanding is the 64 KiB Writes kept posted by the goodput figure.
	GoodputOutstanding int
	// Idle is the window of the idle figure (ModeInline): the process's CPU while both
	// adapters sit idle with their connected QP and B's application waits in CQ.Wait.
	Idle time.Duration
	// Baselines, when false, skips the raw and TCP baselines (the goals then stay
	// unevaluated). Default true.
	Baselines bool
	// Progress, if not nil, gets one line per measurement.
	Progress io.Writer
	// Counters adds both sides' QP and link counters (retransmissions, timeouts, drops) to
	// the progress lines of the rate and goodput figures.
	Counters bool
	// Scale is how many QP pairs the scale figures connect between one adapter pair
	// (inline progress): the 64-byte Write rate of one of them and over all of them, and
	// the idle CPU with all connected. 0 skips them.
	Scale int
	// ScaleOutstanding is the 64-byte Writes kept outstanding on each QP by the rate over
	// all Scale QPs (the one-QP rate keeps Outstanding, as the msgrate figure).
	ScaleOutstanding int
	// ScaleIdle is the window of the idle figure with Scale QP pairs connected.
	ScaleIdle time.Duration
	// ScaleOnly measures the scale figures alone: no baselines, no other ndk figure.
	ScaleOnly bool
	// AllQueues has the ndk adapters serve every queue of the bed (two, BedOptions) through
	// their DeviceLink, as ndk.Open does by default, instead of queue 0 only (where both
	// sides transmit, so nothing is lost either way): it measures what polling the other
	// queues costs.
	AllQueues bool
	// Engines are the engine counts the engines figure compares (ndk.Options.Engines of
	// both adapters, each serving both queues of the bed); empty skips the figure. Default
	// 1 and 2.
	Engines []int
	// EngineQPs is the QP pairs of the engines figure (spread over the engines), each with
	// a CQ and memory of its own; Outstanding Writes are shared out among them.
	EngineQPs int
	// EngineLoops is who drives the engines figure's QPs: EngineLoopsPerSide (one loop per
	// host for all its QPs, so both counts run two loops on the two CPUs) or
	// EngineLoopsPerEngine (one loop per engine and host: as a many-core host would run
	// them, here oversubscribing the two CPUs).
	EngineLoops string
	// OnlyEngines measures the engines figure alone (no ping-pong, latency, rate,
	// goodput or baselines).
	OnlyEngines bool
}

// Loops of the engines figure (Options.EngineLoops).
const (
	EngineLoopsPerSide   = "side"
	EngineLoopsPerEngine = "engine"
)

// DefaultOptions returns the full benchmark: 3 repetitions, every mode, 20000 round trips
// and latency samples, 1 s windows after 500 ms of warm-up, 128 outstanding Writes (every
// 16th signaled in the silent variant), 16 outstanding 64 KiB Writes, a 10 s idle window;
// the scale figures with 1024 QP pairs, 4 Writes outstanding on each, a 12 s idle window
// (a keepalive probe of every QP falls in it).
func DefaultOptions() Options {
	return Options{
		Runs:               3,
		Modes:              slices.Clone(AllModes),
		PingPongN:          20000,
		PingPongWarmup:     1000,
		LatencyN:           20000,
		Bound:              5 * time.Second,
		Duration:           time.Second,
		Warmup:             500 * time.Millisecond,
		Outstanding:        128,
		SignalEvery:        16,
		GoodputOutstanding: 16,
		Baselines:          true,
		Idle:               10 * time.Second,
		Engines:            []int{1, 2},
		EngineQPs:          4,
		EngineLoops:        EngineLoopsPerSide,
		Scale:              1024,
		ScaleOutstanding:   4,
		ScaleIdle:          12 * time.Second,
	}
}

// QuickOptions returns a short pass for bench/cmd/rawdemo and the smoke test: one repetition, the
// inline mode only, 2000 round trips and latency samples, 300 ms windows, a 1 s idle window,
// the scale figures with 64 QP pairs and a 1 s idle window.
func QuickOptions() Options {
	o := DefaultOptions()
	o.Runs = 1
	o.Modes = []string{ModeInline}
	o.PingPongN = 2000
	o.PingPongWarmup = 200
	o.LatencyN = 2000
	o.Bound = 2 * time.Second
	o.Duration = 300 * time.Millisecond
	o.Warmup = 200 * time.Millisecond
	o.Idle = time.Second
	o.Scale = 64
	o.ScaleIdle = time.Second
	return o
}

// MaxScale is the most QP pairs Options.Scale connects (transport.MaxQPLimit is higher;
// the CQ and the bed's rings bound what one adapter pair keeps outstanding).
const MaxScale = 4096

// ErrInvalidOptions is wrapped by the errors Run and RunBed return for bad Options.
var ErrInvalidOptions = errors.New("invalid ndkbench options")

// normalize validates o and puts the modes in canonical order.
func (o Options) normalize() (Options, error) {
	bad := func(format string, args ...any) (Options, error) {
		return o, fmt.Errorf("%w: %s", ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	switch {
	case o.Runs < 1 || o.Runs > 100:
		return bad("runs %d not in [1, 100]", o.Runs)
	case o.PingPongN < 2 || o.PingPongN > 10_000_000:
		return bad("ping-pong round trips %d not in [2, 10000000]", o.PingPongN)
	case o.LatencyN < 2 || o.LatencyN > 10_000_000:
		return bad("latency samples %d not in [2, 10000000]", o.LatencyN)
	case o.Bound <= 0 || o.Bound > 10*time.Minute:
		return bad("time bound %v not in (0, 10m]", o.Bound)
	case o.Duration <= 0 || o.Duration > time.Minute || o.Warmup < 0 || o.Warmup > time.Minute:
		return bad("window %v / warm-up %v out of range", o.Duration, o.Warmup)
	case o.Outstanding < 1 || o.Outstanding > 1024:
		return bad("outstanding %d not in [1, 1024]", o.Outstanding)
	case o.SignalEvery < 1 || o.SignalEvery > o.Outstanding:
		return bad("signal-every %d not in [1, outstanding %d]", o.SignalEvery, o.Outstanding)
	case o.GoodputOutstanding < 1 || o.GoodputOutstanding > 64:
		return bad("goodput outstanding %d not in [1, 64]", o.GoodputOutstanding)
	case o.Idle < 100*time.Millisecond || o.Idle > 10*time.Minute:
		return bad("idle window %v not in [100ms, 10m]", o.Idle)
	case o.Scale < 0 || o.Scale > MaxScale:
		return bad("scale %d not in [0, %d]", o.Scale, MaxScale)
	case o.Scale > 0 && (o.ScaleOutstanding < 1 || o.ScaleOutstanding > 64):
		return bad("scale outstanding %d not in [1, 64]", o.ScaleOutstanding)
	case o.Scale > 0 && (o.ScaleIdle < 100*time.Millisecond || o.ScaleIdle > 10*time.Minute):
		return bad("scale idle window %v not in [100ms, 10m]", o.ScaleIdle)
	case o.ScaleOnly && o.Scale == 0:
		return bad("scale-only without scale QPs")
	}
	for _, n := range o.Engines {
		if n < 1 || n > 2 {
			return bad("engines %d not in [1, 2]: the bed has two queues", n)
		}
	}
	if len(o.Engines) > 0 && (o.EngineQPs < 1 || o.EngineQPs > 64) {
		return bad("engine QPs %d not in [1, 64]", o.EngineQPs)
	}
	if o.EngineLoops == "" {
		o.EngineLoops = EngineLoopsPerSide
	}
	if o.EngineLoops != EngineLoopsPerSide && o.EngineLoops != EngineLoopsPerEngine {
		return bad("engine loops %q: %s or %s", o.EngineLoops, EngineLoopsPerSide, EngineLoopsPerEngine)
	}
	if o.OnlyEngines && len(o.Engines) == 0 {
		return bad("only the engines figure, but no engine counts")
	}
	o.PingPongWarmup = max(0, min(o.PingPongWarmup, o.PingPongN/2, o.LatencyN/2))
	seen := map[string]bool{}
	for _, m := range o.Modes {
		if _, ok := progressOf(m); !ok {
			return bad("unknown mode %q (known: %s)", m, strings.Join(AllModes, ", "))
		}
		seen[m] = true
	}
	o.Modes = nil
	for _, m := range AllModes {
		if seen[m] {
			o.Modes = append(o.Modes, m)
		}
	}
	if len(o.Modes) == 0 {
		return bad("no mode selected")
	}
	return o, nil
}

// ParseModes parses a comma-separated list of modes; "all" means AllModes.
func ParseModes(s string) []string { return report.ParseList(s, AllModes) }
