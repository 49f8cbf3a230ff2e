package nexthop

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/fakeresolver"
	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/xdp/frame"

	"github.com/xdpndk/xdpndk/transport/link"
)

// Unit tests of the next-hop table, its worker and the hold area, with an injected resolve
// function instead of the kernel: no privileges, no netlink.

// testPort is the UDP port of the neighbour configurations of the tests, package xdp's
// test port.
const testPort = 4793

var (
	testSrcMAC = [6]byte{0x02, 0, 0, 0, 0, 0x01}
	macOne     = [6]byte{0x02, 0, 0, 0, 0, 0xA1}
	macTwo     = [6]byte{0x02, 0, 0, 0, 0, 0xB2}
)

// macFor is a fakeresolver.Answer answering a MAC derived from ip.
func macFor(ip netip.Addr, _ int) fakeresolver.Answer {
	a := ip.As4()
	return fakeresolver.Answer{MAC: [6]byte{0x02, 0x10, a[0], a[1], a[2], a[3]}}
}

func peerN(n int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18, byte(1 + n/250), byte(1 + n%250)})
}

// testNeighConfig returns a worker configuration with long timers that tests shorten.
func testNeighConfig() neighConfig {
	return neighConfig{
		srcMAC: testSrcMAC, src: netip.MustParseAddr("198.18.0.1"), port: testPort,
		timeout: 5 * time.Second, negativeTTL: time.Hour, refresh: time.Hour, idle: time.Hour, maxResolving: 64,
	}
}

// testWorker is a running worker with a fake resolver.
type testWorker struct {
	*neighWorker
	r     *fakeresolver.Resolver
	wakes atomic.Int64
}

func startWorker(t *testing.T, nc neighConfig, maxEntries int, r *fakeresolver.Resolver) *testWorker {
	t.Helper()
	tw := &testWorker{r: r}
	tw.neighWorker = newNeighWorker(newNeighTable(maxEntries), nc, funcBackend{fn: r.Resolve}, func() { tw.wakes.Add(1) })
	go tw.run()
	t.Cleanup(func() { tw.stop(true) })
	return tw
}

// state returns the table's state of ip (0 without an entry).
func (w *testWorker) state(ip netip.Addr) NeighbourState {
	info, ok := w.t.info(ip)
	if !ok {
		return 0
	}
	return info.State
}

// resolveNow asks for ip and waits until the worker finished it.
func (w *testWorker) resolveNow(t *testing.T, ip netip.Addr) NeighbourInfo {
	t.Helper()
	w.ask(ip)
	testbed.WaitFor(t, fmt.Sprintf("%v resolved or failed", ip), func() bool {
		s := w.state(ip)
		return s == NeighbourResolved || s == NeighbourFailed
	})
	info, _ := w.t.info(ip)
	return info
}

// TestNeighResolveAsync checks that a request returns at once while the fakeresolver.Answer blocks,
// that the entry is pending meanwhile, and that releasing it publishes a resolved entry
// with a working header template, bumps the generation and rings the doorbells.
func TestNeighResolveAsync(t *testing.T) {
	r := fakeresolver.New()
	w := startWorker(t, testNeighConfig(), 64, r)
	ip := netip.MustParseAddr("198.18.0.2")
	r.Gate(ip)
	w.ask(ip) // never waits: the fakeresolver.Answer blocks on the worker's side
	testbed.WaitFor(t, "pending entry", func() bool { return w.state(ip) == NeighbourPending })
	st := w.t.snapshotStats(int(w.t.nResolving.Load()))
	if st.Pending != 1 || st.Resolving != 1 || st.Entries != 1 || st.Requests != 1 {
		t.Fatalf("while resolving: %+v", st)
	}
	gen := w.t.gen.Load()
	w.ask(ip) // a second request for a peer in progress changes nothing
	r.Release(ip, fakeresolver.Answer{MAC: macOne})
	testbed.WaitFor(t, "resolved entry", func() bool { return w.state(ip) == NeighbourResolved })
	if w.t.gen.Load() == gen || w.wakes.Load() == 0 {
		t.Fatalf("fakeresolver.Answer did not bump the generation (%d -> %d) or ring (%d)", gen, w.t.gen.Load(), w.wakes.Load())
	}
	if n := r.Calls(ip); n != 1 {
		t.Fatalf("resolve called %d times, want 1", n)
	}
	st = w.t.snapshotStats(int(w.t.nResolving.Load()))
	if st.Resolved != 1 || st.Pending != 0 || st.Resolving != 0 || st.Resolutions != 1 {
		t.Fatalf("after fakeresolver.Answer: %+v", st)
	}
	// The template carries the next hop's MAC; the port is written per datagram.
	s := w.t.lookup(ip).snap.Load()
	var buf [frame.MaxHeaderLen]byte
	var sum frame.Checksum
	if _, err := s.encap.PutTo(buf[:], 10, &sum, 0, 5555); err != nil {
		t.Fatal(err)
	}
	if [6]byte(buf[0:6]) != macOne || [6]byte(buf[6:12]) != testSrcMAC || buf[36] != 5555>>8 || buf[37] != 5555&0xFF {
		t.Fatalf("header % x: wrong MACs or destination port", buf[:42])
	}
}

// TestNeighNegativeCache checks that a failed fakeresolver.Answer is cached for the negative TTL
// (requests during it do not resolve again, ResolvePeer fails at once with the error),
// and that the next request after it expires resolves again.
func TestNeighNegativeCache(t *testing.T) {
	r := fakeresolver.New()
	r.Auto = func(ip netip.Addr, _ int) fakeresolver.Answer {
		return fakeresolver.Answer{Err: fmt.Errorf("nobody answers for %v: %w", ip, ErrNextHopUnresolved)}
	}
	nc := testNeighConfig()
	nc.negativeTTL = 300 * time.Millisecond
	w := startWorker(t, nc, 64, r)
	ip := netip.MustParseAddr("198.18.0.200")
	info := w.resolveNow(t, ip)
	if info.State != NeighbourFailed || !errors.Is(info.Err, ErrNextHopUnresolved) || !errors.Is(info.Err, syscall.EHOSTUNREACH) {
		t.Fatalf("entry %+v, want failed with ErrNextHopUnresolved (EHOSTUNREACH)", info)
	}
	for range 20 {
		w.ask(ip)
	}
	err := w.resolvePeer(context.Background(), ip)
	if !errors.Is(err, ErrNextHopUnresolved) {
		t.Fatalf("ResolvePeer of a failed peer: %v", err)
	}
	if n := r.Calls(ip); n != 1 {
		t.Fatalf("resolve called %d times during the negative TTL, want 1", n)
	}
	testbed.WaitFor(t, "negative entry to expire", func() bool { return w.state(ip) == 0 })
	if st := w.t.snapshotStats(0); st.Expired != 1 || st.Failures != 1 || st.Failed != 0 || st.Entries != 0 {
		t.Fatalf("after expiry: %+v", st)
	}
	w.resolveNow(t, ip)
	if n := r.Calls(ip); n != 2 {
		t.Fatalf("resolve called %d times after expiry, want 2", n)
	}
}

// TestNeighDeadline checks that a fakeresolver.Answer that never answers fails at the timeout with
// ErrNextHopUnresolved (not a context error, which would read as the caller's).
func TestNeighDeadline(t *testing.T) {
	r := fakeresolver.New()
	nc := testNeighConfig()
	nc.timeout = 200 * time.Millisecond
	w := startWorker(t, nc, 64, r)
	ip := netip.MustParseAddr("198.18.0.201")
	r.Gate(ip) // never released
	info := w.resolveNow(t, ip)
	if info.State != NeighbourFailed || !errors.Is(info.Err, ErrNextHopUnresolved) || errors.Is(info.Err, context.DeadlineExceeded) {
		t.Fatalf("entry %+v, want failed with ErrNextHopUnresolved only", info)
	}
}

// TestNeighResolvingBound checks the bound on resolutions in progress: requests beyond it
// are dropped and counted, ResolvePeer is not bound by it, and a dropped peer is resolved
// when asked again later.
func TestNeighResolvingBound(t *testing.T) {
	r := fakeresolver.New()
	r.Auto = macFor
	nc := testNeighConfig()
	nc.maxResolving = 2
	w := startWorker(t, nc, 64, r)
	for i := range 5 {
		r.Gate(peerN(i))
	}
	for i := range 5 {
		w.ask(peerN(i))
	}
	testbed.WaitFor(t, "requests handled", func() bool {
		st := w.t.snapshotStats(int(w.t.nResolving.Load()))
		return st.Requests+st.RequestsDropped == 5
	})
	st := w.t.snapshotStats(int(w.t.nResolving.Load()))
	if st.Resolving != 2 || st.Requests != 2 || st.RequestsDropped != 3 || st.Entries != 2 {
		t.Fatalf("5 requests with a bound of 2: %+v", st)
	}
	// ResolvePeer waits for its answer: it is never dropped.
	sync := peerN(10)
	done := make(chan error, 1)
	go func() { done <- w.resolvePeer(context.Background(), sync) }()
	if err := <-done; err != nil {
		t.Fatalf("ResolvePeer beyond the bound: %v", err)
	}
	for i := range 2 {
		r.Release(peerN(i), macFor(peerN(i), 1))
	}
	testbed.WaitFor(t, "first two resolved", func() bool {
		return w.state(peerN(0)) == NeighbourResolved && w.state(peerN(1)) == NeighbourResolved
	})
	// A dropped peer asks again with its next datagram.
	if w.state(peerN(3)) != 0 {
		t.Fatalf("dropped request left an entry")
	}
	r.Release(peerN(3), macFor(peerN(3), 1))
	if info := w.resolveNow(t, peerN(3)); info.State != NeighbourResolved {
		t.Fatalf("peer asked again: %+v", info)
	}
}

// TestNeighTableBound checks that the table never holds more than its bound, evicting to
// make room.
func TestNeighTableBound(t *testing.T) {
	r := fakeresolver.New()
	r.Auto = macFor
	w := startWorker(t, testNeighConfig(), 16, r)
	for i := range 40 {
		w.resolveNow(t, peerN(i))
		if st := w.t.snapshotStats(0); st.Entries > 16 {
			t.Fatalf("after %d peers: %d entries, bound 16", i+1, st.Entries)
		}
	}
	if st := w.t.snapshotStats(0); st.Entries != 16 || st.Evictions != 24 || st.Resolved != 16 {
		t.Fatalf("after 40 peers in a table of 16: %+v", st)
	}
}

// TestNeighEvictionPolicy checks the order of eviction: a failed entry first, then the
// least recently used.
func TestNeighEvictionPolicy(t *testing.T) {
	r := fakeresolver.New()
	bad := peerN(7)
	r.Auto = func(ip netip.Addr, call int) fakeresolver.Answer {
		if ip == bad {
			return fakeresolver.Answer{Err: ErrNextHopUnresolved}
		}
		return macFor(ip, call)
	}
	w := startWorker(t, testNeighConfig(), 16, r)
	for i := range 16 {
		w.resolveNow(t, peerN(i))
	}
	if w.state(bad) != NeighbourFailed {
		t.Fatal("setup: the bad peer did not fail")
	}
	w.resolveNow(t, peerN(100))
	if w.state(bad) != 0 {
		t.Fatal("a new peer did not evict the failed entry")
	}
	for i := range 16 {
		if i != 7 && w.state(peerN(i)) != NeighbourResolved {
			t.Fatalf("peer %d evicted while a failed entry existed", i)
		}
	}
	// All resolved now: the least recently used goes. Let the clock move, then use every
	// peer but one.
	start := w.t.clock.Load()
	testbed.WaitFor(t, "table clock to move", func() bool { return w.t.clock.Load() > start })
	lru := peerN(3)
	for i := range 16 {
		if p := peerN(i); i != 7 && p != lru {
			w.t.touch(w.t.lookup(p))
		}
	}
	w.t.touch(w.t.lookup(peerN(100)))
	w.resolveNow(t, peerN(101))
	if w.state(lru) != 0 {
		t.Fatal("the least recently used entry was not the one evicted")
	}
	if st := w.t.snapshotStats(0); st.Entries != 16 || st.Evictions != 2 {
		t.Fatalf("after two evictions: %+v", st)
	}
}

// TestNeighRefresh checks the re-validation of an entry in use: the old next hop stays in
// use while it runs (never pending), a new MAC replaces it, a failure to ask keeps it, and
// a definite failure fails it.
func TestNeighRefresh(t *testing.T) {
	r := fakeresolver.New()
	var answer atomic.Value
	answer.Store(fakeresolver.Answer{MAC: macOne})
	r.Auto = func(netip.Addr, int) fakeresolver.Answer { return answer.Load().(fakeresolver.Answer) }
	nc := testNeighConfig()
	nc.refresh = 150 * time.Millisecond
	w := startWorker(t, nc, 64, r)
	ip := netip.MustParseAddr("198.18.0.2")
	if info := w.resolveNow(t, ip); info.MAC != macOne {
		t.Fatalf("first fakeresolver.Answer: %+v", info)
	}
	e := w.t.lookup(ip)
	// keepUsing touches the entry like traffic would until cond holds, checking that it
	// stays resolved throughout.
	keepUsing := func(what string, cond func(*Snap) bool) {
		t.Helper()
		testbed.WaitFor(t, what, func() bool {
			w.t.touch(e)
			s := e.snap.Load()
			if s.state != NeighbourResolved && !cond(s) {
				t.Fatalf("entry left resolved during re-validation: %v", s.state)
			}
			return cond(s)
		})
	}
	gen := w.t.gen.Load()
	answer.Store(fakeresolver.Answer{MAC: macTwo})
	keepUsing("new MAC", func(s *Snap) bool { return s.mac == macTwo })
	if w.t.gen.Load() == gen {
		t.Fatal("MAC change did not bump the generation")
	}
	if st := w.t.snapshotStats(0); st.Refreshes == 0 || st.Changes != 1 {
		t.Fatalf("after a changed re-validation: %+v", st)
	}
	// A failure to ask (not an answer about the peer) keeps the next hop.
	answer.Store(fakeresolver.Answer{Err: errors.New("netlink: no buffer space")})
	refreshes := w.t.snapshotStats(0).Refreshes
	keepUsing("a failed re-validation", func(*Snap) bool { return w.t.snapshotStats(0).Refreshes >= refreshes+2 })
	if s := e.snap.Load(); s.state != NeighbourResolved || s.mac != macTwo {
		t.Fatalf("a transient re-validation error changed the entry: %+v", s)
	}
	// A definite answer fails it.
	answer.Store(fakeresolver.Answer{Err: ErrNextHopUnresolved})
	testbed.WaitFor(t, "failed re-validation", func() bool {
		w.t.touch(e)
		return e.snap.Load().state == NeighbourFailed
	})
}

// TestNeighIdleExpiry checks that an entry nobody uses goes away after the idle period
// (twice NeighbourRefresh on a device).
func TestNeighIdleExpiry(t *testing.T) {
	r := fakeresolver.New()
	r.Auto = macFor
	nc := testNeighConfig()
	nc.idle = 200 * time.Millisecond
	w := startWorker(t, nc, 64, r)
	ip := peerN(1)
	w.resolveNow(t, ip)
	testbed.WaitFor(t, "idle entry to expire", func() bool { return w.state(ip) == 0 })
	if st := w.t.snapshotStats(0); st.Expired != 1 || st.Entries != 0 || st.Resolved != 0 {
		t.Fatalf("after idle expiry: %+v", st)
	}
}

// TestNeighResolvePeer checks ResolvePeer's outcomes: resolved, the caller's context
// ending (not a fakeresolver.Answer failure; the fakeresolver.Answer goes on), and at once when resolved.
func TestNeighResolvePeer(t *testing.T) {
	r := fakeresolver.New()
	w := startWorker(t, testNeighConfig(), 64, r)
	ip := peerN(5)
	r.Gate(ip)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := w.resolvePeer(ctx, ip)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.EHOSTUNREACH) {
		t.Fatalf("ResolvePeer with a short context: %v", err)
	}
	if w.state(ip) != NeighbourPending {
		t.Fatal("the fakeresolver.Answer stopped with the caller's context")
	}
	r.Release(ip, fakeresolver.Answer{MAC: macOne})
	if err := w.resolvePeer(context.Background(), ip); err != nil {
		t.Fatal(err)
	}
	if err := w.resolvePeer(context.Background(), ip); err != nil || r.Calls(ip) != 1 {
		t.Fatalf("second ResolvePeer: %v, %d resolutions", err, r.Calls(ip))
	}
}

// eventBackend is funcBackend plus kernel-like neighbour events carried in notes.
type eventBackend struct{ funcBackend }

func (b eventBackend) note(w *neighWorker, n neighNote) {
	if n.usable {
		w.neighbourChanged(n.target, n.mac)
		return
	}
	b.funcBackend.note(w, n)
}

// TestNeighChangedEvent checks that a neighbour event with a new MAC updates a resolved
// entry at once, without waiting for a re-validation.
func TestNeighChangedEvent(t *testing.T) {
	r := fakeresolver.New()
	r.Auto = func(netip.Addr, int) fakeresolver.Answer { return fakeresolver.Answer{MAC: macOne} }
	w := &testWorker{r: r}
	w.neighWorker = newNeighWorker(newNeighTable(64), testNeighConfig(), eventBackend{funcBackend{fn: r.Resolve}}, func() {})
	go w.run()
	t.Cleanup(func() { w.stop(true) })
	ip := peerN(2)
	w.resolveNow(t, ip)
	w.notes <- neighNote{target: ip, usable: true, mac: macTwo}
	testbed.WaitFor(t, "MAC update from the event", func() bool {
		info, _ := w.t.info(ip)
		return info.MAC == macTwo
	})
	if r.Calls(ip) != 1 {
		t.Fatalf("the event caused %d resolutions", r.Calls(ip)-1)
	}
}

// testPacket is a datagram to ip:port of n bytes in two segments, bytes starting at seed.
func testPacket(ip netip.Addr, port uint16, n int, seed byte) *link.Packet {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i)
	}
	p := &link.Packet{Remote: netip.AddrPortFrom(ip, port), LocalPort: 999}
	p.Segs[0], p.Segs[1], p.NSegs = b[:n/2], b[n/2:], 2
	return p
}

// TestHoldAreaBounds checks the hold area's copies and bounds: at most holdPerPeer per
// peer (the oldest of the peer goes), at most holdSlots in all (the oldest goes).
func TestHoldAreaBounds(t *testing.T) {
	h := newHoldArea(100)
	a := peerN(1)
	for i := range holdPerPeer {
		if h.add(testPacket(a, 7, 50, byte(i)), int64(i)) {
			t.Fatalf("datagram %d dropped another below the per-peer bound", i)
		}
	}
	if !h.add(testPacket(a, 7, 50, 200), 10) {
		t.Fatal("datagram over the per-peer bound dropped nothing")
	}
	if h.n != holdPerPeer || h.data(0)[0] != 1 || h.data(holdPerPeer - 1)[0] != 200 {
		t.Fatalf("after per-peer overflow: %d held, first starts %d, last %d", h.n, h.data(0)[0], h.data(h.n - 1)[0])
	}
	d := h.q[0]
	if d.port != 7 || d.srcPort != 999 || d.n != 50 || d.ip != a {
		t.Fatalf("held datagram %+v", d)
	}
	for i := 1; i < 50; i++ {
		if h.data(0)[i] != 1+byte(i) {
			t.Fatalf("byte %d of the held copy is %d", i, h.data(0)[i])
		}
	}
	for i := 2; h.n < holdSlots; i++ {
		if h.add(testPacket(peerN(i), 7, 10, byte(i)), 20) {
			t.Fatal("dropped before the area was full")
		}
	}
	oldest := h.q[0]
	if !h.add(testPacket(peerN(99), 7, 10, 0), 30) {
		t.Fatal("full area dropped nothing")
	}
	if h.n != holdSlots || h.q[0].buf == oldest.buf && h.q[0].ip == oldest.ip && h.q[0].since == oldest.since {
		t.Fatalf("full area did not drop its oldest datagram (%d held)", h.n)
	}
	if !h.holds(peerN(99)) || h.holds(peerN(500)) {
		t.Fatal("holds() wrong")
	}
	for h.n > 0 {
		h.remove(h.n - 1)
	}
	if h.nfree != holdSlots {
		t.Fatalf("%d free buffers after emptying, want %d", h.nfree, holdSlots)
	}
}

// fakeSink is a holdSink over a map of states, recording what it sends.
type fakeSink struct {
	snaps  map[netip.Addr]*Snap
	room   int // datagrams it can send before blocking
	sent   []byte
	asked  []netip.Addr
	broken netip.Addr // sending to this peer fails outright
}

func (s *fakeSink) Lookup(ip netip.Addr) *Snap { return s.snaps[ip] }
func (s *fakeSink) askAgain(ip netip.Addr)     { s.asked = append(s.asked, ip) }
func (s *fakeSink) sendHeld(h *holdArea, i int, _ *Snap) holdOutcome {
	if h.q[i].ip == s.broken {
		return holdDropped
	}
	if s.room == 0 {
		return holdBlocked
	}
	s.room--
	s.sent = append(s.sent, h.data(i)[0])
	return holdSent
}

// TestHoldService checks a service pass: resolved peers' datagrams go in order until the
// ring is full, failed peers' are dropped, peers without an entry are asked again (once
// each) on a recheck and dropped when too old.
func TestHoldService(t *testing.T) {
	h := newHoldArea(16)
	ok, failed, none, broken := peerN(1), peerN(2), peerN(3), peerN(4)
	for i, ip := range []netip.Addr{ok, failed, none, ok, none, broken, ok} {
		h.add(testPacket(ip, 7, 4, byte(i)), 100)
	}
	s := &fakeSink{snaps: map[netip.Addr]*Snap{
		ok: {state: NeighbourResolved}, failed: {state: NeighbourFailed}, broken: {state: NeighbourResolved},
	}, room: 2, broken: broken}
	r := h.service(s, 150, time.Second, false)
	if string(s.sent) != "\x00\x03" || r.sent != 2 || r.unresolved != 1 || !r.blocked {
		t.Fatalf("first pass sent %v (%+v)", s.sent, r)
	}
	// The broken peer's datagram was dropped; the pass blocked at the third datagram to
	// ok, which stays, with the two whose peer has no entry.
	if h.n != 3 || h.q[0].ip != none || h.q[1].ip != none || h.q[2].ip != ok {
		t.Fatalf("after a blocked pass %d held", h.n)
	}
	if len(s.asked) != 0 {
		t.Fatal("asked again without a recheck")
	}
	s.room = 10
	r = h.service(s, 150, time.Second, true)
	if string(s.sent) != "\x00\x03\x06" || len(s.asked) != 1 || s.asked[0] != none || r.sent != 1 || r.blocked {
		t.Fatalf("second pass: sent %v asked %v (%+v)", s.sent, s.asked, r)
	}
	if h.n != 2 || h.q[0].ip != none || h.q[1].ip != none {
		t.Fatalf("after the second pass %d held", h.n)
	}
	r = h.service(s, 100+int64(time.Second)+1, time.Second, true)
	if r.unresolved != 2 || h.n != 0 {
		t.Fatalf("aged datagrams not dropped: %+v, %d held", r, h.n)
	}
}
