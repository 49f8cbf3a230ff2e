package transport

import (
	"sync"
	"testing"
)

// TestSPSCGrows: the queue starts small, grows by segments while the consumer takes
// entries concurrently, keeps them in order, refuses past its capacity, and once grown
// to what is queued at once allocates nothing.
func TestSPSCGrows(t *testing.T) {
	const capacity, total = 64, 100_000
	q := newSPSC[seqEntry, *seqEntry](capacity, 0)
	if len(q.prod.slots) != initialRing || q.capacity() != capacity {
		t.Fatalf("%d slots, capacity %d", len(q.prod.slots), q.capacity())
	}
	for i := seqEntry(0); i < capacity; i++ {
		if !q.push(&i) {
			t.Fatalf("push %d refused", i)
		}
	}
	extra := seqEntry(capacity)
	if q.push(&extra) || q.stage(&extra) {
		t.Fatal("push past the capacity accepted")
	}
	if len(q.prod.slots) != capacity {
		t.Fatalf("full queue has a %d-slot segment", len(q.prod.slots))
	}
	for i := seqEntry(0); i < capacity; i++ {
		if v := q.peek(); v == nil || *v != i {
			t.Fatalf("entry %d: %v", i, v)
		}
		q.pop()
	}
	if q.peek() != nil {
		t.Fatal("not empty")
	}

	// Concurrently, from a fresh queue: the producer stages and publishes in bursts.
	q = newSPSC[seqEntry, *seqEntry](capacity, 0)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := seqEntry(0); i < total; {
			burst := 1 + i%7
			for k := seqEntry(0); k < burst && i < total; k++ {
				v := i
				if !q.stage(&v) {
					break
				}
				i++
			}
			q.publish()
		}
	}()
	for want := seqEntry(0); want < total; {
		v := q.peek()
		if v == nil {
			continue
		}
		if *v != want {
			t.Fatalf("got %d, want %d", *v, want)
		}
		q.pop()
		want++
	}
	wg.Wait()

	// One in flight at a time: no allocation.
	q = newSPSC[seqEntry, *seqEntry](capacity, 0)
	v := seqEntry(1)
	if n := testing.AllocsPerRun(1000, func() { q.push(&v); q.peek(); q.pop() }); n != 0 {
		t.Fatalf("%v allocations per push and pop", n)
	}
}

// TestSPSCRecordStaysUntilFreed: an entry filled in place (reserve, commit) stays where it
// was posted while the consumer uses it, between take and free: the capacity counts it,
// the producer cannot reuse its slot, and a reserve that is not committed posts nothing.
func TestSPSCRecordStaysUntilFreed(t *testing.T) {
	q := newSPSC[seqEntry, *seqEntry](4, 0)
	for i := seqEntry(0); i < 4; i++ {
		v := q.reserve()
		if v == nil {
			t.Fatalf("reserve %d refused", i)
		}
		*v = 100 + i
		q.commit()
	}
	if q.reserve() != nil {
		t.Fatal("reserve past the capacity")
	}
	q.publish()
	var taken []*seqEntry
	for i := seqEntry(0); i < 4; i++ {
		v := q.peek()
		if v == nil || *v != 100+i {
			t.Fatalf("entry %d: %v", i, v)
		}
		q.take()
		taken = append(taken, v)
	}
	if q.peek() != nil || q.untaken() != 0 || q.len() != 4 {
		t.Fatalf("after taking all: peek %v, untaken %d, len %d", q.peek(), q.untaken(), q.len())
	}
	if q.reserve() != nil {
		t.Fatal("a taken entry's slot was offered before it was freed")
	}
	q.free()
	if *taken[0] != 0 {
		t.Fatal("free left the entry's references")
	}
	for i, v := range taken[1:] {
		if *v != 101+seqEntry(i) {
			t.Fatalf("entry %d changed while in use: %d", i+1, *v)
		}
	}
	v := q.reserve()
	if v == nil {
		t.Fatal("no slot after a free")
	}
	*v = 7 // not committed: nothing is posted
	q.publish()
	if q.peek() != nil || q.len() != 3 {
		t.Fatalf("an uncommitted reserve was posted: len %d", q.len())
	}
	if q.reserve() != v {
		t.Fatal("the next reserve did not return the same slot")
	}
}

// seqEntry is the queue entry of these tests: a number, cleared on release.
type seqEntry uint64

func (v *seqEntry) release() { *v = 0 }
