package xdp

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/xdp/nexthop"

	"github.com/xdpndk/xdpndk/internal/fakeresolver"
	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/transport/link"
)

// mustResolve resolves peer's next hop on l's device, so that the first datagram to it
// leaves at once instead of being held until l's next call.
func mustResolve(tb testing.TB, l *Link, peer netip.Addr) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.ResolvePeer(ctx, peer); err != nil {
		tb.Fatalf("resolve %v: %v", peer, err)
	}
}

// resolvePair resolves each link's address on the other's device.
func resolvePair(tb testing.TB, a, b *Link) {
	tb.Helper()
	mustResolve(tb, a, b.LocalAddr().Addr())
	mustResolve(tb, b, a.LocalAddr().Addr())
}

// serviceUntil calls l.Wait, as an idle engine would, until cond holds (bounded).
func serviceUntil(t *testing.T, l *Link, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s; link stats %+v", what, l.Stats())
		}
		if err := l.Wait(10 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSendHoldsWhileResolving sends to a peer whose fakeresolver.Answer blocks (an injected resolve
// function the test releases): Send takes the datagrams at once and holds them, a
// FlagZeroCopy one as a copy whose cookie is done at once; nothing leaves while the
// fakeresolver.Answer is pending; after the release the link sends them, in order, with the bytes
// they had when Send took them.
func TestSendHoldsWhileResolving(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	r := fakeresolver.New()
	r.Gate(bed.B.Addr)
	a := openOn(t, bed.A, Config{RingSize: 256, Frames: 512, HeapSize: 1 << 20, resolve: r.Resolve})
	b := openOn(t, bed.B, Config{RingSize: 256, Frames: 512})
	la, lb := a.Links()[0], b.Links()[0]
	mustResolve(t, lb, la.LocalAddr().Addr())

	first := []byte("first contact")
	heap, err := heapOf(t, a).Alloc(4096, 4096)
	if err != nil {
		t.Fatal(err)
	}
	var hdr [8]byte
	var trl [zcTrailer]byte
	scratch := make([]byte, 4096)
	pkts := make([]link.Packet, 2)
	pkts[0] = link.Packet{Remote: lb.LocalAddr()}
	pkts[0].SetData(first)
	zcPacket(&pkts[1], lb.LocalAddr(), 1, 77, scratch, hdr[:], heap[:1200], trl[:])
	want := bytes.Clone(scratch[:8+1200+zcTrailer])

	// The resolve function is blocked: Send can only return because it does not wait.
	if n, err := la.Send(pkts); n != 2 || err != nil {
		t.Fatalf("Send while the peer resolves: n=%d err=%v, want both taken", n, err)
	}
	if st := la.Stats(); st.TxHeld != 2 || st.TxPackets != 0 {
		t.Fatalf("after Send: %+v, want 2 held, none sent", st)
	}
	var done [4]uint64
	if n := la.TxDone(done[:]); n != 1 || done[0] != 77 {
		t.Fatalf("TxDone of a held zero-copy datagram: %v, want its cookie at once", done[:n])
	}
	for i := range heap[:1200] { // the caller may reuse the buffer now
		heap[i] = 0xEE
	}
	testbed.WaitFor(t, "pending entry for the peer", func() bool {
		info, _ := a.Neighbour(bed.B.Addr)
		return info.State == nexthop.NeighbourPending
	})
	for range 5 {
		if err := la.Wait(5 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	var in [4]link.Packet
	if n, _ := lb.Receive(in[:]); n != 0 {
		lb.Release(in[:n])
		t.Fatalf("%d datagrams left while their peer was being resolved", n)
	}

	r.Release(bed.B.Addr, fakeresolver.Answer{MAC: [6]byte(bed.B.MAC)})
	serviceUntil(t, la, "held datagrams sent", func() bool { return la.Stats().TxPackets == 2 })
	got, _ := receiveOne(t, lb)
	if !bytes.Equal(got, first) {
		t.Fatalf("first held datagram arrived as %q", got)
	}
	got, _ = receiveOne(t, lb)
	if !bytes.Equal(got, want) {
		t.Fatalf("held zero-copy datagram arrived changed (%d bytes, want %d)", len(got), len(want))
	}
	if st := la.Stats(); st.TxUnresolved != 0 || st.TxDropped != 0 || la.holding.Load() {
		t.Fatalf("after delivery: %+v holding=%v", st, la.holding.Load())
	}
}

// TestSendToFailedPeer checks negative caching on the link: datagrams to a peer whose
// fakeresolver.Answer failed are dropped and counted, at once and without a new fakeresolver.Answer, a
// FlagZeroCopy one's cookie reported done.
func TestSendToFailedPeer(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	r := fakeresolver.New()
	r.Auto = func(netip.Addr, int) fakeresolver.Answer {
		return fakeresolver.Answer{Err: nexthop.ErrNextHopUnresolved}
	}
	a := openOn(t, bed.A, Config{RingSize: 256, Frames: 512, resolve: r.Resolve, NegativeTTL: time.Minute})
	la := a.Links()[0]
	dead := netip.AddrPortFrom(netip.MustParseAddr("198.18.0.201"), testPort)
	p := []link.Packet{{Remote: dead, Flags: link.FlagZeroCopy, Cookie: 5}}
	p[0].SetData([]byte("hello?"))
	if n, err := la.Send(p); n != 1 || err != nil {
		t.Fatalf("Send: n=%d err=%v", n, err)
	}
	serviceUntil(t, la, "held datagram dropped", func() bool { return la.Stats().TxUnresolved == 1 })
	for i := range 10 {
		p[0].Cookie = uint64(10 + i)
		if n, err := la.Send(p); n != 1 || err != nil {
			t.Fatalf("Send to a failed peer: n=%d err=%v", n, err)
		}
	}
	st := la.Stats()
	if st.TxUnresolved != 11 || st.TxHeld != 1 || st.TxPackets != 0 || st.TxDropped != 11 {
		t.Fatalf("after 10 more datagrams: %+v, want 11 unresolved, 1 held", st)
	}
	if n := r.Calls(dead.Addr()); n != 1 {
		t.Fatalf("%d resolutions, want 1 (negative cache)", n)
	}
	var done [16]uint64
	if n := la.TxDone(done[:]); n != 11 || done[0] != 5 || done[10] != 19 {
		t.Fatalf("cookies %v, want 11 in send order", done[:n])
	}
	err := la.ResolvePeer(context.Background(), dead.Addr())
	if !errors.Is(err, nexthop.ErrNextHopUnresolved) {
		t.Fatalf("ResolvePeer of the failed peer: %v", err)
	}
}

// TestSendInvalidPeer checks that datagrams to addresses that can never be reached are
// refused with an error at once, not held.
func TestSendInvalidPeer(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	la := openOn(t, bed.A, Config{RingSize: 256, Frames: 512}).Links()[0]
	for _, to := range []netip.AddrPort{
		netip.AddrPortFrom(netip.MustParseAddr("224.0.0.1"), testPort),
		netip.AddrPortFrom(netip.MustParseAddr("0.0.0.0"), testPort),
		netip.AddrPortFrom(netip.MustParseAddr("2001:db8::1"), testPort),
		netip.AddrPortFrom(netip.MustParseAddr("::ffff:198.18.0.2"), testPort),
		netip.AddrPortFrom(netip.MustParseAddr("198.18.0.2"), 0),
	} {
		p := []link.Packet{{Remote: to}}
		p[0].SetData([]byte("x"))
		if n, err := la.Send(p); n != 0 || err == nil {
			t.Errorf("Send to %v: n=%d err=%v, want refused", to, n, err)
		}
	}
	if st := la.Stats(); st.TxHeld != 0 {
		t.Fatalf("invalid peers held: %+v", st)
	}
}

// TestSendPortPerDatagram sends to two ports of one peer, the steered port and a kernel
// UDP socket's: both arrive (the kernel verifies the UDP checksum, which covers the
// port), through one table entry.
func TestSendPortPerDatagram(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	a := openOn(t, bed.A, Config{RingSize: 256, Frames: 512})
	b := openOn(t, bed.B, Config{RingSize: 256, Frames: 512})
	la, lb := a.Links()[0], b.Links()[0]
	mustResolve(t, la, bed.B.Addr)
	srv := listenUDP(t, bed.B, testPort+1)
	p := make([]link.Packet, 2)
	p[0] = link.Packet{Remote: lb.LocalAddr()}
	p[0].SetData([]byte("to the xdp port"))
	p[1] = link.Packet{Remote: netip.AddrPortFrom(bed.B.Addr, testPort+1)}
	p[1].SetData([]byte("to the kernel socket"))
	if n, err := la.Send(p); n != 2 || err != nil {
		t.Fatalf("Send: n=%d err=%v", n, err)
	}
	if got, _ := receiveOne(t, lb); string(got) != "to the xdp port" {
		t.Fatalf("xdp port got %q", got)
	}
	if got, _ := readUDP(t, srv); string(got) != "to the kernel socket" {
		t.Fatalf("kernel socket got %q", got)
	}
	if st := a.NeighbourStats(); st.Entries != 1 || st.Resolved != 1 {
		t.Fatalf("table after two ports of one peer: %+v", st)
	}
}

// TestSendResolvedNoAllocs checks that Send allocates nothing with the next-hop table:
// datagrams to a resolved peer, and to a peer cached as failed, alternating (the link's
// last-peer shortcut and its cache both used).
func TestSendResolvedNoAllocs(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	cfg := Config{RingSize: 256, Frames: 512, ResolveTimeout: 300 * time.Millisecond, NegativeTTL: time.Minute}
	a := openOn(t, bed.A, cfg)
	la, lb := a.Links()[0], openOn(t, bed.B, cfg).Links()[0]
	mustResolve(t, la, bed.B.Addr)
	dead := netip.MustParseAddr("198.18.0.99")
	if err := la.ResolvePeer(context.Background(), dead); !errors.Is(err, nexthop.ErrNextHopUnresolved) {
		t.Fatalf("resolve a silent address: %v", err)
	}
	var out [8]link.Packet
	var in [8]link.Packet
	payload := make([]byte, 500)
	for i := range out {
		to := lb.LocalAddr()
		if i%2 == 1 {
			to = netip.AddrPortFrom(dead, testPort)
		}
		out[i] = link.Packet{Remote: to}
		out[i].SetData(payload)
	}
	round := func() {
		if n, err := la.Send(out[:]); n != len(out) || err != nil {
			t.Fatalf("send: %d %v", n, err)
		}
		for got, tries := 0, 0; got < len(out)/2 && tries < 1000; tries++ {
			k, _ := lb.Receive(in[:])
			lb.Release(in[:k])
			got += k
		}
	}
	round()
	if allocs := testing.AllocsPerRun(200, round); allocs != 0 {
		t.Fatalf("Send to a resolved and a failed peer allocates %v times per round", allocs)
	}
	// AllocsPerRun runs round once more than asked, to warm up.
	if st := la.Stats(); st.TxHeld != 0 || st.TxUnresolved != 202*4 || st.TxPackets != 202*4 {
		t.Fatalf("link stats %+v, want %d sent and %d unresolved, none held", st, 202*4, 202*4)
	}
}
