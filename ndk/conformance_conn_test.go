package ndk

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport"
)

// Conformance of connection setup and teardown (NDKPI's connector and listener pages, NDKPI
// Listeners, Connectors, and Endpoints, NetworkDirect Disconnect Scheme): Connect, Accept,
// Reject, GetConnectionData, the addresses, listener pause, Disconnect. Each test runs over
// every link kind.

const servicePort = 9

// idleSides opens two adapters on k with a PD, a CQ and an unconnected QP each.
func idleSides(t *testing.T, k linkKind, opts Options) (a, b *side) {
	t.Helper()
	x, y := k.open(t, opts)
	return idleSide(t, x), idleSide(t, y)
}

// idleSide gives ad a PD, a CQ and an unconnected QP.
func idleSide(t *testing.T, ad *Adapter) *side {
	t.Helper()
	s := &side{a: ad}
	var err error
	if s.pd, err = ad.NewPD(); err != nil {
		t.Fatal(err)
	}
	if s.rcq, err = ad.NewCQ(256, nil); err != nil {
		t.Fatal(err)
	}
	s.icq = s.rcq
	if s.qp, err = s.pd.NewQP(QPConfig{ReceiveCQ: s.rcq, InitiatorCQ: s.icq}); err != nil {
		t.Fatal(err)
	}
	return s
}

// listen starts a listener on s's adapter at servicePort that hands every request to
// onConnect (on the adapter's event goroutine).
func (s *side) listen(t *testing.T, onConnect func(*Connector)) *Listener {
	t.Helper()
	l, err := s.a.NewListener(onConnect)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(netip.AddrPortFrom(netip.Addr{}, servicePort)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(bg) })
	return l
}

// dial connects s's QP through a new connector to port of peer's adapter and returns the
// connector and Connect's error.
func (s *side) dial(t *testing.T, peer *side, port uint16, ird, ord int, private []byte) (*Connector, error) {
	t.Helper()
	c, err := s.a.NewConnector()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	return c, c.Connect(ctx, s.qp, netip.AddrPortFrom(peer.a.LocalAddr().Addr(), port), ird, ord, private)
}

// acceptor returns a connect callback that accepts with b's QP and reports Accept's
// result (and the connector) on the channel.
func acceptor(b *side, ird, ord int, private []byte, onDisconnect func()) (func(*Connector), chan error) {
	accepted := make(chan error, 1)
	return func(c *Connector) {
		b.conn = c
		go func() {
			ctx, cancel := context.WithTimeout(bg, 10*time.Second)
			defer cancel()
			accepted <- c.Accept(ctx, b.qp, ird, ord, private, onDisconnect)
		}()
	}, accepted
}

// complete finishes an accepted connection on both sides.
func complete(t *testing.T, c *Connector, onDisconnect func(), accepted chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	if err := c.CompleteConnect(ctx, onDisconnect); err != nil {
		t.Fatalf("complete connect: %v", err)
	}
	select {
	case err := <-accepted:
		if err != nil {
			t.Fatalf("accept: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("accept did not return")
	}
}

// NdkReject: the connecting side's Connect fails with STATUS_CONNECTION_REFUSED,
// GetConnectionData reports the rejection's private data, and the QP can connect
// afterwards through a new connector.
func TestConnReject(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		a, b := idleSides(t, k, DefaultOptions())
		var reject atomic.Bool
		reject.Store(true)
		accept, accepted := acceptor(b, 8, 8, nil, nil)
		rejected := make(chan error, 1)
		b.listen(t, func(c *Connector) {
			if reject.Load() {
				rejected <- c.Reject([]byte("go away"))
				return
			}
			accept(c)
		})
		rc, err := a.dial(t, b, servicePort, 8, 8, nil)
		status(t, "connect to a rejecting listener", err, StatusConnectionRefused)
		if err := <-rejected; err != nil {
			t.Fatalf("reject: %v", err)
		}
		// The rejection's private data reaches the connecting side.
		x, y, z := getConnData(rc)
		checkConnData(t, "rejected side", [3]connData{x, y, z}, []byte("go away"), 0, 0)
		reject.Store(false)
		c, err := a.dial(t, b, servicePort, 8, 8, nil)
		if err != nil {
			t.Fatalf("connect after a rejection: %v", err)
		}
		complete(t, c, nil, accepted)
	})
}

// A Connect whose context is cancelled before the peer answers returns STATUS_CANCELLED and
// abandons the attempt: the QP is idle at once (it connects again through a new
// connector), and the peer's Accept of the abandoned request fails
// STATUS_CONNECTION_ABORTED within a round trip instead of waiting out the CM timeouts.
func TestConnConnectCancelled(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		a, b := idleSides(t, k, DefaultOptions())
		held := make(chan *Connector, 2)
		b.listen(t, func(c *Connector) { held <- c })
		c, err := a.a.NewConnector()
		if err != nil {
			t.Fatal(err)
		}
		dest := netip.AddrPortFrom(b.a.LocalAddr().Addr(), servicePort)
		ctx, cancel := context.WithCancel(bg)
		time.AfterFunc(50*time.Millisecond, cancel)
		err = c.Connect(ctx, a.qp, dest, 8, 8, nil)
		cancel()
		status(t, "connect abandoned by its context", err, StatusCancelled)
		var first *Connector
		select {
		case first = <-held:
		case <-time.After(10 * time.Second):
			t.Fatal("no connect event")
		}
		if err := first.Accept(bg, b.qp, 8, 8, nil, nil); StatusOf(err) != StatusConnectionAborted {
			t.Fatalf("accept of the abandoned request: %v, want STATUS_CONNECTION_ABORTED", err)
		}
		if err := b.qp.Close(bg); err != nil { // the refused acceptance leaves it unusable
			t.Fatal(err)
		}
		if b.qp, err = b.pd.NewQP(QPConfig{ReceiveCQ: b.rcq, InitiatorCQ: b.icq}); err != nil {
			t.Fatal(err)
		}
		accept, accepted := acceptor(b, 8, 8, nil, nil)
		go func() {
			select {
			case c := <-held:
				accept(c)
			case <-time.After(10 * time.Second):
			}
		}()
		c2, err := a.dial(t, b, servicePort, 8, 8, nil)
		if err != nil {
			t.Fatalf("connect the same QP again: %v", err)
		}
		complete(t, c2, nil, accepted)
	})
}

// An Accept whose context ends before the requester completes the connection leaves no
// connection behind: the passive QP fails at once, so the requester's late ready-to-use
// and first Send cannot connect it (they would have, while the engine still waited for its
// own timeout), and that Send fails instead of waiting for a receive. The requester's
// disconnect callback runs: its connection aborted.
func TestConnAcceptCancelled(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		a, b := idleSides(t, k, DefaultOptions())
		actx, acancel := context.WithCancel(bg)
		defer acancel()
		accepted := make(chan error, 1)
		b.listen(t, func(c *Connector) {
			go func() { accepted <- c.Accept(actx, b.qp, 8, 8, nil, nil) }()
		})
		c, err := a.dial(t, b, servicePort, 8, 8, nil)
		if err != nil {
			t.Fatal(err)
		}
		acancel()
		select {
		case err := <-accepted:
			status(t, "accept abandoned by its context", err, StatusCancelled)
		case <-time.After(10 * time.Second):
			t.Fatal("accept did not return")
		}
		if st := b.qp.tq.State(); st != transport.QPError {
			t.Fatalf("passive QP %v after its Accept was cancelled, want %v", st, transport.QPError)
		}
		if !errors.Is(b.qp.tq.Cause(), transport.ErrConnectCancelled) {
			t.Fatalf("passive QP's cause %v, want ErrConnectCancelled", b.qp.tq.Cause())
		}
		var disc atomic.Int32
		ctx, cancel := context.WithTimeout(bg, 10*time.Second)
		defer cancel()
		if err := c.CompleteConnect(ctx, func() { disc.Add(1) }); err != nil {
			t.Fatalf("complete connect: %v", err)
		}
		buf, mr := a.region(t, 64, 0)
		if err := a.qp.Send("late", []SGE{mr.SGE(buf)}, 0); err != nil {
			t.Fatal(err)
		}
		r := results(t, a.icq, 1)[0]
		if r.Status == StatusSuccess {
			t.Fatal("a Send to the cancelled acceptor succeeded")
		}
		deadline := time.Now().Add(10 * time.Second)
		for disc.Load() == 0 && time.Now().Before(deadline) {
			a.a.Poll()
			time.Sleep(100 * time.Microsecond)
		}
		if n := disc.Load(); n != 1 {
			t.Fatalf("Send ended %v; the requester's disconnect callback ran %d times, want 1", r.Status, n)
		}
		if st := b.qp.tq.State(); st != transport.QPError {
			t.Fatalf("passive QP %v after the requester's Send, want %v", st, transport.QPError)
		}
	})
}

// Closing a connector whose Connect is pending (NDKPI Work Request Posting Requirements
// allows it) ends that Connect with STATUS_CANCELLED, and the QP is idle again.
func TestConnCloseWhileConnecting(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		a, b := idleSides(t, k, DefaultOptions())
		held := make(chan *Connector, 1)
		b.listen(t, func(c *Connector) { held <- c })
		c, err := a.a.NewConnector()
		if err != nil {
			t.Fatal(err)
		}
		res := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(bg, 10*time.Second)
			defer cancel()
			res <- c.Connect(ctx, a.qp, netip.AddrPortFrom(b.a.LocalAddr().Addr(), servicePort), 8, 8, nil)
		}()
		var req *Connector
		select {
		case req = <-held: // the request is at the peer, unanswered
		case <-time.After(10 * time.Second):
			t.Fatal("no connect event")
		}
		// Close may race Connect's start; it abandons the attempt once Connect made one.
		deadline := time.Now().Add(5 * time.Second)
		for {
			if err := c.Close(bg); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-res:
				status(t, "connect of a closed connector", err, StatusCancelled)
				if st := a.qp.tq.State(); st != transport.QPIdle {
					t.Fatalf("QP %v after the abandoned connect, want idle", st)
				}
				_ = req.Reject(nil)
				return
			case <-time.After(time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatal("Connect did not return after Close")
			}
		}
	})
}

// Connecting to a port nobody listens on: STATUS_CONNECTION_REFUSED.
func TestConnNoListener(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		a, b := idleSides(t, k, DefaultOptions())
		_, err := a.dial(t, b, servicePort+1, 8, 8, nil)
		status(t, "connect without a listener", err, StatusConnectionRefused)
		// A closed listener refuses as well (NDKPI Listeners, Connectors, and Endpoints).
		l := b.listen(t, func(c *Connector) { t.Error("connect event on a closed listener") })
		if err := l.Close(bg); err != nil {
			t.Fatal(err)
		}
		_, err = a.dial(t, b, servicePort, 8, 8, nil)
		status(t, "connect to a closed listener", err, StatusConnectionRefused)
	})
}

// NdkControlConnectEvents: a paused listener refuses as if nobody listened (no connect
// event), a resumed one accepts.
func TestConnPausedListener(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		a, b := idleSides(t, k, DefaultOptions())
		var paused atomic.Bool
		accept, accepted := acceptor(b, 8, 8, nil, nil)
		l := b.listen(t, func(c *Connector) {
			if paused.Load() {
				t.Error("connect event while paused")
			}
			accept(c)
		})
		paused.Store(true)
		l.Pause(true)
		_, err := a.dial(t, b, servicePort, 8, 8, nil)
		status(t, "connect to a paused listener", err, StatusConnectionRefused)
		paused.Store(false)
		l.Pause(false)
		c, err := a.dial(t, b, servicePort, 8, 8, nil)
		if err != nil {
			t.Fatalf("connect to the resumed listener: %v", err)
		}
		complete(t, c, nil, accepted)
	})
}

// connData is what GetConnectionData reported.
type connData struct {
	ird, ord, size int
	err            error
	data           []byte
}

// getConnData asks c for its connection data the three NDK ways: a nil buffer (the size),
// a buffer one byte short (STATUS_BUFFER_TOO_SMALL, the prefix, the size), and a buffer
// of exactly the size.
func getConnData(c *Connector) (sizeOnly, short, exact connData) {
	sizeOnly.ird, sizeOnly.ord, sizeOnly.size, sizeOnly.err = c.GetConnectionData(nil)
	if sizeOnly.size > 0 {
		short.data = make([]byte, sizeOnly.size-1)
		short.ird, short.ord, short.size, short.err = c.GetConnectionData(short.data)
	}
	exact.data = make([]byte, sizeOnly.size)
	exact.ird, exact.ord, exact.size, exact.err = c.GetConnectionData(exact.data)
	return
}

func checkConnData(t *testing.T, who string, got [3]connData, private []byte, ird, ord int) {
	t.Helper()
	sizeOnly, short, exact := got[0], got[1], got[2]
	if sizeOnly.err != nil || sizeOnly.size != len(private) {
		t.Errorf("%s: nil buffer: size %d, %v; want %d, success", who, sizeOnly.size, sizeOnly.err, len(private))
	}
	if !errors.Is(short.err, StatusBufferTooSmall) || short.size != len(private) || !bytes.Equal(short.data, private[:len(private)-1]) {
		t.Errorf("%s: short buffer: size %d, %v, data %q; want %d, STATUS_BUFFER_TOO_SMALL, %q", who, short.size, short.err, short.data, len(private), private[:len(private)-1])
	}
	if exact.err != nil || exact.size != len(private) || !bytes.Equal(exact.data, private) {
		t.Errorf("%s: exact buffer: size %d, %v, data %q; want %q", who, exact.size, exact.err, exact.data, private)
	}
	for _, d := range got {
		if d.ird != ird || d.ord != ord {
			t.Errorf("%s: read limits %d/%d, want %d/%d", who, d.ird, d.ord, ird, ord)
		}
	}
}

// NdkGetConnectionData on both sides: a nil buffer returns the size, a short one
// STATUS_BUFFER_TOO_SMALL with the size and what fits, the private data arrives exactly,
// and the read limits are negotiated down (each side's inbound limit is capped by the
// peer's outbound one).
func TestConnGetConnectionData(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		a, b := idleSides(t, k, DefaultOptions())
		callerData := []byte("caller's private data")
		calleeData := []byte("callee's")
		const aIRD, aORD, bIRD, bORD = 3, 5, 4, 2
		passive := make(chan [3]connData, 1)
		accepted := make(chan error, 1)
		b.listen(t, func(c *Connector) {
			x, y, z := getConnData(c)
			passive <- [3]connData{x, y, z}
			b.conn = c
			go func() {
				ctx, cancel := context.WithTimeout(bg, 10*time.Second)
				defer cancel()
				accepted <- c.Accept(ctx, b.qp, bIRD, bORD, calleeData, nil)
			}()
		})
		c, err := a.dial(t, b, servicePort, aIRD, aORD, callerData)
		if err != nil {
			t.Fatal(err)
		}
		// Before Accept the passive side sees the caller's limits, capped by the adapter's.
		checkConnData(t, "passive side", <-passive, callerData, aORD, aIRD)
		x, y, z := getConnData(c)
		checkConnData(t, "active side", [3]connData{x, y, z}, calleeData, min(aIRD, bORD), min(aORD, bIRD))
		complete(t, c, nil, accepted)

		// The negotiated limits hold: A may have min(aORD, bIRD) = 4 Reads outstanding at B.
		tbuf, tmr := b.region(t, 4096, MRAllowRemoteRead)
		fill(tbuf, 9)
		dst, dmr := a.region(t, 8*512, MRAllowLocalWrite)
		for i := 0; i < 8; i++ {
			if err := a.qp.Read(i, []SGE{dmr.SGE(dst[i*512 : (i+1)*512])}, tmr.VA()+uint64(i*512), tmr.RemoteToken(), 0); err != nil {
				t.Fatal(err)
			}
		}
		for i, r := range results(t, a.icq, 8) {
			want(t, r, StatusSuccess, OpTypeRead, i)
		}
		if !bytes.Equal(dst, tbuf) {
			t.Fatal("read bytes differ")
		}

		// Private data over MaxCallerData and negative limits are refused.
		info := a.a.QueryAdapterInfo()
		_, err = a.dial(t, b, servicePort, 1, 1, make([]byte, info.MaxCallerData+1))
		status(t, "private data over MaxCallerData", err, StatusInvalidBufferSize)
		_, err = a.dial(t, b, servicePort, -1, 1, nil)
		status(t, "negative IRD", err, StatusInvalidParameter)
	})
}

// Read limits over the adapter's maximum are capped at it on both sides (NdkConnect and
// NdkAccept: "if the value is greater than the adapter's maximum, the adapter's maximum is
// used"), and the capped values are what GetConnectionData reports and what holds.
func TestConnReadLimitsCapped(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		a, b := idleSides(t, k, DefaultOptions())
		info := a.a.QueryAdapterInfo()
		huge := int(info.MaxInboundReadLimit) * 1000
		accept, accepted := acceptor(b, huge, huge, nil, nil)
		b.listen(t, accept)
		c, err := a.dial(t, b, servicePort, huge, huge, nil)
		if err != nil {
			t.Fatalf("connect with read limits %d over the adapter's %d: %v", huge, info.MaxInboundReadLimit, err)
		}
		complete(t, c, nil, accepted)
		max := int(info.MaxInboundReadLimit)
		if ird, ord, _, err := c.GetConnectionData(nil); err != nil || ird != max || ord != max {
			t.Fatalf("active side: read limits %d/%d (%v), want %d/%d", ird, ord, err, max, max)
		}
		if ird, ord, _, err := b.conn.GetConnectionData(nil); err != nil || ird != max || ord != max {
			t.Fatalf("passive side: read limits %d/%d (%v), want %d/%d", ird, ord, err, max, max)
		}
		// The capped limit holds: MaxOutboundReadLimit Reads outstanding at once complete.
		tbuf, tmr := b.region(t, 64*max, MRAllowRemoteRead)
		fill(tbuf, 3)
		dst, dmr := a.region(t, 64*max, MRAllowLocalWrite)
		for i := 0; i < max; i++ {
			if err := a.qp.Read(i, []SGE{dmr.SGE(dst[i*64 : (i+1)*64])}, tmr.VA()+uint64(i*64), tmr.RemoteToken(), 0); err != nil {
				t.Fatal(err)
			}
		}
		for i, r := range results(t, a.icq, max) {
			want(t, r, StatusSuccess, OpTypeRead, i)
		}
		if !bytes.Equal(dst, tbuf) {
			t.Fatal("read bytes differ")
		}
	})
}

// NdkGetLocalAddress / NdkGetPeerAddress: each side's peer address is the other's local
// address; the passive side's local address is the listener's.
func TestConnAddresses(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		a, b := idleSides(t, k, DefaultOptions())
		accept, accepted := acceptor(b, 8, 8, nil, nil)
		l := b.listen(t, accept)
		c, err := a.dial(t, b, servicePort, 8, 8, nil)
		if err != nil {
			t.Fatal(err)
		}
		complete(t, c, nil, accepted)
		dest := netip.AddrPortFrom(b.a.LocalAddr().Addr(), servicePort)
		if l.LocalAddr() != dest {
			t.Errorf("listener address %v, want %v", l.LocalAddr(), dest)
		}
		if c.PeerAddr() != dest || b.conn.LocalAddr() != dest {
			t.Errorf("active peer %v, passive local %v, want %v", c.PeerAddr(), b.conn.LocalAddr(), dest)
		}
		if c.LocalAddr().Addr() != a.a.LocalAddr().Addr() || c.LocalAddr().Port() == 0 {
			t.Errorf("active local %v, want an address of %v", c.LocalAddr(), a.a.LocalAddr().Addr())
		}
		if b.conn.PeerAddr() != c.LocalAddr() {
			t.Errorf("passive peer %v, active local %v: not the same", b.conn.PeerAddr(), c.LocalAddr())
		}
	})
}

// NdkDisconnect: the disconnecting side's outstanding requests and receives complete
// STATUS_CANCELLED (the implicit flush); the peer's disconnect callback fires exactly once
// and its outstanding receives are not flushed (NetworkDirect Disconnect Scheme: a
// peer-initiated disconnect does not flush); the disconnecting side's own callback never
// fires; the disconnected QP cannot connect or post again.
func TestConnDisconnect(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		a, b := idleSides(t, k, engineOpts(patientSends))
		var discA, discB atomic.Int32
		accept, accepted := acceptor(b, 8, 8, nil, func() { discB.Add(1) })
		b.listen(t, accept)
		c, err := a.dial(t, b, servicePort, 8, 8, nil)
		if err != nil {
			t.Fatal(err)
		}
		complete(t, c, func() { discA.Add(1) }, accepted)

		// Outstanding at A: two Sends that wait for receives B never posts, and a Write
		// behind them; at B: a Send that waits for a receive A never posts.
		buf, mr := a.region(t, 4096, 0)
		_, tmr := b.region(t, 4096, MRAllowRemoteWrite)
		for i := 0; i < 2; i++ {
			if err := a.qp.Send(i, []SGE{mr.SGE(buf[:64])}, 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.qp.Write(2, []SGE{mr.SGE(buf[:64])}, tmr.VA(), tmr.RemoteToken(), 0); err != nil {
			t.Fatal(err)
		}
		bbuf, bmr := b.region(t, 64, 0)
		if err := b.qp.Send("b-send", []SGE{bmr.SGE(bbuf)}, 0); err != nil {
			t.Fatal(err)
		}
		noResults(t, a.icq, quiet)

		ctx, cancel := context.WithTimeout(bg, 10*time.Second)
		defer cancel()
		if err := c.Disconnect(ctx); err != nil {
			t.Fatalf("disconnect: %v", err)
		}
		rs := results(t, a.icq, 3)
		want(t, rs[0], StatusCancelled, OpTypeSend, 0)
		want(t, rs[1], StatusCancelled, OpTypeSend, 1)
		want(t, rs[2], StatusCancelled, OpTypeWrite, 2)
		noResults(t, a.icq, quiet)

		deadline := time.Now().Add(10 * time.Second)
		for discB.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
		// The peer's disconnect does not flush B's outstanding Send; B's own Flush does.
		noResults(t, b.icq, quiet)
		b.qp.Flush()
		want(t, results(t, b.icq, 1)[0], StatusCancelled, OpTypeSend, "b-send")
		time.Sleep(quiet)
		if n, m := discB.Load(), discA.Load(); n != 1 || m != 0 {
			t.Fatalf("disconnect callbacks: peer %d, disconnecting side %d; want 1 and 0", n, m)
		}

		// The disconnected QP cannot be used again.
		status(t, "send on a disconnected QP", a.qp.Send(7, []SGE{mr.SGE(buf[:8])}, 0), StatusConnectionInvalid)
		_, err = a.dial(t, b, servicePort, 8, 8, nil)
		status(t, "connect a disconnected QP", err, StatusConnectionInvalid)
		if err := c.Connect(ctx, a.qp, netip.AddrPortFrom(b.a.LocalAddr().Addr(), servicePort), 8, 8, nil); err == nil {
			t.Fatal("a used connector connected again")
		}
		if err := c.Disconnect(ctx); err != nil {
			t.Fatalf("second disconnect: %v", err)
		}
		if n := discA.Load(); n != 0 {
			t.Fatalf("disconnecting side's callback fired %d times", n)
		}
	})
}

// A peer-initiated disconnect does not flush (NetworkDirect Disconnect Scheme): receives
// posted just before it arrives (and not yet taken by the engine: an inline-progress
// application that did not poll in between) stay posted, as do receives posted after the
// indication; the application's own Disconnect afterwards is the implicit flush that
// cancels them.
func TestConnPeerDisconnectKeepsReceives(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		opts := DefaultOptions()
		opts.Progress = ProgressInline
		a, b := idleSides(t, k, opts)
		var discB atomic.Int32
		accept, accepted := acceptor(b, 8, 8, nil, func() { discB.Add(1) })
		b.listen(t, accept)
		c, err := a.dial(t, b, servicePort, 8, 8, nil)
		if err != nil {
			t.Fatal(err)
		}
		complete(t, c, nil, accepted)

		rbuf, rmr := b.region(t, 4*64, MRAllowLocalWrite)
		for i := 0; i < 3; i++ {
			if err := b.qp.Receive(i, []SGE{rmr.SGE(rbuf[i*64 : (i+1)*64])}); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(bg, 10*time.Second)
		defer cancel()
		if err := c.Disconnect(ctx); err != nil { // B's engine answers from its fallback poller
			t.Fatalf("disconnect: %v", err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for discB.Load() == 0 && time.Now().Before(deadline) {
			b.a.Poll()
			time.Sleep(100 * time.Microsecond)
		}
		if discB.Load() != 1 {
			t.Fatalf("peer's disconnect callback ran %d times, want 1", discB.Load())
		}
		// Posted after the indication: it stays posted too.
		if err := b.qp.Receive(3, []SGE{rmr.SGE(rbuf[3*64:])}); err != nil {
			t.Fatal(err)
		}
		noResults(t, b.rcq, quiet)
		if err := b.conn.Disconnect(ctx); err != nil {
			t.Fatalf("disconnect after the peer's: %v", err)
		}
		for i, r := range results(t, b.rcq, 4) {
			want(t, r, StatusCancelled, OpTypeReceive, i)
		}
		noResults(t, b.rcq, quiet)
		if n := discB.Load(); n != 1 {
			t.Fatalf("disconnect callback ran %d times after the local disconnect, want 1", n)
		}
	})
}

// A peer that goes silent (its adapter stops without disconnecting) times out the
// surviving side's outstanding request (STATUS_IO_TIMEOUT) and the connection aborts: the
// surviving side's disconnect callback runs, once; later requests complete cancelled.
func TestConnTimeoutIndicatesDisconnect(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		a, b := idleSides(t, k, engineOpts(func(c *transport.Config) {
			c.RetryTimeout = 100 * time.Millisecond
			c.RTO.Max = 50 * time.Millisecond
		}))
		var discA, discB atomic.Int32
		accept, accepted := acceptor(b, 8, 8, nil, func() { discB.Add(1) })
		b.listen(t, accept)
		c, err := a.dial(t, b, servicePort, 8, 8, nil)
		if err != nil {
			t.Fatal(err)
		}
		complete(t, c, func() { discA.Add(1) }, accepted)
		_, tmr := b.region(t, 4096, MRAllowRemoteWrite)
		buf, mr := a.region(t, 4096, 0)
		if err := a.qp.Write("before", []SGE{mr.SGE(buf[:512])}, tmr.VA(), tmr.RemoteToken(), 0); err != nil {
			t.Fatal(err)
		}
		want(t, results(t, a.icq, 1)[0], StatusSuccess, OpTypeWrite, "before")

		// B goes silent: its adapter stops without a word to A.
		vanish(b.a)
		if err := a.qp.Write("lost", []SGE{mr.SGE(buf[:512])}, tmr.VA(), tmr.RemoteToken(), 0); err != nil {
			t.Fatal(err)
		}
		want(t, results(t, a.icq, 1)[0], StatusIOTimeout, OpTypeWrite, "lost")
		deadline := time.Now().Add(10 * time.Second)
		for discA.Load() == 0 && time.Now().Before(deadline) {
			a.a.Poll()
			time.Sleep(100 * time.Microsecond)
		}
		if err := a.qp.Write("after", []SGE{mr.SGE(buf[:8])}, tmr.VA(), tmr.RemoteToken(), 0); err != nil {
			t.Fatal(err)
		}
		want(t, results(t, a.icq, 1)[0], StatusCancelled, OpTypeWrite, "after")
		time.Sleep(quiet)
		if n := discA.Load(); n != 1 {
			t.Fatalf("surviving side's disconnect callback ran %d times, want 1", n)
		}
		// The local disconnect of the aborted connection fires nothing more.
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		_ = c.Disconnect(ctx) // the peer is gone: success or STATUS_IO_TIMEOUT
		if n := discA.Load(); n != 1 {
			t.Fatalf("disconnect callback ran %d times after the local disconnect, want 1", n)
		}
	})
}

// An inline adapter whose application does not poll is served by its fallback: here B's
// application only waits for CQ notifications (NdkArmCq) and answers each receive, so every
// step of B's side (taking A's Sends, acknowledging them, sending the echo) is the
// fallback's, event-driven. A hundred round trips complete, byte-exact.
func TestInlineServedWithoutPolling(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		opts := DefaultOptions()
		opts.Progress = ProgressInline
		notified := make(chan struct{}, 1)
		p := newPair(t, k, pairOpts{opts: opts, notifyB: func(Status) {
			select {
			case notified <- struct{}{}:
			default:
			}
		}})
		const rounds = 100
		abuf, amr := p.A.region(t, 64, MRAllowLocalWrite)
		bbuf, bmr := p.B.region(t, 64, MRAllowLocalWrite)
		var res [4]Result
		echoes := 0 // B's echo Sends completed (B's CQ serves both its queues)
		take := func(r Result, i int) bool {
			if r.Status != StatusSuccess {
				t.Fatalf("round %d at B: %+v", i, r)
			}
			if r.RequestContext == "echo" {
				echoes++
				return false
			}
			return r.RequestContext == i
		}
		for i := 0; i < rounds; i++ {
			if err := p.B.qp.Receive(i, []SGE{bmr.SGE(bbuf)}); err != nil {
				t.Fatal(err)
			}
			if err := p.A.qp.Receive(i, []SGE{amr.SGE(abuf)}); err != nil {
				t.Fatal(err)
			}
			p.B.rcq.Arm(NotifyAny)
			fill(abuf, byte(i))
			if err := p.A.qp.Send(i, []SGE{amr.SGE(abuf)}, 0); err != nil {
				t.Fatal(err)
			}
			// B: no polling until the notification says its receive completed.
			select {
			case <-notified:
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: no notification at B within 10 s", i)
			}
			for got := false; !got; {
				n := p.B.rcq.GetResults(res[:])
				for _, r := range res[:n] {
					got = take(r, i) || got
				}
			}
			want := make([]byte, 64)
			fill(want, byte(i))
			if !bytes.Equal(bbuf, want) {
				t.Fatalf("round %d: B received %x", i, bbuf[:8])
			}
			if err := p.B.qp.Send("echo", []SGE{bmr.SGE(bbuf)}, 0); err != nil {
				t.Fatal(err)
			}
			// A polls for its Send, the echo's receive; B never polls for its echo Send: its
			// completion and acknowledgements are the fallback's.
			for _, r := range results(t, p.A.rcq, 2) {
				if r.Status != StatusSuccess {
					t.Fatalf("round %d at A: %+v", i, r)
				}
			}
		}
		// B's echo Sends all completed too; the last ones without B polling for them.
		time.Sleep(50 * time.Millisecond)
		n := p.B.icq.GetResults(res[:])
		for _, r := range res[:n] {
			take(r, -1)
		}
		if echoes != rounds {
			t.Fatalf("B's echo Sends: %d of %d completed", echoes, rounds)
		}
	})
}
