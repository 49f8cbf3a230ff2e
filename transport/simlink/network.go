package simlink

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/xdpndk/xdpndk/transport/link"
)

// ErrAddressInUse is returned by AddHost for an address an open link already has.
var ErrAddressInUse = errors.New("address in use")

// pairPort is the UDP port of the two hosts Pair makes (xdpndk's default port).
const pairPort = 4793

// Network is a set of simulated hosts that exchange datagrams in memory, with seeded,
// deterministic impairments on every path between them. It starts no goroutine: a
// datagram's fate and delivery time are decided when it is sent, and it then waits in the
// destination's queue until the clock reaches its delivery time and Receive takes it.
//
// All methods are safe for concurrent use. One mutex guards the network's state, so links
// used from different goroutines serialize on it (fine for tests and benchmarks, and what
// makes a run reproducible).
type Network struct {
	cfg    Config // normalized; cfg.Default is the initial value of def
	clock  Clock
	sleeps bool // clock is a *RealClock: Wait sleeps in real time

	mu     sync.Mutex
	def    Impairments
	hosts  map[netip.AddrPort]*Link // the latest link at each address, open or closed
	links  []*Link                  // open links
	paths  map[pathKey]*path
	other  PathStats // counters that belong to no path
	pool   *pool
	seq    uint64 // enqueue order, the tie-break for equal delivery times
	gen    uint64 // bumped when hosts change, to invalidate the links' route caches
	nextID int32
	closed bool
}

// NewNetwork returns an empty network configured by cfg (see Config for defaults; values
// out of range are clamped, never refused). It preallocates cfg.Buffers datagram buffers.
func NewNetwork(cfg Config) *Network {
	cfg.normalize()
	n := &Network{
		cfg:   cfg,
		clock: cfg.Clock,
		def:   cfg.Default,
		hosts: make(map[netip.AddrPort]*Link),
		paths: make(map[pathKey]*path),
		pool:  newPool(cfg.MaxPayload, cfg.Buffers),
	}
	if n.clock == nil {
		n.clock = NewRealClock()
	}
	_, n.sleeps = n.clock.(*RealClock)
	return n
}

// Pair returns two links joined by a new network configured by cfg: a at
// 198.18.0.1:4793 and b at 198.18.0.2:4793 (the benchmarking range; nothing touches a real
// network). a.Network() is the network, for changing impairments while they run.
func Pair(cfg Config) (a, b *Link) {
	n := NewNetwork(cfg)
	// Two distinct valid addresses on a new network: AddHost cannot fail.
	a, _ = n.AddHost(netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 0, 1}), pairPort))
	b, _ = n.AddHost(netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 0, 2}), pairPort))
	return a, b
}

// Clock returns the network's clock.
func (n *Network) Clock() Clock { return n.clock }

// MaxPayload returns the largest datagram, in bytes, the network's links accept.
func (n *Network) MaxPayload() int { return n.cfg.MaxPayload }

// canon returns the form of an address the network keys hosts and paths by (IPv4-mapped
// IPv6 addresses as IPv4).
func canon(a netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}

// AddHost adds a host that receives at addr and returns its link. The address needs an IP
// and a non-zero port; it may be that of a closed link (the host "restarts": its paths and
// their counters carry on), but not that of an open one (ErrAddressInUse). After Close it
// returns link.ErrClosed.
func (n *Network) AddHost(addr netip.AddrPort) (*Link, error) {
	if !addr.Addr().IsValid() || addr.Port() == 0 {
		return nil, fmt.Errorf("simlink: add host %v: need an IP address and a non-zero port", addr)
	}
	addr = canon(addr)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, link.ErrClosed
	}
	if old := n.hosts[addr]; old != nil && !old.closed.Load() {
		return nil, fmt.Errorf("simlink: add host %v: %w", addr, ErrAddressInUse)
	}
	n.nextID++
	l := newLink(n, n.nextID, addr)
	n.hosts[addr] = l
	n.links = append(n.links, l)
	n.gen++
	for other := range n.hosts {
		n.pathFor(addr, other)
		n.pathFor(other, addr)
	}
	return l, nil
}

// pathFor returns the path from one address to another, creating it if need be.
func (n *Network) pathFor(from, to netip.AddrPort) *path {
	k := pathKey{from, to}
	p := n.paths[k]
	if p == nil {
		p = newPath(k, n.cfg.Seed)
		n.paths[k] = p
	}
	return p
}

// SetDefault sets the impairments of every path that has none of its own, from the next
// Send on. It refuses (and changes nothing) impairments out of range, with an error
// wrapping ErrInvalid.
func (n *Network) SetDefault(m Impairments) error {
	if err := m.Validate(); err != nil {
		return fmt.Errorf("simlink: set default: %w", err)
	}
	n.mu.Lock()
	n.def = m
	n.mu.Unlock()
	return nil
}

// SetPath gives the path from one host address to another its own impairments, from the
// next Send on; the hosts need not exist yet. Datagrams already sent keep their fate. It
// refuses (and changes nothing) impairments out of range, with an error wrapping
// ErrInvalid.
func (n *Network) SetPath(from, to netip.AddrPort, m Impairments) error {
	if err := m.Validate(); err != nil {
		return fmt.Errorf("simlink: set path %v -> %v: %w", from, to, err)
	}
	n.mu.Lock()
	p := n.pathFor(canon(from), canon(to))
	p.own, p.hasOwn = m, true
	n.mu.Unlock()
	return nil
}

// ClearPath makes the path from one address to another follow the network default again.
func (n *Network) ClearPath(from, to netip.AddrPort) {
	n.mu.Lock()
	if p := n.paths[pathKey{canon(from), canon(to)}]; p != nil {
		p.own, p.hasOwn = Impairments{}, false
	}
	n.mu.Unlock()
}

// Impairments returns what the path from one address to another applies now: its own
// impairments or the network default.
func (n *Network) Impairments(from, to netip.AddrPort) Impairments {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p := n.paths[pathKey{canon(from), canon(to)}]; p != nil {
		return *p.impairments(&n.def)
	}
	return n.def
}

// Partition cuts both directions between hosts a and b until Heal: every datagram sent
// between them is dropped (PathStats.DroppedPartition), and so is every one still in flight
// between them (sent, not yet due at the receiver's clock). Datagrams already due stay
// receivable: they had arrived. The hosts need not exist yet.
func (n *Network) Partition(a, b netip.AddrPort) {
	a, b = canon(a), canon(b)
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.clock.Now()
	for _, k := range [...]pathKey{{a, b}, {b, a}} {
		p := n.pathFor(k.from, k.to)
		p.partitioned = true
		h := n.hosts[k.to]
		if h == nil {
			continue
		}
		for _, dst := range h.queuesOf() {
			if dst.closed.Load() {
				continue
			}
			dst.q.filter(func(e *entry) bool {
				if e.path != p || e.at <= now {
					return false
				}
				p.stats.DroppedPartition++
				n.pool.put(e.buf)
				return true
			})
		}
	}
}

// Heal ends a partition between hosts a and b (both directions).
func (n *Network) Heal(a, b netip.AddrPort) {
	a, b = canon(a), canon(b)
	n.mu.Lock()
	for _, k := range [...]pathKey{{a, b}, {b, a}} {
		if p := n.paths[k]; p != nil {
			p.partitioned = false
		}
	}
	n.mu.Unlock()
}

// HealAll ends every partition.
func (n *Network) HealAll() {
	n.mu.Lock()
	for _, p := range n.paths {
		p.partitioned = false
	}
	n.mu.Unlock()
}

// NextDelivery returns the earliest delivery time of any datagram queued at an open host,
// in the clock's nanoseconds, and false if there is none. The time may be at or before
// Now when a datagram is waiting to be received. A virtual-time test moves its ManualClock
// there when its engines have nothing else to do.
func (n *Network) NextDelivery() (int64, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	t, ok := int64(0), false
	for _, l := range n.links {
		if l.q.len() > 0 && (!ok || l.q.head().at < t) {
			t, ok = l.q.head().at, true
		}
	}
	return t, ok
}

// Poller is one party a virtual-time test steps, a transport engine for instance: Poll does
// what is due at now and returns when it next needs to run (0: nothing due) and whether it
// did anything.
type Poller interface {
	Poll(now int64) (next int64, busy bool)
}

// PollAll polls each of ps once at now, in order: the round of a virtual-time loop. If any
// of them did anything it returns busy and next 0 (poll again before moving the clock);
// otherwise next is the earliest thing due, a poller's time after now or the network's
// next delivery (at or before now when a datagram is waiting), and 0 when nothing at all
// is scheduled. It does not allocate.
func (n *Network) PollAll(now int64, ps ...Poller) (next int64, busy bool) {
	for _, p := range ps {
		t, b := p.Poll(now)
		busy = busy || b
		if t > now && (next == 0 || t < next) {
			next = t
		}
	}
	if busy {
		return 0, true
	}
	if d, ok := n.NextDelivery(); ok && (next == 0 || d < next) {
		next = d
	}
	return next, false
}

// PathStats returns the counters of the path from one host address to another (zero if
// the network has no such path).
func (n *Network) PathStats(from, to netip.AddrPort) PathStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p := n.paths[pathKey{canon(from), canon(to)}]; p != nil {
		return p.stats
	}
	return PathStats{}
}

// Stats returns the sum of every path's counters plus those that belong to no path
// (DroppedUnknown, and TooLarge for unknown destinations).
func (n *Network) Stats() PathStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.other
	for _, p := range n.paths {
		s.add(&p.stats)
	}
	return s
}

// Close closes every link and makes AddHost fail. It is idempotent.
func (n *Network) Close() error {
	n.mu.Lock()
	n.closed = true
	links := slices.Clone(n.links)
	n.mu.Unlock()
	for _, l := range links {
		_ = l.Close()
	}
	return nil
}
