package transport_test

import (
	"bytes"
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/link"
	"github.com/xdpndk/xdpndk/transport/simlink"
)

// Engines of two groups each on a goroutine of their own, in real time, with RSS-like
// steering (so datagrams cross engines both ways), QPs accepted (and so moved) while the
// engines run, and one application goroutine per QP posting: every Send and Write arrives
// byte-exact. Under the race detector this checks that engines share nothing unguarded.
func TestGroupEnginesRunConcurrently(t *testing.T) {
	n := simlink.NewNetwork(simlink.Config{})
	t.Cleanup(func() { n.Close() })
	addrA, addrB := netip.MustParseAddrPort("198.18.0.1:4793"), netip.MustParseAddrPort("198.18.0.2:4793")
	memA, memB := newTestMem(), newTestMem()
	rec := newRecorder()
	mk := func(addr netip.AddrPort, m *testMem) *transport.Group {
		qs, err := n.AddQueues(addr, 2, simlink.SteerFlowHash)
		if err != nil {
			t.Fatal(err)
		}
		cfg := transport.DefaultConfig(qs[0])
		cfg.Resolver = m
		g, err := transport.NewGroup(cfg, []link.Link{qs[0], qs[1]})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	ga, gb := mk(addrA, memA), mk(addrB, memB)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, g := range []*transport.Group{ga, gb} {
		for _, e := range g.Engines() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = e.Run(ctx, 20*time.Microsecond)
			}()
		}
	}
	t.Cleanup(func() { cancel(); wg.Wait() })

	l, err := gb.Listen(7, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const pairs = 4
	var qas, qbs []*transport.QP
	for range pairs {
		qa, err := ga.NewQP(transport.QPConfig{Sink: rec})
		if err != nil {
			t.Fatal(err)
		}
		qb, err := gb.NewQP(transport.QPConfig{Sink: rec})
		if err != nil {
			t.Fatal(err)
		}
		// A receive posted before the QP connects (and perhaps moves).
		r := transport.Receive{Context: 1, NSGE: 1}
		r.SGL[0] = make([]byte, 4000)
		if err := qb.PostReceive(&r); err != nil {
			t.Fatal(err)
		}
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		conn, err := ga.Connect(qa, addrB, 7, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		req, err := l.Next(cctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := req.Accept(qb, nil, 0); err != nil {
			t.Fatal(err)
		}
		if err := conn.Wait(cctx); err != nil {
			t.Fatal(err)
		}
		if err := conn.Complete(); err != nil {
			t.Fatal(err)
		}
		if err := req.Wait(cctx); err != nil {
			t.Fatal(err)
		}
		ccancel()
		qas, qbs = append(qas, qa), append(qbs, qb)
	}
	const rounds, size = 20, 3000
	var apps sync.WaitGroup
	errs := make(chan error, pairs)
	for i := range pairs {
		apps.Add(1)
		go func() {
			defer apps.Done()
			qa, qb := qas[i], qbs[i]
			target := make([]byte, size)
			memB.add(uint32(10+i), 0, uint64(i+1)<<32, target, memreg.AccessRemoteWrite)
			src := make([]byte, size)
			for k := range rounds {
				pattern(src, i*100+k)
				wr := transport.WorkRequest{Kind: transport.OpWrite, Context: uint64(k), NSGE: 1, RemoteAddr: uint64(i+1) << 32, RemoteToken: uint32(10 + i)}
				wr.SGL[0] = src
				if err := qa.PostSend(&wr); err != nil {
					errs <- err
					return
				}
				deadline := time.Now().Add(10 * time.Second)
				for len(rec.of(qa, transport.OpWrite)) <= k {
					if time.Now().After(deadline) {
						errs <- context.DeadlineExceeded
						return
					}
					time.Sleep(50 * time.Microsecond)
				}
				if !bytes.Equal(target, src) {
					t.Errorf("pair %d round %d: write bytes differ", i, k)
				}
			}
			_ = qb
		}()
	}
	apps.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range pairs {
		for _, c := range rec.of(qas[i]) {
			if c.Status != transport.StatusSuccess {
				t.Fatalf("pair %d: %s", i, statusOf(rec.of(qas[i])))
			}
		}
	}
	t.Logf("A %+v; B %+v", ga.Stats(), gb.Stats())
	if ga.Stats().Forwarded+gb.Stats().Forwarded == 0 {
		t.Error("nothing crossed engines")
	}
	// Close on running engines.
	for _, q := range append(qas, qbs...) {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		if err := q.Close(cctx); err != nil {
			t.Fatal(err)
		}
		ccancel()
	}
}
