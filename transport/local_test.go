package transport_test

import (
	"errors"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// Packet-less requests (OpLocal), deferred posts (WRDefer) and read limits set before
// connecting (SetReadLimits): the primitives package ndk builds Bind, FastRegister,
// Invalidate, NDK_OP_FLAG_DEFER and NdkConnect's read limits on.

func local(ctx uint64, flags transport.WRFlags, st transport.Status) *transport.WorkRequest {
	return &transport.WorkRequest{Kind: transport.OpLocal, Flags: flags, Context: ctx, LocalStatus: st}
}

// An OpLocal request completes in posting order: after the Write posted before it (whose
// first packet is lost, so it completes late), before the Send posted after it; it sends
// nothing.
func TestLocalCompletesInOrder(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
	b.mem.add(0x61, 0, 0x10000, make([]byte, 64<<10), semRW)
	semRecv(t, qb, 10, make([]byte, 100))
	a.tap.setDrop(semDropFirst(wire.OpWrite, 1))
	var ops []wire.Opcode
	a.tap.onTx = func(_ int64, p *wire.Packet) { ops = append(ops, p.Opcode) }
	semPost(t, qa, semWrite(1, 0, 0x10000, 0x61, make([]byte, 32<<10)))
	semPost(t, qa, local(2, 0, transport.StatusSuccess))
	semPost(t, qa, semSend(3, 0, []byte("after")))
	w.runUntil(5*time.Second, "three completions", func() bool { return len(w.rec.of(qa)) == 3 })
	semExpect(t, "A", w.rec.of(qa), semWant{1, semOpWrite, semOK}, semWant{2, transport.OpLocal, semOK}, semWant{3, semOpSend, semOK})
	for _, op := range ops {
		if op != wire.OpWrite && op != wire.OpSendOnly && op != wire.OpAck {
			t.Fatalf("a local request sent %v", op)
		}
	}
}

// An OpLocal with a failure status fails the QP in its turn: the requests before it (a
// Read, and a fenced OpLocal that waits for it) complete normally, it completes with its
// status, the ones after it cancelled.
func TestLocalFailure(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
	b.mem.add(0x61, 0, 0x10000, make([]byte, 256<<10), semRW)
	semRecv(t, qb, 10, make([]byte, 100))
	semPost(t, qa, semRead(1, 0, 0x10000, 0x61, make([]byte, 256<<10)))
	semPost(t, qa, local(2, transport.WRReadFence, transport.StatusSuccess))
	semPost(t, qa, local(3, 0, transport.StatusAccessViolation))
	semPost(t, qa, semSend(4, 0, []byte("cancelled")))
	w.runUntil(5*time.Second, "four completions", func() bool { return len(w.rec.of(qa)) == 4 })
	semExpect(t, "A", w.rec.of(qa),
		semWant{1, semOpRead, semOK}, semWant{2, transport.OpLocal, semOK},
		semWant{3, transport.OpLocal, transport.StatusAccessViolation}, semWant{4, semOpSend, transport.StatusCancelled})
	if qa.State() != transport.QPError {
		t.Fatalf("QP %v after a failed local request", qa.State())
	}
}

// Deferred posts stay invisible to the engine until a post without WRDefer, or a failing
// post, publishes them (NDKPI Deferred Processing Scheme).
func TestDeferredPosts(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	qa, qb := w.connect(a, transport.QPConfig{SendDepth: 4}, b, transport.QPConfig{})
	for i := range 4 {
		semRecv(t, qb, uint64(10+i), make([]byte, 100))
	}
	semPost(t, qa, semSend(1, transport.WRDefer, []byte("one")))
	semPost(t, qa, semSend(2, transport.WRDefer, []byte("two")))
	w.runFor(5 * time.Millisecond)
	if n := len(w.rec.of(qa)) + len(w.rec.of(qb)); n != 0 {
		t.Fatalf("%d completions of deferred requests before any was published", n)
	}
	semPost(t, qa, semSend(3, 0, []byte("three")))
	w.runUntil(5*time.Second, "three sends", func() bool { return len(w.rec.of(qa)) == 3 })
	semExpect(t, "A", w.rec.of(qa), semWant{1, semOpSend, semOK}, semWant{2, semOpSend, semOK}, semWant{3, semOpSend, semOK})

	// A deferred request followed by a failing post: the failure publishes it.
	semPost(t, qa, semSend(4, transport.WRDefer, []byte("four")))
	bad := &transport.WorkRequest{Kind: transport.OpRead, Context: 5} // zero-length Read: invalid
	if err := qa.PostSend(bad); !errors.Is(err, transport.ErrInvalidRequest) {
		t.Fatalf("invalid post: %v", err)
	}
	w.runUntil(5*time.Second, "the deferred send", func() bool { return len(w.rec.of(qa)) == 4 })
	if c := w.rec.of(qa)[3]; c.Context != 4 || c.Status != semOK {
		t.Fatalf("deferred send after a failed post: %+v", c)
	}
}

// SetReadLimits lowers the limits of an idle QP within its creation values, and the
// connection negotiates with the lowered ones; it refuses higher values and connected QPs.
func TestSetReadLimits(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	qa, qb := a.qp(transport.QPConfig{IRD: 8, ORD: 8}), b.qp(transport.QPConfig{IRD: 8, ORD: 8})
	if err := qa.SetReadLimits(9, 1); !errors.Is(err, transport.ErrInvalidRequest) {
		t.Fatalf("IRD above the creation value: %v", err)
	}
	if err := qa.SetReadLimits(2, 1); err != nil {
		t.Fatal(err)
	}
	w.connectQPs(a, qa, b, qb)
	if err := qa.SetReadLimits(1, 1); !errors.Is(err, transport.ErrBadState) {
		t.Fatalf("SetReadLimits on a connected QP: %v", err)
	}
	// ORD 1 at A: three Reads are held to one at a time, and all complete.
	b.mem.add(0x61, 0, 0x10000, make([]byte, 64<<10), semRW)
	maxOut := 0
	out := 0
	a.tap.onTx = func(_ int64, p *wire.Packet) {
		if p.Opcode == wire.OpReadRequest {
			out++
			maxOut = max(maxOut, out)
		}
	}
	a.tap.onRx = func(_ int64, p *wire.Packet) {
		if p.Opcode == wire.OpReadResponse && p.Flags&wire.FlagLast != 0 {
			out--
		}
	}
	for i := range 3 {
		semPost(t, qa, semRead(uint64(i), 0, 0x10000, 0x61, make([]byte, 16<<10)))
	}
	w.runUntil(5*time.Second, "three reads", func() bool { return len(w.rec.of(qa)) == 3 })
	if maxOut != 1 {
		t.Fatalf("%d Reads outstanding at once with ORD 1", maxOut)
	}
}

// RNR refusals have their own budget: a Send that has been refused with RNR NAKs for
// longer than RetryTimeout (the loss budget) and then loses one RNR NAK must be
// retransmitted by the timer, not fail STATUS_IO_TIMEOUT because its refusals were counted
// as unanswered time (an RNR NAK starts its retransmission budget again); it completes
// once the peer posts a receive.
func TestRNRRetriesApartFromRetryLimit(t *testing.T) {
	w, a, b := newSemPair(t, func(c *transport.Config) {
		c.RetryTimeout = 2 * time.Millisecond
		c.RNRTimeout = time.Second
		c.RNRDelay = 20 * time.Microsecond
	})
	qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
	naks := 0
	b.tap.setDrop(func(p *wire.Packet) bool {
		if p.Opcode == wire.OpAck && p.Ack.Syndrome == wire.SynNakRNR {
			naks++
			return naks == 6 // lose the sixth RNR NAK: the retransmission timer fires
		}
		return false
	})
	semPost(t, qa, semSend(1, 0, []byte("patient")))
	t0 := w.clock.Now()
	w.runUntil(time.Second, "eight RNR NAKs", func() bool { return naks >= 8 || len(w.rec.of(qa)) > 0 })
	if c := w.rec.of(qa); len(c) != 0 {
		t.Fatalf("the Send failed while waiting out RNR: %s", statusOf(c))
	}
	if el := w.elapsedSince(t0); el <= 2*time.Millisecond {
		t.Fatalf("eight RNR NAKs within %v: not past RetryTimeout", el)
	}
	if qa.Stats().Timeouts == 0 {
		t.Fatal("the lost RNR NAK did not make the retransmission timer fire")
	}
	semRecv(t, qb, 10, make([]byte, 100))
	w.runUntil(time.Second, "send", func() bool { return len(w.rec.of(qa)) == 1 })
	semExpect(t, "sender", w.rec.of(qa), semWant{1, semOpSend, semOK})
}
