package pathbench

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/xdpndk/xdpndk/bench/internal/report"
)

// Scenario names, as Options.Scenarios and the records' benchmark field spell them.
const (
	ScenarioSingle = "single" // one QP through the bottleneck
	ScenarioTwo    = "two"    // two QPs through the bottleneck, staggered start
	ScenarioTCP    = "tcp"    // one QP and one iperf3 TCP flow through the bottleneck
	ScenarioLoss   = "loss"   // one QP through the bottleneck, the router dropping at random
	ScenarioXDP    = "xdp"    // one QP on the plain bed, the XDP programs dropping at random
)

// AllScenarios lists every scenario in running order: the routed bed's, then the plain
// bed's.
var AllScenarios = []string{ScenarioSingle, ScenarioTwo, ScenarioTCP, ScenarioLoss, ScenarioXDP}

// routed reports whether scenario s runs on the routed bed.
func routed(s string) bool { return s != ScenarioXDP }

// Fixed parameters of the traffic.
const (
	// WriteSize is the length in bytes of every Write.
	WriteSize = 64 << 10
	// MTU is the MTU of every veth end of both beds.
	MTU = 9000
	// NDKPort is the UDP port of both adapters.
	NDKPort = 4793
	// ServicePort is the NDK listener's port.
	ServicePort = 7
	// TCPPort is the iperf3 server's port on host B.
	TCPPort = 5201
)

// Options configures Run. Start from DefaultOptions or QuickOptions.
type Options struct {
	// Scenarios are the scenarios run (AllScenarios' names), in AllScenarios' order.
	Scenarios []string
	// Runs is how many times every scenario is repeated (on the same bed, the scenarios
	// interleaved); each figure's value is the median of its runs, ratios taken within a
	// run.
	Runs int
	// Duration is each measured window.
	Duration time.Duration
	// Warmup precedes each window; in the two-QP scenario it is also the stagger: the
	// second QP starts Warmup after the first, and the window starts Warmup after that.
	Warmup time.Duration
	// Sample is the interval at which the QPs' completed bytes are sampled.
	Sample time.Duration
	// Outstanding is the Writes kept posted on each QP.
	Outstanding int
	// Rate is the bottleneck's rate in bit/s; Burst and Limit its bucket and queue in
	// bytes (testbed.Bottleneck).
	Rate         uint64
	Burst, Limit int
	// RouterLoss is the router's random drop probability in the loss scenario, applied in
	// both directions (data towards B, acknowledgements towards A).
	RouterLoss float64
	// XDPLosses are the XDP programs' drop probabilities of the xdp scenario, each applied
	// in both directions (each host's program drops what it receives).
	XDPLosses []float64
	// Progress, if not nil, gets one line per measurement.
	Progress io.Writer
}

// DefaultOptions returns the full run, about two minutes: every scenario three times, 3 s
// windows after 1 s of warm-up, 16 outstanding Writes per QP, a 2 Gbit/s bottleneck with a
// 128 KiB bucket and a 512 KiB queue, 1% router loss, 1% and 10% XDP loss.
func DefaultOptions() Options {
	return Options{
		Scenarios:   slices.Clone(AllScenarios),
		Runs:        3,
		Duration:    3 * time.Second,
		Warmup:      time.Second,
		Sample:      100 * time.Millisecond,
		Outstanding: 16,
		Rate:        2e9,
		Burst:       128 << 10,
		Limit:       512 << 10,
		RouterLoss:  0.01,
		XDPLosses:   []float64{0.01, 0.10},
	}
}

// QuickOptions returns a short pass (the smoke test's): every scenario once, 600 ms
// windows after 300 ms of warm-up.
func QuickOptions() Options {
	o := DefaultOptions()
	o.Runs = 1
	o.Duration, o.Warmup, o.Sample = 600*time.Millisecond, 300*time.Millisecond, 50*time.Millisecond
	return o
}

// ErrInvalidOptions is wrapped by the errors Run returns for bad Options.
var ErrInvalidOptions = errors.New("invalid pathbench options")

// normalize validates o and puts the scenarios in canonical order.
func (o Options) normalize() (Options, error) {
	bad := func(format string, args ...any) (Options, error) {
		return o, fmt.Errorf("%w: %s", ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	switch {
	case o.Runs < 1 || o.Runs > 20:
		return bad("runs %d not in [1, 20]", o.Runs)
	case o.Duration <= 0 || o.Duration > 2*time.Minute:
		return bad("duration %v not in (0, 2m]", o.Duration)
	case o.Warmup < 0 || o.Warmup > time.Minute:
		return bad("warm-up %v not in [0, 1m]", o.Warmup)
	case o.Sample <= 0 || o.Sample > o.Duration/2:
		return bad("sample interval %v not in (0, duration/2]", o.Sample)
	case o.Outstanding < 1 || o.Outstanding > 64:
		return bad("outstanding %d not in [1, 64]", o.Outstanding)
	case o.Rate < 1e6 || o.Rate > 100e9:
		return bad("bottleneck rate %d bit/s not in [1e6, 1e11]", o.Rate)
	case o.Burst < MTU+14 || o.Limit < MTU+14 || o.Burst > 1<<30 || o.Limit > 1<<30:
		return bad("bottleneck burst %d / limit %d not in [%d, 1 GiB]", o.Burst, o.Limit, MTU+14)
	case !(o.RouterLoss > 0 && o.RouterLoss < 1):
		return bad("router loss %v not in (0, 1)", o.RouterLoss)
	}
	for _, p := range o.XDPLosses {
		if !(p > 0 && p < 1) {
			return bad("XDP loss %v not in (0, 1)", p)
		}
	}
	seen := map[string]bool{}
	for _, s := range o.Scenarios {
		if !slices.Contains(AllScenarios, s) {
			return bad("unknown scenario %q (known: %s)", s, strings.Join(AllScenarios, ", "))
		}
		seen[s] = true
	}
	o.Scenarios = nil
	for _, s := range AllScenarios {
		if seen[s] {
			o.Scenarios = append(o.Scenarios, s)
		}
	}
	if len(o.Scenarios) == 0 {
		return bad("no scenario selected")
	}
	o.XDPLosses = slices.Clone(o.XDPLosses)
	return o, nil
}

// has reports whether scenario s is selected.
func (o Options) has(s string) bool { return slices.Contains(o.Scenarios, s) }

// ParseScenarios parses a comma-separated list of scenarios; "all" means AllScenarios.
func ParseScenarios(s string) []string { return report.ParseList(s, AllScenarios) }
