package nexthop

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/xdpndk/xdpndk/internal/linktest"
	"github.com/xdpndk/xdpndk/transport/link"
)

// TestHoldAreaFillsCRC checks link.FlagCRC on the hold path: a held copy of a FlagCRC
// datagram carries the CRC32C of its bytes in place of the junk trailer, as the link would
// have sent it (the held copy goes out later without the flag), whatever its segmentation,
// and the caller's trailer is not written.
func TestHoldAreaFillsCRC(t *testing.T) {
	h := newHoldArea(1500)
	peer := peerN(3)
	buf := make([]byte, 1500)
	var trl [link.CRCLen]byte
	scratch := make([]byte, 4096)
	for i, size := range []int{linktest.MinSize, 13, 100, 1499, 1500} {
		var p link.Packet
		linktest.CRCDatagram(&p, netip.AddrPortFrom(peer, 7), uint64(i), size, 2+i%3, buf, trl[:])
		want := linktest.Wire(nil, &p)
		h.add(&p, int64(i))
		got := h.data(h.n - 1)
		if !bytes.Equal(got, want) {
			t.Fatalf("%d-byte datagram held as %d bytes %x..., want %x...", size, len(got), got[:min(len(got), 16)], want[:min(len(want), 16)])
		}
		var rp link.Packet
		rp.SetData(got)
		if _, err := linktest.CheckCRC(&rp, scratch); err != nil {
			t.Fatal(err)
		}
		if !linktest.TrailerIntact(trl[:]) {
			t.Fatalf("the caller's trailer was written: %x", trl)
		}
		h.remove(h.n - 1)
	}
}
