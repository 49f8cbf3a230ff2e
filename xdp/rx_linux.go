package xdp

import (
	"time"

	"github.com/xdpndk/xdpndk/xdp/xsk"

	"github.com/xdpndk/xdpndk/memreg"
)

// rxState is a Link's receive side at the ring level: the descriptors taken from the RX
// ring and not handed out yet (Receive walks them, one packet at a time, and parses each
// with unwrap), and the received frames on their way back to the fill ring. Engine
// goroutine only.
//
// The kernel should always hold FillSize frames to receive into. It publishes the RX ring's
// producer index before the fill ring's consumer index (xsk_flush in net/xdp/xsk.c), so a
// frame received and handed back at once, on another CPU, can find the fill ring still
// full. That frame goes to the pool and is owed to the fill ring;
// repay and flushRecycle pay it back from the pool when the ring has room. Without that
// every such moment would shrink the kernel's share for good, until receiving stopped.
type rxState struct {
	sock  *xsk.Socket
	fill  fillRing // sock's fill ring (a fake in tests)
	pool  *memreg.FramePool
	fsize uint64

	descs    [rxBatch]xsk.Desc
	head     int // next unprocessed descriptor in descs
	tail     int // end of the descriptors taken from the ring
	recycle  [rxBatch]uint64
	nrecycle int
	target   int // frames the kernel should hold: the fill ring's size
	owed     int // frames the kernel is short of target (the ring had no room, the pool no frames)
}

// fillRing is the producer side of a socket's fill ring.
type fillRing interface {
	// Fill puts up to len(addrs) frames on the ring and returns how many it took.
	Fill(addrs []uint64) int
	// FillNeedsWakeup reports whether the kernel needs WakeFill to look at the ring.
	FillNeedsWakeup() bool
	// WakeFill makes the kernel look at the ring.
	WakeFill()
}

// newRxState gives the kernel every frame the fill ring of s holds, before any traffic
// arrives, and returns the receive side of s.
func newRxState(s *xsk.Socket, pool *memreg.FramePool, fsize uint64) rxState {
	return startRx(rxState{sock: s, fill: s, pool: pool, fsize: fsize, target: int(s.Config().FillSize)})
}

// startRx fills r's fill ring with its target of frames from its pool and returns r.
func startRx(r rxState) rxState {
	r.owed = r.target
	for r.owed > 0 {
		if !r.topUp() {
			break
		}
	}
	return r
}

// buffered reports whether descriptors taken from the ring wait to be handed out.
func (r *rxState) buffered() bool { return r.head != r.tail }

// recycleFrame queues the frame holding offset addr for the fill ring.
func (r *rxState) recycleFrame(addr uint64) {
	if r.nrecycle == len(r.recycle) {
		r.flushRecycle()
	}
	r.recycle[r.nrecycle] = addr &^ (r.fsize - 1)
	r.nrecycle++
}

// flushRecycle puts the queued frames on the fill ring (those it has no room for go back to
// the pool) and wakes the kernel's fill processing when it asks for it.
func (r *rxState) flushRecycle() {
	if r.nrecycle == 0 {
		return
	}
	put := r.fill.Fill(r.recycle[:r.nrecycle])
	for _, a := range r.recycle[put:r.nrecycle] {
		r.pool.Put(a)
	}
	r.owed += r.nrecycle - put
	r.nrecycle = 0
	if r.owed > 0 && put > 0 {
		// The ring had room for some: the rest may fit once the kernel publishes more.
		r.topUp()
	}
	if r.fill.FillNeedsWakeup() {
		r.fill.WakeFill()
	}
}

// topUp repays up to a batch of owed frames from the pool to the fill ring and reports
// whether it repaid any. The caller has flushed the recycle queue (topUp uses it as
// scratch).
func (r *rxState) topUp() bool {
	n := 0
	for n < len(r.recycle) && n < r.owed {
		a, ok := r.pool.Get()
		if !ok {
			break
		}
		r.recycle[n] = a
		n++
	}
	if n == 0 {
		return false
	}
	put := r.fill.Fill(r.recycle[:n])
	for _, a := range r.recycle[put:n] {
		r.pool.Put(a)
	}
	r.owed -= put
	return put > 0
}

// repayPoll bounds Wait's sleep while frames are owed to the fill ring: the kernel may have
// too few to receive the datagram that would wake it.
const repayPoll = 100 * time.Microsecond

// repay tops the fill ring up with owed frames and wakes the kernel's fill processing when
// it asks for it. Receive and Wait call it when frames are owed, so the kernel gets them
// back even when nothing arrives (with no frames it would receive nothing). Like topUp it
// needs the recycle queue empty, as it is outside Receive and Release (both flush it).
func (r *rxState) repay() {
	if r.topUp() && r.fill.FillNeedsWakeup() {
		r.fill.WakeFill()
	}
}

// share is the receive side's share of the frames: the fill ring's size less what is owed
// to it and what waits to go back to it. It is what the kernel holds to receive into plus
// the received frames not yet released.
func (r *rxState) share() int { return r.target - r.nrecycle - r.owed }
