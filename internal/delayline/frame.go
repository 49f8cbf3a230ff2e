package delayline

import (
	"bytes"
	"net/netip"
)

// Ethernet and IPv4 header offsets of a frame.
const (
	ethLen     = 14
	ethTypeOff = 12
	ethTypeIP4 = 0x0800
	ipMinLen   = 20
	ipTTLOff   = ethLen + 8
	ipCsumOff  = ethLen + 10
	ipDstOff   = ethLen + 16
	ipProtoOff = ethLen + 9
	protoTCP   = 6
	protoUDP   = 17
)

// forwardable reports whether frame, read from port in, is to be forwarded out of port
// out: an IPv4 frame addressed to in's MAC, with a well-formed header, a destination in
// out's subnet that is not the router's own, and a TTL above 1.
func forwardable(frame []byte, in, out *Port) bool {
	if len(frame) < ethLen+ipMinLen {
		return false
	}
	if int(frame[ethTypeOff])<<8|int(frame[ethTypeOff+1]) != ethTypeIP4 || !bytes.Equal(frame[:6], in.MAC) {
		return false
	}
	ip := frame[ethLen:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[0]>>4 != 4 || ihl < ipMinLen || len(ip) < ihl {
		return false
	}
	if ip[8] <= 1 {
		return false
	}
	dst := netip.AddrFrom4([4]byte(frame[ipDstOff : ipDstOff+4]))
	return out.Prefix.Contains(dst) && dst != out.Addr && dst != in.Addr
}

// route rewrites a forwardable frame for port out, as a router does: the Ethernet source
// becomes out's MAC and the destination the next host's, the TTL is decremented and the
// header checksum patched for it (RFC 1624: the 16-bit word holding the TTL drops by
// 0x0100, so the checksum rises by as much, with the end-around carry).
func route(frame []byte, out *Port) {
	copy(frame[0:6], out.PeerMAC)
	copy(frame[6:12], out.MAC)
	frame[ipTTLOff]--
	c := uint32(frame[ipCsumOff])<<8 | uint32(frame[ipCsumOff+1])
	c += 0x0100
	c = (c + c>>16) & 0xffff
	frame[ipCsumOff], frame[ipCsumOff+1] = byte(c>>8), byte(c)
}
