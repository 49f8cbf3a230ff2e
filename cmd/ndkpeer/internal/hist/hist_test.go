package hist

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"unsafe"
)

// nearestRank is the exact nearest-rank percentile of sorted.
func nearestRank(sorted []int64, p float64) int64 {
	rank := int(math.Ceil(p*float64(len(sorted))/100 - 1e-9))
	return sorted[max(1, min(rank, len(sorted)))-1]
}

// TestAccuracyBound: every percentile of several distributions is within RelativeError of
// the exact nearest-rank percentile; min, max, mean and the count are exact.
func TestAccuracyBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	dists := map[string]func() int64{
		"uniform 0-300ns":   func() int64 { return rng.Int64N(300) },
		"uniform 1us-1ms":   func() int64 { return 1000 + rng.Int64N(999_000) },
		"lognormal ~30us":   func() int64 { return int64(30_000 * math.Exp(rng.NormFloat64()*0.5)) },
		"exponential ~50us": func() int64 { return int64(rng.ExpFloat64() * 50_000) },
		"bimodal 20us/5ms": func() int64 {
			if rng.IntN(100) == 0 {
				return 5_000_000 + rng.Int64N(100_000)
			}
			return 20_000 + rng.Int64N(2_000)
		},
		"wide 1ns-100s": func() int64 { return int64(math.Exp(rng.Float64() * math.Log(1e11))) },
	}
	ps := []float64{0, 1, 10, 25, 50, 75, 90, 99, 99.9, 99.99, 100}
	for name, gen := range dists {
		for _, n := range []int{1, 7, 1000, 200_000} {
			var h Histogram
			vals := make([]int64, n)
			var sum float64
			for i := range vals {
				vals[i] = gen()
				sum += float64(vals[i])
				h.Record(vals[i])
			}
			slices.Sort(vals)
			if h.Count() != uint64(n) || h.Min() != vals[0] || h.Max() != vals[n-1] {
				t.Errorf("%s n=%d: count %d min %d max %d, want %d %d %d", name, n, h.Count(), h.Min(), h.Max(), n, vals[0], vals[n-1])
			}
			if mean := sum / float64(n); math.Abs(h.Mean()-mean) > 1e-9*mean {
				t.Errorf("%s n=%d: mean %v, want %v", name, n, h.Mean(), mean)
			}
			for _, p := range ps {
				exact, got := nearestRank(vals, p), h.Percentile(p)
				if err := math.Abs(float64(got - exact)); err > RelativeError*float64(exact) {
					t.Errorf("%s n=%d p%v: %d, exact %d: error %.3g%% over the bound %.3g%%",
						name, n, p, got, exact, 100*err/float64(exact), 100*RelativeError)
				}
			}
		}
	}
}

func TestBuckets(t *testing.T) {
	// Buckets are contiguous: each begins where the previous one ends, and index agrees.
	next := uint64(0)
	for i := range Buckets {
		lo, w := bounds(i)
		if lo != next {
			t.Fatalf("bucket %d starts at %d, want %d", i, lo, next)
		}
		if index(lo) != i || index(lo+w-1) != i {
			t.Fatalf("bucket %d [%d, %d): index %d and %d", i, lo, lo+w, index(lo), index(lo+w-1))
		}
		if lo >= 2*sub && float64(w)/float64(lo) > 2*RelativeError {
			t.Fatalf("bucket %d [%d, +%d) wider than lo/128", i, lo, w)
		}
		next = lo + w
	}
	if next != 1<<maxBits {
		t.Errorf("buckets end at %d, want 2^%d", next, maxBits)
	}
	if index(math.MaxUint64) != Buckets-1 || index(1<<maxBits) != Buckets-1 {
		t.Error("values past 2^40 do not land in the last bucket")
	}
}

func TestEmptyNegativeMergeReset(t *testing.T) {
	var h Histogram
	if h.Percentile(50) != 0 || h.Mean() != 0 || h.Min() != 0 || h.Max() != 0 || h.Count() != 0 {
		t.Error("an empty histogram reports something")
	}
	h.Record(-5)
	if h.Min() != 0 || h.Percentile(50) != 0 {
		t.Error("a negative value does not count as 0")
	}
	var a, b Histogram
	for i := int64(1); i <= 1000; i++ {
		a.Record(i * 1000)
		b.Record(i*1000 + 500_000)
	}
	a.Merge(&b)
	if a.Count() != 2000 || a.Min() != 1000 || a.Max() != 1_500_000 {
		t.Errorf("merged: count %d min %d max %d", a.Count(), a.Min(), a.Max())
	}
	if p := a.Percentile(50); math.Abs(float64(p-750_000)) > RelativeError*750_000 { // the 1000th of 2000: 750 µs
		t.Errorf("merged p50 %d, want about 750000", p)
	}
	a.Reset()
	if a.Count() != 0 || a.Max() != 0 {
		t.Error("Reset left values")
	}
}

// TestRecordAllocatesNothing: recording never allocates.
func TestRecordAllocatesNothing(t *testing.T) {
	h := new(Histogram)
	v := int64(1)
	if n := testing.AllocsPerRun(10000, func() { h.Record(v); v = v*7 + 13 }); n != 0 {
		t.Errorf("Record allocates %v times per call", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = h.Percentile(99.9) }); n != 0 {
		t.Errorf("Percentile allocates %v times per call", n)
	}
}

// TestTenMillionSamplesSameSize: 10^7 samples take the memory one does: the histogram's
// size is a constant and recording them allocates nothing on the heap.
func TestTenMillionSamplesSameSize(t *testing.T) {
	h := new(Histogram)
	h.Record(1)
	size := unsafe.Sizeof(*h)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rng := rand.New(rand.NewPCG(3, 4))
	for range 10_000_000 {
		h.Record(rng.Int64N(10_000_000))
	}
	runtime.ReadMemStats(&after)
	if h.Count() != 10_000_001 {
		t.Fatalf("count %d", h.Count())
	}
	if unsafe.Sizeof(*h) != size || size > 64<<10 {
		t.Errorf("histogram of %d bytes", size)
	}
	// The runtime and the test framework allocate a few KiB meanwhile; one allocation per
	// sample would be 80 MB or more.
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<10 {
		t.Errorf("recording 10^7 samples allocated %d bytes", grew)
	}
}

func BenchmarkRecord(b *testing.B) {
	var h Histogram
	for i := range b.N {
		h.Record(int64(i&0xfffff) * 37)
	}
}
