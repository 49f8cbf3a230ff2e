package ndk

import (
	"context"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/simlink"
)

// idleQPs is how many connected pairs the idle-memory measurement holds (the scale we
// design for: 1024 connected QPs on one adapter pair).
const idleQPs = 1024

// heapInUse is the live heap after a full collection.
func heapInUse() uint64 {
	var ms runtime.MemStats
	for i := 0; i < 2; i++ {
		runtime.GC()
	}
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// idleBytesPerQP connects n QP pairs at default depths between two simlink adapters (one
// CQ per side, shared by its QPs) and returns the heap the connected, idle QPs hold, per
// QP (one side): everything the application keeps for a connection (QP, Connector) and
// what the engine keeps for it, after a collection, divided by 2n.
func idleBytesPerQP(t *testing.T, n int) float64 {
	opts := DefaultOptions()
	opts.Progress = ProgressAdaptive // the engines connect on their own goroutines
	opts.MaxQPs = n
	la, lb := simlink.Pair(simlink.Config{Seed: 1, MaxPayload: 8972})
	a, b := openT(t, la, opts), openT(t, lb, opts)
	pdA, err := a.NewPD()
	if err != nil {
		t.Fatal(err)
	}
	pdB, err := b.NewPD()
	if err != nil {
		t.Fatal(err)
	}
	cqA, err := a.NewCQ(1024, nil)
	if err != nil {
		t.Fatal(err)
	}
	cqB, err := b.NewCQ(1024, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	qpsB := make(chan *QP, 1)
	accepted := make(chan *Connector, 1)
	l, err := b.NewListener(func(c *Connector) {
		qp := <-qpsB
		if err := c.Accept(ctx, qp, 16, 16, nil, nil); err != nil {
			t.Errorf("accept: %v", err)
		}
		accepted <- c
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(netip.AddrPortFrom(netip.Addr{}, 7)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	dest := netip.AddrPortFrom(b.LocalAddr().Addr(), 7)

	// What the application keeps of each connection; held until the second measurement.
	type conn struct {
		qa, qb *QP
		ca, cb *Connector
	}
	conns := make([]conn, n)
	before := heapInUse()
	for i := range conns {
		c := &conns[i]
		if c.qa, err = pdA.NewQP(QPConfig{ReceiveCQ: cqA, InitiatorCQ: cqA}); err != nil {
			t.Fatal(err)
		}
		if c.qb, err = pdB.NewQP(QPConfig{ReceiveCQ: cqB, InitiatorCQ: cqB}); err != nil {
			t.Fatal(err)
		}
		qpsB <- c.qb
		if c.ca, err = a.NewConnector(); err != nil {
			t.Fatal(err)
		}
		if err := c.ca.Connect(ctx, c.qa, dest, 16, 16, nil); err != nil {
			t.Fatalf("connect %d: %v", i, err)
		}
		if err := c.ca.CompleteConnect(ctx, nil); err != nil {
			t.Fatalf("complete connect %d: %v", i, err)
		}
		c.cb = <-accepted
	}
	time.Sleep(50 * time.Millisecond) // the last handshake's acknowledgements settle
	after := heapInUse()
	for i := range conns {
		if conns[i].qa.tq.State() != conns[i].qb.tq.State() {
			t.Fatalf("pair %d not connected on both sides", i)
		}
	}
	runtime.KeepAlive(conns)
	return float64(int64(after)-int64(before)) / float64(2*n)
}

// TestIdleQPMemory: a connected, idle QP at default depths holds at most maxIdleQPBytes
// of heap (docs/TRANSPORT.md, "Memory per QP").
func TestIdleQPMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("connects 1024 QP pairs")
	}
	per := idleBytesPerQP(t, idleQPs)
	t.Logf("%d connected idle QP pairs: %.0f bytes per QP (one side)", idleQPs, per)
	if per > maxIdleQPBytes {
		t.Errorf("%.0f bytes per idle QP, want <= %d", per, maxIdleQPBytes)
	}
}

// maxIdleQPBytes bounds the heap of one idle connected QP at default depths (docs/TRANSPORT.md,
// "Memory per QP"). Measured 9904 bytes (378483 before the rings grew on use).
const maxIdleQPBytes = 16 << 10
