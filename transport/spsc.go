package transport

import "sync/atomic"

// spsc is a bounded single-producer/single-consumer queue: the application posts work
// requests on one side, the engine takes them on the other. No locks. The producer and the
// consumer may be different goroutines; two producers (or two consumers) may not run at
// once, which NDKPI's posting rules already guarantee (NDKPI Work Request Posting
// Requirements: calls on one queue are serialized).
//
// An entry's slot is its one record from post to completion: the producer fills it in
// place (reserve, commit) or copies into it (stage, push); the consumer takes it (peek,
// take) and keeps using it where it is until it frees it (free, in position order), which
// is when the producer may reuse it. The capacity bounds the entries posted and not yet
// freed; pop is take and free at once, for a consumer that copies the entry out.
//
// Its slots grow on use: the queue starts with a segment of initialRing slots (fewer if
// its capacity is smaller); when the producer finds its segment full below the capacity,
// it starts a segment of twice the size and links it after the old one, which the consumer
// leaves (and the collector takes) once it has freed what the old one holds. The segments
// never move or shrink, so a slot stays where it is while it is in use, and once the queue
// has held as many entries as a workload keeps outstanding, neither side allocates again.
type spsc[T any, P spscEntry[T]] struct {
	cap  uint64        // the most entries posted and not freed
	head atomic.Uint64 // next position to free; written by the consumer
	// the consumer's: the next position to take (head <= taken <= tail), and the
	// segments holding taken and head
	taken   uint64
	takeSeg *spscSeg[T]
	freeSeg *spscSeg[T]
	_       [32]byte      // keep head and tail on different cache lines
	tail    atomic.Uint64 // next position not visible to the consumer; written by the producer
	// staged is the producer's own tail: positions [tail, staged) are written but not yet
	// published (deferred posts). Only the producer reads or writes it.
	staged uint64
	prod   *spscSeg[T] // the segment the producer writes; the producer's
	// handed: reserve handed out the slot at staged and it was not committed since, so
	// the producer may have written it (the producer's)
	handed bool
	// bell is rung when entries are published: the engine then polls the QP the queue
	// belongs to (sched.go). NewQP sets it; a QP that moves to another engine (Group) is
	// given the other engine's (a post racing the move may ring the old one: the move polls
	// the QP anyway). Nil (an SRQ's queue) rings nothing.
	bell atomic.Pointer[doorbell]
}

// spscEntry is what an spsc holds: a T whose release, called when its slot is freed, drops
// the references to caller memory it holds (a concrete clear, cheaper than the generic
// zeroing of a shape-typed value).
type spscEntry[T any] interface {
	*T
	release()
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

// newSPSC returns a queue of capacity entries, capacity rounded up to a power of two, plus
// slack more (whose slots are in its segments too).
func newSPSC[T any, P spscEntry[T]](capacity, slack int) *spsc[T, P] {
	n := ceilPow2(capacity)
	seg := &spscSeg[T]{slots: make([]T, min(n, initialRing))}
	return &spsc[T, P]{cap: uint64(n + slack), takeSeg: seg, freeSeg: seg, prod: seg}
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
func (q *spsc[T, P]) push(v *T) bool {
	if !q.stage(v) {
		return false
	}
	q.publish()
	return true
}

// stage copies *v into the queue without making it visible to the consumer (a deferred
// post); false when full. Producer side.
func (q *spsc[T, P]) stage(v *T) bool {
	slot := q.reserve()
	if slot == nil {
		return false
	}
	*slot = *v
	q.commit()
	return true
}

// reserve returns the slot of the next position for the producer to fill in place, or nil
// when the queue is full. Nothing is queued until commit; the next reserve without a
// commit returns the same slot. Producer side.
func (q *spsc[T, P]) reserve() *T {
	t := q.staged
	h := q.head.Load()
	if t-h == q.cap {
		return nil
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
	q.handed = true
	return &seg.slots[t&uint64(len(seg.slots)-1)]
}

// reserveZero is reserve with the slot zero. A slot is zero unless reserve handed it out
// before without a commit: a new segment's slots are, and free clears a slot (release)
// before the producer may reuse it. So only that slot is cleared here.
func (q *spsc[T, P]) reserveZero() *T {
	again := q.handed
	slot := q.reserve()
	if slot != nil && again {
		P(slot).release()
	}
	return slot
}

// commit queues the slot reserve returned, staged: publish makes it visible. Producer
// side.
func (q *spsc[T, P]) commit() { q.staged, q.handed = q.staged+1, false }

// publish makes every staged entry visible to the consumer and reports whether there were
// any. Producer side.
func (q *spsc[T, P]) publish() bool {
	if q.staged == q.tail.Load() {
		return false
	}
	q.tail.Store(q.staged)
	if b := q.bell.Load(); b != nil {
		b.ring()
	}
	return true
}

// peek returns the oldest entry not taken without taking it; nil when there is none.
// Consumer side.
func (q *spsc[T, P]) peek() *T {
	if q.taken == q.tail.Load() {
		return nil
	}
	return slotAt(&q.takeSeg, q.taken)
}

// take takes the entry peek returned; it stays in its slot until freed. Consumer side.
func (q *spsc[T, P]) take() { q.taken++ }

// free frees the oldest entry taken and not freed (dropping its references to caller
// memory): the producer may reuse its slot. Consumer side.
func (q *spsc[T, P]) free() {
	h := q.head.Load()
	P(slotAt(&q.freeSeg, h)).release()
	q.head.Store(h + 1)
}

// pop takes and frees the entry peek returned. Consumer side.
func (q *spsc[T, P]) pop() {
	q.take()
	q.free()
}

// slotAt returns the slot of position pos (queued), moving *seg on to the next segment when
// pos is past what it holds. Consumer side.
func slotAt[T any](seg **spscSeg[T], pos uint64) *T {
	s := *seg
	// The producer set next (after end) before it published position pos of a later
	// segment.
	if next := s.next.Load(); next != nil && pos >= s.end {
		s, *seg = next, next
	}
	return &s.slots[pos&uint64(len(s.slots)-1)]
}

// capacity is the most entries the queue holds at once.
func (q *spsc[T, P]) capacity() int { return int(q.cap) }

// len is the number of entries posted and not freed (a snapshot; from any goroutine).
func (q *spsc[T, P]) len() int { return int(q.tail.Load() - q.head.Load()) }

// untaken is the number of entries posted and not yet taken. Consumer side.
func (q *spsc[T, P]) untaken() int { return int(q.tail.Load() - q.taken) }
