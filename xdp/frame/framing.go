package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// Framing: the Ethernet II / IPv4 or IPv6 / UDP encapsulation that carries the transport's
// datagrams on the wire. Encap builds the headers for one peer from a template computed once;
// ParseUDP reads them back from a received frame. Neither Put nor ParseUDP allocates, and
// nothing here panics on any input.
//
// Specifications followed: Ethernet II with IEEE 802.1Q / 802.1ad tags, RFC 791 (IPv4),
// RFC 8200 (IPv6), RFC 768 (UDP), RFC 1071 (checksum computation).

// Header sizes in bytes.
const (
	ethHeaderLen  = 14 // destination MAC, source MAC, EtherType
	vlanTagLen    = 4  // TPID, TCI
	ipv4HeaderLen = 20 // without options
	ipv6HeaderLen = 40 // fixed header
	udpHeaderLen  = 8

	// MaxHeaderLen is the largest HeaderLen an Encap can have: a VLAN-tagged Ethernet
	// header, an IPv6 header and a UDP header (66 bytes).
	MaxHeaderLen = ethHeaderLen + vlanTagLen + ipv6HeaderLen + udpHeaderLen
)

// Protocol numbers, header fields and limits.
const (
	etherTypeIPv4   = 0x0800
	etherTypeIPv6   = 0x86DD
	etherTypeVLAN   = 0x8100 // IEEE 802.1Q customer tag
	etherTypeQinQ   = 0x88A8 // IEEE 802.1ad service tag
	ipProtoUDP      = 17
	ipv6HopByHop    = 0
	ipv6Routing     = 43
	ipv6Fragment    = 44
	ipv6DestOptions = 60
	// maxIPv6ExtHeaders bounds the extension header walk; real stacks send one or two.
	maxIPv6ExtHeaders = 8

	ipv4FlagDF      = 0x4000
	ipv4FragMask    = 0x3FFF // MF flag and fragment offset
	defaultTTL      = 64
	maxIPv4Payload  = 0xFFFF - ipv4HeaderLen - udpHeaderLen // 65507
	maxIPv6Payload  = 0xFFFF - udpHeaderLen                 // 65527, no jumbograms
	vlanTCIMaskVID  = 0x0FFF
	vlanTCIMaskDEI  = 0x1000
	vlanReservedVID = 0x0FFF
)

// Errors returned by ParseUDP, VerifyUDPChecksum and Encap. ParseUDP and Put return them
// unwrapped (wrapping would allocate); compare with errors.Is.
var (
	// ErrTruncated means the frame ends before a header does: either the first buffer is
	// too short for the Ethernet, IP and UDP headers, or the whole frame (totalLen) is
	// shorter than the IP header says the datagram is.
	ErrTruncated = errors.New("xdp: frame truncated")
	// ErrNotIP means the EtherType, after at most two VLAN tags, is neither IPv4 nor IPv6.
	ErrNotIP = errors.New("xdp: not an IPv4 or IPv6 frame")
	// ErrBadHeader means the IP header is malformed: wrong version for the EtherType, IPv4
	// header length below 20 bytes, misplaced or too many IPv6 extension headers.
	ErrBadHeader = errors.New("xdp: malformed IP header")
	// ErrBadChecksum means the IPv4 header checksum is wrong or an IPv6 datagram has a zero
	// UDP checksum (ParseUDP), or the UDP checksum is wrong (VerifyUDPChecksum).
	ErrBadChecksum = errors.New("xdp: bad checksum")
	// ErrFragment means the datagram is an IP fragment (IPv4 MF flag or fragment offset set,
	// or an IPv6 fragment header). The transport never fragments, so fragments are refused.
	ErrFragment = errors.New("xdp: IP fragment")
	// ErrNotUDP means the IP datagram carries another protocol than UDP.
	ErrNotUDP = errors.New("xdp: not a UDP datagram")
	// ErrBadLength means length fields disagree: IP length below the IP header length, IP
	// payload too short for a UDP header, UDP length below 8 or beyond the IP payload,
	// or a totalLen below the first buffer's length.
	ErrBadLength = errors.New("xdp: inconsistent length fields")

	// ErrInvalidEncap is wrapped by the errors of Encap.Validate.
	ErrInvalidEncap = errors.New("xdp: invalid encapsulation")
	// ErrEncapNotValidated is returned by Encap.Put when Validate has not succeeded on it.
	ErrEncapNotValidated = errors.New("xdp: encapsulation used before Validate")
	// ErrNoHeadroom is returned by Encap.Put when the buffer is shorter than HeaderLen.
	ErrNoHeadroom = errors.New("xdp: buffer too short for the headers")
	// ErrPayloadTooLarge is returned by Encap.Put when the payload does not fit in one IP
	// datagram (65507 bytes of UDP payload over IPv4, 65527 over IPv6), or is negative.
	ErrPayloadTooLarge = errors.New("xdp: payload too large for one IP datagram")
)

// Encap is the Ethernet/IP/UDP header template for datagrams from one local endpoint to one
// peer. Fill in the exported fields, call Validate once (it checks them and precomputes the
// constant header bytes and partial checksums into unexported fields), then call Put for
// every datagram. After changing any exported field call Validate again: Put always writes
// the template of the last successful Validate.
//
// An Encap holds no pointers; copying it copies the template. After Validate, any number of
// goroutines may call Put, HeaderLen and the other read-only methods concurrently; Validate
// itself must not run concurrently with them.
type Encap struct {
	// SrcMAC is the local interface's MAC address; DstMAC the next hop's (package xdp's
	// Resolver finds it).
	SrcMAC, DstMAC [6]byte
	// VLAN is the 802.1Q tag control information to send: VLAN id in the low 12 bits,
	// priority (PCP) in the top 3 bits, the DEI bit (0x1000) clear. 0 sends untagged frames.
	VLAN uint16
	// Src and Dst are the IP addresses of the local endpoint and the peer: both IPv4 or
	// both IPv6 (IPv4-mapped IPv6 addresses are refused: Unmap them). An IPv6 zone is
	// ignored.
	Src, Dst netip.Addr
	// SrcPort and DstPort are the UDP ports. Put may override SrcPort, PutTo both, per
	// datagram.
	SrcPort, DstPort uint16
	// TTL is the IPv4 time to live or the IPv6 hop limit; 0 means 64.
	TTL uint8
	// DSCP is the differentiated services code point (0..63) sent in the IPv4 TOS or IPv6
	// traffic class byte; ECN bits are sent as 0 (not ECN-capable).
	DSCP uint8

	// The template, written by Validate only.
	tmpl       [MaxHeaderLen]byte // headers with every per-datagram field zero
	hdrLen     uint8              // bytes of tmpl in use
	ipOff      uint8              // offset of the IP header in tmpl
	ipv6       bool               // IPv6 rather than IPv4
	ready      bool               // Validate succeeded
	maxPayload int32              // largest payloadLen Put accepts
	srcPort    uint16             // default UDP source port
	ipSum      uint32             // IPv4: sum of the constant header words (not length, checksum)
	udpSum     uint32             // sum of the constant pseudo-header words
	dstPort    uint16             // default UDP destination port
}

// HeaderLen returns the number of header bytes Put writes for e's fields: 14 for Ethernet,
// 4 more with a VLAN tag, 20 for IPv4 or 40 for IPv6, and 8 for UDP. It reads the exported
// fields, so it is meaningful before Validate too (an invalid Dst counts as IPv4).
func (e *Encap) HeaderLen() int {
	n := ethHeaderLen + ipv4HeaderLen + udpHeaderLen
	if e.VLAN != 0 {
		n += vlanTagLen
	}
	if e.Dst.Is6() {
		n += ipv6HeaderLen - ipv4HeaderLen
	}
	return n
}

// IPv6 reports whether the template of the last successful Validate is an IPv6 one: false
// before any. Put computes the UDP checksum of an IPv6 datagram always (RFC 8200 section
// 8.1), so a caller that leaves it out over IPv4 (a nil payloadSum) asks this first.
func (e *Encap) IPv6() bool { return e.ipv6 }

// MaxPayload returns the largest UDP payload, in bytes, one datagram to this peer may carry
// as far as IP is concerned (65507 over IPv4, 65527 over IPv6). The link MTU is usually the
// tighter limit: a payload fits an MTU when HeaderLen()-14-(4 if tagged)+payload <= MTU.
func (e *Encap) MaxPayload() int {
	if e.Dst.Is6() {
		return maxIPv6Payload
	}
	return maxIPv4Payload
}

// Validate checks e's fields and precomputes the template Put writes. The error wraps
// ErrInvalidEncap and says which field is wrong; on error the previous template is dropped
// and Put fails until a Validate succeeds.
func (e *Encap) Validate() error {
	e.ready = false
	if err := e.check(); err != nil {
		return fmt.Errorf("validate encap: %w: %w", err, ErrInvalidEncap)
	}
	e.prepare()
	e.ready = true
	return nil
}

// check validates the exported fields.
func (e *Encap) check() error {
	src, dst := e.Src, e.Dst
	switch {
	case !src.IsValid() || !dst.IsValid():
		return errors.New("source and destination addresses must be set")
	case src.Is4() != dst.Is4():
		return fmt.Errorf("source %v and destination %v are of different IP versions", src, dst)
	case src.Is4In6() || dst.Is4In6():
		return fmt.Errorf("IPv4-mapped address in %v -> %v: unmap it", src, dst)
	case src.IsUnspecified() || dst.IsUnspecified():
		return fmt.Errorf("unspecified address in %v -> %v", src, dst)
	case src.IsMulticast() || dst.IsMulticast():
		return fmt.Errorf("multicast address in %v -> %v", src, dst)
	case e.SrcPort == 0 || e.DstPort == 0:
		return fmt.Errorf("zero UDP port in %d -> %d", e.SrcPort, e.DstPort)
	case e.DSCP > 63:
		return fmt.Errorf("DSCP %d above 63", e.DSCP)
	case e.VLAN&vlanTCIMaskDEI != 0:
		return fmt.Errorf("VLAN TCI %#04x has the DEI bit set", e.VLAN)
	case e.VLAN != 0 && e.VLAN&vlanTCIMaskVID == vlanReservedVID:
		return fmt.Errorf("VLAN id %d is reserved", vlanReservedVID)
	case e.SrcMAC[0]&1 != 0 || e.SrcMAC == [6]byte{}:
		return fmt.Errorf("source MAC %x is not a unicast address", e.SrcMAC)
	case e.DstMAC == [6]byte{}:
		return errors.New("destination MAC is all zeros")
	}
	return nil
}

// prepare fills the template from fields that check accepted.
func (e *Encap) prepare() {
	e.tmpl = [MaxHeaderLen]byte{}
	t := e.tmpl[:]
	copy(t[0:6], e.DstMAC[:])
	copy(t[6:12], e.SrcMAC[:])
	off := 12
	if e.VLAN != 0 {
		binary.BigEndian.PutUint16(t[off:], etherTypeVLAN)
		binary.BigEndian.PutUint16(t[off+2:], e.VLAN)
		off += vlanTagLen
	}
	ttl := e.TTL
	if ttl == 0 {
		ttl = defaultTTL
	}
	tos := e.DSCP << 2

	var ps Checksum // pseudo-header and constant UDP words
	var udpOff int
	if e.Dst.Is4() {
		binary.BigEndian.PutUint16(t[off:], etherTypeIPv4)
		off += 2
		e.ipOff = uint8(off)
		ip := t[off : off+ipv4HeaderLen]
		ip[0] = 0x45 // version 4, IHL 5
		ip[1] = tos
		// ip[2:4] total length: per datagram. ip[4:6] identification: 0, allowed with DF
		// (RFC 6864: the ID only serves reassembly, and these datagrams are never
		// fragmented).
		binary.BigEndian.PutUint16(ip[6:], ipv4FlagDF)
		ip[8] = ttl
		ip[9] = ipProtoUDP
		// ip[10:12] header checksum: per datagram.
		src, dst := e.Src.As4(), e.Dst.As4()
		copy(ip[12:16], src[:])
		copy(ip[16:20], dst[:])
		var hs Checksum
		hs.Add(ip)
		e.ipSum = uint32(fold64(hs.sum))
		ps.Add(src[:])
		ps.Add(dst[:])
		e.ipv6 = false
		e.maxPayload = maxIPv4Payload
		udpOff = off + ipv4HeaderLen
	} else {
		binary.BigEndian.PutUint16(t[off:], etherTypeIPv6)
		off += 2
		e.ipOff = uint8(off)
		ip := t[off : off+ipv6HeaderLen]
		// Version 6, traffic class, flow label 0 (the UDP source port already gives
		// ECMP and RSS their per-flow entropy).
		binary.BigEndian.PutUint32(ip[0:], 6<<28|uint32(tos)<<20)
		// ip[4:6] payload length: per datagram.
		ip[6] = ipProtoUDP
		ip[7] = ttl
		src, dst := e.Src.As16(), e.Dst.As16()
		copy(ip[8:24], src[:])
		copy(ip[24:40], dst[:])
		e.ipSum = 0
		ps.Add(src[:])
		ps.Add(dst[:])
		e.ipv6 = true
		e.maxPayload = maxIPv6Payload
		udpOff = off + ipv6HeaderLen
	}
	udp := t[udpOff : udpOff+udpHeaderLen]
	binary.BigEndian.PutUint16(udp[0:], e.SrcPort)
	binary.BigEndian.PutUint16(udp[2:], e.DstPort)
	// udp[4:6] length and udp[6:8] checksum: per datagram.
	ps.AddUint16(ipProtoUDP)
	e.udpSum = uint32(fold64(ps.sum))
	e.srcPort = e.SrcPort
	e.dstPort = e.DstPort
	e.hdrLen = uint8(udpOff + udpHeaderLen)
}

// Put writes into b[:HeaderLen()] the Ethernet, IP and UDP headers of a datagram whose UDP
// payload is payloadLen bytes, and returns HeaderLen. The payload itself is not touched: it
// follows the headers on the wire, in the same buffer or in further buffers of a
// multi-buffer (scatter-gather) frame.
//
// payloadSum must have been fed (Checksum.Add, in wire order, starting from an empty sum)
// with exactly the payloadLen payload bytes; Put reads it and does not change it. The UDP
// checksum Put writes covers the pseudo-header, the UDP header and that sum. A computed
// checksum of 0 is sent as 0xFFFF (RFC 768, RFC 8200 section 8.1). If payloadSum is nil,
// an IPv4 datagram is sent without UDP checksum (field 0, allowed by RFC 768) and an IPv6
// one is refused with ErrBadChecksum, since IPv6 requires it.
//
// srcPort, when not 0, overrides e.SrcPort for this datagram (per-flow entropy for ECMP and
// RSS). The IPv4 header gets DF set, identification 0 and a correct header checksum.
//
// Put fails with ErrEncapNotValidated, ErrNoHeadroom (len(b) < HeaderLen()) or
// ErrPayloadTooLarge (payloadLen negative or above MaxPayload), writing nothing. It does not
// allocate and is safe to call concurrently on one validated Encap.
func (e *Encap) Put(b []byte, payloadLen int, payloadSum *Checksum, srcPort uint16) (int, error) {
	return e.PutTo(b, payloadLen, payloadSum, srcPort, 0)
}

// PutTo is Put with the UDP destination port given per datagram too: dstPort, when not 0,
// overrides e.DstPort, so that one template serves every port of a peer (the next hop
// depends on the peer's IP address only). It does not allocate and is safe to call
// concurrently on one validated Encap.
func (e *Encap) PutTo(b []byte, payloadLen int, payloadSum *Checksum, srcPort, dstPort uint16) (int, error) {
	if !e.ready {
		return 0, ErrEncapNotValidated
	}
	n := int(e.hdrLen)
	if len(b) < n {
		return 0, ErrNoHeadroom
	}
	if payloadLen < 0 || payloadLen > int(e.maxPayload) {
		return 0, ErrPayloadTooLarge
	}
	if payloadSum == nil && e.ipv6 {
		return 0, ErrBadChecksum
	}
	if srcPort == 0 {
		srcPort = e.srcPort
	}
	if dstPort == 0 {
		dstPort = e.dstPort
	}
	h := b[:n:n]
	copy(h, e.tmpl[:n])
	udpLen := uint16(payloadLen + udpHeaderLen)
	ipOff := int(e.ipOff)
	var udpOff int
	if e.ipv6 {
		binary.BigEndian.PutUint16(h[ipOff+4:], udpLen)
		udpOff = ipOff + ipv6HeaderLen
	} else {
		totalLen := udpLen + ipv4HeaderLen
		binary.BigEndian.PutUint16(h[ipOff+2:], totalLen)
		binary.BigEndian.PutUint16(h[ipOff+10:], ^fold64(uint64(e.ipSum)+uint64(totalLen)))
		udpOff = ipOff + ipv4HeaderLen
	}
	udp := h[udpOff : udpOff+udpHeaderLen]
	binary.BigEndian.PutUint16(udp[0:], srcPort)
	binary.BigEndian.PutUint16(udp[2:], dstPort)
	binary.BigEndian.PutUint16(udp[4:], udpLen)
	if payloadSum != nil {
		// Pseudo-header length (the 16-bit IPv4 field or the low half of the 32-bit
		// IPv6 one) plus the UDP length field: udpLen twice.
		c := Checksum{sum: uint64(e.udpSum) + 2*uint64(udpLen) + uint64(srcPort) + uint64(dstPort)}
		c.add(payloadSum.sum)
		ck := c.Fold()
		if ck == 0 {
			ck = 0xFFFF
		}
		binary.BigEndian.PutUint16(udp[6:], ck)
	}
	return n, nil
}

// Datagram describes a parsed Ethernet/IP/UDP frame. ParseUDP fills it; it holds no
// reference to the frame.
type Datagram struct {
	// SrcMAC and DstMAC are the Ethernet addresses.
	SrcMAC, DstMAC [6]byte
	// VLAN is the tag control information (PCP, DEI, VLAN id) of the 802.1Q tag, the inner
	// one if the frame has two; 0 if untagged (a priority tag with TCI 0 also reads 0).
	VLAN uint16
	// Src and Dst are the IP addresses and UDP ports of the sender and the receiver.
	Src, Dst netip.AddrPort
	// PayloadOffset is the offset of the UDP payload in the frame's first buffer; it is at
	// most len(first buffer).
	PayloadOffset int
	// PayloadLen is the UDP payload length in bytes (UDP length - 8), which excludes any
	// Ethernet padding. For a multi-buffer frame it may reach past the first buffer:
	// PayloadOffset+PayloadLen <= totalLen always holds.
	PayloadLen int
}

// Payload returns the part of the UDP payload that lies in frame, the first buffer the
// Datagram was parsed from: all of it for a single-buffer frame.
func (d *Datagram) Payload(frame []byte) []byte {
	start, end := d.PayloadOffset, d.PayloadOffset+d.PayloadLen
	if start < 0 || start > len(frame) || end < start {
		return nil
	}
	return frame[start:min(end, len(frame))]
}

// ParseUDP parses the Ethernet, IP and UDP headers at the start of frame, the first buffer
// of a possibly multi-buffer frame whose total length across all buffers is totalLen
// (totalLen == len(frame) for a single buffer), and fills d. All headers must lie in frame.
//
// Accepted: Ethernet II with no tag, one 802.1Q tag, or two tags (outer 802.1ad or 802.1Q,
// inner 802.1Q); IPv4 with any header length from 20 bytes (options skipped) and a correct
// header checksum; IPv6 with hop-by-hop (first only), routing and destination options
// extension headers skipped; UDP. Trailing bytes after the IP datagram (Ethernet padding)
// are allowed and excluded from d.PayloadLen; a UDP length shorter than the IP payload is
// allowed too (the rest is ignored, as Linux does).
//
// Every field is read after a length check; the error is one of the sentinels ErrTruncated,
// ErrNotIP, ErrBadHeader, ErrBadChecksum, ErrBadLength, ErrNotUDP, ErrFragment, returned
// unwrapped. The UDP checksum is not verified (the transport's CRC32C covers the payload;
// see VerifyUDPChecksum), but a zero one, "no checksum", is refused over IPv6
// (ErrBadChecksum: RFC 8200 section 8.1 has receivers discard such datagrams; the
// zero-checksum exception of RFC 6935 and 6936 is for tunnels configured for it, which we
// are not) and accepted over IPv4 (RFC 768). On error d is left unchanged. ParseUDP does
// not allocate and never panics.
func ParseUDP(frame []byte, totalLen int, d *Datagram) error {
	if totalLen < len(frame) {
		return ErrBadLength
	}
	if len(frame) < ethHeaderLen {
		return ErrTruncated
	}
	off := 12
	etherType := binary.BigEndian.Uint16(frame[off:])
	off += 2
	var tci uint16
	if etherType == etherTypeQinQ || etherType == etherTypeVLAN {
		if len(frame) < off+vlanTagLen {
			return ErrTruncated
		}
		tci = binary.BigEndian.Uint16(frame[off:])
		etherType = binary.BigEndian.Uint16(frame[off+2:])
		off += vlanTagLen
		if etherType == etherTypeVLAN {
			if len(frame) < off+vlanTagLen {
				return ErrTruncated
			}
			tci = binary.BigEndian.Uint16(frame[off:])
			etherType = binary.BigEndian.Uint16(frame[off+2:])
			off += vlanTagLen
		}
	}

	var src, dst netip.Addr
	var l4Off, l4Len int // UDP header offset in frame, IP payload length
	switch etherType {
	case etherTypeIPv4:
		ip := frame[off:]
		if len(ip) < ipv4HeaderLen {
			return ErrTruncated
		}
		if ip[0]>>4 != 4 {
			return ErrBadHeader
		}
		ihl := int(ip[0]&0x0F) * 4
		if ihl < ipv4HeaderLen {
			return ErrBadHeader
		}
		if len(ip) < ihl {
			return ErrTruncated
		}
		if !ipv4HeaderSumOK(ip[:ihl]) {
			return ErrBadChecksum
		}
		ipLen := int(binary.BigEndian.Uint16(ip[2:]))
		if ipLen < ihl {
			return ErrBadLength
		}
		if off+ipLen > totalLen {
			return ErrTruncated
		}
		if ip[9] != ipProtoUDP {
			return ErrNotUDP
		}
		if binary.BigEndian.Uint16(ip[6:])&ipv4FragMask != 0 {
			return ErrFragment
		}
		src = netip.AddrFrom4([4]byte(ip[12:16]))
		dst = netip.AddrFrom4([4]byte(ip[16:20]))
		l4Off, l4Len = off+ihl, ipLen-ihl
	case etherTypeIPv6:
		ip := frame[off:]
		if len(ip) < ipv6HeaderLen {
			return ErrTruncated
		}
		if ip[0]>>4 != 6 {
			return ErrBadHeader
		}
		end := off + ipv6HeaderLen + int(binary.BigEndian.Uint16(ip[4:]))
		if end > totalLen {
			return ErrTruncated
		}
		src = netip.AddrFrom16([16]byte(ip[8:24]))
		dst = netip.AddrFrom16([16]byte(ip[24:40]))
		next := ip[6]
		pos := off + ipv6HeaderLen
		for i := 0; next != ipProtoUDP; i++ {
			switch next {
			case ipv6HopByHop, ipv6Routing, ipv6DestOptions:
			case ipv6Fragment:
				return ErrFragment
			default:
				return ErrNotUDP
			}
			if (next == ipv6HopByHop && i != 0) || i >= maxIPv6ExtHeaders {
				return ErrBadHeader
			}
			if pos+8 > end {
				return ErrBadLength
			}
			if pos+8 > len(frame) {
				return ErrTruncated
			}
			next = frame[pos]
			pos += (int(frame[pos+1]) + 1) * 8
			if pos > end {
				return ErrBadLength
			}
		}
		l4Off, l4Len = pos, end-pos
	default:
		return ErrNotIP
	}

	if l4Len < udpHeaderLen {
		return ErrBadLength
	}
	if len(frame) < l4Off+udpHeaderLen {
		return ErrTruncated
	}
	udp := frame[l4Off : l4Off+udpHeaderLen]
	udpLen := int(binary.BigEndian.Uint16(udp[4:]))
	if udpLen < udpHeaderLen || udpLen > l4Len {
		return ErrBadLength
	}
	if etherType == etherTypeIPv6 && binary.BigEndian.Uint16(udp[6:]) == 0 {
		return ErrBadChecksum
	}
	// Field by field: a composite literal would be built aside and copied with a
	// typed memmove (netip.Addr holds a pointer), which is most of ParseUDP's cost.
	d.DstMAC = [6]byte(frame[0:6])
	d.SrcMAC = [6]byte(frame[6:12])
	d.VLAN = tci
	d.Src = netip.AddrPortFrom(src, binary.BigEndian.Uint16(udp[0:]))
	d.Dst = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(udp[2:]))
	d.PayloadOffset = l4Off + udpHeaderLen
	d.PayloadLen = udpLen - udpHeaderLen
	return nil
}

// ipv4HeaderSumOK reports whether an IPv4 header (its length a multiple of 4, at most 60
// bytes) carries a correct header checksum: its words sum to 0xFFFF. Up to fifteen 32-bit
// words cannot overflow 64 bits, so no carries are needed before folding.
func ipv4HeaderSumOK(h []byte) bool {
	var s uint64
	for len(h) >= 4 {
		s += uint64(binary.BigEndian.Uint32(h))
		h = h[4:]
	}
	return fold64(s) == 0xFFFF
}

// VerifyUDPChecksum checks the UDP checksum of a datagram that ParseUDP accepted into d from
// frame (the first buffer); rest are the frame's further buffers, in order, for a
// multi-buffer frame. It returns nil if the checksum is right or, over IPv4, absent (0);
// ErrBadChecksum if it is wrong or, over IPv6, absent; ErrTruncated if frame and rest hold
// fewer than d.PayloadLen payload bytes; ErrBadLength if d does not fit frame.
//
// The receive path does not need it (the transport's CRC32C covers the payload, and NICs
// usually verify the UDP checksum); tests and diagnostics use it. It does not allocate.
func VerifyUDPChecksum(d *Datagram, frame []byte, rest ...[]byte) error {
	udpOff := d.PayloadOffset - udpHeaderLen
	if udpOff < 0 || d.PayloadOffset > len(frame) || d.PayloadLen < 0 ||
		d.PayloadLen > 0xFFFF-udpHeaderLen {
		return ErrBadLength
	}
	udp := frame[udpOff:d.PayloadOffset]
	if binary.BigEndian.Uint16(udp[6:]) == 0 {
		if d.Src.Addr().Is4() {
			return nil
		}
		return ErrBadChecksum
	}
	var c Checksum
	if src, dst := d.Src.Addr(), d.Dst.Addr(); src.Is4() {
		s, t := src.As4(), dst.As4()
		c.Add(s[:])
		c.Add(t[:])
	} else {
		s, t := src.As16(), dst.As16()
		c.Add(s[:])
		c.Add(t[:])
	}
	c.AddUint16(ipProtoUDP)
	c.AddUint16(uint16(d.PayloadLen + udpHeaderLen))
	c.Add(udp)
	left := d.PayloadLen
	p := frame[d.PayloadOffset:]
	for i := 0; ; i++ {
		k := min(left, len(p))
		c.Add(p[:k])
		left -= k
		if left == 0 {
			break
		}
		if i >= len(rest) {
			return ErrTruncated
		}
		p = rest[i]
	}
	if c.Fold() != 0 {
		return ErrBadChecksum
	}
	return nil
}
