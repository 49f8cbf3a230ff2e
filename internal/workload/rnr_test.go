package workload

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/plumb"
	"github.com/xdpndk/xdpndk/ndk"
	"github.com/xdpndk/xdpndk/transport/simlink"
)

// A receive posted before the peer's Send is sent must take it: here B posts a receive
// (its engine has not run since), then A sends, and B's engine, running next, meets the Send
// before it has moved the posted receive into its ring. The engine refuses the Send with an
// RNR NAK although a receive was posted (the Send still succeeds after the RNR delay). The
// workload, whose target announces receives to the initiator only after posting them,
// meets this as RNR refusals under the race detector's slow scheduling.
func TestReceivePostedBeforeSendArrives(t *testing.T) {
	la, lb := simlink.Pair(simlink.Config{})
	inline := func(l *simlink.Link) *ndk.Adapter {
		opts := ndk.DefaultOptions()
		// The fallback polls only an adapter nobody polled for a second: the test polls
		// both itself, so their engines run only when it says (Close waits up to a
		// second for the fallback's sleep).
		opts.Progress, opts.InlineFallback = ndk.ProgressInline, time.Second
		a, err := ndk.OpenLink(l, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.Close(context.Background()) })
		return a
	}
	a, b := inline(la), inline(lb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mk := func(ad *ndk.Adapter) (*ndk.PD, *ndk.CQ, *ndk.QP) {
		pd, _ := ad.NewPD()
		cq, _ := ad.NewCQ(64, nil)
		qp, err := pd.NewQP(ndk.QPConfig{ReceiveCQ: cq, InitiatorCQ: cq})
		if err != nil {
			t.Fatal(err)
		}
		return pd, cq, qp
	}
	pda, cqa, qa := mk(a)
	pdb, cqb, qb := mk(b)
	// Until connected, B's engine runs in the background.
	connected := make(chan struct{})
	polling := make(chan struct{})
	go func() {
		defer close(polling)
		for {
			select {
			case <-connected:
				return
			default:
				b.Poll()
				time.Sleep(10 * time.Microsecond)
			}
		}
	}()
	accepted := make(chan error, 1)
	l, err := b.NewListener(func(c *ndk.Connector) {
		go func() { accepted <- c.Accept(ctx, qb, 4, 4, nil, nil) }()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(netip.AddrPortFrom(netip.Addr{}, 1)); err != nil {
		t.Fatal(err)
	}
	c, _ := a.NewConnector()
	if err := c.Connect(ctx, qa, netip.AddrPortFrom(b.LocalAddr().Addr(), 1), 4, 4, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.CompleteConnect(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	close(connected)
	<-polling
	for b.Poll() { // B idle: nothing in flight
	}
	inbox := make([]byte, 64)
	imr, _ := pdb.RegisterMR(inbox, ndk.MRAllowLocalWrite)
	if err := qb.Receive("r", []ndk.SGE{imr.SGE(inbox)}); err != nil {
		t.Fatal(err)
	}
	msg := []byte("posted before it was sent")
	mmr, _ := pda.RegisterMR(msg, 0)
	if err := qa.Send("s", []ndk.SGE{mmr.SGE(msg)}, 0); err != nil {
		t.Fatal(err)
	}
	for a.Poll() { // A transmits the Send
	}
	var r [1]ndk.ResultEx
	for cqb.GetResultsEx(r[:]) == 0 { // B's engine runs: the Send meets the posted receive
		a.Poll()
		if ctx.Err() != nil {
			t.Fatal("no receive completion")
		}
	}
	for cqa.GetResultsEx(r[:]) == 0 {
		b.Poll()
		if ctx.Err() != nil {
			t.Fatal("no send completion")
		}
	}
	if st := plumb.QP(qa).Stats(); st.RNRNaks != 0 || r[0].Status != ndk.StatusSuccess {
		t.Fatalf("Send %v after %d RNR NAKs; the receive was posted before the Send was sent", r[0].Status, st.RNRNaks)
	}
}
