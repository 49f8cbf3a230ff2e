package transport_test

// Semantic conformance tests of the transport's verbs against NDKPI's work-request pages
// (NdkSend, NdkRead, NdkWrite, NdkFlush, ...), the NetworkDirect Disconnect Scheme and the
// ordering and error rules NDK inherits from NetworkDirect
// (IND2CompletionQueue::GetResults, IND2QueuePair): what each work request and receive
// completes with, in which order, and what state the QPs are left in. All run in virtual
// time over simlink, except the concurrency test of Flush, which runs engines in goroutines
// on a real-clock simlink network (run it with -race).

import (
	"bytes"
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/memreg"

	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/simlink"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// Shorthands.
const (
	semOK      = transport.StatusSuccess
	semCancel  = transport.StatusCancelled
	semTO      = transport.StatusTimeout
	semAV      = transport.StatusAccessViolation
	semOpSend  = transport.OpSend
	semOpSendI = transport.OpSendInv
	semOpWrite = transport.OpWrite
	semOpRead  = transport.OpRead
	semOpRecv  = transport.OpReceive
	semOpRecvI = transport.OpReceiveInv
	semRW      = memreg.AccessRemoteRead | memreg.AccessRemoteWrite
)

// TestSemPostIdleAndEarlyReceives: work requests on a QP that is not connected fail
// synchronously with ErrNotConnected (NDK STATUS_CONNECTION_INVALID) and change nothing;
// receives may be posted before connecting and are consumed, in order, afterwards (NDKPI
// NdkReceive).
func TestSemPostIdleAndEarlyReceives(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	qa, qb := a.qp(transport.QPConfig{}), b.qp(transport.QPConfig{})
	semState(t, "new qp", qa, transport.QPIdle)

	buf := []byte("0123456789")
	for _, wr := range []*transport.WorkRequest{
		semSend(1, 0, buf), semSendInv(2, 5, buf), semWrite(3, 0, 0x1000, 1, buf), semRead(4, 0, 0x1000, 1, buf),
	} {
		semIs(t, "post "+wr.Kind.String()+" on an idle qp", qa.PostSend(wr), transport.ErrNotConnected)
	}

	// Receives before connecting, on both sides.
	early := [][]byte{make([]byte, 64), make([]byte, 64)}
	semRecv(t, qb, 10, early[0])
	semRecv(t, qb, 11, early[1])
	semRecv(t, qa, 20, make([]byte, 64))

	// While connecting, work requests are still refused.
	l, err := b.eng.Listen(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := a.eng.Connect(qa, b.addr, 1, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	semState(t, "connecting", qa, transport.QPConnecting)
	semIs(t, "post on a connecting qp", qa.PostSend(semSend(5, 0, buf)), transport.ErrNotConnected)
	req := semNextRequest(w, l)
	if err := req.Accept(qb, nil, 0); err != nil {
		t.Fatal(err)
	}
	semState(t, "accepted", qb, transport.QPConnecting)
	semIs(t, "post on an accepted, not yet established qp", qb.PostSend(semSend(6, 0, buf)), transport.ErrNotConnected)
	semComplete(t, w, conn)
	semAwaitEstablished(w, req)
	if len(w.rec.of(qa)) != 0 || len(w.rec.of(qb)) != 0 {
		t.Fatalf("refused posts or early receives completed: A %s B %s", statusOf(w.rec.of(qa)), statusOf(w.rec.of(qb)))
	}

	semPost(t, qa, semSend(7, 0, []byte("first")))
	semPost(t, qa, semSend(8, 0, []byte("second")))
	semPost(t, qb, semSend(9, 0, []byte("back")))
	w.runUntil(time.Second, "sends", func() bool { return len(w.rec.of(qa)) == 3 && len(w.rec.of(qb)) == 3 })
	semExpect(t, "A", w.rec.of(qa, semOpSend), semWant{7, semOpSend, semOK}, semWant{8, semOpSend, semOK})
	semExpect(t, "A receives", w.rec.of(qa, semOpRecv), semWant{20, semOpRecv, semOK})
	semExpect(t, "B receives", w.rec.of(qb, semOpRecv), semWant{10, semOpRecv, semOK}, semWant{11, semOpRecv, semOK})
	if string(early[0][:5]) != "first" || string(early[1][:6]) != "second" {
		t.Fatalf("early receives hold %q, %q", early[0][:6], early[1][:6])
	}
}

// TestSemRNRTimeout: a Send for which the peer never posts a receive gets RNR NAKs; once its
// first RNR NAK is RNRTimeout old (checked when the next one arrives; the last wait ends with
// the budget), it completes StatusTimeout (NDK STATUS_IO_TIMEOUT, test ndsendnoreceive), the
// QP enters the error state (Cause: ErrRNRTimeout) and later posts complete cancelled.
func TestSemRNRTimeout(t *testing.T) {
	for _, budget := range []time.Duration{time.Millisecond, 20 * time.Millisecond} {
		t.Run(budget.String(), func(t *testing.T) {
			w, a, b := newSemPair(t, func(c *transport.Config) {
				c.RNRTimeout = budget
				c.RetryTimeout = time.Hour // only the RNR budget may end it
			})
			qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
			var firstNak int64
			a.tap.onRx = func(now int64, p *wire.Packet) {
				if p.Opcode == wire.OpAck && p.Ack.Syndrome == wire.SynNakRNR && firstNak == 0 {
					firstNak = now
				}
			}
			semPost(t, qa, semSend(1, 0, []byte("nobody listens")))
			w.runUntil(5*time.Second, "rnr timeout", func() bool { return len(w.rec.of(qa)) == 1 })
			semExpect(t, "sender", w.rec.of(qa), semWant{1, semOpSend, semTO})
			semState(t, "sender", qa, transport.QPError)
			semIs(t, "sender's cause", qa.Cause(), transport.ErrRNRTimeout)
			sa, sb := qa.Stats(), qb.Stats()
			if sb.NaksSent != sa.RNRNaks || sa.RNRNaks < 3 {
				t.Errorf("RNR NAKs: receiver sent %d, sender got %d; want the same, at least 3", sb.NaksSent, sa.RNRNaks)
			}
			// Every RNR NAK but the last (which ends the Send) made the packet wait and go
			// again.
			if sa.RNRRetransmits != sa.RNRNaks-1 || sa.Retransmits != sa.RNRRetransmits {
				t.Errorf("%d RNR NAKs, %d retransmissions queued after an RNR wait, %d sent; want one each per NAK but the last",
					sa.RNRNaks, sa.RNRRetransmits, sa.Retransmits)
			}
			if sa.Timeouts != 0 {
				t.Errorf("retransmission timeouts %d: the failure must come from the RNR budget", sa.Timeouts)
			}
			// The last retry leaves when the budget ends, and its NAK ends the Send a
			// round trip later.
			if el := time.Duration(w.clock.Now() - firstNak); el < budget || el > budget+100*time.Microsecond {
				t.Errorf("RNR timeout %v after the first RNR NAK, want the budget %v and a round trip", el, budget)
			}
			semPost(t, qa, semSend(2, 0, []byte("later")))
			w.runUntil(time.Second, "later post", func() bool { return len(w.rec.of(qa)) == 2 })
			semExpect(t, "later post", w.rec.of(qa)[1:], semWant{2, semOpSend, semCancel})
		})
	}
}

// TestSemRNRTimeoutSecondSend: with two Sends in flight and no receive posted, the first is
// the one that fails StatusTimeout, the second is cancelled (NetworkDirect IND2QueuePair:
// the error is reported on the request that failed; what follows it is cancelled).
func TestSemRNRTimeoutSecondSend(t *testing.T) {
	w, a, b := newSemPair(t, func(c *transport.Config) { c.RNRTimeout = 2 * time.Millisecond })
	qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
	semPost(t, qa, semSend(1, 0, []byte("nobody listens")))
	semPost(t, qa, semSend(2, 0, []byte("after it")))
	w.runUntil(5*time.Second, "rnr timeout", func() bool { return len(w.rec.of(qa)) == 2 })
	t.Logf("A %+v, B NAKs sent %d", qa.Stats(), qb.Stats().NaksSent)
	semExpect(t, "sender", w.rec.of(qa), semWant{1, semOpSend, semTO}, semWant{2, semOpSend, semCancel})
}

// TestSemRNRTimeoutLaterNak: the second Send leaves only after the first one's RNR NAK
// arrived (as a credit probe, while the first waits out its RNR delay), so the receiver
// refuses it with an RNR NAK of its own. That later refusal follows
// from the first and must not take over the RNR wait: the first Send is still the one
// that fails StatusTimeout (seen on AF_XDP, where the two packets arrive in separate polls).
func TestSemRNRTimeoutLaterNak(t *testing.T) {
	w, a, b := newSemPair(t, func(c *transport.Config) {
		c.RNRTimeout, c.CreditTimeout = 2*time.Millisecond, 10*time.Microsecond
	})
	qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
	semPost(t, qa, semSend(1, 0, []byte("nobody listens")))
	w.runUntil(time.Second, "first RNR NAK", func() bool { return qa.Stats().RNRNaks == 1 })
	semPost(t, qa, semSend(2, 0, []byte("after it")))
	w.runUntil(5*time.Second, "rnr timeout", func() bool { return len(w.rec.of(qa)) == 2 })
	if n := qb.Stats().NaksSent; n < 2 {
		t.Fatalf("receiver sent %d NAKs: the second Send was never refused on its own", n)
	}
	semExpect(t, "sender", w.rec.of(qa), semWant{1, semOpSend, semTO}, semWant{2, semOpSend, semCancel})
}

// TestSemRNRTimeoutAfterCreditsKnown is ndsendnoreceive after other traffic: once the
// sender knows the peer's receive credits (any acknowledgement carries them), a Send for
// which the peer never posts a receive must still complete StatusTimeout (IO_TIMEOUT). It
// must not wait for credits forever: an NDK consumer has no other way to learn that the
// peer will never receive. (InfiniBand's end-to-end credits allow a requester without
// credits to send anyway, as a probe the responder RNR NAKs.)
func TestSemRNRTimeoutAfterCreditsKnown(t *testing.T) {
	w, a, b := newSemPair(t, func(c *transport.Config) { c.RNRTimeout = 2 * time.Millisecond })
	qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
	g := newSemGuarded(4096, 1)
	b.mem.add(0x11, 0, 0x10000, g.region, semRW)
	semPost(t, qa, semWrite(1, 0, 0x10000, 0x11, []byte("makes the peer acknowledge")))
	w.runUntil(time.Second, "write", func() bool { return len(w.rec.of(qa)) == 1 })
	semExpect(t, "write", w.rec.of(qa), semWant{1, semOpWrite, semOK})

	semPost(t, qa, semSend(2, 0, []byte("no receive will ever be posted")))
	w.runUntil(5*time.Second, "send without receive, credits known", func() bool { return len(w.rec.of(qa)) == 2 })
	semExpect(t, "sender", w.rec.of(qa), semWant{1, semOpWrite, semOK}, semWant{2, semOpSend, semTO})
	t.Logf("B NAKs sent %d", qb.Stats().NaksSent)
}

// TestSemRNRLateReceive: a receive posted after the first RNR NAKs, before the RNR budget
// runs out, lets the Send succeed.
func TestSemRNRLateReceive(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
	msg := make([]byte, 3000) // several packets
	pattern(msg, 3)
	semPost(t, qa, semSend(1, 0, msg))
	w.runUntil(time.Second, "two RNR NAKs", func() bool { return qa.Stats().RNRNaks >= 2 })
	if len(w.rec.of(qa)) != 0 {
		t.Fatalf("send completed before a receive was posted: %s", statusOf(w.rec.of(qa)))
	}
	rb := make([]byte, 4000)
	semRecv(t, qb, 10, rb)
	w.runUntil(time.Second, "send", func() bool { return len(w.rec.of(qa)) == 1 && len(w.rec.of(qb)) == 1 })
	semExpect(t, "sender", w.rec.of(qa), semWant{1, semOpSend, semOK})
	semExpect(t, "receiver", w.rec.of(qb), semWant{10, semOpRecv, semOK})
	if c := w.rec.of(qb)[0]; c.Bytes != 3000 || !bytes.Equal(rb[:3000], msg) {
		t.Fatalf("received %d bytes, equal %v", c.Bytes, bytes.Equal(rb[:3000], msg))
	}
	if n := qa.Stats().RNRNaks; n > 7 {
		t.Fatalf("%d RNR NAKs", n)
	}
	semState(t, "sender", qa, transport.QPConnected)
	semState(t, "receiver", qb, transport.QPConnected)
}

// TestSemCreditsHoldSends: once the peer has advertised its receives, the sender holds
// Sends beyond them (no RNR NAK) and sends them when more receives are advertised; a
// steady stream paced by the receiver's reposting causes no RNR NAK at all.
func TestSemCreditsHoldSends(t *testing.T) {
	t.Run("hold", func(t *testing.T) {
		w, a, b := newSemPair(t, nil)
		qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
		semRecv(t, qb, 10, make([]byte, 100))
		semRecv(t, qb, 11, make([]byte, 100))
		w.runFor(time.Millisecond) // the credit update reaches A
		for i := range 5 {
			semPost(t, qa, semSend(uint64(i), 0, []byte{byte(i)}))
		}
		w.runFor(20 * time.Millisecond)
		semExpect(t, "sender, two receives posted", w.rec.of(qa), semWant{0, semOpSend, semOK}, semWant{1, semOpSend, semOK})
		if qa.Stats().RNRNaks != 0 || qb.Stats().NaksSent != 0 {
			t.Fatalf("held sends caused NAKs: A got %d RNR NAKs, B sent %d NAKs", qa.Stats().RNRNaks, qb.Stats().NaksSent)
		}
		for i := range 3 {
			semRecv(t, qb, uint64(12+i), make([]byte, 100))
		}
		w.runUntil(time.Second, "rest", func() bool { return len(w.rec.of(qa)) == 5 })
		for i, c := range w.rec.of(qa) {
			if c.Status != semOK || c.Context != uint64(i) {
				t.Fatalf("completion %d: %s", i, statusOf(w.rec.of(qa)))
			}
		}
		if qa.Stats().RNRNaks != 0 {
			t.Fatalf("%d RNR NAKs", qa.Stats().RNRNaks)
		}
	})
	t.Run("stream", func(t *testing.T) {
		w, a, b := newSemPair(t, nil)
		qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
		const n, window = 300, 8
		posted := 0
		repost := func() {
			for posted < n && posted-len(w.rec.of(qb)) < window {
				semRecv(t, qb, uint64(posted), make([]byte, 2000))
				posted++
			}
		}
		sent := 0
		send := func() {
			for sent < n && sent-len(w.rec.of(qa)) < 64 {
				semPost(t, qa, semSend(uint64(sent), 0, make([]byte, 1+sent*7%2000)))
				sent++
			}
		}
		repost()
		w.runFor(time.Millisecond)
		w.runUntil(10*time.Second, "stream", func() bool { repost(); send(); return len(w.rec.of(qa)) == n })
		for i, c := range w.rec.of(qa) {
			if c.Status != semOK || c.Context != uint64(i) {
				t.Fatalf("completion %d: %+v", i, c)
			}
		}
		if got := qa.Stats().RNRNaks; got != 0 {
			t.Fatalf("a stream within the advertised credits got %d RNR NAKs", got)
		}
	})
}

// TestSemReceiveTooSmall: a Send longer than the receive it consumes completes
// StatusDataError at the sender (NDK STATUS_DATA_ERROR, IB REM_INV_REQ) and the receive
// StatusDataOverrun (NDK STATUS_DATA_OVERRUN, IB LOC_LEN_ERR); both QPs enter the error
// state; everything else outstanding completes StatusCancelled, in posting order.
func TestSemReceiveTooSmall(t *testing.T) {
	for _, tc := range []struct {
		name       string
		big, small int
	}{
		{"one packet", 500, 100},
		{"several packets", 5000, 4000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, a, b := newSemPair(t, nil)
			qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
			g := newSemGuarded(8192, 2)
			b.mem.add(0x21, 0, 0x10000, g.region, semRW)
			semRecv(t, qb, 10, make([]byte, 4000))
			semRecv(t, qb, 11, make([]byte, tc.small))
			semRecv(t, qb, 12, make([]byte, 8000))
			semRecv(t, qb, 13, make([]byte, 8000))
			semPost(t, qa, semSend(1, 0, make([]byte, 1000)))
			semPost(t, qa, semSend(2, 0, make([]byte, tc.big)))
			semPost(t, qa, semWrite(3, 0, 0x10000, 0x21, make([]byte, 4000)))
			semPost(t, qa, semSend(4, 0, make([]byte, 10)))
			w.runUntil(5*time.Second, "completions", func() bool { return len(w.rec.of(qa)) == 4 && len(w.rec.of(qb)) == 4 })
			semExpect(t, "sender", w.rec.of(qa),
				semWant{1, semOpSend, semOK}, semWant{2, semOpSend, transport.StatusDataError},
				semWant{3, semOpWrite, semCancel}, semWant{4, semOpSend, semCancel})
			semExpect(t, "receiver", w.rec.of(qb),
				semWant{10, semOpRecv, semOK}, semWant{11, semOpRecv, transport.StatusDataOverrun},
				semWant{12, semOpRecv, semCancel}, semWant{13, semOpRecv, semCancel})
			semState(t, "sender", qa, transport.QPError)
			semState(t, "receiver", qb, transport.QPError)
			if off, ok := g.unchanged(); !ok {
				t.Fatalf("the cancelled Write changed the target at offset %d", off)
			}
			semAfterError(t, w, qa, qb)
		})
	}
}

// semAfterError checks that both QPs of a failed connection complete later posts
// StatusCancelled (NDSPI: "any further requests are completed with ND_CANCELED").
func semAfterError(t *testing.T, w *semWorld, qa, qb *transport.QP) {
	t.Helper()
	na, nb := len(w.rec.of(qa)), len(w.rec.of(qb))
	if err := qa.PostSend(semSend(90, 0, []byte("x"))); err != nil {
		t.Fatalf("post on an errored qp: %v (want accepted, completed cancelled)", err)
	}
	if err := qa.PostSend(semRead(91, 0, 0x10000, 0x21, make([]byte, 8))); err != nil {
		t.Fatalf("post on an errored qp: %v", err)
	}
	semRecv(t, qa, 92, make([]byte, 8))
	semRecv(t, qb, 93, make([]byte, 8))
	w.runUntil(time.Second, "posts after the error", func() bool {
		return len(w.rec.of(qa)) == na+3 && len(w.rec.of(qb)) == nb+1
	})
	last := func(cs []transport.Completion, n int) []transport.Completion { return cs[len(cs)-n:] }
	semExpect(t, "A after the error", last(w.rec.of(qa, semOpSend, semOpRead), 2),
		semWant{90, semOpSend, semCancel}, semWant{91, semOpRead, semCancel})
	semExpect(t, "A receive after the error", last(w.rec.of(qa, semOpRecv), 1), semWant{92, semOpRecv, semCancel})
	semExpect(t, "B receive after the error", w.rec.of(qb)[nb:], semWant{93, semOpRecv, semCancel})
}

// TestSemRemoteAccessViolation: a Write or Read the target refuses (wrong token, out of
// bounds including addresses near 2^64, missing right, invalidated token, another
// protection domain) completes StatusAccessViolation (NDK STATUS_ACCESS_VIOLATION; tests
// ndinvalidreadwrite, ndoverreadwrite, ndwriteviolation); nothing is written in the target
// memory (nor around it); the target's pending receives complete StatusCancelled; both QPs
// are in error; later posts complete cancelled.
func TestSemRemoteAccessViolation(t *testing.T) {
	const (
		size           = 16384
		base    uint64 = 0x10_0000
		roBase  uint64 = 0x20_0000
		woBase  uint64 = 0x30_0000
		invBase uint64 = 0x40_0000
		pdBase  uint64 = 0x50_0000
		tok            = 0x21 // read+write
		roTok          = 0x22 // read only
		woTok          = 0x23 // write only
		invTok         = 0x24 // invalidated
		pdTok          = 0x25 // another protection domain
		lowTok         = 0x26 // read+write, at address 0
	)
	end := base + size
	for _, tc := range []struct {
		name  string
		write bool
		addr  uint64
		token uint32
		n     int
	}{
		{"write wrong token", true, base, 0x99, 100},
		{"read wrong token", false, base, 0x99, 100},
		{"write past end", true, end - 10, tok, 20},
		{"read past end", false, end - 10, tok, 20},
		{"write at end", true, end, tok, 1},
		{"read at end", false, end, tok, 1},
		{"write before start", true, base - 1, tok, 10},
		{"read before start", false, base - 1, tok, 10},
		{"write, last packet past end", true, end - 2*semMSS - 1, tok, 3 * semMSS},
		{"write near 2^64", true, math.MaxUint64 - 31, tok, 16},
		{"read near 2^64", false, math.MaxUint64 - 31, tok, 16},
		{"write wrapping 2^64", true, math.MaxUint64 - 7, lowTok, 16},
		{"read wrapping 2^64", false, math.MaxUint64 - 7, lowTok, 16},
		{"write wrapping 2^64 onto a region at 0", true, math.MaxUint64 - semMSS + 1, lowTok, 2 * semMSS},
		{"write read-only region", true, roBase, roTok, 100},
		{"read write-only region", false, woBase, woTok, 100},
		{"write invalidated token", true, invBase, invTok, 100},
		{"read invalidated token", false, invBase, invTok, 100},
		{"write other protection domain", true, pdBase, pdTok, 100},
		{"read other protection domain", false, pdBase, pdTok, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, a, b := newSemPair(t, nil)
			qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
			regions := map[uint32]*semGuarded{}
			for i, r := range []struct {
				tok  uint32
				base uint64
				acc  memreg.Access
				pd   uint32
			}{{tok, base, semRW, 0}, {roTok, roBase, memreg.AccessRemoteRead, 0}, {woTok, woBase, memreg.AccessRemoteWrite, 0},
				{invTok, invBase, semRW, 0}, {pdTok, pdBase, semRW, 7}} {
				regions[r.tok] = newSemGuarded(size, 10+i)
				b.mem.add(r.tok, r.pd, r.base, regions[r.tok].region, r.acc)
			}
			// A region at address 0, which an address that wrapped past 2^64 would hit.
			low := newSemGuarded(size, 20)
			b.mem.add(lowTok, 0, 0, low.region, semRW)
			if err := b.mem.Invalidate(0, invTok); err != nil {
				t.Fatal(err)
			}

			semRecv(t, qb, 100, make([]byte, 64))
			semRecv(t, qb, 101, make([]byte, 64))
			local := make([]byte, tc.n)
			pattern(local, 77)
			localOrig := append([]byte(nil), local...)
			op := semOpWrite
			if tc.write {
				semPost(t, qa, semWrite(1, 0, tc.addr, tc.token, local))
			} else {
				op = semOpRead
				semPost(t, qa, semRead(1, 0, tc.addr, tc.token, local))
			}
			semPost(t, qa, semSend(2, 0, []byte("after the violation")))
			w.runUntil(5*time.Second, "initiator completions", func() bool { return len(w.rec.of(qa)) == 2 })
			w.runFor(10 * time.Millisecond) // the target's side settles
			ok := semMatch(t, "initiator", w.rec.of(qa), semWant{1, op, semAV}, semWant{2, semOpSend, semCancel})
			ok = semMatch(t, "target", w.rec.of(qb), semWant{100, semOpRecv, semCancel}, semWant{101, semOpRecv, semCancel}) && ok
			for _, x := range []struct {
				what string
				q    *transport.QP
			}{{"initiator", qa}, {"target", qb}} {
				if st := x.q.State(); st != transport.QPError {
					t.Errorf("%s: QP state %v, want error", x.what, st)
					ok = false
				}
			}
			for tk, g := range regions {
				if off, same := g.unchanged(); !same {
					t.Errorf("region of token %#x changed at offset %d", tk, off)
				}
			}
			if off, same := low.unchanged(); !same {
				t.Errorf("memory at address 0 (token %#x) changed at offset %d", lowTok, off)
			}
			if !bytes.Equal(local, localOrig) {
				t.Errorf("the failed request changed its local buffer")
			}
			if !ok {
				t.FailNow()
			}
			semAfterError(t, w, qa, qb)
		})
	}
}

// TestSemRemoteAddressOffset: RemoteAddress is the peer's virtual address plus any offset
// the consumer adds (NDKPI NdkRead, NdkWrite); ranges ending exactly at the region's end
// are valid.
func TestSemRemoteAddressOffset(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	qa, _ := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
	const base, size = 0x4000_0000, 65536
	g := newSemGuarded(size, 5)
	b.mem.add(0x31, 0, base, g.region, semRW)

	data := make([]byte, 5000)
	pattern(data, 6)
	semPost(t, qa, semWrite(1, 0, base+12345, 0x31, data[:1000], data[1000:]))
	tail := []byte("the last bytes of the region")
	semPost(t, qa, semWrite(2, 0, base+size-uint64(len(tail)), 0x31, tail))
	b1, b2, b3 := make([]byte, 1), make([]byte, 1500), make([]byte, 1499)
	semPost(t, qa, semRead(3, 0, base+12345+1000, 0x31, b1, b2, b3))
	back := make([]byte, len(tail))
	semPost(t, qa, semRead(4, 0, base+size-uint64(len(tail)), 0x31, back))
	head := make([]byte, 7)
	semPost(t, qa, semRead(5, 0, base, 0x31, head))
	w.runUntil(time.Second, "offsets", func() bool { return len(w.rec.of(qa)) == 5 })
	semExpect(t, "A", w.rec.of(qa), semWant{1, semOpWrite, semOK}, semWant{2, semOpWrite, semOK},
		semWant{3, semOpRead, semOK}, semWant{4, semOpRead, semOK}, semWant{5, semOpRead, semOK})

	want := append([]byte(nil), g.orig...)
	copy(want[semGuard+12345:], data)
	copy(want[semGuard+size-len(tail):], tail)
	if !bytes.Equal(g.all, want) {
		t.Fatal("the target memory is not exactly the writes at their offsets")
	}
	got := append(append(append([]byte(nil), b1...), b2...), b3...)
	if !bytes.Equal(got, data[1000:4000]) || !bytes.Equal(back, tail) || !bytes.Equal(head, g.orig[semGuard:semGuard+7]) {
		t.Fatal("reads at offsets returned other bytes")
	}
	if c := w.rec.of(qa)[2]; c.Bytes != 3000 {
		t.Fatalf("read completion bytes %d", c.Bytes)
	}
}

// TestSemSendAndInvalidate: the receive completes OpReceiveInv with the token, which is
// invalid from then on (a Write with it fails StatusAccessViolation and writes nothing).
func TestSemSendAndInvalidate(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
	g := newSemGuarded(4096, 8)
	b.mem.add(0x41, 0, 0x10000, g.region, semRW)
	rb := make([]byte, 5000)
	semRecv(t, qb, 10, rb)
	semRecv(t, qb, 11, make([]byte, 100))
	msg := make([]byte, 3000)
	pattern(msg, 9)
	semPost(t, qa, semSendInv(1, 0x41, msg))
	var validAtCompletion error
	w.runUntil(time.Second, "send and invalidate", func() bool {
		if len(w.rec.of(qb)) == 1 && validAtCompletion == nil {
			_, validAtCompletion = b.mem.Resolve(0, 0x41, 0x10000, 1, memreg.AccessRemoteWrite)
		}
		return len(w.rec.of(qa)) == 1 && len(w.rec.of(qb)) == 1
	})
	semExpect(t, "sender", w.rec.of(qa), semWant{1, semOpSendI, semOK})
	cs := w.rec.of(qb)
	semExpect(t, "receiver", cs, semWant{10, semOpRecvI, semOK})
	if cs[0].InvToken != 0x41 || cs[0].Bytes != 3000 || !bytes.Equal(rb[:3000], msg) {
		t.Fatalf("receive completion %+v (data equal %v)", cs[0], bytes.Equal(rb[:3000], msg))
	}
	if validAtCompletion == nil {
		t.Fatal("the token was still valid when the receive completed")
	}

	semPost(t, qa, semWrite(2, 0, 0x10000, 0x41, []byte("must not land")))
	w.runUntil(time.Second, "write with the invalidated token", func() bool { return len(w.rec.of(qa)) == 2 })
	semExpect(t, "write with the invalidated token", w.rec.of(qa)[1:], semWant{2, semOpWrite, semAV})
	if off, ok := g.unchanged(); !ok {
		t.Fatalf("the invalidated region changed at offset %d", off)
	}
	w.runUntil(time.Second, "target flushed", func() bool { return len(w.rec.of(qb)) == 2 })
	semExpect(t, "receiver", w.rec.of(qb)[1:], semWant{11, semOpRecv, semCancel})
}

// TestSemSendAndInvalidateBadToken: a SendAndInvalidate naming a token the receiver cannot
// invalidate makes the receiver abort the connection (NDKPI NdkSendAndInvalidate: "the
// receiving provider must abort the connection"): its QP enters the error state and its
// receives, the one the Send consumed included, complete cancelled; the sender's request
// fails (observed: remote error, see the log) and what follows it is cancelled.
func TestSemSendAndInvalidateBadToken(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
	semRecv(t, qb, 10, make([]byte, 100))
	semRecv(t, qb, 11, make([]byte, 100))
	semPost(t, qa, semSendInv(1, 0xdead, []byte("bad token")))
	semPost(t, qa, semSend(2, 0, []byte("next")))
	w.runUntil(5*time.Second, "abort", func() bool { return len(w.rec.of(qa)) == 2 && len(w.rec.of(qb)) == 2 })
	cs := w.rec.of(qa)
	t.Logf("sender completions: %s", statusOf(cs))
	if cs[0].Context != 1 || (cs[0].Status != transport.StatusRemoteError && cs[0].Status != transport.StatusDataError) {
		t.Fatalf("the SendAndInvalidate completed %v; want remote error (STATUS_REMOTE_ERROR) or data error (IB REM_INV_REQ -> STATUS_DATA_ERROR)", cs[0].Status)
	}
	semExpect(t, "sender after the failure", cs[1:], semWant{2, semOpSend, semCancel})
	semExpect(t, "receiver", w.rec.of(qb), semWant{10, semOpRecv, semCancel}, semWant{11, semOpRecv, semCancel})
	semState(t, "receiver", qb, transport.QPError)
	semState(t, "sender", qa, transport.QPError)
}

// TestSemSolicited: WRSolicited (SEND_AND_SOLICIT_EVENT) sets Completion.Solicited on the
// receive it completes, for one-packet and multi-packet Sends, and only there.
func TestSemSolicited(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
	for i := range 5 {
		semRecv(t, qb, uint64(10+i), make([]byte, 8000))
	}
	semPost(t, qa, semSend(1, 0, []byte("plain")))
	semPost(t, qa, semSend(2, transport.WRSolicited, []byte("solicited")))
	semPost(t, qa, semSend(3, transport.WRSolicited, make([]byte, 5000)))
	semPost(t, qa, semSend(4, 0, make([]byte, 5000)))
	g := newSemGuarded(64, 1)
	b.mem.add(0x51, 0, 0x1000, g.region, semRW)
	inv := semSendInv(5, 0x51, []byte("solicited and invalidate"))
	inv.Flags = transport.WRSolicited
	semPost(t, qa, inv)
	w.runUntil(time.Second, "sends", func() bool { return len(w.rec.of(qb)) == 5 })
	want := []bool{false, true, true, false, true}
	for i, c := range w.rec.of(qb) {
		if c.Status != semOK || c.Context != uint64(10+i) || c.Solicited != want[i] {
			t.Fatalf("receive %d: %+v, want solicited %v", i, c, want[i])
		}
	}
}

// TestSemReadFence: a request with WRReadFence does not start until every earlier Read of
// the QP has completed (NDK_OP_FLAG_READ_FENCE, as InfiniBand's IBV_SEND_FENCE). A large
// Read of a region followed by a fenced Write of new bytes to the same region returns the
// old bytes, and the Write's first packet leaves only after the Read's last response
// arrived.
func TestSemReadFence(t *testing.T) {
	for _, fenced := range []bool{true, false} {
		name := map[bool]string{true: "fenced", false: "unfenced control"}[fenced]
		t.Run(name, func(t *testing.T) {
			w, a, b := newSemPair(t, nil)
			qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
			const size = 256 << 10
			g := newSemGuarded(size, 11)
			b.mem.add(0x61, 0, 0x10000, g.region, semRW)
			old := append([]byte(nil), g.region...)
			var lastResp, firstWrite, firstSendRx int64
			a.tap.onRx = func(now int64, p *wire.Packet) {
				if p.Opcode == wire.OpReadResponse && p.Flags&wire.FlagLast != 0 {
					lastResp = now
				}
			}
			a.tap.onTx = func(now int64, p *wire.Packet) {
				if p.Opcode == wire.OpWrite && firstWrite == 0 {
					firstWrite = now
				}
			}
			b.tap.onRx = func(now int64, p *wire.Packet) {
				if p.Opcode == wire.OpSendOnly && firstSendRx == 0 {
					firstSendRx = now
				}
			}
			semRecv(t, qb, 10, make([]byte, 100))
			got := make([]byte, size)
			newData := make([]byte, size)
			pattern(newData, 12)
			var flags transport.WRFlags
			if fenced {
				flags = transport.WRReadFence
			}
			semPost(t, qa, semRead(1, 0, 0x10000, 0x61, got))
			semPost(t, qa, semWrite(2, flags, 0x10000, 0x61, newData))
			semPost(t, qa, semSend(3, flags, []byte("fenced send")))
			w.runUntil(5*time.Second, "read, write, send", func() bool { return len(w.rec.of(qa)) == 3 })
			semExpect(t, "A", w.rec.of(qa), semWant{1, semOpRead, semOK}, semWant{2, semOpWrite, semOK}, semWant{3, semOpSend, semOK})
			if !bytes.Equal(g.region, newData) {
				t.Fatal("the write did not land")
			}
			sawOld := bytes.Equal(got, old)
			if !fenced {
				t.Logf("without the fence the Read returned the old bytes: %v (write left at %v, last response at %v)",
					sawOld, time.Duration(firstWrite), time.Duration(lastResp))
				return
			}
			if !sawOld {
				t.Fatal("the fenced Write changed the region before the earlier Read had read it")
			}
			if firstWrite < lastResp || firstSendRx < lastResp {
				t.Fatalf("fenced requests started before the Read completed: write sent at %v, send received at %v, last read response at %v",
					time.Duration(firstWrite), time.Duration(firstSendRx), time.Duration(lastResp))
			}
		})
	}
}

// TestSemORDIRD: Reads beyond the negotiated ORD are held, not failed, and all complete;
// the limits are negotiated as min(local ORD, peer IRD) in each direction.
func TestSemORDIRD(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	cfgA := transport.QPConfig{IRD: 3, ORD: 5}
	cfgB := transport.QPConfig{IRD: 2, ORD: 7}
	qa, qb := a.qp(cfgA), b.qp(cfgB)
	conn, req := w.connectQPs(a, qa, b, qb)
	if req.IRD != 3 || req.ORD != 5 {
		t.Fatalf("request carries IRD %d ORD %d, want 3 5", req.IRD, req.ORD)
	}
	if ird, ord := conn.PeerReadLimits(); ird != 2 || ord != 3 {
		t.Fatalf("reply carries IRD %d ORD %d, want the acceptor's negotiated 2 = min(2, 5), 3 = min(7, 3)", ird, ord)
	}

	// Outstanding Reads per direction, as seen on the wire: requests sent, last responses
	// received.
	var outA, maxA, outB, maxB int
	track := func(nd *semNode, out, mx *int) {
		nd.tap.onTx = func(_ int64, p *wire.Packet) {
			if p.Opcode == wire.OpReadRequest && p.Flags&wire.FlagRetransmit == 0 {
				*out++
				*mx = max(*mx, *out)
			}
		}
		nd.tap.onRx = func(_ int64, p *wire.Packet) {
			if p.Opcode == wire.OpReadResponse && p.Flags&wire.FlagLast != 0 && p.Flags&wire.FlagRetransmit == 0 {
				*out--
			}
		}
	}
	track(a, &outA, &maxA)
	track(b, &outB, &maxB)
	const n, size = 8, 32 << 10
	ga, gb := newSemGuarded(n*size, 1), newSemGuarded(n*size, 2)
	a.mem.add(0x71, 0, 0x10000, ga.region, semRW)
	b.mem.add(0x72, 0, 0x10000, gb.region, semRW)
	bufA, bufB := make([][]byte, n), make([][]byte, n)
	for i := range n {
		bufA[i], bufB[i] = make([]byte, size), make([]byte, size)
		semPost(t, qa, semRead(uint64(i), 0, 0x10000+uint64(i*size), 0x72, bufA[i]))
		semPost(t, qb, semRead(uint64(i), 0, 0x10000+uint64(i*size), 0x71, bufB[i]))
	}
	w.runUntil(5*time.Second, "reads", func() bool { return len(w.rec.of(qa)) == n && len(w.rec.of(qb)) == n })
	for i := range n {
		for _, x := range []struct {
			q   *transport.QP
			buf []byte
			src []byte
		}{{qa, bufA[i], gb.region}, {qb, bufB[i], ga.region}} {
			c := w.rec.of(x.q)[i]
			if c.Status != semOK || c.Context != uint64(i) || !bytes.Equal(x.buf, x.src[i*size:(i+1)*size]) {
				t.Fatalf("read %d: %+v", i, c)
			}
		}
	}
	if maxA != 2 || maxB != 3 {
		t.Fatalf("most Reads outstanding: A %d (want ORD min(5, 2) = 2), B %d (want min(7, 3) = 3)", maxA, maxB)
	}
	semState(t, "A", qa, transport.QPConnected)
	semState(t, "B", qb, transport.QPConnected)
}

// TestSemFlush: Flush completes every outstanding request and receive StatusCancelled, in
// posting order per queue, and leaves the QP in error, where later posts complete
// cancelled (NDKPI NdkFlush).
func TestSemFlush(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
	g := newSemGuarded(1<<20, 3)
	b.mem.add(0x81, 0, 0x10000, g.region, semRW)
	semRecv(t, qa, 20, make([]byte, 100))
	semRecv(t, qa, 21, make([]byte, 100))
	semPost(t, qa, semWrite(1, 0, 0x10000, 0x81, make([]byte, 1<<20)))
	semPost(t, qa, semSend(2, 0, []byte("no receive at B")))
	semPost(t, qa, semRead(3, 0, 0x10000, 0x81, make([]byte, 1000)))
	semPost(t, qa, semSend(4, 0, []byte("x")))
	w.runFor(50 * time.Microsecond) // the Write is on the wire
	if len(w.rec.of(qa)) != 0 || qa.Stats().TxPackets == 0 {
		t.Fatalf("before the flush: completions %s, %d packets sent", statusOf(w.rec.of(qa)), qa.Stats().TxPackets)
	}
	qa.Flush()
	semRecv(t, qa, 22, make([]byte, 100)) // posted after the flush
	w.runUntil(time.Second, "flush", func() bool { return len(w.rec.of(qa)) == 7 })
	semExpect(t, "requests", w.rec.of(qa, semOpSend, semOpWrite, semOpRead),
		semWant{1, semOpWrite, semCancel}, semWant{2, semOpSend, semCancel}, semWant{3, semOpRead, semCancel}, semWant{4, semOpSend, semCancel})
	semExpect(t, "receives", w.rec.of(qa, semOpRecv), semWant{20, semOpRecv, semCancel}, semWant{21, semOpRecv, semCancel}, semWant{22, semOpRecv, semCancel})
	semState(t, "flushed", qa, transport.QPError)
	semPost(t, qa, semSend(5, 0, []byte("after")))
	w.runUntil(time.Second, "post after flush", func() bool { return len(w.rec.of(qa)) == 8 })
	semExpect(t, "post after flush", w.rec.of(qa)[7:], semWant{5, semOpSend, semCancel})
	t.Logf("B after A's flush: %v, completions %s", qb.State(), statusOf(w.rec.of(qb)))
}

// TestSemFlushIdle: NdkFlush on a QP that never connected cancels its posted receives
// (NetworkDirect test ndreceiveflushqp), and does not linger to kill a later connection.
func TestSemFlushIdle(t *testing.T) {
	w, a, _ := newSemPair(t, nil)
	q := a.qp(transport.QPConfig{})
	semRecv(t, q, 1, make([]byte, 10))
	semRecv(t, q, 2, make([]byte, 10))
	q.Flush()
	w.runUntil(10*time.Millisecond, "flush of an idle qp", func() bool { return len(w.rec.of(q)) == 2 })
	semExpect(t, "receives", w.rec.of(q), semWant{1, semOpRecv, semCancel}, semWant{2, semOpRecv, semCancel})
}

// TestSemCompletionOrderAfterError: after an error completion every other request and
// receive completes StatusCancelled, in posting order per queue (NetworkDirect
// IND2QueuePair, IND2CompletionQueue::GetResults).
func TestSemCompletionOrderAfterError(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
	g := newSemGuarded(4096, 4)
	b.mem.add(0x21, 0, 0x10000, g.region, semRW)
	for i := range 4 {
		semRecv(t, qb, uint64(10+i), make([]byte, 100))
		semRecv(t, qa, uint64(20+i), make([]byte, 100))
	}
	semPost(t, qa, semSend(0, 0, []byte("ok")))
	semPost(t, qa, semWrite(1, 0, 0x10000, 0x22, []byte("bad token")))
	semPost(t, qa, semRead(2, 0, 0x10000, 0x21, make([]byte, 10)))
	semPost(t, qa, semSend(3, 0, []byte("x")))
	semPost(t, qa, semWrite(4, 0, 0x10000, 0x21, []byte("y")))
	semPost(t, qa, semSendInv(5, 0x21, []byte("z")))
	w.runUntil(5*time.Second, "all", func() bool { return len(w.rec.of(qa)) == 10 && len(w.rec.of(qb)) == 4 })
	semExpect(t, "A requests", w.rec.of(qa, semOpSend, semOpWrite, semOpRead, semOpSendI),
		semWant{0, semOpSend, semOK}, semWant{1, semOpWrite, semAV}, semWant{2, semOpRead, semCancel},
		semWant{3, semOpSend, semCancel}, semWant{4, semOpWrite, semCancel}, semWant{5, semOpSendI, semCancel})
	semExpect(t, "A receives", w.rec.of(qa, semOpRecv),
		semWant{20, semOpRecv, semCancel}, semWant{21, semOpRecv, semCancel}, semWant{22, semOpRecv, semCancel}, semWant{23, semOpRecv, semCancel})
	semExpect(t, "B receives", w.rec.of(qb),
		semWant{10, semOpRecv, semOK}, semWant{11, semOpRecv, semCancel}, semWant{12, semOpRecv, semCancel}, semWant{13, semOpRecv, semCancel})
	if off, ok := g.unchanged(); !ok {
		t.Fatalf("target changed at %d", off)
	}
}

// TestSemFlushConcurrentPost: Flush from one goroutine while another posts Sends (and a
// third posts receives) on the same QP is safe (NDKPI NdkFlush: "NdkFlush may run
// concurrently with a work-request call") — run with -race. Engines run in their own
// goroutines on a real-clock simulated network. Every accepted post completes exactly once,
// in posting order; the successes form a prefix, everything after the first cancellation is
// cancelled.
func TestSemFlushConcurrentPost(t *testing.T) {
	la, lb := simlink.Pair(simlink.Config{Seed: 3, Default: simlink.Impairments{Latency: 5 * time.Microsecond}})
	net := la.Network()
	defer net.Close()
	rec := newRecorder()
	ea, err := transport.NewEngine(transport.DefaultConfig(la))
	if err != nil {
		t.Fatal(err)
	}
	eb, err := transport.NewEngine(transport.DefaultConfig(lb))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	var engines sync.WaitGroup
	for _, e := range []*transport.Engine{ea, eb} {
		engines.Add(1)
		go func() {
			defer engines.Done()
			_ = e.Run(runCtx, 64)
		}()
	}
	defer func() { stop(); engines.Wait() }()

	qa, err := ea.NewQP(transport.QPConfig{Sink: rec, SendDepth: 64, RecvDepth: 64})
	if err != nil {
		t.Fatal(err)
	}
	qb, err := eb.NewQP(transport.QPConfig{Sink: rec, RecvDepth: 4096})
	if err != nil {
		t.Fatal(err)
	}
	const sends = 3000
	for i := range sends {
		if err := qb.PostReceive(&transport.Receive{NSGE: 1, SGL: [transport.MaxSGE][]byte{make([]byte, 64)}, Context: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := eb.Listen(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := ea.Connect(qa, lb.LocalAddr(), 1, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	req, err := l.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := req.Accept(qb, nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := conn.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := conn.Complete(); err != nil {
		t.Fatal(err)
	}
	if err := req.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	l.Close()

	var posted, recvPosted atomic.Int64
	var wg sync.WaitGroup
	payload := []byte("payload")
	wg.Add(3)
	go func() { // the request poster
		defer wg.Done()
		for i := 0; i < sends && ctx.Err() == nil; {
			err := qa.PostSend(semSend(uint64(i), 0, payload))
			switch {
			case err == nil:
				i++
				posted.Store(int64(i))
			case errors.Is(err, transport.ErrQueueFull):
				time.Sleep(10 * time.Microsecond)
			default:
				t.Errorf("post %d: %v", i, err)
				return
			}
		}
	}()
	go func() { // the receive poster
		defer wg.Done()
		for i := 0; i < 500 && ctx.Err() == nil; {
			err := qa.PostReceive(&transport.Receive{NSGE: 1, SGL: [transport.MaxSGE][]byte{make([]byte, 8)}, Context: uint64(1_000_000 + i)})
			switch {
			case err == nil:
				i++
				recvPosted.Store(int64(i))
			case errors.Is(err, transport.ErrQueueFull):
				time.Sleep(10 * time.Microsecond)
			default:
				t.Errorf("post receive %d: %v", i, err)
				return
			}
		}
	}()
	go func() { // the flusher: once some sends went through
		defer wg.Done()
		for posted.Load() < sends/3 && ctx.Err() == nil {
			time.Sleep(20 * time.Microsecond)
		}
		qa.Flush()
		qa.Flush() // twice: idempotent
	}()
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("posting did not finish in time")
	}
	want := int(posted.Load() + recvPosted.Load())
	for len(rec.of(qa)) < want && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	sendsDone := rec.of(qa, semOpSend)
	recvsDone := rec.of(qa, semOpRecv)
	if len(sendsDone) != int(posted.Load()) || len(recvsDone) != int(recvPosted.Load()) {
		t.Fatalf("%d of %d sends and %d of %d receives completed", len(sendsDone), posted.Load(), len(recvsDone), recvPosted.Load())
	}
	firstCancel := -1
	for i, c := range sendsDone {
		if c.Context != uint64(i) {
			t.Fatalf("send completion %d has context %d: not in posting order", i, c.Context)
		}
		switch {
		case c.Status == semCancel && firstCancel < 0:
			firstCancel = i
		case c.Status == semOK && firstCancel < 0:
		case c.Status != semCancel:
			t.Fatalf("send %d completed %v after the flush cancelled send %d", i, c.Status, firstCancel)
		}
	}
	for i, c := range recvsDone {
		if c.Context != uint64(1_000_000+i) || c.Status != semCancel {
			t.Fatalf("receive completion %d: %+v", i, c)
		}
	}
	if firstCancel < 0 {
		t.Fatal("the flush cancelled nothing")
	}
	semState(t, "flushed", qa, transport.QPError)
	t.Logf("%d sends succeeded before the flush, %d cancelled; %d receives cancelled", firstCancel, len(sendsDone)-firstCancel, len(recvsDone))
}

// semMemCheckSink checks, when a receive of QP q completes, that mem holds want: what a
// Write posted before the Send that completed the receive put there.
type semMemCheckSink struct {
	*recorder
	q         *transport.QP
	mem, want []byte
	stale     atomic.Int32
}

func (s *semMemCheckSink) Complete(q *transport.QP, c *transport.Completion) {
	if q == s.q && c.Op == transport.OpReceive && c.Status == transport.StatusSuccess && !bytes.Equal(s.mem, s.want) {
		s.stale.Add(1)
	}
	s.recorder.Complete(q, c)
}

// TestSemWriteThenSendOrdering: a receive completed by a Send shows every effect of the
// requests posted before the Send (in-order completion, NetworkDirect
// IND2CompletionQueue::GetResults: one reliable, ordered stream; the usual "write the data,
// then send a notification" pattern). With the Write's first transmission lost, the Send
// that overtakes it must not complete its receive before the Write has landed.
func TestSemWriteThenSendOrdering(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	region := make([]byte, 4096)
	b.mem.add(0x91, 0, 0x10000, region, semRW)
	data := make([]byte, 4096)
	pattern(data, 13)
	sink := &semMemCheckSink{recorder: w.rec, mem: region, want: data}
	qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{Sink: sink})
	sink.q = qb
	semRecv(t, qb, 10, make([]byte, 100))
	w.runFor(time.Millisecond)
	a.tap.setDrop(semDropFirst(wire.OpWrite, 1)) // the Write's first packet is lost once
	semPost(t, qa, semWrite(1, 0, 0x10000, 0x91, data))
	semPost(t, qa, semSend(2, 0, []byte("the data is in place")))
	w.runUntil(5*time.Second, "write and send", func() bool { return len(w.rec.of(qa)) == 2 && len(w.rec.of(qb)) == 1 })
	semExpect(t, "A", w.rec.of(qa), semWant{1, semOpWrite, semOK}, semWant{2, semOpSend, semOK})
	semExpect(t, "B", w.rec.of(qb), semWant{10, semOpRecv, semOK})
	if sink.stale.Load() != 0 {
		t.Fatal("the receive completed before the Write posted ahead of its Send had landed")
	}
}

// A receive posted before the peer's Send arrives takes it, even when the engine meets the
// Send in the poll round in which the receive was posted (received packets are handled
// before the QPs take what was posted): no RNR NAK, no retry delay.
func TestSemReceivePostedBeforeSendArrives(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
	w.runFor(time.Millisecond) // idle: credits and acks settled
	inbox := make([]byte, 64)
	semRecv(t, qb, 1, inbox) // posted; B's engine has not run since
	msg := []byte("posted before it was sent")
	semPost(t, qa, semSend(2, 0, msg))
	now := w.clock.Now()
	if _, busy := a.eng.Poll(now); !busy { // A transmits the Send, B does not run
		t.Fatal("A's engine did not send")
	}
	w.clock.Set(now + int64(time.Millisecond)) // the Send has arrived at B
	b.eng.Poll(w.clock.Now())                  // B meets it before taking the receive
	w.runUntil(time.Second, "send and receive completions", func() bool {
		return len(w.rec.of(qa)) == 1 && len(w.rec.of(qb)) == 1
	})
	semExpect(t, "sender", w.rec.of(qa), semWant{2, transport.OpSend, transport.StatusSuccess})
	semExpect(t, "receiver", w.rec.of(qb), semWant{1, transport.OpReceive, transport.StatusSuccess})
	if n := qa.Stats().RNRNaks; n != 0 {
		t.Fatalf("%d RNR NAKs for a Send whose receive was posted before it was sent", n)
	}
	if string(inbox[:len(msg)]) != string(msg) {
		t.Fatalf("received %q", inbox[:len(msg)])
	}
}

// A budget that runs out fails the QP's oldest outstanding request, whichever packet's
// budget it was, and flushes the rest behind it: requests complete in posting order, so the
// first failure an application sees says why the connection ended (as InfiniBand's retry
// timer, which covers the oldest outstanding request, reports its error on that one). Here
// a Read's request is acknowledged and its responses are lost, the peer dies, and a Write
// posted after the Read goes unanswered: the Write's packet runs out of its budget, but the
// Read, ahead of it, must complete StatusTimeout and the Write StatusCancelled. (The
// requester blamed the Write: the Read completed cancelled first, and the application's
// first failure on the QP said nothing of a timeout; seen as a first failure of
// STATUS_CANCELLED in internal/workload's TestStallPastRetryTimeout.)
func TestSemTimeoutFailsOldestRequest(t *testing.T) {
	w, a, b := newSemPair(t, func(c *transport.Config) { c.RetryTimeout = 50 * time.Millisecond; c.RTO.Max = 20 * time.Millisecond })
	qa, _ := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
	region := make([]byte, 8192)
	pattern(region, 6)
	b.mem.add(0x41, 0, 0x10000, region, semRW)
	w.runFor(time.Millisecond)
	dropped := 0
	b.tap.setDrop(func(p *wire.Packet) bool {
		if p.Opcode == wire.OpReadResponse {
			dropped++
			return true
		}
		return false
	})
	acks := a.tap.recvCount(wire.OpAck)
	dst := make([]byte, len(region))
	semPost(t, qa, semRead(1, 0, 0x10000, 0x41, dst))
	w.runUntil(time.Second, "read request acknowledged", func() bool { return dropped > 0 && a.tap.recvCount(wire.OpAck) > acks })
	b.link.Close() // B is gone: its host takes nothing more
	w.nodes = w.nodes[:1]
	semPost(t, qa, semWrite(2, 0, 0x10000+100, 0x41, []byte("unanswered")))
	w.runUntil(10*time.Second, "both requests ended", func() bool { return len(w.rec.of(qa)) == 2 })
	semExpect(t, "after the peer died", w.rec.of(qa),
		semWant{1, transport.OpRead, transport.StatusTimeout}, semWant{2, transport.OpWrite, transport.StatusCancelled})
	if c := qa.Cause(); !errors.Is(c, transport.ErrRetryTimeout) {
		t.Fatalf("cause %v, want the retransmission budget", c)
	}
}

// A Read whose request the peer acknowledged, but whose response never arrives because the
// peer then died, fails with StatusTimeout (the requester probes a peer that owes it a
// response: nothing else of its own is in flight to time out) and the connection aborts
// with the disconnect event; a request fenced behind it completes cancelled. A live peer
// whose responses are only delayed answers the probes, and the Read succeeds.
func TestSemReadAnsweredByDeadPeer(t *testing.T) {
	for _, dies := range []bool{true, false} {
		name := "responses delayed"
		if dies {
			name = "peer dies"
		}
		t.Run(name, func(t *testing.T) {
			w, a, b := newSemPair(t, func(c *transport.Config) { c.RetryTimeout = 50 * time.Millisecond; c.RTO.Max = 20 * time.Millisecond })
			var aborted atomic.Int32
			qa, _ := w.connect(a, transport.QPConfig{OnDisconnect: func(*transport.QP) { aborted.Add(1) }}, b, transport.QPConfig{})
			region := make([]byte, 8192)
			pattern(region, 5)
			b.mem.add(0x41, 0, 0x10000, region, semRW)
			w.runFor(time.Millisecond)
			dropped := 0
			b.tap.setDrop(func(p *wire.Packet) bool {
				if p.Opcode == wire.OpReadResponse {
					dropped++
					return true
				}
				return false
			})
			acks := a.tap.recvCount(wire.OpAck)
			dst := make([]byte, len(region))
			semPost(t, qa, semRead(1, 0, 0x10000, 0x41, dst))
			semPost(t, qa, semWrite(2, transport.WRReadFence, 0x10000+100, 0x41, []byte("fenced")))
			// The request gets through and is acknowledged by an Ack of its own (one
			// piggybacked on a response is lost with it); the responses are lost.
			w.runUntil(time.Second, "read request acknowledged", func() bool { return dropped > 0 && a.tap.recvCount(wire.OpAck) > acks })
			if dies {
				b.link.Close() // B is gone: its host takes nothing more
				w.nodes = w.nodes[:1]
				w.runUntil(10*time.Second, "read failed", func() bool { return len(w.rec.of(qa)) == 2 })
				semExpect(t, "after the peer died", w.rec.of(qa),
					semWant{1, transport.OpRead, transport.StatusTimeout}, semWant{2, transport.OpWrite, transport.StatusCancelled})
				if n := aborted.Load(); n != 1 {
					t.Fatalf("disconnect event fired %d times, want 1", n)
				}
				return
			}
			// Several probe rounds, all answered, but shorter than B's own retry budget
			// for its responses (RetryTimeout).
			w.runFor(10 * time.Millisecond)
			b.tap.setDrop(nil) // B's own retransmissions now get through
			w.runUntil(10*time.Second, "read done", func() bool { return len(w.rec.of(qa)) == 2 })
			semExpect(t, "delayed responses", w.rec.of(qa),
				semWant{1, transport.OpRead, transport.StatusSuccess}, semWant{2, transport.OpWrite, transport.StatusSuccess})
			if !bytes.Equal(dst[:100], region[:100]) || !bytes.Equal(dst[106:], region[106:]) || string(region[100:106]) != "fenced" {
				t.Fatal("read bytes differ")
			}
			if qa.Stats().Timeouts == 0 {
				t.Fatal("no probe was sent while the responses were delayed")
			}
		})
	}
}
