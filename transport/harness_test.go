package transport_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"

	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/simlink"
)

// testMem is a MemoryResolver over a few registered buffers: token -> region. The address
// of a region's first byte is base; rights are per region.
type testMem struct {
	mu      sync.Mutex
	regions map[uint32]*region
}

type region struct {
	pd     uint32
	base   uint64
	buf    []byte
	access memreg.Access
	valid  bool
}

func newTestMem() *testMem { return &testMem{regions: map[uint32]*region{}} }

func (m *testMem) add(token, pd uint32, base uint64, buf []byte, access memreg.Access) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.regions[token] = &region{pd: pd, base: base, buf: buf, access: access, valid: true}
}

// Acquire implements transport.MemoryResolver: Resolve, with the PD typed as memreg's.
func (m *testMem) Acquire(pd memreg.PD, token uint32, addr uint64, length uint32, access memreg.Access) (memreg.Span, error) {
	return m.Resolve(uint32(pd), token, addr, length, access)
}

func (m *testMem) Resolve(pd, token uint32, addr uint64, length uint32, access memreg.Access) (memreg.Span, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.regions[token]
	if r == nil || !r.valid || r.pd != pd || r.access&access != access || addr < r.base {
		return memreg.Span{}, memreg.ErrAccess
	}
	off := addr - r.base
	if off > uint64(len(r.buf)) || uint64(length) > uint64(len(r.buf))-off {
		return memreg.Span{}, memreg.ErrAccess
	}
	return memreg.Span{Buf: r.buf[off : off+uint64(length)], N: uint64(length)}, nil
}

func (m *testMem) Invalidate(pd memreg.PD, token uint32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.regions[token]
	if r == nil || !r.valid || r.pd != uint32(pd) {
		return memreg.ErrAccess
	}
	r.valid = false
	return nil
}

// recorder is a CompletionSink that keeps every completion of every QP (without its
// Request and Receive, valid only during the call; onComplete, if set, sees them).
type recorder struct {
	mu         sync.Mutex
	byQP       map[*transport.QP][]transport.Completion
	onComplete func(c *transport.Completion)
}

func newRecorder() *recorder { return &recorder{byQP: map[*transport.QP][]transport.Completion{}} }

func (r *recorder) Complete(qp *transport.QP, c *transport.Completion) {
	if r.onComplete != nil {
		r.onComplete(c)
	}
	cc := *c
	cc.Request, cc.Receive = nil, nil // valid only during the call
	r.mu.Lock()
	r.byQP[qp] = append(r.byQP[qp], cc)
	r.mu.Unlock()
}

// of returns the completions of qp for op kinds in ops (all if none).
func (r *recorder) of(qp *transport.QP, ops ...transport.OpKind) []transport.Completion {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []transport.Completion
	for _, c := range r.byQP[qp] {
		if len(ops) == 0 {
			out = append(out, c)
			continue
		}
		for _, o := range ops {
			if c.Op == o {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

// world is two engines on a simulated network, driven in virtual time by one goroutine.
type world struct {
	t      testing.TB
	clock  *simlink.ManualClock
	net    *simlink.Network
	la, lb *simlink.Link
	a, b   *transport.Engine
	memA   *testMem
	memB   *testMem
	rec    *recorder
}

func newWorld(t testing.TB, ncfg simlink.Config, tweak func(*transport.Config)) *world {
	t.Helper()
	return newWorldOn(t, ncfg, tweak, func(la, lb *simlink.Link) (link.Link, link.Link) { return la, lb })
}

// newWorldOn is newWorld with the engines on the links wrap makes of the pair's links
// (a tap, for instance).
func newWorldOn(t testing.TB, ncfg simlink.Config, tweak func(*transport.Config), wrap func(la, lb *simlink.Link) (link.Link, link.Link)) *world {
	t.Helper()
	w := &world{t: t, clock: simlink.NewManualClock(1), memA: newTestMem(), memB: newTestMem(), rec: newRecorder()}
	ncfg.Clock = w.clock
	w.la, w.lb = simlink.Pair(ncfg)
	w.net = w.la.Network()
	ea, eb := wrap(w.la, w.lb)
	mk := func(l link.Link, m *testMem) *transport.Engine {
		cfg := transport.DefaultConfig(l)
		cfg.Now = w.clock.Now
		cfg.Resolver = m
		if tweak != nil {
			tweak(&cfg)
		}
		e, err := transport.NewEngine(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	w.a, w.b = mk(ea, w.memA), mk(eb, w.memB)
	t.Cleanup(func() { w.net.Close() })
	return w
}

// step polls both engines once at the current virtual time; if neither did anything it
// moves the clock to the next thing due (an engine timer or a delivery). It reports false
// when nothing at all is scheduled.
func (w *world) step() bool {
	busy, next := w.poll(w.clock.Now())
	if busy {
		return true
	}
	if next == 0 {
		return false
	}
	w.clock.Set(next)
	return true
}

// poll polls both engines once at now. It reports whether either did anything, and the
// next time after now something is due (0: nothing is scheduled): the earlier of the
// engines' timers and the network's next delivery (at least now+1).
func (w *world) poll(now int64) (busy bool, next int64) {
	next, busy = w.net.PollAll(now, w.a, w.b)
	if next != 0 {
		next = max(next, now+1) // a datagram waiting: time still moves
	}
	return busy, next
}

// runUntil steps until cond holds, failing the test past limit of virtual time or when
// nothing is scheduled any more.
func (w *world) runUntil(limit time.Duration, what string, cond func() bool) {
	w.t.Helper()
	runSteps(w.t, w.clock, limit, 50_000_000, what, cond, w.step)
}

// runSteps calls step until cond holds, failing tb past limit of virtual time on clock,
// after more than maxSteps steps, or when step reports that nothing is scheduled any more
// and cond does not hold.
func runSteps(tb testing.TB, clock *simlink.ManualClock, limit time.Duration, maxSteps int, what string, cond, step func() bool) {
	tb.Helper()
	end := clock.Now() + int64(limit)
	for steps := 0; !cond(); steps++ {
		if clock.Now() > end {
			tb.Fatalf("%s: not done after %v of virtual time", what, limit)
		}
		if steps > maxSteps {
			tb.Fatalf("%s: not done after %d steps", what, steps)
		}
		if !step() && !cond() {
			tb.Fatalf("%s: nothing scheduled and not done (virtual time %v)", what, time.Duration(clock.Now()))
		}
	}
}

// connect makes a connected QP pair: qa on engine a connects to a listener on engine b.
func (w *world) connect(qcfg transport.QPConfig) (qa, qb *transport.QP) {
	w.t.Helper()
	qcfg.Sink = w.rec
	var err error
	if qa, err = w.a.NewQP(qcfg); err != nil {
		w.t.Fatal(err)
	}
	if qb, err = w.b.NewQP(qcfg); err != nil {
		w.t.Fatal(err)
	}
	l, err := w.b.Listen(7, 4)
	if err != nil {
		w.t.Fatal(err)
	}
	defer l.Close()
	conn, err := w.a.Connect(qa, w.lb.LocalAddr(), 7, []byte("hello"), 0)
	if err != nil {
		w.t.Fatal(err)
	}
	req := awaitRequest(w.t, w, "connection request", l)
	if string(req.PrivateData) != "hello" {
		w.t.Fatalf("request private data %q", req.PrivateData)
	}
	if err := req.Accept(qb, []byte("welcome"), 0); err != nil {
		w.t.Fatal(err)
	}
	finishConnect(w.t, w, conn, req, qa, func() {
		if string(conn.PeerPrivateData()) != "welcome" {
			w.t.Fatalf("reply private data %q", conn.PeerPrivateData())
		}
	})
	return qa, qb
}

// runner is a world run in virtual time until a condition holds: world or semWorld.
type runner interface {
	runUntil(limit time.Duration, what string, cond func() bool)
}

// awaitRequest runs r until listener l delivers a connection request.
func awaitRequest(tb testing.TB, r runner, what string, l *transport.Listener) *transport.ConnRequest {
	tb.Helper()
	var req *transport.ConnRequest
	r.runUntil(time.Second, what, func() bool { req = pollRequest(l); return req != nil })
	return req
}

// pollRequest returns the next connection request l has delivered, or nil if none is
// waiting.
func pollRequest(l *transport.Listener) *transport.ConnRequest {
	select {
	case req := <-l.Requests():
		return req
	default:
		return nil
	}
}

// finishConnect runs a connection whose request req was accepted to the end: the reply
// arrives without error, checkReply (if not nil) looks at it, the connector completes, and
// the connection is established on both sides (qa connected, req established without
// error).
func finishConnect(tb testing.TB, r runner, conn *transport.Connector, req *transport.ConnRequest, qa *transport.QP, checkReply func()) {
	tb.Helper()
	r.runUntil(time.Second, "connection reply", func() bool { d, _ := conn.Replied(); return d })
	if _, err := conn.Replied(); err != nil {
		tb.Fatalf("connect: %v", err)
	}
	if checkReply != nil {
		checkReply()
	}
	if err := conn.Complete(); err != nil {
		tb.Fatal(err)
	}
	r.runUntil(time.Second, "established", func() bool {
		d, _ := req.Established()
		return d && qa.State() == transport.QPConnected
	})
	if _, err := req.Established(); err != nil {
		tb.Fatalf("accept: %v", err)
	}
}

// pattern fills b with bytes derived from seed.
func pattern(b []byte, seed int) {
	for i := range b {
		b[i] = byte(seed*131 + i*7 + i>>8)
	}
}

func statusOf(cs []transport.Completion) string {
	s := ""
	for _, c := range cs {
		s += fmt.Sprintf("[%v %v %d ctx=%d] ", c.Op, c.Status, c.Bytes, c.Context)
	}
	return s
}
