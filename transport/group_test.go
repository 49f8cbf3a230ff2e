package transport_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/link"
	"github.com/xdpndk/xdpndk/transport/simlink"
)

// gworld is two hosts of several engines each (a transport.Group over the queues of a
// simlink host, simlink.AddQueues), driven in virtual time by one goroutine.
type gworld struct {
	t          testing.TB
	clock      *simlink.ManualClock
	net        *simlink.Network
	addrA      netip.AddrPort
	addrB      netip.AddrPort
	ga, gb     *transport.Group
	memA, memB *testMem
	rec        *recorder
	pollers    []simlink.Poller
}

// newGroupWorld makes host A with na engines and host B with nb, steered as steer says.
func newGroupWorld(t testing.TB, na, nb int, steer simlink.Steer, tweak func(*transport.Config)) *gworld {
	t.Helper()
	w := &gworld{t: t, clock: simlink.NewManualClock(1), memA: newTestMem(), memB: newTestMem(), rec: newRecorder(),
		addrA: netip.MustParseAddrPort("198.18.0.1:4793"), addrB: netip.MustParseAddrPort("198.18.0.2:4793")}
	w.net = simlink.NewNetwork(simlink.Config{Clock: w.clock})
	t.Cleanup(func() { w.net.Close() })
	mk := func(addr netip.AddrPort, n int, m *testMem) *transport.Group {
		qs, err := w.net.AddQueues(addr, n, steer)
		if err != nil {
			t.Fatal(err)
		}
		links := make([]link.Link, n)
		for i := range qs {
			links[i] = qs[i]
		}
		cfg := transport.DefaultConfig(links[0])
		cfg.Now = w.clock.Now
		cfg.Resolver = m
		if tweak != nil {
			tweak(&cfg)
		}
		g, err := transport.NewGroup(cfg, links)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range g.Engines() {
			w.pollers = append(w.pollers, e)
		}
		return g
	}
	w.ga, w.gb = mk(w.addrA, na, w.memA), mk(w.addrB, nb, w.memB)
	return w
}

func (w *gworld) step() bool {
	now := w.clock.Now()
	next, busy := w.net.PollAll(now, w.pollers...)
	if busy {
		return true
	}
	if next == 0 {
		return false
	}
	w.clock.Set(max(next, now+1))
	return true
}

func (w *gworld) runUntil(limit time.Duration, what string, cond func() bool) {
	w.t.Helper()
	runSteps(w.t, w.clock, limit, 50_000_000, what, cond, w.step)
}

// pairs connects n QP pairs: A's from its group (placed there), B's from its group, each
// accepted on B's listener.
func (w *gworld) pairs(n int, cfgA, cfgB transport.QPConfig) (qas, qbs []*transport.QP) {
	w.t.Helper()
	l, err := w.gb.Listen(7, n)
	if err != nil {
		w.t.Fatal(err)
	}
	defer l.Close()
	cfgA.Sink, cfgB.Sink = w.rec, w.rec
	for range n {
		qa, err := w.ga.NewQP(cfgA)
		if err != nil {
			w.t.Fatal(err)
		}
		qb, err := w.gb.NewQP(cfgB)
		if err != nil {
			w.t.Fatal(err)
		}
		w.connectPair(l, qa, qb)
		qas, qbs = append(qas, qa), append(qbs, qb)
	}
	return qas, qbs
}

// connectPair connects qa to B's listener l and accepts with qb.
func (w *gworld) connectPair(l *transport.Listener, qa, qb *transport.QP) *transport.ConnRequest {
	w.t.Helper()
	conn, err := w.ga.Connect(qa, w.addrB, 7, nil, 0)
	if err != nil {
		w.t.Fatal(err)
	}
	req := awaitRequest(w.t, w, "connection request", l)
	if err := req.Accept(qb, nil, 0); err != nil {
		w.t.Fatal(err)
	}
	finishConnect(w.t, w, conn, req, qa, nil)
	return req
}

// exchange moves a Send (B to A), a Write and a Read (A to B) of size bytes over each pair,
// byte-exact, all pairs at once.
func (w *gworld) exchange(qas, qbs []*transport.QP, size int) {
	w.t.Helper()
	type bufs struct{ recv, send, target, src, back []byte }
	bs := make([]bufs, len(qas))
	for i := range qas {
		b := &bs[i]
		b.recv, b.send, b.target, b.src, b.back = make([]byte, size), make([]byte, size), make([]byte, size), make([]byte, size), make([]byte, size)
		pattern(b.send, i)
		pattern(b.src, 1000+i)
		token := uint32(100 + i)
		base := uint64(1)<<32 + uint64(i)<<24
		w.memB.add(token, 0, base, b.target, memreg.AccessRemoteWrite|memreg.AccessRemoteRead)
		r := transport.Receive{Context: 1, NSGE: 1}
		r.SGL[0] = b.recv
		if err := qas[i].PostReceive(&r); err != nil {
			w.t.Fatal(err)
		}
		s := transport.WorkRequest{Kind: transport.OpSend, Context: 2, NSGE: 1}
		s.SGL[0] = b.send
		if err := qbs[i].PostSend(&s); err != nil {
			w.t.Fatal(err)
		}
		wr := transport.WorkRequest{Kind: transport.OpWrite, Context: 3, NSGE: 1, RemoteAddr: base, RemoteToken: token}
		wr.SGL[0] = b.src
		if err := qas[i].PostSend(&wr); err != nil {
			w.t.Fatal(err)
		}
		rd := transport.WorkRequest{Kind: transport.OpRead, Context: 4, NSGE: 1, RemoteAddr: base, RemoteToken: token}
		rd.SGL[0] = b.back
		if err := qas[i].PostSend(&rd); err != nil {
			w.t.Fatal(err)
		}
	}
	done := func(q *transport.QP, want int) bool { return len(w.rec.of(q)) >= want }
	counts := make([]int, len(qas))
	countsB := make([]int, len(qas))
	for i := range qas {
		counts[i], countsB[i] = len(w.rec.of(qas[i]))+3, len(w.rec.of(qbs[i]))+1
	}
	w.runUntil(10*time.Second, "exchange", func() bool {
		for i := range qas {
			if !done(qas[i], counts[i]) || !done(qbs[i], countsB[i]) {
				return false
			}
		}
		return true
	})
	for i := range qas {
		for _, c := range append(w.rec.of(qas[i]), w.rec.of(qbs[i])...) {
			if c.Status != transport.StatusSuccess {
				w.t.Fatalf("pair %d: %s", i, statusOf(w.rec.of(qas[i])))
			}
		}
		b := &bs[i]
		if !bytes.Equal(b.recv, b.send) || !bytes.Equal(b.target, b.src) || !bytes.Equal(b.back, b.src) {
			w.t.Fatalf("pair %d: bytes differ (send %v, write %v, read %v)", i,
				bytes.Equal(b.recv, b.send), bytes.Equal(b.target, b.src), bytes.Equal(b.back, b.src))
		}
	}
}

// On a bed where a datagram arrives on the queue of the sender's index (veth), QPs placed
// on both engines of A connect to QPs of B, which move to the engine of the same index when
// accepted: the QPNs name their engines, Send, Write and Read are byte-exact on every pair,
// and nothing is forwarded on either side.
func TestGroupPlacedRight(t *testing.T) {
	w := newGroupWorld(t, 2, 2, simlink.SteerSenderQueue, nil)
	// B's QPs are all made on engine 0 or 1 in turn before any connects, so half of them
	// must move at Accept.
	qas, qbs := w.pairs(6, transport.QPConfig{}, transport.QPConfig{})
	perEngine := [2]int{}
	for i := range qas {
		ea, eb := qas[i].Engine().Index(), qbs[i].Engine().Index()
		if ea != eb {
			t.Fatalf("pair %d: A's QP on engine %d, B's on %d", i, ea, eb)
		}
		for _, q := range []*transport.QP{qas[i], qbs[i]} {
			if int(q.QPN()&1) != q.Engine().Index() {
				t.Fatalf("QPN %#x on engine %d", q.QPN(), q.Engine().Index())
			}
		}
		perEngine[ea]++
	}
	if perEngine[0] == 0 || perEngine[1] == 0 {
		t.Fatalf("QPs per engine %v: not spread", perEngine)
	}
	w.exchange(qas, qbs, 20000)
	for name, g := range map[string]*transport.Group{"A": w.ga, "B": w.gb} {
		s := g.Stats()
		if s.Forwarded != 0 || s.ForwardDropped != 0 {
			t.Errorf("%s forwarded %d (dropped %d) on a bed placed right", name, s.Forwarded, s.ForwardDropped)
		}
		for _, e := range g.Engines() {
			if e.Stats().RxPackets == 0 {
				t.Errorf("%s's engine %d received nothing", name, e.Index())
			}
		}
	}
}

// Where RSS, not the sender, picks the queue, a QP's datagrams arrive at whichever engine
// their flow hashes to: they are forwarded to the engine that owns the QP (and connection
// replies to the engine of the attempt), and every verb is still byte-exact.
func TestGroupForwarding(t *testing.T) {
	w := newGroupWorld(t, 2, 2, simlink.SteerFlowHash, nil)
	// Each QP's source port is random, so each direction's flow of a pair hashes to the
	// wrong engine with probability 1/2: with 8 pairs a side forwarded nothing in about 1
	// run of 256 (CI, race pass), with 16 in about 1 of 65,536.
	qas, qbs := w.pairs(16, transport.QPConfig{}, transport.QPConfig{})
	w.exchange(qas, qbs, 20000)
	// The last acknowledgements may still wait in an inbox.
	w.runUntil(time.Second, "inboxes taken", func() bool {
		a, b := w.ga.Stats(), w.gb.Stats()
		return a.ForwardReceived == a.Forwarded && b.ForwardReceived == b.Forwarded
	})
	for name, g := range map[string]*transport.Group{"A": w.ga, "B": w.gb} {
		s := g.Stats()
		t.Logf("%s: %+v", name, s)
		if s.Forwarded == 0 {
			t.Errorf("%s forwarded nothing: no QP's flow hashed to the other engine?", name)
		}
		if s.ForwardReceived != s.Forwarded || s.ForwardDropped != 0 {
			t.Errorf("%s: forwarded %d, received %d, dropped %d", name, s.Forwarded, s.ForwardReceived, s.ForwardDropped)
		}
		if s.NoQP != 0 || s.BadCookie != 0 || s.BadSource != 0 {
			t.Errorf("%s: datagrams dropped as not matching a QP: %+v", name, s.EngineStats)
		}
	}
}

// An engine alone in its group (one link) is an engine as NewEngine makes it: QPNs in
// steps of one, no forwarding; and a group refuses no links or more than MaxEngines.
func TestGroupOfOne(t *testing.T) {
	w := newGroupWorld(t, 1, 1, simlink.SteerSenderQueue, nil)
	qas, qbs := w.pairs(2, transport.QPConfig{}, transport.QPConfig{})
	if qas[1].QPN() != qas[0].QPN()+1 {
		t.Errorf("QPNs %d, %d on an engine alone", qas[0].QPN(), qas[1].QPN())
	}
	w.exchange(qas, qbs, 3000)
	if w.ga.Engines()[0].Group() != nil {
		t.Error("an engine alone has a group")
	}
	if _, err := transport.NewGroup(transport.Config{}, nil); err == nil {
		t.Error("a group of no links")
	}
	cfg := transport.Config{InboxSlots: 3}
	if _, err := transport.NewGroup(cfg, []link.Link{simlinkOne(t)}); err == nil {
		t.Error("inbox slots 3 accepted")
	}
}

func simlinkOne(t *testing.T) link.Link {
	a, _ := simlink.Pair(simlink.Config{})
	t.Cleanup(func() { a.Network().Close() })
	return a
}

// A bounded inbox: with room for two datagrams, a 1 MiB Write whose datagrams arrive at the
// engine that does not own the QP overflows it. What did not fit is dropped and counted,
// retransmitted by the sender, and the Write completes byte-exact on a connection that is
// still up.
func TestGroupInboxFull(t *testing.T) {
	w := newGroupWorld(t, 1, 2, simlink.SteerFlowHash, func(c *transport.Config) { c.InboxSlots = 2 })
	l, err := w.gb.Listen(7, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var qa, qb *transport.QP
	for tries := 0; qa == nil; tries++ {
		if tries == 16 {
			t.Fatal("no QP of 16 had its datagrams arrive at the other engine of B")
		}
		a, err := w.ga.NewQP(transport.QPConfig{Sink: w.rec})
		if err != nil {
			t.Fatal(err)
		}
		b, err := w.gb.NewQP(transport.QPConfig{Sink: w.rec})
		if err != nil {
			t.Fatal(err)
		}
		w.connectPair(l, a, b)
		// Does a datagram of a's arrive at the engine that owns b? A Send tells.
		before := w.gb.Stats().Forwarded
		w.exchange([]*transport.QP{a}, []*transport.QP{b}, 100)
		if w.gb.Stats().Forwarded > before {
			qa, qb = a, b
		}
	}
	const size = 1 << 20
	src, target := make([]byte, size), make([]byte, size)
	pattern(src, 7)
	w.memB.add(999, 0, 1<<40, target, memreg.AccessRemoteWrite)
	wr := transport.WorkRequest{Kind: transport.OpWrite, Context: 77, NSGE: 1, RemoteAddr: 1 << 40, RemoteToken: 999}
	wr.SGL[0] = src
	if err := qa.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	n := len(w.rec.of(qa))
	w.runUntil(30*time.Second, "the write", func() bool { return len(w.rec.of(qa)) > n })
	c := w.rec.of(qa)[n]
	if c.Status != transport.StatusSuccess || c.Context != 77 {
		t.Fatalf("write: %+v", c)
	}
	if !bytes.Equal(src, target) {
		t.Fatal("write: bytes differ")
	}
	s := w.gb.Stats()
	t.Logf("B: %+v; A's QP: %d retransmissions", s, qa.Stats().Retransmits)
	if s.ForwardDropped == 0 {
		t.Error("nothing dropped for a full inbox of two slots")
	}
	if qa.State() != transport.QPConnected || qb.State() != transport.QPConnected {
		t.Fatalf("states %v, %v", qa.State(), qb.State())
	}
	w.exchange([]*transport.QP{qa}, []*transport.QP{qb}, 5000) // still carries traffic
}

// Flush, Disconnect and Close on QPs of both engines of a group: each QP's outstanding
// receives complete cancelled on its own engine, a disconnect reaches the peer on its
// engine, Close removes QPs of either engine (moved or not) and the group makes new ones.
func TestGroupFlushDisconnectClose(t *testing.T) {
	w := newGroupWorld(t, 2, 2, simlink.SteerFlowHash, nil)
	qas, qbs := w.pairs(4, transport.QPConfig{}, transport.QPConfig{})
	// Flush QPs 0 and 1 of B (one per engine, by the placement) with receives posted.
	for i := range 2 {
		r := transport.Receive{Context: 50, NSGE: 1}
		r.SGL[0] = make([]byte, 64)
		if err := qbs[i].PostReceive(&r); err != nil {
			t.Fatal(err)
		}
		qbs[i].Flush()
	}
	w.runUntil(time.Second, "flush", func() bool {
		return len(w.rec.of(qbs[0], transport.OpReceive)) == 1 && len(w.rec.of(qbs[1], transport.OpReceive)) == 1
	})
	for i := range 2 {
		if c := w.rec.of(qbs[i], transport.OpReceive)[0]; c.Status != transport.StatusCancelled {
			t.Fatalf("flushed receive: %+v", c)
		}
		if qbs[i].State() != transport.QPError {
			t.Fatalf("flushed QP is %v", qbs[i].State())
		}
	}
	// Disconnect A's QPs 2 and 3: their peers learn it.
	ds := []*transport.Disconnecting{qas[2].StartDisconnect(0), qas[3].StartDisconnect(0)}
	w.runUntil(5*time.Second, "disconnect", func() bool {
		for _, d := range ds {
			if done, _ := d.Done(); !done {
				return false
			}
		}
		return qbs[2].State() == transport.QPDisconnected && qbs[3].State() == transport.QPDisconnected
	})
	for _, d := range ds {
		if _, err := d.Done(); err != nil {
			t.Fatalf("disconnect: %v", err)
		}
	}
	// Close everything, each on its engine.
	closing := make(chan error, len(qas)+len(qbs))
	for _, q := range append(qas, qbs...) {
		go func() {
			closing <- q.Close(context.Background())
		}()
	}
	for closed, deadline := 0, time.Now().Add(10*time.Second); closed < len(qas)+len(qbs); {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d QPs closed", closed, len(qas)+len(qbs))
		}
		select {
		case err := <-closing:
			if err != nil {
				t.Fatal(err)
			}
			closed++
		default:
			if !w.step() {
				time.Sleep(20 * time.Microsecond) // the closing goroutines post in real time
			}
		}
	}
	more, _ := w.pairs(2, transport.QPConfig{}, transport.QPConfig{})
	if len(more) != 2 {
		t.Fatal("no new pairs after closing")
	}
}

// The bound on QPs is the group's, whatever the engines hold each.
func TestGroupMaxQPs(t *testing.T) {
	w := newGroupWorld(t, 3, 1, simlink.SteerSenderQueue, func(c *transport.Config) { c.MaxQPs = 5 })
	var qs []*transport.QP
	for range 5 {
		q, err := w.ga.NewQP(transport.QPConfig{Sink: w.rec})
		if err != nil {
			t.Fatal(err)
		}
		qs = append(qs, q)
	}
	if _, err := w.ga.NewQP(transport.QPConfig{Sink: w.rec}); !errors.Is(err, transport.ErrTooManyQPs) {
		t.Fatalf("sixth QP: %v", err)
	}
	seen := map[int]int{}
	for _, q := range qs {
		seen[q.Engine().Index()]++
	}
	if len(seen) != 3 {
		t.Fatalf("QPs per engine %v", seen)
	}
	if w.ga.MaxQPs() != 5 {
		t.Fatal("MaxQPs")
	}
}

// SRQs belong to one engine: a QP on an SRQ is made on the SRQ's engine, and stays there
// when accepted on a request that arrived at the other engine (the request is handed over,
// the QP's datagrams that arrive elsewhere are forwarded); Sends into it take the SRQ's
// receives byte-exact. A QP may not use the SRQ of another group.
func TestGroupSRQ(t *testing.T) {
	w := newGroupWorld(t, 2, 2, simlink.SteerSenderQueue, nil)
	srq, err := w.gb.NewSRQ(64)
	if err != nil {
		t.Fatal(err)
	}
	home := srq.Engine().Index()
	l, err := w.gb.Listen(7, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var bufs [][]byte
	for i := range 8 {
		b := make([]byte, 3000)
		bufs = append(bufs, b)
		r := transport.Receive{Context: uint64(i), NSGE: 1}
		r.SGL[0] = b
		if err := srq.PostReceive(&r); err != nil {
			t.Fatal(err)
		}
	}
	var qas, qbs []*transport.QP
	crossed := 0
	for range 4 {
		qa, err := w.ga.NewQP(transport.QPConfig{Sink: w.rec})
		if err != nil {
			t.Fatal(err)
		}
		qb, err := w.gb.NewQP(transport.QPConfig{Sink: w.rec, SRQ: srq})
		if err != nil {
			t.Fatal(err)
		}
		if qb.Engine() != srq.Engine() {
			t.Fatalf("QP on an SRQ of engine %d made on engine %d", home, qb.Engine().Index())
		}
		req := w.connectPair(l, qa, qb)
		if qb.Engine() != srq.Engine() || req.Engine() != srq.Engine() {
			t.Fatalf("accepted: QP on engine %d, request on %d, SRQ on %d", qb.Engine().Index(), req.Engine().Index(), home)
		}
		if qa.Engine().Index() != home {
			crossed++
		}
		qas, qbs = append(qas, qa), append(qbs, qb)
	}
	if crossed == 0 {
		t.Fatal("every request arrived at the SRQ's engine: nothing was handed over")
	}
	for i, qa := range qas {
		s := transport.WorkRequest{Kind: transport.OpSend, Context: 9, NSGE: 1}
		s.SGL[0] = make([]byte, 3000)
		pattern(s.SGL[0], i)
		if err := qa.PostSend(&s); err != nil {
			t.Fatal(err)
		}
	}
	w.runUntil(5*time.Second, "sends", func() bool {
		n := 0
		for _, qb := range qbs {
			n += len(w.rec.of(qb, transport.OpReceive))
		}
		return n == len(qbs)
	})
	got := map[string]bool{}
	for _, qb := range qbs {
		c := w.rec.of(qb, transport.OpReceive)[0]
		if c.Status != transport.StatusSuccess || c.Bytes != 3000 {
			t.Fatalf("receive: %+v", c)
		}
		got[string(bufs[c.Context])] = true
	}
	for i := range qas {
		want := make([]byte, 3000)
		pattern(want, i)
		if !got[string(want)] {
			t.Fatalf("the Send of pair %d landed nowhere", i)
		}
	}
	if s := w.gb.Stats(); s.Forwarded == 0 {
		t.Error("nothing forwarded to the SRQ's engine")
	}
	// An SRQ of another group is refused.
	other := newGroupWorld(t, 2, 1, simlink.SteerSenderQueue, nil)
	if _, err := other.ga.NewQP(transport.QPConfig{Sink: w.rec, SRQ: srq}); err == nil {
		t.Fatal("a QP on the SRQ of another group")
	}
}

// Listen on a group listens on every engine; a second listener on the service is refused
// on all, and closing the first frees the service on all.
func TestGroupListen(t *testing.T) {
	w := newGroupWorld(t, 1, 3, simlink.SteerSenderQueue, nil)
	l, err := w.gb.Listen(9, 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.gb.Listen(9, 4); !errors.Is(err, transport.ErrListening) {
		t.Fatalf("second listener: %v", err)
	}
	for _, e := range w.gb.Engines() {
		if _, err := e.Listen(9, 1); !errors.Is(err, transport.ErrListening) {
			t.Fatalf("engine %d took a second listener: %v", e.Index(), err)
		}
	}
	l.Close()
	l2, err := w.gb.Listen(9, 4)
	if err != nil {
		t.Fatalf("listen after close: %v", err)
	}
	l2.Close()
}

// Group.Stats sums every counter of the engines, those EngineStats gains later included.
func TestGroupStatsSumsEveryCounter(t *testing.T) {
	w := newGroupWorld(t, 3, 1, simlink.SteerSenderQueue, nil)
	qas, qbs := w.pairs(3, transport.QPConfig{}, transport.QPConfig{})
	w.exchange(qas, qbs, 3000)
	sum := w.ga.Stats()
	var want transport.GroupStats
	for _, e := range w.ga.Engines() {
		x := e.GroupStats()
		want.RxPackets += x.RxPackets
		want.TxPackets += x.TxPackets
		want.Forwarded += x.Forwarded
	}
	if sum.RxPackets != want.RxPackets || sum.TxPackets != want.TxPackets || sum.Forwarded != want.Forwarded || sum.RxPackets == 0 {
		t.Fatalf("sum %+v, want rx %d tx %d", sum, want.RxPackets, want.TxPackets)
	}
	// Every uint64 field: two engines' worth of ones make twos.
	var one transport.GroupStats
	v := reflect.ValueOf(&one).Elem()
	var set func(v reflect.Value)
	set = func(v reflect.Value) {
		for i := range v.NumField() {
			switch f := v.Field(i); f.Kind() {
			case reflect.Uint64:
				f.SetUint(1)
			case reflect.Struct:
				set(f)
			}
		}
	}
	set(v)
	got := transport.SumGroupStats(one, one)
	var check func(v reflect.Value, path string)
	check = func(v reflect.Value, path string) {
		for i := range v.NumField() {
			switch f := v.Field(i); f.Kind() {
			case reflect.Uint64:
				if f.Uint() != 2 {
					t.Errorf("%s%s summed to %d", path, v.Type().Field(i).Name, f.Uint())
				}
			case reflect.Struct:
				check(f, path+v.Type().Field(i).Name+".")
			}
		}
	}
	check(reflect.ValueOf(got), "")
}
