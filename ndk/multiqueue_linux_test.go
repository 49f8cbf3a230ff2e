package ndk

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/xdp"
)

// Every queue served: on a 4-queue veth (a datagram sent from TX queue q arrives on the
// peer's RX queue q, standing in for a NIC's RSS), both adapters serve all four queues by
// default. QPs are connected until the flows of each side leave on every queue, so each side
// receives on every queue (including queues other than the one its own flow of the same QP
// pair leaves on); Send, Write and Read then cross every QP byte-exact, and every queue's
// link counters on both sides show traffic both ways.
func TestMultiQueueEveryQueueServed(t *testing.T) {
	const queues = 4
	bed := testbed.NewT(t, testbed.Options{Queues: queues, MTU: 9000})
	cfg := xdp.Config{Port: testPort, Frames: 1024, RingSize: 512, HeapSize: 8 << 20}
	a, b := openXDP(t, bed.A, cfg, DefaultOptions()), openXDP(t, bed.B, cfg, DefaultOptions())
	for name, ad := range map[string]*Adapter{"A": a, "B": b} {
		if n := len(ad.Device().Links()); n != queues {
			t.Fatalf("%s serves %d queues, want all %d", name, n, queues)
		}
	}
	sa, sb := &side{a: a}, &side{a: b}
	for _, s := range []*side{sa, sb} {
		var err error
		if s.pd, err = s.a.NewPD(); err != nil {
			t.Fatal(err)
		}
		if s.rcq, err = s.a.NewCQ(4096, nil); err != nil {
			t.Fatal(err)
		}
		s.icq = s.rcq
	}
	var conns []pair
	accepted := make(chan error, 1)
	nextQP := make(chan *QP, 1) // B's QP for the next connection
	l, err := b.NewListener(func(c *Connector) {
		qp := <-nextQP
		go func() {
			ctx, cancel := context.WithTimeout(bg, 10*time.Second)
			defer cancel()
			accepted <- c.Accept(ctx, qp, 4, 4, nil, nil)
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(netip.AddrPortFrom(netip.Addr{}, servicePort)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(bg) })
	var txA, txB [queues]int // flows leaving on each TX queue
	for len(conns) < 64 && (min(txA[0], txA[1], txA[2], txA[3]) == 0 || min(txB[0], txB[1], txB[2], txB[3]) == 0 || len(conns) < 4) {
		qa, err := sa.pd.NewQP(QPConfig{ReceiveCQ: sa.rcq, InitiatorCQ: sa.icq})
		if err != nil {
			t.Fatal(err)
		}
		next, err := sb.pd.NewQP(QPConfig{ReceiveCQ: sb.rcq, InitiatorCQ: sb.icq})
		if err != nil {
			t.Fatal(err)
		}
		nextQP <- next
		c, err := a.NewConnector()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(bg, 10*time.Second)
		err = c.Connect(ctx, qa, netip.AddrPortFrom(b.LocalAddr().Addr(), servicePort), 4, 4, nil)
		if err == nil {
			err = c.CompleteConnect(ctx, nil)
		}
		cancel()
		if err != nil {
			t.Fatalf("connection %d: %v", len(conns), err)
		}
		if err := <-accepted; err != nil {
			t.Fatalf("accept %d: %v", len(conns), err)
		}
		txA[xdp.FlowHash(b.LocalAddr(), qa.tq.SourcePort())%queues]++
		txB[xdp.FlowHash(a.LocalAddr(), next.tq.SourcePort())%queues]++
		conns = append(conns, pair{A: side{a: a, pd: sa.pd, rcq: sa.rcq, icq: sa.icq, qp: qa}, B: side{a: b, pd: sb.pd, rcq: sb.rcq, icq: sb.icq, qp: next}})
	}
	t.Logf("%d QPs; A's flows per TX queue %v, B's %v", len(conns), txA, txB)

	// Send (B -> A), Write and Read (A -> B) on every QP, byte-exact.
	const size = 20000 // a few packets each
	for i, p := range conns {
		rbuf, rmr := p.A.region(t, size, MRAllowLocalWrite)
		if err := p.A.qp.Receive(i, []SGE{rmr.SGE(rbuf)}); err != nil {
			t.Fatal(err)
		}
		sbuf, smr := p.B.region(t, size, 0)
		fill(sbuf, byte(i))
		if err := p.B.qp.Send(i, []SGE{smr.SGE(sbuf)}, 0); err != nil {
			t.Fatal(err)
		}
		tbuf, tmr := p.B.region(t, size, MRAllowRemoteWrite|MRAllowRemoteRead)
		wbuf, wmr := p.A.region(t, size, 0)
		fill(wbuf, byte(i+100))
		if err := p.A.qp.Write(fmt.Sprint("w", i), []SGE{wmr.SGE(wbuf)}, tmr.VA(), tmr.RemoteToken(), 0); err != nil {
			t.Fatal(err)
		}
		back, bmr := p.A.region(t, size, MRAllowLocalWrite)
		if err := p.A.qp.Read(fmt.Sprint("r", i), []SGE{bmr.SGE(back)}, tmr.VA(), tmr.RemoteToken(), 0); err != nil {
			t.Fatal(err)
		}
		// In posting order: the Write completes, then the Read (which sees the Write).
		rs := results(t, p.A.icq, 3)
		counts := map[OpType]int{}
		for _, r := range rs {
			if r.Status != StatusSuccess {
				t.Fatalf("QP %d: %+v", i, r)
			}
			counts[r.Type]++
		}
		if counts[OpTypeReceive] != 1 || counts[OpTypeWrite] != 1 || counts[OpTypeRead] != 1 {
			t.Fatalf("QP %d results %+v", i, rs)
		}
		if r := results(t, p.B.icq, 1)[0]; r.Status != StatusSuccess || r.Type != OpTypeSend {
			t.Fatalf("QP %d send: %+v", i, r)
		}
		if !bytes.Equal(rbuf, sbuf) || !bytes.Equal(tbuf, wbuf) || !bytes.Equal(back, wbuf) {
			t.Fatalf("QP %d: bytes differ (send %v, write %v, read %v)", i, bytes.Equal(rbuf, sbuf), bytes.Equal(tbuf, wbuf), bytes.Equal(back, wbuf))
		}
	}
	for q := range queues {
		la, lb := a.Device().Links()[q].Stats(), b.Device().Links()[q].Stats()
		t.Logf("queue %d: A rx %d tx %d, B rx %d tx %d", q, la.RxPackets, la.TxPackets, lb.RxPackets, lb.TxPackets)
		if la.RxPackets == 0 || la.TxPackets == 0 || lb.RxPackets == 0 || lb.TxPackets == 0 {
			t.Errorf("queue %d not used both ways on both sides", q)
		}
	}
}
