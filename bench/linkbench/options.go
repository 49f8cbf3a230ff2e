package linkbench

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/bpf"
)

// Names of the systems a run can measure, in the order they are measured and reported.
// They are the systems of the records (bench/internal/report's schema: "raw-" for a raw
// AF_XDP link without transport or verbs); ParseSystems also takes the short names xdpndk,
// xdpndk-no-wakeup and asavie.
const (
	// SystemXDPNDK is our AF_XDP link (xdp.Link) with need_wakeup on, the default.
	SystemXDPNDK = "raw-xdpndk"
	// SystemXDPNDKNoWakeup is our AF_XDP link with xdp.Config.DisableNeedWakeup set, so every
	// TX batch makes a system call (shows what need_wakeup saves).
	SystemXDPNDKNoWakeup = "raw-xdpndk-no-wakeup"
	// SystemAsavie is github.com/asavie/xdp, steered to by our own XDP program so that only
	// the socket library differs.
	SystemAsavie = "raw-asavie"
	// SystemKernelUDP is a kernel UDP socket (net.UDPConn) with no XDP program attached.
	SystemKernelUDP = "kernel-udp"
)

// systemAliases are the short names ParseSystems also takes (the systems' names before the
// shared results schema).
var systemAliases = map[string]string{
	"xdpndk":           SystemXDPNDK,
	"xdpndk-no-wakeup": SystemXDPNDKNoWakeup,
	"asavie":           SystemAsavie,
}

// systemOrder is every system, in measuring and reporting order, whether or not this
// build can measure it (results made elsewhere may name any of them).
var systemOrder = []string{SystemXDPNDK, SystemXDPNDKNoWakeup, SystemAsavie, SystemKernelUDP}

// AllSystems lists every system this build can measure, in measuring order. SystemAsavie
// is left out on the architectures github.com/asavie/xdp does not build for (linux/386).
var AllSystems = availableSystems()

// availableSystems returns systemOrder without SystemAsavie where it is unavailable.
func availableSystems() []string {
	all := slices.Clone(systemOrder)
	if errAsavieUnavailable != nil {
		all = slices.DeleteFunc(all, func(s string) bool { return s == SystemAsavie })
	}
	return all
}

// Fixed parameters of the bed and the traffic.
const (
	// BedMTU is the MTU of the veth pair for the whole run, in bytes (IP packet length).
	BedMTU = 9000
	// Port is the UDP port every system sends from and to.
	Port = 4793
	// PingSize is the IP packet length of a ping-pong datagram (36 bytes of UDP payload).
	PingSize = 64
	// IPUDPHeaderLen is what an IP packet of a given size carries besides its UDP payload:
	// a 20-byte IPv4 header and an 8-byte UDP header. UDP payload = size - IPUDPHeaderLen.
	IPUDPHeaderLen = 28
	// MinSize is the smallest size accepted: room for the 8-byte sequence number the
	// sanity check and the ping-pong write at the start of the UDP payload.
	MinSize = IPUDPHeaderLen + 8
)

// Options configures Run and RunBed. The zero value is not useful: start from
// DefaultOptions or QuickOptions.
type Options struct {
	// Duration is the measured window of each one-way measurement, after Warmup.
	Duration time.Duration
	// Warmup is how long the sender runs before the measured window starts.
	Warmup time.Duration
	// Runs is how many times every measurement is repeated; the median is reported.
	Runs int
	// PingPongN is the number of round trips per ping-pong measurement, including
	// PingPongWarmup. 0 skips the ping-pong benchmark.
	PingPongN int
	// PingPongWarmup is the number of first round trips left out of the statistics. It is
	// clamped to PingPongN/2.
	PingPongWarmup int
	// PingPongTimeout bounds one ping-pong measurement; round trips not done by then are
	// not made.
	PingPongTimeout time.Duration
	// Sizes are the IP packet lengths of the one-way benchmark, in bytes, from MinSize to
	// BedMTU. Empty skips the one-way benchmark.
	Sizes []int
	// Systems are the systems to measure, from AllSystems.
	Systems []string
	// Batch is the number of datagrams handed to the link per call (Send, Transmit) and
	// the most taken per receive call. Default 64.
	Batch int
	// MaxPackets bounds the datagrams one one-way sender may send (on top of the time
	// bound). 0 means 20 million per second of Warmup+Duration, far above what the bed can
	// carry.
	MaxPackets uint64
	// AsavieQueue is the queue of each veth end the asavie/xdp sockets bind (default 1; our
	// link has queue 0). They stay bound for the life of the process (see the package
	// documentation), so a process that measures asavie in several RunBed calls on one bed
	// gives each call a queue of its own, on a bed with that many queues.
	AsavieQueue int
	// Attach selects native or generic XDP for the steering program on both hosts (every
	// AF_XDP system). Default bpf.AttachAuto: native, then generic. On veth generic XDP
	// measured as fast as native or faster, so the choice is measured, not assumed.
	Attach bpf.Mode
	// Logger receives the xdp package's log lines. Default: discard.
	Logger *slog.Logger
	// Progress, if not nil, gets one line per measurement as the run goes.
	Progress io.Writer
}

// DefaultOptions returns the full benchmark: 2 s windows after 200 ms of warm-up, 3 runs,
// 20000 round trips, sizes 64, 1500 and 9000, every system.
func DefaultOptions() Options {
	return Options{
		Duration:        2 * time.Second,
		Warmup:          200 * time.Millisecond,
		Runs:            3,
		PingPongN:       20000,
		PingPongWarmup:  1000,
		PingPongTimeout: 30 * time.Second,
		Sizes:           []int{64, 1500, 9000},
		Systems:         slices.Clone(AllSystems),
		Batch:           64,
	}
}

// QuickOptions returns a short run for bench/cmd/rawdemo and CI smoke tests: 300 ms windows after
// 100 ms of warm-up, one run, 2000 round trips.
func QuickOptions() Options {
	o := DefaultOptions()
	o.Duration = 300 * time.Millisecond
	o.Warmup = 100 * time.Millisecond
	o.Runs = 1
	o.PingPongN = 2000
	o.PingPongTimeout = 10 * time.Second
	return o
}

// ErrInvalidOptions is wrapped by the errors Run and RunBed return for bad Options.
var ErrInvalidOptions = errors.New("invalid linkbench options")

// normalize validates o and fills defaults.
func (o Options) normalize() (Options, error) {
	bad := func(format string, args ...any) (Options, error) {
		return o, fmt.Errorf("%w: %s", ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	if len(o.Sizes) > 0 && (o.Duration <= 0 || o.Warmup < 0) {
		return bad("duration %v must be positive and warm-up %v not negative", o.Duration, o.Warmup)
	}
	if o.Runs < 1 || o.Runs > 1000 {
		return bad("runs %d not in [1, 1000]", o.Runs)
	}
	if o.PingPongN < 0 || o.PingPongN > 10_000_000 {
		return bad("ping-pong round trips %d not in [0, 10000000]", o.PingPongN)
	}
	if o.PingPongN > 0 && o.PingPongTimeout <= 0 {
		return bad("ping-pong timeout %v must be positive", o.PingPongTimeout)
	}
	o.PingPongWarmup = max(0, min(o.PingPongWarmup, o.PingPongN/2))
	for _, s := range o.Sizes {
		if s < MinSize || s > BedMTU {
			return bad("size %d not in [%d, %d] (IP packet length)", s, MinSize, BedMTU)
		}
	}
	if len(o.Systems) == 0 {
		return bad("no system selected")
	}
	seen := map[string]bool{}
	for _, s := range o.Systems {
		if s == SystemAsavie && errAsavieUnavailable != nil {
			return bad("%v", errAsavieUnavailable)
		}
		if !slices.Contains(systemOrder, s) {
			return bad("unknown system %q (known: %s)", s, strings.Join(AllSystems, ", "))
		}
		if seen[s] {
			return bad("system %q given twice", s)
		}
		seen[s] = true
	}
	// Measure in the canonical order whatever order they were given in.
	var ordered []string
	for _, s := range systemOrder {
		if seen[s] {
			ordered = append(ordered, s)
		}
	}
	o.Systems = ordered
	o.Sizes = slices.Clone(o.Sizes)
	if o.Batch == 0 {
		o.Batch = 64
	}
	if o.AsavieQueue == 0 {
		o.AsavieQueue = 1
	}
	if o.AsavieQueue < 1 || o.AsavieQueue >= 64 {
		return bad("asavie queue %d not in [1, 63] (queue 0 is our link's)", o.AsavieQueue)
	}
	if o.Batch < 1 || o.Batch > 1024 {
		return bad("batch %d not in [1, 1024]", o.Batch)
	}
	if o.MaxPackets == 0 {
		o.MaxPackets = uint64((o.Warmup+o.Duration).Seconds()*20e6) + 1
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// ParseSizes parses a comma-separated list of sizes such as "64,1500,9000" (K and M
// suffixes allowed: report.ParseSizes); an empty list is no size (no one-way test).
func ParseSizes(s string) ([]int, error) {
	if strings.Trim(s, " ,") == "" {
		return nil, nil
	}
	return report.ParseSizes(s)
}

// ParseSystems parses a comma-separated list of systems; "all" means AllSystems.
// A short name (xdpndk, asavie, ...) stands for its system.
func ParseSystems(s string) []string {
	out := report.ParseList(s, AllSystems)
	for i, name := range out {
		if full, ok := systemAliases[name]; ok {
			out[i] = full
		}
	}
	return out
}
