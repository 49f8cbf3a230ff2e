// Package linkbench measures raw datagram links side by side on the two-host test bed
// (package internal/testbed): our AF_XDP link (package xdp), the asavie/xdp library, and
// kernel UDP sockets, in one process, on one veth pair, in the same run.
//
//	 host A (netns)                               host B (netns)
//	┌───────────────────────┐   veth, MTU 9000   ┌───────────────────────┐
//	│ sender ───────────────┼───────────────────▶│ receiver (counts)     │  one-way
//	│ pinger ◀──────────────┼────────────────────┼─▶ echo                │  ping-pong
//	└───────────────────────┘                    └───────────────────────┘
//
// For every system it measures
//
//   - one-way throughput: A sends datagrams of one size as fast as it can for a fixed time
//     after a warm-up, B counts what it actually receives; the received rate (packets/s and
//     Gbit/s), the sender's rate and the loss are reported. The size is the IP packet length
//     (UDP payload = size - 28), and Gbit/s counts IP packet bytes;
//   - 64-byte ping-pong round-trip time: A sends, B echoes, A waits for the echo (spinning on
//     the RX ring for the AF_XDP systems, blocking in ReadFrom for kernel UDP), for N round
//     trips; the first ones are dropped as warm-up and p50/p90/p99/mean are reported.
//
// Each measurement is repeated Options.Runs times, the systems interleaved within each run;
// the reported value is the median and every run is kept. Results holds the figures with a
// header describing the machine and the modes in effect; WriteJSON and WriteTable write them.
//
// Every send loop is bounded in packet count and in time, and traffic only flows between
// the two namespaces of the bed. Run creates and removes its own bed; RunBed measures on a
// bed the caller owns (bench/cmd/rawdemo's), which BedOptions describes.
//
// The asavie/xdp baseline keeps its socket on its own queue of the veth pair for the whole
// run: its Socket.Close does not unmap the rings, so the kernel socket stays bound to its
// queue until the process exits (bench/README.md has the details).
package linkbench
