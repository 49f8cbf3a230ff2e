package main

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// checkFree fails unless the free list is sorted, merged, inside the region, and, with
// no extent alive, the whole region.
func checkFree(t *testing.T, s *store) {
	t.Helper()
	var end uint64
	for i, f := range s.free {
		if f.len == 0 || f.off+f.len > uint64(len(s.buf)) || (i > 0 && f.off <= end) {
			t.Fatalf("free list %v: span %d out of order, empty, adjacent or outside", s.free, i)
		}
		end = f.off + f.len
	}
	if _, extents, free := s.usage(); extents == 0 && free != uint64(len(s.buf)) {
		t.Fatalf("no extent alive, %d of %d bytes free: %v", free, len(s.buf), s.free)
	}
}

func TestStoreReserveCommitRelease(t *testing.T) {
	s := newStore(make([]byte, 4096), 3)
	a, err := s.reserve(1000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.reserve(5000); !errors.Is(err, errTooLarge) {
		t.Fatalf("5000 bytes of 4096: %v", err)
	}
	b, _ := s.reserve(0) // an empty file takes no space but an entry
	c, err := s.reserve(3000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.reserve(1); !errors.Is(err, errTooMany) {
		t.Fatalf("a fourth extent: %v", err)
	}
	if a.off%storeAlign != 0 || c.off%storeAlign != 0 || c.off < a.off+a.size {
		t.Fatalf("extents overlap or are not aligned: %+v %+v", a, c)
	}
	s.commit("a", a, 1)
	s.commit("b", b, 2)
	s.release(c) // a PUT abandoned
	checkFree(t, s)

	r, ok := s.open("a")
	if !ok || r != a || r.crc != 1 {
		t.Fatalf("open a: %+v %v", r, ok)
	}
	// Replacing "a" while it is read keeps the old bytes until the reader is done.
	a2, err := s.reserve(2000)
	if err != nil {
		t.Fatal(err)
	}
	s.commit("a", a2, 3)
	if a2.off < a.off+a.space && a.off < a2.off+a2.space {
		t.Fatal("the new extent overlaps the one still read")
	}
	if _, extents, _ := s.usage(); extents != 3 {
		t.Fatalf("%d extents alive, want 3 (old a read, new a, b)", extents)
	}
	s.release(r)
	if files, extents, _ := s.usage(); files != 2 || extents != 2 {
		t.Fatalf("files %d extents %d, want 2 and 2", files, extents)
	}
	if _, ok := s.open("nope"); ok {
		t.Fatal("opened a missing file")
	}
	checkFree(t, s)
}

// A random mix of reservations and releases never overlaps extents and gives all the
// space back at the end.
func TestStoreRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := newStore(make([]byte, 1<<20), 64)
	var live []*extent
	for range 5000 {
		if len(live) > 0 && rng.IntN(2) == 0 {
			i := rng.IntN(len(live))
			s.release(live[i])
			live = append(live[:i], live[i+1:]...)
		} else if e, err := s.reserve(uint64(rng.IntN(64 << 10))); err == nil {
			for _, o := range live {
				if e.space > 0 && o.space > 0 && e.off < o.off+o.space && o.off < e.off+e.space {
					t.Fatalf("%+v overlaps %+v", e, o)
				}
			}
			live = append(live, e)
		} else if !errors.Is(err, errNoSpace) && !errors.Is(err, errTooMany) {
			t.Fatal(err)
		}
		checkFree(t, s)
	}
	for _, e := range live {
		s.release(e)
	}
	checkFree(t, s)
}
