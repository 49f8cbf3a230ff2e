package ndk

import (
	"context"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"

	"github.com/xdpndk/xdpndk/internal/privileged"
	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport/simlink"
	"github.com/xdpndk/xdpndk/xdp"
)

// The conformance suite runs every test twice, with the same code: over simlink
// (unprivileged, in-memory) and over AF_XDP between two network-namespace hosts joined by
// a veth pair (privileged: skipped without root, a failure when XDPNDK_REQUIRE_PRIVILEGED=1).

// linkKind opens two adapters that can reach each other.
type linkKind struct {
	name string
	open func(t testing.TB, opts Options) (a, b *Adapter)
}

const testPort = 4793

func linkKinds() []linkKind {
	return []linkKind{
		{"simlink", func(t testing.TB, opts Options) (*Adapter, *Adapter) {
			la, lb := simlink.Pair(simlink.Config{Seed: 1, MaxPayload: 8972})
			return openT(t, la, withUMEM(t, opts)), openT(t, lb, withUMEM(t, opts))
		}},
		{"afxdp", func(t testing.TB, opts Options) (*Adapter, *Adapter) {
			privileged.Require(t)
			bed := testbed.NewT(t, testbed.Options{MTU: 9000})
			cfg := xdp.Config{Port: testPort, RingSize: 1024, Frames: 4096, HeapSize: 8 << 20}
			// Reference UMEM payloads even in veth's copy mode, so the suite covers the
			// zero-copy completion rules.
			opts.ZeroCopyTx = true
			return openXDP(t, bed.A, cfg, opts), openXDP(t, bed.B, cfg, opts)
		}},
		// Two engines per adapter on hosts of two queues each, where a datagram lands on
		// the queue a hash of its flow picks (as a NIC's RSS does): a QP's datagrams often
		// arrive at the engine that does not own it and are forwarded.
		{"simlink-2engines", func(t testing.TB, opts Options) (*Adapter, *Adapter) {
			a, b := openQueues(t, 2, 2, simlink.SteerFlowHash, opts)
			return a, b
		}},
	}
}

// openQueues opens two adapters of na and nb engines on simulated hosts of as many queues
// (at 198.18.0.1 and .2), steered as steer says.
func openQueues(t testing.TB, na, nb int, steer simlink.Steer, opts Options) (a, b *Adapter) {
	t.Helper()
	n := simlink.NewNetwork(simlink.Config{Seed: 1, MaxPayload: 8972})
	t.Cleanup(func() { n.Close() })
	open := func(addr string, q int) *Adapter {
		qs, err := n.AddQueues(netip.MustParseAddrPort(addr), q, steer)
		if err != nil {
			t.Fatal(err)
		}
		o := withUMEM(t, opts)
		o.Engines = q
		for _, l := range qs {
			o.x.Links = append(o.x.Links, l)
		}
		return openT(t, qs[0], o)
	}
	return open("198.18.0.1:4793", na), open("198.18.0.2:4793", nb)
}

// withUMEM gives a simlink adapter a UMEM and its heap, as Open gives an AF_XDP one, so
// Adapter.Alloc and FastRegister work on both link kinds (the link still copies).
func withUMEM(t testing.TB, opts Options) Options {
	t.Helper()
	if opts.x.UMEM != nil {
		return opts
	}
	u, err := memreg.NewUMEM(memreg.UMEMOptions{Frames: 16, HeapSize: 8 << 20, HugePages: memreg.HugeOff})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = u.Close() }) // after the adapter's Close (cleanups run last first)
	h, err := u.NewHeap()
	if err != nil {
		t.Fatal(err)
	}
	opts.x.UMEM, opts.x.Heap = u, h
	return opts
}

func openT(t testing.TB, l link.Link, opts Options) *Adapter {
	t.Helper()
	a, err := OpenLink(l, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	return a
}

// forEachLink runs fn once per link kind as a subtest.
func forEachLink(t *testing.T, fn func(t *testing.T, k linkKind)) {
	for _, k := range linkKinds() {
		t.Run(k.name, func(t *testing.T) { fn(t, k) })
	}
}

// side is one end of a connected pair.
type side struct {
	a        *Adapter
	pd       *PD
	rcq, icq *CQ
	qp       *QP
	conn     *Connector
}

// pair is two connected QPs.
type pair struct{ A, B side }

// pairOpts adjust a pair.
type pairOpts struct {
	opts      Options
	qp        QPConfig
	cqDepth   int
	notifyA   NotifyFunc
	notifyB   NotifyFunc
	beforeB   func(s *side) // runs on B before it accepts (post receives)
	private   []byte
	irdA      int
	discEvent func()
}

// newPair opens two adapters on k and connects a QP on each.
func newPair(t testing.TB, k linkKind, po pairOpts) *pair {
	t.Helper()
	if po.opts.Spin == 0 {
		po.opts = DefaultOptions()
	}
	a, b := k.open(t, po.opts)
	p := &pair{}
	mk := func(s *side, ad *Adapter, notify NotifyFunc) {
		s.a = ad
		var err error
		if s.pd, err = ad.NewPD(); err != nil {
			t.Fatal(err)
		}
		depth := po.cqDepth
		if depth == 0 {
			depth = 1024
		}
		if s.rcq, err = ad.NewCQ(depth, notify); err != nil {
			t.Fatal(err)
		}
		s.icq = s.rcq
		cfg := po.qp
		cfg.ReceiveCQ, cfg.InitiatorCQ = s.rcq, s.icq
		if s.qp, err = s.pd.NewQP(cfg); err != nil {
			t.Fatal(err)
		}
	}
	mk(&p.A, a, po.notifyA)
	mk(&p.B, b, po.notifyB)
	if po.beforeB != nil {
		po.beforeB(&p.B)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	accepted := make(chan error, 1)
	l, err := b.NewListener(func(c *Connector) {
		p.B.conn = c
		go func() { accepted <- c.Accept(ctx, p.B.qp, 16, 16, []byte("accepted"), po.discEvent) }()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(netip.AddrPortFrom(netip.Addr{}, 7)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	if p.A.conn, err = a.NewConnector(); err != nil {
		t.Fatal(err)
	}
	ird := po.irdA
	if ird == 0 {
		ird = 16
	}
	if err := p.A.conn.Connect(ctx, p.A.qp, netip.AddrPortFrom(b.LocalAddr().Addr(), 7), ird, 16, po.private); err != nil {
		t.Fatalf("connect: %v", err)
	}
	if err := p.A.conn.CompleteConnect(ctx, nil); err != nil {
		t.Fatalf("complete connect: %v", err)
	}
	if err := <-accepted; err != nil {
		t.Fatalf("accept: %v", err)
	}
	return p
}

// buf returns n bytes of the adapter's UMEM when it has a heap (zero-copy), else of the Go
// heap.
func (s *side) buf(t testing.TB, n int) []byte {
	t.Helper()
	if s.a.heap != nil {
		b, err := s.a.Alloc(n, 64)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.a.Free(b) })
		return b
	}
	return make([]byte, n)
}

// region allocates and registers n bytes with flags.
func (s *side) region(t testing.TB, n int, flags MRFlags) ([]byte, *MR) {
	t.Helper()
	b := s.buf(t, n)
	mr, err := s.pd.RegisterMR(b, flags)
	if err != nil {
		t.Fatal(err)
	}
	return b, mr
}

// results waits until n results are on cq, or fails after timeout.
func results(t *testing.T, cq *CQ, n int) []ResultEx {
	t.Helper()
	out := make([]ResultEx, 0, n)
	buf := make([]ResultEx, 64)
	deadline := time.Now().Add(10 * time.Second)
	for len(out) < n {
		k := cq.GetResultsEx(buf[:min(len(buf), n-len(out))])
		out = append(out, buf[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d results after 10 s: %+v", len(out), n, out)
			}
			cq.a.Poll()
			runtime.Gosched()
			time.Sleep(20 * time.Microsecond)
		}
	}
	return out
}

// noResults checks that cq stays empty for d.
func noResults(t *testing.T, cq *CQ, d time.Duration) {
	t.Helper()
	var r [1]ResultEx
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Microsecond) {
		if cq.GetResultsEx(r[:]) > 0 {
			t.Fatalf("unexpected result %+v", r[0])
		}
	}
}

// want checks a result's status, type and request context.
func want(t *testing.T, r ResultEx, st Status, typ OpType, ctx any) {
	t.Helper()
	if r.Status != st || r.Type != typ || r.RequestContext != ctx {
		t.Fatalf("result %v %v ctx %v, want %v %v ctx %v (%+v)", r.Status, r.Type, r.RequestContext, st, typ, ctx, r)
	}
}

// vanish stops a's engine and closes its link without a word to its peers, as a process
// that is killed does (Close would disconnect its connections first).
func vanish(a *Adapter) {
	a.once.Do(func() {
		a.closing.Store(true)
		a.stop(context.Background())
	})
}
