// Package longpath measures ndkpeer's bandwidth tests against iperf3 on long paths: the
// routed test bed with its router made a delay line (internal/testbed Options.Path,
// package internal/delayline) of 1 Gbit/s and a round trip of 2 ms and 10 ms, the range
// of a metro or regional wide-area path, where the ~20 µs of the plain bed says nothing.
//
// The links carry MTU 1500, what a wide-area path carries (jumbo frames rarely cross
// one). The delay line's queue is one bandwidth-delay product of the round trip (its
// default), a common rule for a router's buffer.
//
// For each round trip and each run, one after the other on the same bed:
//
//   - tcp alone: iperf3, one TCP stream (CUBIC), A to B (for write) or B to A (-R, for
//     read);
//   - ndk alone: ndkpeer write-bw (or read-bw) with 64 KiB messages, A the client, B
//     `ndkpeer serve`;
//   - shared: both started together, the rate of each over the same window.
//
// Every run lasts Duration; the window is from Skip to its end, measured by each tool's
// own one-second intervals (ndkpeer --json's intervals, iperf3 -J's): ndkpeer's count
// from the end of its warm-up, iperf3's from its start, which in the shared runs differ
// by the warm-up's few hundred milliseconds. Figures are medians over Runs.
//
// Goals, reported met or not (never asserted in tests): each alone at least 0.9 times
// iperf3 alone on the same path; sharing, neither below 0.25 of the rate. Every run is
// bounded in time; the bed and every process are removed when Run returns, also on
// failure or cancellation.
package longpath
