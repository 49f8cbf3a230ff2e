package frame

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

var (
	testMACA = [6]byte{0x02, 0x00, 0x5e, 0x10, 0x00, 0x01}
	testMACB = [6]byte{0x02, 0x00, 0x5e, 0x10, 0x00, 0x02}
)

func testEncap4() Encap {
	return Encap{
		SrcMAC: testMACA, DstMAC: testMACB,
		Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("198.18.0.2"),
		SrcPort: 40000, DstPort: 4791,
	}
}

func testEncap6() Encap {
	return Encap{
		SrcMAC: testMACA, DstMAC: testMACB,
		Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"),
		SrcPort: 40000, DstPort: 4791,
	}
}

// encapFamilies are the IPv4 and IPv6 test encapsulations, by name.
var encapFamilies = []struct {
	name string
	enc  func() Encap
}{{"ipv4", testEncap4}, {"ipv6", testEncap6}}

func mustValidate(t testing.TB, e *Encap) {
	t.Helper()
	if err := e.Validate(); err != nil {
		t.Fatalf("Validate(%+v): %v", e, err)
	}
}

// slowFrame builds the frame Put plus the payload should produce, independently of Put: from
// the field definitions of RFC 791, 8200 and 768, with appends and the reference checksum.
func slowFrame(e *Encap, srcPort uint16, payload []byte) []byte {
	if srcPort == 0 {
		srcPort = e.SrcPort
	}
	ttl := e.TTL
	if ttl == 0 {
		ttl = 64
	}
	be := binary.BigEndian
	f := append(append([]byte{}, e.DstMAC[:]...), e.SrcMAC[:]...)
	if e.VLAN != 0 {
		f = be.AppendUint16(f, 0x8100)
		f = be.AppendUint16(f, e.VLAN)
	}
	udpLen := 8 + len(payload)
	udp := be.AppendUint16(nil, srcPort)
	udp = be.AppendUint16(udp, e.DstPort)
	udp = be.AppendUint16(udp, uint16(udpLen))
	udp = append(udp, 0, 0)
	udp = append(udp, payload...)
	var pseudo, ip []byte
	if e.Src.Is4() {
		s, d := e.Src.As4(), e.Dst.As4()
		pseudo = append(append(append([]byte{}, s[:]...), d[:]...), 0, 17)
		pseudo = be.AppendUint16(pseudo, uint16(udpLen))
		ip = []byte{0x45, e.DSCP << 2}
		ip = be.AppendUint16(ip, uint16(20+udpLen))
		ip = append(ip, 0, 0, 0x40, 0, ttl, 17, 0, 0)
		ip = append(append(ip, s[:]...), d[:]...)
		be.PutUint16(ip[10:], refChecksum(ip))
		f = be.AppendUint16(f, 0x0800)
	} else {
		s, d := e.Src.As16(), e.Dst.As16()
		pseudo = append(append([]byte{}, s[:]...), d[:]...)
		pseudo = be.AppendUint32(pseudo, uint32(udpLen))
		pseudo = append(pseudo, 0, 0, 0, 17)
		tc := e.DSCP << 2
		ip = []byte{0x60 | tc>>4, tc << 4, 0, 0}
		ip = be.AppendUint16(ip, uint16(udpLen))
		ip = append(ip, 17, ttl)
		ip = append(append(ip, s[:]...), d[:]...)
		f = be.AppendUint16(f, 0x86DD)
	}
	ck := refChecksum(append(pseudo, udp...))
	if ck == 0 {
		ck = 0xFFFF
	}
	be.PutUint16(udp[6:], ck)
	return append(append(f, ip...), udp...)
}

// buildFrame builds a frame with Put, summing the payload in segments of the given sizes
// (the remainder forms the last segment).
func buildFrame(t testing.TB, e *Encap, srcPort uint16, payload []byte, segs ...int) []byte {
	t.Helper()
	var c Checksum
	rest := payload
	for _, k := range segs {
		k = min(k, len(rest))
		c.Add(rest[:k])
		rest = rest[k:]
	}
	c.Add(rest)
	frame := make([]byte, e.HeaderLen()+len(payload))
	n, err := e.Put(frame, len(payload), &c, srcPort)
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	if n != e.HeaderLen() {
		t.Fatalf("Put returned %d, HeaderLen is %d", n, e.HeaderLen())
	}
	copy(frame[n:], payload)
	return frame
}

func TestEncapHeaderLen(t *testing.T) {
	for _, tc := range []struct {
		v6   bool
		vlan uint16
		want int
	}{{false, 0, 42}, {false, 100, 46}, {true, 0, 62}, {true, 0xE064, 66}} {
		e := testEncap4()
		if tc.v6 {
			e = testEncap6()
		}
		e.VLAN = tc.vlan
		if got := e.HeaderLen(); got != tc.want {
			t.Errorf("v6=%v vlan=%#x: HeaderLen = %d, want %d", tc.v6, tc.vlan, got, tc.want)
		}
		mustValidate(t, &e)
		if int(e.hdrLen) != tc.want {
			t.Errorf("v6=%v vlan=%#x: template length %d, want %d", tc.v6, tc.vlan, e.hdrLen, tc.want)
		}
	}
	if MaxHeaderLen != 66 {
		t.Errorf("MaxHeaderLen = %d, want 66", MaxHeaderLen)
	}
}

// TestEncapRoundTrip builds frames with Put, compares them byte for byte with the
// independent slow builder, parses them back, and verifies the UDP checksum, also with the
// frame split into several buffers.
func TestEncapRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	type tc struct {
		name    string
		enc     func() Encap
		vlan    uint16
		ttl     uint8
		dscp    uint8
		srcPort uint16
		payload int
		segs    []int
	}
	var cases []tc
	for _, fam := range encapFamilies {
		for _, n := range []int{0, 1, 2, 3, 7, 8, 63, 64, 255, 1000, 1471, 1472, 4093, 8999} {
			cases = append(cases, tc{name: fmt.Sprintf("%s/len%d", fam.name, n), enc: fam.enc, payload: n})
		}
		cases = append(cases,
			tc{name: fam.name + "/vlan", enc: fam.enc, vlan: 0xA07B, payload: 101},
			tc{name: fam.name + "/vlan0prio", enc: fam.enc, vlan: 0xE000, payload: 100},
			tc{name: fam.name + "/ttl-dscp", enc: fam.enc, ttl: 3, dscp: 46, payload: 33},
			tc{name: fam.name + "/srcport", enc: fam.enc, srcPort: 0xFFFF, payload: 500},
			tc{name: fam.name + "/odd-segs", enc: fam.enc, payload: 1001, segs: []int{1, 3, 5, 7, 0, 13, 600}},
			tc{name: fam.name + "/byte-segs", enc: fam.enc, payload: 9, segs: []int{1, 1, 1, 1, 1, 1, 1, 1}},
		)
	}
	e := testEncap4()
	mustValidate(t, &e)
	cases = append(cases, tc{name: "ipv4/max", enc: testEncap4, payload: e.MaxPayload()})
	e = testEncap6()
	cases = append(cases, tc{name: "ipv6/max", enc: testEncap6, payload: e.MaxPayload()})

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := c.enc()
			e.VLAN, e.TTL, e.DSCP = c.vlan, c.ttl, c.dscp
			mustValidate(t, &e)
			payload := randBytes(r, c.payload)
			frame := buildFrame(t, &e, c.srcPort, payload, c.segs...)
			if want := slowFrame(&e, c.srcPort, payload); !bytes.Equal(frame, want) {
				t.Fatalf("Put frame differs from the reference builder\n got %x\nwant %x",
					frame[:e.HeaderLen()], want[:min(len(want), e.HeaderLen())])
			}
			var d Datagram
			if err := ParseUDP(frame, len(frame), &d); err != nil {
				t.Fatalf("ParseUDP: %v", err)
			}
			wantSrcPort := c.srcPort
			if wantSrcPort == 0 {
				wantSrcPort = e.SrcPort
			}
			want := Datagram{
				SrcMAC: e.SrcMAC, DstMAC: e.DstMAC, VLAN: c.vlan,
				Src:           netip.AddrPortFrom(e.Src, wantSrcPort),
				Dst:           netip.AddrPortFrom(e.Dst, e.DstPort),
				PayloadOffset: e.HeaderLen(), PayloadLen: c.payload,
			}
			if d != want {
				t.Fatalf("ParseUDP = %+v\nwant       %+v", d, want)
			}
			if !bytes.Equal(d.Payload(frame), payload) {
				t.Fatal("Payload does not return the payload")
			}
			if err := VerifyUDPChecksum(&d, frame); err != nil {
				t.Fatalf("VerifyUDPChecksum: %v", err)
			}
			// The same frame as a multi-buffer frame: headers in the first buffer,
			// the payload cut into odd pieces.
			if c.payload > 3 {
				cut1 := e.HeaderLen() + 1
				cut2 := cut1 + (c.payload-1)/2
				first, b2, b3 := frame[:cut1], frame[cut1:cut2], frame[cut2:]
				var dm Datagram
				if err := ParseUDP(first, len(frame), &dm); err != nil {
					t.Fatalf("ParseUDP multi-buffer: %v", err)
				}
				if dm != want {
					t.Fatalf("ParseUDP multi-buffer = %+v, want %+v", dm, want)
				}
				if err := VerifyUDPChecksum(&dm, first, b2, b3); err != nil {
					t.Fatalf("VerifyUDPChecksum multi-buffer: %v", err)
				}
				if err := VerifyUDPChecksum(&dm, first, b2); !errors.Is(err, ErrTruncated) {
					t.Fatalf("VerifyUDPChecksum missing buffer: %v, want ErrTruncated", err)
				}
			}
			// A flipped payload bit must fail the UDP checksum.
			if c.payload > 0 {
				frame[len(frame)-1] ^= 0x10
				if err := VerifyUDPChecksum(&d, frame); !errors.Is(err, ErrBadChecksum) {
					t.Fatalf("VerifyUDPChecksum on corrupted payload: %v, want ErrBadChecksum", err)
				}
			}
		})
	}
}

// TestEncapChecksumZeroSentAsFFFF picks a payload whose UDP checksum computes to 0 and checks
// that 0xFFFF is sent instead, for both IP versions.
func TestEncapChecksumZeroSentAsFFFF(t *testing.T) {
	for _, enc := range []func() Encap{testEncap4, testEncap6} {
		e := enc()
		mustValidate(t, &e)
		frame := buildFrame(t, &e, 0, []byte{0, 0})
		udpCk := frame[len(frame)-4 : len(frame)-2]
		// With the payload word equal to the checksum of the zero payload, the sum
		// becomes 0xFFFF and the computed checksum 0.
		payload := []byte{udpCk[0], udpCk[1]}
		frame = buildFrame(t, &e, 0, payload)
		if got := binary.BigEndian.Uint16(frame[len(frame)-4:]); got != 0xFFFF {
			t.Fatalf("%v: UDP checksum field %#04x, want 0xffff", e.Src, got)
		}
		var d Datagram
		if err := ParseUDP(frame, len(frame), &d); err != nil {
			t.Fatal(err)
		}
		if err := VerifyUDPChecksum(&d, frame); err != nil {
			t.Fatalf("%v: VerifyUDPChecksum: %v", e.Src, err)
		}
	}
}

func TestEncapNoChecksum(t *testing.T) {
	e := testEncap4()
	mustValidate(t, &e)
	frame := make([]byte, e.HeaderLen()+5)
	if _, err := e.Put(frame, 5, nil, 0); err != nil {
		t.Fatalf("Put IPv4 without checksum: %v", err)
	}
	var d Datagram
	if err := ParseUDP(frame, len(frame), &d); err != nil {
		t.Fatal(err)
	}
	if got := binary.BigEndian.Uint16(frame[e.HeaderLen()-2:]); got != 0 {
		t.Fatalf("UDP checksum field %#04x, want 0", got)
	}
	if err := VerifyUDPChecksum(&d, frame); err != nil {
		t.Fatalf("VerifyUDPChecksum of an IPv4 datagram without checksum: %v", err)
	}
	e6 := testEncap6()
	mustValidate(t, &e6)
	frame = make([]byte, e6.HeaderLen())
	if _, err := e6.Put(frame, 0, nil, 0); !errors.Is(err, ErrBadChecksum) {
		t.Fatalf("Put IPv6 without checksum: %v, want ErrBadChecksum", err)
	}
	// An IPv6 frame with checksum 0 is refused by ParseUDP and fails verification.
	frame = buildFrame(t, &e6, 0, []byte{1, 2, 3})
	binary.BigEndian.PutUint16(frame[e6.HeaderLen()-2:], 0)
	if err := ParseUDP(frame, len(frame), &d); err != ErrBadChecksum {
		t.Fatalf("ParseUDP of IPv6 with zero checksum: %v, want ErrBadChecksum", err)
	}
	d.PayloadOffset, d.PayloadLen = e6.HeaderLen(), 3
	d.Src = netip.AddrPortFrom(e6.Src, e6.SrcPort)
	d.Dst = netip.AddrPortFrom(e6.Dst, e6.DstPort)
	if err := VerifyUDPChecksum(&d, frame); !errors.Is(err, ErrBadChecksum) {
		t.Fatalf("VerifyUDPChecksum of IPv6 with zero checksum: %v, want ErrBadChecksum", err)
	}
}

func TestEncapPutErrors(t *testing.T) {
	var sum Checksum
	e := testEncap4()
	buf := make([]byte, 100)
	if _, err := e.Put(buf, 0, &sum, 0); !errors.Is(err, ErrEncapNotValidated) {
		t.Errorf("Put before Validate: %v, want ErrEncapNotValidated", err)
	}
	mustValidate(t, &e)
	if _, err := e.Put(buf[:41], 0, &sum, 0); !errors.Is(err, ErrNoHeadroom) {
		t.Errorf("Put into 41 bytes: %v, want ErrNoHeadroom", err)
	}
	for _, n := range []int{-1, 65508, math.MaxInt} {
		if _, err := e.Put(buf, n, &sum, 0); !errors.Is(err, ErrPayloadTooLarge) {
			t.Errorf("Put payload %d: %v, want ErrPayloadTooLarge", n, err)
		}
	}
	if _, err := e.Put(buf, 65507, &sum, 0); err != nil {
		t.Errorf("Put payload 65507 over IPv4: %v", err)
	}
	e6 := testEncap6()
	mustValidate(t, &e6)
	if _, err := e6.Put(buf, 65528, &sum, 0); !errors.Is(err, ErrPayloadTooLarge) {
		t.Errorf("Put payload 65528 over IPv6: %v, want ErrPayloadTooLarge", err)
	}
	if _, err := e6.Put(buf, 65527, &sum, 0); err != nil {
		t.Errorf("Put payload 65527 over IPv6: %v", err)
	}
	// A failed Validate disables the old template.
	e.Dst = netip.Addr{}
	if err := e.Validate(); err == nil {
		t.Fatal("Validate with no destination succeeded")
	}
	if _, err := e.Put(buf, 0, &sum, 0); !errors.Is(err, ErrEncapNotValidated) {
		t.Errorf("Put after failed Validate: %v, want ErrEncapNotValidated", err)
	}
}

func TestEncapValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(e *Encap)
	}{
		{"no src", func(e *Encap) { e.Src = netip.Addr{} }},
		{"no dst", func(e *Encap) { e.Dst = netip.Addr{} }},
		{"mixed families", func(e *Encap) { e.Dst = netip.MustParseAddr("2001:db8::2") }},
		{"mapped", func(e *Encap) {
			e.Src = netip.MustParseAddr("::ffff:198.18.0.1")
			e.Dst = netip.MustParseAddr("::ffff:198.18.0.2")
		}},
		{"unspecified src", func(e *Encap) { e.Src = netip.IPv4Unspecified() }},
		{"multicast dst", func(e *Encap) { e.Dst = netip.MustParseAddr("224.0.0.1") }},
		{"zero src port", func(e *Encap) { e.SrcPort = 0 }},
		{"zero dst port", func(e *Encap) { e.DstPort = 0 }},
		{"dscp", func(e *Encap) { e.DSCP = 64 }},
		{"vlan dei", func(e *Encap) { e.VLAN = 0x1005 }},
		{"vlan 4095", func(e *Encap) { e.VLAN = 0x0FFF }},
		{"multicast src mac", func(e *Encap) { e.SrcMAC = [6]byte{1, 0, 0x5e, 0, 0, 1} }},
		{"zero src mac", func(e *Encap) { e.SrcMAC = [6]byte{} }},
		{"zero dst mac", func(e *Encap) { e.DstMAC = [6]byte{} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := testEncap4()
			tc.mod(&e)
			err := e.Validate()
			if !errors.Is(err, ErrInvalidEncap) {
				t.Fatalf("Validate = %v, want ErrInvalidEncap", err)
			}
		})
	}
	e := testEncap6()
	e.Src = netip.MustParseAddr("fe80::1%eth0")
	e.Dst = netip.MustParseAddr("fe80::2%eth0")
	mustValidate(t, &e)
}

// goodFrame4 returns a valid IPv4 frame with a 16-byte payload (header 42 bytes).
func goodFrame4(t testing.TB) []byte {
	e := testEncap4()
	mustValidate(t, &e)
	return buildFrame(t, &e, 0, bytes.Repeat([]byte{0xAB}, 16))
}

// goodFrame6 returns a valid IPv6 frame with a 16-byte payload (header 62 bytes).
func goodFrame6(t testing.TB) []byte {
	e := testEncap6()
	mustValidate(t, &e)
	return buildFrame(t, &e, 0, bytes.Repeat([]byte{0xCD}, 16))
}

// fixIPv4Checksum recomputes the IPv4 header checksum of a frame whose IP header starts at
// off, so that a test can change other fields.
func fixIPv4Checksum(f []byte, off int) {
	ihl := int(f[off]&0xF) * 4
	f[off+10], f[off+11] = 0, 0
	binary.BigEndian.PutUint16(f[off+10:], refChecksum(f[off:off+ihl]))
}

// insertIPv6Ext inserts an IPv6 extension header of type ext and length 8*(1+units) right
// after the fixed header of an untagged IPv6 frame, fixing the next-header chain and the
// payload length.
func insertIPv6Ext(f []byte, ext byte, units int) []byte {
	const ipOff = 14
	h := make([]byte, 8*(1+units))
	h[0] = f[ipOff+6] // next header
	h[1] = byte(units)
	out := append(append(append([]byte{}, f[:ipOff+40]...), h...), f[ipOff+40:]...)
	out[ipOff+6] = ext
	pl := binary.BigEndian.Uint16(out[ipOff+4:])
	binary.BigEndian.PutUint16(out[ipOff+4:], pl+uint16(len(h)))
	return out
}

// frameEdit changes a test frame in place or returns a new one.
type frameEdit func(f []byte) []byte

// edited returns a frame maker: the frame base makes, with the edits applied in order.
func edited(base func(testing.TB) []byte, edits ...frameEdit) func(testing.TB) []byte {
	return func(t testing.TB) []byte {
		f := base(t)
		for _, edit := range edits {
			f = edit(f)
		}
		return f
	}
}

// setByte sets the byte at off to v.
func setByte(off int, v byte) frameEdit {
	return func(f []byte) []byte { f[off] = v; return f }
}

// flipBits flips the bits of mask in the byte at off.
func flipBits(off int, mask byte) frameEdit {
	return func(f []byte) []byte { f[off] ^= mask; return f }
}

// put16 stores v big-endian at off.
func put16(off int, v uint16) frameEdit {
	return func(f []byte) []byte { binary.BigEndian.PutUint16(f[off:], v); return f }
}

// add16 adds delta to the big-endian 16-bit field at off.
func add16(off int, delta uint16) frameEdit {
	return func(f []byte) []byte {
		binary.BigEndian.PutUint16(f[off:], binary.BigEndian.Uint16(f[off:])+delta)
		return f
	}
}

// cutTo keeps the first n bytes.
func cutTo(n int) frameEdit { return func(f []byte) []byte { return f[:n] } }

// pad appends n zero bytes (Ethernet padding).
func pad(n int) frameEdit {
	return func(f []byte) []byte { return append(f[:len(f):len(f)], make([]byte, n)...) }
}

// fixSum recomputes the IPv4 header checksum of an untagged frame.
func fixSum(f []byte) []byte { fixIPv4Checksum(f, 14); return f }

// withTags inserts VLAN tags (TPID and TCI pairs) right after the MAC addresses.
func withTags(tags ...byte) frameEdit {
	return func(f []byte) []byte { return slices.Concat(f[:12], tags, f[12:]) }
}

// withIPv4Options inserts opts (a multiple of 4 bytes) after the 20-byte IPv4 header of an
// untagged frame, fixing the header length, the total length and the checksum.
func withIPv4Options(opts []byte) frameEdit {
	return func(f []byte) []byte {
		out := slices.Concat(f[:34], opts, f[34:])
		out[14] = 0x40 | byte((20+len(opts))/4)
		return fixSum(add16(16, uint16(len(opts)))(out))
	}
}

// withIPv6Ext inserts an extension header with insertIPv6Ext.
func withIPv6Ext(ext byte, units int) frameEdit {
	return func(f []byte) []byte { return insertIPv6Ext(f, ext, units) }
}

func TestParseUDPAccepts(t *testing.T) {
	for _, tc := range []struct {
		name       string
		frame      func(t testing.TB) []byte
		extra      int // totalLen - len(frame)
		wantOff    int
		wantLen    int
		wantVLAN   uint16
		wantSrcStr string
	}{
		{name: "ipv4", frame: goodFrame4, wantOff: 42, wantLen: 16, wantSrcStr: "198.18.0.1:40000"},
		{name: "ipv6", frame: goodFrame6, wantOff: 62, wantLen: 16, wantSrcStr: "[2001:db8::1]:40000"},
		{name: "ethernet padding", frame: edited(goodFrame4, pad(7)), wantOff: 42, wantLen: 16},
		{name: "udp shorter than ip payload", frame: edited(goodFrame4, put16(38, 8+10)), wantOff: 42, wantLen: 10},
		{name: "multi-buffer totalLen", frame: edited(goodFrame4, cutTo(45)), extra: 13, wantOff: 42, wantLen: 16},
		// NOPs, EOL, padding: 8 bytes.
		{name: "ipv4 options", frame: edited(goodFrame4, withIPv4Options([]byte{1, 1, 1, 0, 7, 7, 7, 7})), wantOff: 50, wantLen: 16},
		{name: "ipv4 max options", frame: edited(goodFrame4, withIPv4Options(make([]byte, 40))), wantOff: 82, wantLen: 16},
		{name: "ipv4 no DF", frame: edited(goodFrame4, setByte(20, 0), fixSum), wantOff: 42, wantLen: 16},
		{name: "802.1ad + 802.1Q", frame: edited(goodFrame4, withTags(0x88, 0xA8, 0x00, 0x64, 0x81, 0x00, 0x20, 0x07)),
			wantOff: 50, wantLen: 16, wantVLAN: 0x2007},
		{name: "802.1Q + 802.1Q", frame: edited(goodFrame6, withTags(0x81, 0x00, 0x00, 0x64, 0x81, 0x00, 0x00, 0x08)),
			wantOff: 70, wantLen: 16, wantVLAN: 8},
		{name: "802.1ad only", frame: edited(goodFrame4, withTags(0x88, 0xA8, 0x00, 0x05)), wantOff: 46, wantLen: 16, wantVLAN: 5},
		{name: "ipv6 hop-by-hop, routing, dest opts", frame: edited(goodFrame6, withIPv6Ext(60, 0), withIPv6Ext(43, 2), withIPv6Ext(0, 1)),
			wantOff: 62 + 8 + 24 + 16, wantLen: 16},
		{name: "ipv6 padding", frame: edited(goodFrame6, pad(3)), wantOff: 62, wantLen: 16},
		// No checksum (RFC 768): fine over IPv4, where the sender may leave it out.
		{name: "ipv4 zero udp checksum", frame: edited(goodFrame4, put16(40, 0)), wantOff: 42, wantLen: 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.frame(t)
			var d Datagram
			if err := ParseUDP(f, len(f)+tc.extra, &d); err != nil {
				t.Fatalf("ParseUDP: %v", err)
			}
			if d.PayloadOffset != tc.wantOff || d.PayloadLen != tc.wantLen || d.VLAN != tc.wantVLAN {
				t.Fatalf("ParseUDP = off %d len %d vlan %#x, want off %d len %d vlan %#x",
					d.PayloadOffset, d.PayloadLen, d.VLAN, tc.wantOff, tc.wantLen, tc.wantVLAN)
			}
			if tc.wantSrcStr != "" && d.Src.String() != tc.wantSrcStr {
				t.Fatalf("Src = %v, want %s", d.Src, tc.wantSrcStr)
			}
			if d.SrcMAC != testMACA || d.DstMAC != testMACB {
				t.Fatalf("MACs %x -> %x", d.SrcMAC, d.DstMAC)
			}
		})
	}
}

func TestParseUDPRejects(t *testing.T) {
	v4, v6 := goodFrame4, goodFrame6
	ext := withIPv6Ext(60, 0) // an empty destination options header
	for _, tc := range []struct {
		name  string
		frame func(t testing.TB) []byte
		extra int // totalLen - len(frame)
		want  error
	}{
		{"empty", func(t testing.TB) []byte { return nil }, 0, ErrTruncated},
		{"short ethernet", edited(v4, cutTo(13)), 0, ErrTruncated},
		{"totalLen below len(frame)", v4, -1, ErrBadLength},
		{"arp", edited(v4, put16(12, 0x0806)), 0, ErrNotIP},
		{"truncated vlan tag", edited(v4, cutTo(16), put16(12, 0x8100)), 0, ErrTruncated},
		{"truncated inner vlan tag", edited(v4, cutTo(20), put16(12, 0x88A8), put16(16, 0x8100)), 0, ErrTruncated},
		{"three tags", edited(v4, withTags(0x88, 0xA8, 0, 1, 0x81, 0x00, 0, 2, 0x81, 0x00, 0, 3)), 0, ErrNotIP},
		{"ipv4 truncated header", edited(v4, cutTo(33)), 100, ErrTruncated},
		{"ipv4 version 5", edited(v4, setByte(14, 0x55), fixSum), 0, ErrBadHeader},
		{"ipv4 version 6 in ipv4 ethertype", edited(v6, put16(12, 0x0800)), 0, ErrBadHeader},
		{"ipv4 ihl 4", edited(v4, setByte(14, 0x44)), 0, ErrBadHeader},
		// A 60-byte header; the frame has 42+16-14=44 bytes of IP.
		{"ipv4 options beyond first buffer", edited(v4, setByte(14, 0x4F)), 100, ErrTruncated},
		{"ipv4 bad checksum", edited(v4, flipBits(24, 1)), 0, ErrBadChecksum},
		{"ipv4 total length below ihl", edited(v4, put16(16, 19), fixSum), 0, ErrBadLength},
		{"ipv4 total length beyond frame", edited(v4, add16(16, 1), fixSum), 0, ErrTruncated},
		{"ipv4 frame cut", edited(v4, cutTo(50)), 0, ErrTruncated},
		{"ipv4 tcp", edited(v4, setByte(23, 6), fixSum), 0, ErrNotUDP},
		{"ipv4 more fragments", edited(v4, put16(20, 0x2000), fixSum), 0, ErrFragment},
		{"ipv4 fragment offset", edited(v4, put16(20, 0x4001), fixSum), 0, ErrFragment},
		{"ipv4 payload shorter than udp header", edited(v4, put16(16, 20+7), fixSum), 0, ErrBadLength},
		{"udp header beyond first buffer", edited(v4, cutTo(41)), 17, ErrTruncated},
		{"udp length below 8", edited(v4, put16(38, 7)), 0, ErrBadLength},
		// The padding byte does not count as UDP payload.
		{"udp length beyond ip payload", edited(v4, pad(1), put16(38, 8+17)), 0, ErrBadLength},
		{"ipv6 truncated header", edited(v6, cutTo(53)), 100, ErrTruncated},
		{"ipv6 version 4", edited(v6, setByte(14, 0x40)), 0, ErrBadHeader},
		{"ipv6 payload length beyond frame", edited(v6, put16(18, 25)), 0, ErrTruncated},
		{"ipv6 fragment", edited(v6, withIPv6Ext(44, 0)), 0, ErrFragment},
		{"ipv6 fragment after dest opts", edited(v6, withIPv6Ext(44, 0), ext), 0, ErrFragment},
		{"ipv6 tcp", edited(v6, setByte(20, 6)), 0, ErrNotUDP},
		{"ipv6 no next header", edited(v6, setByte(20, 59)), 0, ErrNotUDP},
		{"ipv6 esp after hop-by-hop", edited(v6, setByte(20, 50), withIPv6Ext(0, 0)), 0, ErrNotUDP},
		{"ipv6 hop-by-hop not first", edited(v6, withIPv6Ext(0, 0), ext), 0, ErrBadHeader},
		{"ipv6 too many extension headers", edited(v6, slices.Repeat([]frameEdit{ext}, 9)...), 0, ErrBadHeader},
		// An 88-byte extension header; the payload length is 32.
		{"ipv6 extension beyond payload length", edited(v6, ext, setByte(14+40+1, 10)), 0, ErrBadLength},
		{"ipv6 extension header cut by payload length", edited(v6, ext, put16(18, 4)), 0, ErrBadLength},
		{"ipv6 extension beyond first buffer", edited(v6, ext, cutTo(58)), 100, ErrTruncated},
		{"ipv6 jumbo (payload length 0)", edited(v6, put16(18, 0)), 0, ErrBadLength},
		{"ipv6 udp length 0", edited(v6, put16(58, 0)), 0, ErrBadLength},
		// RFC 8200 section 8.1: an IPv6 receiver discards a UDP datagram with checksum 0.
		{"ipv6 zero udp checksum", edited(v6, put16(60, 0)), 0, ErrBadChecksum},
		{"ipv6 zero udp checksum after dest opts", edited(v6, ext, put16(68, 0)), 0, ErrBadChecksum},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.frame(t)
			sentinel := Datagram{VLAN: 0xBEEF, PayloadOffset: -7}
			d := sentinel
			err := ParseUDP(f, len(f)+tc.extra, &d)
			if err != tc.want {
				t.Fatalf("ParseUDP = %v, want %v", err, tc.want)
			}
			if d != sentinel {
				t.Fatalf("ParseUDP changed d on error: %+v", d)
			}
		})
	}
}

func TestVerifyUDPChecksumRejectsForeignDatagram(t *testing.T) {
	f := goodFrame4(t)
	for _, d := range []Datagram{
		{PayloadOffset: 3},
		{PayloadOffset: len(f) + 1},
		{PayloadOffset: 42, PayloadLen: -1},
		{PayloadOffset: 42, PayloadLen: 70000},
	} {
		if err := VerifyUDPChecksum(&d, f); !errors.Is(err, ErrBadLength) {
			t.Errorf("VerifyUDPChecksum(%+v) = %v, want ErrBadLength", d, err)
		}
	}
	// A Datagram that ParseUDP did not fill (no addresses) gives an error, not a panic.
	if err := VerifyUDPChecksum(&Datagram{PayloadOffset: 8}, f); err == nil {
		t.Error("VerifyUDPChecksum of a zero Datagram succeeded")
	}
	if p := (&Datagram{PayloadOffset: 100}).Payload(f); p != nil {
		t.Errorf("Payload past the frame = %x, want nil", p)
	}
}

func TestFramingAllocs(t *testing.T) {
	for _, enc := range []func() Encap{testEncap4, testEncap6} {
		e := enc()
		e.VLAN = 7
		mustValidate(t, &e)
		payload := make([]byte, 1500)
		frame := make([]byte, e.HeaderLen()+len(payload))
		copy(frame[e.HeaderLen():], payload)
		var d Datagram
		allocs := testing.AllocsPerRun(100, func() {
			var c Checksum
			c.Add(payload)
			if _, err := e.Put(frame, len(payload), &c, 1234); err != nil {
				t.Fatal(err)
			}
			if err := ParseUDP(frame, len(frame), &d); err != nil {
				t.Fatal(err)
			}
			if err := VerifyUDPChecksum(&d, frame[:100], frame[100:]); err != nil {
				t.Fatal(err)
			}
			_ = ParseUDP(frame[:20], len(frame), &d) // error path too
		})
		if allocs != 0 {
			t.Fatalf("%v: Put+ParseUDP+VerifyUDPChecksum allocate %v times, want 0", e.Src, allocs)
		}
	}
}

// fuzzSeedFrames returns the valid and near-valid frames used as seeds for FuzzParseUDP.
func fuzzSeedFrames(t testing.TB) [][]byte {
	e4, e6 := testEncap4(), testEncap6()
	e4v := e4
	e4v.VLAN = 0x2064
	for _, e := range []*Encap{&e4, &e6, &e4v} {
		mustValidate(t, e)
	}
	f4, f6 := buildFrame(t, &e4, 0, []byte("hello")), buildFrame(t, &e6, 0, []byte("hello, v6"))
	qinq := withTags(0x88, 0xA8, 0, 1, 0x81, 0, 0, 2)(f4)
	ext := insertIPv6Ext(insertIPv6Ext(f6, 60, 1), 0, 0)
	frag := insertIPv6Ext(f6, 44, 0)
	opts := withIPv4Options([]byte{1, 1, 1, 0})(f4)
	return [][]byte{
		f4, f6, buildFrame(t, &e4v, 0, nil), qinq, ext, frag, opts,
		pad(4)(f4), f4[:30], f6[:50],
	}
}

// FuzzParseUDP checks that ParseUDP never panics and that whatever it accepts is
// self-consistent: offsets within bounds, and headers rebuilt from the parsed fields with
// Encap.Put parse back to the same fields.
func FuzzParseUDP(f *testing.F) {
	for _, fr := range fuzzSeedFrames(f) {
		f.Add(fr, uint16(0))
	}
	f.Add(fuzzSeedFrames(f)[0][:45], uint16(10))
	f.Fuzz(func(t *testing.T, frame []byte, extra uint16) {
		totalLen := len(frame) + int(extra%4096)
		var d Datagram
		if err := ParseUDP(frame, totalLen, &d); err != nil {
			switch err {
			case ErrTruncated, ErrNotIP, ErrBadHeader, ErrBadChecksum, ErrFragment, ErrNotUDP, ErrBadLength:
			default:
				t.Fatalf("ParseUDP returned a non-sentinel error %v", err)
			}
			return
		}
		if d.PayloadOffset < ethHeaderLen+ipv4HeaderLen+udpHeaderLen || d.PayloadOffset > len(frame) {
			t.Fatalf("PayloadOffset %d outside [42, %d]", d.PayloadOffset, len(frame))
		}
		if d.PayloadLen < 0 || d.PayloadOffset+d.PayloadLen > totalLen {
			t.Fatalf("PayloadOffset %d + PayloadLen %d beyond totalLen %d", d.PayloadOffset, d.PayloadLen, totalLen)
		}
		if d.Src.Addr().Is4() != d.Dst.Addr().Is4() || !d.Src.Addr().IsValid() {
			t.Fatalf("inconsistent addresses %v -> %v", d.Src, d.Dst)
		}
		if d.Src.Addr().Is6() && binary.BigEndian.Uint16(frame[d.PayloadOffset-2:]) == 0 {
			t.Fatalf("accepted an IPv6 datagram without UDP checksum")
		}
		_ = VerifyUDPChecksum(&d, frame) // must not panic either
		payload := d.Payload(frame)
		if len(payload) != d.PayloadLen {
			return // multi-buffer: the payload is not all here
		}
		e := Encap{
			SrcMAC: d.SrcMAC, DstMAC: d.DstMAC, VLAN: d.VLAN,
			Src: d.Src.Addr(), Dst: d.Dst.Addr(), SrcPort: d.Src.Port(), DstPort: d.Dst.Port(),
		}
		if e.Validate() != nil {
			return // fields an Encap refuses to send (multicast, port 0, DEI...)
		}
		re := buildFrame(t, &e, 0, payload)
		var d2 Datagram
		if err := ParseUDP(re, len(re), &d2); err != nil {
			t.Fatalf("rebuilt frame does not parse: %v", err)
		}
		d.PayloadOffset = e.HeaderLen()
		if d2 != d {
			t.Fatalf("rebuilt frame parses as %+v, want %+v", d2, d)
		}
		if err := VerifyUDPChecksum(&d2, re); err != nil {
			t.Fatalf("rebuilt frame: %v", err)
		}
	})
}

func BenchmarkPut(b *testing.B) {
	for _, fam := range encapFamilies {
		e := fam.enc()
		mustValidate(b, &e)
		payload := randBytes(rand.New(rand.NewPCG(9, 9)), 1500)
		frame := make([]byte, e.HeaderLen())
		b.Run(fam.name+"/sum1500", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(payload)))
			for b.Loop() {
				var c Checksum
				c.Add(payload)
				if _, err := e.Put(frame, len(payload), &c, 4242); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fam.name+"/headers-only", func(b *testing.B) {
			b.ReportAllocs()
			var c Checksum
			c.Add(payload)
			for b.Loop() {
				if _, err := e.Put(frame, len(payload), &c, 4242); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkParseUDP(b *testing.B) {
	for _, fam := range encapFamilies {
		e := fam.enc()
		mustValidate(b, &e)
		frame := buildFrame(b, &e, 0, make([]byte, 1500))
		b.Run(fam.name, func(b *testing.B) {
			b.ReportAllocs()
			var d Datagram
			for b.Loop() {
				if err := ParseUDP(frame, len(frame), &d); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
