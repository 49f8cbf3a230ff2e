package xdp

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/xdpndk/xdpndk/xdp/frame"
	"github.com/xdpndk/xdpndk/xdp/xsk"

	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport/link"
)

// testPool returns a pool of the first n frames of a UMEM of 4 KiB frames (frames in all,
// on normal pages), closed when the test ends.
func testPool(t testing.TB, frames, n int) (*memreg.UMEM, *memreg.FramePool) {
	t.Helper()
	u, err := memreg.NewUMEM(memreg.UMEMOptions{FrameSize: 4096, Frames: frames, HugePages: memreg.HugeOff})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	pool, err := u.NewFramePool(n)
	if err != nil {
		t.Fatal(err)
	}
	return u, pool
}

// unwrapFixture is a Link with just the state unwrap reads: a small UMEM whose first frames
// form the link's pool, and a local address.
func unwrapFixture(t testing.TB) *Link {
	// Frames 0..5 belong to the link; 6 and 7 to somebody else.
	u, pool := testPool(t, 8, 6)
	return &Link{
		umem: u, mem: u.Bytes(), pool: pool, fsize: 4096,
		local: netip.AddrPortFrom(netip.MustParseAddr("198.18.0.2"), testPort),
	}
}

// seedFrame writes a valid datagram of n payload bytes from 198.18.0.1 into the frame at
// offset addr and returns its length.
func seedFrame(t testing.TB, mem []byte, addr, n int) int {
	e := frame.Encap{
		SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2},
		Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("198.18.0.2"),
		SrcPort: 40000, DstPort: testPort,
	}
	if err := e.Validate(); err != nil {
		t.Fatal(err)
	}
	var sum frame.Checksum
	hl, err := e.Put(mem[addr:], n, &sum, 0)
	if err != nil {
		t.Fatal(err)
	}
	return hl + n
}

// FuzzUnwrap feeds unwrap arbitrary descriptors (as a broken kernel might) over arbitrary
// frame contents (as the network might): it must never panic, and what it accepts must be
// a datagram to our address whose segments lie inside the link's own frames.
func FuzzUnwrap(f *testing.F) {
	l := unwrapFixture(f)
	n := seedFrame(f, l.mem, 256, 100)
	seed := func(descs ...xsk.Desc) []byte {
		b := []byte{byte(len(descs))}
		for _, d := range descs {
			b = binary.LittleEndian.AppendUint32(b, uint32(d.Addr))
			b = binary.LittleEndian.AppendUint16(b, uint16(d.Len))
			b = append(b, byte(d.Options))
		}
		return append(b, l.mem[256:256+n]...)
	}
	f.Add(seed(xsk.Desc{Addr: 256, Len: uint32(n)}))
	f.Add(seed(xsk.Desc{Addr: 256, Len: 60, Options: xsk.DescContinued}, xsk.Desc{Addr: 4096, Len: uint32(n - 60)}))
	f.Add(seed(xsk.Desc{Addr: 6 * 4096, Len: uint32(n)}))
	f.Add(seed(xsk.Desc{Addr: 1 << 31, Len: 65535}))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 1 {
			return
		}
		nd := int(in[0])%(link.MaxSegments+2) + 1
		in = in[1:]
		descs := make([]xsk.Desc, 0, nd)
		for range nd {
			if len(in) < 7 {
				return
			}
			descs = append(descs, xsk.Desc{
				Addr:    uint64(binary.LittleEndian.Uint32(in)),
				Len:     uint32(binary.LittleEndian.Uint16(in[4:])),
				Options: uint32(in[6]),
			})
			in = in[7:]
		}
		// The rest is frame content, written where the first descriptor points if that is
		// inside the umem.
		clear(l.mem)
		if a := descs[0].Addr; a < uint64(len(l.mem)) {
			copy(l.mem[a:], in)
		}
		var p link.Packet
		if !l.unwrap(descs, &p) {
			return
		}
		if int(p.NSegs) != len(descs) || p.NSegs > link.MaxSegments || p.Len() == 0 {
			t.Fatalf("accepted %d descriptors as %d segments of %d bytes", len(descs), p.NSegs, p.Len())
		}
		if p.LocalPort != l.local.Port() || !p.Remote.IsValid() {
			t.Fatalf("accepted a datagram to port %d from %v", p.LocalPort, p.Remote)
		}
		for i := range int(p.NSegs) {
			off, ok := offsetIn(l.mem, p.Segs[i])
			end := off + uint64(len(p.Segs[i])) - 1
			if !ok || !l.pool.Owns(off) || off/l.fsize != end/l.fsize {
				t.Fatalf("segment %d at offset %d+%d (ok=%v) outside one of the link's frames", i, off, len(p.Segs[i]), ok)
			}
		}
	})
}

// TestUnwrapRejects checks unwrap's refusals one by one.
func TestUnwrapRejects(t *testing.T) {
	l := unwrapFixture(t)
	n := seedFrame(t, l.mem, 256, 100)
	var p link.Packet
	if !l.unwrap([]xsk.Desc{{Addr: 256, Len: uint32(n)}}, &p) || p.Len() != 100 {
		t.Fatalf("valid datagram refused (len %d)", p.Len())
	}
	for name, descs := range map[string][]xsk.Desc{
		"frame of another pool":      {{Addr: 6*4096 + 256, Len: uint32(n)}},
		"beyond the umem":            {{Addr: 1 << 40, Len: 10}},
		"length past the umem":       {{Addr: 7*4096 + 4000, Len: 4096}},
		"buffer crossing its frame":  {{Addr: 4096 - 100, Len: 200}},
		"too many segments":          {{Addr: 256, Len: 60}, {Addr: 4096, Len: 1}, {Addr: 8192, Len: 1}, {Addr: 12288, Len: 1}, {Addr: 16384, Len: 1}},
		"frame shorter than headers": {{Addr: 256, Len: 20}},
		"trailing buffer beyond UDP": {{Addr: 256, Len: uint32(n)}, {Addr: 4096, Len: 50}},
	} {
		if l.unwrap(descs, &p) {
			t.Errorf("%s: accepted", name)
		}
	}
	// Addressed to another port or address.
	for _, local := range []netip.AddrPort{
		netip.AddrPortFrom(netip.MustParseAddr("198.18.0.3"), testPort),
		netip.AddrPortFrom(netip.MustParseAddr("198.18.0.2"), testPort+1),
	} {
		l.local = local
		if l.unwrap([]xsk.Desc{{Addr: 256, Len: uint32(n)}}, &p) {
			t.Errorf("datagram to 198.18.0.2:%d accepted by a link on %v", testPort, local)
		}
	}
}
