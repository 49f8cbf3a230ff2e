// Package ndkbench measures the NDK verbs of package ndk between the two hosts of a
// network-namespace test bed, and, in the same run and on the same bed, the baselines they
// are judged against: the raw AF_XDP link of package xdp (through bench/linkbench) and
// kernel TCP. It then computes the goal ratios (ndk figure / baseline figure) and says
// whether each goal is met.
//
//	one run (Run): one fresh bed, MTU 9000, removed at the end (also on error or signal)
//	┌──────────────────────────────────────────────────────────────────────────────┐
//	│ repetition 1..Runs, in this order each time:                                 │
//	│   raw-xdp     linkbench.RunBed: 64 B ping-pong, 64 B and 9000 B one-way      │
//	│   kernel-tcp  64 B ping-pong over a TCP connection, TCP_NODELAY              │
//	│   ndk-<mode>  ndk.Open on both hosts, connect one QP each, then:             │
//	│               Send/Receive ping-pong (every mode), and with ProgressInline:  │
//	│               the ping-pong with CQ.Wait instead of polling, and with B      │
//	│               answering after 1 ms (A polling; A in CQ.Wait: its wake-up),   │
//	│               the process's CPU while the pair idles (B in CQ.Wait),         │
//	│               Write and Read latency, 64 B Write message rate (signaled and  │
//	│               SILENT_SUCCESS), 64 KiB Write goodput (UMEM and Go heap)       │
//	│   scale       a fresh inline pair with Options.Scale (1024) QP pairs, one CQ │
//	│               per side: 64 B Write rate on QP 0 alone and spread over all,   │
//	│               per-QP min and max, then the process's CPU while all idle      │
//	└──────────────────────────────────────────────────────────────────────────────┘
//	Results: per figure, every repetition's value and their median; per goal, the
//	ratio of each repetition (numerator and denominator from the same repetition),
//	their median, and met / not met.
//
// Host A is the initiator (pinger, writer, reader); host B is the target (echo, memory).
// With ProgressInline nobody runs an engine but the benchmark's own loops: A's loop polls
// A's CQ (which polls A's engine), and a loop on B polls B's CQ or B's adapter. Every loop
// runs on a goroutine locked to its thread and is bounded in count and in time.
// bench/README.md describes the figures, the JSON and how to run the command
// (bench/cmd/ndkbench).
package ndkbench
