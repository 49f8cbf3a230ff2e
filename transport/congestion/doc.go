// Package congestion decides how much data one direction of a queue pair may have in
// flight: the congestion controllers of the transport engine.
//
//	engine (one goroutine)                         Controller (one per QP direction)
//	  may I send?   pipe < Window() ─────────────▶ window in bytes
//	                NextSendTime(now, n) ────────▶ pacing, only below one packet
//	  sent          OnSent(now, n)
//	  ACK/SACK      OnAck(now, acked, delay) ────▶ delay < target: increase
//	                                               delay > target: multiplicative decrease
//	  SACK gap      OnLoss(now, lost) ───────────▶ decrease (Delay: unless random loss)
//	  RTO fired     OnTimeout(now) ──────────────▶ decrease, or reset after repeated RTOs
//	  RTO spurious  OnSpuriousTimeout(now) ──────▶ undo the timeout's decrease
//
// The engine's default is Delay, a delay-based controller for paths of 10 µs to 10 ms
// (docs/TRANSPORT.md, "Congestion control for paths of 10 µs to 10 ms", has the algorithm
// and the reasons for its constants): Swift's absolute target on short paths, a learned
// base plus a queue in proportion on long ones, slow start ended by delay, additive
// increase scaled with the path, a delay cut that drains the queue, random loss told from
// congestion, spurious timeouts undone (OnSpuriousTimeout), and a competitive mode against
// flows that keep the buffer full. On paths of a millisecond and more (DelayConfig.LongPath)
// it paces, cuts only on a queue that stood a whole round trip, and competes as CUBIC
// (RFC 9438) with a probe to stop; a sample that a stale clock made shorter than the
// path never lowers the learned base by more than a small tolerance. Swift remains for
// comparison and for deployments that want it.
//
// The engine passes the time into every call; nothing here reads a clock, sleeps, or
// allocates after construction, so the controllers are exact and fast to test (see the
// discrete-event simulator in sim_test.go). A controller serves READ responses the same
// way it serves requester data: whoever transmits the bytes owns the controller.
//
// # Swift
//
// Swift follows the algorithm of
//
//	G. Kumar, N. Dukkipati, K. Jang, et al. "Swift: Delay is Simple and Effective for
//	Congestion Control in the Datacenter". ACM SIGCOMM 2020, doi:10.1145/3387514.3406591.
//
// It steers the measured fabric delay towards a target with additive increase and
// multiplicative decrease (the paper's Algorithm 1), in our words:
//
//   - The delay sample is the round-trip time of a newly acknowledged packet minus the
//     time the receiver held it before acking (the engine computes it from the echoed
//     timestamp and the ack's hold-time field). Acks of retransmitted packets carry no
//     sample (Karn): they count, but they do not move the window.
//   - Delay below target: the window grows by AI packets per round trip, in steps of
//     AI*acked/cwnd per ack (AI*acked while the window is below one packet).
//   - Delay above target: the window is multiplied by max(1 - β(delay-target)/delay,
//     1 - MaxMDF), so the cut is proportional to how far the delay overshoots, and never
//     more than MaxMDF.
//   - Loss (a SACK gap, once per loss event): multiply by 1 - MaxMDF. Retransmission
//     timeout: the same, but the RetxResetThreshold-th timeout in a row drops the window
//     to MinCwnd.
//   - All decreases share one clock: the window decreases at most once per round trip,
//     measured as the larger of the smoothed delay and the last sample, because the
//     effect of a cut cannot show before then. Only an actual decrease restarts it.
//   - Below one packet the window cannot be enforced by counting bytes, so Window reports
//     one MSS and NextSendTime spaces packets by SmoothedDelay/cwnd: a window of 0.1 sends
//     one packet every ten round trips. This is how Swift handles incast of many more
//     flows than the bottleneck has packets of buffer.
//   - The target delay is BaseTarget + hops*HopScale + a flow-scaling term that is
//     FSRange at FSMinCwnd and falls with 1/sqrt(cwnd) to 0 at FSMaxCwnd (the paper's
//     §3.5). Flows with small windows, the sign of many competitors, aim a little higher,
//     which speeds convergence to fairness and keeps the queue growth at O(sqrt(flows)).
//
// Deliberate differences from the paper:
//
//   - One window only: this controller has no separate endpoint-congestion window
//     (Swift's second window, driven by the receiver's host delay). The engine removes the
//     host part from the sample, and the receiver's own flow control (credits, RNR) covers
//     host overload.
//   - No hop count: our packets carry no echo of the IP TTL, so the path is taken as one
//     hop and HopScale is a constant added to the target (default 0).
//   - Algorithm 1 restarts the decrease clock whenever an event left the window no larger
//     (cwnd <= cwnd_prev); here only an actual decrease restarts it, so a run of above-target acks that were not allowed to
//     decrease cannot postpone the next decrease forever.
//   - Delay exactly at the target changes nothing.
//   - There is no slow start (Algorithm 1 has none either): a flow starts at InitialCwnd and
//     grows by AI per round trip, which is quick when round trips are microseconds.
//
// The defaults (DefaultSwiftConfig) are ours, sized for this project's test bed (a veth
// pair with a base round trip of about 5-10 µs) and datacenter NICs (10-20 µs): a 25 µs
// base target leaves room for a few packets of queue and for the timestamp jitter of a
// software datapath. Every input is sanitised rather than trusted: delay samples above
// MaxDelay are clamped, non-positive sizes and samples are ignored, the window stays in
// [MinCwnd, MaxCwnd] and the pacing gap is bounded, so no call can panic or overflow.
//
// # Fixed
//
// Fixed is a constant window with no pacing, for tests and for comparisons in which
// congestion control should not be a variable (such as the go-back-N baseline).
package congestion
