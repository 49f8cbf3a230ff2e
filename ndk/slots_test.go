package ndk

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestSlotRingGrows: a poster and an engine goroutine pass positions through a slot ring
// that starts small; the engine finds in each slot what was posted there, across the
// segments, and the ring stops growing at the most outstanding at once.
func TestSlotRingGrows(t *testing.T) {
	const depth, total = 64, 50_000
	r := newSlotRing[uint64](depth)
	if len(r.prod.slots) != initialSlots {
		t.Fatalf("starts with %d slots", len(r.prod.slots))
	}
	var done atomic.Uint64
	posted := make(chan uint64, depth)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the engine
		defer wg.Done()
		for pos := range posted {
			s := r.done(pos)
			if *s != pos+1 {
				t.Errorf("position %d holds %d", pos, *s)
			}
			*s = 0
			done.Add(1)
		}
	}()
	for pos := uint64(0); pos < total; pos++ {
		for pos-done.Load() >= depth {
		}
		*r.post(pos, done.Load()) = pos + 1
		posted <- pos
	}
	close(posted)
	wg.Wait()
	if n := len(r.prod.slots); n > depth {
		t.Fatalf("grew to %d slots, depth %d", n, depth)
	}

	// One outstanding at a time: no allocation once warm.
	r = newSlotRing[uint64](depth)
	pos := uint64(0)
	if n := testing.AllocsPerRun(1000, func() {
		*r.post(pos, pos) = 1
		*r.done(pos) = 0
		pos++
	}); n != 0 {
		t.Fatalf("%v allocations per post and completion", n)
	}
}
