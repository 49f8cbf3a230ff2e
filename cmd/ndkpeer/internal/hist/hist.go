// Package hist is ndkpeer's latency histogram: a fixed array of log-linear buckets, so
// that a run of any length records in the same memory, without allocating.
//
// Values (nanoseconds) below 256 have a bucket each and are exact. Above, every power of
// two is cut into 128 buckets of equal width: a bucket [lo, lo+w) has w <= lo/128. A
// percentile is the middle of the bucket that holds the nearest-rank sample, clamped to
// the exact minimum and maximum, so it is within RelativeError (1/256, about 0.4%) of the
// nearest-rank percentile of the samples themselves. Values from 2^40 ns (about 18 minutes)
// on share the last bucket; the maximum and the mean stay exact.
package hist

import (
	"math"
	"math/bits"
)

const (
	subBits = 7
	sub     = 1 << subBits // buckets per power of two
	// maxBits is the width of the largest value with a bucket of its own.
	maxBits = 40
	// Buckets is the number of buckets: the memory of a Histogram is fixed.
	Buckets = (maxBits-subBits)*sub + sub
)

// RelativeError bounds |Percentile(p) - the nearest-rank percentile| / that percentile.
const RelativeError = 1.0 / (2 * sub)

// Histogram counts values in log-linear buckets. The zero value is empty and ready. It is
// not safe for concurrent use.
type Histogram struct {
	counts   [Buckets]uint64
	n        uint64
	sum      float64
	min, max int64
}

// index returns the bucket of v (v >= 0).
func index(v uint64) int {
	if v < 2*sub {
		return int(v)
	}
	e := bits.Len64(v) - subBits - 1 // v>>e is in [sub, 2*sub)
	if e > maxBits-subBits-1 {
		return Buckets - 1
	}
	return e*sub + int(v>>e)
}

// bounds returns the lowest value of bucket i and its width.
func bounds(i int) (lo, w uint64) {
	if i < 2*sub {
		return uint64(i), 1
	}
	e := i/sub - 1
	m := uint64(i - e*sub) // in [sub, 2*sub)
	return m << e, 1 << e
}

// Record adds a value in nanoseconds; a negative one counts as 0.
func (h *Histogram) Record(ns int64) {
	ns = max(ns, 0)
	h.counts[index(uint64(ns))]++
	if h.n == 0 || ns < h.min {
		h.min = ns
	}
	if ns > h.max {
		h.max = ns
	}
	h.n++
	h.sum += float64(ns)
}

// Reset empties h.
func (h *Histogram) Reset() { *h = Histogram{} }

// Merge adds o's values to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// Count is the number of values recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Min is the smallest value (0 when empty).
func (h *Histogram) Min() int64 { return h.min }

// Max is the largest value (0 when empty).
func (h *Histogram) Max() int64 { return h.max }

// Mean is the exact mean (0 when empty).
func (h *Histogram) Mean() float64 {
	if h.n == 0 {
		return 0
	}
	return h.sum / float64(h.n)
}

// Percentile returns the p-th percentile (0 <= p <= 100) by the nearest-rank method, to
// within RelativeError: the middle of the bucket of the smallest sample with at least p
// percent of the samples at or below it, clamped to [Min, Max]. 0 when empty.
func (h *Histogram) Percentile(p float64) int64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(p*float64(h.n)/100 - 1e-9))
	rank = max(1, min(rank, h.n))
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen < rank {
			continue
		}
		lo, w := bounds(i)
		mid := int64(lo + (w-1)/2)
		return max(h.min, min(mid, h.max))
	}
	return h.max
}
