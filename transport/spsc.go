package transport

import "sync/atomic"

// spsc is a bounded single-producer/single-consumer queue: the application posts work
// requests on one side, the engine takes them on the other. No locks. The producer and the
// consumer may be different goroutines; two producers (or two consumers) may not run at
// once, which NDKPI's posting rules already guarantee (NDKPI Work Request Posting
// Requirements: calls on one queue are serialized).
//
// Its slots grow on use: the queue starts with a segment of initialRing slots (fewer if
// its capacity is smaller); when the producer finds its segment full below the capacity,
// it starts a segment of twice the size and links it after the old one, which the consumer
// leaves (and the collector takes) once it has consumed what the old one holds. The
// segments never shrink, so once the queue has held as many entries as a workload keeps
// posted, neither side allocates again.
type spsc[T any] struct {
	cap  uint64        // the most entries queued at once (a power of two)
	head atomic.Uint64 // next position to consume; written by the consumer
	cons *spscSeg[T]   // the segment holding head; the consumer's
	_    [48]byte      // keep head and tail on different cache lines
	tail atomic.Uint64 // next position not visible to the consumer; written by the producer
	// staged is the producer's own tail: positions [tail, staged) are written but not yet
	// published (deferred posts). Only the producer reads or writes it.
	staged uint64
	prod   *spscSeg[T] // the segment the producer writes; the producer's
	// bell is rung when entries are published: the engine then polls the QP the queue
	// belongs to, whose doorbell slot is bellSlot (sched.go); NewQP sets both before the
	// queue is used (noBell until then, and for an SRQ's queue).
	bell     doorbell
	bellSlot uint32
}

// spscSeg is one segment of an spsc: a ring of slots for positions from start on, indexed
// by position & (len(slots)-1). When the producer moves on to a new segment it sets end
// (the first position it does not hold) and then next.
type spscSeg[T any] struct {
	slots []T
	start uint64
	end   uint64
	next  atomic.Pointer[spscSeg[T]]
}

func newSPSC[T any](capacity int) *spsc[T] {
	n := ceilPow2(capacity)
	seg := &spscSeg[T]{slots: make([]T, min(n, initialRing))}
	return &spsc[T]{cap: uint64(n), cons: seg, prod: seg, bell: noBell}
}

// ceilPow2 is the least power of two at least n (1 for n <= 1).
func ceilPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// push copies *v into the queue and publishes it with everything staged before it; false
// when full. Producer side.
func (q *spsc[T]) push(v *T) bool {
	if !q.stage(v) {
		return false
	}
	q.publish()
	return true
}

// stage copies *v into the queue without making it visible to the consumer (a deferred
// post); false when full. Producer side.
func (q *spsc[T]) stage(v *T) bool {
	t := q.staged
	h := q.head.Load()
	if t-h == q.cap {
		return false
	}
	seg := q.prod
	if t-max(h, seg.start) == uint64(len(seg.slots)) {
		// The segment is full (below the capacity, so it is smaller than the capacity):
		// continue in one twice its size.
		ns := &spscSeg[T]{slots: make([]T, 2*len(seg.slots)), start: t}
		seg.end = t
		seg.next.Store(ns) // after end: a consumer that sees next sees end
		q.prod, seg = ns, ns
	}
	seg.slots[t&uint64(len(seg.slots)-1)] = *v
	q.staged = t + 1
	return true
}

// publish makes every staged entry visible to the consumer and reports whether there were
// any. Producer side.
func (q *spsc[T]) publish() bool {
	if q.staged == q.tail.Load() {
		return false
	}
	q.tail.Store(q.staged)
	q.bell.ring()
	return true
}

// peek returns the oldest entry without taking it; nil when empty. Consumer side.
func (q *spsc[T]) peek() *T {
	h := q.head.Load()
	if h == q.tail.Load() {
		return nil
	}
	return q.slot(h)
}

// slot returns the consumer's slot of position h (queued), moving on to the next segment
// when h is past what the current one holds. Consumer side.
func (q *spsc[T]) slot(h uint64) *T {
	seg := q.cons
	// The producer set next (after end) before it published position h of a later segment.
	if next := seg.next.Load(); next != nil && h >= seg.end {
		seg, q.cons = next, next
	}
	return &seg.slots[h&uint64(len(seg.slots)-1)]
}

// pop takes the entry peek returned. Consumer side.
func (q *spsc[T]) pop() {
	h := q.head.Load()
	var zero T
	seg := q.cons                                // peek moved on to the segment of h
	seg.slots[h&uint64(len(seg.slots)-1)] = zero // drop references to caller memory
	q.head.Store(h + 1)
}

// capacity is the most entries the queue holds at once.
func (q *spsc[T]) capacity() int { return int(q.cap) }

// len is the number of queued entries (a snapshot).
func (q *spsc[T]) len() int { return int(q.tail.Load() - q.head.Load()) }
