package ndk

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/simlink"
)

// mpair is a connected pair of QPs of two multi-engine adapters, with their sides.
type mpair struct{ A, B side }

// connectMany connects n QP pairs from adapter a to a listener on b. With perQP each QP
// has a CQ of its own, else each adapter's QPs share one. B's QPs are all made before the
// first connects, so the placement has them on both engines before Accept moves them.
func connectMany(t *testing.T, a, b *Adapter, n int, perQP bool, qcfg QPConfig) []mpair {
	t.Helper()
	var pdA, pdB *PD
	var err error
	if pdA, err = a.NewPD(); err != nil {
		t.Fatal(err)
	}
	if pdB, err = b.NewPD(); err != nil {
		t.Fatal(err)
	}
	var cqA, cqB *CQ
	mk := func(ad *Adapter, pd *PD, shared **CQ, cfg QPConfig) side {
		t.Helper()
		cq := *shared
		if perQP || cq == nil {
			if cq, err = ad.NewCQ(4096, nil); err != nil {
				t.Fatal(err)
			}
			*shared = cq
		}
		cfg.ReceiveCQ, cfg.InitiatorCQ = cq, cq
		qp, err := pd.NewQP(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return side{a: ad, pd: pd, rcq: cq, icq: cq, qp: qp}
	}
	ps := make([]mpair, n)
	for i := range ps {
		ps[i].B = mk(b, pdB, &cqB, qcfg)
	}
	next := make(chan *mpair, 1)
	accepted := make(chan error, 1)
	l, err := b.NewListener(func(c *Connector) {
		p := <-next
		p.B.conn = c
		go func() {
			ctx, cancel := context.WithTimeout(bg, 10*time.Second)
			defer cancel()
			accepted <- c.Accept(ctx, p.B.qp, 4, 4, nil, nil)
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(netip.AddrPortFrom(netip.Addr{}, servicePort)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(bg) })
	for i := range ps {
		p := &ps[i]
		p.A = mk(a, pdA, &cqA, QPConfig{})
		next <- p
		if p.A.conn, err = a.NewConnector(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(bg, 10*time.Second)
		err = p.A.conn.Connect(ctx, p.A.qp, netip.AddrPortFrom(b.LocalAddr().Addr(), servicePort), 4, 4, nil)
		if err == nil {
			err = p.A.conn.CompleteConnect(ctx, nil)
		}
		cancel()
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		if err := <-accepted; err != nil {
			t.Fatalf("accept %d: %v", i, err)
		}
	}
	return ps
}

// engineOf is the index of the engine a QP is on.
func engineOf(q *QP) int { return q.tq.Engine().Index() }

// exchangeAll posts a Send (B to A), a Write and a Read (A to B) of size bytes on every
// pair at once, then checks every completion and every byte.
func exchangeAll(t *testing.T, ps []mpair, size int) {
	t.Helper()
	type bufs struct{ recv, send, target, src, back []byte }
	bs := make([]bufs, len(ps))
	for i := range ps {
		p, b := &ps[i], &bs[i]
		var rmr, smr, tmr, wmr, bmr *MR
		b.recv, rmr = p.A.region(t, size, MRAllowLocalWrite)
		b.send, smr = p.B.region(t, size, 0)
		b.target, tmr = p.B.region(t, size, MRAllowRemoteWrite|MRAllowRemoteRead)
		b.src, wmr = p.A.region(t, size, 0)
		b.back, bmr = p.A.region(t, size, MRAllowLocalWrite)
		fill(b.send, byte(i))
		fill(b.src, byte(i+100))
		if err := p.A.qp.Receive(fmt.Sprint("recv", i), []SGE{rmr.SGE(b.recv)}); err != nil {
			t.Fatal(err)
		}
		if err := p.B.qp.Send(fmt.Sprint("send", i), []SGE{smr.SGE(b.send)}, 0); err != nil {
			t.Fatal(err)
		}
		if err := p.A.qp.Write(fmt.Sprint("write", i), []SGE{wmr.SGE(b.src)}, tmr.VA(), tmr.RemoteToken(), 0); err != nil {
			t.Fatal(err)
		}
		if err := p.A.qp.Read(fmt.Sprint("read", i), []SGE{bmr.SGE(b.back)}, tmr.VA(), tmr.RemoteToken(), 0); err != nil {
			t.Fatal(err)
		}
	}
	// Per CQ, the results of the QPs on it.
	want := map[*CQ]int{}
	for i := range ps {
		want[ps[i].A.icq] += 3
		want[ps[i].B.icq]++
	}
	got := map[string]bool{}
	for cq, n := range want {
		for _, r := range results(t, cq, n) {
			if r.Status != StatusSuccess {
				t.Fatalf("%v: %+v", r.RequestContext, r)
			}
			got[r.RequestContext.(string)] = true
		}
	}
	for i := range ps {
		for _, k := range []string{"recv", "send", "write", "read"} {
			if !got[fmt.Sprint(k, i)] {
				t.Fatalf("pair %d: no %s result", i, k)
			}
		}
		b := &bs[i]
		if !bytes.Equal(b.recv, b.send) || !bytes.Equal(b.target, b.src) || !bytes.Equal(b.back, b.src) {
			t.Fatalf("pair %d: bytes differ (send %v, write %v, read %v)", i, bytes.Equal(b.recv, b.send), bytes.Equal(b.target, b.src), bytes.Equal(b.back, b.src))
		}
	}
}

// Over simulated hosts of two queues where a datagram arrives on the queue of its sender's
// index (veth's rule), two engines per adapter: the QPs spread over both engines, each
// accepted QP sits on the engine of the same index as its peer, nothing is forwarded, and
// Send, Write and Read are byte-exact, with a CQ per QP and with one CQ for all.
func TestEnginesPlacedSimlink(t *testing.T) {
	for _, perQP := range []bool{true, false} {
		t.Run(fmt.Sprintf("cq-per-qp=%v", perQP), func(t *testing.T) {
			a, b := openQueues(t, 2, 2, simlink.SteerSenderQueue, DefaultOptions())
			ps := connectMany(t, a, b, 6, perQP, QPConfig{})
			spread := map[int]int{}
			for i, p := range ps {
				if engineOf(p.A.qp) != engineOf(p.B.qp) {
					t.Fatalf("pair %d: engines %d and %d", i, engineOf(p.A.qp), engineOf(p.B.qp))
				}
				spread[engineOf(p.A.qp)]++
			}
			if len(spread) != 2 {
				t.Fatalf("QPs per engine %v", spread)
			}
			exchangeAll(t, ps, 20000)
			for _, ad := range []*Adapter{a, b} {
				if s := ad.grp.Stats(); s.Forwarded != 0 {
					t.Errorf("%v forwarded %d datagrams", ad, s.Forwarded)
				}
			}
			if !perQP && !ps[0].A.icq.shared.Load() {
				t.Error("a CQ fed by two engines is not shared")
			}
		})
	}
}

// Where RSS picks the queue, datagrams are forwarded to the engine that owns their QP and
// every verb is still byte-exact.
func TestEnginesForwardedSimlink(t *testing.T) {
	a, b := openQueues(t, 2, 2, simlink.SteerFlowHash, DefaultOptions())
	ps := connectMany(t, a, b, 8, true, QPConfig{})
	exchangeAll(t, ps, 20000)
	fwd := a.grp.Stats().Forwarded + b.grp.Stats().Forwarded
	if fwd == 0 {
		t.Fatal("nothing forwarded")
	}
	t.Logf("forwarded: A %+v, B %+v", a.grp.Stats(), b.grp.Stats())
}

// OpenLink with one link runs one engine and refuses more; the options refuse a negative
// count or more than transport.MaxEngines.
func TestEnginesOptions(t *testing.T) {
	la, _ := simlink.Pair(simlink.Config{})
	defer la.Network().Close()
	for _, n := range []int{-1, 2, 65} {
		o := DefaultOptions()
		o.Engines = n
		if a, err := OpenLink(la, o); err == nil || StatusOf(err) != StatusInvalidParameter {
			if a != nil {
				_ = a.Close(bg)
			}
			t.Errorf("Engines %d on one link: %v", n, err)
		}
	}
	o := DefaultOptions()
	o.Engines = 1
	a := openT(t, la, o)
	if len(a.engs) != 1 {
		t.Fatalf("%d engines", len(a.engs))
	}
}
