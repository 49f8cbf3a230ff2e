package transport_test

// Tests of shared receive queues (NDKPI NdkModifySrq, docs/TRANSPORT.md "Shared receive
// queues"): several QPs of one engine consume one pool of receives, in each QP's message
// order; an empty pool refuses Sends with RNR NAKs until receives are posted; the limit
// event; a failing QP cancels only what it took. All in virtual time over simlink.

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/simlink"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// srqPool is an SRQ and the buffers of the receives posted to it, by context.
type srqPool struct {
	t    testing.TB
	s    *transport.SRQ
	bufs map[uint64][]byte
	next uint64
}

func newSRQPool(t testing.TB, nd *semNode, depth int) *srqPool {
	t.Helper()
	s, err := nd.eng.NewSRQ(depth)
	if err != nil {
		t.Fatal(err)
	}
	return &srqPool{t: t, s: s, bufs: map[uint64][]byte{}, next: 100}
}

// post posts n receives of size bytes each (two SGEs when size allows), contexts counting
// up.
func (p *srqPool) post(n, size int) {
	p.t.Helper()
	for range n {
		b := make([]byte, size)
		r := transport.Receive{Context: p.next}
		if size >= 2 {
			r.NSGE, r.SGL[0], r.SGL[1] = 2, b[:size/3], b[size/3:]
		} else {
			r.NSGE, r.SGL[0] = 1, b
		}
		if err := p.s.PostReceive(&r); err != nil {
			p.t.Fatalf("srq post %d: %v", p.next, err)
		}
		p.bufs[p.next] = b
		p.next++
	}
}

// srqMsg returns message i of sender seed: a length that varies (one to three packets) and
// a pattern.
func srqMsg(seed, i int) []byte {
	m := make([]byte, 1+(i*977+seed*131)%(3*semMSS))
	pattern(m, seed*1000+i)
	return m
}

// srqCheckReceived checks that the receive completions of q are exactly msgs in order,
// successful, byte-exact in the receives they name, with increasing contexts (taken in
// message order from a FIFO pool); it returns the contexts used.
func srqCheckReceived(t *testing.T, w *semWorld, p *srqPool, what string, q *transport.QP, msgs [][]byte) []uint64 {
	t.Helper()
	got := w.rec.of(q, transport.OpReceive)
	if len(got) != len(msgs) {
		t.Fatalf("%s: %d receive completions, want %d: %s", what, len(got), len(msgs), statusOf(got))
	}
	var ctxs []uint64
	for i, c := range got {
		if c.Status != transport.StatusSuccess || int(c.Bytes) != len(msgs[i]) {
			t.Fatalf("%s: receive %d: %v, %d bytes; want success, %d", what, i, c.Status, c.Bytes, len(msgs[i]))
		}
		b, ok := p.bufs[c.Context]
		if !ok {
			t.Fatalf("%s: receive %d names context %d, never posted", what, i, c.Context)
		}
		if !bytes.Equal(b[:c.Bytes], msgs[i]) {
			t.Fatalf("%s: message %d differs in receive %d", what, i, c.Context)
		}
		if i > 0 && c.Context <= ctxs[i-1] {
			t.Fatalf("%s: receive %d has context %d after %d: not in posting order", what, i, c.Context, ctxs[i-1])
		}
		ctxs = append(ctxs, c.Context)
	}
	return ctxs
}

// TestSRQSharedByTwoPeers: two QPs of one engine, connected to two different peers, share
// one SRQ. Every message lands byte-exact in exactly one receive; each QP takes receives in
// its message order; together they consume exactly as many receives as messages arrived,
// and the rest stay queued. Also with loss, duplicates and reordering (a QP then takes
// receives for messages whose first packets are still missing, still in order).
func TestSRQSharedByTwoPeers(t *testing.T) {
	for _, tc := range []struct {
		name string
		imp  simlink.Impairments
	}{
		{"clean", simlink.Impairments{Latency: 5 * time.Microsecond}},
		{"lossy", simlink.Impairments{Latency: 5 * time.Microsecond, Jitter: 20 * time.Microsecond, Loss: 0.05, Duplicate: 0.02}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newSemWorld(t, simlink.Config{Seed: 7, Default: tc.imp})
			r, p1, p2 := w.engine(1, nil), w.engine(2, nil), w.engine(3, nil)
			pool := newSRQPool(t, r, 256)
			pool.post(100, 3*semMSS)
			s1, q1 := w.connect(p1, transport.QPConfig{}, r, transport.QPConfig{SRQ: pool.s})
			s2, q2 := w.connect(p2, transport.QPConfig{}, r, transport.QPConfig{SRQ: pool.s})
			const n1, n2 = 30, 25
			var m1, m2 [][]byte
			for i := range max(n1, n2) {
				if i < n1 {
					m1 = append(m1, srqMsg(1, i))
					semPost(t, s1, semSend(uint64(i), 0, m1[i]))
				}
				if i < n2 {
					m2 = append(m2, srqMsg(2, i))
					semPost(t, s2, semSend(uint64(i), 0, m2[i]))
				}
			}
			w.runUntil(10*time.Second, "sends", func() bool {
				return len(w.rec.of(s1)) == n1 && len(w.rec.of(s2)) == n2 &&
					len(w.rec.of(q1)) == n1 && len(w.rec.of(q2)) == n2
			})
			for i, c := range w.rec.of(s1) {
				if c.Status != transport.StatusSuccess || c.Context != uint64(i) {
					t.Fatalf("sender 1 completion %d: ctx %d %v", i, c.Context, c.Status)
				}
			}
			for i, c := range w.rec.of(s2) {
				if c.Status != transport.StatusSuccess || c.Context != uint64(i) {
					t.Fatalf("sender 2 completion %d: ctx %d %v", i, c.Context, c.Status)
				}
			}
			c1 := srqCheckReceived(t, w, pool, "qp 1", q1, m1)
			c2 := srqCheckReceived(t, w, pool, "qp 2", q2, m2)
			used := map[uint64]bool{}
			for _, c := range append(c1, c2...) {
				if used[c] {
					t.Fatalf("receive %d completed twice", c)
				}
				used[c] = true
			}
			// Exactly the oldest n1+n2 receives were taken, the rest are still queued.
			for c := uint64(100); c < 100+n1+n2; c++ {
				if !used[c] {
					t.Fatalf("receive %d was skipped", c)
				}
			}
			if got := pool.s.Len(); got != 100-n1-n2 {
				t.Fatalf("SRQ holds %d receives, want %d", got, 100-n1-n2)
			}
			t.Logf("qp1 %d receives, qp2 %d; retransmissions %d / %d, duplicates %d / %d", len(c1), len(c2), s1.Stats().Retransmits, s2.Stats().Retransmits, q1.Stats().Duplicates, q2.Stats().Duplicates)
		})
	}
}

// TestSRQEmptyRNRThenSuccess: a QP on an empty SRQ refuses a Send with RNR NAKs (it cannot
// promise credits, so the sender sent at once); a receive posted to the SRQ before the RNR
// budget runs out lets the Send complete, byte-exact. The QP advertises no credit limit: a
// burst of Sends after that is not held back by the sender.
func TestSRQEmptyRNRThenSuccess(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	pool := newSRQPool(t, b, 64)
	qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{SRQ: pool.s})
	msg := make([]byte, 3000)
	pattern(msg, 5)
	semPost(t, qa, semSend(1, 0, msg))
	w.runUntil(time.Second, "two RNR NAKs", func() bool { return qa.Stats().RNRNaks >= 2 })
	if len(w.rec.of(qa)) != 0 || len(w.rec.of(qb)) != 0 {
		t.Fatalf("completions before a receive was posted: %s / %s", statusOf(w.rec.of(qa)), statusOf(w.rec.of(qb)))
	}
	pool.post(1, 4000)
	w.runUntil(time.Second, "send", func() bool { return len(w.rec.of(qa)) == 1 && len(w.rec.of(qb)) == 1 })
	semExpect(t, "sender", w.rec.of(qa), semWant{1, semOpSend, semOK})
	srqCheckReceived(t, w, pool, "receiver", qb, [][]byte{msg})
	semState(t, "sender", qa, transport.QPConnected)
	semState(t, "receiver", qb, transport.QPConnected)

	// With 20 receives queued, 20 Sends go without waiting for credits and without RNR.
	pool.post(20, 100)
	rnr := qa.Stats().RNRNaks
	var msgs [][]byte
	for i := range 20 {
		msgs = append(msgs, []byte{byte(i), 1, 2, 3})
		semPost(t, qa, semSend(uint64(10+i), 0, msgs[i]))
	}
	w.runUntil(time.Second, "burst", func() bool { return len(w.rec.of(qb)) == 21 })
	srqCheckReceived(t, w, pool, "receiver", qb, append([][]byte{msg}, msgs...))
	if got := qa.Stats().RNRNaks; got != rnr {
		t.Fatalf("%d RNR NAKs during the burst with receives queued", got-rnr)
	}
}

// TestSRQEmptyTimeout: a Send to a QP whose SRQ stays empty fails through the RNR budget
// (StatusTimeout), as without an SRQ; the SRQ is untouched and other QPs on it are
// not affected.
func TestSRQEmptyTimeout(t *testing.T) {
	w := newSemWorld(t, simlink.Config{Seed: 3, Default: simlink.Impairments{Latency: 5 * time.Microsecond}})
	r, p1, p2 := w.engine(1, nil), w.engine(2, func(c *transport.Config) { c.RNRTimeout = 2 * time.Millisecond }), w.engine(3, nil)
	pool := newSRQPool(t, r, 16)
	s1, q1 := w.connect(p1, transport.QPConfig{}, r, transport.QPConfig{SRQ: pool.s})
	s2, q2 := w.connect(p2, transport.QPConfig{}, r, transport.QPConfig{SRQ: pool.s})
	semPost(t, s1, semSend(1, 0, []byte("nobody posted")))
	w.runUntil(5*time.Second, "rnr timeout", func() bool { return len(w.rec.of(s1)) == 1 })
	semExpect(t, "sender 1", w.rec.of(s1), semWant{1, semOpSend, semTO})
	pool.post(2, 64)
	semPost(t, s2, semSend(2, 0, []byte("fine")))
	w.runUntil(time.Second, "second peer", func() bool { return len(w.rec.of(q2)) == 1 })
	srqCheckReceived(t, w, pool, "qp 2", q2, [][]byte{[]byte("fine")})
	if pool.s.Len() != 1 {
		t.Fatalf("SRQ holds %d, want 1", pool.s.Len())
	}
	t.Logf("qp1 %v, completions %s", q1.State(), statusOf(w.rec.of(q1)))
}

// TestSRQLimit: the limit event fires once when taking a receive leaves fewer than the
// limit queued, on the engine goroutine, then stays disarmed; SetLimit with now fires at
// once when the SRQ is already below; without now it waits for a take; 0 disarms.
func TestSRQLimit(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	pool := newSRQPool(t, b, 64)
	qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{SRQ: pool.s})
	fired := 0
	fire := func() { fired++ } // runs on the engine goroutine: the test's, in virtual time
	send := func(n int) {
		t.Helper()
		want := len(w.rec.of(qb)) + n
		for i := range n {
			semPost(t, qa, semSend(uint64(i), 0, []byte("x")))
		}
		w.runUntil(time.Second, "sends", func() bool { return len(w.rec.of(qb)) == want })
	}
	pool.post(6, 16)
	pool.s.SetLimit(4, false, fire)
	w.runFor(100 * time.Microsecond)
	if fired != 0 {
		t.Fatalf("fired %d times with 6 queued, limit 4", fired)
	}
	send(2) // 4 left: not below 4
	if fired != 0 {
		t.Fatalf("fired with 4 queued, limit 4")
	}
	send(1) // 3 left
	if fired != 1 {
		t.Fatalf("fired %d times after falling below the limit, want 1", fired)
	}
	send(2) // 1 left: disarmed
	if fired != 1 {
		t.Fatalf("fired %d times: the event must disarm after firing", fired)
	}

	pool.s.SetLimit(3, false, fire) // below already, but only a take fires it
	w.runFor(100 * time.Microsecond)
	if fired != 1 {
		t.Fatalf("SetLimit without now fired at once")
	}
	pool.s.SetLimit(0, false, fire) // disarm
	send(1)
	if fired != 1 {
		t.Fatalf("fired after disarming")
	}
	pool.s.SetLimit(2, true, fire) // 0 queued < 2: at once
	w.runFor(100 * time.Microsecond)
	if fired != 2 {
		t.Fatalf("SetLimit with now below the limit: fired %d times, want 2", fired)
	}
	pool.post(3, 16)
	pool.s.SetLimit(2, true, fire) // 3 queued: armed, not fired
	w.runFor(100 * time.Microsecond)
	if fired != 2 {
		t.Fatalf("fired with 3 queued, limit 2")
	}
	send(2) // 1 left
	if fired != 3 {
		t.Fatalf("fired %d times, want 3", fired)
	}
}

// TestSRQFailureIsolation: when one QP on an SRQ fails (Flush), the receive it had taken
// for a message in progress completes cancelled on that QP; the receives still queued in the
// SRQ are not cancelled, and another QP on the SRQ keeps receiving into them.
func TestSRQFailureIsolation(t *testing.T) {
	w := newSemWorld(t, simlink.Config{Seed: 5, Default: simlink.Impairments{Latency: 5 * time.Microsecond}})
	r, p1, p2 := w.engine(1, nil), w.engine(2, nil), w.engine(3, nil)
	pool := newSRQPool(t, r, 16)
	pool.post(6, 3*semMSS)
	s1, q1 := w.connect(p1, transport.QPConfig{}, r, transport.QPConfig{SRQ: pool.s})
	s2, q2 := w.connect(p2, transport.QPConfig{}, r, transport.QPConfig{SRQ: pool.s})

	// Peer 1's first message completes; its second (three packets) loses its last packet,
	// so QP 1 holds a receive for a message in progress.
	semPost(t, s1, semSend(1, 0, []byte("done")))
	w.runUntil(time.Second, "first", func() bool { return len(w.rec.of(q1)) == 1 })
	lost := false
	p1.tap.setDrop(func(p *wire.Packet) bool {
		if p.Opcode == wire.OpSendLast && !lost {
			lost = true
			return true
		}
		return false
	})
	long := make([]byte, 3*semMSS)
	semPost(t, s1, semSend(2, 0, long))
	w.runUntil(time.Second, "partial message", func() bool { return lost && q1.Stats().RxPackets >= 3 })
	if pool.s.Len() != 4 {
		t.Fatalf("SRQ holds %d, want 4 (one done, one in progress)", pool.s.Len())
	}
	q1.Flush()
	w.runUntil(time.Second, "flush", func() bool { return len(w.rec.of(q1)) == 2 })
	semExpect(t, "qp 1", w.rec.of(q1), semWant{100, semOpRecv, semOK}, semWant{101, semOpRecv, semCancel})
	semState(t, "qp 1", q1, transport.QPError)
	if pool.s.Len() != 4 {
		t.Fatalf("after the flush the SRQ holds %d, want 4: queued receives must survive", pool.s.Len())
	}

	var msgs [][]byte
	for i := range 4 {
		msgs = append(msgs, srqMsg(9, i))
		semPost(t, s2, semSend(uint64(i), 0, msgs[i]))
	}
	w.runUntil(time.Second, "qp 2", func() bool { return len(w.rec.of(q2)) == 4 })
	ctxs := srqCheckReceived(t, w, pool, "qp 2", q2, msgs)
	if ctxs[0] != 102 || ctxs[3] != 105 {
		t.Fatalf("qp 2 used receives %v, want 102-105", ctxs)
	}
	semState(t, "qp 2", q2, transport.QPConnected)
	if pool.s.Len() != 0 {
		t.Fatalf("SRQ holds %d", pool.s.Len())
	}
}

// TestSRQRules: posting rules and configuration errors.
func TestSRQRules(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	for _, d := range []int{0, -1, 1<<16 + 1} {
		if _, err := a.eng.NewSRQ(d); !errors.Is(err, transport.ErrInvalidRequest) {
			t.Errorf("NewSRQ(%d): %v", d, err)
		}
	}
	pool := newSRQPool(t, a, 3)
	if pool.s.Cap() != 4 {
		t.Fatalf("Cap %d, want 4", pool.s.Cap())
	}
	if _, err := b.eng.NewQP(transport.QPConfig{Sink: w.rec, SRQ: pool.s}); err == nil {
		t.Fatal("a QP on another engine's SRQ was created")
	}
	q := a.qp(transport.QPConfig{SRQ: pool.s})
	semIs(t, "QP.PostReceive on an SRQ QP", q.PostReceive(&transport.Receive{NSGE: 1, SGL: [4][]byte{make([]byte, 8)}}), transport.ErrSRQReceive)
	semIs(t, "5 SGEs", pool.s.PostReceive(&transport.Receive{NSGE: 5}), transport.ErrInvalidRequest)
	pool.post(4, 8)
	semIs(t, "full", pool.s.PostReceive(&transport.Receive{NSGE: 1, SGL: [4][]byte{make([]byte, 8)}}), transport.ErrQueueFull)

	// Close hands back what is queued and refuses further posts.
	var dropped []uint64
	done := make(chan error, 1)
	go func() {
		done <- pool.s.Close(context.Background(), func(r *transport.Receive) { dropped = append(dropped, r.Context) })
	}()
	for len(done) == 0 { // Close waits for the engine goroutine: this one
		a.eng.Poll(w.clock.Now())
		runtime.Gosched()
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(dropped) != 4 || dropped[0] != 100 || dropped[3] != 103 || pool.s.Len() != 0 {
		t.Fatalf("close dropped %v, %d left", dropped, pool.s.Len())
	}
	semIs(t, "post after close", pool.s.PostReceive(&transport.Receive{}), transport.ErrSRQClosed)
}

// TestSRQCloseRacesPost: a poster keeps posting while Close runs. Every receive a post
// accepted is handed back by Close's drop, none is left in the queue: a post that loses
// the race fails ErrSRQClosed.
func TestSRQCloseRacesPost(t *testing.T) {
	w, a, _ := newSemPair(t, nil)
	buf := make([]byte, 64)
	for iter := range 300 {
		s, err := a.eng.NewSRQ(1 << 16)
		if err != nil {
			t.Fatal(err)
		}
		accepted := make(chan int, 1)
		go func() {
			r := transport.Receive{NSGE: 1}
			r.SGL[0] = buf
			n := 0
			for ; n < 1<<16; n++ {
				r.Context = uint64(n)
				if err := s.PostReceive(&r); err != nil {
					if !errors.Is(err, transport.ErrSRQClosed) {
						t.Errorf("post: %v", err)
					}
					break
				}
			}
			accepted <- n
		}()
		for range iter % 7 { // let the poster get going, by a varying amount
			runtime.Gosched()
		}
		dropped := 0
		done := make(chan error, 1)
		go func() {
			done <- s.Close(context.Background(), func(*transport.Receive) { dropped++ })
		}()
		for len(done) == 0 { // Close waits for the engine goroutine: this one
			a.eng.Poll(w.clock.Now())
			runtime.Gosched()
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		n := <-accepted
		if n != dropped || s.Len() != 0 {
			t.Fatalf("iteration %d: %d posts accepted, Close dropped %d, %d left queued", iter, n, dropped, s.Len())
		}
	}
}

// TestSRQPostAllocs: posting to an SRQ allocates nothing.
func TestSRQPostAllocs(t *testing.T) {
	_, a, _ := newSemPair(t, nil)
	s, err := a.eng.NewSRQ(4096)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	r := transport.Receive{NSGE: 1}
	r.SGL[0] = buf
	allocs := testing.AllocsPerRun(1000, func() {
		r.Context++
		if err := s.PostReceive(&r); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("SRQ.PostReceive allocates %v times per call", allocs)
	}
	if s.Len() != 1001 {
		t.Fatalf("Len %d, want 1001", s.Len())
	}
}
