package workload

import (
	"bytes"
	"testing"
)

func TestStream(t *testing.T) {
	for _, off := range []int{0, 1, 7, 8, 13} {
		for _, n := range []int{1, 7, 8, 9, 63, 100} {
			b := make([]byte, n)
			fillStream(b, 42, off)
			if i := checkStream(b, 42, off); i != -1 {
				t.Fatalf("off %d len %d: mismatch at %d", off, n, i)
			}
			// The same bytes as the whole stream's, at their offset.
			whole := make([]byte, off+n)
			fillStream(whole, 42, 0)
			if !bytes.Equal(whole[off:], b) {
				t.Fatalf("off %d len %d: not a slice of the stream", off, n)
			}
			for k := 0; k < n; k++ {
				c := append([]byte(nil), b...)
				c[k] ^= 0x10
				if i := checkStream(c, 42, off); i != k {
					t.Fatalf("off %d len %d: flipped byte %d reported at %d", off, n, k, i)
				}
			}
			if checkStream(b, 43, off) == -1 && n >= 4 {
				t.Fatalf("off %d len %d: another key matches", off, n)
			}
		}
	}
}

func TestPickSize(t *testing.T) {
	var r rng
	seen := map[int]bool{}
	for i := 0; i < 10000; i++ {
		n := pickSize(r.next(), 20000)
		if n < 1 || n > 20000 {
			t.Fatalf("size %d", n)
		}
		seen[min(n/1000, 10)] = true
	}
	if !seen[0] || !seen[10] {
		t.Fatalf("sizes do not span [1, 20000]: %v", seen)
	}
	if n := pickSize(3, 1); n != 1 {
		t.Fatalf("max 1 gave %d", n)
	}
}
