package nexthop

import (
	"net/netip"
	"syscall"
)

// Errors of next-hop resolution (Resolver.NextHop, xdp.Link.ResolvePeer), wrapped with the peer
// address and the reason. Each also matches the errno a socket reports for the same cause
// (errors.Is with syscall.EHOSTUNREACH or syscall.ENETUNREACH), so that callers that only
// know link.PeerResolver can tell them apart.
var (
	// ErrNoEthernetNextHop means the route to the peer does not leave through an Ethernet
	// device that resolves neighbours: the peer is a local address (loopback), the device
	// has ARP/ND turned off (IFF_NOARP, such as tun or WireGuard devices), has no 6-byte
	// MAC address, or the route is not a unicast route. It matches ENETUNREACH.
	ErrNoEthernetNextHop error = &reachError{"xdp: no Ethernet next hop", syscall.ENETUNREACH}
	// ErrNoRoute means the kernel has no route to the peer, or the route leaves through
	// another interface than the device's. It matches ENETUNREACH.
	ErrNoRoute error = &reachError{"xdp: no route to peer through this device", syscall.ENETUNREACH}
	// ErrNextHopUnresolved means the kernel did not resolve the next hop's MAC address
	// (ARP or neighbour discovery) in time: for Resolver.NextHop before its context was
	// done (the error then also wraps the context's error), for a Table within
	// Config.ResolveTimeout. It matches EHOSTUNREACH.
	ErrNextHopUnresolved error = &reachError{"xdp: next hop address not resolved", syscall.EHOSTUNREACH}
)

// reachError is a sentinel error that also matches an errno.
type reachError struct {
	msg   string
	errno syscall.Errno
}

func (e *reachError) Error() string { return e.msg }
func (e *reachError) Unwrap() error { return e.errno }

// NeighbourState is the state of a peer in a Table.
type NeighbourState uint8

// States of a next-hop table entry.
const (
	// NeighbourPending: the next hop is being resolved; datagrams to the peer are held.
	NeighbourPending NeighbourState = iota + 1
	// NeighbourResolved: the next hop's MAC is known; datagrams go out at once.
	NeighbourResolved
	// NeighbourFailed: resolution failed a moment ago; datagrams to the peer are dropped
	// (counted in xdp.LinkStats.TxUnresolved) until the entry expires (Config.NegativeTTL).
	NeighbourFailed
)

// String names the state.
func (s NeighbourState) String() string {
	switch s {
	case NeighbourPending:
		return "pending"
	case NeighbourResolved:
		return "resolved"
	case NeighbourFailed:
		return "failed"
	}
	return "none"
}

// NeighbourInfo is a snapshot of one peer's entry in a Table.
type NeighbourInfo struct {
	// Peer is the peer's IP address (the table's key).
	Peer netip.Addr
	// State is the entry's state.
	State NeighbourState
	// MAC is the next hop's Ethernet address (NeighbourResolved only).
	MAC [6]byte
	// Gateway is the router the peer is reached through, or the zero Addr on-link.
	Gateway netip.Addr
	// Err is why resolution failed (NeighbourFailed only).
	Err error
}

// NeighbourStats are the counters of a Table and its resolution worker.
type NeighbourStats struct {
	Entries  int // entries in the table (at most Config.Entries)
	Pending  int // entries being resolved for the first time
	Failed   int // entries cached as failed (negative entries)
	Resolved int // entries with a usable next hop
	// Resolving is the targets the worker is resolving now, first resolutions and
	// re-validations together (at most Config.MaxResolving, plus ResolvePeer calls).
	Resolving int

	Requests        uint64 // resolution requests the worker accepted
	RequestsDropped uint64 // requests dropped: the queue to the worker was full, or too many targets in progress
	Resolutions     uint64 // first resolutions that succeeded
	Failures        uint64 // first resolutions that failed (each makes a negative entry)
	Refreshes       uint64 // re-validations of resolved entries completed
	Changes         uint64 // resolved entries whose next hop changed (new MAC or gateway)
	Evictions       uint64 // entries evicted to make room for new ones
	Expired         uint64 // entries removed because they expired (negative TTL) or went unused
	EventsLost      uint64 // times the kernel's neighbour event stream was lost and re-subscribed
}
