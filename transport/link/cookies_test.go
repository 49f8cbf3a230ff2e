package link

import "testing"

func TestCookieQueue(t *testing.T) {
	q := NewCookieQueue(3)
	for i := range 3 {
		if !q.Push(uint64(10 + i)) {
			t.Fatalf("push %d refused", i)
		}
	}
	if !q.Full() || q.Push(99) || q.Len() != 3 {
		t.Fatal("a full queue took another cookie")
	}
	var dst [2]uint64
	if n := q.Pop(dst[:]); n != 2 || dst != [2]uint64{10, 11} {
		t.Fatalf("pop = %d %v", n, dst)
	}
	// Wrap around the ring.
	q.Push(13)
	q.Push(14)
	var all [5]uint64
	if n := q.Pop(all[:]); n != 3 || all[0] != 12 || all[1] != 13 || all[2] != 14 {
		t.Fatalf("pop after wrap = %d %v", n, all)
	}
	if q.Pop(all[:]) != 0 || q.Len() != 0 {
		t.Fatal("empty queue returned cookies")
	}
	if n := testing.AllocsPerRun(100, func() { q.Push(1); q.Pop(dst[:]) }); n != 0 {
		t.Fatalf("push+pop allocates %v times", n)
	}
}
