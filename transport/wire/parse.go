package wire

import (
	"encoding/binary"
	"math"
)

// MaxSendTotal is the largest Send message, in bytes, a SendExt.Total may announce (2^31).
const MaxSendTotal = 1 << 31

// Parse parses one datagram (a UDP payload) that arrived as the segments segs, in order, and
// fills p (which must not be nil) with views into them (no copies). segs[0] must hold the header, the opcode's
// extension and any connection-management private data; the payload and the 4-byte trailer
// may be split across the segments in any way, the trailer too. Empty segments are allowed.
//
// Parse checks, in this order, returning the first failure:
//
//  1. at most MaxSegments segments (ErrSegments);
//  2. the datagram holds a header and a trailer (ErrShort) and segs[0] the header
//     (ErrSegments);
//  3. the version (ErrVersion) and the opcode (ErrOpcode);
//  4. the datagram holds the extension too (ErrShort) and segs[0] holds it (ErrSegments);
//  5. the CRC32C trailer over everything before it (ErrCRC);
//  6. no flag outside AllowedFlags(opcode) (ErrFlags);
//  7. connection management: PrivateLen <= MaxPrivateData (ErrPrivateData), exactly
//     PrivateLen bytes between the extension and the trailer (ErrLength), and all of them
//     in segs[0] (ErrSegments); other opcodes without a payload: nothing between extension
//     and trailer (ErrLength);
//  8. the opcode's own rules (ErrField, ErrLength), listed in docs/PROTOCOL.md: Send Total
//     <= MaxSendTotal, InvToken non-zero exactly on the *Inv opcodes, Offset and payload
//     placed as the opcode says (Only: [0, Total); First: from 0, ending before Total;
//     Middle: from past 0, ending before Total; Last: from past 0, ending at Total; First,
//     Middle and Last non-empty); Write Offset+len <= Length; ReadRequest Length > 0 and
//     Offset 0; ReadResponse Offset+len <= 2^32-1; Ack PSN 0, Syndrome known, reserved byte
//     0; ConnRequest, ConnReply, ReadyToUse and ConnReject ConnID non-zero; Bundle PSN 0,
//     at least one entry, entries that fill it exactly, each a data packet meeting these
//     same checks (ErrOpcode, ErrFlags, ErrLength, ErrField for the first that does not);
//     MultiBundle the same, DestQPN and Cookie 0 too, its entries in groups each of Count
//     >= 1 entries (ErrField), the groups filling it exactly (ErrLength).
//
// Parse checks what is wrong whoever receives the packet. What depends on the receiver is
// left to it and answered rather than dropped: whether a Write's or ReadRequest's range
// [Addr, Addr+Length) is memory the peer may touch (wrapping past 2^64 included) and not
// longer than a message may be (access or invalid-request NAK), and whether a ConnRequest
// or ConnReply offers a connection that can be set up (ValidConnFields; a ConnReject).
//
// On success p.Header, the opcode's extension, p.PrivateData (nil unless connection
// management), p.Payload and p.NPayload are set; the other extensions are left as they were.
// On error p's contents are undefined (partly written) and must not be used. Parse never
// panics, does not allocate, and keeps no reference to segs or p after it returns.
func Parse(segs [][]byte, p *Packet) error {
	if len(segs) > MaxSegments {
		return ErrSegments
	}
	total := 0
	for _, s := range segs {
		total += len(s)
	}
	if total < HeaderLen+TrailerLen {
		return ErrShort
	}
	s0 := segs[0]
	if len(s0) < HeaderLen {
		return ErrSegments
	}
	if s0[0] != Version {
		return ErrVersion
	}
	info := &opTable[s0[1]]
	if info.kind == kindNone {
		return ErrOpcode
	}
	// A piggybacked ack (FlagAck, on opcodes that allow it) sits between the opcode's
	// extension and the payload.
	flags := Flags(binary.BigEndian.Uint16(s0[2:4]))
	ackLen := 0
	if flags&FlagAck&info.flags != 0 {
		ackLen = AckExtLen
	}
	fixed := HeaderLen + int(info.ext) + ackLen
	if total < fixed+TrailerLen {
		return ErrShort
	}
	if len(s0) < fixed {
		return ErrSegments
	}

	// One pass over the segments: the CRC over [0, end), the payload views over
	// [fixed, end), the trailer bytes [end, total).
	end := total - TrailerLen
	wantPayload := info.kind == kindSend || info.kind == kindWrite || info.kind == kindReadResp || info.kind == kindBundle
	var crc uint32
	var trailer [TrailerLen]byte
	np := 0
	if len(segs) == 1 {
		crc = UpdateCRC(0, s0[:end])
		copy(trailer[:], s0[end:])
		if wantPayload && end > fixed {
			p.Payload[0] = s0[fixed:end:end]
			np = 1
		}
	} else {
		off := 0
		for _, s := range segs {
			segEnd := off + len(s)
			if off < end {
				c := s
				if segEnd > end {
					c = s[:end-off]
				}
				crc = UpdateCRC(crc, c)
				if wantPayload && segEnd > fixed {
					a := max(fixed-off, 0)
					if len(c) > a {
						p.Payload[np] = c[a:len(c):len(c)]
						np++
					}
				}
			}
			if segEnd > end {
				a := max(end-off, 0)
				copy(trailer[off+a-end:], s[a:])
			}
			off = segEnd
		}
	}
	if binary.BigEndian.Uint32(trailer[:]) != crc {
		return ErrCRC
	}
	for i := np; i < MaxSegments; i++ {
		p.Payload[i] = nil
	}
	p.NPayload = np

	h := s0[:HeaderLen]
	p.Flags = flags
	if p.Flags&^info.flags != 0 {
		return ErrFlags
	}
	p.Opcode = Opcode(h[1])
	p.DestQPN = binary.BigEndian.Uint32(h[4:8])
	p.PSN = PSN(binary.BigEndian.Uint32(h[8:12]))
	p.Cookie = binary.BigEndian.Uint64(h[12:20])
	p.TS = binary.BigEndian.Uint32(h[20:24])
	p.PrivateData = nil

	e := s0[HeaderLen : HeaderLen+int(info.ext)]
	plen := end - fixed // bytes between the extensions and the trailer
	if ackLen > 0 {
		if a := s0[HeaderLen+int(info.ext) : fixed]; !decodeAck(a, &p.Ack) || p.Ack.Syndrome != SynAck {
			return ErrField
		}
	}
	switch info.kind {
	case kindSend:
		return parseSend(e, p, plen)
	case kindWrite:
		return parseWrite(e, p, plen)
	case kindReadReq:
		return parseReadReq(e, p, plen)
	case kindReadResp:
		return parseReadResp(e, p, plen)
	case kindAck:
		return parseAck(e, p, plen)
	case kindBundle:
		return parseBundle(p)
	default: // kindCM
		return parseCM(s0, p, plen)
	}
}

func parseSend(b []byte, p *Packet, plen int) error {
	_ = b[SendExtLen-1]
	s := &p.Send
	s.MSN = binary.BigEndian.Uint32(b[0:4])
	s.Offset = binary.BigEndian.Uint32(b[4:8])
	s.Total = binary.BigEndian.Uint32(b[8:12])
	s.InvToken = binary.BigEndian.Uint32(b[12:16])
	if s.Total > MaxSendTotal {
		return ErrField
	}
	inv := p.Opcode == OpSendLastInv || p.Opcode == OpSendOnlyInv
	if inv != (s.InvToken != 0) {
		return ErrField
	}
	first := p.Opcode == OpSendFirst || p.Opcode == OpSendOnly || p.Opcode == OpSendOnlyInv
	if first != (s.Offset == 0) {
		return ErrField
	}
	stop := uint64(s.Offset) + uint64(plen) // cannot overflow: both < 2^32
	total := uint64(s.Total)
	switch p.Opcode {
	case OpSendOnly, OpSendOnlyInv:
		if stop != total {
			return ErrLength
		}
	case OpSendLast, OpSendLastInv:
		if plen == 0 || stop != total {
			return ErrLength
		}
	default: // First, Middle
		if plen == 0 || stop >= total {
			return ErrLength
		}
	}
	return nil
}

func parseWrite(b []byte, p *Packet, plen int) error {
	r := decodeRDMA(b, &p.RDMA)
	// Whether [Addr, Addr+Length) is valid memory (including wrapping past 2^64) is the
	// receiver's access check, answered with an access NAK, not a parse error.
	if uint64(r.Offset)+uint64(plen) > uint64(r.Length) {
		return ErrLength
	}
	return nil
}

func parseReadReq(b []byte, p *Packet, plen int) error {
	r := decodeRDMA(b, &p.RDMA)
	if plen != 0 {
		return ErrLength
	}
	if r.Length == 0 || r.Offset != 0 {
		return ErrField
	}
	return nil
}

func decodeRDMA(b []byte, r *RDMAExt) *RDMAExt {
	_ = b[RDMAExtLen-1]
	r.Addr = binary.BigEndian.Uint64(b[0:8])
	r.Token = binary.BigEndian.Uint32(b[8:12])
	r.Length = binary.BigEndian.Uint32(b[12:16])
	r.Offset = binary.BigEndian.Uint32(b[16:20])
	return r
}

func parseReadResp(b []byte, p *Packet, plen int) error {
	_ = b[ReadRespLen-1]
	r := &p.ReadResp
	r.ReqPSN = PSN(binary.BigEndian.Uint32(b[0:4]))
	r.Offset = binary.BigEndian.Uint32(b[4:8])
	if uint64(r.Offset)+uint64(plen) > math.MaxUint32 {
		return ErrLength
	}
	return nil
}

func parseAck(b []byte, p *Packet, plen int) error {
	ok := decodeAck(b, &p.Ack)
	if plen != 0 {
		return ErrLength
	}
	if p.PSN != 0 || !ok {
		return ErrField
	}
	return nil
}

// decodeAck reads an AckExt from b (AckExtLen bytes) and reports whether its syndrome is
// known and its reserved byte zero.
func decodeAck(b []byte, a *AckExt) bool {
	_ = b[AckExtLen-1]
	a.AckPSN = PSN(binary.BigEndian.Uint32(b[0:4]))
	a.SACK = binary.BigEndian.Uint64(b[4:12])
	a.Credits = binary.BigEndian.Uint32(b[12:16])
	a.Syndrome = Syndrome(b[16])
	a.Value = binary.BigEndian.Uint16(b[18:20])
	a.NakPSN = PSN(binary.BigEndian.Uint32(b[20:24]))
	a.EchoTS = binary.BigEndian.Uint32(b[24:28])
	a.Delay = binary.BigEndian.Uint32(b[28:32])
	a.HighPSN = PSN(binary.BigEndian.Uint32(b[32:36]))
	a.HighSACK = binary.BigEndian.Uint64(b[36:44])
	return a.Syndrome <= SynNakInvalToken && b[17] == 0
}

func parseCM(s0 []byte, p *Packet, plen int) error {
	b := s0[HeaderLen : HeaderLen+CMExtLen]
	c := &p.CM
	c.ServiceID = binary.BigEndian.Uint64(b[0:8])
	c.ConnID = binary.BigEndian.Uint64(b[8:16])
	c.SrcQPN = binary.BigEndian.Uint32(b[16:20])
	c.InitialPSN = PSN(binary.BigEndian.Uint32(b[20:24]))
	c.Cookie = binary.BigEndian.Uint64(b[24:32])
	c.MaxPayload = binary.BigEndian.Uint16(b[32:34])
	c.IRD = b[34]
	c.ORD = b[35]
	c.DataPort = binary.BigEndian.Uint16(b[36:38])
	c.Reason = binary.BigEndian.Uint16(b[38:40])
	c.PrivateLen = binary.BigEndian.Uint16(b[40:42])
	n := int(c.PrivateLen)
	if n > MaxPrivateData {
		return ErrPrivateData
	}
	if plen != n {
		return ErrLength
	}
	const start = HeaderLen + CMExtLen
	if len(s0) < start+n {
		return ErrSegments
	}
	if n > 0 {
		p.PrivateData = s0[start : start+n : start+n]
	}
	switch p.Opcode {
	case OpConnRequest, OpConnReply, OpReadyToUse, OpConnReject:
		// These name the attempt by ConnID; no endpoint picks 0, and a reject naming it
		// could reach no one.
		if c.ConnID == 0 {
			return ErrField
		}
	}
	return nil
}

// ValidConnFields reports whether a parsed ConnRequest or ConnReply offers a connection the
// receiver can set up: SrcQPN and DataPort non-zero, MaxPayload in [MinMaxPayload,
// MaxMaxPayload] and, on a ConnReply, a Cookie that is non-zero and equal to the header's.
// It reports false for every other opcode. Parse does not apply these checks: a receiver
// answers a request or reply that fails them with a ConnReject, so that the peer learns at
// once why instead of retrying until it times out.
func ValidConnFields(p *Packet) bool {
	c := &p.CM
	switch {
	case p.Opcode != OpConnRequest && p.Opcode != OpConnReply:
		return false
	case c.SrcQPN == 0, c.DataPort == 0:
		return false
	case c.MaxPayload < MinMaxPayload || c.MaxPayload > MaxMaxPayload:
		return false
	case p.Opcode == OpConnReply && (c.Cookie == 0 || c.Cookie != p.Cookie):
		return false
	}
	return true
}
