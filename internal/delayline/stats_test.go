package delayline

import (
	"testing"
	"time"
)

func TestLateBuckets(t *testing.T) {
	for _, tc := range []struct {
		ns   int64
		want int
	}{{-5, 0}, {999, 0}, {1000, 1}, {1999, 1}, {2000, 2}, {3999, 2}, {4000, 3}, {100_000, 7}, {1 << 40, LateBuckets - 1}} {
		if got := lateBucket(tc.ns); got != tc.want {
			t.Errorf("lateBucket(%d) = %d, want %d", tc.ns, got, tc.want)
		}
	}
	var s DirStats
	s.Late[0], s.Late[3], s.Late[5] = 90, 9, 1
	if q := s.LateQuantile(0.5); q != time.Microsecond {
		t.Errorf("median %v, want 1µs", q)
	}
	if q := s.LateQuantile(0.99); q != 8*time.Microsecond {
		t.Errorf("p99 %v, want 8µs", q)
	}
}
