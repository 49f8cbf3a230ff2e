package ndk

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/xdp"
)

// openEngines opens adapters of na and nb engines on a bed of two queues per veth end.
func openEngines(t *testing.T, na, nb int, opts Options) (a, b *Adapter) {
	t.Helper()
	bed := testbed.NewT(t, testbed.Options{Queues: 2, MTU: 9000})
	cfg := xdp.Config{Port: testPort, Frames: 1024, RingSize: 512, HeapSize: 8 << 20}
	oa, ob := opts, opts
	oa.Engines, ob.Engines = na, nb
	return openXDP(t, bed.A, cfg, oa), openXDP(t, bed.B, cfg, ob)
}

// Two engines per adapter over AF_XDP between two namespaces on a 2-queue veth, in every
// progress mode: each engine serves one queue, QPs spread over both, every accepted QP sits
// on the engine of its peer's index (veth delivers TX queue q to RX queue q), so nothing is
// forwarded; Send, Write and Read are byte-exact on every QP, and each engine's queue
// carries traffic both ways.
func TestEnginesAFXDP(t *testing.T) {
	for _, mode := range []Progress{ProgressInline, ProgressAdaptive, ProgressBusy} {
		t.Run(mode.String(), func(t *testing.T) {
			opts := DefaultOptions()
			opts.Progress = mode
			a, b := openEngines(t, 2, 2, opts)
			for _, ad := range []*Adapter{a, b} {
				if len(ad.engs) != 2 {
					t.Fatalf("%v runs %d engines", ad, len(ad.engs))
				}
				for i, s := range ad.engs {
					dl := s.link.(*xdp.DeviceLink)
					if q := dl.Queues(); len(q) != 1 || q[0] != i {
						t.Fatalf("engine %d serves queues %v", i, q)
					}
				}
			}
			ps := connectMany(t, a, b, 6, mode != ProgressBusy, QPConfig{})
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
				s := ad.grp.Stats()
				if s.Forwarded != 0 {
					t.Errorf("%v forwarded %d datagrams on the bed", ad, s.Forwarded)
				}
				for i, e := range ad.engs {
					ls := e.link.Stats()
					if ls.RxPackets == 0 || ls.TxPackets == 0 {
						t.Errorf("%v engine %d: link rx %d tx %d", ad, i, ls.RxPackets, ls.TxPackets)
					}
				}
			}
		})
	}
}

// A datagram that arrives at the engine that does not own its QP is forwarded: A runs two
// engines, B one engine on both queues, whose flows leave on the queue their hash picks, so
// the datagrams of some QPs land on A's other engine. Every verb is byte-exact.
func TestEnginesForwardAFXDP(t *testing.T) {
	a, b := openEngines(t, 2, 1, DefaultOptions())
	// Each QP of B leaves on a queue its random source port hashes to: with 16, that none
	// lands on the other engine of A has a chance of 2^-16.
	ps := connectMany(t, a, b, 16, true, QPConfig{})
	crossing := 0
	for _, p := range ps {
		if int(xdp.FlowHash(a.LocalAddr(), p.B.qp.tq.SourcePort())%2) != engineOf(p.A.qp) {
			crossing++
		}
	}
	if crossing == 0 {
		t.Fatal("no QP of 16 has its datagrams arrive at the other engine")
	}
	exchangeAll(t, ps, 20000)
	// The last acknowledgements may still be on their way through an inbox.
	s := a.grp.Stats()
	for deadline := time.Now().Add(5 * time.Second); s.ForwardReceived != s.Forwarded && time.Now().Before(deadline); s = a.grp.Stats() {
		a.Poll()
		time.Sleep(time.Millisecond)
	}
	t.Logf("%d QPs, %d crossing; A: %+v", len(ps), crossing, s)
	if s.Forwarded == 0 || s.ForwardReceived != s.Forwarded || s.ForwardDropped != 0 {
		t.Fatalf("forwarded %d, received %d, dropped %d", s.Forwarded, s.ForwardReceived, s.ForwardDropped)
	}
}

// Flush, Disconnect, Close and Adapter.Close with QPs on both engines: a flushed QP's
// receives complete cancelled, a disconnect reaches the peer (its CQ reports the
// connection ended), a QP of either engine closes, and Adapter.Close with QPs still
// connected on both engines tells every peer.
func TestEnginesCloseAFXDP(t *testing.T) {
	a, b := openEngines(t, 2, 2, DefaultOptions())
	ps := connectMany(t, a, b, 4, true, QPConfig{})
	byEngine := map[int][]*mpair{}
	for i := range ps {
		byEngine[engineOf(ps[i].A.qp)] = append(byEngine[engineOf(ps[i].A.qp)], &ps[i])
	}
	if len(byEngine[0]) < 2 || len(byEngine[1]) < 2 {
		t.Fatalf("QPs per engine: %d and %d", len(byEngine[0]), len(byEngine[1]))
	}
	// Flush one QP of each engine with a receive posted.
	for e := range 2 {
		p := byEngine[e][0]
		buf, mr := p.B.region(t, 64, MRAllowLocalWrite)
		if err := p.B.qp.Receive("flushed", []SGE{mr.SGE(buf)}); err != nil {
			t.Fatal(err)
		}
		p.B.qp.Flush()
		r := results(t, p.B.rcq, 1)[0]
		want(t, r, StatusCancelled, OpTypeReceive, "flushed")
	}
	// Disconnect the other QP of engine 0 from A: B's CQ reports the connection ended.
	p := byEngine[0][1]
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	if err := p.A.conn.Disconnect(ctx); err != nil {
		t.Fatalf("disconnect: %v", err)
	}
	var res [1]Result
	var ended *ConnectionEnded
	if _, err := p.B.rcq.Wait(ctx, res[:]); !errors.As(err, &ended) || ended.Status != StatusRemoteDisconnect {
		t.Fatalf("B's CQ after the peer's disconnect: %v", err)
	}
	// Close the flushed QP of engine 1 on both sides.
	for _, q := range []*QP{byEngine[1][0].A.qp, byEngine[1][0].B.qp} {
		if err := q.Close(ctx); err != nil {
			t.Fatalf("close: %v", err)
		}
	}
	// The last QP of engine 1 is still connected: Adapter.Close of A tells its peer.
	last := byEngine[1][1]
	if last.B.qp.tq.State() != transport.QPConnected {
		t.Fatalf("the last QP is %v", last.B.qp.tq.State())
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := last.B.rcq.Wait(ctx, res[:]); !errors.As(err, &ended) || ended.Status != StatusRemoteDisconnect {
		t.Fatalf("B's CQ after A's adapter closed: %v", err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// An SRQ belongs to one engine: B's QPs on it are all made on the SRQ's engine and stay
// there when accepted, including on requests that arrived at the other engine (the request
// is handed over, the datagrams that arrive there are forwarded); Sends from A's QPs on
// both engines fill the SRQ's receives byte-exact.
func TestEnginesSRQAFXDP(t *testing.T) {
	a, b := openEngines(t, 2, 2, DefaultOptions())
	pdB, err := b.NewPD()
	if err != nil {
		t.Fatal(err)
	}
	srq, err := pdB.NewSRQ(64, 1, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	sb := side{a: b, pd: pdB}
	const size = 3000
	bufs := map[string][]byte{}
	for i := range 8 {
		buf, mr := sb.region(t, size, MRAllowLocalWrite)
		bufs[fmt.Sprint(i)] = buf
		if err := srq.Receive(fmt.Sprint(i), []SGE{mr.SGE(buf)}); err != nil {
			t.Fatal(err)
		}
	}
	ps := connectMany(t, a, b, 4, true, QPConfig{SRQ: srq})
	home := srq.ts.Engine().Index()
	crossed := 0
	for i, p := range ps {
		if engineOf(p.B.qp) != home {
			t.Fatalf("pair %d: B's QP on engine %d, its SRQ on %d", i, engineOf(p.B.qp), home)
		}
		if engineOf(p.A.qp) != home {
			crossed++
		}
	}
	if crossed == 0 {
		t.Fatal("every request arrived at the SRQ's engine")
	}
	for i, p := range ps {
		buf, mr := p.A.region(t, size, 0)
		fill(buf, byte(i+1))
		if err := p.A.qp.Send("send", []SGE{mr.SGE(buf)}, 0); err != nil {
			t.Fatal(err)
		}
	}
	seen := 0
	for i, p := range ps {
		r := results(t, p.B.rcq, 1)[0]
		if r.Status != StatusSuccess || r.BytesTransferred != size {
			t.Fatalf("pair %d: %+v", i, r)
		}
		buf := bufs[r.RequestContext.(string)]
		want := make([]byte, size)
		for k := range ps {
			fill(want, byte(k+1))
			if string(buf) == string(want) {
				seen |= 1 << k
			}
		}
		if s := results(t, p.A.icq, 1)[0]; s.Status != StatusSuccess {
			t.Fatalf("pair %d send: %+v", i, s)
		}
	}
	if seen != 1<<len(ps)-1 {
		t.Fatalf("Sends landed: %b", seen)
	}
	if s := b.grp.Stats(); s.Forwarded == 0 {
		t.Error("nothing forwarded to the SRQ's engine")
	}
}
