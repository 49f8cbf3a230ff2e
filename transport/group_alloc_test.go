package transport_test

import (
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/simlink"
)

// countSink counts completions by kind without allocating.
type countSink struct {
	done   [16]uint64
	failed int
}

func (s *countSink) Complete(_ *transport.QP, c *transport.Completion) {
	if c.Status != transport.StatusSuccess {
		s.failed++
	}
	if int(c.Op) < len(s.done) {
		s.done[c.Op]++
	}
}

// Forwarding allocates nothing once warm: a Send and a Write whose datagrams arrive at the
// engine of B that does not own the QP (RSS-like steering), each forwarded through the
// inbox, complete with no allocation per round (the inbox's slots were allocated at its
// first use, during the warm-up).
func TestGroupForwardNoAllocs(t *testing.T) {
	w := newGroupWorld(t, 1, 2, simlink.SteerFlowHash, nil)
	sink := &countSink{}
	l, err := w.gb.Listen(7, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	target := make([]byte, 5000)
	w.memB.add(5, 0, 1<<30, target, memreg.AccessRemoteWrite)
	sbuf, rbuf, wbuf := make([]byte, 3000), make([]byte, 4000), make([]byte, 5000)
	send := transport.WorkRequest{Kind: transport.OpSend, NSGE: 1}
	send.SGL[0] = sbuf
	rcv := transport.Receive{NSGE: 1}
	rcv.SGL[0] = rbuf
	write := transport.WorkRequest{Kind: transport.OpWrite, NSGE: 1, RemoteAddr: 1 << 30, RemoteToken: 5}
	write.SGL[0] = wbuf

	var qa, qb *transport.QP
	var failure string
	wait := func(op transport.OpKind, want uint64) {
		for steps := 0; sink.done[op] < want; steps++ {
			switch {
			case sink.failed > 0:
				failure = "a request failed"
			case steps > 100_000:
				failure = op.String() + " not complete after 100000 steps"
			case !w.step():
				failure = op.String() + " not complete, nothing scheduled"
			}
			if failure != "" {
				return
			}
		}
	}
	round := func() {
		if failure != "" {
			return
		}
		recvs, writes := sink.done[transport.OpReceive]+1, sink.done[transport.OpWrite]+1
		if qb.PostReceive(&rcv) != nil || qa.PostSend(&send) != nil || qa.PostSend(&write) != nil {
			failure = "post failed"
			return
		}
		wait(transport.OpReceive, recvs)
		wait(transport.OpWrite, writes)
		settle := w.clock.Now() + int64(100*time.Microsecond)
		for i := 0; i < 10_000 && w.clock.Now() < settle; i++ {
			w.step()
		}
	}
	for tries := 0; qa == nil; tries++ {
		if tries == 16 {
			t.Fatal("no QP of 16 had its datagrams arrive at the other engine of B")
		}
		a, err := w.ga.NewQP(transport.QPConfig{Sink: sink})
		if err != nil {
			t.Fatal(err)
		}
		b, err := w.gb.NewQP(transport.QPConfig{Sink: sink})
		if err != nil {
			t.Fatal(err)
		}
		w.connectPair(l, a, b)
		qa, qb = a, b
		before := w.gb.Stats().Forwarded
		round()
		if w.gb.Stats().Forwarded == before {
			qa, qb = nil, nil
		}
	}
	for range 200 {
		round()
	}
	fwd := w.gb.Stats().Forwarded
	allocs := testing.AllocsPerRun(300, round)
	if failure != "" {
		t.Fatalf("%s: A %+v, B %+v", failure, qa.Stats(), qb.Stats())
	}
	if w.gb.Stats().Forwarded-fwd < 300 {
		t.Fatalf("only %d datagrams forwarded in 300 rounds", w.gb.Stats().Forwarded-fwd)
	}
	if allocs != 0 {
		t.Errorf("forwarded Send and Write: %v allocations per round, want 0", allocs)
	}
}
