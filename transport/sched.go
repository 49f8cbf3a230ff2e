package transport

import (
	"fmt"
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"
)

// The engine's scheduling of its QPs, in the manner of an RDMA NIC's doorbells and timer
// wheel: a round polls only the QPs that have something to do, not every connected one, so
// that the cost of a round follows the work, not the number of QPs (docs/TRANSPORT.md,
// "Scale").
//
// A connected QP is polled in a round when
//   - it was posted to: the posting queues (spsc.publish) ring its bit in the engine's
//     doorbells, from any goroutine;
//   - a datagram for it arrived (Engine.input) and left it something to do (QP.quiet: the
//     acknowledgement that completes a QP's last request usually leaves it nothing), a
//     connection-management message named it, or the link finished one of its zero-copy
//     packets (Engine.txFinished);
//   - the engine started polling it (activate), or a command ran (a command may have
//     changed any QP: Flush, StartDisconnect, Close);
//   - the deadline its last poll returned has come (the timer heap);
//   - its last poll asked for another (QP.poll's again: a reordering timer that ran is
//     looked at again only in the next poll, a failure or a flush leaves posts to cancel,
//     a timer fired or a probe went), or it left the transmit batch full (the link took
//     nothing more, so the poll may have been cut short). A poll that only did its work
//     (took posts, transmitted, acknowledged) asks for none: the deadline it returns counts
//     the timers it armed, and what the QP then waits for polls it when it comes. Polling
//     again after every busy poll cost each QP a whole extra poll per round trip, which
//     with a thousand QPs busy is a pass over state the caches no longer hold.
//
// Every poll returns the QP's next deadline (keepalive, retransmission, tail probe, RNR
// wait, credit wait, ack delay, pacing; "now" for the next round), which replaces the one
// the heap held. Between polls only a packet that leaves it quiet changes a QP, and that
// only moves its deadline later, so a QP left out of a round would have found nothing to
// do, and the deadline held for it is never later than its own: schedVerify (set by the
// package's tests) polls those QPs too, after the round, and panics if one of them was
// busy or had a deadline earlier than the one held (or one where none is held).

// schedVerify makes every Poll check, after its round, that the QPs it left out had
// nothing to do. Tests only (export_test.go); it costs a poll of every QP per round.
var schedVerify bool

// doorbells are the engine's doorbell bits, one per QP slot, rung by posting goroutines and
// taken by the engine: word w of bits holds slots 64w to 64w+63, and bit w%64 of sum[w/64]
// says that word w may have bits set. The poster sets its bit before the summary's, and
// the engine clears the summary before the word, so a ring is never lost: at worst it is
// seen one round later than it could have been. A QP's queues hold its doorbell (bell).
type doorbells struct {
	sum  []atomic.Uint64
	bits []atomic.Uint64
}

func newDoorbells(slots int) doorbells {
	words := (slots + 63) / 64
	return doorbells{sum: make([]atomic.Uint64, (words+63)/64), bits: make([]atomic.Uint64, words)}
}

// bell returns the doorbell of slot: what its QP's posting queues ring.
func (d *doorbells) bell(slot uint32) doorbell {
	w := slot / 64
	return doorbell{word: &d.bits[w], sum: &d.sum[w/64], bit: 1 << (slot % 64), sumBit: 1 << (w % 64)}
}

// doorbell is one slot's bit in an engine's doorbells and its word's summary bit.
type doorbell struct {
	word, sum   *atomic.Uint64
	bit, sumBit uint64
}

// ring marks the slot as posted to. Safe from any goroutine; it never blocks. When both
// bits are set already (posts between two rounds) it only loads them: whoever set them
// rang for this post too, since the engine takes the summary before the word and only then
// polls the QP.
func (b *doorbell) ring() {
	if b.word.Load()&b.bit == 0 || b.sum.Load()&b.sumBit == 0 {
		b.word.Or(b.bit)
		b.sum.Or(b.sumBit)
	}
}

// any reports whether some bit may be set.
func (d *doorbells) any() bool {
	for i := range d.sum {
		if d.sum[i].Load() != 0 {
			return true
		}
	}
	return false
}

// schedEntry is the scheduler's view of one polled QP: ent[i] is Engine.active[i]'s (its
// connIndex). Engine goroutine only.
type schedEntry struct {
	want   int64 // the QP's deadline, as its last poll returned it; 0: none
	pos    int32 // its index in the heap; -1: not in it
	queued bool  // the QP is on the current or the next round's list
}

// heapEntry is one entry of the deadline heap: the QP at index i of Engine.active wants
// polling no earlier than at. A QP's poll usually moves its deadline later (each packet
// sent rearms the retransmission timer), and the heap does not follow it there: the key
// stays until it reaches the top, where settle replaces it with the QP's deadline then
// (schedEntry.want) or drops it. So a QP busy every round sifts once per deadline it lets
// pass, not once per poll; a deadline that moves earlier sifts up at once.
type heapEntry struct {
	at int64
	i  int32
}

// sched decides which QPs a round polls.
type sched struct {
	bells doorbells

	// Slot allocation, guarded by Engine.mu (NewQP and Close run on any goroutine): a QP
	// keeps its doorbell slot from NewQP until Close; at most Config.MaxQPs are in use.
	free  []uint32
	slots uint32 // slots handed out so far: every slot below is in use or free

	// Engine goroutine only.
	bySlot []*QP        // the polled QP of each doorbell slot (nil: none)
	ent    []schedEntry // parallel to Engine.active
	next   []*QP        // to poll in the next round (each once: schedEntry.queued)
	cur    []*QP        // the round in progress
	heap   []heapEntry  // a binary min-heap on at: every QP with a deadline, keyed no later
	// than it (heapEntry), and QPs whose deadline went since, until they reach the top
	polled []uint64 // under schedVerify: the indices the round polled
	// The connection manager's poll (pollCM): its deadline, and whether something may
	// have changed it since (a command, a message for it, a packet for a connecting QP).
	cmNext  int64
	cmDirty bool
}

func (s *sched) init(maxQPs int) { s.bells = newDoorbells(maxQPs) }

// alloc returns a free slot. Called with Engine.mu held, with fewer than Config.MaxQPs QPs.
func (s *sched) alloc() uint32 {
	if n := len(s.free); n > 0 {
		slot := s.free[n-1]
		s.free = s.free[:n-1]
		return slot
	}
	s.slots++
	return s.slots - 1
}

// release returns a slot that its QP (closed) no longer uses. Called with Engine.mu held.
func (s *sched) release(slot uint32) { s.free = append(s.free, slot) }

// schedSlot is the QP's doorbell slot: given by NewQP (or by the engine a QP moved to),
// kept until Close. Its posting queues ring it.
func (q *QP) schedSlot() uint32 { return q.bellSlot }

// setBell gives q's posting queues the doorbell of slot of engine e. Called with e.mu
// held.
func (q *QP) setBell(e *Engine, slot uint32) {
	b := e.sched.bells.bell(slot)
	q.bellSlot = slot
	q.sendQ.bell.Store(&b)
	q.recvQ.bell.Store(&b)
}

// attach starts scheduling q, just appended to Engine.active, and polls it in the next
// round.
func (s *sched) attach(q *QP) {
	if slot := int(q.schedSlot()); slot >= len(s.bySlot) {
		s.bySlot = append(s.bySlot, make([]*QP, slot+1-len(s.bySlot))...)
	}
	s.bySlot[q.schedSlot()] = q
	s.ent = append(s.ent, schedEntry{pos: -1})
	s.mark(q)
}

// detach stops scheduling q, at index i of Engine.active, which moves its last QP to i (a
// list may still hold q: the round that reaches it skips it, its connIndex being -1).
func (s *sched) detach(q *QP, i int) {
	if p := s.ent[i].pos; p >= 0 {
		s.removeAt(int(p))
	}
	s.bySlot[q.schedSlot()] = nil
	last := len(s.ent) - 1
	if i != last {
		s.ent[i] = s.ent[last]
		if p := s.ent[i].pos; p >= 0 {
			s.heap[p].i = int32(i)
		}
	}
	s.ent = s.ent[:last]
}

// mark polls q in the next round if the engine polls it at all.
func (s *sched) mark(q *QP) {
	if i := q.connIndex; i >= 0 {
		if en := &s.ent[i]; !en.queued {
			en.queued = true
			s.next = append(s.next, q)
		}
	}
}

// markAll polls every active QP in the next round.
func (s *sched) markAll(active []*QP) {
	for _, q := range active {
		s.mark(q)
	}
}

// takeBells marks the QPs whose doorbells rang since the last round.
func (s *sched) takeBells() {
	d := &s.bells
	for i := range d.sum {
		if d.sum[i].Load() == 0 {
			continue
		}
		words := d.sum[i].Swap(0)
		for words != 0 {
			w := i*64 + bits.TrailingZeros64(words)
			words &= words - 1
			b := d.bits[w].Swap(0)
			for b != 0 {
				slot := w*64 + bits.TrailingZeros64(b)
				b &= b - 1
				// A QP the engine does not poll (idle or connecting: its receives wait in
				// the queue until it connects) needs nothing now.
				if slot < len(s.bySlot) && s.bySlot[slot] != nil {
					s.mark(s.bySlot[slot])
				}
			}
		}
	}
}

// expire marks the QPs whose deadline has come and takes them off the heap.
func (s *sched) expire(now int64, active []*QP) {
	for s.settle(); len(s.heap) > 0 && s.heap[0].at <= now; s.settle() {
		i := s.heap[0].i
		s.ent[i].want = 0
		s.removeAt(0)
		s.mark(active[i])
	}
}

// round returns the QPs to poll in this round; what is marked from now on goes to the
// next one.
func (s *sched) round() []*QP {
	s.cur, s.next = s.next, s.cur[:0]
	return s.cur
}

// earliest returns the earliest deadline of the polled QPs (0: none).
func (s *sched) earliest() int64 {
	if s.settle(); len(s.heap) == 0 {
		return 0
	}
	return s.heap[0].at
}

// settle makes the heap's top exact: while its key is not its QP's deadline (which only
// ever moved later, or to none, since the key was set), it takes the deadline or leaves the
// heap. The top's key is then the earliest deadline of all, since no QP's is earlier than
// its key.
func (s *sched) settle() {
	for len(s.heap) > 0 {
		top := &s.heap[0]
		switch want := s.ent[top.i].want; {
		case want == top.at:
			return
		case want == 0:
			s.removeAt(0)
		default:
			top.at = want
			s.down(0)
		}
	}
}

// setDeadline makes at the deadline of the QP at index i (0: none).
func (s *sched) setDeadline(i int, at int64) {
	e := &s.ent[i]
	e.want = at
	switch {
	case at == 0:
		// Left in the heap: settle drops it if it reaches the top.
	case e.pos < 0:
		e.pos = int32(len(s.heap))
		s.heap = append(s.heap, heapEntry{at: at, i: int32(i)})
		s.up(int(e.pos))
	case at < s.heap[e.pos].at:
		s.heap[e.pos].at = at
		s.up(int(e.pos))
	}
	// A later deadline keeps the earlier key (heapEntry).
}

// removeAt takes the entry at index p out of the heap.
func (s *sched) removeAt(p int) {
	last := len(s.heap) - 1
	s.ent[s.heap[p].i].pos = -1
	if p != last {
		s.heap[p] = s.heap[last]
		s.ent[s.heap[p].i].pos = int32(p)
	}
	s.heap = s.heap[:last]
	if p != last {
		s.down(p)
		s.up(p)
	}
}

func (s *sched) less(i, j int) bool { return s.heap[i].at < s.heap[j].at }

func (s *sched) swap(i, j int) {
	h := s.heap
	h[i], h[j] = h[j], h[i]
	s.ent[h[i].i].pos, s.ent[h[j].i].pos = int32(i), int32(j)
}

func (s *sched) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *sched) down(i int) {
	n := len(s.heap)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && s.less(c+1, c) {
			c++
		}
		if !s.less(c, i) {
			return
		}
		s.swap(i, c)
		i = c
	}
}

// pollRound polls the QPs of this round and returns the earliest deadline of all the
// engine's QPs and whether any poll did work.
func (e *Engine) pollRound(now int64) (next int64, busy bool) {
	s := &e.sched
	s.takeBells()
	s.expire(now, e.active)
	for _, q := range s.round() {
		if q.connIndex < 0 {
			continue // removed since it was marked
		}
		s.ent[q.connIndex].queued = false
		d, b, again := q.poll(now)
		busy = busy || b
		s.setDeadline(q.connIndex, d)
		if again || e.tx.full() {
			s.mark(q)
		}
		if schedVerify {
			s.notePolled(q.connIndex)
		}
	}
	if schedVerify {
		e.verifyRound(now)
	}
	return s.earliest(), busy
}

// pollCM runs the connection manager's poll when something may have changed its state
// (cmDirty: a command ran, a connection-management message arrived, a packet reached a
// connecting QP, or its last poll was busy) or its deadline has come, and returns its
// deadline and whether it did work. Its poll looks at every attempt, request and
// remembered connection, which linger for 2 s after a connection is made: run in every
// round, after a burst of 1024 connections it cost each round more than the QPs' work.
func (e *Engine) pollCM(now int64) (next int64, busy bool) {
	s := &e.sched
	if s.cmDirty || (s.cmNext != 0 && now >= s.cmNext) {
		next, busy = e.cm.poll(now)
		s.cmNext, s.cmDirty = next, busy
		return next, busy
	}
	if schedVerify {
		if n, b := e.cm.poll(now); b || n != s.cmNext {
			panic(fmt.Sprintf("transport: the connection manager's poll was left out in round %d at %d: busy=%v with deadline %d, %d expected",
				e.round, now, b, n, s.cmNext))
		}
	}
	return s.cmNext, false
}

// full reports whether the batch holds all it can: the link refused its last flush.
func (t *txBatch) full() bool { return t.n == len(t.pkts) }

// notePolled records, under schedVerify, that the round polled the QP at index i.
func (s *sched) notePolled(i int) {
	for len(s.polled) <= i/64 {
		s.polled = append(s.polled, 0)
	}
	s.polled[i/64] |= 1 << (i % 64)
}

// verifyRound polls every active QP the round left out and panics if one had work or a
// deadline before the one the scheduler holds (late): the scheduler would have missed it.
// Tests only.
func (e *Engine) verifyRound(now int64) {
	s := &e.sched
	full := e.tx.full()
	for i, q := range e.active {
		if w := i / 64; w < len(s.polled) && s.polled[w]&(1<<(i%64)) != 0 {
			continue
		}
		en := &s.ent[i]
		if en.queued || full {
			continue // polled in the next round anyway
		}
		st := q.State()
		posts := q.postCounts()
		d, b, _ := q.poll(now)
		if b && q.postedMeanwhile(posts) {
			continue // an application posted during the round: its doorbell polls q next
		}
		if b || late(en.want, d) {
			panic(fmt.Sprintf("transport: the scheduler left out qp %d (%v) in round %d at %d: its poll was busy=%v with deadline %d, the scheduler held %d",
				q.qpn, st, e.round, now, b, d, en.want))
		}
	}
	clear(s.polled)
}

// late reports whether held, the deadline the scheduler holds for a QP, would poll it
// after d, the deadline its poll returns (0: none): held is none while d is not, or is
// later. An earlier one is allowed: a packet that left its QP quiet (QP.quiet) does not
// poll it, and its held deadline, from the poll before, may be earlier than the one the
// packet left; it costs a poll that finds nothing.
func late(held, d int64) bool { return d != 0 && (held == 0 || held > d) }

// postCounts are a QP's posting queues' positions: what was published and what taken.
type postCounts struct{ sendTail, sendTaken, recvTail, recvTaken uint64 }

// postCounts reads the positions of q's posting queues. Engine goroutine.
func (q *QP) postCounts() postCounts {
	return postCounts{q.sendQ.tail.Load(), q.sendQ.taken, q.recvQ.tail.Load(), q.recvQ.taken}
}

// postedMeanwhile reports, under schedVerify, whether the poll that found q busy took posts
// an application published after the round took its doorbells, or found some published
// while it ran: posting goroutines run beside the engine, so verifyRound cannot tell those
// from a miss by the busy flag alone. A poster rings q's doorbell right after it publishes,
// so posts taken count as published meanwhile when their ring is seen (waited for, up to a
// second, since the poster may be between the two); a missing ring is the scheduler's miss.
func (q *QP) postedMeanwhile(before postCounts) bool {
	after := q.postCounts()
	if after.sendTail != before.sendTail || after.recvTail != before.recvTail {
		return true
	}
	if after.sendTaken == before.sendTaken && after.recvTaken == before.recvTaken {
		return false
	}
	b := q.sendQ.bell.Load()
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); runtime.Gosched() {
		if b.word.Load()&b.bit != 0 && b.sum.Load()&b.sumBit != 0 {
			return true
		}
	}
	return false
}
