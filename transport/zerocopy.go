package transport

import "github.com/xdpndk/xdpndk/memreg"

// Zero-copy transmit (Config.ZeroCopyTx). A data packet whose payload is the caller's memory
// carries FlagZeroCopy and a cookie naming its work request or read job; each counts its
// packets the link has not reported done. A work request completes only when it is both
// acknowledged and done (zc == 0), so the caller never gets its memory back while the link
// may still read it; a read job releases its region hold on the same condition. A failed QP
// completes its requests in posting order as each becomes done.

// zcDone accounts one finished zero-copy packet of work request seq (job false) or read
// job idx. Engine goroutine, outside packet building.
func (q *QP) zcDone(now int64, job bool, idx uint32) {
	r := &q.req
	if job {
		if int(idx) >= len(r.jobs) {
			return
		}
		j := &r.jobs[idx]
		if j.zc == 0 {
			return
		}
		if j.zc--; j.zc == 0 && !j.active {
			q.endJob(j) // ended already: this releases its region
		}
		return
	}
	s := q.liveWR(idx)
	if s == nil || s.zc == 0 {
		return
	}
	if s.zc--; s.zc > 0 {
		return
	}
	if (q.State() == QPError || q.State() == QPDisconnected) && !q.held {
		q.drainFailed()
	} else {
		q.completeSends(now)
	}
}

// endJob ends read job j (answered and acknowledged, or the QP failed): its region hold is
// released now, or when the link reports its last zero-copy packet done.
func (q *QP) endJob(j *readJob) {
	if j.active {
		q.req.activeJobs--
	}
	j.active = false
	if j.zc == 0 {
		releaseSpan(&j.mem)
		*j = readJob{}
	}
}

// drainFailed completes, in posting order, the requests of a failed QP whose packets the
// link no longer reads: the one the failure names with its status, the rest cancelled.
func (q *QP) drainFailed() {
	r := &q.req
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
			q.completeWR(s, st)
		}
		r.head++
	}
}

// zcPending reports whether the link still transmits zero-copy packets of the QP.
func (q *QP) zcPending() bool {
	r := &q.req
	for seq := r.head; seq != r.tail; seq++ {
		if s := &r.wrs[seq&r.mask]; !s.done && s.zc > 0 {
			return true
		}
	}
	for i := range r.jobs {
		if r.jobs[i].zc > 0 {
			return true
		}
	}
	return false
}

// forceDrain completes and releases everything of a QP being removed, transmitting or not.
func (q *QP) forceDrain() {
	r := &q.req
	for seq := r.head; seq != r.tail; seq++ {
		r.wrs[seq&r.mask].zc = 0
	}
	q.drainFailed()
	for i := range r.jobs {
		r.jobs[i].zc = 0
		q.endJob(&r.jobs[i])
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
