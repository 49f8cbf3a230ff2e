package transport

import (
	"time"

	"github.com/xdpndk/xdpndk/transport/ack"
	"github.com/xdpndk/xdpndk/transport/congestion"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// sender is the reliability handler of the QP's own stream of PSNs, the sending half of a
// connection: what is in flight (ack.SentHistory), the retransmission timer (ack.RTO), the
// congestion controller, the packets queued for retransmission, the RNR wait and the Read
// probe. It is the one place where the window, pacing, loss and timeout decisions meet;
// the requester and the responder only ask it whether a packet may leave (CanSend) and
// tell it what left (OnSent, OnRetransmitted).
//
// Time is always an argument (now): the sender reads no clock, so a test drives it event
// by event. It calls nothing outside itself: every packet it records carries its owner (a
// value: which work request or read job, and where in it), and what it decides that only
// the QP can carry out (fail the connection, send a Read probe) it returns; the QP acts
// once the sender's method has returned. Engine goroutine only.
type sender struct {
	cfg senderConfig
	ctr *qpCounters

	sent  *ack.SentHistory[owner] // nil until the QP connects
	rto   *ack.RTO
	cc    congestion.Controller
	rtoAt int64 // when the retransmission timer fires; 0 when not armed
	// Read probes (probeRead) since the peer was last heard from: when the first went (the
	// budget's start) and the latest; 0 when none went
	probeSince int64
	probeAt    int64
	rnrAt      int64    // when the RNR-NAKed packet may be retried; 0 when none waits
	rnrPSN     wire.PSN // the RNR-NAKed packet
	rnrSet     bool     // rnrPSN names a packet (it may have been acknowledged since)
	rnrHeard   int64    // when its latest RNR NAK arrived: its retransmission budget starts again there
	rnrSince   int64    // when its request's first RNR NAK arrived: the RNR budget's start
	// the work request whose Send the peer refused last (RNR NAKs count per request: the
	// budget runs from its first), how often, since when
	rnrReq   owner
	rnrCount int
	rnrFirst int64
	gbnUntil wire.PSN // go-back-N: the episode in progress ends when the cumulative ack passes it
	gbnOn    bool
	scratch  []ack.PacketInfo[owner] // what the latest OnAck acknowledged
	retx     retxQueue               // packets waiting to be sent again
	tlp      tailProbe               // the tail loss probe's timer
	rtoRun   timeoutRun              // the run of timeouts in progress, for spurious-timeout undo
}

// senderConfig is what a sender takes of the engine's Config (and of its QPConfig).
type senderConfig struct {
	retryTimeout int64 // RetryTimeout, ns: how long a packet may stay unacknowledged
	rnrTimeout   int64 // RNRTimeout, ns: how long a request may be refused with RNR NAKs
	rnrDelay     int64 // Config.RNRDelay, ns
	window       int   // Config.Window: packets in flight at most
	goBackN      bool  // Config.GoBackN
	ackDelay     int64 // Config.AckDelay, ns: how long the peer may hold an acknowledgement
}

// maxRNRDelay caps the wait before retrying a packet refused with an RNR NAK (the NAK's
// Value, backed off over the request's retries): InfiniBand's largest RNR NAK timer,
// 655.36 ms. A peer cannot park a request for longer per retry.
const maxRNRDelay = 655360 * time.Microsecond

// lateTimer is how far past its deadline a timer must run for the engine to count itself
// as having been stalled (descheduled, not polled, a stopped process): a budget that ran
// out meanwhile then does not fail the QP at once; the peer is first sent a retransmission
// or a probe and given a timeout to answer it. Ordinary timer slack is far below it.
const lateTimer = int64(100 * time.Millisecond)

// firedLate reports whether a timer due at at ran late at now (lateTimer).
func firedLate(now, at int64) bool { return now-at > lateTimer }

// initialBuffers is the capacity the sender's packet lists start with (at most the window):
// a QP that never has more in flight never allocates more; they grow by append.
const initialBuffers = 16

// newSender returns a sender that is not yet connected; its buffers start at
// min(initialBuffers, cfg.window) packets.
func newSender(cfg senderConfig, rto ack.RTOConfig, ctr *qpCounters) sender {
	n := min(initialBuffers, cfg.window)
	return sender{
		cfg: cfg, ctr: ctr, rto: ack.NewRTO(rto),
		scratch: make([]ack.PacketInfo[owner], 0, n),
		retx:    retxQueue{list: make([]ack.PacketInfo[owner], 0, n)},
	}
}

// connect starts the stream at its initial PSN, paced by cc.
func (s *sender) connect(initial wire.PSN, cc congestion.Controller) {
	s.sent = ack.NewSentHistory[owner](initial, s.cfg.window)
	s.cc = cc
}

// seedRTO gives the retransmission timer a round trip measured before any sample (the
// connection handshake, ns): ack.RTO.Seed.
func (s *sender) seedRTO(rtt int64) {
	s.rto.Seed(rtt)
	s.publishStats()
}

// NextPSN is the PSN the next new packet takes.
func (s *sender) NextPSN() wire.PSN { return s.sent.NextPSN() }

// CanSend reports whether a new packet of size payload bytes may leave now: fewer than
// Config.Window packets are in flight, the congestion window has room for its payload (or
// nothing is in flight), and pacing allows it. When pacing holds it back, at is when it
// may leave.
func (s *sender) CanSend(now int64, size int) (ok bool, at int64) {
	npk, _ := s.sent.InFlight()
	if npk >= s.cfg.window {
		return false, 0
	}
	if pipe := pipe(s.sent); pipe > 0 && pipe+size > s.cc.Window() {
		return false, 0
	}
	if t := s.cc.NextSendTime(now, size); t > now {
		return false, t
	}
	return true, 0
}

// pipe is the payload bytes in the network (RFC 6675): in flight, less what was found
// lost and not yet sent again.
func pipe(h *ack.SentHistory[owner]) int {
	_, bytes := h.InFlight()
	_, lost := h.Lost()
	return bytes - lost
}

// CanResend reports whether a retransmission may leave now: retransmissions are under the
// same window as new data (the pipe below the congestion window, or nothing in the pipe)
// and the same pacing. A tail probe and the packet an RNR wait or a timeout sends again
// are one packet each and go regardless (forced).
//
// i is the entry's index in what Retransmissions returned.
func (s *sender) CanResend(now int64, i int) bool {
	if s.retx.isForced(i) {
		return true
	}
	if pipe := pipe(s.sent); pipe > 0 && pipe >= s.cc.Window() {
		return false
	}
	return s.cc.NextSendTime(now, 1) <= now
}

// OnSent records a new packet of bytes payload, carrying o, leaving at now: it takes the
// next PSN, which it returns. It reports false, recording nothing, when the history is
// full.
func (s *sender) OnSent(now int64, bytes int, o owner) (wire.PSN, bool) {
	psn := s.sent.NextPSN()
	if !s.sent.Sent(psn, o, bytes, now) {
		return psn, false
	}
	s.cc.OnSent(now, bytes)
	return psn, true
}

// Retransmissions returns the packets due for retransmission at now, in the order they
// should go: those found lost, then the RNR-refused one once its wait is over. The caller
// resends a prefix of them (OnRetransmitted for each that went) and drops that prefix with
// ConsumeRetransmissions.
func (s *sender) Retransmissions(now int64) []ack.PacketInfo[owner] {
	if s.rnrAt != 0 && now >= s.rnrAt {
		if info, ok := s.sent.Lookup(s.rnrPSN); ok {
			s.retx.pushForced(info)
			s.ctr.rnrRetransmits.Add(1)
		}
		s.rnrAt = 0
	}
	return s.retx.list
}

// ConsumeRetransmissions drops the first n packets Retransmissions returned.
func (s *sender) ConsumeRetransmissions(n int) { s.retx.consume(n) }

// OnRetransmitted records that info's packet left again at now.
func (s *sender) OnRetransmitted(now int64, info ack.PacketInfo[owner]) {
	s.sent.OnRetransmitted(info.PSN, now)
	s.cc.OnSent(now, info.Bytes)
	s.ctr.retransmits.Add(1)
}

// ArmTimer starts the retransmission timer at now unless it runs: something left.
func (s *sender) ArmTimer(now int64) {
	if s.rtoAt == 0 {
		s.rtoAt = now + s.rto.Timeout()
	}
	if s.tlp.at == 0 {
		s.armProbe(now)
	}
}

// armProbe arms the tail loss probe (tailProbe.arm) for what is in flight now.
func (s *sender) armProbe(now int64) {
	npk, _ := s.sent.InFlight()
	s.tlp.arm(now, s.rto.SRTT(), s.cfg.ackDelay, s.rtoAt, npk > 0 && !s.cfg.goBackN)
}

// OnAck takes the positive part of acknowledgement a at now: it releases what a
// acknowledges (cumulatively or selectively), samples the round trip, feeds the congestion
// controller and restarts (or, with nothing left in flight, stops) the retransmission
// timer. It returns the packets newly acknowledged, valid until the next call.
func (s *sender) OnAck(now int64, a *wire.AckExt) []ack.PacketInfo[owner] {
	s.sent.SetEcho(a.EchoTS)
	acked, rtt := s.sent.OnAckBlocks(a.AckPSN, a.SACK, a.HighPSN, a.HighSACK, now, s.scratch[:0])
	s.scratch = acked // keeps what it grew to
	if len(acked) == 0 {
		return acked
	}
	bytes := 0
	for i := range acked {
		bytes += acked[i].Bytes
	}
	s.rto.ResetBackoff()
	s.rto.Age(now)
	// The RTT sample comes from the timestamp echo, as TCP timestamps do (RFC 7323): EchoTS
	// is the send time of the packet that triggered this ack, whichever transmission of it
	// that was, and Delay how long the receiver held it. A sample from the history's send
	// times would be wrong after a lost ack: the ack that finally arrives also covers
	// packets sent an RTO earlier and never resent.
	if d := echoDelay(now, a); d > 0 {
		rtt = d
	} else if rtt > 0 {
		rtt = max(rtt-int64(a.Delay)*1000, 1)
	}
	if rtt > 0 {
		s.rto.Sample(rtt)
	}
	if first := s.rtoRun.first; s.rtoRun.on && s.rtoRun.ended(s.sent, a) {
		s.ctr.spuriousRTOs.Add(1)
		s.cc.OnSpuriousTimeout(now)
		s.rto.Spurious(now, now-first) // the original's answer came that long after the timer fired
	}
	if s.tlp.needless(s.sent, a) {
		s.ctr.needlessProbes.Add(1)
	}
	s.cc.OnAck(now, bytes, rtt)
	if npk, _ := s.sent.InFlight(); npk > 0 {
		s.rtoAt = now + s.rto.Timeout()
	} else {
		s.rtoAt = 0
	}
	s.tlp.count = 0
	s.armProbe(now)
	return acked
}

// echoDelay returns the round trip an ack's timestamp echo measures, without the receiver's
// holding time, in ns; 0 when the ack carries no usable echo. Timestamps are microseconds
// that wrap every 71 minutes; a round trip beyond 10 s is not believed.
func echoDelay(now int64, a *wire.AckExt) int64 {
	if a.EchoTS == 0 {
		return 0
	}
	us := int64(uint32(now/1000)-a.EchoTS) - int64(a.Delay)
	if us < 0 || us > 10_000_000 {
		return 0
	}
	return max(us*1000, 1000)
}

// PeerHeard notes at now that the peer is alive for the Read probe (an acknowledgement,
// or response bytes): the probes start over, and while Reads are outstanding (reads) with
// nothing in flight the timer watches them from now on.
func (s *sender) PeerHeard(now int64, reads bool) {
	s.probeSince, s.probeAt = 0, 0
	if npk, _ := s.sent.InFlight(); npk == 0 && reads {
		s.rtoAt = now + s.rto.Timeout()
	}
}

// OnNak handles the negative part of acknowledgement a (a.Syndrome is not SynAck) at now:
// NakSeq changes nothing (the SACK bitmap says what is missing), NakRNR makes the named
// packet wait (or, past the RNR budget, fails its request), every other syndrome fails the
// connection. It returns the failure, if the connection fails; the QP acts on it.
func (s *sender) OnNak(now int64, a *wire.AckExt) failure {
	s.ctr.naksRecv.Add(1)
	s.ctr.naksRecvBy[int(a.Syndrome)%nakKinds].Add(1)
	info, ok := s.sent.Lookup(a.NakPSN)
	seq := int64(-1)
	if ok {
		seq = info.Owner.seq()
	}
	switch a.Syndrome {
	case wire.SynNakSeq:
		return failure{}
	case wire.SynNakRNR:
		s.ctr.rnrNaks.Add(1)
		if !ok {
			return failure{} // acknowledged since: a stale NAK
		}
		return s.waitRNR(now, a, info)
	case wire.SynNakAccess:
		return failure{StatusAccessViolation, seq, remoteNak(a.Syndrome)}
	case wire.SynNakInvalid:
		return failure{StatusDataError, seq, remoteNak(a.Syndrome)}
	}
	return failure{StatusRemoteError, seq, remoteNak(a.Syndrome)}
}

// waitRNR holds the packet info an RNR NAK refused until the delay the NAK names (or
// Config.RNRDelay), backed off over its request's refusals; once the request's first RNR
// NAK is the RNR budget old it fails the request instead. The last wait ends when the
// budget does, so that the retry sent then is the last the peer may refuse (if that retry
// gets no answer at all, the retransmission timer fails it: onRTO).
func (s *sender) waitRNR(now int64, a *wire.AckExt, info ack.PacketInfo[owner]) failure {
	if _, held := s.sent.Lookup(s.rnrPSN); s.rnrSet && held {
		if s.rnrPSN == a.NakPSN && s.rnrAt != 0 {
			return failure{} // already waiting out the delay for this packet: an early copy's NAK
		}
		if s.rnrPSN.Less(a.NakPSN) {
			// A later packet refused while an earlier one still is: its refusal follows from
			// the earlier one's (the receiver takes messages in order). It is resent once
			// the earlier one got through, and only then counts toward its request's RNR
			// budget.
			return failure{}
		}
	}
	d := s.cfg.rnrDelay
	if a.Value > 0 {
		d = int64(a.Value) * 16 * 1000
	}
	// Whatever the peer asks for (Value up to 1.05 s, backed off to a minute), the retry
	// waits at most maxRNRDelay, or the configured delay if that is longer.
	limit := max(int64(maxRNRDelay), s.cfg.rnrDelay)
	at := now + min(d, limit)
	s.rnrSince = 0
	if !info.Owner.job {
		// RNR NAKs count per work request (a read response consumes no receive: it is
		// never refused for want of one, and a NAK naming one counts toward nothing).
		n, since := s.countRNR(now, info.Owner)
		if now-since >= s.cfg.rnrTimeout {
			return failure{StatusTimeout, info.Owner.seq(), rnrTimeoutError(s.cfg.rnrTimeout)}
		}
		// Exponential backoff over the retries of one request, up to 64 times the delay,
		// and never past the end of the budget.
		at = min(now+min(d<<min(n-1, 6), limit), since+s.cfg.rnrTimeout)
		s.rnrSince = since
	}
	s.rnrPSN, s.rnrAt, s.rnrSet, s.rnrHeard = a.NakPSN, at, true, now
	// The retransmission timer waits too: the packet is known to be refused until then.
	s.rtoAt = max(s.rtoAt, s.rnrAt+s.rto.Timeout())
	return failure{}
}

// countRNR counts an RNR NAK arriving at now for work request o and returns how many its
// request has had and when the first of them arrived. The peer takes Sends in order and a
// refusal of a later one while an earlier one waits is ignored (waitRNR), so the refusals
// of one request come in a run: a NAK for another request starts a new count.
func (s *sender) countRNR(now int64, o owner) (n int, since int64) {
	if s.rnrCount == 0 || s.rnrReq.idx != o.idx {
		s.rnrReq, s.rnrCount, s.rnrFirst = o, 0, now
	}
	s.rnrCount++
	return s.rnrCount, s.rnrFirst
}

// DetectLoss finds at now the packets acknowledgement a shows missing and queues them for
// retransmission, telling the congestion controller of the loss (go-back-N: everything
// unacknowledged, once per loss episode).
func (s *sender) DetectLoss(now int64, a *wire.AckExt) {
	if s.cfg.goBackN {
		// Go back once per loss episode: resend everything unacknowledged, then ignore
		// further gap reports until the cumulative ack passes what was outstanding then.
		if s.gbnOn && !a.AckPSN.Less(s.gbnUntil) {
			s.gbnOn = false
		}
		if !s.gbnOn && (a.SACK != 0 || a.Syndrome == wire.SynNakSeq) {
			s.retx.setForced(s.sent.Unacked(s.retx.list[:0])) // go-back-N resends at once, as RoCE NICs do
			if len(s.retx.list) > 0 {
				s.ctr.lossRetransmits.Add(uint64(len(s.retx.list)))
				s.cc.OnLoss(now, lostBytes(s.retx.list))
				s.gbnOn, s.gbnUntil = true, s.sent.NextPSN()
			}
		}
		return
	}
	s.detectLost(now)
}

// detectLost queues what the history now finds lost and reports whether it found any.
func (s *sender) detectLost(now int64) bool {
	before := len(s.retx.list)
	s.retx.list = s.sent.DetectLost(now, s.rto.SRTT()/4, s.retx.list)
	if len(s.retx.list) == before {
		return false
	}
	s.ctr.lossRetransmits.Add(uint64(len(s.retx.list) - before))
	s.cc.OnLoss(now, lostBytes(s.retx.list[before:]))
	return true
}

func lostBytes(l []ack.PacketInfo[owner]) int {
	b := 0
	for i := range l {
		b += l[i].Bytes
	}
	return b
}

// quiet reports whether the sender has nothing in flight, nothing to send again and no
// timer armed: nothing to do until new data leaves.
func (s *sender) quiet() bool {
	return s.sent != nil && s.sent.Len() == 0 && len(s.retx.list) == 0 && s.rtoAt == 0 && s.tlp.at == 0 && s.rnrAt == 0
}

// Deadline is when OnTimer next has something to do: the retransmission timer, the
// reordering (RACK) timer, the end of an RNR wait; 0 when none is armed.
func (s *sender) Deadline() int64 { return s.deadline(true) }

// deadline is Deadline, leaving the reordering timer out unless loss.
func (s *sender) deadline(loss bool) int64 {
	next := s.rtoAt
	if s.tlp.at != 0 && (next == 0 || s.tlp.at < next) {
		next = s.tlp.at
	}
	if t, ok := s.lossTime(); ok && loss && (next == 0 || t < next) {
		next = t
	}
	if s.rnrAt != 0 && (next == 0 || s.rnrAt < next) {
		next = s.rnrAt
	}
	return next
}

// lossTime is when packets that may be lost, but were not yet old enough when the last
// ack came, are declared lost (RFC 8985 §6.3); never in go-back-N mode.
func (s *sender) lossTime() (int64, bool) {
	if s.cfg.goBackN {
		return 0, false
	}
	return s.sent.LossTime()
}

// timerOutcome is what the sender's timers decided in one OnTimer call; the QP acts on it.
type timerOutcome struct {
	next  int64 // when OnTimer next has something to do (0: nothing armed)
	fired bool  // a timer fired: something was queued for (re)transmission or decided
	// reran: the reordering timer ran, and next leaves out its new time: the QP polls
	// again in the next round, which looks at it
	reran bool
	fail  failure // a budget ran out: the connection fails
	// readProbe: the retransmission timer, due at at, expired with nothing of ours in
	// flight; the QP asks ProbeRead what to do about the Read it awaits, if any
	readProbe bool
	at        int64
}

// OnTimer runs at now what is due: the tail loss probe, the retransmission timer
// (retransmit the oldest packet, back off; fail past the retransmission budget) and the
// reordering timer (declare lost what is old enough). The next deadline is Deadline,
// except that a reordering timer that ran now is looked at again only in the next call
// (reran: the QP asks the engine to poll it again in the next round).
func (s *sender) OnTimer(now int64) (out timerOutcome) {
	if s.tlp.at != 0 && now >= s.tlp.at && (s.rtoAt == 0 || now < s.rtoAt) {
		out.fired = s.probeTail(now)
	}
	if s.rtoAt != 0 && now >= s.rtoAt {
		out.fired = true
		if _, ok := s.sent.Oldest(); !ok {
			out.readProbe, out.at = true, s.rtoAt
			s.rtoAt = 0
		} else if out.fail = s.onRTO(now); out.fail.failed() {
			return out
		}
	}
	ran := false
	if t, ok := s.lossTime(); ok && now >= t {
		ran = true
		out.fired = s.detectLost(now) || out.fired
	}
	out.next, out.reran = s.deadline(!ran), ran
	return out
}

// probeTail sends the tail loss probe: the last packet sent goes again (RFC 8985 §7.3:
// with no new data to send, the highest-PSN packet), with the retransmission timer
// restarted behind it. It reports whether a probe was queued.
func (s *sender) probeTail(now int64) bool {
	s.tlp.at = 0
	info, ok := s.sent.Lookup(s.sent.NextPSN().Add(^uint32(0)))
	if !ok {
		return false // the last packet was acknowledged: loss detection sees the rest
	}
	s.tlp.probed(now, info.PSN)
	s.ctr.tailProbes.Add(1)
	s.retx.pushForced(info)
	s.rtoAt = now + s.rto.Timeout()
	s.armProbe(now)
	return true
}

// budgetSpent reports whether a budget of RetryTimeout that started at start gives up at
// now, on a timer due at at, whose last transmission (of the packet, or the probe) went at
// last: the budget has run out, that transmission was made after it ran out and went
// unanswered for a whole timeout, and the timer did not run late. A timer that runs late
// means this engine did not run for a while (it was descheduled, or not polled): the peer
// may have come back meanwhile, and never saw a transmission since; it gets one now, and
// a timeout to answer it, instead of a failure.
//
// The grace of a late timer is bounded: once the budget has run out twice over, the QP
// fails at the next unanswered transmission however late its timer, so that an engine that
// keeps running late (a host overloaded for good) still gives up on a dead peer.
func (s *sender) budgetSpent(now, at, start, last int64) bool {
	end := start + s.cfg.retryTimeout
	return now >= end && last >= end && (!firedLate(now, at) || now >= end+s.cfg.retryTimeout)
}

// rearm sets the retransmission timer after a timeout that did not give up: one
// (backed-off) timeout from now, but no later than the end of the budget that started at
// start, so that a transmission is made when the budget runs out and the failure follows
// one timeout after it.
func (s *sender) rearm(now, start int64) {
	s.rtoAt = now + s.rto.Timeout()
	if end := start + s.cfg.retryTimeout; now < end && end < s.rtoAt {
		s.rtoAt = end
	}
}

// onRTO handles an expired retransmission timer with packets in flight: the oldest
// unacknowledged packet goes again (or, in go-back-N mode, everything unacknowledged), with
// exponential backoff. Once the packet has been unacknowledged for RetryTimeout
// (budgetSpent) it returns the failure (StatusTimeout) instead.
func (s *sender) onRTO(now int64) failure {
	at := s.rtoAt
	oldest, _ := s.sent.Oldest()
	s.ctr.timeouts.Add(1)
	// The budget counts from the packet's first transmission: however quickly the backed
	// off timeouts from a microsecond RTO are spent, a peer whose host stalls for less than
	// RetryTimeout keeps its connection. An RNR NAK is an answer: a packet the peer refused
	// for want of a receive (RNRTimeout bounds that) starts its budget again at the NAK.
	start := oldest.FirstSentAt
	if s.rnrSet && s.rnrPSN == oldest.PSN {
		start = max(start, s.rnrHeard)
		// The RNR budget by the timer: the retry sent when it ran out got no answer at all
		// (its NAK was lost, say) for a timeout.
		if end := s.rnrSince + s.cfg.rnrTimeout; s.rnrSince != 0 && now >= end && oldest.SentAt >= end && !firedLate(now, at) {
			return failure{StatusTimeout, oldest.Owner.seq(), rnrTimeoutError(s.cfg.rnrTimeout)}
		}
	}
	if s.budgetSpent(now, at, start, oldest.SentAt) {
		return failure{StatusTimeout, oldest.Owner.seq(), retryTimeoutError(s.cfg.retryTimeout)}
	}
	s.cc.OnTimeout(now)
	s.rto.Backoff()
	if s.cfg.goBackN {
		s.retx.setForced(s.sent.Unacked(s.retx.list[:0]))
		s.gbnOn, s.gbnUntil = true, s.sent.NextPSN()
		s.ctr.rtoRetransmits.Add(uint64(len(s.retx.list)))
	} else {
		s.rtoRun.start(now, oldest.PSN)
		s.retx.pushForced(oldest)
		s.ctr.rtoRetransmits.Add(1)
	}
	s.tlp.at = 0
	s.rearm(now, start)
	return failure{}
}

// ProbeRead decides, for a retransmission timer that expired at now (due at at) with
// nothing of ours in flight, about the oldest Read whose request was acknowledged and
// whose response has not fully arrived (seq, its sequence number; -1: none). That
// response travels in the peer's stream, which the peer retransmits itself, and it has
// stopped arriving: the peer may be gone, and nothing else would notice. So the peer is
// probed (probe: the QP sends an Ack with FlagAckReq and calls ReadProbed), which a live
// peer answers with an acknowledgement (or, if its QP failed, a NAK); a silent one makes
// the Read fail with StatusTimeout (the failure returned) once the probes went unanswered
// for RetryTimeout, as an unanswered packet would.
func (s *sender) ProbeRead(now, at, seq int64) (f failure, probe bool) {
	if seq < 0 {
		return failure{}, false
	}
	s.ctr.timeouts.Add(1)
	if s.probeSince == 0 {
		s.probeSince = now
	}
	if s.probeAt != 0 && s.budgetSpent(now, at, s.probeSince, s.probeAt) {
		return failure{StatusTimeout, seq, retryTimeoutError(s.cfg.retryTimeout)}, false
	}
	s.rto.Backoff()
	s.rearm(now, s.probeSince)
	return failure{}, true // if the link takes nothing now, the next expiry probes
}

// ReadProbed records that the Read probe ProbeRead asked for left at now.
func (s *sender) ReadProbed(now int64) { s.probeAt = now }

// reset forgets everything in flight and every timer: the connection failed.
func (s *sender) reset() {
	s.retx.consume(len(s.retx.list))
	s.tlp, s.rtoRun = tailProbe{}, timeoutRun{}
	s.rtoAt, s.rnrAt, s.rnrSet, s.rnrHeard, s.rnrSince = 0, 0, false, 0, 0
	s.rnrCount = 0
	s.probeSince, s.probeAt = 0, 0
	if s.sent != nil { // nil on a QP that never connected
		s.sent.Reset()
	}
}

// publishStats makes the sender's estimates visible to QP.Stats.
func (s *sender) publishStats() {
	if s.sent == nil {
		return
	}
	s.ctr.srtt.Store(s.rto.SRTT())
	s.ctr.rttvar.Store(s.rto.RTTVar())
	s.ctr.rto.Store(s.rto.Timeout())
	s.ctr.cwnd.Store(int64(s.cc.Window()))
	_, b := s.sent.InFlight()
	s.ctr.inflight.Store(int64(b))
}
