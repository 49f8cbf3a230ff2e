// Package delayline is a user-space delay line for the routed test bed: a forwarder that
// stands in for a wide-area path between the router's two interfaces, because this
// kernel has neither netem nor fq to add delay.
//
// A Line forwards IPv4 frames between two interfaces of one namespace (the router R of
// internal/testbed's routed bed) in both directions. Each direction is a path of its own,
// configured alike by [Config]:
//
//   - a drop-tail queue of Config.QueueBytes, holding what waits to be serialized;
//   - serialization at Config.Rate bits per second (a frame of L bytes, its Ethernet
//     header included, occupies the line for L x 8 / Rate seconds);
//   - a one-way propagation delay of Config.Delay after its serialization ends.
//
// A frame that arrives at time t therefore leaves at
//
//	start = max(t, end of the previous frame's serialization)
//	due   = start + L x 8 / Rate + Delay
//
// and is dropped on arrival when the bytes still waiting to be serialized, plus its own,
// would exceed QueueBytes. With Rate 0 there is no serialization and no queue: every frame
// leaves Delay after it arrived. The queue's arithmetic is in [Path] (virtual time: every
// call is given the time), which the tests drive without sockets.
//
// The forwarder ([Open], Linux only) acts as the router: it takes the IPv4 frames that
// arrive on one port addressed to its MAC and to an address of the other port's subnet,
// rewrites the Ethernet source to the egress port's MAC and the destination to the next
// host's, decrements the TTL (a frame whose TTL would reach 0 is not forwarded) and
// patches the header checksum (RFC 1624). It reads with AF_PACKET sockets bound to each
// port (PACKET_IGNORE_OUTGOING, so it never sees what it sent) and writes with the same
// sockets. The kernel of the namespace should not forward too (net.ipv4.ip_forward=0;
// internal/testbed turns it off), and the links should carry MTU-sized frames
// (GSO/TSO/GRO and checksum offload off), as on a real path.
//
// Each direction runs one goroutine locked to its own OS thread, whose timer slack is set
// to 1 ns (PR_SET_TIMERSLACK): it waits in ppoll(2) for a frame to arrive or for the
// head of its queue to be due, whichever comes first, reads what arrived in batches
// (recvmmsg), and sends what is due in batches (sendmmsg). How late a frame left against
// its due time is measured per frame ([DirStats].Late). Nothing is allocated per frame: a
// frame is copied into a byte ring sized at Open for the queue plus what the line holds in
// flight (Rate x (Delay + 10 ms), the 10 ms for a forwarder descheduled for that long), and a descriptor ring of fixed size; both are bounded, and a
// frame that finds either full is dropped and counted ([DirStats].Overflow).
package delayline
