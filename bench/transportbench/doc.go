// Package transportbench measures the transport engine (package transport) over the
// simulated network of package transport/simlink, in virtual time.
//
//	        one goroutine drives both engines (Pair.Step)
//	┌──────────────────────┐                         ┌──────────────────────┐
//	│ engine A             │  simlink, A→B and B→A:  │ engine B             │
//	│  QP: 64 KiB Writes ──┼─▶ latency, bandwidth,  ─┼─▶ QP: places them in │
//	│  (16 outstanding) ◀──┼── bounded queue, loss ◀─┼── Region, acks       │
//	└──────────────────────┘                         └──────────────────────┘
//	           ▲ ManualClock: moved to the next timer or delivery when both are idle
//
// Nothing runs in real time: a Pair shares one simlink.ManualClock between the network and
// both engines, polls the engines until neither has work, then moves the clock to the
// earliest thing due (an engine timer or a datagram's delivery). A run is therefore
// deterministic for a given seed, and its figures do not depend on the machine's speed;
// only the real time a run takes does.
//
// Run measures goodput under random loss (the benchmark): one QP pipelining
// Writes for a fixed virtual time after a warm-up, at several loss rates, with selective
// retransmission (the engine's default) and with go-back-N (transport.Config.GoBackN),
// each with several seeds; the median per figure is reported, with the ratios the issue
// sets goals for (Goals). Results holds the figures; WriteJSON and WriteTable write them in
// the format of package bench/linkbench.
//
// Pair, Region and Counter are the building blocks, exported so that the engine's Go
// benchmarks (transport/engine_bench_test.go) drive the same two-engine set-up.
package transportbench
