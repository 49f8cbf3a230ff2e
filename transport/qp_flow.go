package transport

import (
	"github.com/xdpndk/xdpndk/transport/ack"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// The QP as coordinator: each engine round it runs its parts in order (poll), hands them
// what arrived (input, onAck), decides what leaves (transmit), and fails or flushes them
// together. The decisions are the parts': the sender's and the receiver's for
// reliability, the requester's and the responder's for the work.

// newQP makes a QP of engine e and wires its parts. cfg is complete (NewQP's defaults: its
// RetryTimeout and RNRTimeout are set, its KeepAlive is set or negative).
func newQP(e *Engine, cfg QPConfig) *QP {
	q := &QP{e: e, cfg: cfg, sink: cfg.Sink, connIndex: -1, maxORD: cfg.ORD, srq: cfg.SRQ}
	q.sendQ = newSPSC[WorkRequest](cfg.SendDepth)
	if q.srq != nil {
		q.recvQ = newSPSC[Receive](1) // never posted to: receives come from the SRQ
	} else {
		q.recvQ = newSPSC[Receive](cfg.RecvDepth)
	}
	c := &e.cfg
	q.conn = conn{tx: &e.tx, rcv: &q.rcv, ctr: &q.ctr, zeroCopy: c.ZeroCopyTx,
		srcPort: uint16(49152 + randUint64()%16384)}
	q.snd = newSender(senderConfig{retryTimeout: int64(cfg.RetryTimeout), rnrTimeout: int64(cfg.RNRTimeout),
		rnrDelay: int64(c.RNRDelay), window: c.Window, goBackN: c.GoBackN, ackDelay: int64(c.AckDelay)}, c.RTO, &q.req, &q.ctr)
	q.rcv = newReceiver(receiverConfig{ackEvery: c.AckEvery, ackDelay: int64(c.AckDelay),
		rnrDelay: int64(c.RNRDelay), goBackN: c.GoBackN, advertise: q.srq == nil}, &q.resp, &q.ctr)
	q.req = newRequester(q.sendQ.capacity(), q, &q.snd, &q.conn, q.sendQ, int64(c.CreditTimeout))
	rd := ceilPow2(cfg.RecvDepth) // the receive ring's bound: RecvDepth rounded up, as recvQ
	rn := min(rd, initialRing)    // it grows as receives are posted (ring.go)
	q.resp = responder{h: q, rcv: &q.rcv, snd: &q.snd, out: &q.conn, recvQ: q.recvQ, srq: q.srq,
		res: c.Resolver, pd: cfg.PD, recvs: make([]recvState, rn), mask: uint32(rn - 1), recvCap: uint32(rd),
		// Up to twice IRD job slots, made as the peer's Reads need them: a read whose
		// responses were all sent stops counting against IRD but keeps its slot until they
		// are acknowledged (they may need retransmission).
		maxJobs: 2 * cfg.IRD}
	return q
}

// poll does one round of the QP's work.
func (q *QP) poll(now int64) (next int64, busy bool) {
	if q.flushReq.Load() {
		q.flushReq.Store(false)
		q.flush(now, StatusCancelled, -1, ErrFlushed)
		busy = true
	}
	busy = q.resp.takeReceives(q.flushed()) || busy
	switch q.State() {
	case QPError, QPDisconnected:
		if q.held {
			// The peer disconnected: what is posted stays posted, and what is outstanding
			// stays outstanding, until the application flushes (NDKPI: a provider should
			// not flush when it indicates a disconnect that came from the peer).
			return 0, busy
		}
		busy = q.req.cancelPosts() || busy
		if q.rcv.NakPending() && q.conn.canTransmit() {
			q.conn.sendAck(now, 0)
		}
		return 0, busy
	}
	busy = q.req.takeSends() || busy
	next, fired := q.snd.OnTimer(now)
	if t := q.req.creditDeadline(); t != 0 && (next == 0 || t < next) {
		next = t
	}
	busy = busy || fired
	if q.State() != QPConnected {
		return 0, true // a timer failed the QP: its completions were just delivered
	}
	t, probed, failed := q.keepAlive(now)
	if failed {
		return 0, true
	}
	if t != 0 && (next == 0 || t < next) {
		next = t
	}
	busy = busy || probed
	if q.transmit(now, &next) {
		busy = true
	}
	due, d := q.rcv.AckDue(now, q.e.round)
	if due && q.conn.canTransmit() {
		q.conn.sendAck(now, 0)
		d = 0
	}
	if d > 0 && (next == 0 || d < next) {
		next = d
	}
	return next, busy
}

// flushed reports whether the QP failed or was flushed, so that what is posted to it
// completes cancelled (a QP its peer disconnected keeps it posted until the application
// flushes).
func (q *QP) flushed() bool {
	st := q.State()
	return (st == QPError || st == QPDisconnected) && !q.held
}

// transmit sends what is due, in order: retransmissions (what was lost, then an RNR
// retry), read responses, new packets of work requests; new packets only while the sender
// lets them leave (window and pacing; when pacing holds them, next learns when).
func (q *QP) transmit(now int64, next *int64) bool {
	sent := false
	retx := q.snd.Retransmissions(now)
	done := 0
	for done < len(retx) && q.conn.canTransmit() && q.snd.CanResend(now, done) {
		info := retx[done]
		done++
		var ok bool // false: what it carried is gone
		if job, idx, off := splitTag(info.Tag); job {
			ok = q.resp.resend(now, idx, info.PSN, off)
		} else {
			ok = q.req.resend(now, idx, info.PSN, off)
		}
		if ok {
			q.snd.OnRetransmitted(now, info)
			sent = true
		}
	}
	q.snd.ConsumeRetransmissions(done)
	for q.conn.canTransmit() {
		// A read response is counted as a full packet (the jobs are not scanned for it); a
		// work request's by what is left of it, so that small messages are not held back
		// for room a full packet would need.
		size := q.conn.mss
		if !q.resp.answering() {
			size = q.req.nextPayload()
		}
		ok, at := q.snd.CanSend(now, size)
		if !ok {
			if at != 0 && (*next == 0 || at < *next) {
				*next = at
			}
			break
		}
		if q.resp.sendNew(now) || q.req.sendNew(now) {
			sent = true
			continue
		}
		break
	}
	if sent {
		q.snd.ArmTimer(now)
	}
	return sent
}

// input handles a data packet or an acknowledgement that matched this QP.
func (q *QP) input(now int64, p *wire.Packet) {
	switch q.State() {
	case QPConnecting:
		// A packet with the right cookie means the peer got our reply: an implicit
		// ready-to-use.
		if !q.e.cm.established(now, q) {
			return
		}
	case QPError, QPDisconnected:
		if p.Opcode != wire.OpAck || p.Flags&wire.FlagAckReq != 0 {
			// The peer keeps retransmitting, or probes whether we are there: tell it
			// (again) that this QP failed.
			q.rcv.NakFailed(p.PSN)
		}
		return
	}
	q.ka.onHeard(now) // data, acks, probes and NAKs alike: the peer is alive
	if p.Opcode == wire.OpAck {
		if p.Flags&wire.FlagAckReq != 0 {
			q.rcv.OnProbe() // a Read probe: answer it
		}
		q.onAck(now, p)
		return
	}
	if p.Flags&wire.FlagAck != 0 {
		// A piggybacked acknowledgement of our stream (always positive): take it first, as
		// if it had come on its own just before this packet.
		q.onAck(now, p)
		if q.State() != QPConnected {
			return
		}
	}
	switch q.rcv.Arrive(p.PSN) {
	case ack.Duplicate:
		q.ctr.dupRecv.Add(1)
		return
	case ack.TooOld, ack.TooNew:
		// No sender that respects the window sends these: stale or forged. Not answered.
		q.e.ctr.outOfWindow.Add(1)
		return
	}
	var ok bool
	if p.Opcode == wire.OpReadResponse {
		ok = q.req.onReadResponse(now, p)
	} else {
		ok = q.resp.accept(now, p)
	}
	if !ok {
		return
	}
	q.rcv.OnReceived(now, q.e.round, p.PSN, p.TS, p.Flags&wire.FlagAckReq != 0)
	// A receive completes only once every earlier packet of the peer arrived: a receive
	// completion promises that what the peer posted before that Send (Writes) has landed.
	q.resp.completeReceives(q.rcv.Cumulative())
	n := p.PayloadLen()
	q.ctr.rxPackets.Add(1)
	q.ctr.rxBytes.Add(uint64(n))
}

// onAck processes an acknowledgement of our stream (and, for a NAK, what failed).
func (q *QP) onAck(now int64, p *wire.Packet) {
	a := &p.Ack
	q.req.onCredits(a.Credits)
	acked := q.snd.OnAck(now, a)
	for i := range acked {
		if job, idx, _ := splitTag(acked[i].Tag); job {
			q.resp.onAcked(idx)
		} else {
			q.req.onAcked(idx)
		}
	}
	if q.req.reads > 0 {
		q.snd.PeerHeard(now, true) // any acknowledgement: the peer is there (and may owe responses)
	}
	if a.Syndrome != wire.SynAck {
		// What the NAK's ack part acknowledged completed before the failure it reports.
		q.req.completeSends()
		if q.snd.OnNak(now, a) {
			return
		}
	}
	q.snd.DetectLoss(now, a)
	q.req.completeSends()
	q.snd.publishStats()
}

// abort fails a QP the engine may not be polling (for cause), and starts polling it so
// that what is posted to it completes cancelled. Engine goroutine.
func (q *QP) abort(now int64, cause error) {
	q.resp.takeReceives(q.flushed())
	q.flush(now, StatusCancelled, -1, cause)
	q.e.activate(q)
}

// fail ends the connection because of a failure (a timeout, a NAK, an access the peer may
// not make, a request that failed a local check): the QP is flushed as flush does, and the
// disconnect event (QPConfig.OnDisconnect) fires once, since the connection is aborted
// (NDKPI NdkDisconnectEventCallback: "when the peer disconnects or the connection aborts").
// A QP already flushed stays as it is. cause is what Cause reports. It is the parts'
// qpHooks.fail.
func (q *QP) fail(now int64, st Status, failSeq int64, cause error) {
	if q.flush(now, st, failSeq, cause) {
		q.indicateDisconnect()
	}
}

// flush puts the QP in the error state: the work request with sequence number failSeq (if
// any, and still outstanding; for StatusTimeout, a budget that ran out, the oldest
// outstanding one: requester.abandon) completes with st, every other outstanding request
// and receive
// with StatusCancelled, in posting order. Retransmission stops. A QP its peer disconnected
// stays disconnected (flush is then the application's Flush, Disconnect or Close of what the
// peer's disconnect left posted). It reports false, and does nothing, when the QP was
// flushed already. The application's own Flush, Disconnect and Close call it directly: they
// fire no disconnect event. cause is recorded for Cause unless one is already (a QP the peer
// disconnected keeps ErrPeerDisconnected).
func (q *QP) flush(now int64, st Status, failSeq int64, cause error) bool {
	switch q.State() {
	case QPError:
		return false
	case QPDisconnected:
		if !q.held {
			return false
		}
		q.held = false
	default:
		q.setCause(cause)
		q.state.Store(uint32(QPError))
	}
	q.req.abandon(st, failSeq)
	q.snd.reset()
	q.resp.abandon()
	q.snd.publishStats()
	_ = now
	return true
}

// indicateDisconnect fires the disconnect event of a connection that ended other than by the
// application's own Flush, Disconnect or Close: once per QP. Engine goroutine.
func (q *QP) indicateDisconnect() {
	if q.indicated {
		return
	}
	q.indicated = true
	if q.cfg.OnDisconnect != nil {
		q.cfg.OnDisconnect(q)
	}
}
