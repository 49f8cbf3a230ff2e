package transport

import (
	"github.com/xdpndk/xdpndk/transport/wire"
)

// qpHooks is what the requester and the responder ask of their QP: to complete a work
// request or a receive (deliver), and to end the connection (fail: the QP is flushed, the
// request with sequence number seq, if any, completes with st, everything else
// cancelled; cause is what QP.Cause reports).
type qpHooks interface {
	deliver(c Completion)
	fail(now int64, st Status, seq int64, cause error)
}

// requester is the QP's initiator side: its work requests from the moment the engine
// takes them off the send queue to their completion, in posting order. It admits them
// (credits, ORD, read fences), cuts them into packets (which leave when the sender says
// so), places the response bytes of its Reads, and counts what the peer acknowledged. It
// implements senderHooks: a packet's tag names its work request. Engine goroutine only.
type requester struct {
	h     qpHooks
	snd   *sender
	out   *conn
	sendQ *spsc[WorkRequest] // consumer side: the application posts

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

	// after a failure: the status for the request failTarget (sequence number, -1 none)
	// while the ring drains (a request completes only once the link is done with its
	// zero-copy packets)
	failSt     Status
	failTarget int64
}

// wrState is one active work request.
type wrState struct {
	wr       WorkRequest
	total    uint32   // wr.Len(), summed once when the request is taken
	seq      uint32   // position in the request sequence (for tags)
	firstPSN wire.PSN // PSN of its first packet
	npkts    uint32   // packets it has (known once fully transmitted)
	acked    uint32   // packets acknowledged
	sentAll  bool     // every packet transmitted once
	msn      uint32   // Send: its message sequence number
	readGot  uint32   // Read: response bytes placed
	rnr      int      // RNR NAKs it got
	rnrSince int64    // when the first of them arrived
	zc       uint32   // zero-copy packets of it the link has not reported done
	done     bool
}

// Tags name what a packet in the sent history carries, so it can be rebuilt for
// retransmission: a work request (its sequence number) or a read job (its index), and the
// byte offset of the packet's payload.
const tagJob = 1 << 63

func wrTag(seq, off uint32) uint64 { return uint64(seq&0x7fffffff)<<32 | uint64(off) }
func jobTag(i int, off uint32) uint64 {
	return tagJob | uint64(uint32(i)&0x7fffffff)<<32 | uint64(off)
}
func splitTag(t uint64) (job bool, idx, off uint32) {
	return t&tagJob != 0, uint32(t>>32) & 0x7fffffff, uint32(t)
}

// newRequester returns the requester of a QP with at most depth (a power of two) work
// requests active; its ring starts at initialRing of them and grows as they are posted.
func newRequester(depth int, h qpHooks, snd *sender, out *conn, sendQ *spsc[WorkRequest], creditTimeout int64) requester {
	n := min(depth, initialRing)
	return requester{h: h, snd: snd, out: out, sendQ: sendQ, creditTimeout: creditTimeout,
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
		*s = wrState{wr: *wr, total: uint32(wr.Len()), seq: r.tail}
		r.sendQ.pop()
		r.tail++
		moved = true
	}
	return moved
}

// cancelPosts completes everything posted to a QP in the error state as cancelled.
func (r *requester) cancelPosts() bool {
	if r.head != r.tail {
		return false // requests before them still wait for the link (zero-copy)
	}
	moved := false
	for wr := r.sendQ.peek(); wr != nil; wr = r.sendQ.peek() {
		c := Completion{Context: wr.Context, Op: wr.Kind, Status: StatusCancelled}
		r.sendQ.pop()
		r.h.deliver(c)
		moved = true
	}
	return moved
}

// nextPayload is the payload of the next new packet of the oldest request not fully sent,
// up to the MSS; the MSS when none waits.
func (r *requester) nextPayload() int {
	if r.next == r.tail {
		return r.out.mss
	}
	return int(payloadAt(&r.wrs[r.next&r.mask], r.sendOff, r.out.mss))
}

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

// sendNew sends the next new packet of the oldest work request not fully sent, if its
// admission checks let it start. The caller checked that the sender lets a packet leave.
func (r *requester) sendNew(now int64) bool {
	if r.next == r.tail {
		return false
	}
	s := &r.wrs[r.next&r.mask]
	if s.wr.Kind == OpLocal {
		// Nothing to send: it completes in order, after the requests before it.
		if s.wr.Flags&WRReadFence != 0 && r.reads > 0 {
			return false
		}
		if s.wr.LocalStatus != StatusSuccess {
			if r.head != r.next {
				return false // it fails the QP only when every earlier request completed
			}
			r.h.fail(now, s.wr.LocalStatus, int64(s.seq), localError(s.wr.LocalStatus))
			return true
		}
		s.sentAll = true
		r.next++
		r.completeSends()
		return true
	}
	if r.sendOff == 0 && !r.admit(now, s) {
		return false
	}
	off := r.sendOff
	n := payloadAt(s, off, r.out.mss)
	psn, ok := r.snd.OnSent(now, int(n), wrTag(s.seq, off))
	if !ok {
		return false
	}
	if r.sendOff == 0 {
		switch s.wr.Kind {
		case OpSend, OpSendInv:
			r.nextMSN++
		case OpRead:
			r.reads++
		}
	}
	r.build(now, s, psn, off, false)
	r.sendOff += n
	if s.wr.Kind == OpRead || r.sendOff >= s.total { // a Read is one request packet
		s.sentAll = true
		r.sendOff = 0
		r.next++
	}
	return true
}

// admit runs the checks a request passes before its first packet (read fence, ORD,
// credits) and numbers it; false: it waits.
func (r *requester) admit(now int64, s *wrState) bool {
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
	s.firstPSN = r.snd.NextPSN()
	s.npkts = 1
	if s.wr.Kind != OpRead && s.total > mss {
		s.npkts = (s.total + mss - 1) / mss
	}
	if s.wr.Kind == OpSend || s.wr.Kind == OpSendInv {
		s.msn = r.nextMSN
	}
	return true
}

// resend rebuilds the packet of work request idx at byte offset off with its PSN, as a
// retransmission; false when that request has completed since.
func (r *requester) resend(now int64, idx uint32, psn wire.PSN, off uint32) bool {
	s := r.liveWR(idx)
	if s == nil {
		return false
	}
	r.build(now, s, psn, off, true)
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
	p, bounce := r.out.begin(now, op, psn, retx)
	switch s.wr.Kind {
	case OpSend, OpSendInv:
		p.Send.MSN, p.Send.Offset, p.Send.Total = s.msn, off, total
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
	if r.out.finish(now, p, n, a, b, wrTag(s.seq, off)) {
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
// (none, for a Read that completed or failed already). It reports false when the response
// does not fit the Read, which fails the connection.
func (r *requester) onReadResponse(now int64, p *wire.Packet) bool {
	for seq := r.head; seq != r.next; seq++ {
		s := &r.wrs[seq&r.mask]
		if s.wr.Kind != OpRead || s.done || s.firstPSN != p.ReadResp.ReqPSN {
			continue
		}
		if !scatter(&s.wr.SGL, s.wr.NSGE, p.ReadResp.Offset, p) {
			r.h.fail(now, StatusRemoteError, int64(s.seq), refusedPeer(wire.SynAck, "a read response past the end of its Read"))
			return false
		}
		s.readGot += uint32(p.PayloadLen())
		r.snd.PeerHeard(now, r.reads > 0)
		r.completeSends()
		return true
	}
	return true
}

// completeSends completes, in posting order, every finished work request at the head.
func (r *requester) completeSends() {
	for r.head != r.next {
		s := &r.wrs[r.head&r.mask]
		if !s.sentAll || s.acked < s.npkts || s.zc > 0 {
			return
		}
		if s.wr.Kind == OpRead {
			if s.readGot < s.total {
				return
			}
			r.reads--
		}
		r.completeWR(s, StatusSuccess)
		r.head++
	}
}

// completeWR reports a work request's completion and frees its slot.
func (r *requester) completeWR(s *wrState, st Status) {
	c := Completion{Context: s.wr.Context, Op: s.wr.Kind, Status: st}
	if st == StatusSuccess {
		c.Bytes = s.total
	}
	s.done = true
	s.wr = WorkRequest{} // drop references to caller memory
	r.h.deliver(c)
}

// abandon ends every request of a failed QP: the one with sequence number failSeq (if
// any; for a failure that names none, other than a cancellation, and for a budget that ran
// out, the oldest outstanding one) completes with st, the rest cancelled, each once the link
// is done with it (drainFailed).
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
	r.failSt, r.failTarget = st, target
	r.drainFailed()
	r.next, r.sendOff, r.reads = r.tail, 0, 0
	r.credWait = 0
}

// drainFailed completes, in posting order, the requests of a failed QP whose packets the
// link no longer reads: the one the failure names with its status, the rest cancelled.
func (r *requester) drainFailed() {
	for r.head != r.tail {
		s := &r.wrs[r.head&r.mask]
		if !s.done {
			if s.zc > 0 {
				return
			}
			st := StatusCancelled
			if int64(s.seq) == r.failTarget {
				st = r.failSt
			}
			r.completeWR(s, st)
		}
		r.head++
	}
}

// liveWR returns the work request a tag's index names, or nil when that request has
// completed (its slot may hold a later one).
func (r *requester) liveWR(idx uint32) *wrState {
	s := &r.wrs[idx&r.mask]
	if s.seq&0x7fffffff != idx || s.done {
		return nil
	}
	return s
}

// The senderHooks.

// blame is the sequence number of the work request a tag names, or -1 for a read job.
func (r *requester) blame(tag uint64) int64 {
	job, idx, _ := splitTag(tag)
	if job {
		return -1
	}
	return int64(idx)
}

// addRNR counts an RNR NAK arriving at now for the request of tag (a packet in flight: its
// request is outstanding) and returns its count and when the first arrived.
func (r *requester) addRNR(tag uint64, now int64) (int, int64, bool) {
	job, idx, _ := splitTag(tag)
	if job {
		return 0, 0, false
	}
	s := &r.wrs[idx&r.mask]
	if s.rnr == 0 {
		s.rnrSince = now
	}
	s.rnr++
	return s.rnr, s.rnrSince, true
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

// probe sends a Read probe: an Ack with FlagAckReq.
func (r *requester) probe(now int64) bool {
	if !r.out.canTransmit() {
		return false
	}
	r.out.sendAck(now, wire.FlagAckReq)
	return true
}

// fail ends the connection (the sender gave up).
func (r *requester) fail(now int64, st Status, seq int64, cause error) {
	r.h.fail(now, st, seq, cause)
}
