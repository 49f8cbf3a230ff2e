package transport

import (
	"github.com/xdpndk/xdpndk/transport/wire"
)

// requester is the QP's initiator side: its work requests from the moment the engine
// takes them off the send queue to their completion, in posting order. It admits them
// (credits, ORD, read fences), cuts them into packets (which leave when the sender says
// so, through conn), places the response bytes of its Reads, and counts what the peer
// acknowledged. It calls nothing of its QP: what it decides it returns (the packet that
// would go next, a failure), and the completions it has ready the QP takes (pop). Engine
// goroutine only.
type requester struct {
	out   *conn
	sendQ *spsc[WorkRequest, *WorkRequest] // consumer side: the application posts

	wrs      []wrState // ring of active requests, indexed by seq & mask; grows up to depth
	mask     uint32
	depth    uint32 // the most requests active at once (SendDepth rounded up)
	head     uint32 // oldest request not yet completed
	next     uint32 // next request to start transmitting
	tail     uint32 // next free slot
	sendOff  uint32 // bytes of wrs[next] already transmitted (first transmission)
	nextMSN  uint32 // MSN of the next Send message
	credits  uint32 // peer's MSN limit, as last advertised
	credKnow bool   // the peer has advertised credits at least once
	credWait int64  // since when a Send waits for credits; 0 when none waits
	reads    int    // Reads outstanding (ORD)
	ord      int    // Reads the peer takes at once (negotiated)

	creditTimeout int64 // Config.CreditTimeout, ns

	// after a failure (failing): the status for the request failTarget (sequence number,
	// -1 none) while the ring drains (a request completes only once the link is done with
	// its zero-copy packets)
	failing    bool
	failSt     Status
	failTarget int64
}

// wrState is one active work request.
type wrState struct {
	wr       *WorkRequest // where it was posted (its one record); nil once freed
	total    uint32       // wr.Len(), summed once when the request is taken
	seq      uint32       // position in the request sequence (its packets' owner names it)
	firstPSN wire.PSN     // PSN of its first packet
	npkts    uint32       // packets it has (known once fully transmitted)
	acked    uint32       // packets acknowledged
	sentAll  bool         // every packet transmitted once
	msn      uint32       // Send: its message sequence number
	readGot  uint32       // Read: response bytes placed
	zc       uint32       // zero-copy packets of it the link has not reported done
	done     bool
}

// packet is a packet that a part of the QP would send next: its owner and its payload
// bytes.
type packet struct {
	o owner
	n uint32
}

// newRequester returns the requester of a QP with at most depth (a power of two) work
// requests active; its ring starts at initialRing of them and grows as they are posted.
func newRequester(depth int, out *conn, sendQ *spsc[WorkRequest, *WorkRequest], creditTimeout int64) requester {
	n := min(depth, initialRing)
	return requester{out: out, sendQ: sendQ, creditTimeout: creditTimeout,
		wrs: make([]wrState, n), mask: uint32(n - 1), depth: uint32(depth)}
}

// takeSends moves posted work requests into the active ring.
func (r *requester) takeSends() bool {
	moved := false
	for r.tail-r.head < r.depth {
		wr := r.sendQ.peek()
		if wr == nil {
			break
		}
		if r.tail-r.head == uint32(len(r.wrs)) {
			r.wrs = growRing(r.wrs, r.head, r.tail)
			r.mask = uint32(len(r.wrs) - 1)
		}
		s := &r.wrs[r.tail&r.mask]
		*s = wrState{wr: wr, total: uint32(wr.Len()), seq: r.tail}
		r.sendQ.take() // it stays where it was posted, its one record, until free
		r.tail++
		moved = true
	}
	return moved
}

// cancelPost sets *c to the completion, cancelled, of the oldest request posted to a QP
// in the error state and not taken (freePost ends it); false when there is none, or when
// requests before it still wait for the link (zero-copy).
func (r *requester) cancelPost(c *Completion) bool {
	if r.head != r.tail {
		return false
	}
	wr := r.sendQ.peek()
	if wr == nil {
		return false
	}
	*c = Completion{Request: wr, Context: wr.Context, Op: wr.Kind, Status: StatusCancelled}
	return true
}

// freePost ends the request whose completion cancelPost returned, once it was delivered.
func (r *requester) freePost() { r.sendQ.pop() }

// payloadAt is the payload of work request s's packet at byte offset off: what is left of
// it, up to mss; none for a Read (its request carries none) or a local request.
func payloadAt(s *wrState, off uint32, mss int) uint32 {
	if s.wr.Kind == OpRead || s.wr.Kind == OpLocal {
		return 0
	}
	return min(uint32(mss), s.total-off)
}

// creditDeadline is when a Send held for credits goes anyway, as a probe; 0 when none is
// held.
func (r *requester) creditDeadline() int64 {
	if r.credWait == 0 {
		return 0
	}
	return r.credWait + r.creditTimeout
}

// onCredits takes the peer's credit limit from an acknowledgement.
func (r *requester) onCredits(credits uint32) {
	if !r.credKnow || msnBefore(r.credits, credits) {
		r.credits, r.credKnow = credits, true
	}
}

// msnBefore reports whether a comes before b in the wrapping MSN space.
func msnBefore(a, b uint32) bool { return int32(a-b) < 0 }

// runLocal finishes the local requests (Bind, FastRegister, Invalidate: nothing to send)
// at the front of the line of requests not yet sent, in order: each completes after the
// requests before it (done: one was finished, so completions may be ready), or, if it
// failed its local check, fails the QP once every earlier request completed (f).
func (r *requester) runLocal() (done bool, f failure) {
	for r.next != r.tail {
		s := &r.wrs[r.next&r.mask]
		if s.wr.Kind != OpLocal || (s.wr.Flags&WRReadFence != 0 && r.reads > 0) {
			return done, failure{}
		}
		if s.wr.LocalStatus != StatusSuccess {
			if r.head != r.next {
				return done, failure{} // it fails the QP only when every earlier request completed
			}
			return done, failure{s.wr.LocalStatus, int64(s.seq), localError(s.wr.LocalStatus)}
		}
		s.sentAll = true
		r.next++
		done = true
	}
	return done, failure{}
}

// startNext returns the next new packet of the oldest work request not fully sent, if its
// admission checks let it start now (its first packet would take PSN psn); ok is false
// when none may go. Nothing is committed until sent.
func (r *requester) startNext(now int64, psn wire.PSN) (pk packet, ok bool) {
	if r.next == r.tail {
		return packet{}, false
	}
	s := &r.wrs[r.next&r.mask]
	if s.wr.Kind == OpLocal || (r.sendOff == 0 && !r.admit(now, s, psn)) {
		return packet{}, false
	}
	return packet{o: wrOwner(s.seq, r.sendOff), n: payloadAt(s, r.sendOff, r.out.mss)}, true
}

// sent builds and queues packet pk, which startNext returned and the sender recorded as
// psn, and moves on.
func (r *requester) sent(now int64, pk packet, psn wire.PSN) {
	s := &r.wrs[r.next&r.mask]
	if r.sendOff == 0 {
		switch s.wr.Kind {
		case OpSend, OpSendInv:
			r.nextMSN++
		case OpRead:
			r.reads++
		}
	}
	r.build(now, s, psn, pk.o.off, false)
	r.sendOff += pk.n
	if s.wr.Kind == OpRead || r.sendOff >= s.total { // a Read is one request packet
		s.sentAll = true
		r.sendOff = 0
		r.next++
	}
}

// admit runs the checks a request passes before its first packet (read fence, ORD,
// credits) and numbers it, its first packet at PSN first; false: it waits.
func (r *requester) admit(now int64, s *wrState, first wire.PSN) bool {
	switch {
	case s.wr.Flags&WRReadFence != 0 && r.reads > 0:
		return false
	case s.wr.Kind == OpRead && r.reads >= r.ord:
		return false
	case s.wr.Kind == OpSend || s.wr.Kind == OpSendInv:
		if r.credKnow && !msnBefore(r.nextMSN, r.credits) {
			// The peer has no receive for it: wait for credits, but not forever. After
			// CreditTimeout the Send goes anyway as a probe, so that a peer that never
			// posts a receive fails it through the RNR budget (STATUS_IO_TIMEOUT).
			if r.credWait == 0 {
				r.credWait = now
			}
			if now-r.credWait < r.creditTimeout {
				return false
			}
		}
		r.credWait = 0
	}
	mss := uint32(r.out.mss)
	s.firstPSN = first
	s.npkts = 1
	if s.wr.Kind != OpRead && s.total > mss {
		s.npkts = (s.total + mss - 1) / mss
	}
	if s.wr.Kind == OpSend || s.wr.Kind == OpSendInv {
		s.msn = r.nextMSN
	}
	return true
}

// resend rebuilds the packet of work request o at its offset with its PSN, as a
// retransmission; false when that request has completed since.
func (r *requester) resend(now int64, o owner, psn wire.PSN) bool {
	s := r.liveWR(o.idx)
	if s == nil {
		return false
	}
	r.build(now, s, psn, o.off, true)
	return true
}

// build encodes and queues the packet of work request s at byte offset off.
func (r *requester) build(now int64, s *wrState, psn wire.PSN, off uint32, retx bool) {
	total := s.total
	n := payloadAt(s, off, r.out.mss)
	last := off+n >= total || s.wr.Kind == OpRead
	var op wire.Opcode
	switch s.wr.Kind {
	case OpSend, OpSendInv:
		op = sendOpcode(off == 0, last, s.wr.Kind == OpSendInv)
	case OpWrite:
		op = wire.OpWrite
	case OpRead:
		op = wire.OpReadRequest
	}
	p, bounce := r.out.begin(now, op, psn, retx, n)
	switch s.wr.Kind {
	case OpSend, OpSendInv:
		p.Send = wire.SendExt{MSN: s.msn, Offset: off, Total: total}
		if op == wire.OpSendOnlyInv || op == wire.OpSendLastInv {
			p.Send.InvToken = s.wr.InvToken
		}
		if last && s.wr.Flags&WRSolicited != 0 {
			p.Flags |= wire.FlagSolicited
		}
	case OpWrite:
		p.RDMA = wire.RDMAExt{Addr: s.wr.RemoteAddr, Token: s.wr.RemoteToken, Length: total, Offset: off}
		if last {
			p.Flags |= wire.FlagLast
		}
	case OpRead:
		p.RDMA = wire.RDMAExt{Addr: s.wr.RemoteAddr, Token: s.wr.RemoteToken, Length: total}
	}
	if last {
		p.Flags |= wire.FlagAckReq // the request completes on this packet's ack: don't delay it
	}
	a, b := gather(&s.wr.SGL, s.wr.NSGE, off, n, bounce)
	if r.out.finish(p, n, a, b, wrOwner(s.seq, off)) {
		s.zc++
	}
}

// sendOpcode is the opcode of a Send's packet: the first, the last, both (only) or
// neither (middle), of a SendAndInvalidate (inv) or not.
func sendOpcode(first, last, inv bool) wire.Opcode {
	switch {
	case first && last && inv:
		return wire.OpSendOnlyInv
	case first && last:
		return wire.OpSendOnly
	case first:
		return wire.OpSendFirst
	case last && inv:
		return wire.OpSendLastInv
	case last:
		return wire.OpSendLast
	}
	return wire.OpSendMiddle
}

// gather returns the n bytes at offset off of an SGL as at most two slices referencing it,
// or, when they span more than two SGEs, as one slice of bounce holding a copy.
func gather(sgl *[MaxSGE][]byte, nsge uint8, off, n uint32, bounce []byte) (a, b []byte) {
	if n == 0 {
		return nil, nil
	}
	if l := uint32(len(sgl[0])); nsge >= 1 && off < l && n <= l-off {
		return sgl[0][off : off+n], nil // within the first SGE: the common case
	}
	var pieces [MaxSGE][]byte
	np := 0
	for i := 0; i < int(nsge) && i < MaxSGE && n > 0; i++ {
		l := uint32(len(sgl[i]))
		if off >= l {
			off -= l
			continue
		}
		take := min(l-off, n)
		pieces[np] = sgl[i][off : off+take]
		np++
		n -= take
		off = 0
	}
	switch np {
	case 1:
		return pieces[0], nil
	case 2:
		return pieces[0], pieces[1]
	}
	w := 0
	for _, p := range pieces[:np] {
		w += copy(bounce[w:], p)
	}
	return bounce[:w], nil
}

// onAcked counts one acknowledged packet of work request idx.
func (r *requester) onAcked(idx uint32) {
	if s := r.liveWR(idx); s != nil {
		s.acked++
	}
}

// onReadResponse places the bytes of a read response into the Read that asked for them
// (none, for a Read that completed or failed already). It returns the failure when the
// response does not fit the Read: the connection fails.
func (r *requester) onReadResponse(p *wire.Packet) failure {
	for seq := r.head; seq != r.next; seq++ {
		s := &r.wrs[seq&r.mask]
		if s.wr.Kind != OpRead || s.done || s.firstPSN != p.ReadResp.ReqPSN {
			continue
		}
		if !scatter(&s.wr.SGL, s.wr.NSGE, p.ReadResp.Offset, p) {
			return failure{StatusRemoteError, int64(s.seq), refusedPeer(wire.SynAck, "a read response past the end of its Read")}
		}
		s.readGot += uint32(p.PayloadLen())
		return failure{}
	}
	return failure{}
}

// pop sets *c to the completion of the oldest work request if it has finished (free ends
// it); false when it has not, or none is outstanding, *c untouched. Requests complete in
// posting order: once sent, acknowledged, done with by the link (zero-copy) and, for a
// Read, answered in full. After a failure (abandon) they complete as the link lets go of
// them: the one the failure names with its status, the rest cancelled.
func (r *requester) pop(c *Completion) bool {
	if r.head == r.tail {
		return false
	}
	s := &r.wrs[r.head&r.mask]
	st := StatusSuccess
	switch {
	case r.failing:
		if s.zc > 0 {
			return false
		}
		st = StatusCancelled
		if int64(s.seq) == r.failTarget {
			st = r.failSt
		}
	case r.head == r.next, !s.sentAll, s.acked < s.npkts, s.zc > 0:
		return false
	case s.wr.Kind == OpRead && s.readGot < s.total:
		return false
	}
	n := uint32(0)
	if st == StatusSuccess {
		n = s.total
	}
	c.set(s.wr, nil, s.wr.Context, s.wr.Kind, st, n, false, 0)
	return true
}

// free ends the request whose completion pop returned, once it was delivered: its slot in
// the ring and its record in the send queue are free for later requests.
func (r *requester) free() {
	s := &r.wrs[r.head&r.mask]
	if !r.failing && s.wr.Kind == OpRead {
		r.reads--
	}
	s.done, s.wr = true, nil
	r.head++
	r.sendQ.free()
}

// abandon ends every request of a failed QP: the one with sequence number failSeq (if
// any; for a failure that names none, other than a cancellation, and for a budget that ran
// out, the oldest outstanding one) completes with st, the rest cancelled, each once the link
// is done with it (pop).
func (r *requester) abandon(st Status, failSeq int64) {
	// A failure that names no request (a timeout of a read response we owed, the keepalive)
	// is reported on the oldest outstanding one. So is a budget that ran out (StatusTimeout)
	// on a later request's packet: the peer answered nothing, and requests complete in
	// posting order, so the oldest one not completed carries the failure and the rest are
	// flushed behind it, as InfiniBand's retry timer, which covers the oldest outstanding
	// request, reports it. Blaming the later one would complete the older ones cancelled
	// first, and the application's first failure would not say that the peer went silent.
	// Other failures (a NAK, a refused response) name the request they belong to.
	target := failSeq
	if (target < 0 && st != StatusCancelled) || st == StatusTimeout {
		for seq := r.head; seq != r.tail; seq++ {
			if s := &r.wrs[seq&r.mask]; !s.done {
				target = int64(s.seq)
				break
			}
		}
	}
	r.failing, r.failSt, r.failTarget = true, st, target
	r.next, r.sendOff, r.reads = r.tail, 0, 0
	r.credWait = 0
}

// readsOutstanding reports whether Reads of ours are outstanding at the peer (ORD in use).
func (r *requester) readsOutstanding() bool { return r.reads > 0 }

// quiet reports whether no request is active (every one taken has completed), no Send
// waits for credits and no failure drains the ring.
func (r *requester) quiet() bool { return r.head == r.tail && r.credWait == 0 && !r.failing }

// liveWR returns the work request a tag's index names, or nil when that request has
// completed (its slot may hold a later one).
func (r *requester) liveWR(idx uint32) *wrState {
	s := &r.wrs[idx&r.mask]
	if s.seq&seqMask != idx || s.done {
		return nil
	}
	return s
}

// awaitedRead returns the oldest Read whose request was sent and whose response has not
// fully arrived, or -1.
func (r *requester) awaitedRead() int64 {
	if r.reads == 0 {
		return -1
	}
	for seq := r.head; seq != r.next; seq++ {
		if s := &r.wrs[seq&r.mask]; s.wr.Kind == OpRead && !s.done && s.sentAll && s.readGot < s.total {
			return int64(s.seq)
		}
	}
	return -1
}
