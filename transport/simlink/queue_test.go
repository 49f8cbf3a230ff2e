package simlink

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// The FIFO-plus-heap queue pops in (at, seq) order and reports the head correctly, against
// a sorted slice as the model.
func TestRxQueueOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for round := 0; round < 200; round++ {
		var q rxQueue
		var model []entry
		seq, now := uint64(0), int64(0)
		jitter := int64(rng.IntN(50))
		for op := 0; op < 500; op++ {
			switch {
			case rng.IntN(3) > 0:
				now += int64(rng.IntN(10))
				e := entry{at: now + rng.Int64N(jitter+1), seq: seq}
				seq++
				wasHead := len(model) == 0 || e.before(&model[0])
				if got := q.push(e); got != wasHead {
					t.Fatalf("round %d: push of %+v reported head %v, want %v", round, e, got, wasHead)
				}
				i, _ := slices.BinarySearchFunc(model, e, func(a, b entry) int {
					if a.before(&b) {
						return -1
					}
					return 1
				})
				model = slices.Insert(model, i, e)
			case len(model) > 0 && rng.IntN(5) == 0:
				cut := model[len(model)/2].seq
				q.filter(func(e *entry) bool { return e.seq%2 == cut%2 })
				model = slices.DeleteFunc(model, func(e entry) bool { return e.seq%2 == cut%2 })
			case len(model) > 0:
				if h := q.head(); h.seq != model[0].seq {
					t.Fatalf("round %d: head seq %d, want %d", round, h.seq, model[0].seq)
				}
				if e := q.pop(); e.seq != model[0].seq {
					t.Fatalf("round %d: popped seq %d, want %d", round, e.seq, model[0].seq)
				}
				model = model[1:]
			}
			if q.len() != len(model) {
				t.Fatalf("round %d: len %d, want %d", round, q.len(), len(model))
			}
		}
	}
}
