package workload

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdpndk/xdpndk/ndk"
)

// Target is the passive side of the workload: it listens on an adapter, gives each
// connecting initiator registered memory (a region per data connection, receives, memory
// windows), checks every data message it receives, binds, invalidates and re-binds windows
// as the initiator uses them, and answers reports with receipts. It may run in the
// initiator's process or in another one. Run drives it; Stats is safe from any goroutine.
type Target struct {
	a   *ndk.Adapter
	cfg TargetConfig
	l   *ndk.Listener

	incoming chan *ndk.Connector
	accepted chan acceptDone

	// Run's goroutine only.
	sessions  map[uint64]*session
	accepting int // Accept calls in progress
	res       [32]ndk.ResultEx

	ctr targetCounters

	mu   sync.Mutex
	errs []error // the first maxErrs errors
}

// maxErrs bounds the errors a Target keeps.
const maxErrs = 8

// TargetStats are a Target's counters.
type TargetStats struct {
	Sessions    uint64 // control connections accepted
	Connections uint64 // data connections accepted
	Rejected    uint64 // connection requests refused (bad hello, unknown session, ...)
	Received    uint64 // data messages received
	Bytes       uint64 // their bytes
	Mismatches  uint64 // data messages with a wrong length or byte
	Binds       uint64 // window binds posted
	Invalidates uint64 // window invalidations completed (Invalidate)
	RemoteInv   uint64 // windows invalidated by the initiator's SendAndInvalidate
	Releases    uint64 // release messages received
	Receipts    uint64 // receipts sent
	Errors      uint64 // completions in error and protocol violations on live connections
	Closed      uint64 // sessions torn down
}

type targetCounters struct {
	sessions, conns, rejected, received, bytes, mismatches, binds, invalidates, remoteInv,
	releases, receipts, errors, closed atomic.Uint64
}

type acceptDone struct {
	ctl  *tctl
	data *tconn
	err  error
}

// session is one initiator's connections: a control connection and its data connections,
// sharing a PD.
type session struct {
	t     *Target
	h     hello // the control connection's hello
	pd    *ndk.PD
	ctl   *tctl
	conns []*tconn
}

// tctl is the target's end of a control connection.
type tctl struct {
	s        *session
	c        *ndk.Connector
	qp       *ndk.QP
	rcq, icq *ndk.CQ
	buf      *buffer // nrecv receive slots, then nsend send slots, msgLen bytes each
	rslots   []ctlSlot
	sslots   []ctlSlot
	sfree    []int
	backlog  []msg // messages waiting for a send slot (bounded: see send)
	up       bool
	gone     atomic.Bool
}

type ctlSlot struct{ i int }

// tconn is the target's end of a data connection.
type tconn struct {
	s        *session
	idx      int
	c        *ndk.Connector
	qp       *ndk.QP
	rcq, icq *ndk.CQ
	region   *buffer // write slots, windows' ranges, read area
	recv     *buffer // receive slots of maxSize
	lay      layout
	rslots   []trecv
	wins     []*twin
	up       bool
	gone     atomic.Bool

	nextSeq    uint64
	received   uint64
	bytes      uint64
	bad        uint64
	inv        uint64
	badSeq     uint64 // first mismatched message + 1
	badOff     uint32
	reportWant int64 // receipt owed once received reaches it; -1: none

	// Credits: the initiator sends data message k only once it knows that more than k
	// receives were posted in all, so a target that is slow to post them again (a
	// descheduled process) makes it wait instead of exhausting its RNR retries.
	posted       uint64 // receives posted since connecting
	announced    uint64 // the count the last credit message carried (the layout's at first)
	creditQueued bool   // a credit message waits in the control backlog
}

type trecv struct {
	c *tconn
	i int
}

// Window states at the target.
const (
	winIdle = iota
	winBound
	winInvalidating
)

type twin struct {
	c     *tconn
	i     int
	mw    *ndk.MW
	state int
	token uint32
	va    uint64
}

// NewTarget creates a target listening on cfg.Port of a. Run serves it.
func NewTarget(a *ndk.Adapter, cfg TargetConfig) (*Target, error) {
	t := &Target{a: a, cfg: cfg.withDefaults(), incoming: make(chan *ndk.Connector, 64),
		accepted: make(chan acceptDone, 64), sessions: map[uint64]*session{}}
	l, err := a.NewListener(func(c *ndk.Connector) {
		select {
		case t.incoming <- c:
		default:
			t.ctr.rejected.Add(1)
			_ = c.Reject(nil)
		}
	})
	if err != nil {
		return nil, err
	}
	if err := l.Listen(netip.AddrPortFrom(netip.Addr{}, t.cfg.Port)); err != nil {
		return nil, err
	}
	t.l = l
	return t, nil
}

// Stats returns the target's counters. Safe from any goroutine.
func (t *Target) Stats() TargetStats {
	c := &t.ctr
	return TargetStats{
		Sessions: c.sessions.Load(), Connections: c.conns.Load(), Rejected: c.rejected.Load(),
		Received: c.received.Load(), Bytes: c.bytes.Load(), Mismatches: c.mismatches.Load(),
		Binds: c.binds.Load(), Invalidates: c.invalidates.Load(), RemoteInv: c.remoteInv.Load(),
		Releases: c.releases.Load(), Receipts: c.receipts.Load(), Errors: c.errors.Load(),
		Closed: c.closed.Load(),
	}
}

// Err returns the first errors the target saw on live connections (completions in error,
// protocol violations, failed setups), or nil. Safe from any goroutine.
func (t *Target) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return errors.Join(t.errs...)
}

func (t *Target) fail(err error) {
	t.ctr.errors.Add(1)
	t.mu.Lock()
	if len(t.errs) < maxErrs {
		t.errs = append(t.errs, fmt.Errorf("%s: %w", time.Now().Format("15:04:05.000000"), err))
	}
	t.mu.Unlock()
}

// Run serves until ctx ends, then disconnects and frees everything. It returns ctx's error.
func (t *Target) Run(ctx context.Context) error {
	defer t.shutdown()
	idle := 0
	for ctx.Err() == nil {
		work := false
		select {
		case c := <-t.incoming:
			t.connectRequest(ctx, c)
			work = true
		case d := <-t.accepted:
			t.accepting--
			t.acceptFinished(d)
			work = true
		default:
		}
		for _, s := range t.sessions {
			if t.pollSession(s) {
				work = true
			}
		}
		idle = backoff(work, idle)
	}
	return ctx.Err()
}

// backoff sleeps a little after idle rounds, longer the longer nothing happens (up to
// 500 µs), and returns the new idle count.
func backoff(work bool, idle int) int {
	if work {
		return 0
	}
	idle++
	if idle > 8 {
		time.Sleep(time.Duration(min(idle, 50)) * 10 * time.Microsecond)
	}
	return idle
}

// connectRequest answers a connection request: a control connection opens a session, a
// data connection joins one.
func (t *Target) connectRequest(ctx context.Context, c *ndk.Connector) {
	var pd [helloLen]byte
	_, _, n, err := c.GetConnectionData(pd[:])
	var h hello
	if err == nil {
		h, err = decodeHello(pd[:min(n, len(pd))], t.cfg)
	}
	if err != nil {
		t.reject(c)
		return
	}
	s := t.sessions[h.session]
	if h.role == roleControl {
		if s != nil {
			t.reject(c)
			return
		}
		s, err = t.newSession(c, h)
		if err != nil {
			t.fail(err)
			t.reject(c)
			return
		}
		t.sessions[h.session] = s
		t.accepting++
		go func() {
			actx, cancel := context.WithTimeout(ctx, acceptTimeout)
			defer cancel()
			err := c.Accept(actx, s.ctl.qp, 0, 0, nil, func() { s.ctl.gone.Store(true) })
			t.accepted <- acceptDone{ctl: s.ctl, err: err}
		}()
		return
	}
	if s == nil || h.seed != s.h.seed || h.qps != s.h.qps || h.maxSize != s.h.maxSize ||
		h.outstanding != s.h.outstanding || h.windows != s.h.windows || h.readLen != s.h.readLen ||
		s.conns[h.conn] != nil {
		t.reject(c)
		return
	}
	tc, err := s.newConn(c, h)
	if err != nil {
		t.fail(err)
		t.reject(c)
		return
	}
	s.conns[h.conn] = tc
	priv := tc.lay.encode()
	t.accepting++
	go func() {
		actx, cancel := context.WithTimeout(ctx, acceptTimeout)
		defer cancel()
		err := c.Accept(actx, tc.qp, min(int(h.outstanding), 64), 0, priv, func() { tc.gone.Store(true) })
		t.accepted <- acceptDone{data: tc, err: err}
	}()
}

// acceptTimeout bounds an Accept.
const acceptTimeout = 10 * time.Second

func (t *Target) reject(c *ndk.Connector) {
	t.ctr.rejected.Add(1)
	_ = c.Reject(nil)
}

// acceptFinished marks a connection up, or tears down what failed to connect.
func (t *Target) acceptFinished(d acceptDone) {
	if d.ctl != nil {
		s := d.ctl.s
		if d.err != nil {
			t.fail(fmt.Errorf("accept control connection: %w", d.err))
			t.closeSession(s)
			return
		}
		d.ctl.up = true
		t.ctr.sessions.Add(1)
		return
	}
	c := d.data
	if d.err != nil {
		t.fail(fmt.Errorf("accept data connection %d: %w", c.idx, d.err))
		c.s.conns[c.idx] = nil
		c.close()
		return
	}
	c.up = true
	t.ctr.conns.Add(1)
	for _, w := range c.wins {
		c.bind(w)
	}
}

// newSession sets up the control connection's QP, CQs and buffers, receives posted.
func (t *Target) newSession(c *ndk.Connector, h hello) (*session, error) {
	pd, err := t.a.NewPD()
	if err != nil {
		return nil, err
	}
	s := &session{t: t, h: h, pd: pd, conns: make([]*tconn, h.qps)}
	nmsg := ctlMessages(int(h.qps), int(h.windows))
	nrecv, nsend := 2*nmsg, 2*nmsg
	ctl := &tctl{s: s, c: c, rslots: make([]ctlSlot, nrecv), sslots: make([]ctlSlot, nsend)}
	s.ctl = ctl
	if ctl.rcq, err = t.a.NewCQ(nrecv+4, nil); err != nil {
		return nil, err
	}
	if ctl.icq, err = t.a.NewCQ(nsend+4, nil); err != nil {
		ctl.close()
		return nil, err
	}
	if ctl.qp, err = pd.NewQP(ndk.QPConfig{ReceiveCQ: ctl.rcq, InitiatorCQ: ctl.icq,
		ReceiveQueueDepth: nrecv, InitiatorQueueDepth: nsend, MaxReceiveSGE: 1, MaxInitiatorSGE: 1}); err != nil {
		ctl.close()
		return nil, err
	}
	if ctl.buf, err = newBuffer(t.a, pd, (nrecv+nsend)*msgLen, false, ndk.MRAllowLocalWrite); err != nil {
		ctl.close()
		return nil, err
	}
	for i := range ctl.rslots {
		ctl.rslots[i].i = i
		if err := ctl.qp.Receive(&ctl.rslots[i], []ndk.SGE{ctl.buf.sge(i*msgLen, msgLen)}); err != nil {
			ctl.close()
			return nil, err
		}
	}
	for i := range ctl.sslots {
		ctl.sslots[i].i = nrecv + i
		ctl.sfree = append(ctl.sfree, i)
	}
	return s, nil
}

// newConn sets up a data connection: its region (write slots, windows' ranges, the read
// area written with its pattern), receives, windows.
func (s *session) newConn(c *ndk.Connector, h hello) (tc *tconn, err error) {
	a := s.t.a
	tc = &tconn{s: s, idx: int(h.conn), c: c, reportWant: -1}
	defer func() {
		if err != nil {
			tc.close()
		}
	}()
	size := int(h.maxSize)
	recvDepth := min(2*int(h.outstanding)+2, 4096)
	if tc.rcq, err = a.NewCQ(recvDepth+4, nil); err != nil {
		return tc, err
	}
	if tc.icq, err = a.NewCQ(2*int(h.windows)+8, nil); err != nil {
		return tc, err
	}
	if tc.qp, err = s.pd.NewQP(ndk.QPConfig{ReceiveCQ: tc.rcq, InitiatorCQ: tc.icq,
		ReceiveQueueDepth: recvDepth, InitiatorQueueDepth: 2*int(h.windows) + 4, MaxReceiveSGE: 1, MaxInitiatorSGE: 1}); err != nil {
		return tc, err
	}
	umem := useUMEM(s.t.cfg.Memory, tc.idx, false)
	slots := int(h.outstanding)
	regionLen := (slots+int(h.windows))*size + int(h.readLen)
	if tc.region, err = newBuffer(a, s.pd, regionLen, umem, ndk.MRAllowRemoteWrite|ndk.MRAllowRemoteRead); err != nil {
		return tc, err
	}
	readOff := (slots + int(h.windows)) * size
	fillStream(tc.region.b[readOff:], readKey(h.seed, tc.idx), 0)
	tc.lay = layout{va: tc.region.mr.VA(), length: uint64(regionLen), token: tc.region.mr.RemoteToken(),
		slots: uint16(slots), slotSize: h.maxSize, winOff: uint64(slots * size), windows: h.windows,
		readOff: uint64(readOff), readLen: h.readLen}
	if tc.recv, err = newBuffer(a, s.pd, recvDepth*size, !umem, ndk.MRAllowLocalWrite); err != nil {
		return tc, err
	}
	tc.rslots = make([]trecv, recvDepth)
	for i := range tc.rslots {
		tc.rslots[i] = trecv{c: tc, i: i}
		if err = tc.repost(i); err != nil {
			return tc, err
		}
	}
	tc.lay.recvs = uint16(recvDepth)
	tc.announced = tc.posted
	for i := 0; i < int(h.windows); i++ {
		mw, err := s.pd.NewMW()
		if err != nil {
			return tc, err
		}
		tc.wins = append(tc.wins, &twin{c: tc, i: i, mw: mw, va: tc.lay.va + tc.lay.winOff + uint64(i*size)})
	}
	return tc, nil
}

func (c *tconn) repost(i int) error {
	size := int(c.lay.slotSize)
	if err := c.qp.Receive(&c.rslots[i], []ndk.SGE{c.recv.sge(i*size, size)}); err != nil {
		return err
	}
	c.posted++
	return nil
}

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

// closeSession tears a session down: its data connections, then the control connection.
func (t *Target) closeSession(s *session) {
	for i, c := range s.conns {
		if c != nil {
			s.conns[i] = nil
			c.close()
		}
	}
	s.ctl.close()
	delete(t.sessions, s.h.session)
	t.ctr.closed.Add(1)
}

// closeTimeout bounds each wait of a teardown.
const closeTimeout = 2 * time.Second

func (c *tconn) close() {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if c.up && !c.gone.Load() && c.c != nil {
		_ = c.c.Disconnect(ctx)
	}
	if c.qp != nil {
		_ = c.qp.Close(ctx)
	}
	for _, w := range c.wins {
		_ = w.mw.Close(ctx)
	}
	for _, b := range []*buffer{c.region, c.recv} {
		if b != nil {
			_ = b.close(ctx)
		}
	}
	for _, cq := range []*ndk.CQ{c.rcq, c.icq} {
		if cq != nil {
			_ = cq.Close(ctx)
		}
	}
}

func (ctl *tctl) close() {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if ctl.up && !ctl.gone.Load() && ctl.c != nil {
		_ = ctl.c.Disconnect(ctx)
	}
	if ctl.qp != nil {
		_ = ctl.qp.Close(ctx)
	}
	if ctl.buf != nil {
		_ = ctl.buf.close(ctx)
	}
	for _, cq := range []*ndk.CQ{ctl.rcq, ctl.icq} {
		if cq != nil {
			_ = cq.Close(ctx)
		}
	}
}

// shutdown stops listening, waits for accepts in progress, and tears every session down.
func (t *Target) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = t.l.Close(ctx)
	for {
		select {
		case c := <-t.incoming:
			t.reject(c)
			continue
		default:
		}
		break
	}
	// Accepts in progress end with Run's context; their connections are torn down below.
	for t.accepting > 0 {
		select {
		case d := <-t.accepted:
			t.accepting--
			if d.err == nil && d.ctl != nil {
				d.ctl.up = true
			}
			if d.err == nil && d.data != nil {
				d.data.up = true
			}
		case <-ctx.Done():
			t.accepting = 0
		}
	}
	for _, s := range t.sessions {
		t.closeSession(s)
	}
}
