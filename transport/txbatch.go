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
	// refused accounts a zero-copy packet the link refused outright: the link will never
	// report its cookie through TxDone.
	refused func(cookie uint64)
}

// slot returns the next free slot, flushing the batch to the link when full. It returns -1
// when the link takes nothing more now.
func (t *txBatch) slot() int {
	if t.n == len(t.pkts) {
		t.flush()
		if t.n == len(t.pkts) {
			return -1
		}
	}
	return t.n
}

// ok reports whether a packet can be queued now.
func (t *txBatch) ok() bool { return t.slot() >= 0 }

// markZeroCopy makes the packet emitted last a zero-copy packet with cookie c.
func (t *txBatch) markZeroCopy(c uint64) {
	pk := &t.pkts[t.n-1]
	pk.Flags |= link.FlagZeroCopy
	pk.Cookie = c
}

// emit finishes the packet in slot i: header bytes (already in t.hdr[i], hdrLen long),
// payload pieces, CRC trailer; it queues it for the link.
func (t *txBatch) emit(i int, to netip.AddrPort, srcPort uint16, hdrLen int, payload ...[]byte) {
	hdr := t.hdr[i][:hdrLen]
	crc := wire.UpdateCRC(0, hdr)
	pk := &t.pkts[i]
	*pk = link.Packet{Remote: to, LocalPort: srcPort}
	pk.Segs[0] = hdr
	n := 1
	for _, b := range payload {
		if len(b) == 0 {
			continue
		}
		crc = wire.UpdateCRC(crc, b)
		pk.Segs[n] = b
		n++
	}
	wire.PutTrailer(t.trl[i][:], crc)
	pk.Segs[n] = t.trl[i][:]
	pk.NSegs = uint8(n + 1)
	t.n++
}

// flush hands the queued packets to the link. Packets the link does not take now stay
// queued, in order.
func (t *txBatch) flush() {
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
// buffers.
func (t *txBatch) fixSegs(to, from int) {
	pk := &t.pkts[to]
	hl := len(pk.Segs[0])
	pk.Segs[0] = t.hdr[to][:hl]
	last := int(pk.NSegs) - 1
	pk.Segs[last] = t.trl[to][:]
	for k := 1; k < last; k++ {
		if sameBuffer(pk.Segs[k], t.bounce[from]) {
			pk.Segs[k] = t.bounce[to][:len(pk.Segs[k])]
		}
	}
}

// sameBuffer reports whether b starts at the start of buf.
func sameBuffer(b, buf []byte) bool {
	return len(b) > 0 && len(buf) > 0 && &b[0] == &buf[0]
}
