package transport

import (
	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport/ack"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// takeReceives moves posted receives into the receive ring (or, in the error state,
// completes them cancelled).
func (q *QP) takeReceives(now int64) bool {
	rs := &q.resp
	moved := false
	// Cancelled once the QP is flushed; a QP whose peer disconnected keeps them posted.
	errored := (q.State() == QPError || q.State() == QPDisconnected) && !q.held
	for rs.posted-rs.base < uint32(len(rs.recvs)) {
		r := q.recvQ.peek()
		if r == nil {
			break
		}
		if errored {
			c := Completion{Context: r.Context, Op: OpReceive, Status: StatusCancelled}
			q.recvQ.pop()
			q.deliver(&c)
			moved = true
			continue
		}
		rs.recvs[rs.posted&rs.mask] = recvState{r: *r}
		q.recvQ.pop()
		rs.posted++
		moved = true
	}
	return moved
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
			q.resp.nakSend = true
			if q.resp.nakSyn == wire.SynAck {
				q.resp.nakSyn, q.resp.nakPSN = wire.SynNakRemoteOp, p.PSN
			}
		}
		return
	}
	if p.Opcode == wire.OpAck {
		if p.Flags&wire.FlagAckReq != 0 {
			q.resp.ackNow = true // a probe (probeRead): answer it
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
	rs := &q.resp
	if q.e.cfg.GoBackN && p.PSN != rs.rx.Cumulative() && rs.rx.Check(p.PSN) == ack.New {
		// A go-back-N receiver (as RoCE NICs are) takes packets only in order: anything
		// after a gap is dropped and the sender learns where to go back to.
		q.e.ctr.outOfWindow.Add(1)
		q.nak(wire.SynNakSeq, rs.rx.Cumulative())
		return
	}
	switch rs.rx.Check(p.PSN) {
	case ack.Duplicate:
		q.ctr.dupRecv.Add(1)
		rs.ackNow = true // our ack was probably lost: repeat it
		return
	case ack.TooOld, ack.TooNew:
		// No sender that respects the window sends these: stale or forged. Not answered.
		q.e.ctr.outOfWindow.Add(1)
		return
	}
	if !q.accept(now, p) {
		return
	}
	rs.rx.Receive(p.PSN)
	// A receive completes only once every earlier packet of the peer arrived: a receive
	// completion promises that what the peer posted before that Send (Writes) has landed.
	q.completeReceives(now)
	n := p.PayloadLen()
	q.ctr.rxPackets.Add(1)
	q.ctr.rxBytes.Add(uint64(n))
	if rs.ackPending == 0 {
		rs.ackFirst = now
	}
	rs.ackPending++
	rs.ackEchoTS, rs.ackArrival = p.TS, now
	switch {
	case rs.rx.HasGap():
		rs.ackNow = true // loss recovery waits for this: at once
	case p.Flags&wire.FlagAckReq != 0 && !rs.ackSoon:
		// Acknowledged in the next poll round, so that a reply posted in the meantime (a
		// ping-pong's answer) carries the ack instead of a packet of its own.
		rs.ackSoon, rs.ackSoonRound = true, q.e.round
	}
}

// accept places a new data packet. It reports false when the packet is refused and must not
// count as received (no receive posted: RNR; or the QP failed).
func (q *QP) accept(now int64, p *wire.Packet) bool {
	switch p.Opcode {
	case wire.OpSendFirst, wire.OpSendMiddle, wire.OpSendLast, wire.OpSendOnly, wire.OpSendLastInv, wire.OpSendOnlyInv:
		return q.acceptSend(now, p)
	case wire.OpWrite:
		// Every packet checks the whole Write, so a refused Write writes nothing, in
		// whatever order its packets arrive.
		total := p.RDMA.Length
		if total == 0 {
			return true
		}
		if uint64(total) > MaxMessage {
			// Longer than any message may be (no requester posts one): invalid.
			q.nak(wire.SynNakInvalid, p.PSN)
			q.fail(now, StatusCancelled, -1)
			return false
		}
		var dst memreg.Span
		var err error
		if p.RDMA.Addr > ^uint64(0)-uint64(total) {
			err = ErrAccess // the range wraps past 2^64
		} else {
			dst, err = q.e.cfg.Resolver.Acquire(memreg.PD(q.cfg.PD), p.RDMA.Token, p.RDMA.Addr, total, AccessRemoteWrite)
		}
		if err == nil && uint64(dst.Len()) < uint64(total) {
			releaseSpan(&dst)
			err = ErrAccess
		}
		if err != nil {
			q.nak(wire.SynNakAccess, p.PSN)
			q.fail(now, StatusCancelled, -1)
			return false
		}
		copyPayload(&dst, uint64(p.RDMA.Offset), p)
		releaseSpan(&dst)
		return true
	case wire.OpReadRequest:
		return q.acceptRead(now, p)
	case wire.OpReadResponse:
		return q.acceptReadResponse(now, p)
	}
	return false
}

// acceptSend places a Send packet into the receive its MSN names.
func (q *QP) acceptSend(now int64, p *wire.Packet) bool {
	rs := &q.resp
	msn := p.Send.MSN
	if msnBefore(msn, rs.base) {
		return true // its message completed already: a late copy
	}
	if !msnBefore(msn, rs.posted) && q.srq == nil {
		// Received packets are handled before the QPs take what was posted in this poll
		// round: a receive posted before the Send arrived must take it, not an RNR NAK.
		q.takeReceives(now)
	}
	if !msnBefore(msn, rs.posted) && (q.srq == nil || !q.takeSRQ(msn)) {
		q.nak(wire.SynNakRNR, p.PSN) // no receive posted for it yet
		return false
	}
	r := &rs.recvs[msn&rs.mask]
	if !r.started {
		r.started, r.total = true, p.Send.Total
		if int(r.total) > r.r.Len() {
			// Too large for the receive: the receive completes with data overrun, the
			// sender's request with data error, and both QPs fail. In MSN order: the
			// receives before it are cancelled first.
			q.nak(wire.SynNakInvalid, p.PSN)
			for rs.base != msn {
				q.cancelReceive()
			}
			c := Completion{Context: r.r.Context, Op: OpReceive, Status: StatusDataOverrun}
			*r = recvState{}
			rs.base++
			q.deliver(&c)
			q.fail(now, StatusCancelled, -1)
			return false
		}
	} else if r.total != p.Send.Total {
		q.nak(wire.SynNakInvalid, p.PSN)
		q.fail(now, StatusCancelled, -1)
		return false
	}
	if p.Opcode == wire.OpSendLastInv || p.Opcode == wire.OpSendOnlyInv {
		// Invalidate when the packet carrying the token is taken, so that a token that
		// cannot be invalidated refuses this very packet: the connection is aborted and the
		// sender's SendAndInvalidate fails, not a later request (NDKPI: "the receiving
		// provider must abort the connection if the token is invalid").
		if err := q.e.cfg.Resolver.Invalidate(memreg.PD(q.cfg.PD), p.Send.InvToken); err != nil {
			q.nak(wire.SynNakInvalToken, p.PSN)
			q.fail(now, StatusCancelled, -1)
			return false
		}
	}
	if !scatter(&r.r.SGL, r.r.NSGE, p.Send.Offset, p) {
		q.nak(wire.SynNakInvalid, p.PSN)
		q.fail(now, StatusCancelled, -1)
		return false
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
	return true
}

// completeReceives completes, in MSN order, every receive at the head whose message has fully
// arrived. A SendAndInvalidate invalidates its token first; a token that cannot be
// invalidated aborts the connection.
func (q *QP) completeReceives(now int64) {
	rs := &q.resp
	for rs.base != rs.posted {
		r := &rs.recvs[rs.base&rs.mask]
		if !r.started || r.got < r.total || !r.haveLast || !r.lastPSN.Less(rs.rx.Cumulative()) {
			return
		}
		c := Completion{Context: r.r.Context, Op: OpReceive, Status: StatusSuccess, Bytes: r.total, Solicited: r.solicited}
		if r.inv {
			c.Op, c.InvToken = OpReceiveInv, r.invToken // invalidated when its packet was taken
		}
		*r = recvState{}
		rs.base++
		q.deliver(&c)
	}
}

// acceptRead starts a read job for the peer's ReadRequest.
func (q *QP) acceptRead(now int64, p *wire.Packet) bool {
	free, busy := -1, 0
	for i := range q.req.jobs {
		j := &q.req.jobs[i]
		switch {
		case !j.active:
			if free < 0 && j.zc == 0 { // a slot still transmitting keeps its hold
				free = i
			}
		case !j.sentAll:
			busy++ // only reads still being answered count against IRD
		}
	}
	if busy >= q.ird {
		q.nak(wire.SynNakInvalid, p.PSN) // more Reads than the negotiated IRD
		q.fail(now, StatusCancelled, -1)
		return false
	}
	if free < 0 {
		// Every slot holds answered reads waiting for their acks: not recorded, so the
		// request is taken when retransmitted, after the acks freed a slot.
		return false
	}
	length := uint64(p.RDMA.Length) // at least 1 (wire.Parse)
	if length > MaxMessage {
		// Longer than any message may be (no requester posts one): invalid.
		q.nak(wire.SynNakInvalid, p.PSN)
		q.fail(now, StatusCancelled, -1)
		return false
	}
	var src memreg.Span
	err := ErrAccess // a range that wraps past 2^64
	if p.RDMA.Addr <= ^uint64(0)-length {
		src, err = q.e.cfg.Resolver.Acquire(memreg.PD(q.cfg.PD), p.RDMA.Token, p.RDMA.Addr, p.RDMA.Length, AccessRemoteRead)
	}
	if err == nil && uint64(src.Len()) != length {
		releaseSpan(&src)
		err = ErrAccess
	}
	if err != nil {
		q.nak(wire.SynNakAccess, p.PSN)
		q.fail(now, StatusCancelled, -1)
		return false
	}
	mss := uint64(q.mss) // at least 1: both sides' MaxPayload are at least wire.MinMaxPayload
	q.req.jobs[free] = readJob{active: true, reqPSN: p.PSN, mem: src, npkts: uint32((length + mss - 1) / mss)}
	q.req.activeJobs++
	return true
}

// acceptReadResponse places response bytes into the Read that asked for them.
func (q *QP) acceptReadResponse(now int64, p *wire.Packet) bool {
	r := &q.req
	for seq := r.head; seq != r.next; seq++ {
		s := &r.wrs[seq&r.mask]
		if s.wr.Kind != OpRead || s.done || s.firstPSN != p.ReadResp.ReqPSN {
			continue
		}
		if !scatter(&s.wr.SGL, s.wr.NSGE, p.ReadResp.Offset, p) {
			q.fail(now, StatusRemoteError, int64(s.seq))
			return false
		}
		s.readGot += uint32(p.PayloadLen())
		q.readHeard(now)
		q.completeSends(now)
		return true
	}
	return true // for a Read that completed or failed already: nothing to place
}

// nak schedules a negative acknowledgement. Of several RNR refusals before the NAK leaves,
// the earliest is kept: the sender retries from it, and the later packets come again anyway.
func (q *QP) nak(syn wire.Syndrome, psn wire.PSN) {
	rs := &q.resp
	if syn == wire.SynNakRNR && rs.nakSend && rs.nakSyn == wire.SynNakRNR && rs.nakPSN.Less(psn) {
		return
	}
	rs.nakSyn, rs.nakPSN, rs.nakSend = syn, psn, true
}

// maybeAck sends an acknowledgement when one is due and returns when the next one will be.
func (q *QP) maybeAck(now int64) int64 {
	rs := &q.resp
	e := q.e
	// New receives are advertised, and requested acks sent, one poll round later: data
	// leaving in that round (the application's answer) carries them (piggyback).
	credits := q.creditsDue()
	if credits && rs.credRound == 0 {
		rs.credRound = e.round
	}
	soon := (rs.ackSoon && e.round != rs.ackSoonRound) || (credits && e.round != rs.credRound)
	due := rs.nakSend || rs.ackNow || soon || rs.ackPending >= e.cfg.AckEvery ||
		(rs.ackPending > 0 && now-rs.ackFirst >= int64(e.cfg.AckDelay))
	if due && e.canTransmit() {
		q.sendAck(now, 0)
		return 0
	}
	if rs.ackSoon || credits {
		return now // the next round: do not sleep
	}
	if rs.ackPending > 0 {
		return rs.ackFirst + int64(e.cfg.AckDelay)
	}
	return 0
}

// ackExt is the acknowledgement of the peer's stream as it stands now.
func (q *QP) ackExt(now int64) wire.AckExt {
	rs := &q.resp
	return wire.AckExt{
		AckPSN: rs.rx.Cumulative(), SACK: rs.rx.SACK(), Credits: q.creditLimit(),
		EchoTS: rs.ackEchoTS, Delay: uint32(max(now-rs.ackArrival, 0) / 1000),
	}
}

// ackSent records that the current acknowledgement went out.
func (q *QP) ackSent() {
	rs := &q.resp
	rs.ackPending, rs.ackNow, rs.ackSoon, rs.lastCred, rs.credRound = 0, false, false, rs.posted, 0
}

// creditsDue reports whether receives were posted since the last credit limit went out.
// An SRQ's QP advertises no limit: it never has one to update.
func (q *QP) creditsDue() bool { return q.srq == nil && q.resp.posted != q.resp.lastCred }

// piggyback makes data packet p (with n payload bytes) carry the pending acknowledgement
// of the peer's stream, if there is one, no NAK is waiting (those go on their own) and the
// datagram has room for it. Engine goroutine, while p is built.
func (q *QP) piggyback(now int64, p *wire.Packet, n int) {
	rs := &q.resp
	credits := q.creditsDue()
	if rs.nakSend || (rs.ackPending == 0 && !rs.ackNow && !rs.ackSoon && !credits) {
		return
	}
	// The datagram must fit the size agreed at setup (the smaller of both links'), whose
	// room for extension and payload is q.mss+maxDataExt.
	if ext, _ := wire.ExtLen(p.Opcode); ext+wire.AckExtLen+n > q.mss+maxDataExt {
		return // a full-size packet: the ack goes on its own
	}
	p.Flags |= wire.FlagAck
	p.Ack = q.ackExt(now)
	q.ackSent()
	q.ctr.acksPiggybacked.Add(1)
}

// sendAck queues an Ack (or the pending NAK) for the peer's stream, with flags (FlagAckReq
// makes it a probe).
func (q *QP) sendAck(now int64, flags wire.Flags) {
	e := q.e
	rs := &q.resp
	i := e.txSlot()
	p := &e.txWire
	*p = wire.Packet{}
	p.Header = wire.Header{Opcode: wire.OpAck, Flags: flags, DestQPN: q.peerQPN, Cookie: q.cookie, TS: uint32(now / 1000)}
	p.Ack = q.ackExt(now)
	if rs.nakSend {
		p.Ack.Syndrome, p.Ack.NakPSN = rs.nakSyn, rs.nakPSN
		if rs.nakSyn == wire.SynNakRNR {
			p.Ack.Value = uint16(min(q.e.cfg.RNRDelay/16/1000, 0xffff)) // the field's largest delay
		}
		q.ctr.naksSent.Add(1)
		q.ctr.naksSentBy[int(rs.nakSyn)%nakKinds].Add(1)
		rs.nakSend = false
		if rs.nakSyn == wire.SynNakRNR {
			rs.nakSyn = wire.SynAck
		}
	} else {
		q.ctr.acksSent.Add(1)
	}
	hl, err := wire.Encode(e.txHdr[i][:], p)
	if err != nil {
		panic("transport: encoding an ack failed: " + err.Error())
	}
	e.emit(i, q.peer, q.srcPort, hl)
	q.ackSent()
}

// cancelReceives completes every outstanding receive cancelled, in MSN order.
func (q *QP) cancelReceives() {
	for q.resp.base != q.resp.posted {
		q.cancelReceive()
	}
}

// cancelReceive completes the oldest outstanding receive cancelled.
func (q *QP) cancelReceive() {
	rs := &q.resp
	r := &rs.recvs[rs.base&rs.mask]
	c := Completion{Context: r.r.Context, Op: OpReceive, Status: StatusCancelled}
	*r = recvState{}
	rs.base++
	q.deliver(&c)
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
