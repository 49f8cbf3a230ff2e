package workload

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/plumb"
	"github.com/xdpndk/xdpndk/ndk"
	"github.com/xdpndk/xdpndk/transport/simlink"
)

// A connection the passive side gave up on while the active side completed it: the
// ready-to-use and every retry of the reply are lost until the Accept's deadline (a
// partition here; on a loaded host, an active engine that does not run until then). The
// passive Accept fails with STATUS_IO_TIMEOUT; the active side believes it is connected, and its
// first Send fails with STATUS_REMOTE_RESOURCES (the peer's QP is in error). The
// connection has aborted, so the active side's disconnect callback must run (NDKPI
// NdkCompleteConnect: called when the peer disconnects or the connection aborts).
func TestAbortedConnectionCallback(t *testing.T) {
	la, lb := simlink.Pair(simlink.Config{})
	a, b := openOn(t, la), openOn(t, lb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mk := func(ad *ndk.Adapter) (*ndk.PD, *ndk.CQ, *ndk.QP) {
		pd, err := ad.NewPD()
		if err != nil {
			t.Fatal(err)
		}
		cq, err := ad.NewCQ(64, nil)
		if err != nil {
			t.Fatal(err)
		}
		qp, err := pd.NewQP(ndk.QPConfig{ReceiveCQ: cq, InitiatorCQ: cq})
		if err != nil {
			t.Fatal(err)
		}
		return pd, cq, qp
	}
	pda, cqa, qa := mk(a)
	_, _, qb := mk(b)
	var discA atomic.Int32
	accepted := make(chan error, 1)
	l, err := b.NewListener(func(c *ndk.Connector) {
		go func() {
			actx, acancel := context.WithTimeout(ctx, time.Second) // the Accept's deadline
			defer acancel()
			accepted <- c.Accept(actx, qb, 4, 4, nil, nil)
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(netip.AddrPortFrom(netip.Addr{}, 1)); err != nil {
		t.Fatal(err)
	}
	c, err := a.NewConnector()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Connect(ctx, qa, netip.AddrPortFrom(b.LocalAddr().Addr(), 1), 4, 4, nil); err != nil {
		t.Fatal(err)
	}
	net := la.Network()
	net.Partition(la.LocalAddr(), lb.LocalAddr())
	if err := c.CompleteConnect(ctx, func() { discA.Add(1) }); err != nil {
		t.Fatalf("complete connect: %v", err)
	}
	if err := <-accepted; ndk.StatusOf(err) != ndk.StatusIOTimeout {
		t.Fatalf("passive accept: %v, want STATUS_IO_TIMEOUT", err)
	}
	net.HealAll()

	buf := make([]byte, 64)
	mr, err := pda.RegisterMR(buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := qa.Send("s", []ndk.SGE{mr.SGE(buf)}, 0); err != nil {
		t.Fatal(err)
	}
	var r [1]ndk.ResultEx
	for cqa.GetResultsEx(r[:]) == 0 {
		if ctx.Err() != nil {
			t.Fatal("the Send on the aborted connection never completed")
		}
		time.Sleep(time.Millisecond)
	}
	if r[0].Status != ndk.StatusRemoteResources && r[0].Status != ndk.StatusIOTimeout && r[0].Status != ndk.StatusConnectionAborted {
		t.Fatalf("Send on the aborted connection: %v", r[0].Status)
	}
	deadline := time.Now().Add(2 * time.Second)
	for discA.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := discA.Load(); n != 1 {
		t.Fatalf("Send completed %v, QP %v; the active side's disconnect callback ran %d times, want 1",
			r[0].Status, plumb.QP(qa).State(), n)
	}
}
