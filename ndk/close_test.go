package ndk

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/simlink"
)

// Cleanup always finishes: closing a QP in every state it can be in, with every kind of
// request it can hold outstanding there, completes or releases what it holds, so that the
// memory regions of those requests deregister at once afterwards; and closing the adapter
// with objects still open does the same for all of them.

// closeBed is two adapters on a simulated network whose path between them a test can cut
// (so that requests stay outstanding).
type closeBed struct {
	net  *simlink.Network
	a, b *Adapter
}

func newCloseBed(t *testing.T) *closeBed {
	t.Helper()
	n := simlink.NewNetwork(simlink.Config{Seed: 1, MaxPayload: 8972})
	la, err := n.AddHost(netip.MustParseAddrPort("198.18.0.1:4791"))
	if err != nil {
		t.Fatal(err)
	}
	lb, err := n.AddHost(netip.MustParseAddrPort("198.18.0.2:4791"))
	if err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	return &closeBed{net: n, a: openT(t, la, withUMEM(t, opts)), b: openT(t, lb, withUMEM(t, opts))}
}

// cut partitions the two hosts: nothing arrives either way from now on.
func (c *closeBed) cut() { c.net.Partition(c.a.LocalAddr(), c.b.LocalAddr()) }

// kind names the requests a cell of the table posts.
type reqKind int

const (
	kReceive reqKind = iota
	kSend
	kWrite
	kRead
	kBind
	kSRQReceive
	nKinds
)

var kindNames = [...]string{"receive", "send", "write", "read", "bind", "srq-receive"}

// closeSide is one side of a cell: its adapter, a PD, a CQ, an SRQ, a QP on it, the region
// its requests use, and what it posted.
type closeSide struct {
	side
	srq    *SRQ
	srqQP  *QP // a QP on srq, in the same state as qp
	mr     *MR
	mem    []byte
	mws    []*MW
	posted int  // requests and receives posted to qp (not to the SRQ)
	cut    bool // the path to the peer was cut before anything was posted
}

func newCloseSide(t *testing.T, a *Adapter) *closeSide {
	t.Helper()
	s := &closeSide{side: *idleSide(t, a)}
	var err error
	if s.srq, err = s.pd.NewSRQ(64, 0, 0, nil); err != nil {
		t.Fatal(err)
	}
	if s.srqQP, err = s.pd.NewQP(QPConfig{ReceiveCQ: s.rcq, InitiatorCQ: s.icq, SRQ: s.srq}); err != nil {
		t.Fatal(err)
	}
	s.mem, s.mr = s.region(t, 1<<20, MRAllowRemoteWrite|MRAllowRemoteRead)
	return s
}

// post posts one request of each kind the QP's state takes (receives in every state; the
// initiator verbs once connected or in error), to peer's memory, and counts them.
func (s *closeSide) post(t *testing.T, peer RemoteBuffer) {
	t.Helper()
	for k := reqKind(0); k < nKinds; k++ {
		var err error
		buf := s.mem[int(k)*8192 : int(k)*8192+8192]
		sgl := []SGE{s.mr.SGE(buf)}
		switch k {
		case kReceive:
			err = s.qp.Receive(k, sgl)
		case kSRQReceive:
			if err := s.srq.Receive(k, sgl); err != nil {
				t.Fatalf("SRQ receive: %v", err)
			}
			continue // the SRQ's, not the QP's
		case kSend:
			err = s.qp.Send(k, sgl, 0)
		case kWrite:
			err = s.qp.Write(k, sgl, peer.Addr, peer.Token, 0)
		case kRead:
			err = s.qp.Read(k, sgl, peer.Addr, peer.Token, 0)
		case kBind:
			var mw *MW
			if mw, err = s.pd.NewMW(); err == nil {
				s.mws = append(s.mws, mw)
				err = s.qp.Bind(k, s.mr, mw, s.mr.VA(), 4096, OpAllowRemoteRead)
			}
		}
		switch {
		case err == nil:
			s.posted++
		case k != kReceive && errors.Is(err, StatusConnectionInvalid):
			// Not connected: the verb is refused inline and holds nothing.
		default:
			t.Fatalf("post %s: %v", kindNames[k], err)
		}
	}
}

// closeAndRelease closes the side's QPs and SRQ, checks that every request posted to the
// QP has its one result, and that the region deregisters at once.
func (s *closeSide) closeAndRelease(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	for _, q := range []*QP{s.qp, s.srqQP} {
		if err := q.Close(ctx); err != nil {
			t.Fatalf("QP close: %v", err)
		}
	}
	if err := s.srq.Close(ctx); err != nil {
		t.Fatalf("SRQ close: %v", err)
	}
	got := takeAll(s.rcq)
	if len(got) != s.posted {
		t.Errorf("%d results for %d requests posted: %+v", len(got), s.posted, got)
	}
	for _, r := range got {
		if s.cut && r.Status == StatusSuccess && r.Type != OpTypeBind {
			t.Errorf("a request completed successfully across a cut path: %+v", r)
		}
	}
	for _, mw := range s.mws {
		if err := mw.Close(bg); err != nil {
			t.Fatalf("MW close: %v", err)
		}
	}
	dctx, dcancel := context.WithTimeout(bg, time.Second)
	defer dcancel()
	start := time.Now()
	if err := s.mr.Deregister(dctx); err != nil {
		t.Fatalf("Deregister after Close: %v (after %v)", err, time.Since(start))
	}
}

// takeAll takes every result the CQ holds now.
func takeAll(cq *CQ) []ResultEx {
	var out []ResultEx
	var buf [64]ResultEx
	for {
		n := cq.GetResultsEx(buf[:])
		if n == 0 {
			return out
		}
		out = append(out, buf[:n]...)
	}
}

// The table: every state a QP can be in, with what it can hold there, then Close, then
// Deregister, which must return at once.
func TestCloseReleasesInEveryState(t *testing.T) {
	states := []struct {
		name string
		// reach brings a's QPs (qp and srqQP) into the state and posts what the state
		// takes; it returns a function to run after the close, if any.
		reach func(t *testing.T, bed *closeBed, a, b *closeSide) func()
	}{
		{"idle", func(t *testing.T, bed *closeBed, a, b *closeSide) func() {
			a.post(t, b.mr.Remote())
			return nil
		}},
		{"connecting", func(t *testing.T, bed *closeBed, a, b *closeSide) func() {
			a.post(t, b.mr.Remote())
			b.listen(t, func(*Connector) {}) // never answered: Connect waits for the reply
			bed.cut()                        // nor is anything delivered
			done := make(chan error, 1)
			ctx, cancel := context.WithCancel(bg)
			c, err := a.a.NewConnector()
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				done <- c.Connect(ctx, a.qp, netip.AddrPortFrom(b.a.LocalAddr().Addr(), servicePort), 4, 4, nil)
			}()
			waitState(t, a.qp, "connecting")
			return func() {
				cancel()
				<-done
			}
		}},
		{"refused", func(t *testing.T, bed *closeBed, a, b *closeSide) func() {
			a.post(t, b.mr.Remote())
			if _, err := a.dial(t, &b.side, servicePort, 4, 4, nil); !errors.Is(err, StatusConnectionRefused) {
				t.Fatalf("connect to no listener: %v", err)
			}
			return nil
		}},
		{"connected", func(t *testing.T, bed *closeBed, a, b *closeSide) func() {
			connectCloseSides(t, a, b)
			bed.cut()
			a.cut = true
			a.post(t, b.mr.Remote())
			return nil
		}},
		{"peer-disconnected", func(t *testing.T, bed *closeBed, a, b *closeSide) func() {
			connectCloseSides(t, a, b)
			a.post(t, b.mr.Remote()) // b has no receive: the Send waits for one; the rest complete
			ctx, cancel := context.WithTimeout(bg, 5*time.Second)
			defer cancel()
			if err := b.conn.Disconnect(ctx); err != nil {
				t.Fatalf("peer disconnect: %v", err)
			}
			waitState(t, a.qp, "disconnected")
			return nil
		}},
		{"error", func(t *testing.T, bed *closeBed, a, b *closeSide) func() {
			connectCloseSides(t, a, b)
			bed.cut()
			a.cut = true
			a.post(t, b.mr.Remote())
			a.qp.Flush()
			a.post(t, b.mr.Remote()) // completes cancelled in its turn
			return nil
		}},
	}
	for _, st := range states {
		t.Run(st.name, func(t *testing.T) {
			bed := newCloseBed(t)
			a, b := newCloseSide(t, bed.a), newCloseSide(t, bed.b)
			after := st.reach(t, bed, a, b)
			a.closeAndRelease(t)
			if after != nil {
				after()
			}
		})
	}
}

// connectCloseSides connects a's QP to b's (and a's SRQ QP to b's), as newPair does;
// onDisconnectB, if not nil, is b's disconnect callback for both.
func connectCloseSides(t *testing.T, a, b *closeSide, onDisconnectB ...func()) {
	t.Helper()
	var bqps = []*QP{b.qp, b.srqQP}
	i := 0
	accepted := make(chan error, 2)
	b.listen(t, func(c *Connector) {
		q := bqps[i]
		if i == 0 {
			b.conn = c
		}
		i++
		go func() {
			ctx, cancel := context.WithTimeout(bg, 10*time.Second)
			defer cancel()
			var disc func()
			if len(onDisconnectB) > 0 {
				disc = onDisconnectB[0]
			}
			accepted <- c.Accept(ctx, q, 4, 4, nil, disc)
		}()
	})
	for j, q := range []*QP{a.qp, a.srqQP} {
		c, err := a.a.NewConnector()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(bg, 10*time.Second)
		if err := c.Connect(ctx, q, netip.AddrPortFrom(b.a.LocalAddr().Addr(), servicePort), 4, 4, nil); err != nil {
			t.Fatalf("connect: %v", err)
		}
		if err := c.CompleteConnect(ctx, nil); err != nil {
			t.Fatalf("complete: %v", err)
		}
		cancel()
		if j == 0 {
			a.conn = c
		}
		if err := <-accepted; err != nil {
			t.Fatalf("accept: %v", err)
		}
	}
}

// waitState waits until q's engine state is named state.
func waitState(t *testing.T, q *QP, state string) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); q.tq.State().String() != state; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("QP is %v, not %s", q.tq.State(), state)
		}
	}
}

// Closing the adapter with everything still open (connected QPs with requests outstanding,
// an SRQ with receives, windows bound, regions registered in Go memory and in the UMEM)
// releases all of it: the peer hears of the disconnect at once, every outstanding request
// of the closed side has its result, and its regions deregister at once afterwards.
func TestAdapterCloseReleasesEverything(t *testing.T) {
	bed := newCloseBed(t)
	a, b := newCloseSide(t, bed.a), newCloseSide(t, bed.b)
	discB := make(chan struct{}, 2)
	connectCloseSides(t, a, b, func() { discB <- struct{}{} })
	goMem := make([]byte, 64<<10)
	goMR, err := a.pd.RegisterMR(goMem, MRAllowLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.qp.Receive("go-receive", []SGE{goMR.SGE(goMem[:4096])}); err != nil {
		t.Fatal(err)
	}
	a.post(t, b.mr.Remote()) // b has no receive: the Send waits; the rest complete
	start := time.Now()
	if err := a.a.Close(bg); err != nil {
		t.Fatal(err)
	}
	closed := time.Since(start)
	select {
	case <-discB:
	case <-time.After(2 * time.Second):
		t.Fatal("the peer did not hear of the disconnect")
	}
	got := takeAll(a.rcq)
	if len(got) != a.posted+1 {
		t.Errorf("%d results for %d requests posted: %+v", len(got), a.posted+1, got)
	}
	for _, mw := range a.mws {
		if err := mw.Close(bg); err != nil {
			t.Fatalf("MW close after adapter close: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	defer cancel()
	for _, mr := range []*MR{a.mr, goMR} {
		if err := mr.Deregister(ctx); err != nil {
			t.Fatalf("Deregister after adapter close: %v", err)
		}
	}
	t.Logf("adapter closed in %v", closed)
}
