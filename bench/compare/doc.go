// Package compare measures xdpndk against what a user would pick instead, in the tools'
// own terms, on one two-namespace bed (internal/testbed, MTU 9000) in one run, and writes
// the figures in the shared results schema (bench/internal/report) with the goals of the
// comparison evaluated. bench/cmd/compare is its command; `make bench` runs it.
//
//	one run (Run): one bed, removed at the end (also on error or signal)
//	┌──────────────────────────────────────────────────────────────────────────────┐
//	│ repetition r = 1..Runs: every system once, in AllSystems' order rotated by r │
//	│   xdpndk         ndkpeer serve in B for the turn, a client per test in A:    │
//	│   xdpndk-events  send-lat, write-lat, read-lat, send-bw, write-bw, read-bw   │
//	│                  (--cpu-util, -D per size; -e for events), then send-lat     │
//	│                  64 B --load write:64K (latency under a stream)              │
//	│   raw-xdpndk     bench/linkbench in this process: 64 B ping-pong,            │
//	│   raw-asavie     64 B and 9000 B one-way, the process's CPU                  │
//	│   qperf-tcp      tcp_lat and tcp_bw -m SIZE; tcp_lat 64 B under iperf3       │
//	│   iperf3-tcp     -l SIZE, one stream, CUBIC                                  │
//	│   sockperf-udp   ping-pong and throughput, blocking / --nonblocked (-poll)   │
//	│   fabric-tcp     fi_pingpong over tcp (msg) / udp;ofi_rxd (rdm)              │
//	│   fabric-udp-rxd                                                             │
//	│ then the long paths (bench/longpath, a routed bed with a delay line of its   │
//	│ own): ndkpeer write-bw, read-bw against iperf3 at RTT 2 and 10 ms, 1 Gbit/s, │
//	│ alone and sharing                                                            │
//	└──────────────────────────────────────────────────────────────────────────────┘
//	Results: per figure every repetition's value and their median; per goal the
//	ratio of each repetition (both figures from the same repetition), their median,
//	and met / not met.
//
// Every figure comes from the tools' own output, parsed (bench/tools' result types,
// ndkpeer's --json, bench/linkbench's results), never retyped. A measurement that fails is
// recorded as failed (report.FailedNote in the header's notes; its records keep the
// repetitions that succeeded, or none) and the run goes on. Records share scenarios and
// operations across tools (ScenarioPingPong, ScenarioStream, ...), so that one row of the
// Markdown table compares every system at one size. bench/README.md ("bench: compare")
// describes the figures, the sizes and the time a run takes.
package compare
