package wire

import (
	"math"
	"testing"
)

func TestPSNWrap(t *testing.T) {
	for _, tc := range []struct {
		p, q PSN
		less bool
	}{
		{1, 2, true},
		{2, 1, false},
		{5, 5, false},
		{math.MaxUint32, 0, true}, // wraps: 0 comes after 2^32-1
		{0, math.MaxUint32, false},
		{math.MaxUint32 - 10, 20, true},
	} {
		if got := tc.p.Less(tc.q); got != tc.less {
			t.Errorf("%d.Less(%d) = %v, want %v", tc.p, tc.q, got, tc.less)
		}
	}
	if p := PSN(math.MaxUint32).Add(3); p != 2 {
		t.Errorf("Add across the wrap = %d, want 2", p)
	}
	if d := PSN(2).Sub(math.MaxUint32); d != 3 {
		t.Errorf("Sub across the wrap = %d, want 3", d)
	}
	if !PSN(1).InWindow(math.MaxUint32-1, 4) || PSN(3).InWindow(math.MaxUint32-1, 4) {
		t.Error("InWindow across the wrap wrong")
	}
	if PSN(7).InWindow(7, 0) {
		t.Error("empty window contains its base")
	}
	if !PSN(4).LessEq(4) || PSN(5).LessEq(4) {
		t.Error("LessEq wrong")
	}
	if m := PSN(math.MaxUint32).Max(1); m != 1 {
		t.Errorf("Max across the wrap = %d, want 1", m)
	}
}
