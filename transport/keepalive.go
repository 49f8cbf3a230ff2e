package transport

import (
	"time"

	"github.com/xdpndk/xdpndk/transport/wire"
)

// keepAlive watches whether a connected QP's peer is alive when nothing else would notice
// (no request of ours outstanding: the retransmission timer is not armed). Every packet the
// QP accepts from its peer counts as heard. After a third of the keepalive period of
// silence the QP sends a probe, an Ack with FlagAckReq, which a live peer answers at once
// (the same probe a Read whose response stopped arriving sends); unanswered, it is repeated
// at intervals that double from answer/8 up to answer (answer = min(1 s, period/3)). After
// the whole period of silence the QP fails (StatusTimeout, Cause ErrKeepAlive,
// OnDisconnect).
//
// A connection with traffic both ways never probes: each side hears the other. On an idle
// one, whichever side's third runs out first probes, the answer resets both: about three
// probes and three answers per period.
//
// Our own stalls do not count as the peer's silence: the QP fails only once a probe has
// gone unanswered for the answer time, and a deadline that the engine reaches late (it was
// not polled, the process was stopped) first sends a probe and waits the answer time
// again. Time is an argument; no method allocates. Engine goroutine only.
type keepAlive struct {
	period  int64 // ns; 0: disabled
	heard   int64 // when the peer was last heard from
	since   int64 // when the first probe since then went; 0: none yet
	probeAt int64 // when the latest probe went
	n       int   // probes since heard
}

// kaAction is what the keepalive asks of its QP at a given time.
type kaAction uint8

const (
	kaNone    kaAction = iota
	kaProbe            // send a probe (probed records it)
	kaRestart          // the failure deadline was reached late: send a probe and wait the answer time again
	kaFail             // the peer stayed silent: fail the QP
)

// start begins watching at now with period (<= 0: disabled): the peer counts as heard.
func (k *keepAlive) start(now int64, period time.Duration) {
	*k = keepAlive{period: max(int64(period), 0), heard: now}
}

// onHeard records that a packet of the peer arrived at now. It is called per packet: two
// stores.
func (k *keepAlive) onHeard(now int64) { k.heard, k.since = now, 0 }

// answer is how long a probe waits for its answer before the QP may fail:
// min(1 s, period/3).
func (k *keepAlive) answer() int64 { return min(int64(time.Second), k.period/3) }

// interval is the wait after the latest probe before the next: answer/8 (at least 1 µs),
// doubling with each probe, up to answer.
func (k *keepAlive) interval() int64 {
	a := k.answer()
	d := max(a/8, int64(time.Microsecond))
	for i := 1; i < k.n && d < a; i++ {
		d *= 2
	}
	return max(min(d, a), int64(time.Microsecond))
}

// failAt is when the QP fails if nothing is heard: the end of the period, but at least the
// answer time after the first probe (a probe that went late, after a stall, still gets its
// answer time). Valid once a probe went (since != 0).
func (k *keepAlive) failAt() int64 { return max(k.heard+k.period, k.since+k.answer()) }

// due says what is to be done at now. Any of its deadlines reached late (firedLate: the
// engine did not run) restarts the answer time with a new probe, unless the peer has been
// silent for two periods: an engine that keeps running late still gives up on a dead peer.
func (k *keepAlive) due(now int64) kaAction {
	if k.period == 0 {
		return kaNone
	}
	if k.since == 0 {
		if now >= k.heard+k.period/3 {
			return kaProbe // the first probe: the answer time starts with it
		}
		return kaNone
	}
	f := k.failAt()
	at := min(f, k.probeAt+k.interval())
	switch {
	case now < at:
		return kaNone
	case firedLate(now, at) && now < k.heard+2*k.period:
		return kaRestart // the peer may have come back while no probe went
	case now >= f:
		return kaFail
	}
	return kaProbe
}

// probed records a probe sent at now (restart: after kaRestart, the answer time starts
// again).
func (k *keepAlive) probed(now int64, restart bool) {
	if k.since == 0 || restart {
		k.since, k.n = now, 0
	}
	k.n++
	k.probeAt = now
}

// deadline is when due next has something to do; 0 when disabled.
func (k *keepAlive) deadline() int64 {
	if k.period == 0 {
		return 0
	}
	if k.since == 0 {
		return k.heard + k.period/3
	}
	return min(k.probeAt+k.interval(), k.failAt())
}

// keepAlive runs the QP's keepalive at now: it sends a probe when one is due, or fails the
// QP (reporting true) when the peer stayed silent. It returns the keepalive's next deadline.
func (q *QP) keepAlive(now int64) (next int64, probed, failed bool) {
	k := &q.ka
	switch a := k.due(now); a {
	case kaProbe, kaRestart:
		if q.conn.canTransmit() { // else the next round tries again
			q.sendAck(now, wire.FlagAckReq)
			k.probed(now, a == kaRestart)
			q.ctr.keepAlives.Add(1)
			probed = true
		}
	case kaFail:
		q.fail(failure{StatusTimeout, -1, keepAliveError(k.period)})
		return 0, false, true
	}
	return k.deadline(), probed, false
}
