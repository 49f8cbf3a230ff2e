package pcaplink

import (
	"encoding/binary"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/xdpndk/xdpndk/internal/pcapng"
	"github.com/xdpndk/xdpndk/transport/link"
)

// Header sizes of the records' made-up IP and UDP headers.
const (
	ipv4Hdr = 20
	ipv6Hdr = 40
	udpHdr  = 8
)

// A record in a ring: recHdr bytes, then the captured payload, padded to 8 bytes.
//
//	0   kind      0: padding to the ring's end; pcapng.DirInbound or DirOutbound
//	1   family    4 or 6
//	2   local     our UDP port
//	4   remote    the peer's UDP port
//	6   tailSum   IPv6, cut: the ones'-complement sum of the payload bytes not captured
//	8   ts        nanoseconds since the epoch
//	16  origLen   the datagram's length
//	20  capLen    the bytes captured after the header
//	24  addr      the peer's address (16 bytes; IPv4 in the first 4)
const recHdr = 40

// tap is one wrapped link's ring: the engine goroutine produces, the capture's writer
// consumes. head and tail count bytes ever consumed and produced.
type tap struct {
	c       *Capture
	ifc     uint32
	local   netip.AddrPort
	local6  bool // the link's address is IPv6 (records of an IPv4 peer are then mapped)
	maxCap  int  // the most payload bytes a record holds
	snap    int  // Config.SnapLen
	ring    []byte
	mask    uint64
	head    atomic.Uint64
	tail    atomic.Uint64
	dropped atomic.Uint64
	written uint64 // records the writer wrote (its own counter)
}

func newTap(c *Capture, ifc uint32, local netip.AddrPort, snap, buffer int) *tap {
	size := uint64(MinBuffer)
	for size < uint64(buffer) {
		size <<= 1
	}
	t := &tap{c: c, ifc: ifc, local: local, snap: snap, ring: make([]byte, size), mask: size - 1}
	t.local6 = local.Addr().Unmap().Is6()
	t.maxCap = int(size/4) - recHdr
	return t
}

// recordBatch records pkts[:n], the datagrams of one call in direction dir. It never
// blocks and allocates nothing; an n out of range (a misbehaving inner link) is clamped.
func (t *tap) recordBatch(pkts []link.Packet, n int, dir uint32) {
	n = min(n, len(pkts))
	if n <= 0 || t.c.closed.Load() {
		return
	}
	now := time.Now().UnixNano()
	for i := range pkts[:n] {
		t.record(&pkts[i], dir, now)
	}
	if used := t.tail.Load() - t.head.Load(); used >= uint64(len(t.ring))/2 {
		select {
		case t.c.wake <- struct{}{}:
		default:
		}
	}
}

// record copies one datagram into the ring, or counts it dropped when there is no room.
func (t *tap) record(p *link.Packet, dir uint32, now int64) {
	nseg := min(int(p.NSegs), link.MaxSegments)
	orig := 0
	for _, s := range p.Segs[:nseg] {
		orig += len(s)
	}
	v6 := t.local6 || p.Remote.Addr().Unmap().Is6()
	capLen := min(orig, t.maxCap)
	if t.snap > 0 {
		hdr := ipv4Hdr + udpHdr
		if v6 {
			hdr = ipv6Hdr + udpHdr
		}
		capLen = min(capLen, t.snap-hdr)
	}
	need := uint64(recHdr+capLen+7) &^ 7
	size := uint64(len(t.ring))
	tail, head := t.tail.Load(), t.head.Load()
	pos := tail & t.mask
	skip := uint64(0)
	if size-pos < need {
		skip = size - pos
	}
	if tail+skip+need-head > size {
		t.dropped.Add(1)
		return
	}
	if skip > 0 {
		if skip >= recHdr {
			t.ring[pos] = 0 // padding to the end
		}
		pos = 0
	}
	r := t.ring[pos : pos+need]
	r[0] = byte(dir)
	r[1] = 4
	if v6 {
		r[1] = 6
	}
	lp := p.LocalPort
	if lp == 0 {
		lp = t.local.Port()
	}
	le := binary.LittleEndian
	le.PutUint16(r[2:], lp)
	le.PutUint16(r[4:], p.Remote.Port())
	le.PutUint64(r[8:], uint64(now))
	le.PutUint32(r[16:], uint32(orig))
	le.PutUint32(r[20:], uint32(capLen))
	a := p.Remote.Addr()
	if v6 {
		b := a.As16() // IPv4 as ::ffff:a; an invalid address as ::
		copy(r[24:40], b[:])
	} else {
		var b [4]byte // an invalid address as 0.0.0.0
		if a.IsValid() {
			b = a.Unmap().As4()
		}
		copy(r[24:28], b[:])
		clear(r[28:40])
	}
	// The payload, up to capLen; then, for IPv6 cut short, the sum of the rest.
	d, left := r[recHdr:recHdr+capLen], capLen
	var sum uint32
	odd := false
	for _, s := range p.Segs[:nseg] {
		k := copy(d, s[:min(len(s), left)])
		d, left = d[k:], left-k
		if v6 && capLen < orig {
			sum, odd = onesSum(sum, s[k:], odd)
		}
	}
	le.PutUint16(r[6:], fold(sum))
	t.tail.Store(tail + skip + need)
}

// drain writes the ring's records to the file (the caller holds c.mu); it reports
// whether there were any.
func (t *tap) drain(c *Capture) bool {
	head, tail := t.head.Load(), t.tail.Load()
	if head == tail {
		return false
	}
	size := uint64(len(t.ring))
	le := binary.LittleEndian
	for head < tail {
		pos := head & t.mask
		if size-pos < recHdr || t.ring[pos] == 0 {
			head += size - pos
			continue
		}
		r := t.ring[pos:]
		capLen := int(le.Uint32(r[20:]))
		need := uint64(recHdr+capLen+7) &^ 7
		if need > size-pos || need > tail-head { // never written so: give up on the ring's contents
			t.head.Store(tail)
			return true
		}
		h := c.header(t, r)
		c.setErr(c.w.WritePacket(t.ifc, int64(le.Uint64(r[8:])), len(h)+int(le.Uint32(r[16:])), uint32(r[0]), h, r[recHdr:recHdr+capLen]))
		t.written++
		c.stats.Packets++
		c.stats.Bytes += uint64(le.Uint32(r[16:]))
		head += need
		t.head.Store(head) // room for the engine at once, not only at the end
	}
	return true
}

// header builds the made-up IP and UDP headers of record r into c.hdr.
func (c *Capture) header(t *tap, r []byte) []byte {
	le, be := binary.LittleEndian, binary.BigEndian
	dir, v6 := uint32(r[0]), r[1] == 6
	lport, rport := le.Uint16(r[2:]), le.Uint16(r[4:])
	orig, capLen := int(le.Uint32(r[16:])), int(le.Uint32(r[20:]))
	udpLen := min(udpHdr+orig, 0xffff)
	var local, remote []byte
	var l4 [4]byte
	var l16 [16]byte
	if v6 {
		l16 = t.local.Addr().As16() // IPv4 as ::ffff:a
		local, remote = l16[:], r[24:40]
	} else {
		if la := t.local.Addr(); la.IsValid() {
			l4 = la.Unmap().As4()
		}
		local, remote = l4[:], r[24:28]
	}
	src, dst, sport, dport := local, remote, lport, rport
	if dir == pcapng.DirInbound {
		src, dst, sport, dport = remote, local, rport, lport
	}
	h := c.hdr[:]
	var ip int
	if v6 {
		ip = ipv6Hdr
		be.PutUint32(h[0:], 6<<28)
		be.PutUint16(h[4:], uint16(udpLen))
		h[6], h[7] = 17, 64 // UDP, hop limit
		copy(h[8:24], src)
		copy(h[24:40], dst)
	} else {
		ip = ipv4Hdr
		h[0], h[1] = 0x45, 0
		be.PutUint16(h[2:], uint16(min(ipv4Hdr+udpLen, 0xffff)))
		be.PutUint32(h[4:], 0x4000) // ID 0, DF
		h[8], h[9] = 64, 17         // TTL, UDP
		be.PutUint16(h[10:], 0)
		copy(h[12:16], src)
		copy(h[16:20], dst)
		s, _ := onesSum(0, h[:ipv4Hdr], false)
		be.PutUint16(h[10:], ^fold(s))
	}
	u := h[ip : ip+udpHdr]
	be.PutUint16(u[0:], sport)
	be.PutUint16(u[2:], dport)
	be.PutUint16(u[4:], uint16(udpLen))
	be.PutUint16(u[6:], 0)
	if v6 {
		// Pseudo-header (addresses, length, next header), the UDP header, the payload
		// captured, and the sum of the rest the engine side computed.
		s, _ := onesSum(0, h[8:40], false)
		s += uint32(udpLen) + 17
		s, _ = onesSum(s, u, false)
		s, odd := onesSum(s, r[recHdr:recHdr+capLen], false)
		rest := uint32(le.Uint16(r[6:]))
		if odd { // the rest began at an odd offset: its bytes sit swapped in the sum
			rest = uint32(rest>>8 | rest<<8&0xff00)
		}
		cs := ^fold(s + rest)
		if cs == 0 {
			cs = 0xffff
		}
		be.PutUint16(u[6:], cs)
	}
	return h[:ip+udpHdr]
}

// onesSum adds b to the ones'-complement sum s of big-endian 16-bit words; odd says the
// bytes before b were of odd length (b's first byte is then a low byte), and the result
// says the same of everything up to b's end.
func onesSum(s uint32, b []byte, odd bool) (uint32, bool) {
	if len(b) == 0 {
		return s, odd
	}
	if odd {
		s += uint32(b[0])
		b = b[1:]
	}
	for len(b) >= 2 {
		s += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
		if s >= 1<<31 {
			s = s&0xffff + s>>16
		}
	}
	odd = len(b) == 1
	if odd {
		s += uint32(b[0]) << 8
	}
	return s, odd
}

// fold folds a 32-bit sum to 16 bits with end-around carry.
func fold(s uint32) uint16 {
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}
