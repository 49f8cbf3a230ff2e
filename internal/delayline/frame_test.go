package delayline

import (
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
)

// ipChecksum is the header checksum computed in full (RFC 791).
func ipChecksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		if i == 10 {
			continue
		}
		s += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

var (
	portA = Port{MAC: net.HardwareAddr{2, 0, 0, 0, 0, 0xa1}, PeerMAC: net.HardwareAddr{2, 0, 0, 0, 0, 0xa0},
		Addr: netip.MustParseAddr("198.18.1.2"), Prefix: netip.MustParsePrefix("198.18.1.0/24")}
	portB = Port{MAC: net.HardwareAddr{2, 0, 0, 0, 0, 0xb1}, PeerMAC: net.HardwareAddr{2, 0, 0, 0, 0, 0xb0},
		Addr: netip.MustParseAddr("198.18.2.1"), Prefix: netip.MustParsePrefix("198.18.2.0/24")}
)

// frameTo builds an IPv4 frame from A's host to dst with a valid checksum.
func frameTo(dst string, ttl byte, rng *rand.Rand) []byte {
	f := make([]byte, 14+20+8)
	copy(f[0:6], portA.MAC)
	copy(f[6:12], portA.PeerMAC)
	f[12], f[13] = 0x08, 0x00
	ip := f[14:]
	ip[0] = 0x45
	ip[2], ip[3] = 0, 28
	ip[4], ip[5] = byte(rng.Uint32()), byte(rng.Uint32())
	ip[8], ip[9] = ttl, 17
	copy(ip[12:16], []byte{198, 18, 1, 1})
	d := netip.MustParseAddr(dst).As4()
	copy(ip[16:20], d[:])
	c := ipChecksum(ip[:20])
	ip[10], ip[11] = byte(c>>8), byte(c)
	return f
}

func TestRouteChecksum(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 100_000 {
		f := frameTo("198.18.2.2", byte(2+rng.IntN(254)), rng)
		f[14+4], f[14+5] = byte(i), byte(i>>8)
		c := ipChecksum(f[14:34])
		f[14+10], f[14+11] = byte(c>>8), byte(c)
		if !forwardable(f, &portA, &portB) {
			t.Fatal("a frame to B's subnet is not forwardable")
		}
		ttl := f[14+8]
		route(f, &portB)
		if f[14+8] != ttl-1 {
			t.Fatal("TTL not decremented")
		}
		got := uint16(f[14+10])<<8 | uint16(f[14+11])
		if want := ipChecksum(f[14:34]); got != want && !(got == 0xffff && want == 0) && !(got == 0 && want == 0xffff) {
			t.Fatalf("checksum %04x after the TTL, want %04x", got, want)
		}
		if string(f[0:6]) != string(portB.PeerMAC) || string(f[6:12]) != string(portB.MAC) {
			t.Fatal("MACs not rewritten")
		}
	}
}

func TestForwardable(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	ok := frameTo("198.18.2.2", 64, rng)
	if !forwardable(ok, &portA, &portB) {
		t.Fatal("frame to B not forwardable")
	}
	for name, f := range map[string][]byte{
		"to the router":     frameTo("198.18.2.1", 64, rng),
		"to the router's A": frameTo("198.18.1.2", 64, rng),
		"outside B":         frameTo("198.18.3.2", 64, rng),
		"TTL 1":             frameTo("198.18.2.2", 1, rng),
		"short":             ok[:30],
	} {
		if forwardable(f, &portA, &portB) {
			t.Errorf("%s: forwardable", name)
		}
	}
	arp := append([]byte(nil), ok...)
	arp[12], arp[13] = 0x08, 0x06
	other := append([]byte(nil), ok...)
	other[0] = 0xff
	for name, f := range map[string][]byte{"ARP": arp, "other MAC": other} {
		if forwardable(f, &portA, &portB) {
			t.Errorf("%s: forwardable", name)
		}
	}
}
