package simlink

// entry is one datagram copy queued towards a host.
type entry struct {
	at      int64  // delivery time: receivable once the clock reads at least this
	seq     uint64 // network-wide enqueue order, the tie-break for equal times
	path    *path  // the path it came by: the sender's address, and the Delivered counters
	buf     int32  // pool index of the bytes
	n       int32  // datagram length
	split   int32  // first segment's length when split in two, else 0
	srcPort uint16 // the port the sender sent from
}

// before orders entries by delivery time, then by the order they were queued.
func (e *entry) before(o *entry) bool {
	return e.at < o.at || e.at == o.at && e.seq < o.seq
}

// rxQueue holds a host's datagrams in flight and waiting to be received, in the order
// entry.before. Most datagrams are queued in that order already (no jitter, or jitter
// smaller than the gap between sends), so the queue keeps them in a FIFO ring, O(1) each
// way, and only those that overtake the FIFO's tail go to a binary min-heap; the head is
// the earlier of the two heads. Guarded by Network.mu. Both arrays grow to the largest
// backlog seen and are then reused, so steady state allocates nothing.
type rxQueue struct {
	ring  []entry // FIFO of entries in order; len(ring) is a power of two or 0
	rhead int     // index of the FIFO's first entry
	rlen  int     // entries in the FIFO
	heap  []entry // entries that arrived out of order
}

func (q *rxQueue) len() int { return q.rlen + len(q.heap) }

// head returns the earliest entry; the queue must not be empty.
func (q *rxQueue) head() *entry {
	if q.rlen == 0 {
		return &q.heap[0]
	}
	r := &q.ring[q.rhead]
	if len(q.heap) > 0 && q.heap[0].before(r) {
		return &q.heap[0]
	}
	return r
}

// push adds e, which must come after every entry pushed before it in seq order, and
// reports whether it became the head.
func (q *rxQueue) push(e entry) bool {
	if q.rlen == 0 || !e.before(&q.ring[(q.rhead+q.rlen-1)&(len(q.ring)-1)]) {
		// In order after the FIFO's tail: it is the head only if the FIFO was empty and
		// it precedes the heap's head.
		head := q.rlen == 0 && (len(q.heap) == 0 || e.before(&q.heap[0]))
		if q.rlen == len(q.ring) {
			q.growRing()
		}
		q.ring[(q.rhead+q.rlen)&(len(q.ring)-1)] = e
		q.rlen++
		return head
	}
	q.heap = append(q.heap, e)
	return q.up(len(q.heap) - 1)
}

func (q *rxQueue) growRing() {
	ring := make([]entry, max(2*len(q.ring), 64))
	for i := 0; i < q.rlen; i++ {
		ring[i] = q.ring[(q.rhead+i)&(len(q.ring)-1)]
	}
	q.ring, q.rhead = ring, 0
}

// pop removes and returns the head; the queue must not be empty.
func (q *rxQueue) pop() entry {
	if q.rlen > 0 && (len(q.heap) == 0 || !q.heap[0].before(&q.ring[q.rhead])) {
		e := q.ring[q.rhead]
		q.ring[q.rhead] = entry{}
		q.rhead = (q.rhead + 1) & (len(q.ring) - 1)
		q.rlen--
		return e
	}
	e := q.heap[0]
	last := len(q.heap) - 1
	q.heap[0] = q.heap[last]
	q.heap[last] = entry{}
	q.heap = q.heap[:last]
	if last > 0 {
		q.down(0)
	}
	return e
}

// up moves heap entry i towards the root and reports whether it became the queue's head.
func (q *rxQueue) up(i int) bool {
	for i > 0 {
		parent := (i - 1) / 2
		if !q.heap[i].before(&q.heap[parent]) {
			return false
		}
		q.heap[i], q.heap[parent] = q.heap[parent], q.heap[i]
		i = parent
	}
	return q.rlen == 0 || q.heap[0].before(&q.ring[q.rhead])
}

func (q *rxQueue) down(i int) {
	n := len(q.heap)
	for {
		least := i
		if l := 2*i + 1; l < n && q.heap[l].before(&q.heap[least]) {
			least = l
		}
		if r := 2*i + 2; r < n && q.heap[r].before(&q.heap[least]) {
			least = r
		}
		if least == i {
			return
		}
		q.heap[i], q.heap[least] = q.heap[least], q.heap[i]
		i = least
	}
}

// filter removes every entry for which drop returns true (after drop has seen it),
// keeping the order of the rest. It is O(n): for Partition, not the datapath.
func (q *rxQueue) filter(drop func(e *entry) bool) {
	k := 0
	for i := 0; i < q.rlen; i++ {
		e := q.ring[(q.rhead+i)&(len(q.ring)-1)]
		if !drop(&e) {
			q.ring[(q.rhead+k)&(len(q.ring)-1)] = e
			k++
		}
	}
	for i := k; i < q.rlen; i++ {
		q.ring[(q.rhead+i)&(len(q.ring)-1)] = entry{}
	}
	q.rlen = k
	kept := q.heap[:0]
	for i := range q.heap {
		if !drop(&q.heap[i]) {
			kept = append(kept, q.heap[i])
		}
	}
	clear(q.heap[len(kept):])
	q.heap = kept
	for i := len(q.heap)/2 - 1; i >= 0; i-- {
		q.down(i)
	}
}

// reset drops the queue's arrays (for Close, after the entries were disposed of).
func (q *rxQueue) reset() { *q = rxQueue{} }
