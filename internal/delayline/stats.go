package delayline

import (
	"errors"
	"net"
	"net/netip"
	"time"
)

// ErrNotSupported is returned by Open on systems other than Linux.
var ErrNotSupported = errors.New("delay line needs Linux AF_PACKET sockets")

// Port is one of the two interfaces a [Line] forwards between, in the namespace where Open
// runs.
type Port struct {
	// IfIndex is the interface's index.
	IfIndex int
	// MAC is the interface's own address: frames forwarded out of it carry it as their
	// source, and only frames addressed to it are forwarded from it.
	MAC net.HardwareAddr
	// Addr is the interface's own IPv4 address: frames to it are left to the kernel.
	Addr netip.Addr
	// PeerMAC is the next host's address on this interface's link: frames forwarded out of
	// it carry it as their destination.
	PeerMAC net.HardwareAddr
	// Prefix is the subnet reached through this interface: frames from the other port whose
	// destination lies in it are forwarded out of this one.
	Prefix netip.Prefix
}

// Dir names a direction of a Line: AtoB carries what arrives on port A out of port B.
type Dir int

// The directions.
const (
	AtoB Dir = iota
	BtoA
)

func (d Dir) String() string {
	if d == AtoB {
		return "A->B"
	}
	return "B->A"
}

// LateBuckets is the number of buckets of DirStats.Late.
const LateBuckets = 16

// DirStats are one direction's counters since Open.
type DirStats struct {
	// Received counts the frames read from the ingress port; Ignored those not forwarded
	// there (not IPv4, not addressed to the port's MAC, to the router itself or outside the
	// egress subnet, malformed, TTL exhausted, or cut by the socket).
	Received, Ignored uint64
	// Queued counts the frames accepted into the queue; Dropped those the full drop-tail
	// queue refused; Overflow those the full storage refused.
	Queued, Dropped, Overflow uint64
	// Forwarded counts the frames sent out of the egress port, ForwardedBytes their bytes
	// (Ethernet header included); SendErrors those the egress socket refused (dropped).
	Forwarded, ForwardedBytes, SendErrors uint64
	// ForwardedTCP and ForwardedUDP are the bytes of ForwardedBytes that carried TCP and
	// UDP (IPv4 protocol 6 and 17): what each kind of flow got of the line.
	ForwardedTCP, ForwardedUDP uint64
	// Held and HeldBytes are what the direction holds now (queued or in flight), Backlog
	// the bytes waiting for serialization now, MaxBacklog the most seen at an arrival.
	Held, HeldBytes, Backlog, MaxBacklog uint64
	// Late is a histogram of how late frames left against their due time: bucket 0 counts
	// those less than 1 µs late, bucket i (1 <= i < LateBuckets-1) those [2^(i-1), 2^i) µs
	// late, the last bucket those later. LateSum and LateMax are in nanoseconds.
	Late             [LateBuckets]uint64
	LateSum, LateMax uint64
	// BadStamps counts frames whose kernel receive timestamp was unusable (from another
	// clock, or too old), queued as arriving when read.
	BadStamps uint64
	// Realtime says whether the direction's thread runs at real-time priority
	// (SCHED_FIFO; refused without CAP_SYS_NICE, and then it runs as a normal thread).
	Realtime bool
}

// LateQuantile returns an upper bound of the q-quantile (0 < q <= 1) of the lateness
// histogram: the upper edge of the bucket where it falls (the last bucket: LateMax).
func (s DirStats) LateQuantile(q float64) time.Duration {
	var n uint64
	for _, c := range s.Late {
		n += c
	}
	if n == 0 {
		return 0
	}
	rank := uint64(q*float64(n) + 0.5)
	rank = max(rank, 1)
	var c uint64
	for i, k := range s.Late {
		c += k
		if c >= rank {
			if i == LateBuckets-1 {
				return time.Duration(s.LateMax)
			}
			return time.Duration(1<<i) * time.Microsecond
		}
	}
	return time.Duration(s.LateMax)
}

// Stats are both directions' counters.
type Stats struct {
	Config Config
	Dir    [2]DirStats
}

// lateBucket returns the Late bucket of a lateness in ns.
func lateBucket(ns int64) int {
	us := ns / 1000
	if us <= 0 {
		return 0
	}
	b := 1
	for us >= 1<<b && b < LateBuckets-1 {
		b++
	}
	return b
}
