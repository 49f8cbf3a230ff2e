package transport

// initialRing is how many entries the engine's per-QP rings (a QP's active work requests,
// its receives being filled) start with, if their bound is larger. A ring doubles when it
// is full below its bound and never shrinks, so a QP's memory follows the most it has had
// outstanding, not its configured depths (docs/TRANSPORT.md, "Memory per QP"): once a
// workload has reached its depth, nothing more is allocated.
const initialRing = 4

// growRing returns a ring of twice ring's length holding the entries of sequence numbers
// [from, to) at their places (sequence & (length-1)); ring is a power of two long and full
// or less. Engine goroutine only.
func growRing[T any](ring []T, from, to uint32) []T {
	n := make([]T, 2*len(ring))
	om, nm := uint32(len(ring)-1), uint32(len(n)-1)
	for s := from; s != to; s++ {
		n[s&nm] = ring[s&om]
	}
	return n
}
