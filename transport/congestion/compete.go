package congestion

import (
	"math"
	"math/bits"
)

// Competition with loss-based flows on a long path (Delay's competitive mode where
// longPath holds; docs/TRANSPORT.md, "Congestion control for paths of 10 µs to 10 ms").
//
// A delay-based flow yields to one that fills the buffer: on the delay line's 10 ms bed
// one iperf3 CUBIC flow left the QP 4 to 7% of the line. There a loaded host's latency
// also keeps the queue from looking drained now and then, so the short path's rule
// (CompeteRounds rounds in a row without a drained round) never fired: the queue CUBIC
// keeps drains for a moment once every few round trips. What tells the two apart is how
// often a queue stands: alone, the delay cut drains it, and the smallest delay of a round
// was above the target in 13% of the rounds and never in 5 of 8 in a row; sharing with
// CUBIC, in 72 to 93% of them, and in 5 of 8 most of the time. So on a long path the
// controller competes once competeStanding of the last 8 rounds had their smallest delay
// above the target.
//
// Competing, it behaves as the loss-based flows it shares the path with (CUBIC, RFC
// 9438): slow start to the first loss, then the window follows CUBIC's cubic function of
// the time since the last reduction, with its Reno-friendly floor, and a loss cuts it to
// 0.7 (once per congestion event: sameEvent). It does not pace meanwhile: at a full
// drop-tail queue the unpaced flow's bursts take the slots that free up, and a paced
// flow's evenly spread packets are the ones dropped (on the bed the paced QP saw about
// two loss events a second against one CUBIC flow). Every competeProbeEvery rounds it
// probes whether the
// queue is its own: it cuts the window as the delay cut would (to drain its share of the
// queue) for competeProbeRounds rounds; if a packet sent after the cut sees the queue
// drained, nobody else keeps it full and delay rules again; otherwise the window is
// restored and the competition goes on.

// competeStanding is how many of the last 8 rounds must have had a standing queue (their
// smallest delay above the target) for a long path's controller to compete.
const competeStanding = 5

// competeProbeEvery is how many rounds in competition pass between probes of whether the
// queue is the controller's own; competeProbeRounds is how many rounds a probe lasts.
const (
	competeProbeEvery  = 32
	competeProbeRounds = 2
)

// CUBIC's constants (RFC 9438 §4.1): C in packets per second cubed, the multiplicative
// decrease, and the additive increase of its Reno-friendly region (§4.3).
const (
	cubicC     = 0.4
	cubicBeta  = competeBeta
	cubicAlpha = 3 * (1 - cubicBeta) / (1 + cubicBeta)
)

// cubic is the state of CUBIC's window function (RFC 9438 §4.2-4.3, §4.7), in packets.
type cubic struct {
	epoch   int64   // ns: start of the current congestion-avoidance epoch (0: none yet)
	wMax    float64 // the window before the last reduction (after fast convergence)
	lastMax float64 // the window at the last reduction, for fast convergence
	k       float64 // s: when the function reaches wMax again
	wEst    float64 // the Reno-friendly estimate
}

// reduce applies a congestion event at now to a window of cwnd packets and returns the
// new window: cwnd*beta, with wMax lowered by fast convergence when the window is below
// the last one's.
func (c *cubic) reduce(now int64, cwnd float64) float64 {
	if cwnd < c.lastMax {
		c.wMax = cwnd * (1 + cubicBeta) / 2
	} else {
		c.wMax = cwnd
	}
	c.lastMax = cwnd
	w := cwnd * cubicBeta
	c.start(now, w)
	return w
}

// start begins an epoch at now with a window of w packets (K from wMax, at least w).
func (c *cubic) start(now int64, w float64) {
	c.epoch, c.wEst = now, w
	c.wMax = max(c.wMax, w)
	c.k = math.Cbrt((c.wMax - w) / cubicC)
}

// at is the window function at t seconds into the epoch.
func (c *cubic) at(t float64) float64 {
	d := t - c.k
	return cubicC*d*d*d + c.wMax
}

// grow returns the window after pkts acknowledged packets at now, for a window of cwnd
// and a round trip of rtt ns: towards the function's value a round trip ahead (at most
// 1.5 times the window), or the Reno-friendly estimate when that is larger.
func (c *cubic) grow(now int64, cwnd, pkts float64, rtt int64) float64 {
	if c.epoch == 0 || now < c.epoch {
		c.start(now, cwnd)
	}
	cwnd = max(cwnd, 1)
	c.wEst += cubicAlpha * pkts / cwnd
	t := float64(now-c.epoch) / 1e9
	if c.at(t) < c.wEst {
		return max(cwnd, c.wEst)
	}
	target := min(max(c.at(t+float64(rtt)/1e9), cwnd), 1.5*cwnd)
	return cwnd + (target-cwnd)/cwnd*pkts
}

// competeLong ends a round of a long path (checkCompetition) whose smallest delay was m
// (0: no sample): it enters competition on competeStanding standing rounds of the last
// 8, and while competing runs the probes.
func (d *Delay) competeLong(now, m int64) {
	standing := m != 0 && float64(m) > d.targetDelay()
	d.standHist <<= 1
	if standing {
		d.standHist |= 1
	}
	if !d.compete {
		if bits.OnesCount8(d.standHist) >= competeStanding {
			d.compete, d.slow, d.ssthresh = true, true, 0
			d.cub = cubic{}
			d.probeIn, d.probing = competeProbeEvery, 0
			d.stats.CompetitiveEntries++
		}
		return
	}
	if d.probing > 0 {
		if d.probeMin != 0 && float64(d.probeMin) <= d.drained() {
			// The queue drained once this flow made room: it was its own.
			d.compete, d.standHist, d.probing, d.slow = false, 0, 0, false
			return
		}
		if d.probing > 1 {
			d.probing--
		} else {
			d.endProbe()
		}
		return
	}
	if d.slow || m == 0 {
		return
	}
	if d.probeIn--; d.probeIn > 0 {
		return
	}
	base, x := float64(d.baseDelay()), float64(m)
	f := max((1-d.cfg.Beta*(x-base)/x)*(1-d.cfg.DrainMargin), 1-d.cfg.MaxMDF)
	d.probeSave, d.probeAt, d.probeMin, d.probing = d.cwnd, now, 0, competeProbeRounds
	d.cwnd = max(d.cwnd*f, d.cfg.MinCwnd)
	// A decrease like any other: losses of what was sent before it belong to it.
	d.decreased, d.lastDecrease = true, now
}

// competeAck applies an acknowledgement while competing on a long path: slow start to the
// first loss (or ssthresh), then CUBIC; during a probe the window stays where the probe
// put it, and samples of packets sent after the probe began are watched for a drained
// queue.
func (d *Delay) competeAck(now int64, pkts float64, delay int64) {
	if d.probing > 0 {
		if now-delay >= d.probeAt && (d.probeMin == 0 || delay < d.probeMin) {
			d.probeMin = delay
		}
		return
	}
	switch {
	case !d.cwndLimited():
		// Not limited by the window: it does not grow (as in OnAck).
	case d.slow:
		d.cwnd += pkts
		if d.ssthresh > 0 && d.cwnd >= d.ssthresh {
			d.slow = false
			d.cub.start(now, d.cwnd)
		}
	default:
		d.cwnd = d.cub.grow(now, d.cwnd, pkts, d.srtt)
	}
	d.cwnd = min(d.cwnd, d.cfg.MaxCwnd)
}

// drained is the delay below which a round saw the queue drain: half the allowed queue
// above the base, or at least twice BaseTarget (a short path allows so little queue that
// many flows of ours seldom go below half of it, while a buffer filler keeps
// milliseconds).
func (d *Delay) drained() float64 {
	base := float64(d.baseDelay())
	return base + max((d.targetDelay()-base)/2, 2*float64(d.cfg.BaseTarget))
}

// endProbe ends a probe that a loss or a timeout interrupts: the window goes back to
// where it was, for the loss's cut to apply to, and the next probe is competeProbeEvery
// rounds away.
func (d *Delay) endProbe() {
	if d.probing > 0 {
		d.cwnd = max(d.cwnd, d.probeSave)
		d.probing = 0
	}
	d.probeIn = competeProbeEvery
}
