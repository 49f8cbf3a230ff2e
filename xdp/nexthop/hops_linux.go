package nexthop

import (
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/xdpndk/xdpndk/xdp/frame"

	"github.com/xdpndk/xdpndk/transport/link"
)

// Hops is an xdp.Link's view of the device's next-hop table (a Table): the entry of the last peer
// sent to, a bounded cache of the entries of other peers (each read with an atomic load of
// its snapshot), and the hold area of the datagrams whose peer is being resolved. It asks
// the device's worker for resolutions and never waits for one. What it needs from its link
// (transmitting a held datagram) goes through Transmitter. Engine goroutine only, except
// holding.
type Hops struct {
	table  *neighTable
	worker *neighWorker
	local  netip.Addr // the link's address (a peer may not be it)
	link   Transmitter

	lastIP    netip.Addr
	lastEntry *neighEntry
	cache     map[netip.Addr]*neighEntry
	hold      holdArea
	holdGen   uint64        // table generation the hold was last serviced at
	holdRetry bool          // the last service found no room: try again at the next call
	holdCheck int64         // table clock of the next recheck of held datagrams
	holdMax   time.Duration // age at which a held datagram without an entry is dropped
	heldPkt   link.Packet   // scratch for sending a held datagram
	acc       Counters
	// holding is the link's flag, read by the worker's goroutine: set while the hold has
	// datagrams, so that the worker rings the link when it finishes resolutions.
	holding *atomic.Bool
}

// Transmitter is what Hops needs from its link.
type Transmitter interface {
	// Transmit frames datagram p (plen bytes) with header template e and stages it on the
	// TX ring; false: no room now.
	Transmit(p *link.Packet, e *frame.Encap, plen int) (bool, error)
}

// Counters counts what the next hops did with the datagrams of one engine call, added to the
// link's counters once at its end.
type Counters struct {
	Held       uint64 // datagrams put in the hold (their peer is being resolved)
	Unresolved uint64 // datagrams dropped because their peer failed to resolve
	Overflow   uint64 // held datagrams dropped to make room in the hold
	Failed     uint64 // held datagrams the link failed to transmit
}

// linkCacheMax bounds a link's cache of table entries. An engine talks to a few peers at a
// time; a miss costs one read-locked map lookup in the table. When the cache is full it is
// emptied and refilled by the misses that follow, which bounds it without per-packet LRU
// bookkeeping.
const linkCacheMax = 256

// NewHops returns the view of table t for a link with address local that transmits
// through l datagrams of at most maxPayload bytes. The link's flag holding is set while
// the hold has datagrams: t's worker then wakes the link (Config.Wake) when it finishes
// resolutions.
func NewHops(t *Table, local netip.Addr, l Transmitter, maxPayload int, holding *atomic.Bool) Hops {
	return Hops{
		table:   t.table,
		worker:  t.worker,
		local:   local,
		link:    l,
		cache:   make(map[netip.Addr]*neighEntry, linkCacheMax),
		hold:    newHoldArea(maxPayload),
		holdMax: t.worker.cfg.timeout + time.Second,
		holding: holding,
	}
}

// Held returns the number of datagrams in the hold.
func (h *Hops) Held() int { return h.hold.n }

// Holds reports whether the hold has datagrams to ip, which go before any new one.
func (h *Hops) Holds(ip netip.Addr) bool { return h.hold.holds(ip) }

// Counters returns the counts of the datagrams taken since the link last reset them.
func (h *Hops) Counters() *Counters { return &h.acc }

// Resolved reports whether the snapshot has a usable next hop (NeighbourResolved).
func (s *Snap) Resolved() bool { return s.state == NeighbourResolved }

// Encap returns the header template of a resolved snapshot.
func (s *Snap) Encap() *frame.Encap { return &s.encap }

// Lookup returns the next-hop table's state of peer ip, or nil when the table has no
// entry for it. The common case, the peer of the previous datagram, is a comparison and an
// atomic load; other peers a lookup in the link's cache, and on a miss a read-locked lookup
// in the table.
func (h *Hops) Lookup(ip netip.Addr) *Snap {
	e := h.lastEntry
	if e == nil || h.lastIP != ip {
		if e = h.cache[ip]; e == nil {
			if e = h.cacheFromTable(ip); e == nil {
				return nil
			}
		}
		h.lastIP, h.lastEntry = ip, e
	}
	s := e.snap.Load()
	if s.state == neighEvicted {
		// The worker removed the entry (expired, evicted): the peer may have a new one.
		delete(h.cache, ip)
		h.lastEntry = nil
		if e = h.cacheFromTable(ip); e == nil {
			return nil
		}
		if s = e.snap.Load(); s.state == neighEvicted {
			return nil
		}
		h.lastIP, h.lastEntry = ip, e
	}
	h.table.touch(e)
	return s
}

// cacheFromTable looks ip up in the device's table and caches the entry.
func (h *Hops) cacheFromTable(ip netip.Addr) *neighEntry {
	e := h.table.lookup(ip)
	if e == nil {
		return nil
	}
	if len(h.cache) >= linkCacheMax {
		clear(h.cache)
	}
	h.cache[ip] = e
	return e
}

// Take takes datagram p to peer ip whose next hop is not known (s nil: no entry; pending;
// failed): dropped and counted if the peer failed, else held, with a resolution request
// when the table has no entry and the hold had nothing for the peer yet. It fails, taking
// nothing, when ip cannot be a peer.
func (h *Hops) Take(p *link.Packet, ip netip.Addr, s *Snap) error {
	if s != nil && s.state == NeighbourFailed {
		h.acc.Unresolved++
		return nil
	}
	if s == nil {
		if err := CheckPeer(ip, h.local); err != nil {
			return fmt.Errorf("send to %v: %w", p.Remote, err)
		}
		if !h.hold.holds(ip) {
			h.worker.ask(ip)
		}
	}
	if h.hold.add(p, h.table.clock.Load()) {
		h.acc.Overflow++
	}
	h.acc.Held++
	if !h.holding.Load() {
		h.holding.Store(true)
	}
	return nil
}

// Service sends the held datagrams whose peer the worker has resolved and drops those
// whose peer failed, when the table's generation moved since the last pass; every
// HoldRecheck it also repeats lost requests and ages out datagrams without an entry. It
// reports whether it staged datagrams on the ring (the caller then finishes the call's
// transmit).
func (h *Hops) Service() bool {
	t := h.table
	gen, now := t.gen.Load(), t.clock.Load()
	recheck := now >= h.holdCheck
	if gen == h.holdGen && !recheck && !h.holdRetry {
		return false
	}
	h.holdGen = gen
	if recheck {
		h.holdCheck = now + int64(HoldRecheck)
	}
	n := h.hold.n
	r := h.hold.service(h, now, h.holdMax, recheck)
	h.holdRetry = r.blocked
	h.acc.Unresolved += uint64(r.unresolved)
	if h.hold.n == 0 {
		h.holding.Store(false)
	}
	return h.hold.n != n
}

// sendHeld implements holdSink: it transmits held datagram i through the link.
func (h *Hops) sendHeld(a *holdArea, i int, s *Snap) holdOutcome {
	d := &a.q[i]
	p := &h.heldPkt
	*p = link.Packet{Remote: netip.AddrPortFrom(d.ip, d.port), LocalPort: d.srcPort}
	p.SetData(a.data(i))
	ok, err := h.link.Transmit(p, &s.encap, d.n)
	p.Segs[0] = nil
	switch {
	case err != nil:
		h.acc.Failed++
		return holdDropped
	case !ok:
		return holdBlocked
	}
	return holdSent
}

// askAgain implements holdSink.
func (h *Hops) askAgain(ip netip.Addr) { h.worker.ask(ip) }
