package transport

import "github.com/xdpndk/xdpndk/memreg"

// Zero-copy transmit (Config.ZeroCopyTx). A data packet whose payload is the caller's memory
// carries FlagZeroCopy and a cookie naming its work request or read job (owner.cookie); each counts its
// packets the link has not reported done. A work request completes only when it is both
// acknowledged and done (zc == 0), so the caller never gets its memory back while the link
// may still read it; a read job releases its region hold on the same condition. A failed QP
// completes its requests in posting order as each becomes done.

// zcDone accounts one finished zero-copy packet of work request idx. A request that was
// waiting only for the link may complete now (the QP pops it).
func (r *requester) zcDone(idx uint32) {
	if s := r.liveWR(idx); s != nil && s.zc > 0 {
		s.zc--
	}
}

// zcPending reports whether the link still transmits zero-copy packets of the requester.
func (r *requester) zcPending() bool {
	for seq := r.head; seq != r.tail; seq++ {
		if s := &r.wrs[seq&r.mask]; !s.done && s.zc > 0 {
			return true
		}
	}
	return false
}

// forceDrain lets every request of a QP being removed complete (pop), transmitting or
// not.
func (r *requester) forceDrain() {
	for seq := r.head; seq != r.tail; seq++ {
		r.wrs[seq&r.mask].zc = 0
	}
}

// zcDone accounts one finished zero-copy packet of read job i; a job that ended already
// releases its region with its last one.
func (rs *responder) zcDone(i uint32) {
	if int(i) >= len(rs.jobs) {
		return
	}
	j := &rs.jobs[i]
	if j.zc == 0 {
		return
	}
	if j.zc--; j.zc == 0 && !j.active {
		rs.endJob(j) // ended already: this releases its region
	}
}

// endJob ends read job j (answered and acknowledged, or the QP failed): its region hold is
// released now, or when the link reports its last zero-copy packet done.
func (rs *responder) endJob(j *readJob) {
	if j.active {
		rs.activeJobs--
	}
	j.active = false
	if j.zc == 0 {
		releaseSpan(&j.mem)
		*j = readJob{}
	}
}

// zcPending reports whether the link still transmits zero-copy packets of read jobs.
func (rs *responder) zcPending() bool {
	for i := range rs.jobs {
		if rs.jobs[i].zc > 0 {
			return true
		}
	}
	return false
}

// forceDrain ends and releases every read job of a QP being removed, transmitting or not.
func (rs *responder) forceDrain() {
	for i := range rs.jobs {
		rs.jobs[i].zc = 0
		rs.endJob(&rs.jobs[i])
	}
}

// releaseSpan releases the region hold a resolved span carries, once.
func releaseSpan(s *memreg.Span) {
	if s.MR != nil {
		s.MR.Release()
		s.MR = nil
	}
}

// spanPieces returns the n bytes at offset off of a resolved span as at most two slices
// referencing it, or as one slice of bounce holding a copy when they lie in more than two
// pieces of memory.
func spanPieces(m *memreg.Span, off, n uint32, bounce []byte) (a, b []byte) {
	if n == 0 {
		return nil, nil
	}
	a = m.Piece(uint64(off))
	if uint32(len(a)) >= n {
		return a[:n], nil
	}
	b = m.Piece(uint64(off) + uint64(len(a)))
	if uint32(len(a)+len(b)) >= n {
		return a, b[:n-uint32(len(a))]
	}
	w := m.CopyOut(uint64(off), bounce[:n])
	return bounce[:w], nil
}
