package transportbench

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/congestion"
)

// Retransmission modes compared by Run: the System of their Records.
const (
	// ModeSelective is the engine's default: only packets found missing are sent again.
	ModeSelective = "selective"
	// ModeGoBackN sets transport.Config.GoBackN: everything unacknowledged is sent again
	// after a loss.
	ModeGoBackN = "gobackn"
)

// AllModes lists the modes in the order they are run and reported.
var AllModes = []string{ModeSelective, ModeGoBackN}

// Options configures Run. Start from DefaultOptions or QuickOptions.
type Options struct {
	// Duration is the measured virtual time of each run, after Warmup.
	Duration time.Duration
	// Warmup is the virtual time the Writes flow before the measured window starts.
	Warmup time.Duration
	// Seeds are the network seeds; every (loss, mode) is run once per seed, and the median
	// over the seeds is reported. Both modes get the same seeds.
	Seeds []uint64
	// Losses are the random loss probabilities (0 to 1) of each direction.
	Losses []float64
	// Modes are the retransmission modes, from AllModes.
	Modes []string

	// Latency is the one-way delay of each direction.
	Latency time.Duration
	// Bandwidth is each direction's rate in bit/s.
	Bandwidth int64
	// QueueBytes bounds each direction's bandwidth queue (tail drop).
	QueueBytes int
	// MaxPayload is the largest datagram (path MTU less IP and UDP headers).
	MaxPayload int

	// MsgSize is the length of each Write in bytes.
	MsgSize int
	// Outstanding is how many Writes the application keeps posted.
	Outstanding int

	// Overrides of the engine's defaults, for diagnosis (0 keeps the default). They
	// change the engines' Config as any application could; the engine itself is unchanged.
	// AckEvery and AckDelay set transport.Config's fields; SwiftTarget replaces the
	// default controller by Swift with this BaseTarget; FixedWindow replaces it by
	// congestion.Fixed with this window in bytes.
	AckEvery    int
	AckDelay    time.Duration
	SwiftTarget time.Duration
	FixedWindow int

	// Parallel is how many runs proceed at once (each is one goroutine and deterministic
	// on its own). 0 means GOMAXPROCS.
	Parallel int
	// MaxReal bounds the real time of one run; a run that takes longer is stopped and
	// reported as failed. 0 means 60 s.
	MaxReal time.Duration
	// Progress, if not nil, gets one line per finished run.
	Progress io.Writer
}

// DefaultOptions returns the full benchmark: 200 ms of virtual time after 20 ms of warm-up,
// seeds 1, 2 and 3, losses 0, 0.1 %, 1 % and 5 %, both modes, over 10 µs one way at
// 10 Gbit/s with a 256 KiB queue and a 1500-byte MTU, 16 Writes of 64 KiB outstanding.
func DefaultOptions() Options {
	return Options{
		Duration:    200 * time.Millisecond,
		Warmup:      20 * time.Millisecond,
		Seeds:       []uint64{1, 2, 3},
		Losses:      []float64{0, 0.001, 0.01, 0.05},
		Modes:       slices.Clone(AllModes),
		Latency:     10 * time.Microsecond,
		Bandwidth:   10_000_000_000,
		QueueBytes:  256 << 10,
		MaxPayload:  1472,
		MsgSize:     64 << 10,
		Outstanding: 16,
	}
}

// QuickOptions returns a short run for smoke tests: 50 ms after 10 ms of warm-up, one seed.
func QuickOptions() Options {
	o := DefaultOptions()
	o.Duration = 50 * time.Millisecond
	o.Warmup = 10 * time.Millisecond
	o.Seeds = []uint64{1}
	return o
}

// ErrInvalidOptions is wrapped by the errors Run returns for bad Options.
var ErrInvalidOptions = errors.New("invalid transportbench options")

// normalize validates o and fills defaults.
func (o Options) normalize() (Options, error) {
	bad := func(format string, args ...any) (Options, error) {
		return o, fmt.Errorf("%w: %s", ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	switch {
	case o.Duration <= 0 || o.Duration > time.Minute:
		return bad("duration %v not in (0, 1m]", o.Duration)
	case o.Warmup < 0 || o.Warmup > time.Minute:
		return bad("warm-up %v not in [0, 1m]", o.Warmup)
	case len(o.Seeds) == 0 || len(o.Seeds) > 100:
		return bad("%d seeds, want 1 to 100", len(o.Seeds))
	case len(o.Losses) == 0:
		return bad("no loss rate")
	case o.Latency < 0 || o.Latency > time.Second:
		return bad("latency %v not in [0, 1s]", o.Latency)
	case o.Bandwidth < 1_000_000 || o.Bandwidth > 1_000_000_000_000:
		return bad("bandwidth %d bit/s not in [1e6, 1e12]", o.Bandwidth)
	case o.QueueBytes < 0:
		return bad("negative queue %d", o.QueueBytes)
	case o.MaxPayload < 256 || o.MaxPayload > 65507:
		return bad("max payload %d not in [256, 65507]", o.MaxPayload)
	case o.MsgSize < 1 || o.MsgSize > 1<<30:
		return bad("message size %d not in [1, 1 GiB]", o.MsgSize)
	case o.Outstanding < 1 || o.Outstanding > 1024:
		return bad("outstanding %d not in [1, 1024]", o.Outstanding)
	case o.AckEvery < 0 || o.AckDelay < 0 || o.SwiftTarget < 0 || o.SwiftTarget > time.Second || o.FixedWindow < 0:
		return bad("negative or out-of-range engine override")
	case o.Parallel < 0:
		return bad("negative parallelism %d", o.Parallel)
	}
	for _, l := range o.Losses {
		if !(l >= 0 && l < 1) {
			return bad("loss %v not in [0, 1)", l)
		}
	}
	if len(o.Modes) == 0 {
		return bad("no mode selected")
	}
	for _, m := range o.Modes {
		if !slices.Contains(AllModes, m) {
			return bad("unknown mode %q (known: %s)", m, strings.Join(AllModes, ", "))
		}
	}
	var modes []string
	for _, m := range AllModes {
		if slices.Contains(o.Modes, m) {
			modes = append(modes, m)
		}
	}
	o.Modes = modes
	o.Losses = slices.Clone(o.Losses)
	slices.Sort(o.Losses)
	o.Losses = slices.Compact(o.Losses)
	o.Seeds = slices.Clone(o.Seeds)
	if o.Parallel == 0 {
		o.Parallel = runtime.GOMAXPROCS(0)
	}
	if o.MaxReal <= 0 {
		o.MaxReal = time.Minute
	}
	return o, nil
}

// Overrides describes the engine overrides in effect, "" when there are none.
func (o *Options) Overrides() string {
	var f []string
	if o.AckEvery > 0 {
		f = append(f, fmt.Sprintf("AckEvery=%d", o.AckEvery))
	}
	if o.AckDelay > 0 {
		f = append(f, fmt.Sprintf("AckDelay=%v", o.AckDelay))
	}
	if o.FixedWindow > 0 {
		f = append(f, fmt.Sprintf("congestion.Fixed(%d bytes)", o.FixedWindow))
	} else if o.SwiftTarget > 0 {
		f = append(f, fmt.Sprintf("Swift.BaseTarget=%v", o.SwiftTarget))
	}
	return strings.Join(f, " ")
}

// Tweak applies the mode and the overrides to an engine's configuration.
func (o *Options) Tweak(cfg *transport.Config, mode string) {
	cfg.GoBackN = mode == ModeGoBackN
	if o.AckEvery > 0 {
		cfg.AckEvery = o.AckEvery
	}
	if o.AckDelay > 0 {
		cfg.AckDelay = o.AckDelay
	}
	switch fixed, target := o.FixedWindow, o.SwiftTarget; {
	case fixed > 0:
		cfg.NewController = func(int) congestion.Controller {
			f, err := congestion.NewFixed(fixed)
			if err != nil {
				panic("transportbench: " + err.Error()) // fixed > 0 was checked
			}
			return f
		}
	case target > 0:
		def := cfg.NewController
		cfg.NewController = func(mss int) congestion.Controller {
			c := congestion.DefaultSwiftConfig()
			c.MSS = mss
			c.BaseTarget = int64(target)
			if s, err := congestion.NewSwift(c); err == nil {
				return s
			}
			return def(mss)
		}
	}
}

// ParseLosses parses a comma-separated list of loss rates in percent, such as
// "0,0.1,1,5", into probabilities.
func ParseLosses(s string) ([]float64, error) {
	var out []float64
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(f), "%"))
		if f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, fmt.Errorf("parse loss %q: %w", f, err)
		}
		out = append(out, v/100)
	}
	return out, nil
}

// ParseSeeds parses "3" (seeds 1, 2, 3) or a comma-separated list such as "7,11,13".
func ParseSeeds(s string) ([]uint64, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, ",") {
		n, err := strconv.Atoi(s)
		if err != nil {
			return nil, fmt.Errorf("parse seeds %q: %w", s, err)
		}
		if n < 1 || n > 100 {
			return nil, fmt.Errorf("seeds %d not in [1, 100]", n)
		}
		out := make([]uint64, n)
		for i := range out {
			out[i] = uint64(i + 1)
		}
		return out, nil
	}
	var out []uint64
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("parse seed %q: %w", f, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// ParseModes parses a comma-separated list of modes; "all" means AllModes.
func ParseModes(s string) []string { return report.ParseList(s, AllModes) }
