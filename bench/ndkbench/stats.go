package ndkbench

import (
	"math"
	"slices"
)

// Percentile returns the p-th percentile (0 <= p <= 100) of sorted by the nearest-rank
// method: the smallest value such that at least p percent of the values are <= it. It
// returns 0 for an empty slice.
func Percentile(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

// LatencyStats summarises latencies or round-trip times, in microseconds.
type LatencyStats struct {
	N                  int
	P50, P90, P99, Max float64
	Mean               float64
}

// Summarize returns the statistics of samples (nanoseconds); it sorts samples in place.
func Summarize(samples []int64) LatencyStats {
	if len(samples) == 0 {
		return LatencyStats{}
	}
	slices.Sort(samples)
	var sum float64
	for _, v := range samples {
		sum += float64(v)
	}
	us := func(ns int64) float64 { return float64(ns) / 1e3 }
	return LatencyStats{
		N:    len(samples),
		P50:  us(Percentile(samples, 50)),
		P90:  us(Percentile(samples, 90)),
		P99:  us(Percentile(samples, 99)),
		Max:  us(samples[len(samples)-1]),
		Mean: sum / float64(len(samples)) / 1e3,
	}
}
