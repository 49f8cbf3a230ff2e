package transport

import "sync/atomic"

// spsc is a fixed-capacity single-producer/single-consumer queue: the application posts
// work requests on one side, the engine takes them on the other. No locks, no allocation
// after creation. The producer and the consumer may be different goroutines; two producers
// (or two consumers) may not run at once, which NDKPI's posting rules already guarantee
// (NDKPI Work Request Posting Requirements: calls on one queue are serialized).
type spsc[T any] struct {
	slots []T
	mask  uint64
	head  atomic.Uint64 // next slot to consume; written by the consumer
	_     [56]byte      // keep head and tail on different cache lines
	tail  atomic.Uint64 // next slot visible to the consumer; written by the producer
	// staged is the producer's own tail: slots [tail, staged) are written but not yet
	// published (deferred posts). Only the producer reads or writes it.
	staged uint64
}

func newSPSC[T any](capacity int) *spsc[T] {
	n := ceilPow2(capacity)
	return &spsc[T]{slots: make([]T, n), mask: uint64(n - 1)}
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
	if t-q.head.Load() == uint64(len(q.slots)) {
		return false
	}
	q.slots[t&q.mask] = *v
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
	return true
}

// peek returns the oldest entry without taking it; nil when empty. Consumer side.
func (q *spsc[T]) peek() *T {
	h := q.head.Load()
	if h == q.tail.Load() {
		return nil
	}
	return &q.slots[h&q.mask]
}

// pop takes the entry peek returned. Consumer side.
func (q *spsc[T]) pop() {
	h := q.head.Load()
	var zero T
	q.slots[h&q.mask] = zero // drop references to caller memory
	q.head.Store(h + 1)
}

// len is the number of queued entries (a snapshot).
func (q *spsc[T]) len() int { return int(q.tail.Load() - q.head.Load()) }
