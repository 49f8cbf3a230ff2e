package workload

import (
	"context"
	"fmt"
	"time"

	"github.com/xdpndk/xdpndk/internal/plumb"
	"github.com/xdpndk/xdpndk/ndk"
)

// Run starts operations, keeping cfg.Outstanding in flight on every data connection, until
// a limit is reached, ctx ends or every connection failed; then waits (up to lim.Drain)
// for what is in flight, asks the target for its receipts (unless the control connection
// failed) and returns what happened. A connection whose request completes in error starts
// nothing more. Run may be called again to continue.
func (in *Initiator) Run(ctx context.Context, lim Limits) Report {
	if lim.Drain <= 0 {
		lim.Drain = 10 * time.Second
	}
	start := time.Now()
	in.rep = Report{Statuses: map[ndk.Status]uint64{}, Receipts: make([]*Receipt, len(in.conns)),
		Sent: make([]uint64, len(in.conns)), SentBytes: make([]uint64, len(in.conns)),
		FirstFailures: make([]ndk.Status, len(in.conns))}
	in.started, in.startedB = 0, 0
	for _, c := range in.conns {
		c.receipt = nil
	}
	var drainBy time.Time
	stopping := false
	idle := 0
	r := &in.rep
	last := start // the latest completion, or the latest time nothing was in flight
	for {
		work := in.poll()
		now := time.Now()
		if work {
			if g := now.Sub(last); g > r.LongestGap {
				r.LongestGap, r.GapEnd = g, now
			}
		}
		if work || in.inflight() == 0 {
			last = now
		}
		if !stopping && (ctx.Err() != nil || in.allFailed() ||
			(lim.Requests > 0 && in.started >= lim.Requests) ||
			(lim.Bytes > 0 && in.startedB >= lim.Bytes) ||
			(lim.Duration > 0 && now.Sub(start) >= lim.Duration)) {
			stopping, drainBy = true, now.Add(lim.Drain)
		}
		if !stopping {
			for _, c := range in.conns {
				for !c.failed && len(c.free) > 0 {
					in.start(c)
					work = true
				}
			}
		}
		if stopping && (in.inflight() == 0 || now.After(drainBy)) {
			break
		}
		idle = backoff(work, idle)
	}
	in.collectReceipts()
	r.Elapsed = time.Since(start)
	r.Started = in.started
	r.Outstanding = in.inflight()
	for _, c := range in.conns {
		for i := range c.slots {
			if s := &c.slots[i]; s.phase != phIdle && len(r.InFlight) < 16 {
				r.InFlight = append(r.InFlight, fmt.Sprintf("connection %d (QP %v) slot %d: %s of %d bytes at %#x",
					c.idx, plumb.QP(c.qp).State(), i, phaseNames[s.phase], s.size, s.raddr))
			}
		}
	}
	if n := in.ctl.inflight(); n > 0 {
		r.InFlight = append(r.InFlight, fmt.Sprintf("%d control sends (QP %v)", n, plumb.QP(in.ctl.qp).State()))
	}
	for i, c := range in.conns {
		r.Receipts[i] = c.receipt
		r.Sent[i], r.SentBytes[i] = c.sendSeq, c.sendB
		if c.failed {
			r.Failed++
		}
		st := plumb.QP(c.qp).Stats()
		r.Retransmits += st.Retransmits
		r.Timeouts += st.Timeouts
		r.RNRNaks += st.RNRNaks
	}
	if in.ctl.failed {
		r.Failed++
	}
	r.ControlReceives = in.ctl.recvs
	return *r
}

// collectReceipts asks the target, per data connection, for a receipt once it has
// received every data message sent, and waits for them (up to ReceiptTimeout, or until the
// control connection fails; then until its flushed receives have completed too: the
// failure of a send can be seen before the flush of the receives is).
func (in *Initiator) collectReceipts() {
	ctl := in.ctl
	deadline := time.Now().Add(in.cfg.ReceiptTimeout)
	if !ctl.failed {
		for _, c := range in.conns {
			ctl.send(in, msg{typ: msgReport, conn: uint16(c.idx), count: c.sendSeq})
		}
	}
	idle := 0
	for time.Now().Before(deadline) {
		work := in.poll()
		if ctl.failed && ctl.inflight() == 0 && ctl.recvs == 0 {
			return
		}
		all := true
		for _, c := range in.conns {
			all = all && c.receipt != nil
		}
		if all && ctl.inflight() == 0 {
			return
		}
		idle = backoff(work, idle)
	}
}

func (in *Initiator) allFailed() bool {
	for _, c := range in.conns {
		if !c.failed {
			return false
		}
	}
	return true
}

// inflight counts requests posted and not completed: data operations' requests and
// control sends.
func (in *Initiator) inflight() int {
	n := in.ctl.inflight()
	for _, c := range in.conns {
		n += len(c.slots) - len(c.free)
	}
	return n
}

// start starts one operation on a free slot of c.
func (in *Initiator) start(c *iconn) {
	k := c.free[len(c.free)-1]
	c.free = c.free[:len(c.free)-1]
	s := &c.slots[k]
	m := &in.cfg.Mix
	total := m.Send + m.Write + m.Read + m.Window
	pick := in.rnd.intn(max(total, 1))
	switch {
	case pick < m.Send:
		s.op = opSend
	case pick < m.Send+m.Write:
		s.op = opWrite
	case pick < m.Send+m.Write+m.Read:
		s.op = opRead
	default:
		s.op = opWindow
		if len(c.wins) == 0 {
			s.op = opWrite
		}
	}
	if s.op == opSend && !c.canSend() {
		s.op = opWrite // the target has no receive posted for it yet
	}
	in.started++
	size := in.cfg.MaxSize
	switch s.op {
	case opSend:
		in.postSend(s, false)
	case opWrite:
		s.size = pickSize(in.rnd.next(), size)
		s.off = in.rnd.intn(size - s.size + 1)
		fillStream(s.src(), writeKey(in.cfg.Seed, c.idx, c.opSeq), 0)
		c.opSeq++
		s.raddr = c.lay.va + uint64(s.i*size+s.off)
		s.phase = phWrite
		in.post(s, c.qp.Write(s, []ndk.SGE{s.srcSGE()}, s.raddr, c.lay.token, 0))
	case opRead:
		rl := int(c.lay.readLen)
		s.size = pickSize(in.rnd.next(), min(size, rl))
		s.off = in.rnd.intn(rl - s.size + 1)
		s.raddr = c.lay.va + c.lay.readOff + uint64(s.off)
		s.phase = phRead
		in.post(s, c.qp.Read(s, []ndk.SGE{s.sinkSGE()}, s.raddr, c.lay.token, 0))
	case opWindow:
		s.win = c.wins[0]
		c.wins = append(c.wins[:0], c.wins[1:]...)
		s.size = pickSize(in.rnd.next(), int(s.win.length))
		s.off = in.rnd.intn(int(s.win.length) - s.size + 1)
		fillStream(s.src(), writeKey(in.cfg.Seed, c.idx, c.opSeq), 0)
		c.opSeq++
		s.raddr = s.win.addr + uint64(s.off)
		s.phase = phWinWrite
		in.post(s, c.qp.Write(s, []ndk.SGE{s.srcSGE()}, s.raddr, s.win.token, 0))
	}
	in.startedB += uint64(s.size)
}

// canSend reports whether the target has a receive posted for the next data message.
func (c *iconn) canSend() bool { return c.sendSeq < c.credit }

// postSend posts the connection's next data message from slot s: a Send, or with inv a
// SendAndInvalidate of the slot's window.
func (in *Initiator) postSend(s *islot, inv bool) {
	c := s.c
	seq := c.sendSeq
	c.sendSeq++
	s.seq = seq
	s.size = sendSize(in.cfg.Seed, c.idx, seq, in.cfg.MaxSize)
	c.sendB += uint64(s.size)
	fillStream(s.src(), sendKey(in.cfg.Seed, c.idx, seq), 0)
	s.phase = phSend
	if inv {
		in.post(s, c.qp.SendAndInvalidate(s, []ndk.SGE{s.srcSGE()}, 0, s.win.token))
		return
	}
	in.post(s, c.qp.Send(s, []ndk.SGE{s.srcSGE()}, 0))
}

// post accounts a post's inline error: the operation ends and the connection starts
// nothing more.
func (in *Initiator) post(s *islot, err error) {
	if err == nil {
		return
	}
	r := &in.rep
	r.PostErrors++
	if r.FirstPostError == nil {
		r.FirstPostError = fmt.Errorf("connection %d: post in phase %d: %w", s.c.idx, s.phase, err)
	}
	s.c.failed = true
	s.done()
}

func (s *islot) src() []byte {
	sz := s.c.in.cfg.MaxSize
	return s.c.buf.b[2*s.i*sz : 2*s.i*sz+s.size]
}

func (s *islot) sink() []byte {
	sz := s.c.in.cfg.MaxSize
	return s.c.buf.b[(2*s.i+1)*sz : (2*s.i+1)*sz+s.size]
}

func (s *islot) srcSGE() ndk.SGE  { return s.c.buf.mr.SGE(s.src()) }
func (s *islot) sinkSGE() ndk.SGE { return s.c.buf.mr.SGE(s.sink()) }

func (s *islot) done() {
	s.phase = phIdle
	s.c.free = append(s.c.free, s.i)
}

// poll takes every connection's completions and reports whether there were any.
func (in *Initiator) poll() bool {
	work := false
	for _, c := range in.conns {
		for {
			n := c.icq.GetResultsEx(in.res[:])
			for i := range in.res[:n] {
				in.completed(c, &in.res[i])
			}
			work = work || n > 0
			if n < len(in.res) {
				break
			}
		}
		var r [1]ndk.ResultEx
		for c.rcq.GetResultsEx(r[:]) > 0 { // nothing is posted there
			in.unexpected(fmt.Sprintf("connection %d: receive completion %v %v", c.idx, r[0].Type, r[0].Status))
		}
	}
	if in.ctl.poll(in) {
		work = true
	}
	return work
}

func (in *Initiator) unexpected(what string) {
	r := &in.rep
	r.Unexpected++
	if r.FirstUnexpected == "" {
		r.FirstUnexpected = what
	}
}

func (in *Initiator) mismatch(what string) {
	r := &in.rep
	r.Mismatches++
	if r.FirstMismatch == "" {
		r.FirstMismatch = what
	}
}

// phaseType is the completion type a phase's request reports.
func phaseType(ph int) ndk.OpType {
	switch ph {
	case phSend:
		return ndk.OpTypeSend
	case phWrite, phWinWrite:
		return ndk.OpTypeWrite
	}
	return ndk.OpTypeRead
}

// completed advances the operation of one completion.
func (in *Initiator) completed(c *iconn, r *ndk.ResultEx) {
	in.progress.Add(1)
	rep := &in.rep
	rep.Completions++
	rep.Statuses[r.Status]++
	s, ok := r.RequestContext.(*islot)
	if !ok || s.c != c || s.phase == phIdle {
		in.unexpected(fmt.Sprintf("connection %d: %v completion %v with context %T", c.idx, r.Type, r.Status, r.RequestContext))
		return
	}
	rep.LastDataCompletion = time.Now()
	if r.Status != ndk.StatusSuccess {
		if rep.FirstFailures[c.idx] == ndk.StatusSuccess {
			rep.FirstFailures[c.idx] = r.Status
		}
		if rep.FirstFailure == "" {
			rep.FirstFailureAt = rep.LastDataCompletion
			rep.FirstFailure = fmt.Sprintf("%s: connection %d: %v (%s, %d bytes at %#x) completed %v, provider code %d",
				rep.FirstFailureAt.Format("15:04:05.000000"), c.idx, r.Type, phaseNames[s.phase], s.size, s.raddr, r.Status, r.ProviderErrorCode)
		}
		c.failed = true
		s.done()
		return
	}
	if r.Type != phaseType(s.phase) {
		in.unexpected(fmt.Sprintf("connection %d: %v completion for a request of phase %d", c.idx, r.Type, s.phase))
		c.failed = true
		s.done()
		return
	}
	rep.Bytes += uint64(s.size)
	switch s.phase {
	case phSend:
		if s.op == opWindow {
			rep.SendInvalidates++
		} else {
			rep.Sends++
		}
		s.done()
	case phWrite, phWinWrite:
		// Read the range back through the region (a window grants remote write only).
		if s.phase == phWrite {
			s.phase = phWriteBack
		} else {
			s.phase = phWinBack
		}
		in.post(s, c.qp.Read(s, []ndk.SGE{s.sinkSGE()}, s.raddr, c.lay.token, 0))
	case phWriteBack, phWinBack:
		if i := compare(s.sink(), s.src()); i >= 0 {
			in.mismatch(fmt.Sprintf("connection %d: %d bytes written at %#x read back wrong from byte %d", c.idx, s.size, s.raddr, i))
		}
		if s.phase == phWriteBack {
			rep.Writes++
			s.done()
			return
		}
		rep.WindowWrites++
		c.winUses++
		if c.winUses%2 == 1 && c.canSend() {
			in.postSend(s, true)
			return
		}
		rep.Releases++
		in.ctl.send(in, msg{typ: msgRelease, conn: uint16(c.idx), window: s.win.window})
		s.done()
	case phRead:
		if i := checkStream(s.sink(), readKey(in.cfg.Seed, c.idx), s.off); i >= 0 {
			in.mismatch(fmt.Sprintf("connection %d: %d bytes read at read-area offset %d wrong from byte %d", c.idx, s.size, s.off, i))
		}
		rep.Reads++
		s.done()
	}
}

func compare(got, want []byte) int {
	for i := range want {
		if got[i] != want[i] {
			return i
		}
	}
	return -1
}
