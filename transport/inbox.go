package transport

import (
	"net/netip"
	"sync/atomic"

	"github.com/xdpndk/xdpndk/transport/link"
)

// inbox carries datagrams from one engine of a Group to another: those that arrived at the
// first (on one of its queues) for a QP or a connection attempt the second owns. It is a
// bounded single-producer/single-consumer ring of buffers, each of the largest datagram's
// size: the producer (the engine the datagram arrived at) copies the datagram in, the
// consumer (its owner) hands the copy to its own input and frees the slot. A full inbox
// drops the datagram (counted; reliability resends it). The buffers are allocated by the
// producer the first time it forwards anything, so a pair of engines that never trade a
// datagram costs a few words.
type inbox struct {
	head atomic.Uint64 // next slot to consume; written by the consumer
	_    [56]byte      // head and tail on different cache lines
	tail atomic.Uint64 // next slot to fill; written by the producer
	// The producer's own: its last view of head (refreshed when the ring looks full), the
	// slots (allocated at the first push), and their shape.
	seenHead uint64
	slots    []inboxSlot
	mask     uint64
	size     int // bytes per slot
}

// inboxSlot is one forwarded datagram: a copy of its bytes and its addresses as the link
// reported them.
type inboxSlot struct {
	buf       []byte
	n         int
	remote    netip.AddrPort
	localPort uint16
}

// init shapes an inbox of slots slots (a power of two) of size bytes each.
func (b *inbox) init(slots, size int) {
	b.mask, b.size = uint64(slots-1), size
}

// push copies the datagram pkt into the inbox. It reports false, copying nothing, when the
// inbox is full or the datagram is larger than a slot (no link of the group delivers
// one). Producer side.
func (b *inbox) push(pkt *link.Packet) bool {
	t := b.tail.Load()
	if t-b.seenHead > b.mask {
		b.seenHead = b.head.Load()
		if t-b.seenHead > b.mask {
			return false
		}
	}
	n := 0
	nseg := min(int(pkt.NSegs), link.MaxSegments)
	for i := range nseg {
		n += len(pkt.Segs[i])
	}
	if n > b.size {
		return false
	}
	if b.slots == nil {
		b.slots = make([]inboxSlot, b.mask+1)
		for i := range b.slots {
			b.slots[i].buf = make([]byte, b.size)
		}
	}
	s := &b.slots[t&b.mask]
	off := 0
	for i := range nseg {
		off += copy(s.buf[off:], pkt.Segs[i])
	}
	s.n, s.remote, s.localPort = n, pkt.Remote, pkt.LocalPort
	b.tail.Store(t + 1) // publishes the slot (and, the first time, the slots)
	return true
}

// pending reports whether datagrams wait. Safe from any goroutine.
func (b *inbox) pending() bool { return b.tail.Load() != b.head.Load() }

// peek returns the slots [from, to) the consumer may take now (from is head). Consumer
// side; it frees them with release(to).
func (b *inbox) peek() (from, to uint64) { return b.head.Load(), b.tail.Load() }

// slot returns the datagram at position i, which peek reported. Consumer side.
func (b *inbox) slot(i uint64) *inboxSlot { return &b.slots[i&b.mask] }

// release frees every slot before position to. Consumer side.
func (b *inbox) release(to uint64) { b.head.Store(to) }
