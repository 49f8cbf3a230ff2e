package compare

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/bench/tools"
)

// Tool is the bench's name in its Document (report.Header.Tool, report.Record.Bench).
const Tool = "compare"

// The systems measured, named as the other benches name them (bench/README.md).
const (
	// SystemXDPNDK is the NDK verbs through ndkpeer (serve in B, a client per test in A),
	// polling: ndk's default progress, inline.
	SystemXDPNDK = "xdpndk"
	// SystemXDPNDKEvents is the same with ndkpeer -e: both sides wait on CQ notifications.
	SystemXDPNDKEvents = "xdpndk-events"
	// SystemRawXDPNDK is our raw AF_XDP link, no transport or verbs (bench/linkbench).
	SystemRawXDPNDK = "raw-xdpndk"
	// SystemRawAsavie is github.com/asavie/xdp's raw AF_XDP link (bench/linkbench).
	SystemRawAsavie = "raw-asavie"
	// SystemQperfTCP is qperf's tcp_lat and tcp_bw -m SIZE.
	SystemQperfTCP = "qperf-tcp"
	// SystemIperf3TCP is iperf3, one TCP stream (CUBIC), -l SIZE.
	SystemIperf3TCP = "iperf3-tcp"
	// SystemSockperfUDP is sockperf ping-pong and throughput over UDP, blocking sockets.
	SystemSockperfUDP = "sockperf-udp"
	// SystemSockperfUDPPoll is the same with --nonblocked: both sides spin on recvfrom.
	SystemSockperfUDPPoll = "sockperf-udp-poll"
	// SystemFabricTCP is libfabric's fi_pingpong over the tcp provider (msg endpoints).
	SystemFabricTCP = "fabric-tcp"
	// SystemFabricUDPRxd is fi_pingpong over udp;ofi_rxd (rdm endpoints).
	SystemFabricUDPRxd = "fabric-udp-rxd"
)

// AllSystems lists every system in the order of the first repetition; repetition r
// measures them in this order rotated by r places (Order).
var AllSystems = []string{
	SystemXDPNDK, SystemXDPNDKEvents, SystemRawXDPNDK, SystemRawAsavie, SystemQperfTCP,
	SystemIperf3TCP, SystemSockperfUDP, SystemSockperfUDPPoll, SystemFabricTCP, SystemFabricUDPRxd,
}

// Order returns the order in which repetition rep (0-based) measures systems: rotated left
// by rep places, so that each system is measured in a different position (after different
// neighbours) in successive repetitions.
func Order(systems []string, rep int) []string {
	n := len(systems)
	if n == 0 {
		return nil
	}
	k := ((rep % n) + n) % n
	return append(slices.Clone(systems[k:]), systems[:k]...)
}

// Fabric returns the libfabric provider and endpoint type of a fabric system.
func Fabric(system string) (tools.Fabric, bool) {
	switch system {
	case SystemFabricTCP:
		return tools.FabricTCPMsg, true
	case SystemFabricUDPRxd:
		return tools.FabricUDPRxdRdm, true
	}
	return tools.Fabric{}, false
}

// Scenarios of the records (report.Record.Scenario) and their operations. Every ping-pong
// of messages shares one row of the table, whatever the tool calls it; so does every
// stream of sends.
const (
	ScenarioPingPong = "pingpong" // one message each way at a time: the round trip
	ScenarioLatency  = "latency"  // xdpndk's Write and Read: post to completion
	ScenarioStream   = "stream"   // messages or bytes streamed one way as fast as they go
	ScenarioLoaded   = "loaded"   // 64 B ping-pong while a 64 KiB stream runs beside it

	OpPingPong = "ping-pong"
	OpSend     = "send"
	OpWrite    = "write"
	OpRead     = "read"
)

// Sizes every full run measures xdpndk and qperf at: 2 B to 8 MiB by powers of two.
func fullSizes() []int {
	var s []int
	for n := 2; n <= 8<<20; n *= 2 {
		s = append(s, n)
	}
	return s
}

// QuickSizes are the sizes of a quick run (-quick) for every system that can carry them.
var QuickSizes = []int{64, 4 << 10, 64 << 10, 1 << 20}

// CPUSizes are the sizes the CPU per message is recorded at (for sockperf, whose UDP
// carries at most 65507 bytes, 65507 stands for 64 KiB; the raw link's are 64 and 9000).
var CPUSizes = []int{64, 64 << 10}

// LoadSize is the size of the stream beside the loaded ping-pong, PingSize its messages.
const (
	LoadSize = 64 << 10
	PingSize = 64
)

// Options configures Run. Start from DefaultOptions (the full run) or QuickOptions.
type Options struct {
	// Runs is the number of repetitions; each measures every system once, in the order of
	// Order(Systems, rep). Medians are reported.
	Runs int
	// Systems are the systems measured (AllSystems by default), in the first
	// repetition's order.
	Systems []string
	// Sizes are the message sizes of xdpndk (every test) and qperf (tcp_lat, tcp_bw).
	Sizes []int
	// Iperf3Sizes are iperf3's write sizes (-l).
	Iperf3Sizes []int
	// SockperfSizes are sockperf's message sizes (ping-pong and throughput); at most
	// 65507. Sizes of Sizes above 65507 are recorded as unsupported for sockperf.
	SockperfSizes []int
	// FabricSizes are fi_pingpong's message sizes.
	FabricSizes []int
	// NdkpeerWindow is ndkpeer's -D: each size's measured window, after its warm-up.
	NdkpeerWindow time.Duration
	// ToolTime is the -t of qperf, iperf3 and sockperf (whole seconds, at least 1).
	ToolTime time.Duration
	// FabricTarget is the time fi_pingpong's iterations are chosen to take at a size
	// (from the round trip measured before); FabricCPUTarget at the CPU sizes, where
	// libfabric's start-up (about 0.1 s of CPU per process) must weigh little.
	FabricTarget, FabricCPUTarget time.Duration
	// LinkWindow and LinkWarmup are the raw link's one-way window and warm-up;
	// LinkPingPongN its ping-pong's round trips (a tenth of them warm-up).
	LinkWindow, LinkWarmup time.Duration
	LinkPingPongN          int
	// LoadTime is the loaded ping-pong's window (ndkpeer -D; qperf's -t, with iperf3
	// running two seconds longer around it).
	LoadTime time.Duration
	// LongPath runs bench/longpath after the repetitions, on a routed bed of its own whose
	// router is a delay line of LongPathRate bit/s: ndkpeer write-bw and read-bw
	// (LongPathOps) against iperf3 at each round trip of LongPathRTTs, alone and sharing,
	// LongPathRuns times, each run LongPathDuration long with LongPathSkip cut from its
	// start.
	LongPath                       bool
	LongPathRTTs                   []time.Duration
	LongPathOps                    []string
	LongPathRuns                   int
	LongPathDuration, LongPathSkip time.Duration
	LongPathRate                   uint64
	// Ndkpeer is the ndkpeer binary; "" builds cmd/ndkpeer into a temporary directory
	// (go build, from the module the working directory is in).
	Ndkpeer string
	// Quick marks a quick run (recorded in the params).
	Quick bool
	// Progress, if not nil, gets a line per measurement (system, size, repetition,
	// elapsed time).
	Progress io.Writer
}

// DefaultOptions returns the full run: 3 repetitions, every system, xdpndk and qperf at 2 B
// to 8 MiB by powers of two, the tools with a large cost per run (sockperf: about 2 s of
// idle warm-up per run; fi_pingpong: about 0.1 s of CPU per process to start) at a subset;
// then the long paths (2 and 10 ms at 1 Gbit/s, write and read, 2 runs of 6 s: bench/longpath's
// own default is 3 runs of 8 s, which would take the run past 20 minutes).
func DefaultOptions() Options {
	return Options{
		Runs:             3,
		Systems:          slices.Clone(AllSystems),
		Sizes:            fullSizes(),
		Iperf3Sizes:      slices.Clone(QuickSizes),
		SockperfSizes:    []int{64, 1 << 10, 4 << 10, 16 << 10, tools.SockperfMaxSize},
		FabricSizes:      []int{2, 64, 1 << 10, 4 << 10, 64 << 10, 256 << 10, 1 << 20, 8 << 20},
		NdkpeerWindow:    250 * time.Millisecond,
		ToolTime:         time.Second,
		FabricTarget:     300 * time.Millisecond,
		FabricCPUTarget:  1500 * time.Millisecond,
		LinkWindow:       500 * time.Millisecond,
		LinkWarmup:       100 * time.Millisecond,
		LinkPingPongN:    10000,
		LoadTime:         time.Second,
		LongPath:         true,
		LongPathRTTs:     []time.Duration{2 * time.Millisecond, 10 * time.Millisecond},
		LongPathOps:      []string{"write", "read"},
		LongPathRuns:     2,
		LongPathDuration: 6 * time.Second,
		LongPathSkip:     2 * time.Second,
		LongPathRate:     1e9,
	}
}

// QuickOptions returns the quick run (-quick, BENCH_QUICK=1 make bench): 2 repetitions at
// 64 B, 4 KiB, 64 KiB and 1 MiB (sockperf at 64 and 65507 B), shorter windows; the long
// paths with write-bw only, one run of 4 s.
func QuickOptions() Options {
	o := DefaultOptions()
	o.Runs = 2
	o.Sizes = slices.Clone(QuickSizes)
	o.SockperfSizes = []int{64, tools.SockperfMaxSize}
	o.FabricSizes = slices.Clone(QuickSizes)
	o.NdkpeerWindow = 400 * time.Millisecond
	o.FabricCPUTarget = time.Second
	o.LinkWindow = 300 * time.Millisecond
	o.LinkPingPongN = 5000
	o.LongPathOps = []string{"write"}
	o.LongPathRuns = 1
	o.LongPathDuration, o.LongPathSkip = 4*time.Second, time.Second
	o.Quick = true
	return o
}

// ErrInvalidOptions is wrapped by the errors of bad Options.
var ErrInvalidOptions = errors.New("invalid compare options")

// normalize validates o.
func (o Options) normalize() (Options, error) {
	bad := func(format string, args ...any) (Options, error) {
		return o, fmt.Errorf("%w: %s", ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	switch {
	case o.Runs < 1 || o.Runs > 50:
		return bad("runs %d not in [1, 50]", o.Runs)
	case len(o.Systems) == 0:
		return bad("no system selected")
	case o.NdkpeerWindow < 100*time.Millisecond || o.NdkpeerWindow > time.Minute:
		return bad("ndkpeer window %v not in [100ms, 1m]", o.NdkpeerWindow)
	case o.ToolTime < time.Second || o.ToolTime > time.Minute:
		return bad("tool time %v not in [1s, 1m]", o.ToolTime)
	case o.FabricTarget <= 0 || o.FabricCPUTarget <= 0 || o.FabricTarget > time.Minute || o.FabricCPUTarget > time.Minute:
		return bad("fi_pingpong targets %v, %v not in (0, 1m]", o.FabricTarget, o.FabricCPUTarget)
	case o.LinkWindow <= 0 || o.LinkWarmup < 0 || o.LinkWindow > time.Minute || o.LinkPingPongN < 10 || o.LinkPingPongN > 1_000_000:
		return bad("raw link window %v, warm-up %v or round trips %d out of range", o.LinkWindow, o.LinkWarmup, o.LinkPingPongN)
	case o.LoadTime < time.Second || o.LoadTime > time.Minute:
		return bad("load time %v not in [1s, 1m]", o.LoadTime)
	case o.LongPath && (len(o.LongPathRTTs) == 0 || len(o.LongPathOps) == 0 || o.LongPathRuns < 1 || o.LongPathRate == 0):
		return bad("long paths: no round trip, operation, run or rate")
	}
	seen := map[string]bool{}
	for _, s := range o.Systems {
		if !slices.Contains(AllSystems, s) {
			return bad("unknown system %q (known: %s)", s, strings.Join(AllSystems, ", "))
		}
		if seen[s] {
			return bad("system %q given twice", s)
		}
		seen[s] = true
	}
	o.Systems = slices.Clone(o.Systems)
	for _, l := range []struct {
		name     string
		sizes    *[]int
		min, max int
	}{
		{"sizes", &o.Sizes, 1, 8 << 20},
		{"iperf3 sizes", &o.Iperf3Sizes, 1, 8 << 20},
		{"sockperf sizes", &o.SockperfSizes, tools.SockperfMinSize, tools.SockperfMaxSize},
		{"fi_pingpong sizes", &o.FabricSizes, 1, 8 << 20},
	} {
		s := slices.Clone(*l.sizes)
		slices.Sort(s)
		s = slices.Compact(s)
		for _, n := range s {
			if n < l.min || n > l.max {
				return bad("%s: %d not in [%d, %d]", l.name, n, l.min, l.max)
			}
		}
		*l.sizes = s
	}
	return o, nil
}

// ParseSystems parses a comma-separated list of systems; "all" means AllSystems.
func ParseSystems(s string) []string { return report.ParseList(s, AllSystems) }

// ParseSizes parses a comma-separated list of sizes in bytes, with K and M suffixes
// (powers of 1024): "64,4K,1M" (report.ParseSizes).
func ParseSizes(s string) ([]int, error) { return report.ParseSizes(s) }
