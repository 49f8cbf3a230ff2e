package transport

import (
	"net/netip"

	"github.com/xdpndk/xdpndk/transport/ack"
	"github.com/xdpndk/xdpndk/transport/congestion"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// The QP as the one dispatcher of its parts: each engine round it runs them in order
// (poll), hands them what arrived (input, onAck), decides what leaves (transmit), and
// carries out what they decide (fail, deliver the completions they have ready). The parts
// never call it, and nothing is reset while one of their methods runs: a part's method
// returns first (a failure, a verdict, a timer outcome), then the QP acts.

// newQP makes a QP of engine e and wires its parts. cfg is complete (NewQP's defaults: its
// RetryTimeout and RNRTimeout are set, its KeepAlive is set or negative).
func newQP(e *Engine, cfg QPConfig) *QP {
	q := &QP{e: e, cfg: cfg, sink: cfg.Sink, connIndex: -1, maxORD: cfg.ORD, srq: cfg.SRQ}
	// One slot more than the requests outstanding: the record of the request whose
	// completion is being delivered is freed only once the sink returned, while the
	// poster, told of the completion, may already post the next (sendDone).
	q.sendQ = newSPSC[WorkRequest, *WorkRequest](cfg.SendDepth, 1)
	q.sendBound = uint64(ceilPow2(cfg.SendDepth))
	if q.srq != nil {
		q.recvQ = newSPSC[Receive, *Receive](1, 0) // never posted to: receives come from the SRQ
	} else {
		q.recvQ = newSPSC[Receive, *Receive](cfg.RecvDepth, 0)
	}
	c := &e.cfg
	q.conn = conn{tx: &e.tx, ctr: &q.ctr, zeroCopy: c.ZeroCopyTx, pack: c.PackLimit,
		srcPort: uint16(49152 + randUint64()%16384)}
	q.snd = newSender(senderConfig{retryTimeout: int64(cfg.RetryTimeout), rnrTimeout: int64(cfg.RNRTimeout),
		rnrDelay: int64(c.RNRDelay), window: c.Window, goBackN: c.GoBackN, ackDelay: int64(c.AckDelay)}, c.RTO, &q.ctr)
	q.rcv = newReceiver(receiverConfig{ackEvery: c.AckEvery, ackDelay: int64(c.AckDelay),
		rnrDelay: int64(c.RNRDelay), goBackN: c.GoBackN, advertise: q.srq == nil}, &q.ctr)
	q.req = newRequester(int(q.sendBound), &q.conn, q.sendQ, int64(c.CreditTimeout))
	rd := ceilPow2(cfg.RecvDepth) // the receive ring's bound: RecvDepth rounded up, as recvQ
	rn := min(rd, initialRing)    // it grows as receives are posted (ring.go)
	q.resp = responder{out: &q.conn, recvQ: q.recvQ, srq: q.srq,
		res: c.Resolver, pd: cfg.PD, recvs: make([]recvState, rn), mask: uint32(rn - 1), recvCap: uint32(rd),
		// Up to twice IRD job slots, made as the peer's Reads need them: a read whose
		// responses were all sent stops counting against IRD but keeps its slot until they
		// are acknowledged (they may need retransmission).
		maxJobs: 2 * cfg.IRD}
	return q
}

// connection is what the connection manager gives a QP when it connects: where the peer
// is, what every packet carries, both streams' initial PSNs, the payload size and the
// negotiated read limits.
type connection struct {
	peer             netip.AddrPort // where the peer receives
	peerPort         uint16         // the UDP port the peer's QP sends from
	peerQPN          uint32
	cookie           uint64
	ourPSN, peerPSN  wire.PSN
	maxPayload       int // the smaller of the two sides' MaxPayload
	ird, ord, window int
	cc               congestion.Controller
}

// setup gives the QP its connection. Engine goroutine, before the QP connects.
func (q *QP) setup(c connection) {
	q.conn.peer = c.peer
	q.conn.peerSrc = netip.AddrPortFrom(c.peer.Addr(), c.peerPort)
	q.conn.peerQPN, q.conn.cookie = c.peerQPN, c.cookie
	q.conn.mss = mssOf(c.maxPayload)
	q.conn.pack = min(q.conn.pack, packRoom(q.conn.mss))
	q.resp.ird, q.req.ord = c.ird, c.ord
	q.snd.connect(c.ourPSN, c.cc)
	q.rcv.connect(c.peerPSN, c.window)
	q.resp.maxJobs = min(q.resp.maxJobs, 2*c.ird) // IRD 0: the peer may not read
	q.resp.jobs = q.resp.jobs[:min(len(q.resp.jobs), q.resp.maxJobs)]
	q.snd.publishStats()
}

// established makes a QP whose connection the CM completed at now connected: its RTO
// seeded with the handshake's round trip (rtt, ns; 0: none measured), its keepalive
// started, the engine polling it.
func (q *QP) established(now, rtt int64) {
	if rtt > 0 {
		q.snd.seedRTO(rtt)
	}
	q.ka.start(now, q.cfg.KeepAlive)
	q.state.Store(uint32(QPConnected))
	q.e.activate(q)
}

// readLimits returns the QP's negotiated read limits (IRD, ORD) for the CM's messages.
func (q *QP) readLimits() (ird, ord int) { return q.resp.ird, q.req.ord }

// initialPSN is the PSN of our stream's first packet (valid once set up).
func (q *QP) initialPSN() wire.PSN { return q.snd.NextPSN() }

// mismatch is why a data packet or Ack is not a QP's peer's (match).
type mismatch uint8

const (
	matched     mismatch = iota
	unconnected          // the QP has no connection (no cookie yet)
	wrongSource          // from another address or port than the peer's QP sends from
	wrongCookie          // with another connection's cookie
)

// match checks a data packet or Ack that arrived from the link address from with cookie
// against the QP's connection: the engine's check before input.
func (q *QP) match(from netip.AddrPort, cookie uint64) mismatch {
	switch {
	case q.conn.cookie == 0:
		return unconnected
	case from != q.conn.peerSrc:
		return wrongSource
	case cookie != q.conn.cookie:
		return wrongCookie
	}
	return matched
}

// The connection as the CM's messages name it: the peer's QPN, the cookie, where the
// peer's QP sends from (Peer and SourcePort give the rest).

func (q *QP) peerQPN() uint32            { return q.conn.peerQPN }
func (q *QP) cookie() uint64             { return q.conn.cookie }
func (q *QP) peerSource() netip.AddrPort { return q.conn.peerSrc }

// poll does one round of the QP's work. It returns the QP's next deadline (0: none), whether
// it did anything, and whether the QP must be polled again in the next round whatever its
// deadline says (again): a flush, a failure, a timer that fired or a keepalive probe may
// have left work that only the next poll sees. Work a poll finishes itself (posts taken,
// packets sent, an acknowledgement) needs no second poll: next already counts the timers
// the poll armed, and what the QP waits for (an acknowledgement, a post, the link) polls it
// when it comes.
func (q *QP) poll(now int64) (next int64, busy, again bool) {
	if q.flushReq.Load() {
		q.flushReq.Store(false)
		q.flush(StatusCancelled, -1, ErrFlushed)
		busy, again = true, true
	}
	busy = q.takeReceives() || busy
	switch q.State() {
	case QPError, QPDisconnected:
		if q.held {
			// The peer disconnected: what is posted stays posted, and what is outstanding
			// stays outstanding, until the application flushes (NDKPI: a provider should
			// not flush when it indicates a disconnect that came from the peer).
			return 0, busy, busy
		}
		busy = q.cancelPosts() || busy
		if q.rcv.NakPending() && q.conn.canTransmit() {
			q.sendAck(now, 0)
		}
		return 0, busy, busy
	}
	busy = q.req.takeSends() || busy
	t := q.snd.OnTimer(now)
	if t.readProbe && !t.fail.failed() {
		var probe bool
		if t.fail, probe = q.snd.ProbeRead(now, t.at, q.req.awaitedRead()); probe && q.conn.canTransmit() {
			q.sendAck(now, wire.FlagAckReq)
			q.snd.ReadProbed(now)
		}
		t.next, again = q.snd.Deadline(), true
	}
	if t.fail.failed() {
		q.fail(t.fail)
		return 0, true, true // a timer failed the QP: its completions were just delivered
	}
	busy = busy || t.fired
	again = again || t.fired || t.reran
	kaNext, probed, failed := q.keepAlive(now)
	if failed {
		return 0, true, true
	}
	busy, again = busy || probed, again || probed
	sent, pace := q.transmit(now)
	busy = busy || sent
	if q.State() != QPConnected {
		return 0, true, true // a local request failed the QP
	}
	// The deadlines as the poll leaves them: transmitting arms the retransmission timer
	// and the tail probe, and may end a wait for credits.
	next = t.next
	if busy && !t.reran {
		next = q.snd.Deadline() // what the poll armed
	}
	next = earlier(next, q.req.creditDeadline())
	next = earlier(next, kaNext)
	next = earlier(next, pace)
	due, d := q.rcv.AckDue(now, q.e.round, q.resp.creditLimit())
	if due && q.conn.canTransmit() {
		q.sendAck(now, 0)
		d = 0
	}
	return earlier(next, d), busy, again
}

// quiet reports whether q, just given a packet, has nothing a poll would do and no deadline
// earlier than the one its last poll returned: connected, everything it sent acknowledged,
// no request active, no read job, nothing to acknowledge, no timer armed but the keepalive,
// which the packet pushed later. The engine then does not poll it for that packet (the
// acknowledgement that completes a QP's last request usually leaves it so): the deadline
// the scheduler holds for it is at worst early (a poll that finds nothing), never late.
func (q *QP) quiet() bool {
	// The checks that fail most often first: a data packet leaves something to acknowledge,
	// an acknowledgement of some of what is in flight leaves the rest.
	return q.rcv.quiet(q.resp.creditLimit()) && q.snd.quiet() && q.req.quiet() && q.resp.quiet() &&
		q.State() == QPConnected && !q.flushReq.Load()
}

// earlier is the earlier of two deadlines; one that is not positive is none.
func earlier(a, b int64) int64 {
	if b > 0 && (a <= 0 || b < a) {
		return b
	}
	return a
}

// flushed reports whether the QP failed or was flushed, so that what is posted to it
// completes cancelled (a QP its peer disconnected keeps it posted until the application
// flushes).
func (q *QP) flushed() bool {
	st := q.State()
	return (st == QPError || st == QPDisconnected) && !q.held
}

// takeReceives moves the receives posted since the last round into the responder's ring,
// or, once the QP was flushed, completes them cancelled.
func (q *QP) takeReceives() bool {
	if !q.flushed() {
		return q.resp.takeReceives()
	}
	moved := false
	for q.resp.cancelPost(&q.comp) {
		q.deliver()
		q.resp.freePost()
		moved = true
	}
	return moved
}

// cancelPosts completes the work requests posted to a failed QP, cancelled.
func (q *QP) cancelPosts() bool {
	moved := false
	for q.req.cancelPost(&q.comp) {
		q.sendDone.Add(1)
		q.deliver()
		q.req.freePost()
		moved = true
	}
	return moved
}

// sendAck queues an Ack of the peer's stream now (or the NAK pending), with flags
// (FlagAckReq: a probe). The caller checked canTransmit.
func (q *QP) sendAck(now int64, flags wire.Flags) {
	q.conn.sendAck(now, flags, q.rcv.takeAck(now, q.resp.creditLimit()))
}

// transmit sends what is due, in order: retransmissions (what was lost, then an RNR
// retry), read responses, new packets of work requests; new packets only while the sender
// lets them leave (window and pacing). An acknowledgement of the peer's stream that is due
// rides on the first data packet with room for it. It reports whether anything left, and
// when pacing lets the packet it held go (0: it held none).
func (q *QP) transmit(now int64) (sent bool, pace int64) {
	credits := q.resp.creditLimit()
	if a, ok := q.rcv.carry(now, credits); ok {
		q.conn.offer(a)
	}
	retx := q.snd.Retransmissions(now)
	done := 0
	for done < len(retx) && q.conn.canTransmit() && q.snd.CanResend(now, done) {
		info := retx[done]
		done++
		if q.resend(now, info) { // else what it carried is gone
			q.snd.OnRetransmitted(now, info)
			sent = true
		}
	}
	q.snd.ConsumeRetransmissions(done)
out:
	for q.conn.canTransmit() {
		// Every local request that is due now, not one a pass: one that waited for a fence
		// may free the next.
		for {
			fin, f := q.req.runLocal()
			if f.failed() {
				q.fail(f)
				break out
			}
			if !fin {
				break
			}
			q.completeRequests()
			sent = true
		}
		job := true
		pk, ok := q.resp.startNext(q.rcv.Cumulative())
		if !ok {
			job = false
			if pk, ok = q.req.startNext(now, q.snd.NextPSN()); !ok {
				break
			}
		}
		if ok, at := q.snd.CanSend(now, int(pk.n)); !ok {
			pace = at
			break
		}
		psn, ok := q.snd.OnSent(now, int(pk.n), pk.o)
		if !ok {
			break
		}
		if job {
			q.resp.sent(now, pk, psn)
		} else {
			q.req.sent(now, pk, psn)
		}
		sent = true
	}
	if q.conn.withdraw() {
		q.rcv.carried(credits)
	}
	if sent {
		q.snd.ArmTimer(now)
	}
	return sent, pace
}

// resend rebuilds the packet info describes as a retransmission, through the part that
// owns it; false when what it carried is gone (its request completed, its job ended).
func (q *QP) resend(now int64, info ack.PacketInfo[owner]) bool {
	if info.Owner.job {
		return q.resp.resend(now, info.Owner, info.PSN)
	}
	return q.req.resend(now, info.Owner, info.PSN)
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
	if p.Opcode == wire.OpReadResponse {
		if f := q.req.onReadResponse(p); f.failed() {
			q.fail(f)
			return
		}
		q.snd.PeerHeard(now, q.req.readsOutstanding())
		q.completeRequests()
	} else {
		v := q.resp.accept(p)
		if v.nak != wire.SynAck {
			q.rcv.Nak(v.nak, v.nakPSN)
		}
		if v.failed() {
			q.fail(v.fail())
			return
		}
		if !v.placed {
			return
		}
	}
	q.rcv.OnReceived(now, q.e.round, p.PSN, p.TS, p.Flags&wire.FlagAckReq != 0)
	// A receive completes only once every earlier packet of the peer arrived: a receive
	// completion promises that what the peer posted before that Send (Writes) has landed.
	q.completeReceives()
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
		if o := acked[i].Owner; o.job {
			q.resp.onAcked(o.idx)
		} else {
			q.req.onAcked(o.idx)
		}
	}
	if q.req.readsOutstanding() {
		q.snd.PeerHeard(now, true) // any acknowledgement: the peer is there (and may owe responses)
	}
	if a.Syndrome != wire.SynAck {
		// What the NAK's ack part acknowledged completed before the failure it reports.
		q.completeRequests()
		if f := q.snd.OnNak(now, a); f.failed() {
			q.fail(f)
			return
		}
	}
	q.snd.DetectLoss(now, a)
	q.completeRequests()
	q.snd.publishStats()
}

// completeRequests delivers, in posting order, the completions of the work requests that
// have finished.
func (q *QP) completeRequests() {
	for q.req.pop(&q.comp) {
		q.sendDone.Add(1)
		q.deliver()
		q.req.free()
	}
}

// completeReceives delivers, in MSN order, the completions of the receives that have
// finished.
func (q *QP) completeReceives() {
	cum := wire.PSN(0)
	if q.rcv.rx != nil {
		cum = q.rcv.Cumulative()
	}
	for q.resp.pop(cum, &q.comp) {
		q.deliver()
		q.resp.free()
	}
}

// zcDone accounts one zero-copy packet of o whose bytes the link no longer reads: a
// request or read job waiting only for the link completes or releases its memory now.
func (q *QP) zcDone(o owner) {
	if o.job {
		q.resp.zcDone(o.idx)
		return
	}
	q.req.zcDone(o.idx)
	q.completeRequests()
}

// abort fails a QP the engine may not be polling (for cause), and starts polling it so
// that what is posted to it completes cancelled. Engine goroutine.
func (q *QP) abort(cause error) {
	q.flush(StatusCancelled, -1, cause)
	q.takeReceives()
	q.e.activate(q)
}

// fail ends the connection because of a part's failure f (a timeout, a NAK, an access the
// peer may not make, a request that failed a local check): the QP is flushed as flush does,
// and the disconnect event (QPConfig.OnDisconnect) fires once, since the connection is
// aborted (NDKPI NdkDisconnectEventCallback: "when the peer disconnects or the connection
// aborts"). A QP already flushed stays as it is.
func (q *QP) fail(f failure) {
	if q.flush(f.st, f.seq, f.cause) {
		q.indicateDisconnect()
	}
}

// flush puts the QP in the error state: the work request with sequence number failSeq (if
// any, and still outstanding; for StatusTimeout, a budget that ran out, the oldest
// outstanding one: requester.abandon) completes with st, every other outstanding request
// and receive with StatusCancelled, in posting order, each as soon as the link is done with
// it. Retransmission stops. A QP its peer disconnected stays disconnected (flush is then the
// application's Flush, Disconnect or Close of what the peer's disconnect left posted). It
// reports false, and does nothing, when the QP was flushed already. The application's own
// Flush, Disconnect and Close call it directly: they fire no disconnect event. cause is
// recorded for Cause unless one is already (a QP the peer disconnected keeps
// ErrPeerDisconnected).
func (q *QP) flush(st Status, failSeq int64, cause error) bool {
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
	q.completeRequests()
	q.completeReceives()
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

// close runs, on the engine goroutine, the QP's part of its removal (Engine's Close): the
// first call flushes it, a QP the engine never polled (idle, connecting, refused) first
// taking the receives still in its posting ring, so that they complete (cancelled, in
// posting order) with the rest. Requests and read jobs whose zero-copy packets the link
// still transmits complete (and release their memory) when it is done with them; close
// reports false while any does, until force, when everything completes regardless. Then
// what was posted since the engine last took posts completes cancelled too, and close
// reports true.
func (q *QP) close(force bool) bool {
	if !q.flushed() {
		q.resp.takeReceives()
		q.flush(StatusCancelled, -1, ErrFlushed)
	}
	if (q.req.zcPending() || q.resp.zcPending()) && !force {
		return false
	}
	q.req.forceDrain()
	q.resp.forceDrain()
	q.completeRequests()
	q.cancelPosts()
	q.takeReceives()
	return true
}
