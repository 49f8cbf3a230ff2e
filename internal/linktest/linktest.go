// Package linktest checks the part of the link.Link contract every implementation must
// keep the same way, link.FlagCRC, for the tests of each implementation (xdp's Link and
// DeviceLink, transport/simlink, internal/faultlink, xdp/nexthop's hold area): datagrams
// laid out as the engine lays them out, with a trailer segment whose bytes the link must
// ignore, and a check of what arrives.
package linktest

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/xdpndk/xdpndk/transport/link"
)

// Junk is what CRCDatagram puts in the trailer segment: a link that sent it, or wrote over
// it, breaks the contract.
var Junk = [link.CRCLen]byte{0xDE, 0xAD, 0xBE, 0xEF}

// MinSize is the shortest datagram CRCDatagram lays out: the sequence number and a
// trailer.
const MinSize = 8 + link.CRCLen

// Pattern fills b with the bytes of datagram seq: seq little-endian in the first 8 (as far
// as b reaches), then bytes derived from it and their offset.
func Pattern(b []byte, seq uint64) {
	var s [8]byte
	binary.LittleEndian.PutUint64(s[:], seq)
	n := copy(b, s[:])
	for i := n; i < len(b); i++ {
		b[i] = byte(seq*131 + uint64(i)*7 + uint64(i>>8))
	}
}

// CRCDatagram lays out p as a link.FlagCRC datagram of size bytes (at least MinSize) to
// peer for seq, as the engine does: its first size-CRCLen bytes are Pattern(seq) in buf,
// cut into nseg-1 segments (nseg from 2 to link.MaxSegments; pieces of uneven, odd
// lengths), and its last segment is trl (CRCLen bytes, set to Junk). buf must hold
// size-CRCLen bytes.
func CRCDatagram(p *link.Packet, peer netip.AddrPort, seq uint64, size, nseg int, buf, trl []byte) {
	data := buf[:size-link.CRCLen]
	Pattern(data, seq)
	copy(trl[:link.CRCLen], Junk[:])
	*p = link.Packet{Remote: peer, Flags: link.FlagCRC}
	nseg = min(max(nseg, 2), link.MaxSegments)
	pieces := nseg - 1
	rest := data
	for i := 0; i < pieces-1 && len(rest) > 1; i++ {
		// The first piece is a header-like 8 bytes or less; the others split what is
		// left at an odd point.
		k := min(8, len(rest)-1)
		if i > 0 {
			k = len(rest)/3 | 1
		}
		p.Segs[p.NSegs] = rest[:k]
		p.NSegs++
		rest = rest[k:]
	}
	p.Segs[p.NSegs] = rest
	p.Segs[p.NSegs+1] = trl[:link.CRCLen]
	p.NSegs += 2
}

// Wire appends to dst the bytes a link sends for p: its segments, with the CRC32C in
// place of the trailer segment when p has link.FlagCRC.
func Wire(dst []byte, p *link.Packet) []byte {
	n := min(int(p.NSegs), link.MaxSegments)
	start := len(dst)
	for j := 0; j < n; j++ {
		if p.Flags&link.FlagCRC != 0 && j == n-1 {
			dst = binary.BigEndian.AppendUint32(dst, link.UpdateCRC(0, dst[start:]))
			break
		}
		dst = append(dst, p.Segs[j]...)
	}
	return dst
}

// CheckCRC checks a received datagram that was sent as CRCDatagram laid it out: its bytes
// (gathered into scratch, which must hold them) are Pattern of its sequence number
// followed by the CRC32C of those bytes, big-endian. It returns the sequence number, and
// an error saying what is wrong if anything is.
func CheckCRC(p *link.Packet, scratch []byte) (uint64, error) {
	data := scratch[:0]
	for j := 0; j < int(p.NSegs) && j < link.MaxSegments; j++ {
		data = append(data, p.Segs[j]...)
	}
	if len(data) < MinSize {
		return 0, fmt.Errorf("datagram of %d bytes, shorter than %d", len(data), MinSize)
	}
	body, trailer := data[:len(data)-link.CRCLen], data[len(data)-link.CRCLen:]
	seq := binary.LittleEndian.Uint64(body)
	if got, want := binary.BigEndian.Uint32(trailer), link.UpdateCRC(0, body); got != want {
		return seq, fmt.Errorf("datagram %d (%d bytes): trailer %08x, want the CRC32C %08x", seq, len(data), got, want)
	}
	for i := 8; i < len(body); i++ {
		if want := byte(seq*131 + uint64(i)*7 + uint64(i>>8)); body[i] != want {
			return seq, fmt.Errorf("datagram %d (%d bytes): byte %d is %#02x, want %#02x", seq, len(data), i, body[i], want)
		}
	}
	return seq, nil
}

// TrailerIntact reports whether trl, a trailer segment CRCDatagram set, still holds Junk:
// a link must not write the caller's trailer.
func TrailerIntact(trl []byte) bool {
	return len(trl) == link.CRCLen && [link.CRCLen]byte(trl) == Junk
}
