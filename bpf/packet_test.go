//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package bpf

import "encoding/binary"

// A tiny append-style builder for the test frames, and a Go model of the program's
// classification (the verdict table in steer.c) that the fuzz test compares the kernel
// against. Test-only; the real framing lives in the xdp package.

const (
	ethHeaderLen  = 14
	vlanTagLen    = 4
	ipv4HeaderLen = 20
	ipv6HeaderLen = 40
	udpHeaderLen  = 8

	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86DD
	etherTypeARP  = 0x0806
	tpid8021Q     = 0x8100
	tpid8021AD    = 0x88A8

	protoHopOpts  = 0
	protoICMP     = 1
	protoTCP      = 6
	protoUDP      = 17
	protoRouting  = 43
	protoFragment = 44
	protoICMPv6   = 58
	protoDstOpts  = 60
)

var be = binary.BigEndian

// ether returns an Ethernet frame carrying payload, with a VLAN tag for each TPID in tpids
// (outermost first).
func ether(etherType uint16, payload []byte, tpids ...uint16) []byte {
	b := []byte{
		0x02, 0, 0, 0, 0, 0x02, // destination: locally administered
		0x02, 0, 0, 0, 0, 0x01, // source
	}
	for i, tpid := range tpids {
		b = be.AppendUint16(b, tpid)
		b = be.AppendUint16(b, uint16(100+i)) // TCI: VLAN id
	}
	b = be.AppendUint16(b, etherType)
	return append(b, payload...)
}

// ipv4 returns an IPv4 packet with optBytes bytes of options (a multiple of 4, at most
// 40; NOPs), a correct total length and header checksum.
func ipv4(proto byte, payload []byte, optBytes int) []byte {
	hl := ipv4HeaderLen + optBytes
	b := make([]byte, hl, hl+len(payload))
	b[0] = 0x40 | byte(hl/4)
	be.PutUint16(b[2:], uint16(hl+len(payload)))
	be.PutUint16(b[4:], 0x1234) // identification
	be.PutUint16(b[6:], 0x4000) // DF
	b[8] = 64
	b[9] = proto
	copy(b[12:], []byte{198, 18, 0, 1})
	copy(b[16:], []byte{198, 18, 0, 2})
	for i := ipv4HeaderLen; i < hl; i++ {
		b[i] = 1 // NOP option
	}
	be.PutUint16(b[10:], ipv4Checksum(b))
	return append(b, payload...)
}

func ipv4Checksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		if i == 10 {
			continue
		}
		sum += uint32(be.Uint16(h[i:]))
	}
	for sum > 0xFFFF {
		sum = sum&0xFFFF + sum>>16
	}
	return ^uint16(sum)
}

// ipv6 returns an IPv6 packet; ext is the already encoded extension header chain whose
// first header is announced by next (protoUDP etc. when ext is empty).
func ipv6(next byte, ext, payload []byte) []byte {
	b := make([]byte, ipv6HeaderLen, ipv6HeaderLen+len(ext)+len(payload))
	be.PutUint32(b[0:], 6<<28)
	be.PutUint16(b[4:], uint16(len(ext)+len(payload)))
	b[6] = next
	b[7] = 64
	copy(b[8:], []byte{0x20, 0x01, 0x0d, 0xb8, 15: 1})
	copy(b[24:], []byte{0x20, 0x01, 0x0d, 0xb8, 15: 2})
	b = append(b, ext...)
	return append(b, payload...)
}

// ipv6Ext returns one extension header of (units+1)*8 bytes announcing next.
func ipv6Ext(next, units byte) []byte {
	b := make([]byte, (int(units)+1)*8)
	b[0] = next
	b[1] = units
	b[2] = 1 // PadN option filling the rest
	b[3] = byte(len(b) - 4)
	return b
}

// udp returns a UDP datagram to port dst with n payload bytes (checksum 0: not checked
// by the program).
func udp(dst uint16, n int) []byte {
	b := make([]byte, udpHeaderLen+n)
	be.PutUint16(b[0:], 50000)
	be.PutUint16(b[2:], dst)
	be.PutUint16(b[4:], uint16(udpHeaderLen+n))
	for i := range n {
		b[udpHeaderLen+i] = byte(i)
	}
	return b
}

// tcp returns a bare 20-byte TCP header to port dst.
func tcp(dst uint16) []byte {
	b := make([]byte, 20)
	be.PutUint16(b[0:], 50000)
	be.PutUint16(b[2:], dst)
	b[12] = 5 << 4
	b[13] = 0x02 // SYN
	return b
}

// arp returns an ARP request payload.
func arp() []byte {
	b := []byte{0, 1, 0x08, 0, 6, 4, 0, 1}
	b = append(b, 0x02, 0, 0, 0, 0, 0x01, 198, 18, 0, 1)
	return append(b, 0, 0, 0, 0, 0, 0, 198, 18, 0, 2)
}

// edit returns a copy of b changed by fn.
func edit(b []byte, fn func(b []byte)) []byte {
	c := append([]byte(nil), b...)
	fn(c)
	return c
}

// class is the program's classification of a frame.
type class int

const (
	classOther class = iota
	classMalformed
	classOurs
)

func (c class) String() string {
	switch c {
	case classOther:
		return "other"
	case classMalformed:
		return "malformed"
	case classOurs:
		return "ours"
	}
	return "class?"
}

// linearLimit is how much of a test-run frame is in the linear part (data..data_end): a
// page minus XDP_PACKET_HEADROOM and struct skb_shared_info. Headers never reach it.
const linearLimit = 4096 - 256 - 320

// model classifies b the way steer.c does (the verdict table). It never reads past
// len(b).
func model(b []byte, port uint16) class {
	linear := min(len(b), linearLimit)
	if linear < ethHeaderLen {
		return classMalformed
	}
	etherType := be.Uint16(b[12:])
	off := ethHeaderLen
	for range 2 {
		if etherType != tpid8021Q && etherType != tpid8021AD {
			break
		}
		if off+vlanTagLen > linear {
			return classMalformed
		}
		etherType = be.Uint16(b[off+2:])
		off += vlanTagLen
	}
	avail := len(b) - off
	switch etherType {
	case etherTypeIPv4:
		if off+ipv4HeaderLen > linear || b[off]>>4 != 4 {
			return classMalformed
		}
		ihl := int(b[off]&0x0F) * 4
		tot := int(be.Uint16(b[off+2:]))
		if ihl < ipv4HeaderLen || tot < ihl || tot > avail {
			return classMalformed
		}
		if be.Uint16(b[off+6:])&0x3FFF != 0 || b[off+9] != protoUDP {
			return classOther
		}
		return modelUDP(b[:linear], off+ihl, tot-ihl, port)
	case etherTypeIPv6:
		if off+ipv6HeaderLen > linear || b[off]>>4 != 6 {
			return classMalformed
		}
		plen := int(be.Uint16(b[off+4:]))
		if plen == 0 {
			return classOther
		}
		if ipv6HeaderLen+plen > avail {
			return classMalformed
		}
		next := b[off+6]
		ext := 0
		for range 8 {
			if next != protoHopOpts && next != protoRouting && next != protoDstOpts {
				break
			}
			at := off + ipv6HeaderLen + ext
			if at+2 > linear {
				return classMalformed
			}
			next = b[at]
			ext += (int(b[at+1]) + 1) * 8
			if ext > plen {
				return classMalformed
			}
			if ext > 2048 {
				return classOther
			}
		}
		if next != protoUDP {
			return classOther
		}
		return modelUDP(b[:linear], off+ipv6HeaderLen+ext, plen-ext, port)
	}
	return classOther
}

func modelUDP(linear []byte, off, ipPayload int, port uint16) class {
	if off+udpHeaderLen > len(linear) || ipPayload < udpHeaderLen {
		return classMalformed
	}
	n := int(be.Uint16(linear[off+4:]))
	if n < udpHeaderLen || n > ipPayload {
		return classMalformed
	}
	if be.Uint16(linear[off+2:]) != port {
		return classOther
	}
	return classOurs
}
