package ndkbench

import "github.com/xdpndk/xdpndk/bench/internal/report"

// LatencyStats summarises latencies or round-trip times, in microseconds.
type LatencyStats = report.Latency
