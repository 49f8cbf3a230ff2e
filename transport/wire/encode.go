package wire

import "encoding/binary"

// Encode writes p's (non-nil) header, the extension its opcode selects and, for the
// connection-management opcodes, p.PrivateData into the start of b, and returns the number
// of bytes written: HeaderLen + the extension length (+ CM.PrivateLen). The caller appends
// the payload, if any, and then the trailer (UpdateCRC over all of it, then PutTrailer).
//
// Encode checks only what makes the bytes unparseable as this packet: the opcode is known
// (ErrOpcode); p.Flags has no bit outside AllowedFlags(p.Opcode) (ErrFlags); for CM opcodes
// len(p.PrivateData) <= MaxPrivateData and == p.CM.PrivateLen (ErrPrivateData; Encode never
// derives PrivateLen, so a parsed packet re-encodes to the same bytes); and b holds the
// result (ErrShortBuffer). On error nothing is written. Field values Parse would reject
// (an unknown Syndrome, a Send Offset past Total, ...) are written as given: the receiver
// checks them, and tests rely on producing them. The version byte is always Version and the
// Ack reserved byte always zero.
//
// Encode does not allocate and is safe for concurrent use on distinct buffers.
func Encode(b []byte, p *Packet) (int, error) {
	info := &opTable[p.Opcode]
	if info.kind == kindNone {
		return 0, ErrOpcode
	}
	if p.Flags&^info.flags != 0 {
		return 0, ErrFlags
	}
	n := HeaderLen + int(info.ext)
	if p.Flags&FlagAck != 0 {
		if p.Ack.Syndrome != SynAck {
			return 0, ErrField // only a positive ack rides on data
		}
		n += AckExtLen
	}
	if info.kind == kindCM {
		if len(p.PrivateData) > MaxPrivateData || len(p.PrivateData) != int(p.CM.PrivateLen) {
			return 0, ErrPrivateData
		}
		n += len(p.PrivateData)
	}
	if len(b) < n {
		return 0, ErrShortBuffer
	}
	putHeader(b[:HeaderLen], &p.Header)
	if p.Flags&FlagAck != 0 {
		putAck(b[HeaderLen+int(info.ext):n], &p.Ack)
	}
	e := b[HeaderLen:n]
	switch info.kind {
	case kindSend:
		putSend(e, &p.Send)
	case kindWrite, kindReadReq:
		putRDMA(e, &p.RDMA)
	case kindReadResp:
		putReadResp(e, &p.ReadResp)
	case kindAck:
		putAck(e, &p.Ack)
	case kindCM:
		putCM(e, &p.CM)
		copy(e[CMExtLen:], p.PrivateData)
	}
	return n, nil
}

// EncodeHeader writes header h alone into the start of b (HeaderLen bytes): the header of
// a Bundle, or of a data packet whose extension and payload are already in place after it.
// It fails, writing nothing, for an unknown opcode (ErrOpcode), flags the opcode does not
// allow (ErrFlags) or a b too short (ErrShortBuffer).
func EncodeHeader(b []byte, h *Header) error {
	info := &opTable[h.Opcode]
	switch {
	case info.kind == kindNone:
		return ErrOpcode
	case h.Flags&^info.flags != 0:
		return ErrFlags
	case len(b) < HeaderLen:
		return ErrShortBuffer
	}
	putHeader(b[:HeaderLen], h)
	return nil
}

func putHeader(b []byte, h *Header) {
	_ = b[HeaderLen-1]
	b[0] = Version
	b[1] = byte(h.Opcode)
	binary.BigEndian.PutUint16(b[2:4], uint16(h.Flags))
	binary.BigEndian.PutUint32(b[4:8], h.DestQPN)
	binary.BigEndian.PutUint32(b[8:12], uint32(h.PSN))
	binary.BigEndian.PutUint64(b[12:20], h.Cookie)
	binary.BigEndian.PutUint32(b[20:24], h.TS)
}

func putSend(b []byte, s *SendExt) {
	_ = b[SendExtLen-1]
	binary.BigEndian.PutUint32(b[0:4], s.MSN)
	binary.BigEndian.PutUint32(b[4:8], s.Offset)
	binary.BigEndian.PutUint32(b[8:12], s.Total)
	binary.BigEndian.PutUint32(b[12:16], s.InvToken)
}

func putRDMA(b []byte, r *RDMAExt) {
	_ = b[RDMAExtLen-1]
	binary.BigEndian.PutUint64(b[0:8], r.Addr)
	binary.BigEndian.PutUint32(b[8:12], r.Token)
	binary.BigEndian.PutUint32(b[12:16], r.Length)
	binary.BigEndian.PutUint32(b[16:20], r.Offset)
}

func putReadResp(b []byte, r *ReadRespExt) {
	_ = b[ReadRespLen-1]
	binary.BigEndian.PutUint32(b[0:4], uint32(r.ReqPSN))
	binary.BigEndian.PutUint32(b[4:8], r.Offset)
}

func putAck(b []byte, a *AckExt) {
	_ = b[AckExtLen-1]
	binary.BigEndian.PutUint32(b[0:4], uint32(a.AckPSN))
	binary.BigEndian.PutUint64(b[4:12], a.SACK)
	binary.BigEndian.PutUint32(b[12:16], a.Credits)
	b[16] = byte(a.Syndrome)
	b[17] = 0 // reserved
	binary.BigEndian.PutUint16(b[18:20], a.Value)
	binary.BigEndian.PutUint32(b[20:24], uint32(a.NakPSN))
	binary.BigEndian.PutUint32(b[24:28], a.EchoTS)
	binary.BigEndian.PutUint32(b[28:32], a.Delay)
	binary.BigEndian.PutUint32(b[32:36], uint32(a.HighPSN))
	binary.BigEndian.PutUint64(b[36:44], a.HighSACK)
}

func putCM(b []byte, c *CMExt) {
	_ = b[CMExtLen-1]
	binary.BigEndian.PutUint64(b[0:8], c.ServiceID)
	binary.BigEndian.PutUint64(b[8:16], c.ConnID)
	binary.BigEndian.PutUint32(b[16:20], c.SrcQPN)
	binary.BigEndian.PutUint32(b[20:24], uint32(c.InitialPSN))
	binary.BigEndian.PutUint64(b[24:32], c.Cookie)
	binary.BigEndian.PutUint16(b[32:34], c.MaxPayload)
	b[34] = c.IRD
	b[35] = c.ORD
	binary.BigEndian.PutUint16(b[36:38], c.DataPort)
	binary.BigEndian.PutUint16(b[38:40], c.Reason)
	binary.BigEndian.PutUint16(b[40:42], c.PrivateLen)
}
