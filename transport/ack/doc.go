// Package ack keeps the acknowledgement state of one QP's two PSN streams: which of the
// peer's packets arrived (responder side), which of ours are in flight, acknowledged or
// lost (requester side), and the retransmission timeout. It is pure bookkeeping: no I/O, no
// clock (every time is an int64 of monotonic nanoseconds passed in as now), no goroutines.
//
//	requester (our stream)                            responder (peer's stream)
//
//	post ──► OnSent ──► SentHistory ─── data PSN p ──► ReceiveTracker.Check(p)
//	                       ▲   │                          │ New: place payload, Receive(p)
//	                       │   │                          │ Duplicate: drop, re-ack
//	OnAckBlocks(AckPSN, ───┘   │                          │ TooOld/TooNew: drop
//	  SACK, HighPSN, HighSACK) │                          ▼
//	  │ acked packets          │     ◄── Ack{Cumulative(), SACK(), High()} (coalesced)
//	  │ RTT sample ──► RTO     │
//	  ▼                        ▼
//	complete WRs        DetectLost (SACK threshold + RACK) ──► retransmit ──► OnRetransmitted
//	                    LossTime ──► timer: DetectLost again
//	                    Oldest + RTO.Timeout ──► timer: retransmit oldest, RTO.Backoff
//
// Reliability is selective: two SACK bitmaps (the 64 PSNs after the cumulative point and
// the 64 most recent arrivals, as in wire.AckExt) tell the requester exactly which packets
// are missing, however large the window; DetectLost names the lost ones by a packet
// threshold (RFC 9002 §6.1.1) and by time (RACK, RFC 8985), at a cost per ack that does not
// grow with the packets in flight, and only those are sent again, under their original PSN. The RTO (RFC 6298, with Karn's rule for
// samples and exponential backoff) is the backstop for tail losses and lost acks; the
// engine fails the QP when a packet stays unacknowledged past its retransmission budget, a
// duration it measures from PacketInfo.FirstSentAt.
// SentHistory.Unacked exists only for the go-back-N mode the benchmarks compare against.
//
// Nothing here trusts the network: PSNs and acknowledgements of any value are handled
// without panicking (wrap-around of the 32-bit PSN space included, wire.PSN does the
// arithmetic), and acknowledgements naming PSNs never sent are ignored and counted.
//
// Each type is owned by one engine goroutine and is not safe for concurrent use. After
// construction no method allocates (the tests prove it with testing.AllocsPerRun); the
// append-style methods reuse the caller's slice.
package ack
