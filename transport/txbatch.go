package transport

import (
	"net/netip"

	"github.com/xdpndk/xdpndk/transport/link"

	"github.com/xdpndk/xdpndk/transport/wire"
)

// txBatchLen is how many datagrams the engine queues before it hands them to the link.
const txBatchLen = 64

// txBatch is the engine's batch of datagrams on their way to the link: each slot has its
// own header buffer, CRC trailer and bounce buffer, so a packet's segments reference them
// (or the caller's memory) until the link took it. Engine goroutine only.
type txBatch struct {
	link   link.Link
	ctr    *engineCounters
	pkts   [txBatchLen]link.Packet
	hdr    [txBatchLen][wire.HeaderLen + wire.CMExtLen + wire.MaxPrivateData]byte
	trl    [txBatchLen][wire.TrailerLen]byte
	bounce [txBatchLen][]byte
	n      int         // packets queued
	wire   wire.Packet // the packet being encoded
	bundle bundle      // small data packets of one QP being packed into the next slot (bundle.go)
	// small is where the payload of a packet that will be packed is gathered when it lies
	// in more than two pieces: pack copies it into the bundle at once
	small []byte
	// refused accounts a zero-copy packet the link refused outright: the link will never
	// report its cookie through TxDone.
	refused func(cookie uint64)
}

// slot returns the next free slot, flushing the batch to the link when full. It returns -1
// when the link takes nothing more now. A bundle being filled is closed first: whatever
// takes the slot goes after it.
func (t *txBatch) slot() int {
	t.closeBundle()
	if t.n == len(t.pkts) {
		t.flush()
		if t.n == len(t.pkts) {
			return -1
		}
	}
	return t.n
}

// ok reports whether a packet can be queued now. With a bundle being filled and a slot free
// after it, a packet can go either way (into the bundle, or after it) without a flush.
func (t *txBatch) ok() bool {
	if t.bundle.open && t.n+1 < len(t.pkts) {
		return true
	}
	return t.slot() >= 0
}

// markZeroCopy makes the packet emitted last a zero-copy packet with cookie c.
func (t *txBatch) markZeroCopy(c uint64) {
	pk := &t.pkts[t.n-1]
	pk.Flags |= link.FlagZeroCopy
	pk.Cookie = c
}

// emit finishes the packet in slot i: header bytes (already in t.hdr[i], hdrLen long),
// payload pieces a and b (either may be empty), CRC trailer; it queues it for the link.
func (t *txBatch) emit(i int, to netip.AddrPort, srcPort uint16, hdrLen int, a, b []byte) {
	hdr := t.hdr[i][:hdrLen]
	crc := wire.UpdateCRC(0, hdr)
	pk := t.packet(i, to, srcPort)
	pk.Segs[0] = hdr
	n := 1
	if len(a) > 0 {
		crc = wire.UpdateCRC(crc, a)
		pk.Segs[n] = a
		n++
	}
	if len(b) > 0 {
		crc = wire.UpdateCRC(crc, b)
		pk.Segs[n] = b
		n++
	}
	wire.PutTrailer(t.trl[i][:], crc)
	pk.Segs[n] = t.trl[i][:]
	pk.NSegs = uint8(n + 1)
	t.n++
}

// packet starts the packet of slot i, to to from srcPort: no flags, no cookie, its
// segments the caller's to set with NSegs. Field by field, not a cleared Packet: segments
// past NSegs are unused (link.Packet), and clearing them all cost a third of emit.
func (t *txBatch) packet(i int, to netip.AddrPort, srcPort uint16) *link.Packet {
	pk := &t.pkts[i]
	pk.Remote, pk.LocalPort, pk.Flags, pk.Cookie = to, srcPort, 0, 0
	return pk
}

// flush hands the queued packets to the link. Packets the link does not take now stay
// queued, in order.
func (t *txBatch) flush() {
	t.closeBundle()
	if t.n == 0 {
		return
	}
	n, err := t.link.Send(t.pkts[:t.n])
	if err != nil {
		// A datagram the link can never send (too large for it: a bug, or an unreachable
		// peer): drop it, counted; reliability retransmits or times the QP out. The link
		// will never report its cookie, so account it here.
		t.ctr.txRefused.Add(1)
		if n < t.n && t.pkts[n].Flags&link.FlagZeroCopy != 0 {
			t.refused(t.pkts[n].Cookie)
		}
		n++
	}
	n = min(n, t.n)
	t.ctr.txPackets.Add(uint64(n))
	if n == 0 {
		return
	}
	// Keep the rest at the front, with their buffers.
	for j := n; j < t.n; j++ {
		t.pkts[j-n] = t.pkts[j]
		t.hdr[j-n], t.hdr[j] = t.hdr[j], t.hdr[j-n]
		t.trl[j-n] = t.trl[j]
		t.bounce[j-n], t.bounce[j] = t.bounce[j], t.bounce[j-n]
		t.fixSegs(j-n, j)
	}
	t.n -= n
}

// fixSegs points the segments of a packet moved from slot from to slot to at its new
// buffers: the header and trailer arrays were copied from one slot to the other (a header,
// when the packet has one there, is its first segment; the trailer is always its last),
// while a bounce buffer moved with its slice, so segments in it need nothing.
func (t *txBatch) fixSegs(to, from int) {
	pk := &t.pkts[to]
	if h := pk.Segs[0]; sameBuffer(h, t.hdr[from][:]) {
		pk.Segs[0] = t.hdr[to][:len(h)]
	}
	if last := int(pk.NSegs) - 1; last > 0 && sameBuffer(pk.Segs[last], t.trl[from][:]) {
		pk.Segs[last] = t.trl[to][:]
	}
}

// sameBuffer reports whether b starts at the start of buf.
func sameBuffer(b, buf []byte) bool {
	return len(b) > 0 && len(buf) > 0 && &b[0] == &buf[0]
}
