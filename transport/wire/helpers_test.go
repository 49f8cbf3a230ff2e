package wire

import (
	"bytes"
	"testing"
)

// sample is a valid packet and its payload.
type sample struct {
	name    string
	p       Packet
	payload []byte
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func hdr(op Opcode, f Flags, psn PSN) Header {
	return Header{Opcode: op, Flags: f, DestQPN: 0x00abcdef, PSN: psn, Cookie: 0x0123456789abcdef, TS: 0xfedcba98}
}

// samples returns one valid packet per opcode (and a few variants).
func samples() []sample {
	cm := func(op Opcode, pd []byte, reason uint16) sample {
		p := Packet{Header: hdr(op, 0, 0)}
		p.CM = CMExt{ServiceID: 445, ConnID: 0x1122334455667788, SrcQPN: 0x42, InitialPSN: 0xfffffff0,
			Cookie: 0xdeadbeefcafef00d, MaxPayload: 8972, IRD: 16, ORD: 8, DataPort: 49999, Reason: reason, PrivateLen: uint16(len(pd))}
		p.PrivateData = pd
		return sample{op.String(), p, nil}
	}
	send := func(op Opcode, f Flags, off, total, n int, inv uint32) sample {
		p := Packet{Header: hdr(op, f, 1000)}
		p.Send = SendExt{MSN: 7, Offset: uint32(off), Total: uint32(total), InvToken: inv}
		return sample{op.String(), p, pattern(n, byte(op))}
	}
	var s []sample
	s = append(s,
		send(OpSendFirst, FlagAckReq, 0, 120, 40, 0),
		send(OpSendMiddle, FlagRetransmit, 40, 120, 40, 0),
		send(OpSendLast, FlagSolicited|FlagAckReq, 80, 120, 40, 0),
		send(OpSendOnly, 0, 0, 33, 33, 0),
		send(OpSendLastInv, FlagSolicited, 10, 30, 20, 0x1234),
		send(OpSendOnlyInv, 0, 0, 5, 5, 9),
	)
	zero := send(OpSendOnly, 0, 0, 0, 0, 0)
	zero.name = "SendOnlyEmpty"
	s = append(s, zero)

	w := Packet{Header: hdr(OpWrite, FlagLast|FlagAckReq, 77)}
	w.RDMA = RDMAExt{Addr: 0x7f0000001000, Token: 0x55, Length: 4096}
	s = append(s, sample{"Write", w, pattern(64, 3)})
	w0 := w
	w0.Flags = 0
	s = append(s, sample{"WriteEmpty", w0, nil})

	rr := Packet{Header: hdr(OpReadRequest, 0, 78)}
	rr.RDMA = RDMAExt{Addr: 0x7f0000002000, Token: 0x56, Length: 65536}
	s = append(s, sample{"ReadRequest", rr, nil})

	rs := Packet{Header: hdr(OpReadResponse, FlagLast, 5)}
	rs.ReadResp = ReadRespExt{ReqPSN: 78, Offset: 4096}
	s = append(s, sample{"ReadResponse", rs, pattern(48, 9)})

	a := Packet{Header: hdr(OpAck, 0, 0)}
	a.Ack = AckExt{AckPSN: 1001, SACK: 0x8000000000000005, Credits: 12, Syndrome: SynNakRNR, Value: 100,
		NakPSN: 1001, EchoTS: 0x11223344, Delay: 25, HighPSN: 1200, HighSACK: 0xf00000000000000f}
	s = append(s, sample{"Ack", a, nil})

	// Piggybacked acks (FlagAck) on every kind of data packet.
	piggy := AckExt{AckPSN: 4242, SACK: 0x5, Credits: 31, EchoTS: 0x01020304, Delay: 7, HighPSN: 4400, HighSACK: 0x3}
	for _, base := range []string{"SendOnly", "Write", "ReadRequest", "ReadResponse"} {
		for _, x := range s {
			if x.name == base {
				x.name += "+Ack"
				x.p.Flags |= FlagAck
				x.p.Ack = piggy
				s = append(s, x)
				break
			}
		}
	}

	s = append(s,
		cm(OpConnRequest, pattern(MaxPrivateData, 1), 0),
		cm(OpConnReply, pattern(10, 2), 0),
		cm(OpReadyToUse, nil, 0),
		cm(OpConnReject, pattern(5, 3), 28),
		cm(OpDisconnectReq, nil, 0),
		cm(OpDisconnectRep, pattern(1, 4), 0),
	)
	return s
}

// dgram encodes p, appends payload and the trailer.
func dgram(t testing.TB, p *Packet, payload []byte) []byte {
	t.Helper()
	b := make([]byte, 512+len(payload))
	n, err := Encode(b, p)
	if err != nil {
		t.Fatalf("encode %v: %v", p.Opcode, err)
	}
	b = append(b[:n], payload...)
	b = append(b, 0, 0, 0, 0)
	fixCRC(b)
	return b
}

// fixCRC rewrites the trailer of d to match the rest.
func fixCRC(d []byte) {
	if len(d) < TrailerLen {
		return
	}
	e := len(d) - TrailerLen
	PutTrailer(d[e:], UpdateCRC(0, d[:e]))
}

// split cuts d at the given offsets (nondecreasing, within d) into len(cuts)+1 segments,
// each copied into its own array so views cannot run from one segment into the next.
func split(d []byte, cuts ...int) [][]byte {
	segs := make([][]byte, 0, len(cuts)+1)
	prev := 0
	for _, c := range append(cuts, len(d)) {
		segs = append(segs, bytes.Clone(d[prev:c]))
		prev = c
	}
	return segs
}

// fixedLen returns the length of the part of d that must sit in the first segment (header,
// extension, private data), judged from the raw bytes; HeaderLen when the version or opcode
// is unknown or d is shorter than a header.
func fixedLen(d []byte) int {
	if len(d) < HeaderLen {
		return HeaderLen
	}
	ext, ok := ExtLen(Opcode(d[1]))
	if !ok || d[0] != Version {
		return HeaderLen
	}
	n := HeaderLen + ext
	if Flags(uint16(d[2])<<8|uint16(d[3]))&FlagAck&opTable[d[1]].flags != 0 {
		n += AckExtLen
	}
	if opTable[d[1]].kind == kindCM && len(d) >= n {
		n += int(uint16(d[n-2])<<8 | uint16(d[n-1]))
	}
	return n
}

// samePacket reports the first difference between two parsed packets, or "".
func samePacket(a, b *Packet) string {
	switch {
	case a.Header != b.Header:
		return "header"
	case !bytes.Equal(a.PrivateData, b.PrivateData):
		return "private data"
	case !bytes.Equal(payloadBytes(a), payloadBytes(b)):
		return "payload"
	}
	switch opTable[a.Opcode].kind {
	case kindSend:
		if a.Send != b.Send {
			return "send ext"
		}
	case kindWrite, kindReadReq:
		if a.RDMA != b.RDMA {
			return "rdma ext"
		}
	case kindReadResp:
		if a.ReadResp != b.ReadResp {
			return "readresp ext"
		}
	case kindAck:
		if a.Ack != b.Ack {
			return "ack ext"
		}
	case kindCM:
		if a.CM != b.CM {
			return "cm ext"
		}
	}
	return ""
}

func payloadBytes(p *Packet) []byte {
	var b []byte
	for _, v := range p.Payload[:p.NPayload] {
		b = append(b, v...)
	}
	return b
}

// checkAccepted verifies what must hold of any packet Parse accepted from segs: it re-encodes
// to the same header, extension and private data; its views lie inside segs, in order, and
// cover exactly the bytes between the fixed part and the trailer.
func checkAccepted(t testing.TB, segs [][]byte, p *Packet) {
	t.Helper()
	var buf [HeaderLen + CMExtLen + MaxPrivateData]byte
	n, err := Encode(buf[:], p)
	if err != nil {
		t.Fatalf("accepted packet does not re-encode: %v", err)
	}
	if len(segs[0]) < n || !bytes.Equal(buf[:n], segs[0][:n]) {
		t.Fatalf("re-encoded %x, want %x", buf[:n], segs[0][:min(n, len(segs[0]))])
	}
	var whole []byte
	for _, s := range segs {
		whole = append(whole, s...)
	}
	want := whole[n : len(whole)-TrailerLen]
	if p.NPayload < 0 || p.NPayload > MaxSegments {
		t.Fatalf("NPayload %d", p.NPayload)
	}
	for i := p.NPayload; i < MaxSegments; i++ {
		if p.Payload[i] != nil {
			t.Fatalf("Payload[%d] set beyond NPayload %d", i, p.NPayload)
		}
	}
	if !HasPayload(p.Opcode) {
		if p.NPayload != 0 {
			t.Fatalf("%v: %d payload views", p.Opcode, p.NPayload)
		}
		if opTable[p.Opcode].kind == kindCM {
			// Encode wrote the private data too: n covers it, and nothing follows it.
			pd := whole[HeaderLen+CMExtLen : len(whole)-TrailerLen]
			if len(want) != 0 || len(p.PrivateData) != int(p.CM.PrivateLen) || !bytes.Equal(p.PrivateData, pd) ||
				(len(pd) > 0 && !within(p.PrivateData, segs[0])) {
				t.Fatalf("private data view wrong")
			}
		} else if len(want) != 0 || p.PrivateData != nil {
			t.Fatalf("%v accepted with %d trailing bytes", p.Opcode, len(want))
		}
		return
	}
	if p.PrivateData != nil {
		t.Fatalf("%v: private data set", p.Opcode)
	}
	if got := p.PayloadLen(); got != len(want) {
		t.Fatalf("PayloadLen %d, want %d", got, len(want))
	}
	if !bytes.Equal(payloadBytes(p), want) {
		t.Fatalf("payload bytes differ")
	}
	// Each view lies inside a segment, later views in later segments.
	si := 0
	for i, v := range p.Payload[:p.NPayload] {
		if len(v) == 0 {
			t.Fatalf("empty payload view %d", i)
		}
		for si < len(segs) && !within(v, segs[si]) {
			si++
		}
		if si == len(segs) {
			t.Fatalf("payload view %d is not inside a segment (or out of order)", i)
		}
		si++
	}
}
