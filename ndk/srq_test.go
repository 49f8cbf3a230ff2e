package ndk

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport"
)

// Conformance of shared receive queues (NDKPI NdkCreateSrq and NdkCreateQpWithSrq,
// NdkSrqReceive, NdkModifySrq and the notification callback), over every link kind.

// srqBed is adapter B with an SRQ and two QPs on it, each connected to its own QP on
// adapter A (two connections).
type srqBed struct {
	a, b     *Adapter
	pdA, pdB *PD
	cqA, cqB *CQ
	srq      *SRQ
	qa, qb   [2]*QP
	notes    chan Status // the SRQ's notifications
}

// newSRQBed opens two adapters on k and connects them; the SRQ has depth and threshold.
func newSRQBed(t *testing.T, k linkKind, depth, threshold int) *srqBed {
	t.Helper()
	s := &srqBed{notes: make(chan Status, 16)}
	s.a, s.b = k.open(t, DefaultOptions())
	var err error
	if s.pdA, err = s.a.NewPD(); err != nil {
		t.Fatal(err)
	}
	if s.pdB, err = s.b.NewPD(); err != nil {
		t.Fatal(err)
	}
	if s.cqA, err = s.a.NewCQ(1024, nil); err != nil {
		t.Fatal(err)
	}
	if s.cqB, err = s.b.NewCQ(1024, nil); err != nil {
		t.Fatal(err)
	}
	if s.srq, err = s.pdB.NewSRQ(depth, 2, threshold, func(st Status) { s.notes <- st }); err != nil {
		t.Fatal(err)
	}
	for i := range s.qa {
		if s.qa[i], err = s.pdA.NewQP(QPConfig{ReceiveCQ: s.cqA, InitiatorCQ: s.cqA, Context: i}); err != nil {
			t.Fatal(err)
		}
		// ReceiveQueueDepth and MaxReceiveSGE are ignored with an SRQ, even out of range.
		if s.qb[i], err = s.pdB.NewQP(QPConfig{ReceiveCQ: s.cqB, InitiatorCQ: s.cqB, Context: i, SRQ: s.srq,
			ReceiveQueueDepth: 1 << 30, MaxReceiveSGE: 99}); err != nil {
			t.Fatal(err)
		}
		srqConnect(t, s.a, s.qa[i], s.b, s.qb[i], uint16(21+i))
	}
	return s
}

// srqConnect connects qa (on a) to qb (on b) through a listener on port.
func srqConnect(t *testing.T, a *Adapter, qa *QP, b *Adapter, qb *QP, port uint16) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	accepted := make(chan error, 1)
	l, err := b.NewListener(func(c *Connector) {
		go func() { accepted <- c.Accept(ctx, qb, 16, 16, nil, nil) }()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(netip.AddrPortFrom(netip.Addr{}, port)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	conn, err := a.NewConnector()
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Connect(ctx, qa, netip.AddrPortFrom(b.LocalAddr().Addr(), port), 16, 16, nil); err != nil {
		t.Fatalf("connect: %v", err)
	}
	if err := conn.CompleteConnect(ctx, nil); err != nil {
		t.Fatalf("complete connect: %v", err)
	}
	if err := <-accepted; err != nil {
		t.Fatalf("accept: %v", err)
	}
}

// postSRQ posts n receives of size bytes (two SGEs each) from buf, request contexts
// first, first+1, ...
func (s *srqBed) postSRQ(t *testing.T, buf []byte, mr *MR, first, n, size int) {
	t.Helper()
	for i := first; i < first+n; i++ {
		b := buf[i*size : (i+1)*size]
		if err := s.srq.Receive(i, []SGE{mr.SGE(b[:size/2]), mr.SGE(b[size/2:])}); err != nil {
			t.Fatalf("SRQ receive %d: %v", i, err)
		}
	}
}

// send sends msg on A's QP i and waits for its success.
func (s *srqBed) send(t *testing.T, i int, buf []byte, mr *MR) {
	t.Helper()
	if err := s.qa[i].Send("s", []SGE{mr.SGE(buf)}, 0); err != nil {
		t.Fatal(err)
	}
	want(t, results(t, s.cqA, 1)[0], StatusSuccess, OpTypeSend, "s")
}

// eventsDrained returns once every callback queued on b's event goroutine so far has run
// (they run in order), so a notification that was due has been delivered.
func (s *srqBed) eventsDrained(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	s.b.event(func() { close(done) })
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("event goroutine stuck")
	}
}

// takeNotes returns how many notifications arrived (all StatusSuccess) since the last call.
func (s *srqBed) takeNotes(t *testing.T) int {
	t.Helper()
	s.eventsDrained(t)
	n := 0
	for {
		select {
		case st := <-s.notes:
			if st != StatusSuccess {
				t.Fatalf("notification %v", st)
			}
			n++
		default:
			return n
		}
	}
}

// Receives posted to an SRQ are consumed by two QPs (two connections): every message
// lands byte-exact in exactly one receive, each QP's results carry its own QP context and
// the receive's request context, and each QP takes receives in its message order.
func TestSRQSharedReceives(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		s := newSRQBed(t, k, 64, 0)
		const nrecv, size = 40, 4096
		rbuf := (&side{a: s.b, pd: s.pdB}).buf(t, nrecv*size)
		rmr, err := s.pdB.RegisterMR(rbuf, MRAllowLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		s.postSRQ(t, rbuf, rmr, 0, nrecv, size)
		if s.srq.Queued() != nrecv {
			t.Fatalf("queued %d", s.srq.Queued())
		}
		sbuf := (&side{a: s.a, pd: s.pdA}).buf(t, 64*size)
		for i := range sbuf {
			sbuf[i] = byte(i*7 + i>>9)
		}
		smr, err := s.pdA.RegisterMR(sbuf, 0)
		if err != nil {
			t.Fatal(err)
		}
		counts := [2]int{15, 12}
		var msgs [2][][]byte
		off := 0
		for i := range max(counts[0], counts[1]) {
			for q := range 2 {
				if i >= counts[q] {
					continue
				}
				m := sbuf[off : off+1+(i*1013+q*377)%size]
				off += size
				msgs[q] = append(msgs[q], m)
				if err := s.qa[q].Send(i, []SGE{smr.SGE(m)}, 0); err != nil {
					t.Fatal(err)
				}
			}
		}
		total := counts[0] + counts[1]
		for _, r := range results(t, s.cqA, total) {
			if r.Status != StatusSuccess || r.Type != OpTypeSend {
				t.Fatalf("send result %+v", r)
			}
		}
		got := results(t, s.cqB, total)
		used := map[int]bool{}
		var byQP [2][]ResultEx
		for _, r := range got {
			q, ok := r.QPContext.(int)
			if !ok || r.Status != StatusSuccess || r.Type != OpTypeReceive {
				t.Fatalf("receive result %+v", r)
			}
			byQP[q] = append(byQP[q], r)
		}
		for q := range 2 {
			if len(byQP[q]) != counts[q] {
				t.Fatalf("QP %d: %d receives, want %d", q, len(byQP[q]), counts[q])
			}
			last := -1
			for i, r := range byQP[q] {
				c := r.RequestContext.(int)
				if c <= last || used[c] {
					t.Fatalf("QP %d receive %d: context %d after %d (used %v)", q, i, c, last, used[c])
				}
				last, used[c] = c, true
				m := msgs[q][i]
				if r.BytesTransferred != uint32(len(m)) || !bytes.Equal(rbuf[c*size:c*size+len(m)], m) {
					t.Fatalf("QP %d message %d in receive %d: %d bytes, equal %v", q, i, c, r.BytesTransferred,
						bytes.Equal(rbuf[c*size:c*size+len(m)], m))
				}
			}
		}
		for c := range total {
			if !used[c] {
				t.Fatalf("receive %d skipped", c)
			}
		}
		if s.srq.Queued() != nrecv-total {
			t.Fatalf("queued %d, want %d", s.srq.Queued(), nrecv-total)
		}
	})
}

// The threshold notification fires once, with STATUS_SUCCESS, when the queued receives
// fall below it; it stays disarmed until a Modify with a threshold > 0, which fires at
// once if the count already is below; a threshold of 0 keeps the arm state.
func TestSRQNotifyThreshold(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		s := newSRQBed(t, k, 32, 4)
		rbuf := make([]byte, 32*256)
		rmr, err := s.pdB.RegisterMR(rbuf, MRAllowLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		sbuf := []byte("ping")
		smr, err := s.pdA.RegisterMR(sbuf, 0)
		if err != nil {
			t.Fatal(err)
		}
		recvd := 0
		sendN := func(n int) {
			t.Helper()
			for i := range n {
				s.send(t, i%2, sbuf, smr)
			}
			recvd += n
			for _, r := range results(t, s.cqB, n) {
				if r.Status != StatusSuccess {
					t.Fatalf("receive %+v", r)
				}
			}
		}
		s.postSRQ(t, rbuf, rmr, 0, 6, 256)
		if n := s.takeNotes(t); n != 0 {
			t.Fatalf("%d notifications after posting", n)
		}
		sendN(2) // 4 queued: not below 4
		if n := s.takeNotes(t); n != 0 {
			t.Fatalf("%d notifications with 4 queued, threshold 4", n)
		}
		sendN(1) // 3 queued
		if n := s.takeNotes(t); n != 1 {
			t.Fatalf("%d notifications after falling below the threshold, want 1", n)
		}
		sendN(2) // 1 queued: disarmed
		if n := s.takeNotes(t); n != 0 {
			t.Fatalf("%d notifications after the first: must disarm", n)
		}
		if err := s.srq.Modify(0, 0); err != nil { // keeps the (disarmed) state
			t.Fatal(err)
		}
		sendN(1) // 0 queued
		if n := s.takeNotes(t); n != 0 {
			t.Fatalf("Modify(0, 0) re-armed: %d notifications", n)
		}
		if err := s.srq.Modify(0, 2); err != nil { // already below: fires at once
			t.Fatal(err)
		}
		select {
		case st := <-s.notes:
			if st != StatusSuccess {
				t.Fatalf("notification %v", st)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Modify below the threshold did not notify")
		}
		s.postSRQ(t, rbuf, rmr, 6, 4, 256) // 4 queued
		if err := s.srq.Modify(0, 3); err != nil {
			t.Fatal(err)
		}
		sendN(1) // 3 queued: not below 3
		if n := s.takeNotes(t); n != 0 {
			t.Fatalf("%d notifications with 3 queued, threshold 3", n)
		}
		sendN(1) // 2 queued
		if n := s.takeNotes(t); n != 1 {
			t.Fatalf("%d notifications, want 1", n)
		}
		if s.srq.Queued() != 10-recvd {
			t.Fatalf("queued %d, want %d", s.srq.Queued(), 10-recvd)
		}
	})
}

// NdkCreateSrq and NdkModifySrq parameter rules, and the receive-queue rules of a QP on an
// SRQ.
func TestSRQModifyRules(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		s := newSRQBed(t, k, 8, 0)
		if d := s.b.QueryAdapterInfo().MaxSrqDepth; d != maxSRQDepth {
			t.Fatalf("MaxSrqDepth %d", d)
		}
		for _, c := range []struct{ depth, sge, thr int }{
			{0, 1, 0}, {-1, 1, 0}, {maxSRQDepth + 1, 1, 0}, {8, 5, 0}, {8, -1, 0}, {8, 1, 9}, {8, 1, -1},
		} {
			if _, err := s.pdB.NewSRQ(c.depth, c.sge, c.thr, nil); !errors.Is(err, StatusInvalidParameter) {
				t.Errorf("NewSRQ(%d, %d, %d): %v, want STATUS_INVALID_PARAMETER", c.depth, c.sge, c.thr, err)
			}
		}
		buf := make([]byte, 16*64)
		mr, err := s.pdB.RegisterMR(buf, MRAllowLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.qb[0].Receive(1, []SGE{mr.SGE(buf[:64])}); !errors.Is(err, StatusInvalidParameter) {
			t.Fatalf("QP.Receive on a QP with an SRQ: %v, want STATUS_INVALID_PARAMETER", err)
		}
		three := []SGE{mr.SGE(buf[:8]), mr.SGE(buf[8:16]), mr.SGE(buf[16:24])}
		if err := s.srq.Receive(1, three); !errors.Is(err, StatusInvalidParameter) {
			t.Fatalf("3 SGEs on an SRQ of 2: %v", err)
		}
		ro, err := s.pdB.RegisterMR(make([]byte, 64), 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.srq.Receive(1, []SGE{{Buf: buf[:8], Token: ro.LocalToken()}}); !errors.Is(err, StatusAccessViolation) {
			t.Fatalf("SGE outside its region: %v", err)
		}
		s.postSRQ(t, buf, mr, 0, 5, 64)
		for _, c := range []struct {
			depth, thr int
			st         Status
		}{
			{4, 0, StatusInvalidParameter},  // below the 5 outstanding
			{-1, 0, StatusInvalidParameter}, // negative
			{0, -1, StatusInvalidParameter}, // negative
			{maxSRQDepth + 1, 0, StatusInvalidParameter},
			{0, 9, StatusInvalidParameter},       // threshold over the depth 8
			{16, 0, StatusInsufficientResources}, // over the capacity (8)
		} {
			if err := s.srq.Modify(c.depth, c.thr); !errors.Is(err, c.st) {
				t.Errorf("Modify(%d, %d): %v, want %v", c.depth, c.thr, err, c.st)
			}
		}
		if s.srq.Depth() != 8 {
			t.Fatalf("a refused Modify changed the depth to %d", s.srq.Depth())
		}
		if err := s.srq.Modify(0, 0); err != nil || s.srq.Depth() != 8 {
			t.Fatalf("Modify(0, 0): %v, depth %d", err, s.srq.Depth())
		}
		if err := s.srq.Modify(6, 0); err != nil || s.srq.Depth() != 6 {
			t.Fatalf("Modify(6, 0): %v, depth %d", err, s.srq.Depth())
		}
		s.postSRQ(t, buf, mr, 5, 1, 64)
		if err := s.srq.Receive(99, []SGE{mr.SGE(buf[6*64 : 7*64])}); !errors.Is(err, StatusInsufficientResources) {
			t.Fatalf("receive beyond the depth 6: %v", err)
		}
		if err := s.srq.Modify(5, 0); !errors.Is(err, StatusInvalidParameter) {
			t.Fatalf("Modify below 6 outstanding: %v", err)
		}
		if err := s.srq.Modify(8, 0); err != nil {
			t.Fatal(err)
		}
		s.postSRQ(t, buf, mr, 6, 2, 64)
		if s.srq.Queued() != 8 {
			t.Fatalf("queued %d", s.srq.Queued())
		}
		// Receives are consumed and the depth's room comes back.
		hi := []byte("hi")
		smr, err := s.pdA.RegisterMR(hi, 0)
		if err != nil {
			t.Fatal(err)
		}
		s.send(t, 0, hi, smr)
		want(t, results(t, s.cqB, 1)[0], StatusSuccess, OpTypeReceive, 0)
		s.postSRQ(t, buf, mr, 8, 1, 64)
	})
}

// NdkFlush of one QP on an SRQ cancels only what that QP took; the receives still in the
// SRQ are not cancelled and the other QP keeps consuming them.
func TestSRQFlushKeepsReceives(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		s := newSRQBed(t, k, 16, 0)
		rbuf := make([]byte, 8*128)
		rmr, err := s.pdB.RegisterMR(rbuf, MRAllowLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		s.postSRQ(t, rbuf, rmr, 0, 5, 128)
		msg := []byte("before the flush")
		smr, err := s.pdA.RegisterMR(msg, 0)
		if err != nil {
			t.Fatal(err)
		}
		s.send(t, 0, msg, smr)
		r := results(t, s.cqB, 1)[0]
		want(t, r, StatusSuccess, OpTypeReceive, 0)
		if r.QPContext != 0 || !bytes.Equal(rbuf[:len(msg)], msg) {
			t.Fatalf("result %+v", r)
		}
		s.qb[0].Flush()
		deadline := time.Now().Add(10 * time.Second)
		for s.qb[0].tq.State() != transport.QPError {
			if time.Now().After(deadline) {
				t.Fatal("flush did not take effect")
			}
			s.b.Poll()
			time.Sleep(50 * time.Microsecond)
		}
		noResults(t, s.cqB, 20*time.Millisecond) // nothing was cancelled: QP 0 held no receive
		if s.srq.Queued() != 4 {
			t.Fatalf("after the flush the SRQ holds %d, want 4", s.srq.Queued())
		}
		for i := range 4 {
			m := []byte{byte(i), 'x', 'y'}
			mr, err := s.pdA.RegisterMR(m, 0)
			if err != nil {
				t.Fatal(err)
			}
			s.send(t, 1, m, mr)
			r := results(t, s.cqB, 1)[0]
			want(t, r, StatusSuccess, OpTypeReceive, i+1)
			if r.QPContext != 1 || !bytes.Equal(rbuf[(i+1)*128:(i+1)*128+3], m) {
				t.Fatalf("result %+v", r)
			}
		}
		if s.srq.Queued() != 0 {
			t.Fatalf("queued %d", s.srq.Queued())
		}
		// Closing the SRQ drops what is queued (no result) and refuses further posts.
		s.postSRQ(t, rbuf, rmr, 5, 2, 128)
		if err := s.srq.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if s.srq.Queued() != 0 {
			t.Fatalf("queued %d after Close", s.srq.Queued())
		}
		if err := s.srq.Receive(9, []SGE{rmr.SGE(rbuf[:8])}); err == nil {
			t.Fatal("Receive after Close succeeded")
		}
	})
}

// SrqReceive allocates nothing.
func TestSRQReceiveAllocs(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		a, _ := k.open(t, DefaultOptions())
		pd, err := a.NewPD()
		if err != nil {
			t.Fatal(err)
		}
		srq, err := pd.NewSRQ(2048, 0, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4096)
		mr, err := pd.RegisterMR(buf, MRAllowLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		sgl := []SGE{mr.SGE(buf[:2048]), mr.SGE(buf[2048:])}
		var ctx any = "request"
		allocs := testing.AllocsPerRun(1000, func() {
			if err := srq.Receive(ctx, sgl); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Fatalf("SRQ.Receive allocates %v times per call", allocs)
		}
	})
}
