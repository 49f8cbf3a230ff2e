package nexthop

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/xdp/frame"

	"github.com/xdpndk/xdpndk/transport/link"
)

// fakeHopsLink is a Transmitter that records what it is asked to transmit, without allocating.
type fakeHopsLink struct {
	n      int
	bytes  int
	remote netip.AddrPort
	first  byte
	full   bool // no room: transmit reports false
}

func (f *fakeHopsLink) Transmit(p *link.Packet, _ *frame.Encap, plen int) (bool, error) {
	if f.full {
		return false, nil
	}
	f.n++
	f.bytes += plen
	f.remote = p.Remote
	f.first = p.Segs[0][0]
	return true, nil
}

// testNextHops returns a link's next hops over table t, transmitting through f.
func testNextHops(t *neighTable, f *fakeHopsLink, holding *atomic.Bool) Hops {
	return Hops{
		table: t, local: netip.MustParseAddr("198.18.0.1"), link: f,
		cache: make(map[netip.Addr]*neighEntry, linkCacheMax), hold: newHoldArea(64),
		holdMax: time.Hour, holding: holding,
	}
}

// TestNextHopsHoldThenSend checks the next hops on their own: a datagram to a pending
// peer is held (and the link flagged as holding), a service pass leaves it while the peer
// is pending and sends it through the link, whole and to its peer, once the table has
// resolved the peer; a blocked link keeps it for the next pass; a datagram to a failed peer
// is dropped and counted.
func TestNextHopsHoldThenSend(t *testing.T) {
	tbl := newNeighTable(16)
	peer := peerN(7)
	e := tbl.insert(peer, 0, nil)
	f := &fakeHopsLink{}
	var holding atomic.Bool
	h := testNextHops(tbl, f, &holding)

	s := h.Lookup(peer)
	if s == nil || s.state != NeighbourPending {
		t.Fatalf("snapshot of a pending peer: %+v", s)
	}
	if err := h.Take(testPacket(peer, 4791, 10, 40), peer, s); err != nil {
		t.Fatal(err)
	}
	if h.hold.n != 1 || !holding.Load() || h.acc.Held != 1 {
		t.Fatalf("after take: %d held, holding %v, %+v", h.hold.n, holding.Load(), h.acc)
	}
	if h.Service() || f.n != 0 || h.hold.n != 1 {
		t.Fatalf("a pending peer's datagram was sent: %d sent, %d held", f.n, h.hold.n)
	}

	tbl.publish(e, &Snap{state: NeighbourResolved})
	tbl.gen.Add(1)
	f.full = true
	if h.Service() || h.hold.n != 1 || !holding.Load() {
		t.Fatalf("a blocked link lost the held datagram: %d held", h.hold.n)
	}
	f.full = false
	if !h.Service() {
		t.Fatal("the retry after a blocked pass sent nothing")
	}
	if f.n != 1 || f.bytes != 10 || f.first != 40 || f.remote != netip.AddrPortFrom(peer, 4791) {
		t.Fatalf("sent %d datagrams, %d bytes, first byte %d, to %v", f.n, f.bytes, f.first, f.remote)
	}
	if h.hold.n != 0 || holding.Load() {
		t.Fatalf("after sending: %d held, holding %v", h.hold.n, holding.Load())
	}

	tbl.publish(e, &Snap{state: NeighbourFailed})
	if err := h.Take(testPacket(peer, 4791, 10, 0), peer, h.Lookup(peer)); err != nil {
		t.Fatal(err)
	}
	if h.hold.n != 0 || h.acc.Unresolved != 1 || h.acc.Held != 1 {
		t.Fatalf("a failed peer's datagram: %d held, %+v", h.hold.n, h.acc)
	}
}

// TestNextHopsNoAllocs checks that holding a datagram and sending it once its peer resolves
// allocates nothing.
func TestNextHopsNoAllocs(t *testing.T) {
	tbl := newNeighTable(16)
	peer := peerN(9)
	e := tbl.insert(peer, 0, nil)
	resolved := &Snap{state: NeighbourResolved}
	f := &fakeHopsLink{}
	var holding atomic.Bool
	h := testNextHops(tbl, f, &holding)
	p := testPacket(peer, 4791, 32, 1)
	round := func() {
		tbl.publish(e, pendingSnap)
		if err := h.Take(p, peer, h.Lookup(peer)); err != nil {
			t.Fatal(err)
		}
		tbl.publish(e, resolved)
		tbl.gen.Add(1)
		if !h.Service() {
			t.Fatal("held datagram not sent")
		}
	}
	round()
	if allocs := testing.AllocsPerRun(200, round); allocs != 0 {
		t.Fatalf("hold and send allocates %v times per round", allocs)
	}
	// AllocsPerRun runs round once more than asked, to warm up.
	if want := 1 + 201; f.n != want || h.acc.Held != uint64(want) || h.hold.n != 0 {
		t.Fatalf("%d sent, %d held in all, %d still held; want %d", f.n, h.acc.Held, h.hold.n, want)
	}
}
