package workload

import (
	"fmt"

	"github.com/xdpndk/xdpndk/ndk"
)

// ictl is the initiator's end of the control connection.
type ictl struct {
	c        *ndk.Connector
	qp       *ndk.QP
	rcq, icq *ndk.CQ
	buf      *buffer
	rslots   []ctlSlot
	sslots   []ctlSlot
	sfree    []int
	backlog  []msg
	recvs    int // receives posted
	failed   bool
}

func (ctl *ictl) inflight() int { return len(ctl.sslots) - len(ctl.sfree) }

// send queues a control message; it leaves when a send slot is free.
func (ctl *ictl) send(in *Initiator, m msg) {
	if ctl.failed {
		return
	}
	ctl.backlog = append(ctl.backlog, m)
	ctl.flush(in)
}

func (ctl *ictl) flush(in *Initiator) {
	for !ctl.failed && len(ctl.backlog) > 0 && len(ctl.sfree) > 0 {
		k := ctl.sfree[len(ctl.sfree)-1]
		s := &ctl.sslots[k]
		off := s.i * msgLen
		ctl.backlog[0].encode(ctl.buf.b[off : off+msgLen])
		if err := ctl.qp.Send(s, []ndk.SGE{ctl.buf.sge(off, msgLen)}, 0); err != nil {
			r := &in.rep
			r.PostErrors++
			if r.FirstPostError == nil {
				r.FirstPostError = fmt.Errorf("control send: %w", err)
			}
			ctl.failed = true
			return
		}
		ctl.sfree = ctl.sfree[:len(ctl.sfree)-1]
		ctl.backlog = append(ctl.backlog[:0], ctl.backlog[1:]...)
	}
}

// poll takes the control connection's completions.
func (ctl *ictl) poll(in *Initiator) bool {
	work := false
	rep := &in.rep
	for {
		n := ctl.icq.GetResultsEx(in.res[:])
		for i := range in.res[:n] {
			r := &in.res[i]
			in.progress.Add(1)
			rep.Completions++
			rep.Statuses[r.Status]++
			s, ok := r.RequestContext.(*ctlSlot)
			if !ok || s.i < len(ctl.rslots) || s.i >= len(ctl.rslots)+len(ctl.sslots) || r.Type != ndk.OpTypeSend {
				in.unexpected(fmt.Sprintf("control: %v completion %v with context %T", r.Type, r.Status, r.RequestContext))
				continue
			}
			if r.Status != ndk.StatusSuccess {
				ctl.failed = true
			}
			ctl.sfree = append(ctl.sfree, s.i-len(ctl.rslots))
		}
		work = work || n > 0
		if n < len(in.res) {
			break
		}
	}
	for {
		n := ctl.rcq.GetResultsEx(in.res[:])
		for i := range in.res[:n] {
			ctl.received(in, &in.res[i])
		}
		work = work || n > 0
		if n < len(in.res) {
			break
		}
	}
	ctl.flush(in)
	return work
}

// received handles a message from the target.
func (ctl *ictl) received(in *Initiator, r *ndk.ResultEx) {
	in.progress.Add(1)
	rep := &in.rep
	rep.Completions++
	rep.Statuses[r.Status]++
	s, ok := r.RequestContext.(*ctlSlot)
	if !ok || s.i >= len(ctl.rslots) || r.Type != ndk.OpTypeReceive {
		in.unexpected(fmt.Sprintf("control: %v completion %v with context %T", r.Type, r.Status, r.RequestContext))
		return
	}
	ctl.recvs--
	if r.Status != ndk.StatusSuccess {
		ctl.failed = true
		return
	}
	b := ctl.buf.b[s.i*msgLen : s.i*msgLen+int(min(r.BytesTransferred, msgLen))]
	m, err := decodeMsg(b, len(in.conns), in.cfg.Windows)
	if err == nil {
		c := in.conns[m.conn]
		switch m.typ {
		case msgWindow:
			want := c.lay.va + c.lay.winOff + uint64(m.window)*uint64(c.lay.slotSize)
			if m.addr != want || m.length != c.lay.slotSize {
				err = fmt.Errorf("%w: window %d at %#x+%d, layout says %#x+%d", errProto, m.window, m.addr, m.length, want, c.lay.slotSize)
				break
			}
			c.wins = append(c.wins, winInfo{window: m.window, addr: m.addr, length: m.length, token: m.token})
		case msgCredit:
			if m.count > c.credit {
				c.credit = m.count
			}
		case msgReceipt:
			c.receipt = &Receipt{Received: m.count, Bytes: m.bytes, Mismatches: m.bad,
				RemoteInvalidations: m.inv, FirstBadMessage: m.badSeq, FirstBadOffset: m.badOff}
		default:
			err = fmt.Errorf("%w: control message type %d from the target", errProto, m.typ)
		}
	}
	if err != nil {
		in.unexpected(err.Error())
	}
	if e := ctl.qp.Receive(s, []ndk.SGE{ctl.buf.sge(s.i*msgLen, msgLen)}); e != nil {
		ctl.failed = true
		return
	}
	ctl.recvs++
}
