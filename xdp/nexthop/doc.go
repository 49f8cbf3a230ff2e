// Package nexthop resolves the next hop of xdpndk's peers for package xdp: which Ethernet
// address a datagram to a peer IP address goes to, without ever blocking the goroutine that
// sends it.
//
// A Table is one device's next-hop table (bounded, with eviction) and the resolution
// worker that fills it: one goroutine that resolves many peers at once through the kernel
// (netlink: routes, neighbour entries, neighbour events) or a test's function, expires
// negative entries, re-validates entries in use and drops idle ones. Each link of the
// device reads the table through its own Hops: the last peer's entry, a small cache of the
// others and the hold area for the datagrams whose peer is still being resolved, with an
// atomic load per datagram and no lock or allocation. Resolver is the blocking, one-shot
// form of the same resolution, for callers that may wait.
//
//	xdp.Link.Send ──Lookup──▶ Hops ──(miss)──▶ Table ◀──publishes── worker ◀──▶ kernel
//	              ◀─Snap.Encap─┘  Take: hold ──ask──▶ worker (bounded queue, never waits)
//	xdp.Link (Receive/Send/TxDone) ──Service──▶ Hops: held datagrams out once resolved
package nexthop
