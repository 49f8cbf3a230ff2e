package wire

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
	"testing"
)

func TestSizes(t *testing.T) {
	// The byte layouts in encode.go and docs/PROTOCOL.md add up to the constants in types.go.
	for _, tc := range []struct {
		name   string
		fields []int
		want   int
	}{
		{"Header", []int{1, 1, 2, 4, 4, 8, 4}, HeaderLen},
		{"SendExt", []int{4, 4, 4, 4}, SendExtLen},
		{"RDMAExt", []int{8, 4, 4, 4}, RDMAExtLen},
		{"ReadRespExt", []int{4, 4}, ReadRespLen},
		{"AckExt", []int{4, 8, 4, 1, 1, 2, 4, 4, 4, 4, 8}, AckExtLen},
		{"CMExt", []int{8, 8, 4, 4, 8, 2, 1, 1, 2, 2, 2}, CMExtLen},
	} {
		sum := 0
		for _, f := range tc.fields {
			sum += f
		}
		if sum != tc.want {
			t.Errorf("%s: fields sum to %d, constant is %d", tc.name, sum, tc.want)
		}
	}
}

func TestOpcodeTable(t *testing.T) {
	want := map[Opcode]struct {
		ext     int
		payload bool
	}{
		OpSendFirst: {SendExtLen, true}, OpSendMiddle: {SendExtLen, true}, OpSendLast: {SendExtLen, true},
		OpSendOnly: {SendExtLen, true}, OpSendLastInv: {SendExtLen, true}, OpSendOnlyInv: {SendExtLen, true},
		OpWrite: {RDMAExtLen, true}, OpReadRequest: {RDMAExtLen, false}, OpReadResponse: {ReadRespLen, true},
		OpAck: {AckExtLen, false}, OpConnRequest: {CMExtLen, false}, OpConnReply: {CMExtLen, false},
		OpReadyToUse: {CMExtLen, false}, OpConnReject: {CMExtLen, false}, OpDisconnectReq: {CMExtLen, false},
		OpDisconnectRep: {CMExtLen, false}, OpBundle: {0, true}, OpMultiBundle: {0, true},
	}
	for i := range 256 {
		op := Opcode(i)
		ext, ok := ExtLen(op)
		w, known := want[op]
		if ok != known || ext != w.ext || HasPayload(op) != w.payload {
			t.Errorf("%v: ExtLen %d %v HasPayload %v, want %d %v %v", op, ext, ok, HasPayload(op), w.ext, known, w.payload)
		}
		if !known && (AllowedFlags(op) != 0 || op.String() != fmt.Sprintf("Opcode(0x%x)", i)) {
			t.Errorf("unknown %v: flags %#x", op, AllowedFlags(op))
		}
	}
	if OpSendLastInv.String() != "SendLastInv" || SynNakRNR.String() != "NakRNR" || Syndrome(9).String() != "Syndrome(9)" {
		t.Error("names")
	}
}

func TestCRCVector(t *testing.T) {
	// The standard CRC-32C check value (RFC 3720 B.4 parameters).
	if got := UpdateCRC(0, []byte("123456789")); got != 0xe3069283 {
		t.Fatalf("CRC32C(123456789) = %#x, want 0xe3069283", got)
	}
	// 32 bytes of zeros, RFC 3720 B.4: aa 36 91 8a (as the iSCSI byte stream, i.e. the value
	// 0x8a9136aa).
	if got := UpdateCRC(0, make([]byte, 32)); got != 0x8a9136aa {
		t.Fatalf("CRC32C(32 zeros) = %#x, want 0x8a9136aa", got)
	}
	d := pattern(9000, 5)
	for _, cut := range []int{0, 1, 7, 8, 63, 64, 4096, 8999, 9000} {
		if got, want := UpdateCRC(UpdateCRC(0, d[:cut]), d[cut:]), crc32.Checksum(d, crc32.MakeTable(crc32.Castagnoli)); got != want {
			t.Fatalf("incremental at %d: %#x, want %#x", cut, got, want)
		}
	}
	var tr [TrailerLen]byte
	PutTrailer(tr[:], 0x01020304)
	if tr != [4]byte{1, 2, 3, 4} {
		t.Fatalf("PutTrailer stored %x, want big-endian 01020304", tr)
	}
}

func TestEncodeLayout(t *testing.T) {
	// One golden datagram, byte by byte, as docs/PROTOCOL.md draws it.
	p := Packet{Header: Header{Opcode: OpWrite, Flags: FlagLast | FlagAckReq, DestQPN: 0x01020304,
		PSN: 0x05060708, Cookie: 0x090a0b0c0d0e0f10, TS: 0x11121314}}
	p.RDMA = RDMAExt{Addr: 0x2122232425262728, Token: 0x292a2b2c, Length: 0x2d2e2f30, Offset: 0x01020304}
	d := dgram(t, &p, []byte{0xaa, 0xbb})
	want := []byte{
		0x01, 0x10, 0x00, 0x05, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
		0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14,
		0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30,
		0x01, 0x02, 0x03, 0x04,
		0xaa, 0xbb,
	}
	// The trailer docs/PROTOCOL.md shows for this example.
	want = append(want, 0xa6, 0x75, 0x3e, 0x0c)
	if !bytes.Equal(d, want) {
		t.Fatalf("datagram\n%x\nwant\n%x", d, want)
	}

	a := Packet{Header: Header{Opcode: OpAck}}
	a.Ack = AckExt{AckPSN: 0x01020304, SACK: 0x05060708090a0b0c, Credits: 0x0d0e0f10, Syndrome: 0x11,
		Value: 0x1314, NakPSN: 0x15161718, EchoTS: 0x191a1b1c, Delay: 0x1d1e1f20, HighPSN: 0x21222324,
		HighSACK: 0x25262728292a2b2c}
	var b [HeaderLen + AckExtLen]byte
	if n, err := Encode(b[:], &a); err != nil || n != len(b) {
		t.Fatalf("encode ack: %d %v", n, err)
	}
	wantExt := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 0x11, 0, 0x13, 0x14,
		0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24,
		0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c}
	if !bytes.Equal(b[HeaderLen:], wantExt) {
		t.Fatalf("ack ext %x, want %x", b[HeaderLen:], wantExt)
	}

	c := Packet{Header: Header{Opcode: OpConnReject}, PrivateData: []byte{0xee, 0xff}}
	c.CM = CMExt{ServiceID: 0x0102030405060708, ConnID: 0x090a0b0c0d0e0f10, SrcQPN: 0x11121314,
		InitialPSN: 0x15161718, Cookie: 0x191a1b1c1d1e1f20, MaxPayload: 0x2122, IRD: 0x23, ORD: 0x24,
		DataPort: 0x2728, Reason: 0x2526, PrivateLen: 2}
	var cb [HeaderLen + CMExtLen + 2]byte
	if n, err := Encode(cb[:], &c); err != nil || n != len(cb) {
		t.Fatalf("encode cm: %d %v", n, err)
	}
	wantCM := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 0x11, 0x12, 0x13, 0x14,
		0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24,
		0x27, 0x28, 0x25, 0x26, 0x00, 0x02, 0xee, 0xff}
	if !bytes.Equal(cb[HeaderLen:], wantCM) {
		t.Fatalf("cm ext %x, want %x", cb[HeaderLen:], wantCM)
	}
}

// cutSets returns every nondecreasing choice of k cuts from points.
func cutSets(points []int, k int) [][]int {
	if k == 0 {
		return [][]int{nil}
	}
	var out [][]int
	for i, c := range points {
		for _, rest := range cutSets(points[i:], k-1) {
			out = append(out, append([]int{c}, rest...))
		}
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	for _, s := range samples() {
		t.Run(s.name, func(t *testing.T) {
			d := dgram(t, &s.p, s.payload)
			f := fixedLen(d)
			end := len(d) - TrailerLen
			// Interesting cut points: right after the fixed part, one byte into the payload,
			// its middle, one byte before its end, and every point inside the trailer.
			var points []int
			for _, c := range []int{f, f + 1, (f + end) / 2, end - 1, end, end + 1, end + 2, end + 3, len(d)} {
				if c >= f && c <= len(d) && !slices.Contains(points, c) {
					points = append(points, c)
				}
			}
			slices.Sort(points)
			cases := 0
			for k := 0; k < MaxSegments; k++ {
				for _, cuts := range cutSets(points, k) {
					segs := split(d, cuts...)
					var p Packet
					if err := Parse(segs, &p); err != nil {
						t.Fatalf("cuts %v: %v", cuts, err)
					}
					if diff := samePacket(&p, &Packet{Header: s.p.Header, Send: s.p.Send, RDMA: s.p.RDMA,
						ReadResp: s.p.ReadResp, Ack: s.p.Ack, CM: s.p.CM, PrivateData: s.p.PrivateData,
						Payload: [MaxSegments][]byte{s.payload}, NPayload: 1}); diff != "" {
						t.Fatalf("cuts %v: %s differs", cuts, diff)
					}
					checkAccepted(t, segs, &p)
					cases++
				}
			}
			if cases < 4 {
				t.Fatalf("only %d cases", cases)
			}
		})
	}
}

func TestParseLeavesOtherExtensions(t *testing.T) {
	s := samples()[0]
	d := dgram(t, &s.p, s.payload)
	var p Packet
	p.Ack.Credits = 99
	p.PrivateData = []byte{1}
	p.Payload[3] = []byte{1}
	if err := Parse([][]byte{d}, &p); err != nil {
		t.Fatal(err)
	}
	if p.Ack.Credits != 99 || p.PrivateData != nil || p.Payload[3] != nil || p.NPayload != 1 {
		t.Fatalf("parse: ack %d private %v payload[3] %v n %d", p.Ack.Credits, p.PrivateData, p.Payload[3], p.NPayload)
	}
}

// find returns the sample named name.
func find(t *testing.T, name string) sample {
	for _, s := range samples() {
		if s.name == name {
			return s
		}
	}
	t.Fatalf("no sample %q", name)
	return sample{}
}

func TestParseReject(t *testing.T) {
	// build returns the segments of a datagram made from sample name: edit changes the packet
	// before encoding, raw changes the bytes after (the CRC is fixed afterwards unless noFix).
	type tcase struct {
		name  string
		segs  func(t *testing.T) [][]byte
		want  error
		extra string
	}
	mk := func(name string, edit func(p *Packet, payload *[]byte), raw func(d []byte) []byte) func(t *testing.T) [][]byte {
		return func(t *testing.T) [][]byte {
			s := find(t, name)
			if edit != nil {
				edit(&s.p, &s.payload)
			}
			d := dgram(t, &s.p, s.payload)
			if raw != nil {
				d = raw(d)
				fixCRC(d)
			}
			return [][]byte{d}
		}
	}
	segsOf := func(name string, f func(d []byte) [][]byte) func(t *testing.T) [][]byte {
		return func(t *testing.T) [][]byte {
			s := find(t, name)
			return f(dgram(t, &s.p, s.payload))
		}
	}
	setU16 := func(off int, v uint16) func(d []byte) []byte {
		return func(d []byte) []byte { d[off], d[off+1] = byte(v>>8), byte(v); return d }
	}
	setByte := func(off int, v byte) func(d []byte) []byte {
		return func(d []byte) []byte { d[off] = v; return d }
	}
	send := func(op Opcode, off, total uint32, n int, inv uint32) func(p *Packet, payload *[]byte) {
		return func(p *Packet, payload *[]byte) {
			p.Opcode, p.Flags = op, 0
			p.Send = SendExt{MSN: 1, Offset: off, Total: total, InvToken: inv}
			*payload = pattern(n, 1)
		}
	}
	const sendFirst = "SendFirst"
	cases := []tcase{
		// Segments and lengths.
		{"no segments", func(*testing.T) [][]byte { return nil }, ErrShort, ""},
		{"empty segment", func(*testing.T) [][]byte { return [][]byte{{}} }, ErrShort, ""},
		{"shorter than header+trailer", segsOf("Ack", func(d []byte) [][]byte { return [][]byte{d[:HeaderLen+TrailerLen-1]} }), ErrShort, ""},
		{"too many segments", segsOf(sendFirst, func(d []byte) [][]byte { return split(d, 45, 50, 55, 60) }), ErrSegments, ""},
		{"header split", segsOf(sendFirst, func(d []byte) [][]byte { return split(d, HeaderLen-1) }), ErrSegments, ""},
		{"first segment empty", segsOf(sendFirst, func(d []byte) [][]byte { return split(d, 0) }), ErrSegments, ""},
		{"extension split", segsOf(sendFirst, func(d []byte) [][]byte { return split(d, HeaderLen+SendExtLen-1) }), ErrSegments, ""},
		{"short of extension", segsOf("Ack", func(d []byte) [][]byte {
			d = d[:HeaderLen+AckExtLen-1+TrailerLen]
			fixCRC(d)
			return [][]byte{d}
		}), ErrShort, ""},
		{"private data split", segsOf("ConnRequest", func(d []byte) [][]byte { return split(d, HeaderLen+CMExtLen+10) }), ErrSegments, ""},
		// Version, opcode.
		{"version 0", mk("Ack", nil, setByte(0, 0)), ErrVersion, ""},
		{"version 2", mk(sendFirst, nil, setByte(0, 2)), ErrVersion, ""},
		{"opcode 0", mk("Ack", nil, setByte(1, 0)), ErrOpcode, ""},
		{"opcode 0x07", mk(sendFirst, nil, setByte(1, 0x07)), ErrOpcode, ""},
		{"opcode 0x46", mk("ReadyToUse", nil, setByte(1, 0x46)), ErrOpcode, ""},
		{"opcode 0xff", mk(sendFirst, nil, setByte(1, 0xff)), ErrOpcode, ""},
		// CRC.
		{"payload bit flipped", segsOf(sendFirst, func(d []byte) [][]byte { d[50] ^= 0x10; return [][]byte{d} }), ErrCRC, ""},
		{"header bit flipped", segsOf(sendFirst, func(d []byte) [][]byte { d[21] ^= 1; return [][]byte{d} }), ErrCRC, ""},
		{"trailer bit flipped", segsOf("Ack", func(d []byte) [][]byte { d[len(d)-1] ^= 0x80; return [][]byte{d} }), ErrCRC, ""},
		{"trailer split and wrong", segsOf("Write", func(d []byte) [][]byte { d[len(d)-3] ^= 1; return split(d, 50, len(d)-2) }), ErrCRC, ""},
		{"truncated", segsOf("Write", func(d []byte) [][]byte { return [][]byte{d[:len(d)-1]} }), ErrCRC, ""},
		// Flags.
		{"unknown flag bit 5", mk(sendFirst, nil, setU16(2, 1<<5)), ErrFlags, ""},
		{"Ack flag on an Ack", mk("Ack", nil, setU16(2, uint16(FlagAck))), ErrFlags, ""},
		{"Ack flag on CM", mk("ConnReply", nil, setU16(2, uint16(FlagAck))), ErrFlags, ""},
		{"piggybacked NAK", mk("SendOnly+Ack", nil, setByte(HeaderLen+SendExtLen+16, byte(SynNakRNR))), ErrField, ""},
		{"piggybacked ack reserved byte", mk("Write+Ack", nil, setByte(HeaderLen+RDMAExtLen+17, 1)), ErrField, ""},
		{"piggybacked ack split from the header", segsOf("ReadResponse+Ack", func(d []byte) [][]byte { return split(d, HeaderLen+ReadRespLen+5) }), ErrSegments, ""},
		{"unknown flag bit 15", mk("Write", nil, setU16(2, 1<<15|uint16(FlagLast))), ErrFlags, ""},
		{"Last on a Send", mk("SendOnly", nil, setU16(2, uint16(FlagLast))), ErrFlags, ""},
		{"Solicited on SendFirst", mk(sendFirst, nil, setU16(2, uint16(FlagSolicited))), ErrFlags, ""},
		{"Solicited on Write", mk("Write", nil, setU16(2, uint16(FlagSolicited))), ErrFlags, ""},
		{"Last on ReadRequest", mk("ReadRequest", nil, setU16(2, uint16(FlagLast))), ErrFlags, ""},
		{"a flag other than AckReq on Ack", mk("Ack", nil, setU16(2, uint16(FlagRetransmit))), ErrFlags, ""},
		{"AckReq on CM", mk("ConnReply", nil, setU16(2, uint16(FlagAckReq))), ErrFlags, ""},
		// Private data.
		{"private data over the limit", mk("ConnRequest", nil, func(d []byte) []byte {
			d = append(d[:len(d)-TrailerLen], 0xab, 0, 0, 0, 0)
			d[HeaderLen+CMExtLen-1] = MaxPrivateData + 1
			return d
		}), ErrPrivateData, ""},
		{"private data shorter than PrivateLen", mk("ConnReply", nil, setU16(HeaderLen+CMExtLen-2, 11)), ErrLength, ""},
		{"private data longer than PrivateLen", mk("ConnReply", nil, setU16(HeaderLen+CMExtLen-2, 9)), ErrLength, ""},
		{"private data without PrivateLen", mk("ReadyToUse", nil, func(d []byte) []byte { return append(d, 0) }), ErrLength, ""},
		// Payload where none belongs.
		{"payload on ReadRequest", mk("ReadRequest", nil, func(d []byte) []byte { return append(d, 0) }), ErrLength, ""},
		{"payload on Ack", mk("Ack", nil, func(d []byte) []byte { return append(d, 0) }), ErrLength, ""},
		// Send.
		{"Send Total over 2^31", mk(sendFirst, send(OpSendMiddle, 10, MaxSendTotal+1, 10, 0), nil), ErrField, ""},
		{"SendFirst Offset not 0", mk(sendFirst, send(OpSendFirst, 1, 100, 10, 0), nil), ErrField, ""},
		{"SendOnly Offset not 0", mk(sendFirst, send(OpSendOnly, 5, 10, 5, 0), nil), ErrField, ""},
		{"SendOnlyInv Offset not 0", mk(sendFirst, send(OpSendOnlyInv, 5, 10, 5, 1), nil), ErrField, ""},
		{"SendMiddle Offset 0", mk(sendFirst, send(OpSendMiddle, 0, 100, 10, 0), nil), ErrField, ""},
		{"SendLast Offset 0", mk(sendFirst, send(OpSendLast, 0, 10, 10, 0), nil), ErrField, ""},
		{"SendLastInv Offset 0", mk(sendFirst, send(OpSendLastInv, 0, 10, 10, 3), nil), ErrField, ""},
		{"SendOnlyInv without token", mk(sendFirst, send(OpSendOnlyInv, 0, 10, 10, 0), nil), ErrField, ""},
		{"SendLastInv without token", mk(sendFirst, send(OpSendLastInv, 5, 10, 5, 0), nil), ErrField, ""},
		{"SendOnly with token", mk(sendFirst, send(OpSendOnly, 0, 10, 10, 7), nil), ErrField, ""},
		{"SendFirst with token", mk(sendFirst, send(OpSendFirst, 0, 100, 10, 7), nil), ErrField, ""},
		{"SendOnly short of Total", mk(sendFirst, send(OpSendOnly, 0, 11, 10, 0), nil), ErrLength, ""},
		{"SendOnly past Total", mk(sendFirst, send(OpSendOnly, 0, 9, 10, 0), nil), ErrLength, ""},
		{"SendOnlyInv past Total", mk(sendFirst, send(OpSendOnlyInv, 0, 9, 10, 4), nil), ErrLength, ""},
		{"SendFirst reaching Total", mk(sendFirst, send(OpSendFirst, 0, 10, 10, 0), nil), ErrLength, ""},
		{"SendFirst past Total", mk(sendFirst, send(OpSendFirst, 0, 5, 10, 0), nil), ErrLength, ""},
		{"SendFirst empty", mk(sendFirst, send(OpSendFirst, 0, 10, 0, 0), nil), ErrLength, ""},
		{"SendMiddle reaching Total", mk(sendFirst, send(OpSendMiddle, 5, 15, 10, 0), nil), ErrLength, ""},
		{"SendMiddle empty", mk(sendFirst, send(OpSendMiddle, 5, 15, 0, 0), nil), ErrLength, ""},
		{"SendMiddle Offset past Total", mk(sendFirst, send(OpSendMiddle, math.MaxUint32, 15, 1, 0), nil), ErrLength, ""},
		{"SendLast short of Total", mk(sendFirst, send(OpSendLast, 5, 16, 10, 0), nil), ErrLength, ""},
		{"SendLast past Total", mk(sendFirst, send(OpSendLast, 5, 14, 10, 0), nil), ErrLength, ""},
		{"SendLast empty", mk(sendFirst, send(OpSendLast, 5, 5, 0, 0), nil), ErrLength, ""},
		{"SendLastInv short of Total", mk(sendFirst, send(OpSendLastInv, 5, 16, 10, 2), nil), ErrLength, ""},
		// Write, ReadRequest, ReadResponse.
		{"Write longer than Length", mk("Write", func(p *Packet, pl *[]byte) { p.RDMA.Length = uint32(len(*pl) - 1) }, nil), ErrLength, ""},
		{"Write offset past its length", mk("Write", func(p *Packet, pl *[]byte) { p.RDMA.Offset = p.RDMA.Length - uint32(len(*pl)) + 1 }, nil), ErrLength, ""},
		{"ReadRequest Length 0", mk("ReadRequest", func(p *Packet, _ *[]byte) { p.RDMA.Length = 0 }, nil), ErrField, ""},
		{"ReadRequest with an offset", mk("ReadRequest", func(p *Packet, _ *[]byte) { p.RDMA.Offset = 1 }, nil), ErrField, ""},
		{"ReadResponse past 2^32-1", mk("ReadResponse", func(p *Packet, pl *[]byte) { p.ReadResp.Offset = math.MaxUint32 - uint32(len(*pl)) + 1 }, nil), ErrLength, ""},
		// Ack.
		{"Ack unknown Syndrome", mk("Ack", func(p *Packet, _ *[]byte) { p.Ack.Syndrome = SynNakInvalToken + 1 }, nil), ErrField, ""},
		{"Ack Syndrome 0xff", mk("Ack", func(p *Packet, _ *[]byte) { p.Ack.Syndrome = 0xff }, nil), ErrField, ""},
		{"Ack reserved byte", mk("Ack", nil, setByte(HeaderLen+17, 1)), ErrField, ""},
		{"Ack with a PSN", mk("Ack", func(p *Packet, _ *[]byte) { p.PSN = 1 }, nil), ErrField, ""},
		// Connection management: the messages that name the attempt need a ConnID.
		{"ConnRequest ConnID 0", mk("ConnRequest", func(p *Packet, _ *[]byte) { p.CM.ConnID = 0 }, nil), ErrField, ""},
		{"ConnReply ConnID 0", mk("ConnReply", func(p *Packet, _ *[]byte) { p.CM.ConnID = 0 }, nil), ErrField, ""},
		{"ReadyToUse ConnID 0", mk("ReadyToUse", func(p *Packet, _ *[]byte) { p.CM.ConnID = 0 }, nil), ErrField, ""},
		{"ConnReject ConnID 0", mk("ConnReject", func(p *Packet, _ *[]byte) { p.CM.ConnID = 0 }, nil), ErrField, ""},
		{"ConnID 0 behind a private data length error", mk("ConnReply", func(p *Packet, _ *[]byte) { p.CM.ConnID = 0 },
			setU16(HeaderLen+CMExtLen-2, 11)), ErrLength, ""},
	}
	seen := map[string]bool{}
	for _, tc := range cases {
		if seen[tc.name] {
			t.Fatalf("duplicate case %q", tc.name)
		}
		seen[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			segs := tc.segs(t)
			var p Packet
			if err := Parse(segs, &p); err != tc.want {
				t.Fatalf("Parse: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestParseAcceptEdges(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(p *Packet, payload *[]byte)
		base string
	}{
		{"Send Total exactly 2^31", func(p *Packet, _ *[]byte) { p.Opcode = OpSendMiddle; p.Send.Total = MaxSendTotal }, "SendMiddle"},
		{"SendOnly empty", nil, "SendOnlyEmpty"},
		{"Write of 0 bytes", nil, "WriteEmpty"},
		{"Write payload == Length", func(p *Packet, pl *[]byte) { p.RDMA.Length = uint32(len(*pl)) }, "Write"},
		{"Write ending at 2^64", func(p *Packet, pl *[]byte) { p.RDMA.Addr = math.MaxUint64 - uint64(len(*pl)) }, "Write"},
		{"ReadRequest ending at 2^64", func(p *Packet, _ *[]byte) { p.RDMA.Addr = math.MaxUint64 - 65536 }, "ReadRequest"},
		{"ReadResponse ending at 2^32-1", func(p *Packet, pl *[]byte) { p.ReadResp.Offset = math.MaxUint32 - uint32(len(*pl)) }, "ReadResponse"},
		{"Ack every syndrome", func(p *Packet, _ *[]byte) { p.Ack.Syndrome = SynNakInvalToken }, "Ack"},
		{"CM private data at the limit", nil, "ConnRequest"},
		{"CM without private data", nil, "ReadyToUse"},
		{"connection request to a listener", func(p *Packet, _ *[]byte) { p.DestQPN, p.Cookie, p.Flags = 0, 0, FlagRetransmit }, "ConnRequest"},
		// Left to the receiver, which answers them (ValidConnFields, the engine's NAKs).
		{"DisconnectReq ConnID 0", func(p *Packet, _ *[]byte) { p.CM.ConnID = 0 }, "DisconnectReq"},
		{"DisconnectRep ConnID 0", func(p *Packet, _ *[]byte) { p.CM.ConnID = 0 }, "DisconnectRep"},
		{"ConnRequest MaxPayload 48", func(p *Packet, _ *[]byte) { p.CM.MaxPayload = 48 }, "ConnRequest"},
		{"ConnReply cookie 0", func(p *Packet, _ *[]byte) { p.CM.Cookie = 0 }, "ConnReply"},
		{"ReadRequest of 2^32-1 bytes", func(p *Packet, _ *[]byte) { p.RDMA.Length = math.MaxUint32 }, "ReadRequest"},
		{"ReadRequest wrapping past 2^64", func(p *Packet, _ *[]byte) { p.RDMA.Addr = math.MaxUint64 - 10 }, "ReadRequest"},
		{"Write longer than 2^31", func(p *Packet, _ *[]byte) { p.RDMA.Length = MaxSendTotal + 1 }, "Write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := find(t, tc.base)
			if tc.edit != nil {
				tc.edit(&s.p, &s.payload)
			}
			segs := [][]byte{dgram(t, &s.p, s.payload)}
			var p Packet
			if err := Parse(segs, &p); err != nil {
				t.Fatal(err)
			}
			checkAccepted(t, segs, &p)
		})
	}
}

func TestEncodeReject(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(p *Packet)
		base string
		size int // buffer size; 0: large enough
		want error
	}{
		{"unknown opcode", func(p *Packet) { p.Opcode = 0x99 }, "Ack", 0, ErrOpcode},
		{"zero opcode", func(p *Packet) { p.Opcode = 0 }, "Ack", 0, ErrOpcode},
		{"unknown flag", func(p *Packet) { p.Flags |= 1 << 9 }, "SendFirst", 0, ErrFlags},
		{"flag not allowed", func(p *Packet) { p.Flags = FlagLast }, "SendOnly", 0, ErrFlags},
		{"private data over the limit", func(p *Packet) {
			p.PrivateData = make([]byte, MaxPrivateData+1)
			p.CM.PrivateLen = MaxPrivateData + 1
		}, "ConnRequest", 0, ErrPrivateData},
		{"PrivateLen mismatch", func(p *Packet) { p.CM.PrivateLen-- }, "ConnReply", 0, ErrPrivateData},
		{"PrivateLen without data", func(p *Packet) { p.CM.PrivateLen = 1 }, "ReadyToUse", 0, ErrPrivateData},
		{"short buffer Send", nil, "SendFirst", HeaderLen + SendExtLen - 1, ErrShortBuffer},
		{"short buffer Ack", nil, "Ack", HeaderLen + AckExtLen - 1, ErrShortBuffer},
		{"short buffer header", nil, "ReadResponse", HeaderLen - 1, ErrShortBuffer},
		{"short buffer private data", nil, "ConnReply", HeaderLen + CMExtLen + 9, ErrShortBuffer},
		{"nil buffer", nil, "ReadRequest", -1, ErrShortBuffer},
		{"short buffer piggybacked ack", nil, "SendOnly+Ack", HeaderLen + SendExtLen + AckExtLen - 1, ErrShortBuffer},
		{"piggybacked NAK", func(p *Packet) { p.Ack.Syndrome = SynNakAccess }, "Write+Ack", 0, ErrField},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := find(t, tc.base)
			if tc.edit != nil {
				tc.edit(&s.p)
			}
			var b []byte
			switch {
			case tc.size == 0:
				b = make([]byte, 1024)
			case tc.size > 0:
				b = make([]byte, tc.size)
			}
			for i := range b {
				b[i] = 0x5a
			}
			n, err := Encode(b, &s.p)
			if err != tc.want || n != 0 {
				t.Fatalf("Encode: %d %v, want 0 %v", n, err, tc.want)
			}
			if bytes.ContainsFunc(b, func(r rune) bool { return r != 0x5a }) {
				t.Fatal("Encode wrote on error")
			}
		})
	}
	// Every sample encodes into exactly its length, and not into one byte less.
	for _, s := range samples() {
		ext, _ := ExtLen(s.p.Opcode)
		n := HeaderLen + ext + len(s.p.PrivateData)
		if s.p.Flags&FlagAck != 0 {
			n += AckExtLen
		}
		b := make([]byte, n)
		if got, err := Encode(b, &s.p); got != n || err != nil {
			t.Errorf("%s: Encode %d %v, want %d", s.name, got, err, n)
		}
		if _, err := Encode(b[:n-1], &s.p); !errors.Is(err, ErrShortBuffer) {
			t.Errorf("%s: one byte short: %v", s.name, err)
		}
	}
}

func TestNoAllocs(t *testing.T) {
	s := find(t, "SendFirst")
	one := [][]byte{dgram(t, &s.p, s.payload)}
	three := split(one[0], 50, len(one[0])-2)
	c := find(t, "ConnRequest")
	cm := [][]byte{dgram(t, &c.p, nil)}
	var p Packet
	var buf [512]byte
	for name, f := range map[string]func(){
		"Encode":          func() { _, _ = Encode(buf[:], &s.p) },
		"Encode CM":       func() { _, _ = Encode(buf[:], &c.p) },
		"Parse 1 segment": func() { _ = Parse(one, &p) },
		"Parse 3 segment": func() { _ = Parse(three, &p) },
		"Parse CM":        func() { _ = Parse(cm, &p) },
		"Parse error":     func() { _ = Parse(one[:0], &p) },
		"UpdateCRC":       func() { _ = UpdateCRC(0, one[0]) },
		"PutTrailer":      func() { PutTrailer(buf[:], 1) },
		"PayloadLen":      func() { _ = p.PayloadLen() },
	} {
		if a := testing.AllocsPerRun(100, f); a != 0 {
			t.Errorf("%s: %v allocations per run", name, a)
		}
	}
	if err := Parse(three, &p); err != nil || p.NPayload != 2 {
		t.Fatalf("three segments: %v, %d views", err, p.NPayload)
	}
}
