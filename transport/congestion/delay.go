package congestion

// Delay is the engine's default congestion controller: delay-based, for paths whose
// unloaded round trip is anything from 10 µs to 10 ms (the package documentation has the
// algorithm and the reasons for its constants). It learns the path's unloaded round trip
// as the minimum delay sample, allows a queueing delay above it that grows with the path,
// starts in slow start, cuts on delay (draining the queue it sees on a long path, as Swift
// does on a short one), tells isolated loss from congestion by the delay, undoes the
// reaction to a timeout that proved spurious, and competes like a loss-based flow with
// flows that keep the buffer full. On paths of LongPath and more it paces, cuts only on a
// queue that stood a whole round trip, and competes as CUBIC (compete.go); on every path
// it keeps samples that a stale clock made short from lowering the base (screen).
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
	retx                   int     // consecutive timeouts
	ssthresh               float64 // packets: slow start ends here (0: only delay or loss end it)
	undoCwnd, undoSsthresh float64
	undoSlow, undoDecrease bool
	undoValid              bool
	undoCub                cubic

	// Competition with flows that fill the buffer (loss-based TCP): the smallest sample of
	// the current round, how many rounds in a row did not see the queue drain, and whether
	// the controller gave up on delay for now.
	roundMin  int64
	prevMin   int64 // the smallest sample of the last complete round (0: none)
	undrained int
	compete   bool

	// Competition on a long path (compete.go): which of the last 8 rounds had a standing
	// queue (bit 0 the latest), CUBIC's state, and the probe of whether the queue is our
	// own: rounds to the next one, rounds left in one (0: none), the window before it,
	// when it began and the smallest delay since of a packet sent after it.
	standHist         uint8
	cub               cubic
	probeIn, probing  int
	probeSave         float64
	probeAt, probeMin int64

	// The delay at which the path last dropped for congestion (0: none known), and when:
	// the buffer overflows there, so the target stays below it.
	ceiling, ceilingAt int64

	// A sample below the learned base, the smallest of the latest clock reading, held
	// until a later reading bounds its error (0: none); the latest reading seen and the
	// usual gap between readings (screen, reading).
	hold, holdAt    int64
	lastNow, gapAvg int64

	// The standing queue on a long path: since when every sample has been above the
	// target (0: the last one was not), and the smallest of them.
	aboveSince, aboveMin int64

	// Pacing on a long path: the earliest time the next packet may leave.
	paceAt int64
	// The bytes in flight as the calls tell (sent, less acknowledged and lost), and the
	// most of them in this round and the last (cwndLimited).
	inflight, roundFlight, prevFlight float64
	// About when the latest acknowledged packet with a sample left: now - delay.
	ackSent int64

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
	d.reading(now)
	d.stats.SentBytes += uint64(bytes)
	d.flight(float64(bytes))
	d.sent(now)
	if gap := d.paceGap(float64(bytes)); gap > 0 {
		d.paceAt = satAdd(max(d.paceAt, now-d.paceBurst()), gap)
	}
}

// NextSendTime returns when a packet of bytes may leave: now, unless the window is below
// one packet (then one packet per SmoothedDelay/cwnd) or the path is long enough to be
// paced (LongPath): there packets leave at PaceGain times the window per smoothed round
// trip, with bursts of up to paceBurst after a pause.
func (d *Delay) NextSendTime(now int64, bytes int) int64 {
	d.reading(now)
	t := d.window.NextSendTime(now, bytes)
	if bytes > 0 && d.paceGap(float64(bytes)) > 0 && d.paceAt > t {
		t = d.paceAt
	}
	return t
}

// paceGap is the time a packet of bytes takes at the pacing rate on a long path, in ns, or
// 0 when no pacing applies.
func (d *Delay) paceGap(bytes float64) int64 {
	if !d.longPath() || d.cwnd < 1 || d.compete {
		return 0
	}
	gain := d.cfg.PaceGain
	if d.slow {
		gain *= 2
	}
	gap := float64(d.srtt) * bytes / (d.cwnd * d.mss * gain)
	if !(gap < float64(maxPacingGap)) {
		return maxPacingGap
	}
	return int64(gap)
}

// paceBurst is how far the pacing clock may fall behind now, in ns: after a pause (the
// window was full, the application idle, the engine descheduled) that much may leave at
// once.
func (d *Delay) paceBurst() int64 { return min(d.srtt/16, paceBurstMax) }

// paceBurstMax bounds paceBurst: 90 packets of 1,400 bytes at 1 Gbit/s.
const paceBurstMax = 1_000_000

// OnAck applies one acknowledgement of acked bytes with fabric delay sample delay (ns; 0:
// no sample). Below the target the window grows: by acked in slow start (up to ssthresh
// after a timeout), by AI packets per round trip after. Above it, slow start ends and the
// window is multiplied by max(1 - Beta*(delay-base)/delay, 1 - MaxMDF), at most once per
// round trip; on a long path only once every sample of a smoothed round trip was above
// the target.
func (d *Delay) OnAck(now int64, acked int, delay int64) {
	if acked <= 0 {
		return
	}
	d.stats.AckedBytes += uint64(acked)
	d.retx = 0
	d.reading(now)
	pkts := float64(acked) / d.mss
	d.round(now)
	d.roundAcked += pkts
	d.flight(-float64(acked))
	if delay <= 0 {
		return
	}
	delay = min(delay, MaxDelay)
	d.learn(now, delay)
	d.ackSent = now - delay
	if d.compete && d.longPath() {
		d.competeAck(now, pkts, delay)
		return
	}
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
	long := d.longPath()
	if long {
		d.standing(now, delay, t)
	}
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
		case long && !d.cwndLimited():
			// The window is not what limits the flow (the application or the host is):
			// it does not grow, or it would grow without bound and then, once the host
			// catches up, leave as a burst that overflows the buffer (a 10 ms flow held
			// to 0.7 Gbit/s by its host grew to 2,451 packets, 1.4 times the BDP and
			// the buffer together, with the delay below the target; RFC 7661).
		case d.slow:
			d.cwnd += pkts
			if d.ssthresh > 0 && d.cwnd >= d.ssthresh {
				d.slow = false
			}
		case d.cwnd >= 1:
			d.cwnd += ai * pkts / d.cwnd
		default:
			d.cwnd += ai * pkts
		}
		d.cwnd = min(d.cwnd, d.cfg.MaxCwnd)
	case x > t && long:
		// On a long path a sample above the target is not yet a queue: the tail of a
		// burst queues behind its head for a moment (a window released at once by acks
		// that a descheduled host delivered together), and a loaded host late by a
		// millisecond or more delays a batch of acks. On the delay line's 10 ms bed the
		// cuts on such samples came every few round trips and held the window at 0.2 to
		// 0.6 MB against a 1.25 MB BDP. Such a sample ends slow start (whose bursts are
		// half the window) but cuts nothing; only a queue that stood for a whole smoothed
		// round trip, every sample above the target, is drained: the window is multiplied
		// by base/standing * (1 - DrainMargin), the smallest delay of that round trip
		// standing for the queue.
		d.slow = false
		if d.aboveSince != 0 && now-d.aboveSince >= d.srtt && d.canDecrease(now) {
			base, m := float64(d.baseDelay()), float64(d.aboveMin)
			f := (1 - d.cfg.Beta*(m-base)/m) * (1 - d.cfg.DrainMargin)
			d.decrease(now, max(f, 1-d.cfg.MaxMDF), &d.stats.DelayDecreases)
			d.aboveSince = 0
		}
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
// MaxMDF at most once per round trip, when the delay says a queue stands (queued) or
// more than RandomLossMax of the packets of this round and the last were lost (a burst,
// whose delay also marks the buffer's ceiling); otherwise it is counted as random loss and
// the window is left alone. While competing every loss is congestion, cut by 0.3. On a
// long path a loss that belongs to the event the last decrease answered (sameEvent) cuts
// nothing more.
func (d *Delay) OnLoss(now int64, lost int) {
	d.reading(now)
	d.stats.LossEvents++
	d.retx = 0
	d.round(now)
	if lost > 0 {
		d.stats.LostBytes += uint64(lost)
		d.roundLost += float64(lost) / d.mss
		d.flight(-float64(lost))
	}
	acked, gone := d.roundAcked+d.prevAcked, d.roundLost+d.prevLost
	if d.compete {
		// A loss-based flow's response (CUBIC's 0.7), once per round trip.
		d.slow = false
		if d.canDecrease(now) && !d.sameEvent() {
			if d.longPath() {
				d.endProbe()
				d.cub.reduce(now, d.cwnd) // its new epoch; the cut to 0.7 is decrease's
			}
			d.decrease(now, competeBeta, &d.stats.LossDecreases)
		}
		return
	}
	burst := gone > d.cfg.RandomLossMax*(acked+gone)
	if !burst && !d.queued(now) {
		d.stats.RandomLosses++
		return
	}
	d.slow = false
	if burst && d.have && d.last-d.baseDelay() > 2*d.cfg.QueueFloor {
		// A burst of loss with a queue standing: the bottleneck's buffer ends about here.
		d.ceiling, d.ceilingAt = d.last, now
	}
	if d.canDecrease(now) && !d.sameEvent() {
		d.decrease(now, 1-d.cfg.MaxMDF, &d.stats.LossDecreases)
	}
}

// flight adds delta bytes to what is in flight (never below 0) and keeps the round's most.
func (d *Delay) flight(delta float64) {
	d.inflight = max(d.inflight+delta, 0)
	d.roundFlight = max(d.roundFlight, d.inflight)
}

// cwndLimited reports whether the window limited the flow lately: at least half of it was
// in flight at some moment of this round or the last (RFC 7661's test, as Linux applies it
// in slow start).
func (d *Delay) cwndLimited() bool {
	return 2*max(d.roundFlight, d.prevFlight) >= d.cwnd*d.mss
}

// sameEvent reports whether a loss found now belongs to the congestion event the last
// decrease answered, on a long path: the latest acknowledged packet left before that
// decrease, so whatever was found lost, which left before it (RACK), did too. A burst of
// loss that a long path's recovery finds over several round trips is one event, as in
// TCP's recovery; cutting once per round trip for it cut a competing flow from 1,975 to
// 235 packets in 850 ms on the delay line's bed (one slow start's overshoot).
func (d *Delay) sameEvent() bool {
	return d.longPath() && d.decreased && d.ackSent < d.lastDecrease
}

// OnTimeout applies one retransmission timeout: the window restarts from InitialCwnd (or
// stays below it) in slow start, which the delay ends where the path says, or at latest
// half the window before the timeout (ssthresh; CUBIC's 0.7 while competing on a long
// path); the RetxResetThreshold-th timeout in a row drops it to MinCwnd, still in slow
// start. The state before the first timeout of a run is kept for OnSpuriousTimeout.
func (d *Delay) OnTimeout(now int64) {
	d.reading(now)
	d.stats.Timeouts++
	if d.retx == 0 {
		d.undoCwnd, d.undoSlow, d.undoDecrease, d.undoValid = d.cwnd, d.slow, d.decreased, true
		d.undoSsthresh, d.undoCub = d.ssthresh, d.cub
	}
	d.retx = min(d.retx+1, d.cfg.RetxResetThreshold)
	prev := d.cwnd
	if d.retx == 1 {
		// Slow start goes back to half the window (CUBIC's 0.7 while competing, where
		// the window then follows CUBIC from there), as TCP's ssthresh: without it a
		// competing flow, which slow starts to the next loss, overshot into more loss.
		d.ssthresh = max(prev/2, d.cfg.InitialCwnd)
		if d.compete {
			d.endProbe()
			prev = d.cwnd
			d.ssthresh = max(d.cub.reduce(now, prev), d.cfg.InitialCwnd)
		}
	}
	if d.retx >= d.cfg.RetxResetThreshold {
		d.stats.WindowResets++
		d.cwnd = d.cfg.MinCwnd
	} else {
		d.cwnd = min(d.cwnd, d.cfg.InitialCwnd)
	}
	d.slow = true
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
	d.ssthresh, d.cub = d.undoSsthresh, d.undoCub
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
	if gap := d.paceGap(d.mss); gap > 0 {
		st.PacingInterval = gap
	}
	return st
}

// round rolls the per-round loss accounting over once a smoothed round trip has passed.
func (d *Delay) round(now int64) {
	if now-d.roundStart < d.rtt() && now >= d.roundStart {
		return
	}
	d.prevAcked, d.prevLost = d.roundAcked, d.roundLost
	d.prevFlight, d.roundFlight = d.roundFlight, d.inflight
	d.roundAcked, d.roundLost = 0, 0
	d.roundStart = now
	d.checkCompetition(now)
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
func (d *Delay) checkCompetition(now int64) {
	m := d.roundMin
	d.roundMin, d.prevMin = 0, m
	if d.longPath() {
		d.competeLong(now, m)
		return
	}
	if m == 0 {
		return
	}
	if float64(m) <= d.drained() {
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

// learn folds a valid sample (1..MaxDelay ns) into the smoothed delay, the round's
// minimum and (screen) the windowed minimum.
func (d *Delay) learn(now, delay int64) {
	d.sample(delay)
	d.screen(now, delay)
	if d.roundMin == 0 || delay < d.roundMin {
		d.roundMin = delay
	}
}

// screen folds a sample taken at now into the path's base delay. A sample below the
// learned base may be wrong: the engine reads its clock once per poll, and when it is
// descheduled between reading it and taking in the acks, every sample of that poll is
// short by the stall (on the delay line's 10 ms bed, many times a second on the loaded
// machine: batches of samples of 2.5 to 9.9 ms; one of them made the base 4 ms, the
// target 5 ms, and the window a packet). The error is at most the time until the engine
// reads its clock again for this controller (the next call with a later now), so such a
// sample waits for that reading (reading) and is then taken at worst: sample + gap -
// tolerance, never below the true delay by more than the tolerance. The tolerance is
// lowMargin plus four times the usual gap between readings: a busy engine reads its clock
// for a flow every few microseconds, and a stall is a gap far longer than usual. A sample
// at or above the base, and the first sample, count as they are.
func (d *Delay) screen(now, delay int64) {
	base := d.baseDelay()
	if base == 0 || delay >= base {
		d.learnMin(now, delay, d.cfg.BaseWindow)
		return
	}
	switch {
	case d.hold == 0 || now > d.holdAt:
		d.hold, d.holdAt = delay, now
	case now == d.holdAt:
		d.hold = min(d.hold, delay)
	default:
		// A reading older than one already seen (another poller's stale clock): short by
		// at least the difference.
		d.hold = min(d.hold, min(delay+d.holdAt-now, MaxDelay))
	}
}

// reading takes note of a clock reading: it settles the sample screen held once now is
// later than its reading, and keeps the usual gap between successive readings.
func (d *Delay) reading(now int64) {
	if now <= d.lastNow && (d.hold == 0 || now <= d.holdAt) {
		return // the same reading again (every packet of a burst): nothing to settle or learn
	}
	m := lowMargin(d.baseDelay(), d.cfg.QueueFloor)
	if d.hold != 0 && now > d.holdAt {
		v, gap := d.hold, now-d.holdAt
		d.hold = 0
		if tol := m + 4*d.gapAvg; gap > tol {
			v = min(v+gap-tol, MaxDelay)
			d.stats.LowSamples++
		}
		d.learnMin(now, v, d.cfg.BaseWindow)
	}
	if now > d.lastNow {
		if d.lastNow != 0 {
			// An average of the gaps, each counted at most four times the average (or
			// lowMargin), so that stalls do not make themselves usual.
			gap := min(now-d.lastNow, max(4*d.gapAvg, m))
			d.gapAvg += (gap - d.gapAvg) / 8
		}
		d.lastNow = now
	}
}

// lowMargin is the least error screen tolerates in a sample below the base: a 64th of the
// base (150 µs of a 10 ms path), at least the least queue allowed.
func lowMargin(base, queueFloor int64) int64 { return max(base/64, queueFloor) }

// queued reports whether the delay says a queue stands at now: the latest sample is above
// the target, and on a long path it has been for a whole smoothed round trip or a delay
// cut just answered it (a moment above the target is the tail of a burst or a late host
// there, and loss with it is no more congestion than without).
func (d *Delay) queued(now int64) bool {
	if !d.have || float64(d.last) <= d.targetDelay() {
		return false
	}
	if !d.longPath() {
		return true
	}
	return (d.aboveSince != 0 && now-d.aboveSince >= d.srtt) || (d.decreased && now-d.lastDecrease < d.rtt())
}

// standing tracks the queue that stands on a long path: since when every sample has been
// above the target t, and the smallest of them. A sample of a packet sent before the last
// decrease (now - delay is about when it left) shows the queue the decrease is draining:
// it neither starts nor ends a run.
func (d *Delay) standing(now, delay int64, t float64) {
	switch {
	case d.decreased && now-delay < d.lastDecrease:
	case float64(delay) <= t:
		d.aboveSince = 0
	case d.aboveSince == 0:
		d.aboveSince, d.aboveMin = now, delay
	default:
		d.aboveMin = min(d.aboveMin, delay)
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
	q := max(float64(d.cfg.QueueFloor), d.cfg.TargetRatio*base)
	return base + q
}

// longPath reports whether the path is long enough for pacing and for cutting only on a
// queue that stood a whole round trip (LongPath).
func (d *Delay) longPath() bool {
	return d.cfg.LongPath > 0 && d.have && d.baseDelay() >= d.cfg.LongPath
}

// shortPath reports whether the target is the absolute BaseTarget (the path's own
// allowance would fall below it).
func (d *Delay) shortPath() bool { return d.pathTarget() <= float64(d.cfg.BaseTarget) }

// swiftBeta is Swift's decrease factor, used on short paths.
const swiftBeta = 0.8
