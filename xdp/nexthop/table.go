package nexthop

import (
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/xdpndk/xdpndk/xdp/frame"
)

// The next-hop table: one per xdp.Device (in a Table), keyed by peer IP address (the UDP port is written per
// datagram, so every port of a peer shares its entry). The device's resolution worker
// (worker.go) is its only writer; the links read it from their engine goroutines
// without ever waiting for the worker:
//
//   - An entry is created by the worker when it starts resolving a peer, and removed
//     (evicted) by the worker only. Its state lives in an immutable snapshot (Snap)
//     that the worker replaces through an atomic pointer, so a link that holds an entry
//     reads its state, MAC and header template with one atomic load, lock-free.
//   - The map from IP to entry is guarded by mu: the worker takes it to insert or remove
//     an entry (never across a system call), a link takes it for reading on a miss of its
//     own small cache (a peer it has not sent to lately), never per packet.
//   - An evicted entry's snapshot becomes evictedSnap, so a link that still caches it looks
//     the peer up again.

// neighEvicted marks the snapshot of an entry no longer in the table.
const neighEvicted NeighbourState = 0xFF

// Snap is one state of an entry. It is never changed once published.
type Snap struct {
	state NeighbourState
	// encap is the header template towards the peer (NeighbourResolved): our MAC, the next
	// hop's MAC, our address and port, the peer's address. Its DstPort is a placeholder:
	// Link.Send writes each datagram's port (Encap.PutTo).
	encap   frame.Encap
	mac     [6]byte
	gateway netip.Addr
	err     error // NeighbourFailed: why
}

var (
	pendingSnap = &Snap{state: NeighbourPending}
	evictedSnap = &Snap{state: neighEvicted}
)

// neighEntry is one peer in the table.
type neighEntry struct {
	ip   netip.Addr
	snap atomic.Pointer[Snap]
	// used is the table clock of the last datagram (or ResolvePeer) to the peer. Links
	// store it only when the clock moved, so a busy peer costs a load per datagram.
	used atomic.Int64

	// The worker's own fields: no other goroutine reads them.
	idx       int        // position in neighTable.all
	fidx      int        // position in neighTable.failed, -1 when not failed
	target    netip.Addr // the neighbour whose MAC the entry carries: the peer or its gateway
	tidx      int        // position in neighWorker.byTarget[target], -1 when not listed
	validated int64      // clock when the next hop was last resolved or re-validated
	expires   int64      // NeighbourFailed: clock when the negative entry ends
	job       *neighJob  // resolution or re-validation in progress
	stale     bool       // the kernel reported the neighbour failed: re-validate at once
}

// neighTable is a device's next-hop table.
type neighTable struct {
	mu      sync.RWMutex
	entries map[netip.Addr]*neighEntry
	// changed is closed and replaced whenever the worker finishes resolutions, so that
	// ResolvePeer callers wake and look again. Guarded by mu.
	changed chan struct{}

	// gen counts the worker's rounds that finished a resolution: a link holding datagrams
	// services its hold when gen moved.
	gen atomic.Uint64
	// clock is the table's coarse time in nanoseconds since the worker started, advanced
	// by the worker at every round, at least every neighTick while resolutions or negative
	// entries exist and every neighIdleTick otherwise. Links read it (never the system
	// clock) to mark entries used and to age held datagrams.
	clock atomic.Int64

	// Worker only (changes of all and failed also happen under mu, with the map's).
	all    []*neighEntry
	failed []*neighEntry
	hand   int // where the next eviction sample starts in all
	max    int

	nPending, nResolved, nFailed atomic.Int64
	nResolving                   atomic.Int64 // the worker's jobs in progress
	stats                        neighCounters
}

// neighCounters are the table's cumulative counters (NeighbourStats).
type neighCounters struct {
	requests, dropped, resolutions, failures, refreshes, changes, evictions, expired, eventsLost atomic.Uint64
}

func newNeighTable(maxEntries int) *neighTable {
	return &neighTable{
		entries: make(map[netip.Addr]*neighEntry, maxEntries),
		changed: make(chan struct{}),
		all:     make([]*neighEntry, 0, maxEntries),
		max:     maxEntries,
	}
}

// lookup returns the entry for ip, or nil. Any goroutine.
func (t *neighTable) lookup(ip netip.Addr) *neighEntry {
	t.mu.RLock()
	e := t.entries[ip]
	t.mu.RUnlock()
	return e
}

// lookupWait returns the entry for ip (or nil) and the channel that the next round of
// finished resolutions closes.
func (t *neighTable) lookupWait(ip netip.Addr) (*neighEntry, <-chan struct{}) {
	t.mu.RLock()
	e, ch := t.entries[ip], t.changed
	t.mu.RUnlock()
	return e, ch
}

// touch marks e used now.
func (t *neighTable) touch(e *neighEntry) {
	if now := t.clock.Load(); e.used.Load() != now {
		e.used.Store(now)
	}
}

// insert adds a pending entry for ip, which must not be in the table, evicting another
// when the table is full (evict reports the victim to the worker first). Worker only.
func (t *neighTable) insert(ip netip.Addr, now int64, evict func(*neighEntry)) *neighEntry {
	if len(t.all) >= t.max {
		if v := t.victim(); v != nil {
			evict(v)
			t.stats.evictions.Add(1)
		}
	}
	e := &neighEntry{ip: ip, idx: len(t.all), fidx: -1, tidx: -1}
	e.snap.Store(pendingSnap)
	e.used.Store(now)
	t.mu.Lock()
	t.entries[ip] = e
	t.all = append(t.all, e)
	t.mu.Unlock()
	t.nPending.Add(1)
	return e
}

// neighEvictSample is how many entries an eviction looks at when no failed entry exists:
// the least recently used of them goes. Sampling keeps an insertion O(1) without a list
// the links would have to update per packet; with 32 samples the victim is, with
// probability above 0.96, among the least recently used tenth of the table.
const neighEvictSample = 32

// victim picks the entry to evict for a new one: a failed entry if any (it only makes
// datagrams drop), else the least recently used of a sample that is not being resolved
// (an idle entry is the least recently used by definition). Worker only.
func (t *neighTable) victim() *neighEntry {
	if n := len(t.failed); n > 0 {
		return t.failed[n-1]
	}
	n := len(t.all)
	if n == 0 {
		return nil
	}
	var best *neighEntry
	var bestUsed int64
	for k := 0; k < min(neighEvictSample, n); k++ {
		e := t.all[(t.hand+k)%n]
		if e.job != nil && !e.job.refresh {
			continue // a first resolution: someone waits for it
		}
		if u := e.used.Load(); best == nil || u < bestUsed {
			best, bestUsed = e, u
		}
	}
	t.hand = (t.hand + neighEvictSample) % n
	if best == nil {
		// The whole sample was being resolved (the table is small): take the oldest
		// request of the table rather than refuse the new peer.
		for _, e := range t.all {
			if u := e.used.Load(); best == nil || u < bestUsed {
				best, bestUsed = e, u
			}
		}
	}
	return best
}

// remove takes e out of the table and publishes evictedSnap. Worker only; the worker has
// ended e's job and dropped it from its own indexes first.
func (t *neighTable) remove(e *neighEntry) {
	t.mu.Lock()
	if t.entries[e.ip] == e {
		delete(t.entries, e.ip)
	}
	last := len(t.all) - 1
	t.all[e.idx] = t.all[last]
	t.all[e.idx].idx = e.idx
	t.all[last] = nil
	t.all = t.all[:last]
	t.mu.Unlock()
	t.setFailed(e, false)
	t.count(e.snap.Load().state, -1)
	e.snap.Store(evictedSnap)
}

// setFailed adds e to, or removes it from, the failed list. Worker only.
func (t *neighTable) setFailed(e *neighEntry, failed bool) {
	switch {
	case failed && e.fidx < 0:
		e.fidx = len(t.failed)
		t.failed = append(t.failed, e)
	case !failed && e.fidx >= 0:
		last := len(t.failed) - 1
		t.failed[e.fidx] = t.failed[last]
		t.failed[e.fidx].fidx = e.fidx
		t.failed[last] = nil
		t.failed = t.failed[:last]
		e.fidx = -1
	}
}

// publish replaces e's snapshot. Worker only.
func (t *neighTable) publish(e *neighEntry, s *Snap) {
	old := e.snap.Load()
	if old.state != s.state {
		t.count(old.state, -1)
		t.count(s.state, 1)
	}
	t.setFailed(e, s.state == NeighbourFailed)
	e.snap.Store(s)
}

// count adjusts the gauge of state by d.
func (t *neighTable) count(state NeighbourState, d int64) {
	switch state {
	case NeighbourPending:
		t.nPending.Add(d)
	case NeighbourResolved:
		t.nResolved.Add(d)
	case NeighbourFailed:
		t.nFailed.Add(d)
	}
}

// broadcast bumps the generation and wakes the ResolvePeer callers. Worker only.
func (t *neighTable) broadcast() {
	t.gen.Add(1)
	t.mu.Lock()
	close(t.changed)
	t.changed = make(chan struct{})
	t.mu.Unlock()
}

// info returns what the table knows about ip.
func (t *neighTable) info(ip netip.Addr) (NeighbourInfo, bool) {
	e := t.lookup(ip)
	if e == nil {
		return NeighbourInfo{}, false
	}
	s := e.snap.Load()
	if s.state == neighEvicted {
		return NeighbourInfo{}, false
	}
	return NeighbourInfo{Peer: ip, State: s.state, MAC: s.mac, Gateway: s.gateway, Err: s.err}, true
}

// snapshotStats returns the table's counters; resolving is the worker's jobs in progress.
func (t *neighTable) snapshotStats(resolving int) NeighbourStats {
	t.mu.RLock()
	n := len(t.entries)
	t.mu.RUnlock()
	c := &t.stats
	return NeighbourStats{
		Entries: n, Pending: int(t.nPending.Load()), Failed: int(t.nFailed.Load()),
		Resolved: int(t.nResolved.Load()), Resolving: resolving,
		Requests: c.requests.Load(), RequestsDropped: c.dropped.Load(), Resolutions: c.resolutions.Load(),
		Failures: c.failures.Load(), Refreshes: c.refreshes.Load(), Changes: c.changes.Load(),
		Evictions: c.evictions.Load(), Expired: c.expired.Load(), EventsLost: c.eventsLost.Load(),
	}
}
