package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/xdpndk/xdpndk/ndk"
)

// Initiator is the active side of the workload: a control connection and QPs data
// connections to a Target, each with its own CQs and memory, and the requests it keeps in
// flight on them. Dial connects it, Run drives it, Close disconnects it. Run and Close must
// not run concurrently; Progress, Disconnects and QPs are safe from any goroutine.
type Initiator struct {
	a       *ndk.Adapter
	cfg     Config
	session uint64
	pd      *ndk.PD
	ctl     *ictl
	conns   []*iconn
	rnd     rng
	res     [32]ndk.ResultEx

	progress atomic.Uint64 // completions so far
	disc     atomic.Int32  // disconnect callbacks so far
	rep      Report        // built by Run
	started  uint64        // operations started (Run)
	startedB uint64        // their bytes
	closed   bool
}

// Operation phases of a slot.
const (
	phIdle = iota
	phSend
	phWrite
	phWriteBack
	phRead
	phWinWrite
	phWinBack
)

var phaseNames = [...]string{phIdle: "idle", phSend: "send", phWrite: "write", phWriteBack: "write read-back",
	phRead: "read", phWinWrite: "window write", phWinBack: "window read-back"}

type opKind uint8

const (
	opSend opKind = iota
	opWrite
	opRead
	opWindow
)

// winInfo is a window the target announced.
type winInfo struct {
	window uint16
	addr   uint64
	length uint32
	token  uint32
}

// iconn is the initiator's end of a data connection.
type iconn struct {
	in       *Initiator
	idx      int
	c        *ndk.Connector
	qp       *ndk.QP
	rcq, icq *ndk.CQ
	buf      *buffer // per slot: a source and a sink of MaxSize bytes
	lay      layout
	slots    []islot
	free     []int
	wins     []winInfo // announced, not in use
	sendSeq  uint64    // data messages posted
	sendB    uint64    // their bytes
	credit   uint64    // receives the target posted for them in all, as far as we know
	winUses  uint64
	opSeq    uint64
	failed   bool
	receipt  *Receipt
}

type islot struct {
	c     *iconn
	i     int
	phase int
	op    opKind
	size  int
	off   int
	seq   uint64
	raddr uint64
	win   winInfo
}

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

// Dial connects an initiator on a to the target listening on cfg.Port at addr: first the
// control connection, then cfg.QPs data connections, each getting the target's memory
// layout in the accept's private data.
func Dial(ctx context.Context, a *ndk.Adapter, addr netip.Addr, cfg Config) (in *Initiator, err error) {
	if cfg, err = cfg.withDefaults(); err != nil {
		return nil, err
	}
	// The session names this initiator at the target: random, so that several initiators
	// (even with one seed) may connect to one target; the workload's bytes come from the
	// seed alone.
	in = &Initiator{a: a, cfg: cfg, rnd: rng{s: cfg.Seed}, session: rand.Uint64() | 1}
	defer func() {
		if err != nil {
			ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			_ = in.teardown(ctx, true)
			cancel()
			in = nil
		}
	}()
	if in.pd, err = a.NewPD(); err != nil {
		return in, err
	}
	h := hello{role: roleControl, session: in.session, seed: cfg.Seed, maxSize: uint32(cfg.MaxSize),
		outstanding: uint16(cfg.Outstanding), windows: uint16(cfg.Windows), readLen: uint32(cfg.ReadArea),
		qps: uint16(cfg.QPs)}
	if err = in.dialControl(ctx, addr, h); err != nil {
		return in, fmt.Errorf("control connection: %w", err)
	}
	for i := 0; i < cfg.QPs; i++ {
		h.role, h.conn = roleData, uint16(i)
		if err = in.dialData(ctx, addr, h); err != nil {
			return in, fmt.Errorf("data connection %d: %w", i, err)
		}
	}
	return in, nil
}

func (in *Initiator) dialControl(ctx context.Context, addr netip.Addr, h hello) (err error) {
	n := ctlMessages(in.cfg.QPs, in.cfg.Windows)
	ctl := &ictl{rslots: make([]ctlSlot, 2*n), sslots: make([]ctlSlot, n)}
	in.ctl = ctl
	a := in.a
	if ctl.rcq, err = a.NewCQ(len(ctl.rslots)+4, nil); err != nil {
		return err
	}
	if ctl.icq, err = a.NewCQ(len(ctl.sslots)+4, nil); err != nil {
		return err
	}
	if ctl.qp, err = in.pd.NewQP(ndk.QPConfig{ReceiveCQ: ctl.rcq, InitiatorCQ: ctl.icq,
		ReceiveQueueDepth: len(ctl.rslots), InitiatorQueueDepth: len(ctl.sslots), MaxReceiveSGE: 1, MaxInitiatorSGE: 1}); err != nil {
		return err
	}
	if ctl.buf, err = newBuffer(a, in.pd, (len(ctl.rslots)+len(ctl.sslots))*msgLen, false, ndk.MRAllowLocalWrite); err != nil {
		return err
	}
	for i := range ctl.rslots {
		ctl.rslots[i].i = i
		if err = ctl.qp.Receive(&ctl.rslots[i], []ndk.SGE{ctl.buf.sge(i*msgLen, msgLen)}); err != nil {
			return err
		}
		ctl.recvs++
	}
	for i := range ctl.sslots {
		ctl.sslots[i].i = len(ctl.rslots) + i
		ctl.sfree = append(ctl.sfree, i)
	}
	if ctl.c, err = a.NewConnector(); err != nil {
		return err
	}
	if err = ctl.c.Connect(ctx, ctl.qp, netip.AddrPortFrom(addr, in.cfg.Port), 0, 0, h.encode()); err != nil {
		return err
	}
	return ctl.c.CompleteConnect(ctx, func() { in.disc.Add(1) })
}

func (in *Initiator) dialData(ctx context.Context, addr netip.Addr, h hello) (err error) {
	a := in.a
	cfg := &in.cfg
	c := &iconn{in: in, idx: int(h.conn)}
	in.conns = append(in.conns, c)
	if c.rcq, err = a.NewCQ(4, nil); err != nil {
		return err
	}
	if c.icq, err = a.NewCQ(cfg.Outstanding+4, nil); err != nil {
		return err
	}
	// No receives: data messages go to the target only.
	if c.qp, err = in.pd.NewQP(ndk.QPConfig{ReceiveCQ: c.rcq, InitiatorCQ: c.icq, ReceiveQueueDepth: 1,
		InitiatorQueueDepth: cfg.Outstanding, MaxReceiveSGE: 1, MaxInitiatorSGE: 1}); err != nil {
		return err
	}
	if c.buf, err = newBuffer(a, in.pd, 2*cfg.Outstanding*cfg.MaxSize, useUMEM(cfg.Memory, c.idx, true), ndk.MRAllowLocalWrite); err != nil {
		return err
	}
	c.slots = make([]islot, cfg.Outstanding)
	for i := range c.slots {
		c.slots[i] = islot{c: c, i: i}
		c.free = append(c.free, i)
	}
	if c.c, err = a.NewConnector(); err != nil {
		return err
	}
	if err = c.c.Connect(ctx, c.qp, netip.AddrPortFrom(addr, cfg.Port), 0, min(cfg.Outstanding, 64), h.encode()); err != nil {
		return err
	}
	var priv [layoutLen]byte
	_, _, n, err := c.c.GetConnectionData(priv[:])
	if err != nil {
		_ = c.c.Reject(nil)
		return fmt.Errorf("accept private data: %w", err)
	}
	if c.lay, err = decodeLayout(priv[:min(n, len(priv))], &h); err != nil {
		_ = c.c.Reject(nil)
		return err
	}
	c.credit = uint64(c.lay.recvs)
	return c.c.CompleteConnect(ctx, func() { in.disc.Add(1) })
}

// Progress returns the completions the initiator has taken so far. Safe from any
// goroutine.
func (in *Initiator) Progress() uint64 { return in.progress.Load() }

// Disconnects returns how many disconnect callbacks (CompleteConnect's) have run: the
// peer disconnected or the connection aborted. Safe from any goroutine.
func (in *Initiator) Disconnects() int { return int(in.disc.Load()) }

// Connections returns the number of connections, the control one included.
func (in *Initiator) Connections() int { return len(in.conns) + 1 }

// QPs returns the data connections' QPs (for their transport statistics).
func (in *Initiator) QPs() []*ndk.QP {
	q := make([]*ndk.QP, len(in.conns))
	for i, c := range in.conns {
		q[i] = c.qp
	}
	return q
}

// ControlQP returns the control connection's QP.
func (in *Initiator) ControlQP() *ndk.QP { return in.ctl.qp }

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
		Sent: make([]uint64, len(in.conns)), SentBytes: make([]uint64, len(in.conns))}
	in.started, in.startedB = 0, 0
	for _, c := range in.conns {
		c.receipt = nil
	}
	var drainBy time.Time
	stopping := false
	idle := 0
	for {
		work := in.poll()
		now := time.Now()
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
	r := &in.rep
	r.Elapsed = time.Since(start)
	r.Started = in.started
	r.Outstanding = in.inflight()
	for _, c := range in.conns {
		for i := range c.slots {
			if s := &c.slots[i]; s.phase != phIdle && len(r.InFlight) < 16 {
				r.InFlight = append(r.InFlight, fmt.Sprintf("connection %d (QP %v) slot %d: %s of %d bytes at %#x",
					c.idx, c.qp.Transport().State(), i, phaseNames[s.phase], s.size, s.raddr))
			}
		}
	}
	if n := in.ctl.inflight(); n > 0 {
		r.InFlight = append(r.InFlight, fmt.Sprintf("%d control sends (QP %v)", n, in.ctl.qp.Transport().State()))
	}
	for i, c := range in.conns {
		r.Receipts[i] = c.receipt
		r.Sent[i], r.SentBytes[i] = c.sendSeq, c.sendB
		if c.failed {
			r.Failed++
		}
		st := c.qp.Transport().Stats()
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
// control connection fails).
func (in *Initiator) collectReceipts() {
	ctl := in.ctl
	if ctl.failed {
		return
	}
	for _, c := range in.conns {
		ctl.send(in, msg{typ: msgReport, conn: uint16(c.idx), count: c.sendSeq})
	}
	deadline := time.Now().Add(in.cfg.ReceiptTimeout)
	idle := 0
	for time.Now().Before(deadline) {
		work := in.poll()
		if ctl.failed && ctl.inflight() == 0 {
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

func (ctl *ictl) inflight() int { return len(ctl.sslots) - len(ctl.sfree) }

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
	if r.Status != ndk.StatusSuccess {
		if rep.FirstFailure == "" {
			rep.FirstFailure = fmt.Sprintf("%s: connection %d: %v (%s, %d bytes at %#x) completed %v, provider code %d",
				time.Now().Format("15:04:05.000000"), c.idx, r.Type, phaseNames[s.phase], s.size, s.raddr, r.Status, r.ProviderErrorCode)
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

// Close disconnects every connection (a failed one is just closed) and frees everything.
// ctx bounds each wait. Safe to call after a failed Run.
func (in *Initiator) Close(ctx context.Context) error {
	if in.closed {
		return nil
	}
	in.closed = true
	return in.teardown(ctx, true)
}

// teardown closes what Dial made, disconnecting connections that did not fail first if
// disconnect is set.
func (in *Initiator) teardown(ctx context.Context, disconnect bool) error {
	var errs []error
	for _, c := range in.conns {
		if disconnect && !c.failed && c.c != nil {
			errs = append(errs, c.c.Disconnect(ctx))
		}
		if c.qp != nil {
			errs = append(errs, c.qp.Close(ctx))
		}
		if c.buf != nil {
			errs = append(errs, c.buf.close(ctx))
		}
		for _, cq := range []*ndk.CQ{c.rcq, c.icq} {
			if cq != nil {
				errs = append(errs, cq.Close(ctx))
			}
		}
	}
	if ctl := in.ctl; ctl != nil {
		if disconnect && !ctl.failed && ctl.c != nil {
			errs = append(errs, ctl.c.Disconnect(ctx))
		}
		if ctl.qp != nil {
			errs = append(errs, ctl.qp.Close(ctx))
		}
		if ctl.buf != nil {
			errs = append(errs, ctl.buf.close(ctx))
		}
		for _, cq := range []*ndk.CQ{ctl.rcq, ctl.icq} {
			if cq != nil {
				errs = append(errs, cq.Close(ctx))
			}
		}
	}
	return errors.Join(errs...)
}
