package workload

import (
	"errors"
	"fmt"

	"github.com/xdpndk/xdpndk/ndk"
)

// bind binds window w over its range with remote write and announces its token.
func (c *tconn) bind(w *twin) {
	t := c.s.t
	if err := c.qp.Bind(w, c.region.mr, w.mw, w.va, uint64(c.lay.slotSize), ndk.OpAllowRemoteWrite); err != nil {
		t.fail(fmt.Errorf("connection %d: bind window %d: %w", c.idx, w.i, err))
		return
	}
	t.ctr.binds.Add(1)
	w.state, w.token = winBound, w.mw.RemoteToken()
	c.s.ctl.send(msg{typ: msgWindow, conn: uint16(c.idx), window: uint16(w.i), addr: w.va,
		length: c.lay.slotSize, token: w.token})
}

// credit queues a credit message once a quarter of the receives were posted again since the
// last one (one at most waits in the backlog; it carries the count when it leaves).
func (c *tconn) credit() {
	if c.creditQueued || c.posted-c.announced < uint64(max(1, len(c.rslots)/4)) {
		return
	}
	c.creditQueued = true
	c.s.ctl.send(msg{typ: msgCredit, conn: uint16(c.idx)})
}

// send queues a control message; it leaves when a send slot is free.
func (ctl *tctl) send(m msg) {
	if len(ctl.backlog) >= 4*len(ctl.sslots) {
		ctl.s.t.fail(errors.New("control backlog overflow"))
		return
	}
	ctl.backlog = append(ctl.backlog, m)
	ctl.flush()
}

// flush sends backlogged messages while send slots are free.
func (ctl *tctl) flush() {
	for ctl.up && len(ctl.backlog) > 0 && len(ctl.sfree) > 0 {
		k := ctl.sfree[len(ctl.sfree)-1]
		s := &ctl.sslots[k]
		off := s.i * msgLen
		m := &ctl.backlog[0]
		if m.typ == msgCredit {
			c := ctl.s.conns[m.conn]
			if c == nil {
				ctl.backlog = append(ctl.backlog[:0], ctl.backlog[1:]...)
				continue
			}
			m.count, c.announced, c.creditQueued = c.posted, c.posted, false
		}
		m.encode(ctl.buf.b[off : off+msgLen])
		if err := ctl.qp.Send(s, []ndk.SGE{ctl.buf.sge(off, msgLen)}, 0); err != nil {
			ctl.s.t.fail(fmt.Errorf("control send: %w", err))
			return
		}
		ctl.sfree = ctl.sfree[:len(ctl.sfree)-1]
		ctl.backlog = append(ctl.backlog[:0], ctl.backlog[1:]...)
	}
}

// pollSession handles the session's completions and disconnections; it reports whether
// there was anything to do.
func (t *Target) pollSession(s *session) bool {
	work := false
	ctl := s.ctl
	if ctl.gone.Load() {
		t.closeSession(s)
		return true
	}
	for i, c := range s.conns {
		if c == nil {
			continue
		}
		if c.gone.Load() {
			s.conns[i] = nil
			c.close()
			work = true
			continue
		}
		if c.up && c.poll() {
			work = true
		}
	}
	if ctl.up && ctl.poll() {
		work = true
	}
	return work
}

// poll handles a data connection's completions.
func (c *tconn) poll() bool {
	t := c.s.t
	work := false
	for {
		n := c.rcq.GetResultsEx(t.res[:])
		for i := range t.res[:n] {
			c.received1(&t.res[i])
		}
		work = work || n > 0
		if n < len(t.res) {
			break
		}
	}
	for {
		n := c.icq.GetResultsEx(t.res[:])
		for i := range t.res[:n] {
			c.local(&t.res[i])
		}
		work = work || n > 0
		if n < len(t.res) {
			break
		}
	}
	if c.reportWant >= 0 && c.received >= uint64(c.reportWant) {
		c.reportWant = -1
		m := msg{typ: msgReceipt, conn: uint16(c.idx), count: c.received, bytes: c.bytes, bad: c.bad,
			inv: c.inv, badSeq: c.badSeq, badOff: c.badOff}
		c.s.ctl.send(m)
		t.ctr.receipts.Add(1)
		work = true
	}
	return work
}

// received1 checks one data message and posts its receive again.
func (c *tconn) received1(r *ndk.ResultEx) {
	t := c.s.t
	rs, ok := r.RequestContext.(*trecv)
	if !ok || rs.c != c {
		t.fail(fmt.Errorf("connection %d: receive completion with context %T", c.idx, r.RequestContext))
		return
	}
	if r.Status != ndk.StatusSuccess {
		t.fail(fmt.Errorf("connection %d: receive completed %v", c.idx, r.Status))
		return
	}
	h := &c.s.h
	seq := c.nextSeq
	c.nextSeq++
	size := int(c.lay.slotSize)
	got := c.recv.b[rs.i*size : rs.i*size+int(min(r.BytesTransferred, uint32(size)))]
	want := sendSize(h.seed, c.idx, seq, int(h.maxSize))
	bad := -1
	if len(got) != want || int(r.BytesTransferred) != want {
		bad = min(len(got), want)
	} else {
		bad = checkStream(got, sendKey(h.seed, c.idx, seq), 0)
	}
	if bad >= 0 {
		c.bad++
		t.ctr.mismatches.Add(1)
		if c.badSeq == 0 {
			c.badSeq, c.badOff = seq+1, uint32(bad)
		}
	}
	c.received++
	c.bytes += uint64(r.BytesTransferred)
	t.ctr.received.Add(1)
	t.ctr.bytes.Add(uint64(r.BytesTransferred))
	if r.Type == ndk.OpTypeReceiveAndInvalidate {
		c.remoteInvalidated(uint32(r.TypeSpecific))
	} else if r.Type != ndk.OpTypeReceive {
		t.fail(fmt.Errorf("connection %d: receive completed as %v", c.idx, r.Type))
	}
	if err := c.repost(rs.i); err != nil {
		t.fail(fmt.Errorf("connection %d: repost receive: %w", c.idx, err))
		return
	}
	c.credit()
}

// remoteInvalidated handles a SendAndInvalidate of a window's token: the window is unbound
// and is bound again.
func (c *tconn) remoteInvalidated(token uint32) {
	for _, w := range c.wins {
		if w.state == winBound && w.token == token {
			c.inv++
			c.s.t.ctr.remoteInv.Add(1)
			w.state = winIdle
			c.bind(w)
			return
		}
	}
	c.s.t.fail(fmt.Errorf("connection %d: remote invalidation of token %#x, no window bound with it", c.idx, token))
}

// local handles the completion of a Bind or Invalidate.
func (c *tconn) local(r *ndk.ResultEx) {
	t := c.s.t
	w, ok := r.RequestContext.(*twin)
	if !ok || w.c != c {
		t.fail(fmt.Errorf("connection %d: completion with context %T", c.idx, r.RequestContext))
		return
	}
	if r.Status != ndk.StatusSuccess {
		t.fail(fmt.Errorf("connection %d: %v of window %d completed %v", c.idx, r.Type, w.i, r.Status))
		return
	}
	if r.Type == ndk.OpTypeInvalidate {
		if w.state != winInvalidating {
			t.fail(fmt.Errorf("connection %d: window %d invalidated in state %d", c.idx, w.i, w.state))
			return
		}
		t.ctr.invalidates.Add(1)
		w.state = winIdle
		c.bind(w)
	}
}

// poll handles the control connection's completions.
func (ctl *tctl) poll() bool {
	t := ctl.s.t
	work := false
	for {
		n := ctl.rcq.GetResultsEx(t.res[:])
		for i := range t.res[:n] {
			ctl.received1(&t.res[i])
		}
		work = work || n > 0
		if n < len(t.res) {
			break
		}
	}
	for {
		n := ctl.icq.GetResultsEx(t.res[:])
		for i := range t.res[:n] {
			r := &t.res[i]
			s, ok := r.RequestContext.(*ctlSlot)
			if !ok || s.i < len(ctl.rslots) || s.i >= len(ctl.rslots)+len(ctl.sslots) {
				t.fail(fmt.Errorf("control: completion with context %T", r.RequestContext))
				continue
			}
			if r.Status != ndk.StatusSuccess {
				t.fail(fmt.Errorf("control: send completed %v", r.Status))
			}
			ctl.sfree = append(ctl.sfree, s.i-len(ctl.rslots))
		}
		work = work || n > 0
		if n < len(t.res) {
			break
		}
	}
	ctl.flush()
	return work
}

func (ctl *tctl) received1(r *ndk.ResultEx) {
	t := ctl.s.t
	s, ok := r.RequestContext.(*ctlSlot)
	if !ok || s.i >= len(ctl.rslots) {
		t.fail(fmt.Errorf("control: receive completion with context %T", r.RequestContext))
		return
	}
	if r.Status != ndk.StatusSuccess {
		t.fail(fmt.Errorf("control: receive completed %v", r.Status))
		return
	}
	h := &ctl.s.h
	m, err := decodeMsg(ctl.buf.b[s.i*msgLen:s.i*msgLen+int(min(r.BytesTransferred, msgLen))], int(h.qps), int(h.windows))
	if err == nil && r.BytesTransferred != msgLen {
		err = fmt.Errorf("%w: control message of %d bytes", errProto, r.BytesTransferred)
	}
	var c *tconn
	if err == nil {
		if c = ctl.s.conns[m.conn]; c == nil || !c.up {
			err = fmt.Errorf("%w: message for connection %d, not connected", errProto, m.conn)
		}
	}
	if err == nil {
		switch m.typ {
		case msgRelease:
			t.ctr.releases.Add(1)
			w := c.wins[m.window]
			if w.state != winBound {
				err = fmt.Errorf("%w: release of window %d in state %d", errProto, m.window, w.state)
				break
			}
			w.state = winInvalidating
			if e := c.qp.Invalidate(w, w.mw, 0); e != nil {
				err = fmt.Errorf("invalidate window %d: %w", w.i, e)
			}
		case msgReport:
			c.reportWant = int64(min(m.count, 1<<62))
		default:
			err = fmt.Errorf("%w: control message type %d from the initiator", errProto, m.typ)
		}
	}
	if err != nil {
		t.fail(err)
	}
	if e := ctl.qp.Receive(s, []ndk.SGE{ctl.buf.sge(s.i*msgLen, msgLen)}); e != nil {
		t.fail(fmt.Errorf("control: repost receive: %w", e))
	}
}
