package link

import (
	"context"
	"errors"
	"net/netip"
	"time"
)

// MaxSegments is the largest number of pieces one Packet may have, in either direction.
//
// On receive, a datagram larger than one link buffer arrives as several segments (AF_XDP
// multi-buffer: a 9000-byte frame in 4 KiB chunks is 3). On transmit, the engine gathers a
// header, a payload that may live in registered memory, and a trailer without copying them
// together first.
const MaxSegments = 4

// Packet is one UDP datagram crossing a Link: its payload (the transport header, the data and
// the integrity trailer; never Ethernet, IP or UDP headers) and the addresses it travels
// between.
//
// Packets are plain values: the engine keeps fixed arrays of them and reuses them, so passing
// them through a Link allocates nothing.
type Packet struct {
	// Remote is the peer: the destination when sending, the source when receiving. Its port
	// is the peer's UDP port.
	Remote netip.AddrPort
	// LocalPort is our UDP port: the source port to send from (per-QP flow entropy; 0 means
	// the link's own port), or the destination port a received datagram was sent to.
	LocalPort uint16
	// NSegs is the number of used entries of Segs.
	NSegs uint8
	// Flags modify how a Link treats the packet on Send (see PacketFlag).
	Flags PacketFlag
	// Segs holds the datagram as NSegs consecutive pieces. On receive they are views into
	// link memory, valid until the packet is passed to Release. On send they are read during
	// Send (or, with FlagZeroCopy, until the Cookie is reported by TxDone).
	Segs [MaxSegments][]byte
	// Cookie identifies a zero-copy packet in TxDone. The link does not interpret it.
	Cookie uint64
}

// PacketFlag modifies how a Link transmits a Packet.
type PacketFlag uint8

const (
	// FlagZeroCopy asks the link to transmit segments that lie in its registered memory by
	// reference instead of by copy. The caller must not change those bytes until TxDone
	// reports the packet's Cookie. A link that cannot reference a segment copies it and
	// reports the Cookie as done on the next TxDone call.
	FlagZeroCopy PacketFlag = 1 << iota
)

// Len returns the datagram's total length: the sum of its segments.
func (p *Packet) Len() int {
	n := 0
	for i := 0; i < int(p.NSegs) && i < MaxSegments; i++ {
		n += len(p.Segs[i])
	}
	return n
}

// SetData makes the packet a single segment holding b.
func (p *Packet) SetData(b []byte) {
	p.Segs[0] = b
	p.NSegs = 1
}

// Link moves UDP datagrams between this host and peers. It is what the transport engine runs
// on: the AF_XDP link in package xdp in production, transport/simlink in tests and
// benchmarks. The engine cannot tell them apart.
//
// One goroutine, the engine that owns the link, calls Receive, Release, Send, TxDone and
// Wait; they are not safe for concurrent use. Wake, Stats and Close may be called from any
// goroutine. No method allocates in steady state.
type Link interface {
	// Receive fills pkts[:n] with datagrams that have arrived and returns n. It never
	// blocks: with nothing pending it returns 0. The packets' segments stay valid, and
	// their buffers belong to the caller, until they are passed to Release.
	Receive(pkts []Packet) (n int, err error)

	// Release gives the buffers of received packets back to the link. Every packet that
	// Receive returned must be released exactly once.
	Release(pkts []Packet)

	// Send transmits pkts[:n] and returns n. It returns n < len(pkts) with a nil error when
	// the link is out of buffers or ring space for now (call again after TxDone or Wait), and
	// a non-nil error for the first packet it cannot send at all (ErrTooLarge, an
	// unreachable peer, a closed link); packets before it were sent.
	Send(pkts []Packet) (n int, err error)

	// TxDone writes the cookies of zero-copy packets whose transmission finished into dst
	// and returns how many it wrote; the bytes they referenced may be changed again.
	TxDone(dst []uint64) int

	// Wait blocks until a datagram may be available to Receive, transmit space may have been
	// freed, Wake is called, or timeout passes (a timeout <= 0 polls once). It returns
	// ErrClosed after Close.
	Wait(timeout time.Duration) error

	// Wake makes a Wait in progress, or the next one, return at once (a doorbell for
	// callers that post work to a sleeping engine).
	Wake()

	// MaxPayload is the largest datagram, in bytes, that Send accepts and Receive returns:
	// the path MTU less the IP and UDP headers.
	MaxPayload() int

	// LocalAddr is the address and UDP port the link receives on.
	LocalAddr() netip.AddrPort

	// Stats returns the link's counters.
	Stats() Stats

	// Close releases everything the link holds. It is idempotent.
	Close() error
}

// PeerResolver is implemented by links that must learn how to reach a peer before they can
// send to it (the AF_XDP link resolves the next hop's Ethernet address). Such a link never
// makes Send wait for that: it holds or drops datagrams to a peer it cannot reach yet.
// ResolvePeer lets a caller that is about to talk to a new peer (a connect) find out first.
type PeerResolver interface {
	// ResolvePeer returns nil once the link can send to peer, at once if it already can,
	// or an error saying why it cannot: one matching syscall.EHOSTUNREACH (errors.Is)
	// when nobody answers for the peer, syscall.ENETUNREACH when there is no way there,
	// ctx's error when ctx ended first. It blocks its caller, never the engine, and is
	// safe from any goroutine.
	ResolvePeer(ctx context.Context, peer netip.Addr) error
}

// Watcher is implemented by links whose wait can run beside the engine: Watch sleeps like
// Wait (until a datagram may have arrived, Wake, or timeout) but touches nothing the engine
// goroutine owns, so a goroutine that does not poll the engine may watch the link for it
// while another one polls (package ndk's inline progress does). It does not transmit or
// reclaim what Wait would: the poller does that. Safe from any goroutine; ErrClosed after
// Close.
type Watcher interface {
	Watch(timeout time.Duration) error
}

// Stats are a link's cumulative counters.
type Stats struct {
	RxPackets, RxBytes uint64 // datagrams returned by Receive and their bytes
	TxPackets, TxBytes uint64 // datagrams Send put on the wire (a held one when it left the hold) and their bytes
	RxDropped          uint64 // datagrams the link dropped before Receive (malformed, no buffer, kernel drops)
	TxDropped          uint64 // datagrams accepted by Send that the link or kernel discarded (TxUnresolved and TxHoldOverflow included)
	TxErrors           uint64 // hard transmit errors (interface down); the datagrams stay queued
	TxZeroCopy         uint64 // segments transmitted by reference instead of copied
	Kicks              uint64 // system calls made to make the kernel transmit or refill, or (busy polling) to poll the device on an empty RX ring
	TxHeld             uint64 // datagrams Send held while their peer was being resolved (PeerResolver links)
	TxUnresolved       uint64 // datagrams dropped because their peer could not be resolved
	TxHoldOverflow     uint64 // held datagrams dropped to make room for newer ones
	RxStamped          uint64 // datagrams Receive returned that carried their arrival time at the interface
	RxWaitNanos        uint64 // how long they waited between arrival and Receive, in total, ns: RxWaitNanos/RxStamped is the mean wait
}

var (
	// ErrClosed is returned by a Link's methods after Close.
	ErrClosed = errors.New("link closed")
	// ErrTooLarge is returned by Send for a datagram longer than MaxPayload or with more
	// than MaxSegments segments.
	ErrTooLarge = errors.New("datagram too large for link")
)
