package congestion

import (
	"fmt"
)

// Limits that keep every computation finite and every window representable as an int
// on 32-bit platforms too.
const (
	// MaxMSS is the largest SwiftConfig.MSS accepted, in bytes (the largest UDP payload).
	MaxMSS = 65535
	// MaxWindowBytes is the largest window a Swift controller can reach, in bytes:
	// SwiftConfig.MaxCwnd*MSS must not exceed it.
	MaxWindowBytes = 1 << 30
	// MaxDelay is the largest delay, in nanoseconds, used anywhere (configured delays and
	// delay samples). Larger samples are clamped to it; larger configured delays are
	// rejected. One second is far beyond any datacenter round trip.
	MaxDelay = int64(1e9)
)

// SwiftConfig configures a Swift controller. Windows are in packets of MSS payload bytes
// (fractions allowed), as in the paper; delays are in nanoseconds. Start from
// DefaultSwiftConfig and change what differs; NewSwift validates every field.
type SwiftConfig struct {
	// MSS is the payload bytes of one full-size data packet (the engine's maximum payload
	// per packet, from the negotiated path MTU). 1 to MaxMSS.
	MSS int

	// InitialCwnd is the window a new controller starts with, in packets.
	// MinCwnd <= InitialCwnd <= MaxCwnd.
	InitialCwnd float64
	// MinCwnd is the smallest window, in packets. Values below 1 are allowed: below one
	// packet the controller paces (one packet every SmoothedDelay/cwnd). > 0.
	MinCwnd float64
	// MaxCwnd is the largest window, in packets. MaxCwnd*MSS <= MaxWindowBytes.
	MaxCwnd float64

	// AI is the additive increase, in packets per round trip, while the delay is below
	// target. > 0.
	AI float64
	// Beta scales the multiplicative decrease with the relative excess delay: a window is
	// multiplied by 1 - Beta*(delay-target)/delay. 0 < Beta <= 1.
	Beta float64
	// MaxMDF is the largest fraction of the window one decrease may remove, and the
	// fraction a loss or a timeout removes. 0 < MaxMDF < 1.
	MaxMDF float64

	// BaseTarget is the target fabric delay for a large window on a one-hop path, in ns.
	// With BaseDelayWindow 0 it is absolute, as in the paper: the base round trip plus the
	// queueing allowed at the bottleneck. With BaseDelayWindow set, it is the delay allowed
	// above the path's learned unloaded delay. 1 to MaxDelay.
	BaseTarget int64
	// BaseDelayWindow, when non-zero, makes the controller learn the path's unloaded delay
	// as the smallest delay sample seen over the last BaseDelayWindow ns, and add it to the
	// target. An absolute target below the path's own round trip pins the window at its
	// minimum (measured: 0.09 Gbit/s of 10 on a 100 µs path with the defaults), so paths
	// longer than BaseTarget need either a larger BaseTarget or learning. Learning is off by
	// default because a flow that starts while a queue stands learns the queue as path
	// delay and takes more than its share (measured: Jain 0.52 for two flows, the late one
	// winning); a queue-draining probe would cure that and is not built. 0 to
	// MaxDelay*1000.
	BaseDelayWindow int64
	// HopScale is added to the target per network hop, in ns. This controller has no
	// hop count (the wire carries no TTL echo), so it assumes one hop and HopScale simply
	// adds to BaseTarget. 0 to MaxDelay.
	HopScale int64
	// FSRange is the largest extra target granted to small windows (flow-based scaling),
	// in ns: a flow at FSMinCwnd or below gets BaseTarget+FSRange, a flow at FSMaxCwnd or
	// above gets BaseTarget, and in between the extra falls with 1/sqrt(cwnd). 0 disables
	// flow scaling. 0 to MaxDelay.
	FSRange int64
	// FSMinCwnd is the window, in packets, at and below which the flow-scaling term is
	// FSRange. > 0.
	FSMinCwnd float64
	// FSMaxCwnd is the window, in packets, at and above which the flow-scaling term is 0.
	// > FSMinCwnd.
	FSMaxCwnd float64

	// RetxResetThreshold is the number of consecutive retransmission timeouts after which
	// the window drops to MinCwnd; earlier timeouts cut it by MaxMDF. >= 1.
	RetxResetThreshold int

	// InitialRTT is the round-trip estimate, in ns, used before the first delay sample
	// (for the once-per-round-trip limit on decreases and for pacing). 1 to MaxDelay.
	InitialRTT int64
}

// DefaultSwiftConfig returns the defaults for the two-host test bed and datacenter NICs
// (base round trip about 5-20 µs, 1500-byte MTU):
//
//	MSS 1400 B            payload of a 1500-byte MTU packet after IP/UDP/transport headers
//	InitialCwnd 16 pkt     about 22 KB: line rate of 10 Gbit/s at an 18 µs round trip
//	MinCwnd 1 pkt          no pacing below one packet by default: host wake-up latency on
//	                       software endpoints would otherwise starve flows (0.01 suits incast)
//	MaxCwnd 2048 pkt       about 2.9 MB: 100 Gbit/s at 230 µs, far beyond a datacenter BDP
//	AI 1 pkt/RTT           Reno-like probing; round trips are µs, so ramp-up is still fast
//	Beta 0.8, MaxMDF 0.5   a decrease proportional to the excess delay, never below half
//	BaseTarget 25 µs       the base round trip (5-20 µs) plus room for a few packets of
//	                       queue and for software timestamp jitter of the AF_XDP datapath
//	HopScale 0             one hop assumed; BaseTarget already covers it
//	FSRange 25 µs          small windows (many competing flows) may queue up to 2x the base
//	FSMinCwnd 0.1 pkt      full flow-scaling boost at and below 0.1 packet
//	FSMaxCwnd 100 pkt      no boost at and above 100 packets
//	RetxResetThreshold 5   five timeouts in a row mean the path is gone: restart from MinCwnd
//	InitialRTT 25 µs       the base target until the first sample arrives
func DefaultSwiftConfig() SwiftConfig {
	return SwiftConfig{
		MSS:         1400,
		InitialCwnd: 16,
		// One packet: below that Swift paces, and on software endpoints (veth, VMs) whose
		// wake-up latency dominates the delay signal the pacing gaps starve flows (a
		// measured 50 ms per packet). Incast-heavy fabrics can lower it.
		MinCwnd:            1,
		MaxCwnd:            2048,
		AI:                 1,
		Beta:               0.8,
		MaxMDF:             0.5,
		BaseTarget:         25_000,
		BaseDelayWindow:    0,
		HopScale:           0,
		FSRange:            25_000,
		FSMinCwnd:          0.1,
		FSMaxCwnd:          100,
		RetxResetThreshold: 5,
		InitialRTT:         25_000,
	}
}

// validate reports the first invalid field, wrapping ErrInvalidConfig.
func (c *SwiftConfig) validate() error {
	bad := configError("swift")
	if err := checkWindow(bad, c.MSS, c.InitialCwnd, c.MinCwnd, c.MaxCwnd); err != nil {
		return err
	}
	if err := (controlFields{c.AI, c.Beta, c.MaxMDF, c.BaseTarget, c.FSRange, c.FSMinCwnd, c.FSMaxCwnd,
		c.RetxResetThreshold, c.InitialRTT}).check(bad); err != nil {
		return err
	}
	switch {
	case c.BaseDelayWindow < 0 || c.BaseDelayWindow > MaxDelay*1000:
		return bad("BaseDelayWindow", c.BaseDelayWindow, fmt.Sprintf("0..%d", MaxDelay*1000))
	case c.HopScale < 0 || c.HopScale > MaxDelay:
		return bad("HopScale", c.HopScale, fmt.Sprintf("0..%d ns", MaxDelay))
	}
	return nil
}
