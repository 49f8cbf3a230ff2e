package congestion

import (
	"fmt"
)

// DelayConfig configures a Delay controller. Windows are in packets of MSS payload bytes
// (fractions allowed), delays and times in nanoseconds. Start from DefaultDelayConfig and
// change what differs; NewDelay validates every field.
type DelayConfig struct {
	// MSS is the payload bytes of one full-size data packet. 1 to MaxMSS.
	MSS int

	// InitialCwnd is the window a new controller starts with, in packets, and the window it
	// restarts from after a retransmission timeout. MinCwnd <= InitialCwnd <= MaxCwnd.
	InitialCwnd float64
	// MinCwnd is the smallest window, in packets. Below one packet the controller paces
	// (one packet every SmoothedDelay/cwnd). > 0.
	MinCwnd float64
	// MaxCwnd is the largest window, in packets. MaxCwnd*MSS <= MaxWindowBytes.
	MaxCwnd float64

	// AI is the additive increase in congestion avoidance, in packets per round trip, on a
	// path of up to AIScale: a longer path adds AI*base/AIScale per round trip, the same
	// for every flow on it (so increases stay additive and fair), so that the window grows
	// back to the path's bandwidth-delay product in about as many round trips on a 10 ms
	// path as on a 25 µs one. > 0.
	AI float64
	// AIScale is the path round trip up to which AI is not scaled, in ns. 1 to MaxDelay.
	AIScale int64
	// Beta scales the decrease on delay: above the target the window is multiplied by
	// max((1 - Beta*(delay-base)/delay)*(1-DrainMargin), 1 - MaxMDF), which with Beta 1
	// removes this flow's share of the standing queue and DrainMargin more. 0 < Beta <= 1.
	Beta float64
	// DrainMargin is the fraction of the window a delay cut removes beyond the queue: it
	// empties the queue for a moment, so that every flow, also one that started on a
	// standing queue and took it for path delay, sees the path's unloaded round trip. 0 to
	// 0.5.
	DrainMargin float64
	// MaxMDF is the largest fraction of the window one decrease may remove, and what a
	// congestion loss removes. 0 < MaxMDF < 1.
	MaxMDF float64

	// BaseTarget is the target delay of a short path, in ns: absolute, the same for every
	// flow whatever base delay it learned, as in Swift. The target is
	// max(BaseTarget, base + max(QueueFloor, TargetRatio*base)) plus flow scaling, so it
	// is relative to the learned base only on paths longer than about BaseTarget, where a
	// fixed target would pin the window (below the path's own round trip) and where the
	// delay cut's DrainMargin corrects a base learned on a standing queue. 1 to MaxDelay.
	BaseTarget int64
	// QueueFloor is the least queueing delay allowed above the learned base on a long
	// path, in ns. 0 to MaxDelay.
	QueueFloor int64
	// TargetRatio scales the allowed queueing delay with the path: a 10 ms path may queue
	// TargetRatio*10 ms, so that its sawtooth is not lost in the delay noise and the delay
	// cut, proportional to the queue, is deep enough to even out flows quickly. 0 to 1.
	TargetRatio float64
	// FSRange, FSMinCwnd and FSMaxCwnd are the flow-scaling term as in SwiftConfig: small
	// windows (many competing flows) get up to FSRange more target. FSRange 0 disables it.
	FSRange   int64
	FSMinCwnd float64
	FSMaxCwnd float64

	// BaseWindow is how long the minimum delay sample is remembered, in ns: the path's
	// unloaded round trip is the smallest sample of the last BaseWindow. 1 to
	// MaxDelay*1000.
	BaseWindow int64

	// RandomLossMax is the fraction of a round trip's packets that may be lost while the
	// delay stays below the target before the loss counts as congestion: isolated loss on
	// a path without a queue is noise, not a signal to slow down. 0 to 1 (0: every loss
	// event is congestion).
	RandomLossMax float64

	// CompeteRounds is how many round trips in a row the queue may stay above half the
	// allowed queueing delay (and above twice BaseTarget) before the controller concludes
	// that flows which fill the buffer (loss-based TCP) share the bottleneck and competes
	// with them: it then ignores delay, grows by AI per round trip and cuts by 0.3 on loss,
	// until the queue drains again. A long path (LongPath) has its own rule instead
	// (compete.go). >= 1.
	CompeteRounds int

	// LongPath is the least base delay, in ns, of a path the controller treats as long: a
	// window there takes longer than a loaded host's scheduling hiccups of a millisecond or
	// so, which show as delay that no drain removes. On a long path packets are paced, at
	// PaceGain times the window per smoothed round trip (twice that in slow start), since
	// a window released at once (acks that a late host delivered together) otherwise
	// leaves as one burst that queues behind itself at the bottleneck, and a receiver idle
	// between bursts sleeps and answers late; a sample above the target ends slow start
	// but cuts nothing, and only a queue that stood a whole smoothed round trip (every
	// sample above the target) is drained. 0: no path is long; 1 to MaxDelay.
	LongPath int64
	// PaceGain is the pacing rate over the window's rate; > 1 so that the window, not the
	// pacing, limits a flow. 1 to 4.
	PaceGain float64

	// RetxResetThreshold is the number of consecutive retransmission timeouts after which
	// the window drops to MinCwnd; earlier ones restart it from InitialCwnd. >= 1.
	RetxResetThreshold int

	// InitialRTT is the round-trip estimate, in ns, before the first delay sample. 1 to
	// MaxDelay.
	InitialRTT int64
}

// DefaultDelayConfig returns the defaults, for paths of 10 µs to 10 ms and a 1500-byte MTU:
//
//	MSS 1400 B              payload of a 1500-byte MTU packet after the headers
//	InitialCwnd 10 pkt      RFC 6928's initial window: line rate of 10 Gbit/s at 11 µs from the
//	                        start; 16 flows of 16 overflowed a one-BDP buffer at 100 µs
//	MinCwnd 1 pkt           no pacing below one packet (software endpoints wake up late)
//	MaxCwnd 65536 pkt       about 92 MB: 10 Gbit/s over 70 ms
//	AI 1 pkt/RTT            Reno's probing in congestion avoidance, on paths up to
//	AIScale 25 µs           25 µs; 400 pkt/RTT on a 10 ms path
//	Beta 1, MaxMDF 0.5      a delay cut drains this flow's share of the queue,
//	DrainMargin 0.1         and 10% more: the queue empties once per cycle
//	BaseTarget 25 µs        a 5-20 µs path plus a few packets of queue and software
//	                        timestamp jitter (Swift's absolute target, shared by all flows)
//	QueueFloor 5 µs         on longer paths at least 4 packets of queue at 10 Gbit/s,
//	TargetRatio 1/4         and 2.5 ms of queue on a 10 ms path: with less, 8 flows on a
//	                        1 ms path did not reach Jain 0.95 (measured)
//	FSRange 25 µs           flow scaling as Swift's, 0.1 to 100 packets
//	BaseWindow 10 s         the unloaded round trip is the minimum of 10 s (BBR's choice)
//	RandomLossMax 0.1       up to 10% of two rounds' packets lost at low delay is noise
//	CompeteRounds 20        a queue that never drains for 20 round trips is not ours
//	LongPath 1 ms           paths of 1 ms and more: paced, cut on a standing queue only,
//	PaceGain 1.25           competing as CUBIC (bench/longpath's 2 and 10 ms paths)
//	RetxResetThreshold 5    five timeouts in a row: the path is gone
//	InitialRTT 25 µs
func DefaultDelayConfig() DelayConfig {
	return DelayConfig{
		MSS:                1400,
		InitialCwnd:        10,
		MinCwnd:            1,
		MaxCwnd:            65536,
		AI:                 1,
		AIScale:            25_000,
		Beta:               1,
		DrainMargin:        0.1,
		MaxMDF:             0.5,
		BaseTarget:         25_000,
		QueueFloor:         5_000,
		TargetRatio:        0.25,
		FSRange:            25_000,
		FSMinCwnd:          0.1,
		FSMaxCwnd:          100,
		BaseWindow:         10e9,
		RandomLossMax:      0.1,
		CompeteRounds:      20,
		LongPath:           1_000_000,
		PaceGain:           1.25,
		RetxResetThreshold: 5,
		InitialRTT:         25_000,
	}
}

// validate reports the first invalid field, wrapping ErrInvalidConfig.
func (c *DelayConfig) validate() error {
	bad := configError("delay")
	if err := checkWindow(bad, c.MSS, c.InitialCwnd, c.MinCwnd, c.MaxCwnd); err != nil {
		return err
	}
	if err := (controlFields{c.AI, c.Beta, c.MaxMDF, c.BaseTarget, c.FSRange, c.FSMinCwnd, c.FSMaxCwnd,
		c.RetxResetThreshold, c.InitialRTT}).check(bad); err != nil {
		return err
	}
	switch {
	case c.AIScale < 1 || c.AIScale > MaxDelay:
		return bad("AIScale", c.AIScale, fmt.Sprintf("1..%d ns", MaxDelay))
	case !finite(c.DrainMargin) || c.DrainMargin < 0 || c.DrainMargin > 0.5:
		return bad("DrainMargin", c.DrainMargin, "in [0, 0.5]")
	case c.QueueFloor < 0 || c.QueueFloor > MaxDelay:
		return bad("QueueFloor", c.QueueFloor, fmt.Sprintf("0..%d ns", MaxDelay))
	case !finite(c.TargetRatio) || c.TargetRatio < 0 || c.TargetRatio > 1:
		return bad("TargetRatio", c.TargetRatio, "in [0, 1]")
	case c.BaseWindow < 1 || c.BaseWindow > MaxDelay*1000:
		return bad("BaseWindow", c.BaseWindow, fmt.Sprintf("1..%d ns", MaxDelay*1000))
	case !finite(c.RandomLossMax) || c.RandomLossMax < 0 || c.RandomLossMax > 1:
		return bad("RandomLossMax", c.RandomLossMax, "in [0, 1]")
	case c.CompeteRounds < 1:
		return bad("CompeteRounds", c.CompeteRounds, ">= 1")
	case c.LongPath < 0 || c.LongPath > MaxDelay:
		return bad("LongPath", c.LongPath, fmt.Sprintf("0..%d ns", MaxDelay))
	case !finite(c.PaceGain) || c.PaceGain < 1 || c.PaceGain > 4:
		return bad("PaceGain", c.PaceGain, "in [1, 4]")
	}
	return nil
}
