package nexthop

import (
	"net/netip"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"
)

// The hold area: where a link keeps datagrams to peers whose next hop is being resolved,
// so that Send never waits for a resolution and never returns short because of one (which
// would stall every other queue pair of the engine behind the new peer). Holding is the
// rare first-contact path, so datagrams are copied into a small arena allocated with the
// link; nothing is allocated per datagram. Engine goroutine only.

// Bounds of a link's hold area.
const (
	// holdSlots is how many datagrams a link holds at most, all peers together. A first
	// contact needs one or two datagrams (a connection request or reply and perhaps its
	// retransmission); sixteen let a handful of new peers be contacted at once while the
	// arena stays at 16 × the link's MaxPayload (24 KiB at MTU 1500, 144 KiB at 9000).
	holdSlots = 16
	// holdPerPeer is how many datagrams one peer may have held; a newer one replaces the
	// oldest (which reliability retransmits anyway), so that one silent peer cannot take
	// the whole area from the others.
	holdPerPeer = 4
	// HoldRecheck is how often held datagrams whose peer has no table entry (their request
	// was dropped) are looked at again without a generation change: then the request is
	// repeated, or the datagram dropped once older than the resolve timeout plus a second.
	// It is measured on the table clock, so with a quiet worker (no resolution in progress)
	// it stretches to neighIdleTick.
	HoldRecheck = 2 * neighTick
)

// heldDgram is one held datagram.
type heldDgram struct {
	ip      netip.Addr
	port    uint16 // the peer's UDP port
	srcPort uint16 // Packet.LocalPort
	n       int    // bytes
	buf     int    // its buffer in the arena
	since   int64  // table clock when it was held
}

// holdArea is a link's held datagrams, oldest first.
type holdArea struct {
	q     [holdSlots]heldDgram // q[:n] in the order they were held
	n     int
	free  [holdSlots]int // free buffers (a stack), free[:nfree]
	nfree int
	arena []byte
	size  int // bytes per buffer
}

func newHoldArea(size int) holdArea {
	h := holdArea{arena: make([]byte, holdSlots*size), size: size, nfree: holdSlots}
	for i := range h.free {
		h.free[i] = i
	}
	return h
}

// holds reports whether a datagram to ip is held.
func (h *holdArea) holds(ip netip.Addr) bool {
	for i := range h.q[:h.n] {
		if h.q[i].ip == ip {
			return true
		}
	}
	return false
}

// data returns held datagram i's bytes.
func (h *holdArea) data(i int) []byte {
	d := &h.q[i]
	off := d.buf * h.size
	return h.arena[off : off+d.n]
}

// add copies p (to ip, at most size bytes) into the area at clock now and reports whether
// it dropped an older datagram to make room: the oldest of the same peer if that peer has
// holdPerPeer held, else the oldest of all when the area is full.
func (h *holdArea) add(p *link.Packet, now int64) (dropped bool) {
	ip := p.Remote.Addr()
	first, count := -1, 0
	for i := range h.q[:h.n] {
		if h.q[i].ip == ip {
			if first < 0 {
				first = i
			}
			count++
		}
	}
	switch {
	case count >= holdPerPeer:
		h.remove(first)
		dropped = true
	case h.n == holdSlots:
		h.remove(0)
		dropped = true
	}
	h.nfree--
	buf := h.free[h.nfree]
	off := buf * h.size
	n := 0
	for j := 0; j < int(p.NSegs) && j < link.MaxSegments; j++ {
		n += copy(h.arena[off+n:off+h.size], p.Segs[j])
	}
	h.q[h.n] = heldDgram{ip: ip, port: p.Remote.Port(), srcPort: p.LocalPort, n: n, buf: buf, since: now}
	h.n++
	return dropped
}

// remove drops held datagram i, keeping the order of the others.
func (h *holdArea) remove(i int) {
	h.free[h.nfree] = h.q[i].buf
	h.nfree++
	copy(h.q[i:h.n], h.q[i+1:h.n])
	h.n--
	h.q[h.n] = heldDgram{}
}

// holdOutcome is what became of a held datagram a holdSink was asked to send.
type holdOutcome int

const (
	holdSent    holdOutcome = iota // transmitted (staged on the TX ring)
	holdBlocked                    // no room now: it and everything after it stay
	holdDropped                    // cannot be sent at all (counted by the sink)
)

// holdSink is what the hold area needs from its link.
type holdSink interface {
	// Lookup returns the table's state of ip, or nil if the table has no entry.
	Lookup(ip netip.Addr) *Snap
	// sendHeld transmits held datagram i of h to a resolved peer.
	sendHeld(h *holdArea, i int, s *Snap) holdOutcome
	// askAgain repeats the resolution request for ip.
	askAgain(ip netip.Addr)
}

// holdResult counts what a service pass did.
type holdResult struct {
	sent, unresolved int
	blocked          bool // it stopped at a datagram that found no room
}

// service goes through the held datagrams, oldest first: those whose peer is resolved are
// sent (in order, stopping at the first that finds no room), those whose peer failed are
// dropped, and, when recheck is set, those whose peer has no entry have their request
// repeated or, once older than maxAge, are dropped.
func (h *holdArea) service(sink holdSink, now int64, maxAge time.Duration, recheck bool) (r holdResult) {
	for i := 0; i < h.n; {
		d := &h.q[i]
		s := sink.Lookup(d.ip)
		switch {
		case s != nil && s.state == NeighbourResolved:
			switch sink.sendHeld(h, i, s) {
			case holdBlocked:
				r.blocked = true
				return r
			case holdSent:
				r.sent++
			}
			h.remove(i)
			continue
		case s != nil && s.state == NeighbourFailed, now-d.since > int64(maxAge):
			h.remove(i)
			r.unresolved++
			continue
		case s == nil && recheck && !h.heldBefore(i, d.ip):
			sink.askAgain(d.ip)
		}
		i++
	}
	return r
}

// heldBefore reports whether a datagram held before i goes to ip.
func (h *holdArea) heldBefore(i int, ip netip.Addr) bool {
	for k := range h.q[:i] {
		if h.q[k].ip == ip {
			return true
		}
	}
	return false
}
