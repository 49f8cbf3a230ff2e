package transport

import (
	"time"

	"github.com/xdpndk/xdpndk/transport/ack"
	"github.com/xdpndk/xdpndk/transport/wire"
)

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

// poll does one round of the QP's work.
func (q *QP) poll(now int64) (next int64, busy bool) {
	if q.flushReq.Load() {
		q.flushReq.Store(false)
		q.flush(now, StatusCancelled, -1)
		busy = true
	}
	busy = q.takeReceives(now) || busy
	switch q.State() {
	case QPError, QPDisconnected:
		if q.held {
			// The peer disconnected: what is posted stays posted, and what is outstanding
			// stays outstanding, until the application flushes (NDKPI: a provider should
			// not flush when it indicates a disconnect that came from the peer).
			return 0, busy
		}
		busy = q.cancelPosts() || busy
		if q.resp.nakSend && q.e.tx.ok() {
			q.sendAck(now, 0)
		}
		return 0, busy
	}
	busy = q.takeSends() || busy
	next, fired := q.timers(now)
	busy = busy || fired
	if q.State() != QPConnected {
		return 0, true // a timer failed the QP: its completions were just delivered
	}
	if q.transmit(now, &next) {
		busy = true
	}
	if d := q.maybeAck(now); d > 0 && (next == 0 || d < next) {
		next = d
	}
	return next, busy
}

// takeSends moves posted work requests into the active ring.
func (q *QP) takeSends() bool {
	r := &q.req
	moved := false
	for r.tail-r.head < uint32(len(r.wrs)) {
		wr := q.sendQ.peek()
		if wr == nil {
			break
		}
		s := &r.wrs[r.tail&r.mask]
		*s = wrState{wr: *wr, total: uint32(wr.Len()), seq: r.tail}
		q.sendQ.pop()
		r.tail++
		moved = true
	}
	return moved
}

// cancelPosts completes everything posted to a QP in the error state as cancelled.
func (q *QP) cancelPosts() bool {
	if q.req.head != q.req.tail {
		return false // requests before them still wait for the link (zero-copy)
	}
	moved := false
	for wr := q.sendQ.peek(); wr != nil; wr = q.sendQ.peek() {
		c := Completion{Context: wr.Context, Op: wr.Kind, Status: StatusCancelled}
		q.sendQ.pop()
		q.deliver(&c)
		moved = true
	}
	return moved
}

// timers runs the retransmission, reordering (RACK) and RNR timers. It returns the next
// deadline and whether a timer fired.
func (q *QP) timers(now int64) (next int64, fired bool) {
	r := &q.req
	if r.rtoAt != 0 {
		if now >= r.rtoAt {
			q.onRTO(now)
			fired = true
		}
		if r.rtoAt != 0 {
			next = r.rtoAt
		}
	}
	// Packets that may be lost but were not yet old enough when the last ack came are
	// declared lost when the reordering window has passed (RFC 8985 §6.3).
	if t, ok := r.sent.LossTime(); ok && q.State() == QPConnected && !q.e.cfg.GoBackN {
		if now >= t {
			before := len(r.retx)
			r.retx = r.sent.DetectLost(now, r.rto.SRTT()/4, r.retx)
			if len(r.retx) > before {
				r.cc.OnLoss(now, lostBytes(r.retx[before:]))
				fired = true
			}
		} else if next == 0 || t < next {
			next = t
		}
	}
	if r.rnrAt != 0 && (next == 0 || r.rnrAt < next) {
		next = r.rnrAt
	}
	if r.credWait != 0 {
		if t := r.credWait + int64(q.e.cfg.CreditTimeout); next == 0 || t < next {
			next = t
		}
	}
	return next, fired
}

func lostBytes(l []ack.PacketInfo) int {
	b := 0
	for i := range l {
		b += l[i].Bytes
	}
	return b
}

// onRTO handles an expired retransmission timer: the oldest unacknowledged packet goes again
// (or, in go-back-N mode, everything unacknowledged), with exponential backoff. Once the
// packet was retransmitted RetryLimit times and has been outstanding for RTO.Max, the QP
// fails with StatusTimeout.
func (q *QP) onRTO(now int64) {
	r := &q.req
	oldest, ok := r.sent.Oldest()
	if !ok {
		r.rtoAt = 0
		if r.reads > 0 {
			q.probeRead(now)
		}
		return
	}
	q.ctr.timeouts.Add(1)
	// Give up only once the packet was retransmitted RetryLimit times and has been
	// outstanding for RTO.Max. With a tiny SRTT the timer sits at RTO.Min (200 µs), and the
	// retry limit alone would give up after Min*(2^(RetryLimit+1)-1), 51 ms: a peer whose
	// host does not run for that long (a stalled vCPU, a descheduled poller) would lose its
	// connection although nothing was lost.
	tries := q.lossRetries(oldest)
	floor := oldest.FirstSentAt + r.rto.Max()
	if tries >= q.e.cfg.RetryLimit && now >= floor {
		q.fail(now, StatusTimeout, q.seqOfTag(oldest.Tag))
		return
	}
	r.cc.OnTimeout(now)
	r.rto.Backoff()
	if q.e.cfg.GoBackN {
		r.retx = r.sent.Unacked(r.retx[:0])
		r.gbnOn, r.gbnUntil = true, r.sent.NextPSN()
	} else if !containsPSN(r.retx, oldest.PSN) {
		r.retx = append(r.retx, oldest)
	}
	r.rtoAt = now + r.rto.Timeout()
	if tries+1 >= q.e.cfg.RetryLimit && floor > now && floor < r.rtoAt {
		r.rtoAt = floor // past the limit: fail when the packet has been outstanding long enough
	}
}

// probeRead runs when the retransmission timer expires with nothing of ours in flight but
// a Read outstanding: its request was acknowledged, and its response, which travels in the
// peer's stream and which the peer retransmits itself, has stopped arriving. The peer may
// be gone, and nothing else would notice. An Ack with FlagAckReq goes to the peer, a probe:
// a live peer answers it with an acknowledgement (or, if its QP failed, with a NAK); a
// silent one makes the oldest such Read fail with StatusTimeout after RetryLimit probes and
// RTO.Max, as an unanswered packet would.
func (q *QP) probeRead(now int64) {
	r := &q.req
	s := q.oldestRead()
	if s == nil {
		return
	}
	q.ctr.timeouts.Add(1)
	if r.probeSince == 0 {
		r.probeSince = now
	}
	if r.probes >= q.e.cfg.RetryLimit && now >= r.probeSince+r.rto.Max() {
		q.fail(now, StatusTimeout, int64(s.seq))
		return
	}
	r.rto.Backoff()
	r.rtoAt = now + r.rto.Timeout()
	if !q.e.tx.ok() {
		return // the link is full: the next expiry probes
	}
	q.sendAck(now, wire.FlagAckReq)
	r.probes++
}

// oldestRead returns the oldest Read whose request was sent and whose response has not
// fully arrived, or nil.
func (q *QP) oldestRead() *wrState {
	r := &q.req
	for seq := r.head; seq != r.next; seq++ {
		if s := &r.wrs[seq&r.mask]; s.wr.Kind == OpRead && !s.done && s.sentAll && s.readGot < s.total {
			return s
		}
	}
	return nil
}

// readHeard notes that the peer is alive for the Read probe (an acknowledgement, or
// response bytes): the probes start over, and with nothing in flight the timer now watches
// the outstanding Reads from now on.
func (q *QP) readHeard(now int64) {
	r := &q.req
	r.probes, r.probeSince = 0, 0
	if npk, _ := r.sent.InFlight(); npk == 0 && r.reads > 0 {
		r.rtoAt = now + r.rto.Timeout()
	}
}

// lossRetries is how many times a packet was retransmitted for loss: its retransmissions
// less those that answered RNR NAKs of its request, which RNRRetryLimit bounds on its own
// (IB keeps the two retry counters apart too).
func (q *QP) lossRetries(info ack.PacketInfo) int {
	n := info.Retransmits
	if job, idx, _ := splitTag(info.Tag); !job {
		if s := q.liveWR(idx); s != nil {
			n -= s.rnr
		}
	}
	return max(n, 0)
}

// liveWR returns the work request a tag's index names, or nil when that request has
// completed (its slot may hold a later one).
func (q *QP) liveWR(idx uint32) *wrState {
	s := &q.req.wrs[idx&q.req.mask]
	if s.seq&0x7fffffff != idx || s.done {
		return nil
	}
	return s
}

func containsPSN(l []ack.PacketInfo, psn wire.PSN) bool {
	for i := range l {
		if l[i].PSN == psn {
			return true
		}
	}
	return false
}

// seqOfTag returns the sequence number of the work request a tag names, or -1 for a read
// job.
func (q *QP) seqOfTag(tag uint64) int64 {
	job, idx, _ := splitTag(tag)
	if job {
		return -1
	}
	return int64(idx)
}

// transmit sends what is due, in order: an RNR retry, retransmissions, read responses, new
// packets of work requests; new packets only while the congestion window and the pacing
// allow.
func (q *QP) transmit(now int64, next *int64) bool {
	r := &q.req
	sent := false
	if r.rnrAt != 0 && now >= r.rnrAt {
		if info, ok := r.sent.Lookup(r.rnrPSN); ok && !containsPSN(r.retx, info.PSN) {
			r.retx = append(r.retx, info)
		}
		r.rnrAt = 0
	}
	done := 0
	for done < len(r.retx) && q.e.tx.ok() {
		if q.resend(now, r.retx[done]) {
			sent = true
		}
		done++
	}
	r.retx = r.retx[:copy(r.retx, r.retx[done:])]
	for q.e.tx.ok() {
		if !q.windowOpen(now, next) {
			break
		}
		if q.sendJobPacket(now) || q.sendWRPacket(now) {
			sent = true
			continue
		}
		break
	}
	if sent && r.rtoAt == 0 {
		r.rtoAt = now + r.rto.Timeout()
	}
	return sent
}

// windowOpen reports whether the next new packet may leave now: the congestion window
// has room for its payload and the pacing allows it.
func (q *QP) windowOpen(now int64, next *int64) bool {
	r := &q.req
	npk, bytes := r.sent.InFlight()
	if npk >= q.e.cfg.Window {
		return false
	}
	size := q.nextPayload()
	if npk > 0 && bytes+size > r.cc.Window() {
		return false
	}
	if t := r.cc.NextSendTime(now, size); t > now {
		if *next == 0 || t < *next {
			*next = t
		}
		return false
	}
	return true
}

// nextPayload is the payload of the packet transmit would send next: a read response's
// is taken as a full one (the jobs are not scanned for it); a work request's is what is
// left of it, up to the MSS. Small messages are thus not held back for room a full packet
// would need (a 64-byte Write needs 64 bytes of window, not the MSS).
func (q *QP) nextPayload() int {
	r := &q.req
	if r.activeJobs > 0 || r.next == r.tail {
		return q.mss
	}
	return int(q.payloadAt(&r.wrs[r.next&r.mask], r.sendOff))
}

// payloadAt is the payload of work request s's packet at byte offset off: what is left of
// it, up to the MSS; none for a Read (its request carries none) or a local request.
func (q *QP) payloadAt(s *wrState, off uint32) uint32 {
	if s.wr.Kind == OpRead || s.wr.Kind == OpLocal {
		return 0
	}
	return min(uint32(q.mss), s.total-off)
}

// sendJobPacket sends the next new packet of a read response, if one is waiting.
func (q *QP) sendJobPacket(now int64) bool {
	if q.req.activeJobs == 0 {
		return false // the common case: no Read of the peer to answer, no slot to scan
	}
	cum := q.resp.rx.Cumulative()
	for i := range q.req.jobs {
		j := &q.req.jobs[i]
		if !j.active || j.sentAll || !j.reqPSN.Less(cum) {
			continue // a read executes only after every earlier request of the peer arrived
		}
		off := j.sentOff
		n := min(uint32(q.mss), uint32(j.mem.Len())-off)
		psn := q.req.sent.NextPSN()
		if !q.req.sent.OnSent(ack.PacketInfo{PSN: psn, Bytes: int(n), SentAt: now, FirstSentAt: now, Tag: jobTag(i, off)}) {
			return false
		}
		q.buildJobPacket(now, i, psn, off, false)
		j.sentOff += n
		if j.sentOff == uint32(j.mem.Len()) {
			j.sentAll = true
		}
		q.req.cc.OnSent(now, int(n))
		return true
	}
	return false
}

// sendWRPacket sends the next new packet of the oldest work request not fully sent.
func (q *QP) sendWRPacket(now int64) bool {
	r := &q.req
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
			q.fail(now, s.wr.LocalStatus, int64(s.seq))
			return true
		}
		s.sentAll = true
		r.next++
		q.completeSends(now)
		return true
	}
	if r.sendOff == 0 {
		// Starting a request: its admission checks.
		switch {
		case s.wr.Flags&WRReadFence != 0 && r.reads > 0:
			return false
		case s.wr.Kind == OpRead && r.reads >= q.ord:
			return false
		case s.wr.Kind == OpSend || s.wr.Kind == OpSendInv:
			if r.credKnow && !msnBefore(r.nextMSN, r.credits) {
				// The peer has no receive for it: wait for credits, but not forever. After
				// CreditTimeout the Send goes anyway as a probe, so that a peer that never
				// posts a receive fails it through the RNR retry limit (STATUS_IO_TIMEOUT).
				if r.credWait == 0 {
					r.credWait = now
				}
				if now-r.credWait < int64(q.e.cfg.CreditTimeout) {
					return false
				}
			}
			r.credWait = 0
		}
		s.firstPSN = r.sent.NextPSN()
		s.npkts = 1
		if s.wr.Kind != OpRead && int(s.total) > q.mss {
			s.npkts = (s.total + uint32(q.mss) - 1) / uint32(q.mss)
		}
		if s.wr.Kind == OpSend || s.wr.Kind == OpSendInv {
			s.msn = r.nextMSN
		}
	}
	off := r.sendOff
	n := q.payloadAt(s, off)
	psn := r.sent.NextPSN()
	if !r.sent.OnSent(ack.PacketInfo{PSN: psn, Bytes: int(n), SentAt: now, FirstSentAt: now, Tag: wrTag(s.seq, off)}) {
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
	q.buildWRPacket(now, s, psn, off, false)
	r.sendOff += n
	if s.wr.Kind == OpRead || r.sendOff >= s.total { // a Read is one request packet
		s.sentAll = true
		r.sendOff = 0
		r.next++
	}
	r.cc.OnSent(now, int(n))
	return true
}

// msnBefore reports whether a comes before b in the wrapping MSN space.
func msnBefore(a, b uint32) bool { return int32(a-b) < 0 }

// resend retransmits the packet info describes, if what it carries still exists.
func (q *QP) resend(now int64, info ack.PacketInfo) bool {
	if !q.e.tx.ok() {
		return false
	}
	job, idx, off := splitTag(info.Tag)
	if job {
		if int(idx) >= len(q.req.jobs) || !q.req.jobs[idx].active {
			return false
		}
		q.buildJobPacket(now, int(idx), info.PSN, off, true)
	} else {
		s := q.liveWR(idx)
		if s == nil {
			return false
		}
		q.buildWRPacket(now, s, info.PSN, off, true)
	}
	q.req.sent.OnRetransmitted(info.PSN, now)
	q.req.cc.OnSent(now, info.Bytes)
	q.ctr.retransmits.Add(1)
	return true
}

// header fills the common header of a data packet.
func (q *QP) header(p *wire.Packet, op wire.Opcode, psn wire.PSN, now int64, retx bool) {
	p.Header = wire.Header{Opcode: op, DestQPN: q.peerQPN, PSN: psn, Cookie: q.cookie, TS: uint32(now / 1000)}
	if retx {
		p.Flags |= wire.FlagRetransmit
	}
}

// buildWRPacket encodes and queues the packet of work request s at byte offset off.
func (q *QP) buildWRPacket(now int64, s *wrState, psn wire.PSN, off uint32, retx bool) {
	e := q.e
	i := e.tx.slot()
	p := &e.tx.wire
	*p = wire.Packet{}
	total := s.total
	n := q.payloadAt(s, off)
	last := off+n >= total || s.wr.Kind == OpRead
	switch s.wr.Kind {
	case OpSend, OpSendInv:
		op := wire.OpSendMiddle
		switch {
		case off == 0 && last:
			op = wire.OpSendOnly
		case off == 0:
			op = wire.OpSendFirst
		case last:
			op = wire.OpSendLast
		}
		if last && s.wr.Kind == OpSendInv {
			if op == wire.OpSendOnly {
				op = wire.OpSendOnlyInv
			} else {
				op = wire.OpSendLastInv
			}
			p.Send.InvToken = s.wr.InvToken
		}
		q.header(p, op, psn, now, retx)
		p.Send.MSN, p.Send.Offset, p.Send.Total = s.msn, off, total
		if last && s.wr.Flags&WRSolicited != 0 {
			p.Flags |= wire.FlagSolicited
		}
	case OpWrite:
		q.header(p, wire.OpWrite, psn, now, retx)
		p.RDMA = wire.RDMAExt{Addr: s.wr.RemoteAddr, Token: s.wr.RemoteToken, Length: total, Offset: off}
		if last {
			p.Flags |= wire.FlagLast
		}
	case OpRead:
		q.header(p, wire.OpReadRequest, psn, now, retx)
		p.RDMA = wire.RDMAExt{Addr: s.wr.RemoteAddr, Token: s.wr.RemoteToken, Length: total}
	}
	if last {
		p.Flags |= wire.FlagAckReq // the request completes on this packet's ack: don't delay it
	}
	q.piggyback(now, p, int(n))
	hl, err := wire.Encode(e.tx.hdr[i][:], p)
	if err != nil {
		panic("transport: encoding a valid request failed: " + err.Error())
	}
	a, b := gather(&s.wr.SGL, s.wr.NSGE, off, n, e.tx.bounce[i])
	e.tx.emit(i, q.peer, q.srcPort, hl, a, b)
	if n > 0 && e.cfg.ZeroCopyTx && !sameBuffer(a, e.tx.bounce[i]) { // a bounced copy is ours
		e.tx.markZeroCopy(zcCookie(q.qpn, wrTag(s.seq, off)))
		s.zc++
	}
	q.ctr.txPackets.Add(1)
	q.ctr.txBytes.Add(uint64(n))
}

// buildJobPacket encodes and queues the read-response packet of job i at offset off.
func (q *QP) buildJobPacket(now int64, i int, psn wire.PSN, off uint32, retx bool) {
	e := q.e
	j := &q.req.jobs[i]
	slot := e.tx.slot()
	p := &e.tx.wire
	*p = wire.Packet{}
	total := uint32(j.mem.Len())
	n := min(uint32(q.mss), total-off)
	q.header(p, wire.OpReadResponse, psn, now, retx)
	p.ReadResp = wire.ReadRespExt{ReqPSN: j.reqPSN, Offset: off}
	if off+n >= total {
		p.Flags |= wire.FlagLast | wire.FlagAckReq
	}
	q.piggyback(now, p, int(n))
	hl, err := wire.Encode(e.tx.hdr[slot][:], p)
	if err != nil {
		panic("transport: encoding a read response failed: " + err.Error())
	}
	a, b := spanPieces(&j.mem, off, n, e.tx.bounce[slot])
	e.tx.emit(slot, q.peer, q.srcPort, hl, a, b)
	if n > 0 && e.cfg.ZeroCopyTx && !sameBuffer(a, e.tx.bounce[slot]) {
		e.tx.markZeroCopy(zcCookie(q.qpn, jobTag(i, off)))
		j.zc++
	}
	q.ctr.txPackets.Add(1)
	q.ctr.txBytes.Add(uint64(n))
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

// onAck processes an acknowledgement of our stream (and, for a NAK, what failed).
func (q *QP) onAck(now int64, p *wire.Packet) {
	r := &q.req
	a := &p.Ack
	if !r.credKnow || msnBefore(r.credits, a.Credits) {
		r.credits, r.credKnow = a.Credits, true
	}
	acked, rtt := r.sent.OnAck(a.AckPSN, a.SACK, now, r.scratch[:0])
	bytes := 0
	for i := range acked {
		info := &acked[i]
		bytes += info.Bytes
		job, idx, _ := splitTag(info.Tag)
		if job {
			if int(idx) < len(r.jobs) && r.jobs[idx].active {
				j := &r.jobs[idx]
				if j.acked++; j.sentAll && j.acked >= j.npkts {
					q.endJob(j)
				}
			}
			continue
		}
		if s := q.liveWR(idx); s != nil {
			s.acked++
		}
	}
	if len(acked) > 0 {
		r.rto.ResetBackoff()
		// The RTT sample comes from the timestamp echo, as TCP timestamps do (RFC 7323):
		// EchoTS is the send time of the packet that triggered this ack, whichever
		// transmission of it that was, and Delay how long the receiver held it. A sample
		// from the history's send times would be wrong after a lost ack: the ack that
		// finally arrives also covers packets sent an RTO earlier and never resent.
		if d := echoDelay(now, a); d > 0 {
			rtt = d
		} else if rtt > 0 {
			rtt = max(rtt-int64(a.Delay)*1000, 1)
		}
		if rtt > 0 {
			r.rto.Sample(rtt)
		}
		r.cc.OnAck(now, bytes, rtt)
		if npk, _ := r.sent.InFlight(); npk > 0 {
			r.rtoAt = now + r.rto.Timeout()
		} else {
			r.rtoAt = 0
		}
	}
	if r.reads > 0 {
		q.readHeard(now) // any acknowledgement: the peer is there (and may owe responses)
	}
	if a.Syndrome != wire.SynAck {
		// What the NAK's ack part acknowledged completed before the failure it reports.
		q.completeSends(now)
		q.ctr.naksRecv.Add(1)
		q.ctr.naksRecvBy[int(a.Syndrome)%nakKinds].Add(1)
		if q.onNak(now, a) {
			return
		}
	}
	q.detectLoss(now, a)
	q.completeSends(now)
	q.publishStats()
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

// maxRNRDelay caps the wait before retrying a packet refused with an RNR NAK (the NAK's
// Value, backed off over the request's retries): InfiniBand's largest RNR NAK timer,
// 655.36 ms. A peer cannot park a request for longer per retry.
const maxRNRDelay = 655360 * time.Microsecond

// onNak handles a negative acknowledgement; it reports whether the QP failed.
func (q *QP) onNak(now int64, a *wire.AckExt) bool {
	r := &q.req
	info, ok := r.sent.Lookup(a.NakPSN)
	seq := int64(-1)
	if ok {
		seq = q.seqOfTag(info.Tag)
	}
	switch a.Syndrome {
	case wire.SynNakSeq:
		return false // the SACK bitmap says what is missing
	case wire.SynNakRNR:
		q.ctr.rnrNaks.Add(1)
		if !ok {
			return false // acknowledged since: a stale NAK
		}
		if _, held := r.sent.Lookup(r.rnrPSN); r.rnrSet && held {
			if r.rnrPSN == a.NakPSN && r.rnrAt != 0 {
				return false // already waiting out the delay for this packet: an early copy's NAK
			}
			if r.rnrPSN.Less(a.NakPSN) {
				// A later packet refused while an earlier one still is: its refusal follows
				// from the earlier one's (the receiver takes messages in order). It is resent
				// once the earlier one got through, and only then counts toward its
				// request's RNR retry limit.
				return false
			}
		}
		if seq >= 0 {
			s := &r.wrs[uint32(seq)&r.mask]
			if s.rnr++; s.rnr > q.e.cfg.RNRRetryLimit {
				q.fail(now, StatusTimeout, seq)
				return true
			}
		}
		d := int64(q.e.cfg.RNRDelay)
		if a.Value > 0 {
			d = int64(a.Value) * 16 * 1000
		}
		if seq >= 0 {
			// Exponential backoff over the retries of one request, up to 64 times the delay.
			d <<= min(r.wrs[uint32(seq)&r.mask].rnr-1, 6)
		}
		// Whatever the peer asks for (Value up to 1.05 s, backed off to a minute), the
		// retry waits at most maxRNRDelay, or the configured delay if that is longer.
		d = min(d, max(int64(maxRNRDelay), int64(q.e.cfg.RNRDelay)))
		r.rnrPSN, r.rnrAt, r.rnrSet = a.NakPSN, now+d, true
		// The retransmission timer waits too: the packet is known to be refused until then.
		r.rtoAt = max(r.rtoAt, r.rnrAt+r.rto.Timeout())
		return false
	case wire.SynNakAccess:
		q.fail(now, StatusAccessViolation, seq)
	case wire.SynNakInvalid:
		q.fail(now, StatusDataError, seq)
	default:
		q.fail(now, StatusRemoteError, seq)
	}
	return true
}

// detectLoss finds packets the peer's acknowledgements show missing and queues them for
// retransmission (go-back-N: everything unacknowledged from the first missing).
func (q *QP) detectLoss(now int64, a *wire.AckExt) {
	r := &q.req
	if q.e.cfg.GoBackN {
		// Go back once per loss episode: resend everything unacknowledged, then ignore
		// further gap reports until the cumulative ack passes what was outstanding then.
		if r.gbnOn && !a.AckPSN.Less(r.gbnUntil) {
			r.gbnOn = false
		}
		if !r.gbnOn && (a.SACK != 0 || a.Syndrome == wire.SynNakSeq) {
			r.retx = r.sent.Unacked(r.retx[:0])
			if len(r.retx) > 0 {
				r.cc.OnLoss(now, lostBytes(r.retx))
				r.gbnOn, r.gbnUntil = true, r.sent.NextPSN()
			}
		}
		return
	}
	before := len(r.retx)
	r.retx = r.sent.DetectLost(now, r.rto.SRTT()/4, r.retx)
	if len(r.retx) > before {
		r.cc.OnLoss(now, lostBytes(r.retx[before:]))
	}
}

// completeSends completes, in posting order, every finished work request at the head.
func (q *QP) completeSends(now int64) {
	r := &q.req
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
		q.completeWR(s, StatusSuccess)
		r.head++
	}
}

// completeWR reports a work request's completion and frees its slot.
func (q *QP) completeWR(s *wrState, st Status) {
	c := Completion{Context: s.wr.Context, Op: s.wr.Kind, Status: st}
	if st == StatusSuccess {
		c.Bytes = s.total
	}
	s.done = true
	s.wr = WorkRequest{} // drop references to caller memory
	q.deliver(&c)
}

// fail ends the connection because of a failure (a timeout, a NAK, an access the peer may
// not make, a request that failed a local check): the QP is flushed as flush does, and the
// disconnect event (QPConfig.OnDisconnect) fires once, since the connection is aborted
// (NDKPI NdkDisconnectEventCallback: "when the peer disconnects or the connection aborts").
// A QP already flushed stays as it is.
func (q *QP) fail(now int64, st Status, failSeq int64) {
	if q.flush(now, st, failSeq) {
		q.indicateDisconnect()
	}
}

// flush puts the QP in the error state: the work request with sequence number failSeq (if
// any, and still outstanding) completes with st, every other outstanding request and receive
// with StatusCancelled, in posting order. Retransmission stops. A QP its peer disconnected
// stays disconnected (flush is then the application's Flush, Disconnect or Close of what the
// peer's disconnect left posted). It reports false, and does nothing, when the QP was
// flushed already. The application's own Flush, Disconnect and Close call it directly: they
// fire no disconnect event.
func (q *QP) flush(now int64, st Status, failSeq int64) bool {
	switch q.State() {
	case QPError:
		return false
	case QPDisconnected:
		if !q.held {
			return false
		}
		q.held = false
	default:
		q.state.Store(uint32(QPError))
	}
	r := &q.req
	// A failure that names no request (a timeout of a read response we owed) is reported on
	// the oldest outstanding one.
	target := failSeq
	if target < 0 && st != StatusCancelled && r.head != r.tail {
		target = int64(r.wrs[r.head&r.mask].seq)
	}
	r.failSt, r.failTarget = st, target
	q.drainFailed()
	r.next, r.sendOff, r.reads = r.tail, 0, 0
	r.retx = r.retx[:0]
	r.rtoAt, r.rnrAt, r.credWait, r.rnrSet = 0, 0, 0, false
	r.probes, r.probeSince = 0, 0
	if r.sent != nil { // nil on a QP that never connected
		r.sent.Reset()
	}
	for i := range r.jobs {
		q.endJob(&r.jobs[i])
	}
	q.cancelReceives()
	q.publishStats()
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

// publishStats makes the engine's estimates visible to Stats.
func (q *QP) publishStats() {
	r := &q.req
	if r.sent == nil {
		return
	}
	q.ctr.srtt.Store(r.rto.SRTT())
	q.ctr.rttvar.Store(r.rto.RTTVar())
	q.ctr.rto.Store(r.rto.Timeout())
	q.ctr.cwnd.Store(int64(r.cc.Window()))
	_, b := r.sent.InFlight()
	q.ctr.inflight.Store(int64(b))
}
