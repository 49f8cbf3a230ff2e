package transport

import (
	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// responder is the QP's target side: what the peer asks of it. It holds the posted
// receives (its own ring, or taken from an SRQ) and places Send messages into them,
// completing them in MSN order (the QP pops them); places Writes into the memory the
// MemoryResolver grants; and answers the peer's Reads with read jobs, whose response
// packets it builds in our stream (through conn) when the sender lets them leave. It calls
// nothing of its QP: for each packet of the peer it returns a verdict (placed, the NAK to
// answer, the failure that ends the connection), and the QP acts on it. Engine goroutine
// only.
type responder struct {
	out   *conn
	recvQ *spsc[Receive, *Receive] // consumer side: the application posts
	srq   *SRQ                     // QPConfig.SRQ: where receives come from instead of recvQ
	res   MemoryResolver
	pd    uint32
	ird   int // Reads the peer may have outstanding here (negotiated)

	recvs   []recvState // ring of receives, indexed by MSN & mask; grows up to recvCap
	mask    uint32
	recvCap uint32 // the most receives outstanding (RecvDepth rounded up)
	base    uint32 // MSN of the oldest receive not completed
	posted  uint32 // MSN limit: receives posted so far (base + outstanding)

	// read responses this QP owes the peer (the peer's Reads), in our stream; the slice
	// grows (a job keeps its index) up to maxJobs
	jobs       []readJob
	maxJobs    int
	activeJobs int // jobs with active set
}

// recvState is one posted receive and the message being placed into it.
type recvState struct {
	r         Receive
	ended     bool   // it completes with st whatever arrived (cancelled, overrun)
	st        Status // its status once ended
	got       uint32 // bytes placed
	total     uint32 // message length (known from the first packet seen)
	started   bool
	solicited bool
	invToken  uint32
	inv       bool
	lastPSN   wire.PSN // PSN of the message's last packet, once it arrived
	haveLast  bool
}

// readJob is a Read the peer asked of us: its response packets are sent in our stream.
type readJob struct {
	active  bool
	reqPSN  wire.PSN
	mem     memreg.Span // the resolved memory (and the region hold, released by endJob)
	sentOff uint32      // bytes transmitted once
	npkts   uint32
	acked   uint32
	sentAll bool
	zc      uint32 // zero-copy packets of it the link has not reported done
}

// takeReceives moves posted receives into the receive ring.
func (rs *responder) takeReceives() bool {
	moved := false
	for rs.posted-rs.base < rs.recvCap {
		r := rs.recvQ.peek()
		if r == nil {
			break
		}
		rs.room()
		rs.recvs[rs.posted&rs.mask] = recvState{r: *r}
		rs.recvQ.pop()
		rs.posted++
		moved = true
	}
	return moved
}

// cancelPost sets *c to the completion, cancelled, of the oldest receive posted to a QP
// that was flushed and not taken (freePost ends it); false when there is none. Receives in
// the ring go first (pop).
func (rs *responder) cancelPost(c *Completion) bool {
	if rs.base != rs.posted {
		return false
	}
	r := rs.recvQ.peek()
	if r == nil {
		return false
	}
	*c = Completion{Receive: r, Context: r.Context, Op: OpReceive, Status: StatusCancelled}
	return true
}

// freePost ends the receive whose completion cancelPost returned, once it was delivered.
func (rs *responder) freePost() { rs.recvQ.pop() }

// room makes sure the receive ring has a slot for one more receive (posted-base is below
// recvCap), doubling it if it is full.
func (rs *responder) room() {
	if rs.posted-rs.base == uint32(len(rs.recvs)) {
		rs.recvs = growRing(rs.recvs, rs.base, rs.posted)
		rs.mask = uint32(len(rs.recvs) - 1)
	}
}

// quiet reports whether no read job is active: no Read of the peer to answer.
func (rs *responder) quiet() bool { return rs.activeJobs == 0 }

// creditLimit is the MSN limit the QP advertises in its acknowledgements.
func (rs *responder) creditLimit() uint32 {
	if rs.srq != nil {
		return rs.base + srqCredit
	}
	return rs.posted
}

// verdict is what the responder decided about a data packet of the peer: whether it was
// placed (it counts as received), the NAK to answer it with (nak SynAck: none) and, when
// it refused the packet (cause not nil), the failure that ends the connection (fail). The
// QP acts on it. It is at most four words, so that it is returned in registers, not
// through memory: one is returned for every data packet.
type verdict struct {
	placed bool
	nak    wire.Syndrome
	nakPSN wire.PSN
	cause  error
}

// failed reports whether the verdict ends the connection.
func (v verdict) failed() bool { return v.cause != nil }

// fail is the failure that a refusal ends the connection with: nothing outstanding
// completes with a status of its own, everything is cancelled.
func (v verdict) fail() failure { return failure{StatusCancelled, -1, v.cause} }

// placed is the verdict of a packet taken.
var placed = verdict{placed: true}

// accept places a new data packet of the peer (Send, Write, ReadRequest), unless the
// verdict says it was refused: it does not count as received then (no receive posted:
// RNR; or the connection fails).
func (rs *responder) accept(p *wire.Packet) verdict {
	switch p.Opcode {
	case wire.OpSendFirst, wire.OpSendMiddle, wire.OpSendLast, wire.OpSendOnly, wire.OpSendLastInv, wire.OpSendOnlyInv:
		return rs.acceptSend(p)
	case wire.OpWrite:
		return rs.acceptWrite(p)
	case wire.OpReadRequest:
		return rs.acceptRead(p)
	}
	return verdict{}
}

// refuse is the verdict that answers the packet psn with a NAK of syn and ends the
// connection (Cause: what was refused).
func refuse(syn wire.Syndrome, psn wire.PSN, what string) verdict {
	return verdict{nak: syn, nakPSN: psn, cause: refusedPeer(syn, what)}
}

// acceptWrite places a Write packet. Every packet checks the whole Write, so a refused
// Write writes nothing, in whatever order its packets arrive.
func (rs *responder) acceptWrite(p *wire.Packet) verdict {
	total := p.RDMA.Length
	if total == 0 {
		return placed
	}
	if uint64(total) > MaxMessage {
		// Longer than any message may be (no requester posts one): invalid.
		return refuse(wire.SynNakInvalid, p.PSN, "a Write longer than any message")
	}
	var dst memreg.Span
	var err error
	if p.RDMA.Addr > ^uint64(0)-uint64(total) {
		err = memreg.ErrAccess // the range wraps past 2^64
	} else {
		dst, err = rs.res.Acquire(memreg.PD(rs.pd), p.RDMA.Token, p.RDMA.Addr, total, memreg.AccessRemoteWrite)
	}
	if err == nil && uint64(dst.Len()) < uint64(total) {
		releaseSpan(&dst)
		err = memreg.ErrAccess
	}
	if err != nil {
		return refuse(wire.SynNakAccess, p.PSN, "a Write outside the memory it may access")
	}
	copyPayload(&dst, uint64(p.RDMA.Offset), p)
	releaseSpan(&dst)
	return placed
}

// acceptSend places a Send packet into the receive its MSN names.
func (rs *responder) acceptSend(p *wire.Packet) verdict {
	msn := p.Send.MSN
	if msnBefore(msn, rs.base) {
		return placed // its message completed already: a late copy
	}
	if !msnBefore(msn, rs.posted) && rs.srq == nil {
		// Received packets are handled before the QPs take what was posted in this poll
		// round: a receive posted before the Send arrived must take it, not an RNR NAK.
		rs.takeReceives()
	}
	if !msnBefore(msn, rs.posted) && (rs.srq == nil || !rs.takeSRQ(msn)) {
		return verdict{nak: wire.SynNakRNR, nakPSN: p.PSN} // no receive posted for it yet
	}
	r := &rs.recvs[msn&rs.mask]
	if !r.started {
		r.started, r.total = true, p.Send.Total
		if int(r.total) > r.r.Len() {
			// Too large for the receive: the receive completes with data overrun, the
			// sender's request with data error, and both QPs fail. In MSN order: the
			// receives before it are cancelled first.
			for m := rs.base; m != msn; m++ {
				rs.end(m, StatusCancelled)
			}
			rs.end(msn, StatusDataOverrun)
			return refuse(wire.SynNakInvalid, p.PSN, "a Send larger than its receive")
		}
	} else if r.total != p.Send.Total {
		return refuse(wire.SynNakInvalid, p.PSN, "a Send whose packets disagree on its length")
	}
	if p.Opcode == wire.OpSendLastInv || p.Opcode == wire.OpSendOnlyInv {
		// Invalidate when the packet carrying the token is taken, so that a token that
		// cannot be invalidated refuses this very packet: the connection is aborted and the
		// sender's SendAndInvalidate fails, not a later request (NDKPI: "the receiving
		// provider must abort the connection if the token is invalid").
		if err := rs.res.Invalidate(memreg.PD(rs.pd), p.Send.InvToken); err != nil {
			return refuse(wire.SynNakInvalToken, p.PSN, "a SendAndInvalidate of a token it may not invalidate")
		}
	}
	if !scatter(&r.r.SGL, r.r.NSGE, p.Send.Offset, p) {
		return refuse(wire.SynNakInvalid, p.PSN, "a Send packet past the end of its receive")
	}
	r.got += uint32(p.PayloadLen())
	if p.Send.Offset+uint32(p.PayloadLen()) == r.total {
		r.lastPSN, r.haveLast = p.PSN, true
	}
	switch p.Opcode {
	case wire.OpSendLast, wire.OpSendOnly, wire.OpSendLastInv, wire.OpSendOnlyInv:
		r.solicited = p.Flags&wire.FlagSolicited != 0
		if p.Opcode == wire.OpSendLastInv || p.Opcode == wire.OpSendOnlyInv {
			r.inv, r.invToken = true, p.Send.InvToken
		}
	}
	return placed
}

// pop sets *c to the completion of the oldest outstanding receive if it has finished (free
// ends it); false when it has not (or none is outstanding), *c untouched. Receives
// complete in MSN order: once their message has fully arrived and its last packet is
// behind the peer's stream's cumulative point cum (a receive completion promises that what
// the peer posted before that Send, Writes, has landed), or once ended (cancelled,
// overrun).
func (rs *responder) pop(cum wire.PSN, c *Completion) bool {
	if rs.base == rs.posted {
		return false
	}
	r := &rs.recvs[rs.base&rs.mask]
	if r.ended {
		*c = Completion{Receive: &r.r, Context: r.r.Context, Op: OpReceive, Status: r.st}
		return true
	}
	if !r.started || r.got < r.total || !r.haveLast || !r.lastPSN.Less(cum) {
		return false
	}
	op, tok := OpReceive, uint32(0)
	if r.inv {
		op, tok = OpReceiveInv, r.invToken // invalidated when its packet was taken
	}
	c.set(nil, &r.r, r.r.Context, op, StatusSuccess, r.total, r.solicited, tok)
	return true
}

// free ends the receive whose completion pop returned, once it was delivered.
func (rs *responder) free() {
	rs.recvs[rs.base&rs.mask] = recvState{}
	rs.base++
}

// end makes the receive of message msn (outstanding) complete with st, in its turn.
func (rs *responder) end(msn uint32, st Status) {
	r := &rs.recvs[msn&rs.mask]
	r.ended, r.st = true, st
}

// abandon ends the peer's requests of a failed QP: read jobs end (their holds released
// once the link is done), outstanding receives complete cancelled (pop, in MSN order).
func (rs *responder) abandon() {
	for i := range rs.jobs {
		rs.endJob(&rs.jobs[i])
	}
	for m := rs.base; m != rs.posted; m++ {
		if r := &rs.recvs[m&rs.mask]; !r.ended {
			rs.end(m, StatusCancelled)
		}
	}
}

// acceptRead starts a read job for the peer's ReadRequest.
func (rs *responder) acceptRead(p *wire.Packet) verdict {
	free, busy := -1, 0
	for i := range rs.jobs {
		j := &rs.jobs[i]
		switch {
		case !j.active:
			if free < 0 && j.zc == 0 { // a slot still transmitting keeps its hold
				free = i
			}
		case !j.sentAll:
			busy++ // only reads still being answered count against IRD
		}
	}
	if busy >= rs.ird {
		return refuse(wire.SynNakInvalid, p.PSN, "more Reads at once than the negotiated IRD")
	}
	if free < 0 && len(rs.jobs) < rs.maxJobs {
		free = len(rs.jobs)
		rs.jobs = append(rs.jobs, make([]readJob, min(max(len(rs.jobs), 1), rs.maxJobs-len(rs.jobs)))...)
	}
	if free < 0 {
		// Every slot holds answered reads waiting for their acks: not recorded, so the
		// request is taken when retransmitted, after the acks freed a slot.
		return verdict{}
	}
	length := uint64(p.RDMA.Length) // at least 1 (wire.Parse)
	if length > MaxMessage {
		// Longer than any message may be (no requester posts one): invalid.
		return refuse(wire.SynNakInvalid, p.PSN, "a Read longer than any message")
	}
	var src memreg.Span
	err := memreg.ErrAccess // a range that wraps past 2^64
	if p.RDMA.Addr <= ^uint64(0)-length {
		src, err = rs.res.Acquire(memreg.PD(rs.pd), p.RDMA.Token, p.RDMA.Addr, p.RDMA.Length, memreg.AccessRemoteRead)
	}
	if err == nil && uint64(src.Len()) != length {
		releaseSpan(&src)
		err = memreg.ErrAccess
	}
	if err != nil {
		return refuse(wire.SynNakAccess, p.PSN, "a Read outside the memory it may access")
	}
	mss := uint64(rs.out.mss) // at least 1: both sides' MaxPayload are at least wire.MinMaxPayload
	rs.jobs[free] = readJob{active: true, reqPSN: p.PSN, mem: src, npkts: uint32((length + mss - 1) / mss)}
	rs.activeJobs++
	return placed
}

// startNext returns the next new packet of a read response, if one is waiting; ok is
// false when none is. A read executes only after every earlier request of the peer arrived
// (its request is behind the peer's stream's cumulative point cum), so that it sees the
// Writes posted before it. Nothing is committed until sent.
func (rs *responder) startNext(cum wire.PSN) (pk packet, ok bool) {
	if rs.activeJobs == 0 {
		return packet{}, false // the common case: no Read of the peer to answer, no slot to scan
	}
	for i := range rs.jobs {
		j := &rs.jobs[i]
		if !j.active || j.sentAll || !j.reqPSN.Less(cum) {
			continue
		}
		return packet{o: jobOwner(i, j.sentOff), n: min(uint32(rs.out.mss), uint32(j.mem.Len())-j.sentOff)}, true
	}
	return packet{}, false
}

// sent builds and queues packet pk, which startNext returned and the sender recorded as
// psn, and moves its job on.
func (rs *responder) sent(now int64, pk packet, psn wire.PSN) {
	j := &rs.jobs[pk.o.idx]
	rs.build(now, int(pk.o.idx), psn, pk.o.off, false)
	j.sentOff += pk.n
	if j.sentOff == uint32(j.mem.Len()) {
		j.sentAll = true
	}
}

// resend rebuilds the read-response packet o with its PSN, as a retransmission; false when
// its job has ended since.
func (rs *responder) resend(now int64, o owner, psn wire.PSN) bool {
	if int(o.idx) >= len(rs.jobs) || !rs.jobs[o.idx].active {
		return false
	}
	rs.build(now, int(o.idx), psn, o.off, true)
	return true
}

// build encodes and queues the read-response packet of job i at offset off.
func (rs *responder) build(now int64, i int, psn wire.PSN, off uint32, retx bool) {
	j := &rs.jobs[i]
	total := uint32(j.mem.Len())
	n := min(uint32(rs.out.mss), total-off)
	p, bounce := rs.out.begin(now, wire.OpReadResponse, psn, retx, n)
	p.ReadResp = wire.ReadRespExt{ReqPSN: j.reqPSN, Offset: off}
	if off+n >= total {
		p.Flags |= wire.FlagLast | wire.FlagAckReq
	}
	a, b := spanPieces(&j.mem, off, n, bounce)
	if rs.out.finish(p, n, a, b, jobOwner(i, off)) {
		j.zc++
	}
}

// onAcked counts one acknowledged packet of read job i; the job ends with its last.
func (rs *responder) onAcked(i uint32) {
	if int(i) < len(rs.jobs) && rs.jobs[i].active {
		j := &rs.jobs[i]
		if j.acked++; j.sentAll && j.acked >= j.npkts {
			rs.endJob(j)
		}
	}
}

// copyPayload copies a packet's payload segments into dst at byte offset off.
func copyPayload(dst *memreg.Span, off uint64, p *wire.Packet) {
	for i := 0; i < p.NPayload; i++ {
		off += uint64(dst.CopyIn(off, p.Payload[i]))
	}
}

// scatter copies a packet's payload into an SGL at byte offset off; false if it does not
// fit.
func scatter(sgl *[MaxSGE][]byte, nsge uint8, off uint32, p *wire.Packet) bool {
	if uint64(off)+uint64(p.PayloadLen()) > uint64(sglLen(sgl, nsge)) {
		return false
	}
	sge, pos := 0, int(off)
	for sge < int(nsge) && pos >= len(sgl[sge]) {
		pos -= len(sgl[sge])
		sge++
	}
	for i := 0; i < p.NPayload; i++ {
		src := p.Payload[i]
		for len(src) > 0 {
			c := copy(sgl[sge][pos:], src)
			src = src[c:]
			pos += c
			if pos == len(sgl[sge]) {
				sge++
				pos = 0
			}
		}
	}
	return true
}
