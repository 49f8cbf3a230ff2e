package ndkbench

import "github.com/xdpndk/xdpndk/bench/internal/report"

// LatencyStats summarises latencies or round-trip times, in microseconds.
type LatencyStats = report.Latency

// Summarize returns the statistics of samples (nanoseconds); it sorts samples in place.
func Summarize(samples []int64) LatencyStats { return report.Summarize(samples) }
