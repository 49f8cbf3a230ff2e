package transport_test

// Liveness measured in time (docs/RELIABILITY.md, "Liveness budgets"): the retransmission
// and RNR budgets as durations, the keepalive, per-QP overrides, the cause a failed QP
// reports, and this engine's own stalls, which must never count as the peer's silence.
// All in virtual time over simlink, with the engine's defaults unless a test says
// otherwise.

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/ack"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// liveCountedPair is a connected pair with the defaults (tweak may change them) whose QPs
// count their disconnect indications, and a 64 KiB region at each side the other may read
// and write (token 0x61 at 0x10000).
func liveCountedPair(t *testing.T, tweak func(*transport.Config), cfgA, cfgB transport.QPConfig) (w *semWorld, a, b *semNode, qa, qb *transport.QP, discA, discB *atomic.Int32) {
	t.Helper()
	w, a, b = newSemPair(t, tweak)
	discA, discB = new(atomic.Int32), new(atomic.Int32)
	cfgA.OnDisconnect = func(*transport.QP) { discA.Add(1) }
	cfgB.OnDisconnect = func(*transport.QP) { discB.Add(1) }
	qa, qb = w.connect(a, cfgA, b, cfgB)
	for _, nd := range []*semNode{a, b} {
		region := make([]byte, 1<<16)
		pattern(region, 3)
		nd.mem.add(0x61, 0, 0x10000, region, semRW)
	}
	return w, a, b, qa, qb, discA, discB
}

// livePostBoth posts a Send, a Write and a Read from A and a Send from B, with the
// receives they need, and returns how many completions each side will have when all is
// done.
func livePostBoth(t *testing.T, qa, qb *transport.QP) (wantA, wantB int) {
	t.Helper()
	semRecv(t, qb, 10, make([]byte, 4000))
	semRecv(t, qa, 20, make([]byte, 100))
	msg := make([]byte, 3000)
	pattern(msg, 1)
	semPost(t, qa, semSend(1, 0, msg))
	semPost(t, qa, semWrite(2, 0, 0x10000, 0x61, make([]byte, 20000)))
	semPost(t, qa, semRead(3, 0, 0x10000, 0x61, make([]byte, 8000)))
	semPost(t, qb, semSend(4, 0, []byte("from B")))
	return 4, 2
}

// liveAllOK fails the test unless every completion of q is a success.
func liveAllOK(t *testing.T, w *semWorld, what string, q *transport.QP) {
	t.Helper()
	for _, c := range w.rec.of(q) {
		if c.Status != semOK {
			t.Fatalf("%s: %s", what, statusOf(w.rec.of(q)))
		}
	}
}

// A peer that is silent for 3 s (a partition, or its host stalled: SIGSTOP, a descheduled
// VM) keeps its connection with the defaults: the requests outstanding both ways complete
// successfully once it answers again, within RTO.Max (500 ms) of that, and no disconnect
// event fires.
func TestLivenessSilentPeerKeepsConnection(t *testing.T) {
	for _, how := range []string{"partition", "peer stalled"} {
		t.Run(how, func(t *testing.T) {
			w, a, b, qa, qb, discA, discB := liveCountedPair(t, nil, transport.QPConfig{}, transport.QPConfig{})
			var s *stallWorld
			if how == "partition" {
				w.net.Partition(a.addr, b.addr)
			} else {
				s = newStallWorld(t, w, a, b, 1)
				s.stall(1, 3*time.Second)
			}
			wantA, wantB := livePostBoth(t, qa, qb)
			if how == "partition" {
				w.runFor(3 * time.Second)
				w.net.Heal(a.addr, b.addr)
			} else if !s.runUntil(3*time.Second, func() bool { return false }) && w.clock.Now() < s.until[1] {
				t.Fatal("the stall did not run its course")
			}
			back := w.clock.Now()
			semState(t, "A after 3 s of silence", qa, transport.QPConnected)
			semState(t, "B after 3 s of silence", qb, transport.QPConnected)
			done := func() bool { return len(w.rec.of(qa)) == wantA && len(w.rec.of(qb)) == wantB }
			if s != nil {
				if !s.runUntil(2*time.Second, done) {
					t.Fatalf("not done after the stall: A %s / B %s", statusOf(w.rec.of(qa)), statusOf(w.rec.of(qb)))
				}
			} else {
				w.runUntil(2*time.Second, "requests after the partition", done)
			}
			liveAllOK(t, w, "A", qa)
			liveAllOK(t, w, "B", qb)
			if el := w.elapsedSince(back); el > ack.DefaultRTOConfig().Max+time.Millisecond {
				t.Errorf("done %v after the peer came back, want within RTO.Max", el)
			}
			if discA.Load()+discB.Load() != 0 || qa.State() != transport.QPConnected || qb.State() != transport.QPConnected {
				t.Fatalf("after the silence: A %v (%d indications), B %v (%d)", qa.State(), discA.Load(), qb.State(), discB.Load())
			}
			t.Logf("%s: A retransmitted %d times (%d timeouts), done %v after the peer came back",
				how, qa.Stats().Retransmits, qa.Stats().Timeouts, w.elapsedSince(back))
		})
	}
}

// A peer silent for longer than RetryTimeout (10 s) fails the QP that has requests
// outstanding within RetryTimeout + 1 s of its first unanswered transmission: the oldest
// request StatusTimeout, the rest and the posted receives StatusCancelled, OnDisconnect
// once, Cause ErrRetryTimeout. The other side, which had nothing outstanding, notices
// through its keepalive: it fails within KeepAlive (30 s) + 1 s of hearing A last, with
// ErrKeepAlive.
func TestLivenessSilentPastRetryTimeout(t *testing.T) {
	w, a, b, qa, qb, discA, discB := liveCountedPair(t, nil, transport.QPConfig{}, transport.QPConfig{})
	semRecv(t, qb, 30, make([]byte, 100))
	w.runFor(time.Millisecond)
	w.net.Partition(a.addr, b.addr)
	t0 := w.clock.Now()
	semRecv(t, qa, 20, make([]byte, 100))
	semPost(t, qa, semWrite(1, 0, 0x10000, 0x61, make([]byte, 5000)))
	semPost(t, qa, semSend(2, 0, []byte("behind it")))
	w.runUntil(12*time.Second, "A fails", func() bool { return qa.State() != transport.QPConnected })
	el := w.elapsedSince(t0)
	if el < transport.DefaultRetryTimeout || el > transport.DefaultRetryTimeout+time.Second {
		t.Fatalf("A failed %v after its first transmission, want within [RetryTimeout, RetryTimeout + 1 s]", el)
	}
	w.runFor(time.Millisecond)
	semExpect(t, "A's requests", w.rec.of(qa, semOpWrite, semOpSend), semWant{1, semOpWrite, semTO}, semWant{2, semOpSend, semCancel})
	semExpect(t, "A's receives", w.rec.of(qa, semOpRecv), semWant{20, semOpRecv, semCancel})
	semIs(t, "A's cause", qa.Cause(), transport.ErrRetryTimeout)
	if discA.Load() != 1 {
		t.Fatalf("A's disconnect event fired %d times", discA.Load())
	}
	semState(t, "B, which waits for nothing", qb, transport.QPConnected)
	w.runUntil(25*time.Second, "B's keepalive", func() bool { return qb.State() != transport.QPConnected })
	if el := w.elapsedSince(t0); el < transport.DefaultKeepAlive-time.Millisecond || el > transport.DefaultKeepAlive+time.Second {
		t.Fatalf("B failed %v after it last heard A, want within [KeepAlive, KeepAlive + 1 s]", el)
	}
	semExpect(t, "B", w.rec.of(qb), semWant{30, semOpRecv, semCancel})
	semIs(t, "B's cause", qb.Cause(), transport.ErrKeepAlive)
	if discB.Load() != 1 {
		t.Fatalf("B's disconnect event fired %d times", discB.Load())
	}
	t.Logf("A failed after %v: %v; B after its keepalive: %v (%d probes)", el, qa.Cause(), qb.Cause(), qb.Stats().KeepAlives)
}

// This engine not polled for longer than RetryTimeout (a stopped process, a descheduled VM,
// an application that does not call into inline progress) does not fail its connection to
// a live peer. A's Write lost its only transmission just before A stopped for 12 s; when A
// runs again its retransmission timer is 12 s late and the packet is older than the
// budget, but the peer never saw a retransmission: A sends one, and the Write completes.
func TestLivenessOwnStallKeepsConnection(t *testing.T) {
	w, a, b, qa, qb, discA, discB := liveCountedPair(t, nil, transport.QPConfig{}, transport.QPConfig{})
	s := newStallWorld(t, w, a, b, 1)
	a.tap.setDrop(semDropFirst(wire.OpWrite, 1))
	semPost(t, qa, semWrite(1, 0, 0x10000, 0x61, []byte("written before the stall")))
	s.stepThen(func() { s.stall(0, 12*time.Second) })
	t0 := w.clock.Now()
	if !s.runUntil(13*time.Second, func() bool { return len(w.rec.of(qa)) == 1 }) {
		t.Fatalf("the Write did not complete: A %v %+v", qa.State(), qa.Stats())
	}
	semExpect(t, "A", w.rec.of(qa), semWant{1, semOpWrite, semOK})
	if el := w.elapsedSince(t0); el < 12*time.Second {
		t.Fatalf("the Write completed after %v, during A's stall", el)
	}
	if qa.Stats().RTORetransmits == 0 {
		t.Fatal("no retransmission by the timer after the stall")
	}
	semState(t, "A", qa, transport.QPConnected)
	semState(t, "B", qb, transport.QPConnected)
	if discA.Load()+discB.Load() != 0 {
		t.Fatalf("disconnect events: A %d, B %d", discA.Load(), discB.Load())
	}

	// The keepalive too: A idle, stopped for longer than its KeepAlive (B, whose keepalive
	// is disabled, sends nothing meanwhile). When A runs again it probes first and gives B
	// the answer time: B answers, the connection stays.
	w2, a2, b2, qa2, qb2, _, _ := liveCountedPair(t, nil, transport.QPConfig{}, transport.QPConfig{KeepAlive: -1})
	s2 := newStallWorld(t, w2, a2, b2, 2)
	s2.stall(0, 40*time.Second)
	if !s2.runUntil(42*time.Second, func() bool { return w2.clock.Now() >= s2.until[0]+int64(time.Second) }) {
		t.Fatal("the stall did not run its course")
	}
	semState(t, "A after its own 40 s stall", qa2, transport.QPConnected)
	semState(t, "B", qb2, transport.QPConnected)
	if qa2.Stats().KeepAlives == 0 {
		t.Fatal("A did not probe after its stall")
	}
}

// The RNR budget, with the defaults: a Send to a peer that never posts a receive (NDK's
// ndsendnoreceive) ends StatusTimeout in bounded time: held for CreditTimeout (100 ms; the
// peer's credits are known), sent as a probe, refused with RNR NAKs for RNRTimeout (10 s)
// from the first, then failed (Cause ErrRNRTimeout). Meanwhile the peer is heard: no
// keepalive probe, no retransmission timeout.
func TestLivenessRNRBudget(t *testing.T) {
	w, _, _, qa, qb, discA, _ := liveCountedPair(t, nil, transport.QPConfig{}, transport.QPConfig{})
	semPost(t, qa, semWrite(1, 0, 0x10000, 0x61, []byte("the peer's credits become known")))
	w.runUntil(time.Second, "write", func() bool { return len(w.rec.of(qa)) == 1 })
	t0 := w.clock.Now()
	semPost(t, qa, semSend(2, 0, []byte("no receive will ever be posted")))
	w.runUntil(12*time.Second, "rnr timeout", func() bool { return len(w.rec.of(qa)) == 2 })
	semExpect(t, "A", w.rec.of(qa), semWant{1, semOpWrite, semOK}, semWant{2, semOpSend, semTO})
	lo := 100*time.Millisecond + transport.DefaultRNRTimeout
	if el := w.elapsedSince(t0); el < lo || el > lo+time.Millisecond {
		t.Fatalf("the Send failed %v after it was posted, want CreditTimeout + RNRTimeout = %v", el, lo)
	}
	semIs(t, "A's cause", qa.Cause(), transport.ErrRNRTimeout)
	st := qa.Stats()
	if st.Timeouts != 0 || st.KeepAlives != 0 || discA.Load() != 1 {
		t.Fatalf("timeouts %d, keepalive probes %d, indications %d", st.Timeouts, st.KeepAlives, discA.Load())
	}
	t.Logf("%d RNR NAKs in %v; B %v", st.RNRNaks, w.elapsedSince(t0), qb.State())
}

// An idle connection whose peer vanished (its host gone: nothing answers) fails through the
// keepalive within KeepAlive plus the answer time (min(1 s, KeepAlive/3)) of the last
// packet heard: OnDisconnect fires once, the posted receives complete cancelled, Cause is
// ErrKeepAlive. Per QP the keepalive may be shorter than the engine's.
func TestKeepAliveVanishedPeer(t *testing.T) {
	for _, ka := range []time.Duration{0, 3 * time.Second, 60 * time.Millisecond} {
		name := "defaults"
		want := ka
		if ka == 0 {
			want = transport.DefaultKeepAlive
		} else {
			name = "QPConfig " + ka.String()
		}
		t.Run(name, func(t *testing.T) {
			w, _, b, qa, _, discA, _ := liveCountedPair(t, nil, transport.QPConfig{KeepAlive: ka}, transport.QPConfig{})
			semRecv(t, qa, 20, make([]byte, 100))
			semRecv(t, qa, 21, make([]byte, 100))
			w.runFor(time.Millisecond)
			t0 := w.clock.Now()
			b.link.Close() // B's host is gone
			w.nodes = w.nodes[:1]
			w.runUntil(want+2*time.Second, "A fails", func() bool { return qa.State() != transport.QPConnected })
			answer := min(time.Second, want/3)
			if el := w.elapsedSince(t0); el > want+answer || el < want-2*time.Millisecond {
				t.Fatalf("failed %v after the peer vanished, want within [KeepAlive, KeepAlive + %v] of the last packet (%v)", el, answer, want)
			}
			w.runFor(time.Millisecond)
			semExpect(t, "A", w.rec.of(qa), semWant{20, semOpRecv, semCancel}, semWant{21, semOpRecv, semCancel})
			semIs(t, "A's cause", qa.Cause(), transport.ErrKeepAlive)
			if discA.Load() != 1 {
				t.Fatalf("disconnect event fired %d times", discA.Load())
			}
			if n := qa.Stats().KeepAlives; n < 3 {
				t.Fatalf("%d probes before failing", n)
			}
			t.Logf("failed after %v: %v, %d probes", w.elapsedSince(t0), qa.Cause(), qa.Stats().KeepAlives)
		})
	}
}

// An idle connection to a live peer stays up for ten times KeepAlive, and the keepalive
// costs little: one probe and its answer per KeepAlive/3 for the connection (whichever side's
// timer runs out first probes; the answer resets both), nothing else.
func TestKeepAliveLivePeerFewProbes(t *testing.T) {
	w, a, b, qa, qb, discA, discB := liveCountedPair(t, nil, transport.QPConfig{}, transport.QPConfig{})
	w.runFor(time.Millisecond)
	sentA, sentB := a.tap.sentCount(wire.OpAck), b.tap.sentCount(wire.OpAck)
	var all0 int
	for _, nd := range []*semNode{a, b} {
		all0 += int(nd.link.Stats().TxPackets)
	}
	w.runFor(10 * transport.DefaultKeepAlive)
	semState(t, "A", qa, transport.QPConnected)
	semState(t, "B", qb, transport.QPConnected)
	if discA.Load()+discB.Load() != 0 {
		t.Fatal("a disconnect event fired")
	}
	probes := qa.Stats().KeepAlives + qb.Stats().KeepAlives
	acks := a.tap.sentCount(wire.OpAck) - sentA + b.tap.sentCount(wire.OpAck) - sentB
	var all int
	for _, nd := range []*semNode{a, b} {
		all += int(nd.link.Stats().TxPackets)
	}
	all -= all0
	if probes < 10 || probes > 31 {
		t.Fatalf("%d probes in 10 x KeepAlive, want about 3 per KeepAlive", probes)
	}
	if uint64(acks) != 2*probes || all != acks {
		t.Fatalf("%d datagrams sent, %d of them acks, for %d probes: want only the probes and their answers", all, acks, probes)
	}
	t.Logf("10 x KeepAlive idle: %d probes (A %d, B %d), %d datagrams in all", probes, qa.Stats().KeepAlives, qb.Stats().KeepAlives, all)
}

// A connection that carries traffic sends no probe, even when the traffic goes one way only
// (the acknowledgements come back the other way).
func TestKeepAliveTrafficNoProbes(t *testing.T) {
	const ka = 30 * time.Millisecond
	w, _, _, qa, qb, _, _ := liveCountedPair(t, func(c *transport.Config) { c.KeepAlive = ka }, transport.QPConfig{}, transport.QPConfig{})
	for i := range 60 {
		semPost(t, qa, semWrite(uint64(i), 0, 0x10000, 0x61, []byte("one way")))
		w.runFor(5 * time.Millisecond)
	}
	liveAllOK(t, w, "A", qa)
	if n := len(w.rec.of(qa)); n != 60 {
		t.Fatalf("%d Writes completed", n)
	}
	if pa, pb := qa.Stats().KeepAlives, qb.Stats().KeepAlives; pa+pb != 0 {
		t.Fatalf("keepalive probes on a busy connection: A %d, B %d", pa, pb)
	}
}

// The engine's deadline includes the keepalive, so that an engine that sleeps until its
// next deadline wakes for it; with the keepalive disabled an idle engine has nothing
// scheduled at all (it sleeps until a datagram or a post wakes it, never spins).
func TestKeepAliveEngineDeadline(t *testing.T) {
	w, a, _, _, _, _, _ := liveCountedPair(t, nil, transport.QPConfig{}, transport.QPConfig{})
	w.runFor(3 * time.Second) // the connection manager's tables empty
	now := w.clock.Now()
	next, busy := a.eng.Poll(now)
	if busy || next <= now || next > now+int64(transport.DefaultKeepAlive/3) {
		t.Fatalf("idle engine: Poll = %v, %v at %v; want the keepalive's probe within KeepAlive/3", time.Duration(next), busy, time.Duration(now))
	}
	w2, a2, b2, _, _, _, _ := liveCountedPair(t, func(c *transport.Config) { c.KeepAlive = -1 }, transport.QPConfig{}, transport.QPConfig{})
	w2.runFor(3 * time.Second)
	for _, nd := range []*semNode{a2, b2} {
		if next, busy := nd.eng.Poll(w2.clock.Now()); next != 0 || busy {
			t.Fatalf("idle engine without keepalive: Poll = %v, %v; want nothing scheduled", next, busy)
		}
	}
}

// QPConfig's liveness fields: negative retransmission or RNR budgets are refused, a
// negative KeepAlive disables the keepalive, and a shorter RetryTimeout fails that QP (and
// bounds its StartDisconnect(0)) sooner than the engine's.
func TestLivenessQPOverrides(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	if _, err := a.eng.NewQP(transport.QPConfig{Sink: w.rec, RetryTimeout: -1}); err == nil {
		t.Fatal("NewQP took a negative RetryTimeout")
	}
	if _, err := a.eng.NewQP(transport.QPConfig{Sink: w.rec, RNRTimeout: -time.Second}); err == nil {
		t.Fatal("NewQP took a negative RNRTimeout")
	}
	qa, qb := w.connect(a, transport.QPConfig{RetryTimeout: 100 * time.Millisecond}, b, transport.QPConfig{KeepAlive: -1})
	b.mem.add(0x61, 0, 0x10000, make([]byte, 4096), semRW)
	w.runFor(time.Millisecond)
	w.net.Partition(a.addr, b.addr)
	t0 := w.clock.Now()
	semPost(t, qa, semWrite(1, 0, 0x10000, 0x61, []byte("x")))
	w.runUntil(time.Second, "A fails", func() bool { return len(w.rec.of(qa)) == 1 })
	if el := w.elapsedSince(t0); el < 100*time.Millisecond || el > 600*time.Millisecond {
		t.Fatalf("A failed after %v, want within [100 ms, 600 ms]", el)
	}
	semExpect(t, "A", w.rec.of(qa), semWant{1, semOpWrite, semTO})
	// B never hears from A again, and its keepalive is off: it stays connected.
	w.runFor(2 * transport.DefaultKeepAlive)
	semState(t, "B without keepalive", qb, transport.QPConnected)
	if n := qb.Stats().KeepAlives; n != 0 {
		t.Fatalf("B sent %d probes with its keepalive off", n)
	}
	t1 := w.clock.Now()
	d := qb.StartDisconnect(0) // B's RetryTimeout: the engine's 10 s
	w.runUntil(11*time.Second, "disconnect", func() bool { done, _ := d.Done(); return done })
	_, err := d.Done()
	semIs(t, "disconnect through a partition", err, transport.ErrConnectTimeout)
	if el := w.elapsedSince(t1); el != transport.DefaultRetryTimeout {
		t.Fatalf("disconnect gave up after %v, want RetryTimeout %v", el, transport.DefaultRetryTimeout)
	}
}

// Accept waits for a slow CompleteConnect: the requester's application takes 5 s to
// complete after the reply arrived; the acceptor keeps sending its reply (at the 500 ms cap)
// and the connection is established when the ready-to-use comes.
func TestLivenessAcceptWaitsForSlowComplete(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	qa, qb, l, conn := semDial(t, a, b, 1, nil)
	req := semNextRequest(w, l)
	if err := req.Accept(qb, nil, 0); err != nil {
		t.Fatal(err)
	}
	semReplied(t, w, conn)
	replies := b.tap.sentCount(wire.OpConnReply)
	w.runFor(5 * time.Second)
	if d, err := req.Established(); d {
		t.Fatalf("accepted request ended before the requester completed: %v", err)
	}
	semState(t, "acceptor", qb, transport.QPConnecting)
	if n := b.tap.sentCount(wire.OpConnReply) - replies; n < 8 {
		t.Fatalf("%d replies sent while the requester's application took its time", n)
	}
	if err := conn.Complete(); err != nil {
		t.Fatal(err)
	}
	semEstablished(t, w, req)
	semState(t, "requester", qa, transport.QPConnected)
	semRecv(t, qb, 10, make([]byte, 10))
	semPost(t, qa, semSend(1, 0, []byte("late")))
	w.runUntil(time.Second, "send", func() bool { return len(w.rec.of(qb)) == 1 && len(w.rec.of(qa)) == 1 })
	liveAllOK(t, w, "A", qa)
	liveAllOK(t, w, "B", qb)
}

// QP.Cause says why a QP failed or disconnected, wrapping the sentinel of each way a
// connection ends (the timeouts have their own tests above); it is nil while the QP works.
func TestLivenessCause(t *testing.T) {
	t.Run("flush", func(t *testing.T) {
		w, _, _, qa, qb, _, _ := liveCountedPair(t, nil, transport.QPConfig{}, transport.QPConfig{})
		if qa.Cause() != nil || qb.Cause() != nil {
			t.Fatal("a connected QP has a cause")
		}
		qa.Flush()
		w.runUntil(time.Second, "flush", func() bool { return qa.State() == transport.QPError })
		semIs(t, "flushed", qa.Cause(), transport.ErrFlushed)
	})
	t.Run("disconnect", func(t *testing.T) {
		w, _, _, qa, qb, _, discB := liveCountedPair(t, nil, transport.QPConfig{}, transport.QPConfig{})
		d := qa.StartDisconnect(0)
		w.runUntil(time.Second, "disconnect", func() bool { done, _ := d.Done(); return done && discB.Load() == 1 })
		semIs(t, "the side that disconnected", qa.Cause(), transport.ErrDisconnected)
		semIs(t, "its peer", qb.Cause(), transport.ErrPeerDisconnected)
		qb.Flush() // the peer's flush keeps the first cause
		w.runFor(time.Millisecond)
		semIs(t, "the peer after its flush", qb.Cause(), transport.ErrPeerDisconnected)
	})
	t.Run("remote access violation", func(t *testing.T) {
		w, _, _, qa, qb, _, _ := liveCountedPair(t, nil, transport.QPConfig{}, transport.QPConfig{})
		semPost(t, qa, semWrite(1, 0, 0x10000, 0x99, []byte("no such token")))
		w.runUntil(time.Second, "refused", func() bool { return len(w.rec.of(qa)) == 1 && qb.State() == transport.QPError })
		semIs(t, "the requester", qa.Cause(), transport.ErrRemoteNak)
		semIs(t, "the responder", qb.Cause(), transport.ErrRefused)
		t.Logf("requester: %v; responder: %v", qa.Cause(), qb.Cause())
	})
	t.Run("local check", func(t *testing.T) {
		w, _, _, qa, _, _, _ := liveCountedPair(t, nil, transport.QPConfig{}, transport.QPConfig{})
		semPost(t, qa, &transport.WorkRequest{Kind: transport.OpLocal, Context: 1, LocalStatus: transport.StatusLocalError})
		w.runUntil(time.Second, "local failure", func() bool { return len(w.rec.of(qa)) == 1 })
		semIs(t, "local", qa.Cause(), transport.ErrLocal)
	})
	t.Run("close", func(t *testing.T) {
		w, a, _ := newSemPair(t, nil)
		q := a.qp(transport.QPConfig{})
		if q.Cause() != nil {
			t.Fatal("an idle QP has a cause")
		}
		liveClose(t, w, q)
		semIs(t, "closed", q.Cause(), transport.ErrFlushed)
	})
}

// liveClose closes q, polling the world's engines (without moving the clock) until Close
// returns.
func liveClose(t *testing.T, w *semWorld, q *transport.QP) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- q.Close(context.Background()) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			return
		default:
		}
		for _, nd := range w.nodes {
			if nd.eng != nil {
				nd.eng.Poll(w.clock.Now())
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("close did not return")
		}
		runtime.Gosched()
	}
}

// Close completes everything posted to a QP exactly once, in every state the QP can be
// in and for every kind of work: receives (taken by the engine or still in the posting
// ring), SRQ receives the QP took, Sends, Writes, Reads and local requests (outstanding or
// still in the posting ring). Receives of a QP the engine never polled (idle, connecting,
// refused) used to stay in the ring, so that package ndk never released their buffers.
func TestCloseCompletesEverything(t *testing.T) {
	type setup struct {
		w     *semWorld
		a, b  *semNode
		q     *transport.QP      // the QP to close
		peer  *transport.QP      // its peer, if connected
		want  map[uint64]string  // context -> what was posted
		after func(t *testing.T) // checks after Close
	}
	recv := func(s *setup, ctx uint64) {
		semRecv(t, s.q, ctx, make([]byte, 64))
		s.want[ctx] = "receive"
	}
	post := func(s *setup, wr *transport.WorkRequest, what string) {
		semPost(t, s.q, wr)
		s.want[wr.Context] = what
	}
	outstanding := func(s *setup) {
		// Sends, Writes and Reads the peer never answers (partitioned), a local request
		// behind them; then more of each posted right before Close, never taken.
		s.w.net.Partition(s.a.addr, s.b.addr)
		recv(s, 1)
		post(s, semSend(2, 0, []byte("send")), "send")
		post(s, semWrite(3, 0, 0x10000, 0x61, make([]byte, 5000)), "write")
		post(s, semRead(4, 0, 0x10000, 0x61, make([]byte, 3000)), "read")
		post(s, &transport.WorkRequest{Kind: transport.OpLocal, Context: 5}, "local")
		s.w.runFor(time.Millisecond)
		recv(s, 6)
		post(s, semSend(7, 0, []byte("late send")), "send")
		post(s, &transport.WorkRequest{Kind: transport.OpLocal, Context: 8}, "local")
	}
	connected := func(t *testing.T) *setup {
		w, a, b, qa, qb, _, _ := liveCountedPair(t, nil, transport.QPConfig{}, transport.QPConfig{})
		return &setup{w: w, a: a, b: b, q: qa, peer: qb, want: map[uint64]string{}}
	}
	cases := []struct {
		name string
		make func(t *testing.T) *setup
	}{{
		name: "idle",
		make: func(t *testing.T) *setup {
			w, a, b := newSemPair(t, nil)
			s := &setup{w: w, a: a, b: b, q: a.qp(transport.QPConfig{}), want: map[uint64]string{}}
			recv(s, 1)
			recv(s, 2)
			w.runFor(time.Millisecond)
			recv(s, 3)
			return s
		},
	}, {
		name: "connecting",
		make: func(t *testing.T) *setup {
			w, a, b := newSemPair(t, nil)
			s := &setup{w: w, a: a, b: b, q: a.qp(transport.QPConfig{}), want: map[uint64]string{}}
			recv(s, 1)
			conn, err := a.eng.Connect(s.q, semAddr(99), 1, nil, 0) // nobody answers
			if err != nil {
				t.Fatal(err)
			}
			w.runFor(50 * time.Millisecond)
			recv(s, 2)
			sent := a.tap.sentCount(wire.OpConnRequest)
			s.after = func(t *testing.T) {
				_, err := conn.Replied()
				semIs(t, "the attempt of a closed QP", err, transport.ErrConnectCancelled)
				w.runFor(time.Second)
				if n := a.tap.sentCount(wire.OpConnRequest); n != sent {
					t.Fatalf("%d requests sent after Close", n-sent)
				}
			}
			return s
		},
	}, {
		name: "accepted, not yet established",
		make: func(t *testing.T) *setup {
			w, a, b := newSemPair(t, nil)
			_, qb, l, conn := semDial(t, a, b, 1, nil)
			req := semNextRequest(w, l)
			s := &setup{w: w, a: b, b: a, q: qb, want: map[uint64]string{}}
			recv(s, 1)
			if err := req.Accept(qb, nil, 0); err != nil {
				t.Fatal(err)
			}
			semReplied(t, w, conn) // the requester never completes
			recv(s, 2)
			s.after = func(t *testing.T) {
				w.runFor(time.Millisecond)
				d, err := req.Established()
				if !d {
					t.Fatal("the accepted request of a closed QP has no result")
				}
				semIs(t, "the accepted request of a closed QP", err, transport.ErrConnectCancelled)
			}
			return s
		},
	}, {
		name: "refused",
		make: func(t *testing.T) *setup {
			w, a, b := newSemPair(t, nil)
			s := &setup{w: w, a: a, b: b, q: a.qp(transport.QPConfig{}), want: map[uint64]string{}}
			recv(s, 1)
			conn, err := a.eng.Connect(s.q, b.addr, 77, nil, 0) // no listener
			if err != nil {
				t.Fatal(err)
			}
			semRejected(t, w, conn, "connect to no listener")
			recv(s, 2)
			return s
		},
	}, {
		name: "connected",
		make: func(t *testing.T) *setup {
			s := connected(t)
			outstanding(s)
			return s
		},
	}, {
		name: "peer disconnected",
		make: func(t *testing.T) *setup {
			s := connected(t)
			// A Send the peer has no receive for (refused, RNR) and a receive; then the
			// peer disconnects: they stay as they are (no flush) until Close.
			recv(s, 1)
			post(s, semSend(2, 0, []byte("no receive at the peer")), "send")
			s.w.runUntil(time.Second, "RNR", func() bool { return s.q.Stats().RNRNaks > 0 })
			d := s.peer.StartDisconnect(0)
			s.w.runUntil(time.Second, "the peer's disconnect", func() bool { done, _ := d.Done(); return done })
			semState(t, "after the peer's disconnect", s.q, transport.QPDisconnected)
			if n := len(s.w.rec.of(s.q)); n != 0 {
				t.Fatalf("completions before Close: %s", statusOf(s.w.rec.of(s.q)))
			}
			recv(s, 3)
			return s
		},
	}, {
		name: "error",
		make: func(t *testing.T) *setup {
			s := connected(t)
			outstanding(s)
			s.q.Flush()
			s.w.runFor(time.Millisecond)
			recv(s, 9)
			post(s, semSend(10, 0, []byte("after the flush")), "send")
			return s
		},
	}, {
		name: "SRQ receive taken",
		make: func(t *testing.T) *setup {
			w, a, b := newSemPair(t, nil)
			pool := newSRQPool(t, b, 8)
			pool.post(3, 8000)
			qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{SRQ: pool.s})
			// A three-packet Send whose later packets never arrive: qb takes a receive of
			// the pool for it and holds it, incomplete.
			a.tap.setDrop(func(p *wire.Packet) bool {
				return p.Opcode == wire.OpSendMiddle || p.Opcode == wire.OpSendLast
			})
			semPost(t, qa, semSend(1, 0, make([]byte, 3*semMSS)))
			w.runUntil(time.Second, "a receive taken", func() bool { return pool.s.Len() == 2 })
			s := &setup{w: w, a: b, b: a, q: qb, want: map[uint64]string{100: "srq receive"}}
			s.after = func(t *testing.T) {
				if n := pool.s.Len(); n != 2 {
					t.Fatalf("the SRQ holds %d receives after the QP's Close, want the 2 it did not take", n)
				}
			}
			return s
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := c.make(t)
			liveClose(t, s.w, s.q)
			s.w.runFor(10 * time.Millisecond)
			got := map[uint64]int{}
			for _, cp := range s.w.rec.of(s.q) {
				got[cp.Context]++
				if _, ok := s.want[cp.Context]; !ok {
					t.Errorf("completion of context %d, never posted: %+v", cp.Context, cp)
				}
				if cp.Status != semCancel {
					t.Errorf("context %d (%s) completed %v", cp.Context, s.want[cp.Context], cp.Status)
				}
			}
			for ctx, what := range s.want {
				if got[ctx] != 1 {
					t.Errorf("%s, context %d: completed %d times, want once", what, ctx, got[ctx])
				}
			}
			if st := s.q.State(); st != transport.QPError && st != transport.QPDisconnected {
				t.Fatalf("closed QP %v", st)
			}
			if s.after != nil {
				s.after(t)
			}
		})
	}
}
