package ndk

import "sync/atomic"

// initialSlots is how many request slots a QP's queues start with (their depth if
// smaller). They double as requests are posted, up to the depth, and never shrink: a QP's
// memory follows the most requests it has had outstanding, not its configured depths
// (docs/TRANSPORT.md, "Memory per QP").
const initialSlots = 4

// slotRing holds the slots of one of a QP's queues, by position (the count of requests
// posted before; the transport echoes it as the completion's context). The poster takes the
// slot of the position it posts; the engine the slot of the position that completes, in
// posting order, and frees it before it counts the request done. The slots are a chain of
// segments: when the poster finds its segment full, it starts one twice its size (up to the
// depth); the engine moves on once the positions of the old one are done, and the collector
// takes the old one. Once grown to the requests outstanding at once, neither side allocates.
type slotRing[T any] struct {
	depth uint64      // the most positions outstanding (a power of two)
	prod  *slotSeg[T] // the poster's
	cons  *slotSeg[T] // the engine's
}

// slotSeg is a ring of slots for positions from start on, indexed by position &
// (len(slots)-1). When the poster moves on to a new segment it sets end (the first
// position this one does not hold) and then next.
type slotSeg[T any] struct {
	slots []T
	start uint64
	end   uint64
	next  atomic.Pointer[slotSeg[T]]
}

func newSlotRing[T any](depth int) slotRing[T] {
	n := pow2(depth)
	seg := &slotSeg[T]{slots: make([]T, min(n, initialSlots))}
	return slotRing[T]{depth: uint64(n), prod: seg, cons: seg}
}

// post returns the poster's slot of position pos, when positions before done are done and
// pos-done is below the depth (the caller checked). Poster only.
func (r *slotRing[T]) post(pos, done uint64) *T {
	seg := r.prod
	if pos-max(done, seg.start) == uint64(len(seg.slots)) {
		ns := &slotSeg[T]{slots: make([]T, min(2*uint64(len(seg.slots)), r.depth)), start: pos}
		seg.end = pos
		seg.next.Store(ns) // after end: the engine sees end once it sees next
		r.prod, seg = ns, ns
	}
	return &seg.slots[pos&uint64(len(seg.slots)-1)]
}

// done returns the engine's slot of position pos, which was posted and is the oldest not
// done. Engine only.
func (r *slotRing[T]) done(pos uint64) *T {
	seg := r.cons
	for next := seg.next.Load(); next != nil && pos >= seg.end; next = seg.next.Load() {
		seg, r.cons = next, next
	}
	return &seg.slots[pos&uint64(len(seg.slots)-1)]
}
