package congestion

// Delay is the engine's default congestion controller: delay-based, for paths whose
// unloaded round trip is anything from 10 µs to 10 ms (the package documentation has the
// algorithm and the reasons for its constants). It learns the path's unloaded round trip
// as the minimum delay sample, allows a queueing delay above it that grows with the path,
// starts in slow start, cuts on delay (draining the queue it sees on a long path, as Swift
// does on a short one), tells isolated loss from congestion by the delay, undoes the
// reaction to a timeout that proved spurious, and competes like a loss-based flow with
// flows that keep the buffer full.
//
// A Delay belongs to one QP direction and is driven by the engine goroutine; it is not
// safe for concurrent use. Create it with NewDelay.
type Delay struct {
	window // the path's unloaded delay: the minimum over BaseWindow
	cfg    DelayConfig
	fs     target // flow-scaling term only (its fixed part is 0)
	slow   bool   // slow start: the window doubles per round trip until the delay rises

	// the current round (one smoothed round trip): packets acked and lost in it, for
	// telling random loss from congestion
	roundStart             int64
	roundAcked, roundLost  float64
	prevAcked, prevLost    float64
	retx                   int // consecutive timeouts
	undoCwnd               float64
	undoSlow, undoDecrease bool
	undoValid              bool

	// Competition with flows that fill the buffer (loss-based TCP): the smallest sample of
	// the current round, how many rounds in a row did not see the queue drain, and whether
	// the controller gave up on delay for now.
	roundMin  int64
	prevMin   int64 // the smallest sample of the last complete round (0: none)
	undrained int
	compete   bool

	// The delay at which the path last dropped for congestion (0: none known), and when:
	// the buffer overflows there, so the target stays below it.
	ceiling, ceilingAt int64

	stats Stats
}

var _ Controller = (*Delay)(nil)

// NewDelay returns a Delay controller with configuration cfg, or an error wrapping
// ErrInvalidConfig that names the first invalid field.
func NewDelay(cfg DelayConfig) (*Delay, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	d := &Delay{window: newWindow(cfg.MSS, cfg.InitialCwnd, cfg.MinCwnd, cfg.InitialRTT), cfg: cfg, slow: true}
	d.fs = newTarget(&SwiftConfig{FSRange: cfg.FSRange, FSMinCwnd: cfg.FSMinCwnd, FSMaxCwnd: cfg.FSMaxCwnd})
	return d, nil
}

// Config returns the configuration d was created with.
func (d *Delay) Config() DelayConfig { return d.cfg }

// OnSent records bytes sent at now, for pacing and counters.
func (d *Delay) OnSent(now int64, bytes int) {
	if bytes <= 0 {
		return
	}
	d.stats.SentBytes += uint64(bytes)
	d.sent(now)
}

// OnAck applies one acknowledgement of acked bytes with fabric delay sample delay (ns; 0:
// no sample). Below the target the window grows: by acked in slow start, by AI packets
// per round trip after. Above it, slow start ends and the window is multiplied by
// max(1 - Beta*(delay-base)/delay, 1 - MaxMDF), at most once per round trip.
func (d *Delay) OnAck(now int64, acked int, delay int64) {
	if acked <= 0 {
		return
	}
	d.stats.AckedBytes += uint64(acked)
	d.retx = 0
	pkts := float64(acked) / d.mss
	d.round(now)
	d.roundAcked += pkts
	if delay <= 0 {
		return
	}
	delay = min(delay, MaxDelay)
	d.learn(now, delay)
	if d.compete {
		// Competing with buffer fillers: grow as a loss-based flow does (Reno's AI packets
		// per round trip), and leave the cuts to loss.
		if d.slow {
			d.cwnd += pkts
		} else {
			d.cwnd += d.cfg.AI * pkts / max(d.cwnd, 1)
		}
		d.cwnd = min(d.cwnd, d.cfg.MaxCwnd)
		return
	}
	t := d.targetDelay()
	x := float64(delay)
	switch {
	case x < t:
		// The path-scaled increase, in proportion to the headroom left below the target
		// (all of it with the queue empty), but never below AI: many flows growing by
		// the full amount together overshot a one-BDP buffer within a round trip.
		base := float64(d.baseDelay())
		ai := d.cfg.AI
		if scaled := d.cfg.AI * base / float64(d.cfg.AIScale); scaled > ai && t > base {
			ai = max(ai, scaled*min(max((t-x)/(t-base), 0.25), 1))
		}
		switch {
		case d.slow:
			d.cwnd += pkts
		case d.cwnd >= 1:
			d.cwnd += ai * pkts / d.cwnd
		default:
			d.cwnd += ai * pkts
		}
		d.cwnd = min(d.cwnd, d.cfg.MaxCwnd)
	case x > t:
		d.slow = false
		if d.canDecrease(now) {
			base := float64(d.baseDelay())
			var f float64
			if d.shortPath() && float64(d.prevMin) <= t {
				// Swift's cut, in proportion to the excess over the shared target, while
				// the last round's smallest delay was below it: on a path this short an
				// excess that comes and goes is mostly host jitter, which no drain removes
				// (draining it cost a third of the 64 KiB Write goodput on veth). A queue
				// that stood a whole round is drained.
				f = 1 - swiftBeta*(x-t)/x
			} else {
				f = (1 - d.cfg.Beta*(x-base)/x) * (1 - d.cfg.DrainMargin)
			}
			d.decrease(now, max(f, 1-d.cfg.MaxMDF), &d.stats.DelayDecreases)
		}
	}
}

// OnLoss applies one loss event of lost bytes. It is congestion, and the window is cut by
// MaxMDF at most once per round trip, when the latest delay sample is above the target or
// more than RandomLossMax of the packets of this round and the last were lost (a burst,
// whose delay also marks the buffer's ceiling); otherwise it is counted as random loss and
// the window is left alone. While competing every loss is congestion, cut by 0.3.
func (d *Delay) OnLoss(now int64, lost int) {
	d.stats.LossEvents++
	d.retx = 0
	d.round(now)
	if lost > 0 {
		d.stats.LostBytes += uint64(lost)
		d.roundLost += float64(lost) / d.mss
	}
	acked, gone := d.roundAcked+d.prevAcked, d.roundLost+d.prevLost
	if d.compete {
		// A loss-based flow's response (CUBIC's 0.7), once per round trip.
		d.slow = false
		if d.canDecrease(now) {
			d.decrease(now, competeBeta, &d.stats.LossDecreases)
		}
		return
	}
	burst := gone > d.cfg.RandomLossMax*(acked+gone)
	if !burst && !(d.have && float64(d.last) > d.targetDelay()) {
		d.stats.RandomLosses++
		return
	}
	d.slow = false
	if burst && d.have && d.last-d.baseDelay() > 2*d.cfg.QueueFloor {
		// A burst of loss with a queue standing: the bottleneck's buffer ends about here.
		d.ceiling, d.ceilingAt = d.last, now
	}
	if d.canDecrease(now) {
		d.decrease(now, 1-d.cfg.MaxMDF, &d.stats.LossDecreases)
	}
}

// OnTimeout applies one retransmission timeout: the window restarts from InitialCwnd (or
// stays below it) in slow start, which the delay ends where the path says; the
// RetxResetThreshold-th timeout in a row drops it to MinCwnd. The state before the first
// timeout of a run is kept for OnSpuriousTimeout.
func (d *Delay) OnTimeout(now int64) {
	d.stats.Timeouts++
	if d.retx == 0 {
		d.undoCwnd, d.undoSlow, d.undoDecrease, d.undoValid = d.cwnd, d.slow, d.decreased, true
	}
	d.retx = min(d.retx+1, d.cfg.RetxResetThreshold)
	prev := d.cwnd
	if d.retx >= d.cfg.RetxResetThreshold {
		d.stats.WindowResets++
		d.cwnd = d.cfg.MinCwnd
	} else {
		d.cwnd = min(d.cwnd, d.cfg.InitialCwnd)
		d.slow = true
	}
	if d.cwnd < prev {
		d.stats.RTODecreases++
	}
	d.decreased, d.lastDecrease = true, now
}

// OnSpuriousTimeout restores the window and slow-start state from before the run of
// timeouts that just proved spurious (the original transmission had arrived). Without a
// timeout to undo it only counts.
func (d *Delay) OnSpuriousTimeout(now int64) {
	d.stats.SpuriousTimeouts++
	if !d.undoValid {
		return
	}
	d.cwnd = max(d.cwnd, d.undoCwnd)
	d.slow, d.decreased = d.undoSlow, d.undoDecrease
	d.undoValid = false
	d.retx = 0
}

// Stats returns a snapshot of d.
func (d *Delay) Stats() Stats {
	st := d.stats
	d.fill(&st)
	st.TargetDelay = int64(d.targetDelay())
	st.BaseDelay = d.baseDelay()
	st.SlowStart = d.slow
	st.Competitive = d.compete
	return st
}

// round rolls the per-round loss accounting over once a smoothed round trip has passed.
func (d *Delay) round(now int64) {
	if now-d.roundStart < d.rtt() && now >= d.roundStart {
		return
	}
	d.prevAcked, d.prevLost = d.roundAcked, d.roundLost
	d.roundAcked, d.roundLost = 0, 0
	d.roundStart = now
	d.checkCompetition()
	if d.ceiling != 0 && now-d.ceilingAt > ceilingRounds*d.rtt() {
		d.ceiling = 0 // no burst for a while: the path may have changed
	}
}

// checkCompetition ends a round: a round whose smallest delay stayed above half the
// allowed queue (and above twice BaseTarget) did not see the queue drain. The delay cut
// drains it once per cycle when the flows sharing it are delay-based; when it has not
// drained for CompeteRounds rounds, somebody else keeps it full (a loss-based flow: its queue is not ours to empty, and
// yielding to it starves us, as Vegas starves against Reno), and the controller competes:
// it ignores delay, grows as a loss-based flow and cuts on loss, until a round sees the
// queue drain again (Copa's competitive mode, on the same evidence).
func (d *Delay) checkCompetition() {
	m := d.roundMin
	d.roundMin, d.prevMin = 0, m
	if m == 0 {
		return
	}
	base := float64(d.baseDelay())
	// Drained: below half the allowed queue, or at least within twice BaseTarget of the
	// base (a short path allows so little queue that many flows of ours seldom go below
	// half of it, while a buffer filler keeps milliseconds).
	if float64(m) <= base+max((d.targetDelay()-base)/2, 2*float64(d.cfg.BaseTarget)) {
		d.undrained = 0
		d.compete = false
		return
	}
	d.undrained++
	if d.undrained >= d.cfg.CompeteRounds && !d.compete {
		d.compete = true
		d.stats.CompetitiveEntries++
	}
}

// competeBeta is the window's cut on loss while competing: CUBIC's.
const competeBeta = 0.7

// ceilingRounds is how many round trips without a loss burst the buffer's ceiling is
// remembered.
const ceilingRounds = 100

// learn folds a valid sample (1..MaxDelay ns) into the smoothed delay, the windowed
// minimum and the round's minimum.
func (d *Delay) learn(now, delay int64) {
	d.sample(delay)
	d.learnMin(now, delay, d.cfg.BaseWindow)
	if d.roundMin == 0 || delay < d.roundMin {
		d.roundMin = delay
	}
}

// targetDelay is max(BaseTarget, base + max(QueueFloor, TargetRatio*base)) + flow
// scaling, in ns: on a short path the absolute target that every flow shares whatever it
// learned (Swift's), on a long one the learned base plus a queue in proportion; below the
// buffer's ceiling when one is known.
func (d *Delay) targetDelay() float64 {
	base := float64(d.baseDelay())
	t := max(float64(d.cfg.BaseTarget), d.pathTarget())
	if c := float64(d.ceiling); c > 0 {
		// Below the delay at which the buffer overflowed (a flow that learned a standing
		// queue as base would otherwise aim above what the buffer holds, never see its
		// delay above target, and keep the buffer full), but not below base + QueueFloor.
		t = min(t, max(c-(c-base)/8, base+float64(d.cfg.QueueFloor)))
	}
	return t + d.fs.at(max(d.cwnd, d.cfg.MinCwnd))
}

// pathTarget is the learned base plus the queue a path of its length may keep:
// base + max(QueueFloor, TargetRatio*base), in ns.
func (d *Delay) pathTarget() float64 {
	base := float64(d.baseDelay())
	return base + max(float64(d.cfg.QueueFloor), d.cfg.TargetRatio*base)
}

// shortPath reports whether the target is the absolute BaseTarget (the path's own
// allowance would fall below it).
func (d *Delay) shortPath() bool { return d.pathTarget() <= float64(d.cfg.BaseTarget) }

// swiftBeta is Swift's decrease factor, used on short paths.
const swiftBeta = 0.8
