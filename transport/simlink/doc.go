// Package simlink is an in-memory link.Link: simulated hosts on a simulated network
// with seeded, reproducible impairments (loss, burst loss, duplication, reordering,
// corruption, latency, bandwidth with a bounded queue, a path MTU, partitions). The
// transport engine's reliability tests and benchmarks run on it; the engine cannot tell it
// from the AF_XDP link in package xdp.
//
// Flow of one datagram from host A to host B:
//
//	engine A                                                            engine B
//	   │ Send(pkts)                       Receive(pkts): copies due by the clock ▲
//	   ▼                                  (at <= Now), as views of pool buffers  │
//	Link A ──▶ path A→B: the fate, decided now, by A→B's seeded generator:       │
//	           path MTU ─▶ partition ─▶ bandwidth queue (tail drop) ─▶           │
//	           serialization ─▶ loss ─▶ burst loss ─▶ duplicate ─▶ corrupt       │
//	           at = end of serialization + latency + jitter (per copy)           │
//	             │ each surviving copy: a buffer from the network's pool         │
//	             ▼                                                               │
//	           Link B's queue, ordered by (at, order queued) ────────────────────┘
//	                                    Release(pkts): buffers back to the pool
//
// There are no goroutines inside the network: everything happens in the callers' Send and
// Receive, under one mutex (the only timer is the one a Link.Wait sleeps on). Time is a Clock: a RealClock (Link.Wait then
// sleeps until the next delivery is due) or a ManualClock that a virtual-time test shares
// with its engines and moves forward itself (Wait then never blocks): Network.PollAll polls
// the engines once and returns the next thing due, an engine's timer or
// Network.NextDelivery, for the test to set the clock to. In steady state no call allocates: buffers come from a free list that
// grows only when empty, and queues reuse their arrays.
//
// # Addresses
//
// A host is a netip.AddrPort; datagrams are routed by their destination's exact address and
// port (IPv4-mapped IPv6 addresses are taken as IPv4). Use 198.18.0.0/15, the benchmarking
// range, in tests and examples. A receiver sees Remote = the sender's address with the port
// it sent from (Packet.LocalPort, or the sender's own port when that was 0), and LocalPort =
// its own port. Datagrams to an address no host has are dropped and counted.
//
// # Determinism
//
// All randomness comes from Config.Seed. Each path (one direction, from host address A to
// host address B) has its own PCG generator (math/rand/v2), which is reseeded for the k-th
// datagram Send accepts for that path from (Seed, A, B, k); k counts from 0 and includes
// datagrams that are then dropped, but not those refused with ErrTooLarge. Each datagram
// draws in a fixed order, whether or not an impairment is on: loss, burst transition, burst
// loss, then (if it was not dropped) duplication, corruption, jitter and split point of each
// copy, then the bits to flip. (On a path with no random impairment on, nothing is drawn.)
// Hence:
//
//  1. Per path, which datagrams random and burst loss drop, which are duplicated, which
//     bits corruption flips, each copy's jitter and its split point are a pure function of
//     the seed, the two addresses, the lengths of the datagrams sent on that path so far,
//     and the impairments in force at each of those Sends. They do not depend on other
//     paths, on the clock, on goroutine scheduling, on the order hosts were added, or on
//     when receivers call Receive; and switching one impairment on or off does not change
//     what the others decide.
//  2. Drops by the path MTU, a partition or the bandwidth queue, and every delivery time,
//     depend in addition on the clock reading at each Send on that path. Drops because the
//     receiver's queue is full or closed depend on the receiver; they draw nothing, so they
//     never disturb 1.
//  3. A receiver gets due datagrams in order of delivery time, ties broken by the order in
//     which the copies were queued anywhere in the network.
//
// So with a ManualClock, two networks with the same Config and the same hosts, given the
// same Send calls in the same order (same datagrams, same clock readings, same
// interleaving across links) and Receive calls at the same clock readings, deliver the
// same copies with the same bytes in the same order at the same virtual times. With a
// RealClock only 1 holds. The streams are stable within one version of this package, not
// promised across versions.
//
// # Shared bottlenecks
//
// A path's Impairments.Bandwidth is its own wire: two paths never compete for it. To put
// several flows behind one link (a switch port towards a receiver: fairness between
// senders, incast), create a Bottleneck (Network.NewBottleneck: a bandwidth and a queue
// limit) and make each of those paths feed it (Network.SetBottleneck). Their datagrams are
// then queued and serialized there in the order they are sent, tail-dropped when the queue
// is full (PathStats.DroppedQueue and BottleneckStats.Dropped), and each accepted
// datagram's queueing delay goes into the bottleneck's DelayHistogram, from which a
// benchmark reads percentiles over an interval (DelayHistogram.Sub of two snapshots). A
// bottleneck draws nothing from any generator, so determinism is as above, with the
// bottleneck's drops and delays depending on the clock readings of the Sends of every
// path that feeds it.
//
// # Errors and limits
//
// Send refuses a datagram longer than Config.MaxPayload (what Link.MaxPayload reports),
// empty, or with more than link.MaxSegments segments, with link.ErrTooLarge: the
// contract's error for what can never be sent. A path MTU below MaxPayload
// (Impairments.MTU) is different: Send accepts the datagram, the path silently drops it,
// PathStats.DroppedMTU counts it, as a router with a smaller MTU and no ICMP would.
package simlink
