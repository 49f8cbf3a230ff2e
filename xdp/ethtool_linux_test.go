package xdp

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"
)

// The n-tuple rule for our port: UDP over IPv4 or IPv6, destination address and port
// matched with full masks, the queue as ring cookie, any location; laid out as struct
// ethtool_rxnfc for both __u64 alignments (include/uapi/linux/ethtool.h: the sizes are
// 192 and 180 bytes, ring_cookie at 168 and 164, location at 176 and 172 from its start).
func TestNtupleRule(t *testing.T) {
	r := ntupleRule(netip.MustParseAddr("198.18.0.2"), 4793, 3)
	if r.FlowType != udpV4Flow || r.RingCookie != 3 || r.Location != rxClsLocAny {
		t.Fatalf("v4 rule %+v", r)
	}
	if got := r.HU[4:12]; !slices.Equal(got, []byte{198, 18, 0, 2, 0, 0, 0x12, 0xb9}) {
		t.Fatalf("v4 values %x (dst address, source port 0, dst port 4793)", got)
	}
	if got := r.MU[:13]; !slices.Equal(got, []byte{0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0xff, 0xff, 0}) {
		t.Fatalf("v4 masks %x: only dst address and port matched", got)
	}
	r6 := ntupleRule(netip.MustParseAddr("2001:db8::1"), 4793, 1)
	if r6.FlowType != udpV6Flow || r6.HU[16] != 0x20 || r6.HU[31] != 1 || r6.HU[35] != 0xb9 || r6.MU[34] != 0xff || r6.MU[0] != 0 {
		t.Fatalf("v6 rule %+v", r6)
	}
	for _, c := range []struct{ align, size, cookie, loc int }{{8, 192, 168, 176}, {4, 180, 164, 172}} {
		var b rxnfc
		out := b.put(ethtoolSRXCLSRLINS, &r, c.align)
		ne := binary.NativeEndian
		if len(out) != c.size || ne.Uint32(out[0:]) != ethtoolSRXCLSRLINS || ne.Uint32(out[4:]) != udpV4Flow ||
			ne.Uint32(out[16:]) != udpV4Flow || out[16+4+4] != 198 || out[16+76+4] != 0xff ||
			ne.Uint64(out[c.cookie:]) != 3 || ne.Uint32(out[c.loc:]) != rxClsLocAny {
			t.Fatalf("align %d: layout %x", c.align, out)
		}
		ne.PutUint32(out[c.loc:], 7) // the kernel's choice of location
		if got := b.location(c.align); got != 7 {
			t.Fatalf("align %d: location %d read back, want 7", c.align, got)
		}
	}
}
