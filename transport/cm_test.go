package transport_test

// Connection-management conformance tests: private data, rejection, timeouts, lost
// messages, a flood of requests, listener close (NDKPI Listeners, Connectors, and
// Endpoints), and the NetworkDirect Disconnect Scheme. All in virtual time over simlink.

import (
	"bytes"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// semCMTimeout is the connection manager's first retransmission interval (Config.CMTimeout's
// default); semCMMaxInterval the interval's cap.
const (
	semCMTimeout     = 20 * time.Millisecond
	semCMMaxInterval = 500 * time.Millisecond
)

// semCMSends returns how many copies of a CM message go out in d after the first one left
// (the first included), with intervals from first doubling up to semCMMaxInterval.
func semCMSends(first, d time.Duration) int {
	n, at, iv := 1, first, first
	for at < d {
		n++
		iv = min(2*iv, semCMMaxInterval)
		at += iv
	}
	return n
}

// TestCMSemPrivateData: private data of 0 to wire.MaxPrivateData bytes travels both ways
// unchanged; more is refused with ErrPrivateData by Connect, Accept and both Rejects, and a
// refused call changes nothing (the QP stays idle, the request stays answerable).
func TestCMSemPrivateData(t *testing.T) {
	for _, size := range []int{0, 1, 100, wire.MaxPrivateData} {
		t.Run(strconv.Itoa(size)+" bytes", func(t *testing.T) {
			w, a, b := newSemPair(t, nil)
			reqData, repData := make([]byte, size), make([]byte, size)
			pattern(reqData, size)
			pattern(repData, size+1)
			_, qb, l, conn := semDial(t, a, b, 1, reqData)
			req := semNextRequest(w, l)
			if !bytes.Equal(req.PrivateData, reqData) || len(req.PrivateData) != size {
				t.Fatalf("request private data: %d bytes, equal %v", len(req.PrivateData), bytes.Equal(req.PrivateData, reqData))
			}
			if req.Peer.Addr() != a.addr.Addr() {
				t.Fatalf("request from %v, want %v", req.Peer, a.addr)
			}
			if err := req.Accept(qb, repData, 0); err != nil {
				t.Fatal(err)
			}
			semReplied(t, w, conn)
			if !bytes.Equal(conn.PeerPrivateData(), repData) || len(conn.PeerPrivateData()) != size {
				t.Fatalf("reply private data: %d bytes", len(conn.PeerPrivateData()))
			}
			if err := conn.Complete(); err != nil {
				t.Fatal(err)
			}
			semEstablished(t, w, req)
		})
	}

	t.Run("too large", func(t *testing.T) {
		w, a, b := newSemPair(t, nil)
		big := make([]byte, wire.MaxPrivateData+1)
		qa, qb := a.qp(transport.QPConfig{}), b.qp(transport.QPConfig{})
		l, err := b.eng.Listen(5, 2)
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.eng.Connect(qa, b.addr, 5, big, 0)
		semIs(t, "connect with too much private data", err, transport.ErrPrivateData)
		semState(t, "after the refused connect", qa, transport.QPIdle)
		w.runFor(5 * time.Millisecond)
		if a.tap.sentCount(wire.OpConnRequest) != 0 {
			t.Fatal("a refused Connect sent a request")
		}
		conn, err := a.eng.Connect(qa, b.addr, 5, nil, 0) // the same QP connects afterwards
		if err != nil {
			t.Fatal(err)
		}
		req := semNextRequest(w, l)
		semIs(t, "accept with too much private data", req.Accept(qb, big, 0), transport.ErrPrivateData)
		semState(t, "after the refused accept", qb, transport.QPIdle)
		semIs(t, "reject with too much private data", req.Reject(big), transport.ErrPrivateData)
		if err := req.Accept(qb, make([]byte, wire.MaxPrivateData), 0); err != nil {
			t.Fatalf("accept after the refused calls: %v", err)
		}
		w.runUntil(time.Second, "reply", func() bool { d, _ := conn.Replied(); return d })
		semIs(t, "connector reject with too much private data", conn.Reject(big), transport.ErrPrivateData)
		if err := conn.Complete(); err != nil {
			t.Fatalf("complete after the refused reject: %v", err)
		}
		semEstablished(t, w, req)
	})
}

// TestCMSemReject: the listener's Reject reaches the connector as ErrRejected with the
// rejection's private data; the QP returns to idle and can connect again. A connector that
// rejects the reply makes the acceptor's request fail with ErrRejected.
func TestCMSemReject(t *testing.T) {
	t.Run("by listener", func(t *testing.T) {
		w, a, b := newSemPair(t, nil)
		qa, qb, l, conn := semDial(t, a, b, 1, []byte("please"))
		req := semNextRequest(w, l)
		if err := req.Reject([]byte("go away")); err != nil {
			t.Fatal(err)
		}
		semRejected(t, w, conn, "connect")
		if string(conn.PeerPrivateData()) != "go away" {
			t.Fatalf("rejection private data %q", conn.PeerPrivateData())
		}
		semState(t, "rejected connector", qa, transport.QPIdle)
		_, err := req.Established()
		semIs(t, "the rejected request", err, transport.ErrRejected)
		semIs(t, "accept after reject", req.Accept(qb, nil, 0), transport.ErrBadState)
		semState(t, "qp offered to a rejected request", qb, transport.QPIdle)
		// The same QPs connect afterwards.
		w.connectQPs(a, qa, b, qb)
	})
	t.Run("by connector", func(t *testing.T) {
		w, a, b := newSemPair(t, nil)
		qa, qb, l, conn := semDial(t, a, b, 1, nil)
		req := semNextRequest(w, l)
		if err := req.Accept(qb, []byte("offer"), 0); err != nil {
			t.Fatal(err)
		}
		w.runUntil(time.Second, "reply", func() bool { d, _ := conn.Replied(); return d })
		if err := conn.Reject([]byte("no thanks")); err != nil {
			t.Fatal(err)
		}
		w.runUntil(time.Second, "acceptor told", func() bool { d, _ := req.Established(); return d })
		_, err := req.Established()
		semIs(t, "accepted request rejected by the connector", err, transport.ErrRejected)
		semState(t, "connector", qa, transport.QPIdle)
		t.Logf("acceptor's QP after the connector's reject: %v", qb.State())
	})
}

// TestCMSemCancel: Cancel abandons an attempt. Unanswered, its request stops being
// retransmitted and Replied reports ErrConnectCancelled; replied, the peer's request fails
// with ErrRejected at once instead of timing out; a reply that arrives after the Cancel is
// refused too. The QP is idle afterwards and connects again; a completed attempt is not
// cancelled.
func TestCMSemCancel(t *testing.T) {
	t.Run("unanswered", func(t *testing.T) {
		w, a, b := newSemPair(t, nil)
		qa := a.qp(transport.QPConfig{})
		conn, err := a.eng.Connect(qa, semAddr(99), 1, nil, 0) // no such host
		if err != nil {
			t.Fatal(err)
		}
		w.runFor(semCMTimeout + semCMTimeout/2) // one retransmission
		if !conn.Cancel() {
			t.Fatal("Cancel of an unanswered attempt reported false")
		}
		_, err = conn.Replied()
		semIs(t, "cancelled attempt", err, transport.ErrConnectCancelled)
		sent := a.tap.sentCount(wire.OpConnRequest)
		w.runFor(5 * semCMTimeout)
		if n := a.tap.sentCount(wire.OpConnRequest); n != sent {
			t.Fatalf("%d requests sent after Cancel", n-sent)
		}
		semState(t, "cancelled", qa, transport.QPIdle)
		if conn.Cancel() {
			t.Fatal("a second Cancel reported true")
		}
		w.connectQPs(a, qa, b, b.qp(transport.QPConfig{})) // reusable
	})
	t.Run("replied", func(t *testing.T) {
		w, a, b := newSemPair(t, nil)
		qa, qb, l, conn := semDial(t, a, b, 1, nil)
		req := semNextRequest(w, l)
		if err := req.Accept(qb, nil, 0); err != nil {
			t.Fatal(err)
		}
		semReplied(t, w, conn)
		t0 := w.clock.Now()
		if !conn.Cancel() {
			t.Fatal("Cancel of a replied attempt reported false")
		}
		w.runUntil(time.Second, "acceptor told", func() bool { d, _ := req.Established(); return d })
		_, err := req.Established()
		semIs(t, "request whose connector cancelled", err, transport.ErrRejected)
		if d := w.elapsedSince(t0); d >= semCMTimeout {
			t.Fatalf("acceptor told after %v, want within a round trip", d)
		}
		semState(t, "cancelled", qa, transport.QPIdle)
		semIs(t, "Complete after Cancel", conn.Complete(), transport.ErrBadState)
	})
	t.Run("late reply", func(t *testing.T) {
		w, a, b := newSemPair(t, nil)
		qa, qb, l, conn := semDial(t, a, b, 1, nil)
		req := semNextRequest(w, l) // the request arrived; Cancel before the answer
		if !conn.Cancel() {
			t.Fatal("Cancel reported false")
		}
		w.runFor(time.Millisecond)
		if err := req.Accept(qb, nil, 0); err != nil {
			t.Fatal(err)
		}
		w.runUntil(time.Second, "acceptor told", func() bool { d, _ := req.Established(); return d })
		_, err := req.Established()
		semIs(t, "accepted after the connector cancelled", err, transport.ErrRejected)
		semState(t, "cancelled", qa, transport.QPIdle)
		if a.tap.sentCount(wire.OpReadyToUse) != 0 {
			t.Fatal("a cancelled attempt sent a ready-to-use")
		}
	})
	t.Run("completed", func(t *testing.T) {
		w, a, b := newSemPair(t, nil)
		qa, qb := a.qp(transport.QPConfig{}), b.qp(transport.QPConfig{})
		conn, _ := w.connectQPs(a, qa, b, qb)
		if conn.Cancel() {
			t.Fatal("Cancel of a completed attempt reported true")
		}
		w.runFor(time.Millisecond)
		semState(t, "completed", qa, transport.QPConnected)
	})
}

// TestCMSemNoListener: a request for a service nobody listens on is rejected at once (well
// within one CM timeout), not left to time out.
func TestCMSemNoListener(t *testing.T) {
	w, a, _ := newSemPair(t, nil)
	qa := a.qp(transport.QPConfig{})
	t0 := w.clock.Now()
	conn, err := a.eng.Connect(qa, semAddr(2), 77, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	semRejected(t, w, conn, "connect to no listener")
	if d := w.elapsedSince(t0); d >= semCMTimeout {
		t.Fatalf("rejected after %v, want within one round trip (< CM timeout %v)", d, semCMTimeout)
	}
	semState(t, "rejected", qa, transport.QPIdle)
}

// TestCMSemDeadPeer: connecting to a host that never answers keeps retransmitting the
// request (CMTimeout, doubling up to 500 ms) until the attempt's timeout, and fails then with
// ErrConnectTimeout, not before; the QP returns to idle. Without a timeout the attempt runs
// for Config.ConnectTimeout (30 s).
func TestCMSemDeadPeer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration // given to Connect (0: the default)
		want    time.Duration
	}{{"defaults", 0, transport.DefaultConnectTimeout}, {"5 s", 5 * time.Second, 5 * time.Second}, {"50 ms", 50 * time.Millisecond, 50 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			w, a, b := newSemPair(t, nil)
			qa := a.qp(transport.QPConfig{})
			t0 := w.clock.Now()
			conn, err := a.eng.Connect(qa, semAddr(99), 1, nil, tc.timeout) // no such host
			if err != nil {
				t.Fatal(err)
			}
			// Still retrying shortly before the deadline.
			w.runFor(tc.want - tc.want/5)
			if d, err := conn.Replied(); d {
				t.Fatalf("attempt ended after %v, before its timeout %v: %v", w.elapsedSince(t0), tc.want, err)
			}
			semState(t, "connecting", qa, transport.QPConnecting)
			before := a.tap.sentCount(wire.OpConnRequest)
			w.runUntil(tc.want, "timeout", func() bool { d, _ := conn.Replied(); return d })
			_, err = conn.Replied()
			semIs(t, "connect to a dead peer", err, transport.ErrConnectTimeout)
			if d := w.elapsedSince(t0); d < tc.want || d > tc.want+time.Millisecond {
				t.Fatalf("timed out after %v, want %v", d, tc.want)
			}
			n := a.tap.sentCount(wire.OpConnRequest)
			if want := semCMSends(semCMTimeout, tc.want); n != want {
				t.Fatalf("%d requests sent, want %d", n, want)
			}
			if tc.want >= 2*time.Second && n == before {
				t.Fatalf("no request sent in the last fifth of the attempt")
			}
			semState(t, "timed out", qa, transport.QPIdle)
			w.connectQPs(a, qa, b, b.qp(transport.QPConfig{})) // reusable
		})
	}
	t.Run("peer answers after a second", func(t *testing.T) {
		// A peer that does not answer for a second (a partition, a stalled host) is
		// connected to once it does: the retransmitted request gets through.
		w, a, b := newSemPair(t, nil)
		w.net.Partition(a.addr, b.addr)
		qa, qb, l, conn := semDial(t, a, b, 1, nil)
		w.runFor(time.Second)
		w.net.Heal(a.addr, b.addr)
		req := awaitRequest(t, w, "request after the partition", l)
		if err := req.Accept(qb, nil, 0); err != nil {
			t.Fatal(err)
		}
		semFinish(t, w, conn, req)
		semState(t, "A", qa, transport.QPConnected)
		if n := a.tap.sentCount(wire.OpConnRequest); n < semCMSends(semCMTimeout, time.Second) {
			t.Fatalf("%d requests sent across a partition of a second", n)
		}
	})
}

// TestCMSemLostMessages: a lost reply or a lost ready-to-use is recovered by
// retransmission; so is a partition healed before the attempt's timeout.
func TestCMSemLostMessages(t *testing.T) {
	handshake := func(t *testing.T, w *semWorld, a, b *semNode, afterComplete func(qa *transport.QP)) (qa, qb *transport.QP, tReply, tEst time.Duration) {
		t0 := w.clock.Now()
		qa, qb, l, conn := semDial(t, a, b, 1, []byte("req"))
		req := awaitRequest(t, w, "request", l)
		if err := req.Accept(qb, []byte("rep"), 0); err != nil {
			t.Fatal(err)
		}
		semReplied(t, w, conn)
		tReply = w.elapsedSince(t0)
		if string(conn.PeerPrivateData()) != "rep" {
			t.Fatalf("reply private data %q", conn.PeerPrivateData())
		}
		if err := conn.Complete(); err != nil {
			t.Fatal(err)
		}
		if afterComplete != nil {
			afterComplete(qa)
		}
		semEstablished(t, w, req)
		tEst = w.elapsedSince(t0)
		if req.PrivateData == nil || string(req.PrivateData) != "req" {
			t.Fatalf("request private data %q", req.PrivateData)
		}
		return qa, qb, tReply, tEst
	}
	exchange := func(t *testing.T, w *semWorld, qa, qb *transport.QP) {
		t.Helper()
		na, nb := len(w.rec.of(qa)), len(w.rec.of(qb))
		semRecv(t, qb, 50, make([]byte, 10))
		semRecv(t, qa, 51, make([]byte, 10))
		semPost(t, qa, semSend(52, 0, []byte("ab")))
		semPost(t, qb, semSend(53, 0, []byte("ba")))
		w.runUntil(time.Second, "exchange", func() bool { return len(w.rec.of(qa)) == na+2 && len(w.rec.of(qb)) == nb+2 })
		for _, c := range append(w.rec.of(qa)[na:], w.rec.of(qb)[nb:]...) {
			if c.Status != semOK {
				t.Fatalf("after the handshake: %s / %s", statusOf(w.rec.of(qa)), statusOf(w.rec.of(qb)))
			}
		}
	}

	t.Run("reply lost", func(t *testing.T) {
		w, a, b := newSemPair(t, nil)
		b.tap.setDrop(semDropFirst(wire.OpConnReply, 1))
		qa, qb, tReply, _ := handshake(t, w, a, b, nil)
		if n := b.tap.sentCount(wire.OpConnReply); n < 1 || a.tap.recvCount(wire.OpConnReply) < 1 {
			t.Fatalf("replies: %d sent after the lost one, %d received", n, a.tap.recvCount(wire.OpConnReply))
		}
		if tReply < semCMTimeout || tReply > 2*semCMTimeout {
			t.Fatalf("reply after %v, want one retransmission interval (%v) later", tReply, semCMTimeout)
		}
		exchange(t, w, qa, qb)
	})
	t.Run("ready-to-use lost", func(t *testing.T) {
		w, a, b := newSemPair(t, nil)
		a.tap.setDrop(semDropFirst(wire.OpReadyToUse, 1))
		qa, qb, tReply, tEst := handshake(t, w, a, b, nil)
		if a.tap.sentCount(wire.OpReadyToUse) < 1 || b.tap.sentCount(wire.OpConnReply) < 2 {
			t.Fatalf("RTUs sent after the lost one %d, replies sent %d", a.tap.sentCount(wire.OpReadyToUse), b.tap.sentCount(wire.OpConnReply))
		}
		if tEst-tReply < semCMTimeout/2 || tEst > tReply+2*semCMTimeout {
			t.Fatalf("established %v after the reply, want about one retransmission interval (%v)", tEst-tReply, semCMTimeout)
		}
		exchange(t, w, qa, qb)
	})
	t.Run("ready-to-use lost, data first", func(t *testing.T) {
		// The connector's first data packet carries the cookie: an implicit ready-to-use.
		w, a, b := newSemPair(t, nil)
		a.tap.setDrop(semDropFirst(wire.OpReadyToUse, 1))
		qa, _, tReply, tEst := handshake(t, w, a, b, func(qa *transport.QP) {
			w.runUntil(time.Second, "connector connected", func() bool { return qa.State() == transport.QPConnected })
			semPost(t, qa, semWrite(60, 0, 0x1000, 0x1, []byte("early")))
		})
		if tEst-tReply >= semCMTimeout {
			t.Fatalf("established %v after the reply: the first data packet should have established it", tEst-tReply)
		}
		w.runUntil(time.Second, "early write", func() bool { return len(w.rec.of(qa)) == 1 })
		// Token 0x1 is not registered at B: the Write is refused, but it was processed.
		semExpect(t, "early write", w.rec.of(qa), semWant{60, semOpWrite, semAV})
	})
	t.Run("ready-to-use never arrives", func(t *testing.T) {
		// The acceptor gives up after Accept's timeout: the request fails with
		// ErrConnectTimeout and the QP it offered is failed.
		w, a, b := newSemPair(t, nil)
		a.tap.setDrop(func(p *wire.Packet) bool { return p.Opcode == wire.OpReadyToUse })
		qa, qb, l, conn := semDial(t, a, b, 1, nil)
		req := semNextRequest(w, l)
		semRecv(t, qb, 70, make([]byte, 8))
		t0 := w.clock.Now()
		const timeout = 300 * time.Millisecond
		if err := req.Accept(qb, nil, timeout); err != nil {
			t.Fatal(err)
		}
		semComplete(t, w, conn)
		w.runUntil(time.Second, "acceptor gives up", func() bool { d, _ := req.Established(); return d })
		_, err := req.Established()
		semIs(t, "accept without ready-to-use", err, transport.ErrConnectTimeout)
		if el := w.elapsedSince(t0); el < timeout || el > timeout+time.Millisecond {
			t.Fatalf("gave up after %v, want Accept's timeout %v", el, timeout)
		}
		semState(t, "acceptor's QP", qb, transport.QPError)
		semIs(t, "acceptor's QP cause", qb.Cause(), transport.ErrConnectTimeout)
		semExpect(t, "acceptor's receive", w.rec.of(qb), semWant{70, semOpRecv, semCancel})
		t.Logf("%d replies sent, %d RTUs lost; connector's QP: %v", b.tap.sentCount(wire.OpConnReply), a.tap.recvCount(wire.OpReadyToUse), qa.State())
	})
	t.Run("partition healed", func(t *testing.T) {
		w, a, b := newSemPair(t, nil)
		w.net.Partition(a.addr, b.addr)
		healed := false
		qa, qb, l, conn := semDial(t, a, b, 1, nil)
		t0 := w.clock.Now()
		var req *transport.ConnRequest
		w.runUntil(time.Second, "request through the healed partition", func() bool {
			if !healed && w.elapsedSince(t0) >= 3*semCMTimeout+semCMTimeout/2 {
				w.net.Heal(a.addr, b.addr)
				healed = true
			}
			req = pollRequest(l)
			return req != nil
		})
		if err := req.Accept(qb, nil, 0); err != nil {
			t.Fatal(err)
		}
		semReplied(t, w, conn)
		if err := conn.Complete(); err != nil {
			t.Fatal(err)
		}
		semAwaitEstablished(w, req)
		if n := a.tap.sentCount(wire.OpConnRequest); n < 4 {
			t.Fatalf("%d requests sent across a partition of 3.5 intervals", n)
		}
		exchange(t, w, qa, qb)
	})
}

// TestCMSemDuplicateRequest: a delayed copy of a connection request that arrives after
// the connection it asked for is established (a retransmission the network held back) is
// not delivered to the listener as a new request; the connection is unaffected.
func TestCMSemDuplicateRequest(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	qa, qb, l, conn := semDial(t, a, b, 4, []byte("once"))
	req := semNextRequest(w, l)
	if err := req.Accept(qb, nil, 0); err != nil {
		t.Fatal(err)
	}
	semComplete(t, w, conn)
	semAwaitEstablished(w, req)
	w.runFor(5 * time.Millisecond)
	if err := a.tap.replay(wire.OpConnRequest, b.addr); err != nil {
		t.Fatal(err)
	}
	w.runFor(5 * time.Millisecond)
	if dup := pollRequest(l); dup != nil {
		t.Fatalf("a duplicate of an established connection's request was delivered as a new request (private data %q, from %v)", dup.PrivateData, dup.Peer)
	}
	semState(t, "A", qa, transport.QPConnected)
	semState(t, "B", qb, transport.QPConnected)
}

// TestCMSemFlood: a flood of connection requests from many hosts (more than MaxHalfOpen,
// never answered) is bounded: MaxHalfOpen requests wait, the rest are dropped and counted
// in HalfOpenFull, memory does not grow with the number of requests, an existing
// connection keeps working, and once the waiting requests expire (rejected with
// RejectTimeout) a new connection succeeds.
func TestCMSemFlood(t *testing.T) {
	const maxHalfOpen, hosts, perRound, rounds, warm = 8, 32, 2, 160, 20
	w, a, b := newSemPair(t, func(c *transport.Config) { c.MaxHalfOpen = maxHalfOpen })
	raws := make([]*semNode, hosts)
	for i := range raws {
		raws[i] = w.raw(1000 + i)
	}
	qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
	l, err := b.eng.Listen(50, 4096)
	if err != nil {
		t.Fatal(err)
	}

	// Traffic on the existing connection, all along.
	sent, posted := 0, 0
	traffic := func() {
		for posted-len(w.rec.of(qb)) < 8 {
			semRecv(t, qb, uint64(posted), make([]byte, 512))
			posted++
		}
		for sent-len(w.rec.of(qa)) < 8 && sent < posted {
			semPost(t, qa, semSend(uint64(sent), 0, make([]byte, 1+sent%512)))
			sent++
		}
	}
	priv := make([]byte, wire.MaxPrivateData)
	total := 0
	var base runtime.MemStats
	for round := range rounds {
		for h, r := range raws {
			for k := range perRound {
				p := wire.Packet{Header: wire.Header{Opcode: wire.OpConnRequest},
					CM: wire.CMExt{ServiceID: 50, ConnID: uint64(h+1)<<32 | uint64(round*perRound+k), SrcQPN: 7, InitialPSN: 1,
						MaxPayload: semMaxPayload, IRD: 4, ORD: 4, DataPort: 50000}, PrivateData: priv}
				r.sendRaw(b.addr, &p, nil)
				total++
			}
		}
		w.runFor(200 * time.Microsecond)
		traffic()
		if round == warm {
			runtime.GC()
			runtime.ReadMemStats(&base)
		}
	}
	var end runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&end)
	if got := len(l.Requests()); got != maxHalfOpen {
		t.Fatalf("%d requests delivered to the listener, want MaxHalfOpen = %d", got, maxHalfOpen)
	}
	if got := b.eng.Stats().HalfOpenFull; got != uint64(total-maxHalfOpen) {
		t.Fatalf("HalfOpenFull %d, want %d", got, total-maxHalfOpen)
	}
	growth := int64(end.HeapAlloc) - int64(base.HeapAlloc)
	flooded := (rounds - warm) * hosts * perRound
	if growth > 512<<10 {
		t.Fatalf("heap grew by %d bytes over %d further requests (%d bytes of private data)", growth, flooded, flooded*len(priv))
	}
	t.Logf("%d requests, heap growth %d bytes over the last %d", total, growth, flooded)
	if qa.State() != transport.QPConnected || qb.State() != transport.QPConnected {
		t.Fatalf("existing connection: %v / %v", qa.State(), qb.State())
	}
	w.runUntil(time.Second, "traffic", func() bool { return len(w.rec.of(qa)) == sent })
	for i, c := range w.rec.of(qa) {
		if c.Status != semOK || c.Context != uint64(i) {
			t.Fatalf("existing connection, send %d: %+v", i, c)
		}
	}
	if sent < rounds {
		t.Fatalf("only %d sends on the existing connection during the flood", sent)
	}

	// The waiting requests expire (2 s after their last copy) and are rejected.
	w.runUntil(3*time.Second, "half-open requests expire", func() bool {
		n := 0
		for _, r := range raws {
			n += r.rawCount(wire.OpConnReject)
		}
		return n == maxHalfOpen
	})
	for _, r := range raws {
		for _, m := range r.rx {
			if m.op != wire.OpConnReject || m.cm.Reason != transport.RejectTimeout {
				t.Fatalf("flood host got %v reason %d", m.op, m.cm.Reason)
			}
		}
	}
	// Their ConnRequests are dead: answering fails and leaves the QP idle.
	q2 := a.qp(transport.QPConfig{})
	conn, err := a.eng.Connect(q2, b.addr, 50, []byte("legit"), 0)
	if err != nil {
		t.Fatal(err)
	}
	spare := b.qp(transport.QPConfig{})
	var req *transport.ConnRequest
	w.runUntil(time.Second, "the new request", func() bool {
		for {
			select {
			case r := <-l.Requests():
				if string(r.PrivateData) == "legit" {
					req = r
					return true
				}
				semIs(t, "accept an expired request", r.Accept(spare, nil, 0), transport.ErrBadState)
				semState(t, "qp offered to an expired request", spare, transport.QPIdle)
			default:
				return false
			}
		}
	})
	if err := req.Accept(spare, nil, 0); err != nil {
		t.Fatal(err)
	}
	semFinish(t, w, conn, req)
}

// TestCMSemListenerClose: after Close, new requests are rejected at once (NDKPI Listeners,
// Connectors, and Endpoints); a request delivered before Close can still be accepted; the
// service can be listened on again.
func TestCMSemListenerClose(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	l, err := b.eng.Listen(5, 4)
	if err != nil {
		t.Fatal(err)
	}
	qa, qb := a.qp(transport.QPConfig{}), b.qp(transport.QPConfig{})
	conn, err := a.eng.Connect(qa, b.addr, 5, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	req := semNextRequest(w, l)
	l.Close()
	l.Close() // idempotent

	q2 := a.qp(transport.QPConfig{})
	t0 := w.clock.Now()
	conn2, err := a.eng.Connect(q2, b.addr, 5, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	semRejected(t, w, conn2, "connect after listener close")
	if d := w.elapsedSince(t0); d >= semCMTimeout {
		t.Fatalf("rejected after %v", d)
	}

	// The request delivered before Close is still answerable.
	if err := req.Accept(qb, nil, 0); err != nil {
		t.Fatal(err)
	}
	semFinish(t, w, conn, req)
	if _, err := b.eng.Listen(5, 1); err != nil {
		t.Fatalf("listen again after close: %v", err)
	}
}

// semDiscPair is a connected pair whose QPs count their disconnect indications.
func semDiscPair(t *testing.T, tweak func(*transport.Config)) (w *semWorld, a, b *semNode, qa, qb *transport.QP, discA, discB *atomic.Int32) {
	w, a, b = newSemPair(t, tweak)
	discA, discB = new(atomic.Int32), new(atomic.Int32)
	qa, qb = w.connect(a, transport.QPConfig{OnDisconnect: func(*transport.QP) { discA.Add(1) }},
		b, transport.QPConfig{OnDisconnect: func(*transport.QP) { discB.Add(1) }})
	return
}

// TestCMSemDisconnect: Disconnect flushes the local side (its outstanding work completes
// StatusCancelled, in posting order), returns nil once the peer answers, and leaves both
// QPs disconnected; the peer gets one disconnect indication (OnDisconnect) and is not
// flushed (NetworkDirect Disconnect Scheme: "a peer-initiated disconnect ⇒ the provider
// should not flush"). After it, PostSend returns ErrNotConnected on both sides; receives
// are accepted and complete StatusCancelled.
func TestCMSemDisconnect(t *testing.T) {
	w, _, b, qa, qb, discA, discB := semDiscPair(t, nil)
	g := newSemGuarded(1<<20, 1)
	b.mem.add(0xa1, 0, 0x10000, g.region, semRW)
	semRecv(t, qa, 20, make([]byte, 10))
	semRecv(t, qa, 21, make([]byte, 10))
	semPost(t, qa, semWrite(1, 0, 0x10000, 0xa1, make([]byte, 1<<20)))
	semPost(t, qa, semSend(2, 0, []byte("no receive at B")))
	semPost(t, qa, semRead(3, 0, 0x10000, 0xa1, make([]byte, 100)))
	semRecv(t, qb, 30, make([]byte, 10))
	semRecv(t, qb, 31, make([]byte, 10))
	w.runFor(30 * time.Microsecond)
	if n := len(w.rec.of(qa)); n != 0 {
		t.Fatalf("work completed before the disconnect: %s", statusOf(w.rec.of(qa)))
	}
	nb := len(w.rec.of(qb)) // the Send may have consumed receive 30
	t0 := w.clock.Now()
	d := qa.StartDisconnect(0)
	w.runUntil(time.Second, "disconnect", func() bool { done, _ := d.Done(); return done })
	if _, err := d.Done(); err != nil {
		t.Fatalf("disconnect: %v", err)
	}
	if el := w.elapsedSince(t0); el >= semCMTimeout {
		t.Fatalf("disconnect took %v with an answering peer", el)
	}
	semExpect(t, "A requests", w.rec.of(qa, semOpSend, semOpWrite, semOpRead),
		semWant{1, semOpWrite, semCancel}, semWant{2, semOpSend, semCancel}, semWant{3, semOpRead, semCancel})
	semExpect(t, "A receives", w.rec.of(qa, semOpRecv), semWant{20, semOpRecv, semCancel}, semWant{21, semOpRecv, semCancel})
	semState(t, "A", qa, transport.QPDisconnected)
	w.runUntil(time.Second, "indication at B", func() bool { return discB.Load() > 0 })
	semState(t, "B", qb, transport.QPDisconnected)
	w.runFor(5 * time.Millisecond)
	if discA.Load() != 0 || discB.Load() != 1 {
		t.Fatalf("disconnect indications: A %d (want 0: it disconnected itself), B %d (want 1)", discA.Load(), discB.Load())
	}
	if len(w.rec.of(qb)) != nb {
		t.Fatalf("B was flushed by the peer's disconnect: %s", statusOf(w.rec.of(qb)))
	}

	// Posting afterwards.
	semIs(t, "A post after disconnect", qa.PostSend(semSend(4, 0, []byte("x"))), transport.ErrNotConnected)
	semIs(t, "B post after disconnect", qb.PostSend(semSend(5, 0, []byte("x"))), transport.ErrNotConnected)
	_, err := b.eng.Connect(qb, semAddr(1), 9, nil, 0)
	semIs(t, "connect a disconnected QP", err, transport.ErrBadState)
	semRecv(t, qa, 22, make([]byte, 10))
	w.runUntil(time.Second, "receive after disconnect", func() bool { return len(w.rec.of(qa, semOpRecv)) == 3 })
	semExpect(t, "A receive after disconnect", w.rec.of(qa, semOpRecv)[2:], semWant{22, semOpRecv, semCancel})

	// B's outstanding receives stay until B flushes.
	qb.Flush()
	w.runUntil(time.Second, "B flush", func() bool { return len(w.rec.of(qb)) == 2 })
	for _, c := range w.rec.of(qb)[nb:] {
		if c.Status != semCancel {
			t.Fatalf("B's flush: %s", statusOf(w.rec.of(qb)))
		}
	}
	t.Logf("B after its flush: %v", qb.State())

	// A second disconnect is a no-op that succeeds.
	d2 := qa.StartDisconnect(0)
	w.runUntil(time.Second, "second disconnect", func() bool { done, _ := d2.Done(); return done })
	if _, err := d2.Done(); err != nil {
		t.Fatalf("second disconnect: %v", err)
	}
}

// TestCMSemDisconnectBoth: both sides disconnect at once; both succeed and neither gets an
// indication (NetworkDirect Disconnect Scheme: the indication is delivered "unless consumer
// B has already called disconnect itself").
func TestCMSemDisconnectBoth(t *testing.T) {
	w, _, _, qa, qb, discA, discB := semDiscPair(t, nil)
	da, db := qa.StartDisconnect(0), qb.StartDisconnect(0)
	w.runUntil(time.Second, "disconnects", func() bool {
		x, _ := da.Done()
		y, _ := db.Done()
		return x && y
	})
	for _, d := range []*transport.Disconnecting{da, db} {
		if _, err := d.Done(); err != nil {
			t.Fatalf("disconnect: %v", err)
		}
	}
	if discA.Load() != 0 || discB.Load() != 0 {
		t.Fatalf("indications A %d B %d after both disconnected themselves", discA.Load(), discB.Load())
	}
	semState(t, "A", qa, transport.QPDisconnected)
	semState(t, "B", qb, transport.QPDisconnected)
}

// TestCMSemDisconnectLostReply: a lost disconnect reply is recovered (the request is sent
// again and answered again); the peer's indication still runs once.
func TestCMSemDisconnectLostReply(t *testing.T) {
	w, _, b, qa, qb, _, discB := semDiscPair(t, nil)
	b.tap.setDrop(semDropFirst(wire.OpDisconnectRep, 1))
	t0 := w.clock.Now()
	d := qa.StartDisconnect(0)
	w.runUntil(time.Second, "disconnect", func() bool { done, _ := d.Done(); return done })
	if _, err := d.Done(); err != nil {
		t.Fatalf("disconnect: %v", err)
	}
	if el := w.elapsedSince(t0); el < semCMTimeout || el > 2*semCMTimeout {
		t.Fatalf("disconnect took %v, want one retransmission interval", el)
	}
	if discB.Load() != 1 {
		t.Fatalf("%d indications at B", discB.Load())
	}
	semState(t, "B", qb, transport.QPDisconnected)
}

// TestCMSemDisconnectPartitioned: Disconnect with the peer unreachable fails with
// ErrConnectTimeout after StartDisconnect's timeout (its requests sent at 0, 10 and 30 ms
// with CMTimeout 10 ms); the local side's work is cancelled at once and the QP is
// disconnected regardless.
func TestCMSemDisconnectPartitioned(t *testing.T) {
	w, a, b, qa, qb, _, discB := semDiscPair(t, func(c *transport.Config) { c.CMTimeout = 10 * time.Millisecond })
	semRecv(t, qa, 20, make([]byte, 10))
	w.net.Partition(a.addr, b.addr)
	t0 := w.clock.Now()
	d := qa.StartDisconnect(50 * time.Millisecond)
	w.runUntil(time.Millisecond, "implicit flush", func() bool { return len(w.rec.of(qa)) == 1 })
	semExpect(t, "A", w.rec.of(qa), semWant{20, semOpRecv, semCancel})
	w.runUntil(time.Second, "disconnect", func() bool { done, _ := d.Done(); return done })
	_, err := d.Done()
	semIs(t, "disconnect from a partitioned peer", err, transport.ErrConnectTimeout)
	if el := w.elapsedSince(t0); el > 51*time.Millisecond || el < 50*time.Millisecond {
		t.Fatalf("disconnect failed after %v, want its timeout, 50ms", el)
	}
	if n := a.tap.sentCount(wire.OpDisconnectReq); n != 3 {
		t.Fatalf("%d disconnect requests, want 3 (at 0, 10 and 30 ms)", n)
	}
	semIs(t, "A's cause", qa.Cause(), transport.ErrDisconnected)
	semState(t, "A", qa, transport.QPDisconnected)
	if discB.Load() != 0 || qb.State() != transport.QPConnected {
		t.Fatalf("B heard of a disconnect through a partition: %d, %v", discB.Load(), qb.State())
	}
}
