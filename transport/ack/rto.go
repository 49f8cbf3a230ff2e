package ack

import "time"

// RTOConfig bounds the retransmission timeout. Zero or negative fields take the value of
// DefaultRTOConfig; NewRTO raises Max to Min if it is smaller and clamps Initial into
// [Min, Max].
type RTOConfig struct {
	// Initial is the RTO before the first RTT sample (RFC 6298 §2.1 says 1 s for the
	// Internet).
	Initial time.Duration
	// Min is the floor of the RTO (RFC 6298 §2.4 says 1 s for the Internet).
	Min time.Duration
	// Max is the ceiling of the RTO, also after backoff (RFC 6298 §2.5 allows >= 60 s).
	Max time.Duration
}

// DefaultRTOConfig returns the bounds for the veth and LAN paths xdpndk runs on, where an
// RTT is 10-100 µs:
//
//   - Initial 2 ms: about 20 times a LAN RTT including a receiver's ack coalescing, so the
//     first packets of a connection are not retransmitted spuriously, yet a loss before any
//     sample costs milliseconds, not RFC 6298's second.
//   - Min 200 µs: the floor sits above what inflates an RTT without loss on a host (ack
//     coalescing, scheduler wakeups of an adaptive-polling engine, Go GC pauses and
//     preemption, copy-mode AF_XDP on veth), so a smooth low-variance SRTT does not shrink
//     the RTO into spurious retransmissions. SACK and RACK recover most losses well before
//     it; the RTO is the backstop for tail and ack losses.
//   - Max 500 ms: backoff stops growing there, so a peer that comes back after a long
//     silence is sent a retransmission, and noticed, within half a second. How long the
//     engine keeps retransmitting is its own budget, a duration (transport's
//     Config.RetryTimeout), not a count of backoffs: from the 200 µs floor, 7 of them are
//     spent in 51 ms, shorter than the host stalls of a busy VM.
func DefaultRTOConfig() RTOConfig {
	return RTOConfig{
		Initial: 2 * time.Millisecond,
		Min:     200 * time.Microsecond,
		Max:     500 * time.Millisecond,
	}
}

// Constants of RFC 6298 §2, in nanoseconds where they are times.
const (
	rtoGranularity = int64(time.Microsecond) // G: the clock granularity the RTO assumes
	rtoK           = 4
	// rtoSRTTShare: the variance term is at least SRTT / rtoSRTTShare (base).
	rtoSRTTShare = 2
	// maxRTTSample caps a sample so that 8*SRTT cannot overflow; an RTT beyond it says
	// the clock is broken, and Max is far below it anyway.
	maxRTTSample = int64(time.Hour)
)

// RTO is the retransmission-timeout estimator of RFC 6298: SRTT and RTTVAR smoothed from
// RTT samples (alpha 1/8, beta 1/4, K 4, granularity 1 µs), clamped to the configured
// bounds, with exponential backoff (§5.5). All values are nanoseconds. The caller feeds it
// only Karn-valid samples (from packets never retransmitted, as SentHistory.OnAck
// produces them).
//
// An RTO is owned by one engine goroutine and is not safe for concurrent use. No method
// allocates.
type RTO struct {
	initial, min, max int64
	srtt, rttvar      int64
	sampled           bool // at least one sample: srtt and rttvar are meaningful
	backoffs          int
	// spur is the margin spurious timeouts showed the RTO lacks (Spurious), added to it
	// and halved every spurHalfLife since spurAt.
	spur, spurAt int64
}

// spurHalfLife is how long the margin a spurious timeout added keeps half its size: the
// stalls of a loaded host come back within seconds, and an RTO that forgot them in a few
// round trips (RTTVAR decays per sample) fired spuriously at each.
const spurHalfLife = int64(5 * time.Second)

// NewRTO returns an estimator with no sample yet: its Timeout is cfg.Initial.
func NewRTO(cfg RTOConfig) *RTO {
	def := DefaultRTOConfig()
	if cfg.Initial <= 0 {
		cfg.Initial = def.Initial
	}
	if cfg.Min <= 0 {
		cfg.Min = def.Min
	}
	if cfg.Max <= 0 {
		cfg.Max = def.Max
	}
	if cfg.Max < cfg.Min {
		cfg.Max = cfg.Min
	}
	cfg.Initial = min(max(cfg.Initial, cfg.Min), cfg.Max)
	return &RTO{initial: int64(cfg.Initial), min: int64(cfg.Min), max: int64(cfg.Max)}
}

// Sample feeds one RTT measurement in nanoseconds (RFC 6298 §2.2, §2.3). The first sets
// SRTT = R and RTTVAR = R/2; each later one sets RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R|, then
// SRTT = 7/8 SRTT + 1/8 R. A new RTO is computed from them, replacing any backed-off value,
// so Sample also resets the backoff. A sample of zero or less is ignored.
func (r *RTO) Sample(rtt int64) {
	if rtt <= 0 {
		return
	}
	rtt = min(rtt, maxRTTSample)
	if !r.sampled {
		r.sampled = true
		r.srtt = rtt
		r.rttvar = rtt / 2
	} else {
		d := r.srtt - rtt
		if d < 0 {
			d = -d
		}
		r.rttvar = (3*r.rttvar + d) / 4
		r.srtt = (7*r.srtt + rtt) / 8
	}
	r.backoffs = 0
}

// base is the RTO without backoff, clamped to [Min, Max] (RFC 6298 §2.1, §2.3, §2.4).
// The variance term is at least Min/2, as Linux keeps RTTVAR's term at least its minimum
// RTO: on a path whose round trip is steady and longer than Min, 4*RTTVAR shrinks to
// microseconds and the RTO to SRTT, and every queueing hiccup fired it (measured: a flow
// of 16 in incast at 100 µs with 111 spurious timeouts in 30 ms). Paths shorter than Min/2
// keep the RTO at Min, as before.
//
// It is also at least SRTT/2 (rtoSRTTShare): on a long path a floor of Min/2 (100 µs) is
// nothing against what the path itself does without loss. The delay-based controller
// lets a queue of a quarter of the base round trip stand (docs/TRANSPORT.md), and a host
// descheduled for a few milliseconds holds the acks as long: on the delay line's 10 ms
// path of bench/longpath, write-bw saw 19 timer expiries in 5 s with nothing lost, 18 of
// them proven spurious (TestLongPathSpurious reproduces it on simlink). Below 2 x Min/2 of
// SRTT (200 µs) nothing changes.
func (r *RTO) base() int64 {
	if !r.sampled {
		return r.initial
	}
	return min(max(r.srtt+max(rtoGranularity, rtoK*r.rttvar, r.min/2, r.srtt/rtoSRTTShare)+r.Margin(), r.min), r.max)
}

// Spurious records at now a run of timeouts proven spurious (the original transmission
// had arrived) whose proof came late after the first of them fired: the RTO was short by
// at least that much, so it keeps a margin of twice that (RFC 4015 leaves the RTO's
// adaptation to the sender; Linux's answer is an RTO floor of 200 ms, which a path of
// 10 µs cannot afford). The margin counts for at most one SRTT: on a long path a loaded
// host's stalls are of the order of the round trip, and on a short one, where a stall
// is many round trips, the backstop of tail and ack losses stays near Min (a peer stopped
// for seconds does not leave loss recovery slow afterwards). It halves every
// spurHalfLife (Age). On the delay line's 2 ms path on a loaded machine, 50 of 54
// timeouts in 8 s were spurious before it.
func (r *RTO) Spurious(now, late int64) {
	if late <= 0 {
		return
	}
	r.spur = min(max(r.spur, 2*late), r.max)
	r.spurAt = now
}

// Age halves the spurious-timeout margin for every spurHalfLife passed since it was last
// set or halved. Call it with the time of each acknowledgement.
func (r *RTO) Age(now int64) {
	for r.spur > 0 && now-r.spurAt >= spurHalfLife {
		r.spur /= 2
		r.spurAt += spurHalfLife
	}
}

// Margin returns the spurious-timeout margin in the RTO now, in nanoseconds: what
// Spurious recorded (aged), at most one SRTT.
func (r *RTO) Margin() int64 { return min(r.spur, r.srtt) }

// Seed raises the timeout before the first sample to three times a round trip measured
// otherwise (the connection handshake: RFC 6298's first sample gives SRTT + 4 x SRTT/2),
// within [Initial, Max]. It is not a sample: a handshake also counts the peer
// application's time to answer, which must not become SRTT. A seed after the first sample,
// or of zero or less, is ignored. Without it the 2 ms Initial fired before the first
// acknowledgement could come back on every path longer than 2 ms (twice on a 10 ms one).
func (r *RTO) Seed(rtt int64) {
	if r.sampled || rtt <= 0 {
		return
	}
	rtt = min(rtt, maxRTTSample)
	r.initial = min(max(r.initial, 3*rtt), r.max)
}

// Timeout returns the current RTO in nanoseconds: the RFC 6298 value clamped to
// [Min, Max], doubled once per Backoff since the last reset, and never above Max.
func (r *RTO) Timeout() int64 {
	t := r.base()
	for i := 0; i < r.backoffs; i++ {
		if t >= r.max-t { // 2t >= max, written so that it cannot overflow
			return r.max
		}
		t *= 2
	}
	return t
}

// Backoff doubles the timeout after it expired (RFC 6298 §5.5); the timeout stops growing
// at Max but Backoffs keeps counting.
func (r *RTO) Backoff() { r.backoffs++ }

// ResetBackoff cancels the backoff: call it on forward progress (an ack of new data).
// Sample resets it too.
func (r *RTO) ResetBackoff() { r.backoffs = 0 }

// Max returns the ceiling of the timeout (RTOConfig.Max after normalization) in
// nanoseconds.
func (r *RTO) Max() int64 { return r.max }

// SRTT returns the smoothed RTT in nanoseconds, 0 before the first sample.
func (r *RTO) SRTT() int64 { return r.srtt }

// RTTVar returns the RTT variation in nanoseconds, 0 before the first sample.
func (r *RTO) RTTVar() int64 { return r.rttvar }

// Backoffs returns how many times Backoff was called since the last reset: the number of
// consecutive timeouts.
func (r *RTO) Backoffs() int { return r.backoffs }
