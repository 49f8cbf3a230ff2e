package simlink

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"
)

// Every datagram arrives exactly once, byte for byte, in the order sent, whatever the
// segmentation on send, batch size and length.
func TestDeliversExactlyOnceInOrder(t *testing.T) {
	for _, split := range []int{0, 100, SplitRandom} {
		clk := NewManualClock(0)
		a, b := Pair(Config{Clock: clk, SplitRx: split})
		rng := rand.New(rand.NewPCG(1, 2))
		const total = 3000
		var sent [][]byte
		pkts := make([]link.Packet, 8)
		for seq := 0; seq < total; {
			batch := 1 + rng.IntN(len(pkts))
			batch = min(batch, total-seq)
			for i := range pkts[:batch] {
				data := payload(uint64(seq+i), 8+rng.IntN(a.MaxPayload()-7))
				sent = append(sent, data)
				p := &pkts[i]
				*p = link.Packet{Remote: b.LocalAddr()}
				// Gather from 1..4 segments, some of them empty.
				nseg := 1 + rng.IntN(link.MaxSegments)
				rest := data
				for s := 0; s < nseg-1; s++ {
					k := rng.IntN(len(rest) + 1)
					p.Segs[s], rest = rest[:k], rest[k:]
				}
				p.Segs[nseg-1] = rest
				p.NSegs = uint8(nseg)
			}
			if n, err := a.Send(pkts[:batch]); n != batch || err != nil {
				t.Fatalf("send batch of %d: %d, %v", batch, n, err)
			}
			seq += batch
			if rng.IntN(4) == 0 {
				clk.Advance(time.Microsecond)
			}
		}
		rx := recvAll(t, b)
		if len(rx) != total {
			t.Fatalf("split %d: received %d datagrams, want %d", split, len(rx), total)
		}
		for i, g := range rx {
			if !bytes.Equal(g.data, sent[i]) {
				t.Fatalf("split %d: datagram %d differs (seq %d)", split, i, g.seq())
			}
			if g.remote != a.LocalAddr() || g.localPort != b.LocalAddr().Port() {
				t.Fatalf("addresses %v→:%d, want %v→:%d", g.remote, g.localPort, a.LocalAddr(), b.LocalAddr().Port())
			}
			wantSegs := 1
			if split == SplitRandom && len(g.data) >= 2 || split > 0 && len(g.data) > split {
				wantSegs = 2
			}
			if g.nsegs != wantSegs {
				t.Fatalf("split %d: %d-byte datagram in %d segments, want %d", split, len(g.data), g.nsegs, wantSegs)
			}
		}
		ls, ps := a.Stats(), a.Network().PathStats(a.LocalAddr(), b.LocalAddr())
		if ls.TxPackets != total || ls.TxDropped != 0 || b.Stats().RxPackets != total || ps.Sent != total || ps.Delivered != total {
			t.Fatalf("split %d: counters link %+v path %+v", split, ls, ps)
		}
		if rs := b.Stats(); rs.RxBytes != ls.TxBytes || ps.SentBytes != ps.DeliveredBytes || ps.SentBytes != ls.TxBytes {
			t.Fatalf("split %d: bytes: rx %d tx %d path %+v", split, rs.RxBytes, ls.TxBytes, ps)
		}
	}
}

func TestSplitRxSegments(t *testing.T) {
	clk := NewManualClock(0)
	a, b := Pair(Config{Clock: clk, SplitRx: 64})
	for _, n := range []int{8, 64, 65, 1472} {
		send(t, a, b.LocalAddr(), payload(uint64(n), n))
	}
	var pkts [8]link.Packet
	k, err := b.Receive(pkts[:])
	if err != nil || k != 4 {
		t.Fatalf("receive: %d, %v", k, err)
	}
	for i, want := range [][]int{{8}, {64}, {64, 1}, {64, 1408}} {
		p := &pkts[i]
		if int(p.NSegs) != len(want) {
			t.Fatalf("datagram %d: %d segments, want %v", i, p.NSegs, want)
		}
		for j, w := range want {
			if len(p.Segs[j]) != w || cap(p.Segs[j]) != w {
				t.Fatalf("datagram %d segment %d: len %d cap %d, want %d", i, j, len(p.Segs[j]), cap(p.Segs[j]), w)
			}
		}
	}
	b.Release(pkts[:k])
}

// Remote is the sender's address with the port it sent from; LocalPort the port sent to.
func TestAddressesAndRouting(t *testing.T) {
	clk := NewManualClock(0)
	n := NewNetwork(Config{Clock: clk})
	h1, _ := n.AddHost(hostAddr(1))
	h2, _ := n.AddHost(hostAddr(2))
	h3, err := n.AddHost(netip.AddrPortFrom(hostAddr(3).Addr(), 9999))
	if err != nil {
		t.Fatal(err)
	}
	var p [2]link.Packet
	p[0] = link.Packet{Remote: h2.LocalAddr(), LocalPort: 50000}
	p[0].SetData(payload(1, 20))
	// An IPv4-mapped IPv6 destination reaches the IPv4 host.
	p[1] = link.Packet{Remote: netip.AddrPortFrom(netip.AddrFrom16(h3.LocalAddr().Addr().As16()), 9999)}
	p[1].SetData(payload(2, 20))
	if k, err := h1.Send(p[:]); k != 2 || err != nil {
		t.Fatalf("send: %d, %v", k, err)
	}
	g2, g3 := recvAll(t, h2), recvAll(t, h3)
	if len(g2) != 1 || g2[0].seq() != 1 || g2[0].remote != netip.AddrPortFrom(h1.LocalAddr().Addr(), 50000) || g2[0].localPort != pairPort {
		t.Fatalf("h2 got %+v", g2)
	}
	if len(g3) != 1 || g3[0].seq() != 2 || g3[0].remote != h1.LocalAddr() || g3[0].localPort != 9999 {
		t.Fatalf("h3 got %+v", g3)
	}
	if got := recvAll(t, h1); len(got) != 0 {
		t.Fatalf("h1 got %d datagrams", len(got))
	}
	// A wrong port is an unknown destination: dropped, counted.
	send(t, h1, netip.AddrPortFrom(h2.LocalAddr().Addr(), 1), payload(3, 20))
	send(t, h1, netip.MustParseAddrPort("198.19.255.254:4793"), payload(4, 20))
	if got := recvAll(t, h2); len(got) != 0 {
		t.Fatalf("datagram to a wrong port arrived")
	}
	if s := n.Stats(); s.DroppedUnknown != 2 || h1.Stats().TxDropped != 2 || h1.Stats().TxPackets != 4 {
		t.Fatalf("unknown destination: network %+v link %+v", s, h1.Stats())
	}
	// A host may send to itself.
	send(t, h1, h1.LocalAddr(), payload(5, 9))
	if got := recvAll(t, h1); len(got) != 1 || got[0].seq() != 5 {
		t.Fatalf("loopback got %+v", got)
	}
}

func TestAddHost(t *testing.T) {
	n := NewNetwork(Config{Clock: NewManualClock(0)})
	for _, bad := range []netip.AddrPort{{}, netip.AddrPortFrom(hostAddr(1).Addr(), 0)} {
		if _, err := n.AddHost(bad); err == nil {
			t.Fatalf("AddHost(%v) succeeded", bad)
		}
	}
	l, err := n.AddHost(hostAddr(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.AddHost(hostAddr(1)); !errors.Is(err, ErrAddressInUse) {
		t.Fatalf("second AddHost: %v, want ErrAddressInUse", err)
	}
	_ = l.Close()
	if _, err := n.AddHost(hostAddr(1)); err != nil {
		t.Fatalf("AddHost after Close of the old link: %v", err)
	}
	_ = n.Close()
	_ = n.Close()
	if _, err := n.AddHost(hostAddr(2)); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("AddHost on a closed network: %v", err)
	}
}

// Released buffers are reused: a long exchange never grows the pool beyond what is in use.
func TestReleaseReusesBuffers(t *testing.T) {
	clk := NewManualClock(0)
	a, b := Pair(Config{Clock: clk, Buffers: 4, SplitRx: SplitRandom})
	n := a.Network()
	var pkts [4]link.Packet
	for round := 0; round < 1000; round++ {
		for i := 0; i < 4; i++ {
			send(t, a, b.LocalAddr(), payload(uint64(round*4+i), 100))
		}
		k, err := b.Receive(pkts[:])
		if err != nil || k != 4 {
			t.Fatalf("round %d: receive %d, %v", round, k, err)
		}
		// The engine may trim or reslice what it got; Release still finds the buffers.
		pkts[0].Segs[0] = pkts[0].Segs[0][1:]
		pkts[1].Segs[0] = pkts[1].Segs[0][len(pkts[1].Segs[0]):]
		pkts[2].Segs[0], pkts[2].Segs[1] = pkts[2].Segs[1], nil
		pkts[2].NSegs = 1
		b.Release(pkts[:k])
		for i := range pkts[:k] {
			if pkts[i].NSegs != 0 || pkts[i].Segs[0] != nil {
				t.Fatalf("Release left segments in packet %d", i)
			}
		}
	}
	n.mu.Lock()
	total, free := len(n.pool.bufs), len(n.pool.free)
	n.mu.Unlock()
	if total != 4 || free != 4 {
		t.Fatalf("pool: %d buffers, %d free; want 4, 4", total, free)
	}
}

// Release ignores what is not a buffer lent to this link: foreign slices, a second
// release, another link's packets.
func TestReleaseIgnoresForeign(t *testing.T) {
	clk := NewManualClock(0)
	a, b := Pair(Config{Clock: clk, Buffers: 2})
	n := a.Network()
	send(t, a, b.LocalAddr(), payload(1, 50))
	var pkts [1]link.Packet
	if k, _ := b.Receive(pkts[:]); k != 1 {
		t.Fatal("nothing received")
	}
	kept := pkts[0]
	a.Release(pkts[:]) // not a's
	var foreign [3]link.Packet
	foreign[0].SetData(make([]byte, 10))
	foreign[1].NSegs = 200
	foreign[2].NSegs = 1
	b.Release(foreign[:])
	n.mu.Lock()
	if len(n.pool.free) != 1 {
		t.Fatalf("after foreign releases %d free buffers, want 1", len(n.pool.free))
	}
	n.mu.Unlock()
	pkts[0] = kept
	b.Release(pkts[:])
	pkts[0] = kept
	b.Release(pkts[:]) // twice: ignored
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.pool.free) != 2 {
		t.Fatalf("%d free buffers, want 2", len(n.pool.free))
	}
}

func TestTooLarge(t *testing.T) {
	a, b, _ := manualPair(0, Impairments{})
	max := a.MaxPayload()
	if max != DefaultMaxPayload {
		t.Fatalf("MaxPayload %d", max)
	}
	pkts := make([]link.Packet, 3)
	for i := range pkts {
		pkts[i].Remote = b.LocalAddr()
	}
	pkts[0].SetData(payload(0, max))
	pkts[1].SetData(payload(1, 8))
	cases := []struct {
		name string
		set  func(p *link.Packet)
	}{
		{"longer than MaxPayload", func(p *link.Packet) { p.SetData(make([]byte, max+1)) }},
		{"longer in segments", func(p *link.Packet) {
			p.Segs[0], p.Segs[1], p.NSegs = make([]byte, max), make([]byte, 1), 2
		}},
		{"empty", func(p *link.Packet) { p.SetData(nil) }},
		{"too many segments", func(p *link.Packet) { p.SetData(make([]byte, 8)); p.NSegs = link.MaxSegments + 1 }},
	}
	for _, c := range cases {
		c.set(&pkts[2])
		n, err := a.Send(pkts)
		if n != 2 || !errors.Is(err, link.ErrTooLarge) {
			t.Fatalf("%s: Send = %d, %v; want 2, ErrTooLarge", c.name, n, err)
		}
		if got := recvAll(t, b); len(got) != 2 || !got[0].intact() || len(got[0].data) != max {
			t.Fatalf("%s: the packets before it did not arrive", c.name)
		}
	}
	if s := a.Network().PathStats(a.LocalAddr(), b.LocalAddr()); s.TooLarge != 4 || s.Sent != 8 {
		t.Fatalf("path stats %+v", s)
	}
	big := NewNetwork(Config{MaxPayload: 9000, Clock: NewManualClock(0)})
	if big.MaxPayload() != 9000 {
		t.Fatalf("MaxPayload %d, want 9000", big.MaxPayload())
	}
}

func TestClose(t *testing.T) {
	a, b, clk := manualPair(0, Impairments{Latency: time.Millisecond})
	n := a.Network()
	send(t, a, b.LocalAddr(), payload(1, 10))
	send(t, a, b.LocalAddr(), payload(2, 10))
	clk.Advance(time.Millisecond)
	var pkts [1]link.Packet
	if k, _ := b.Receive(pkts[:]); k != 1 {
		t.Fatal("nothing received")
	}
	for i := 0; i < 2; i++ {
		if err := b.Close(); err != nil {
			t.Fatalf("Close %d: %v", i, err)
		}
	}
	if _, err := b.Receive(pkts[:]); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Receive after Close: %v", err)
	}
	if _, err := b.Send(pkts[:]); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Send after Close: %v", err)
	}
	if err := b.Wait(time.Second); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
	if b.TxDone(make([]uint64, 4)) != 0 {
		t.Fatal("TxDone after Close reported cookies")
	}
	b.Wake()
	_ = b.Stats()
	// The packet received before Close can still be released.
	b.Release(pkts[:])
	// Datagrams to a closed link are dropped.
	send(t, a, b.LocalAddr(), payload(3, 10))
	s := n.PathStats(a.LocalAddr(), b.LocalAddr())
	if s.DroppedClosed != 2 || s.Delivered != 1 || a.Stats().TxDropped != 1 {
		t.Fatalf("path %+v, sender %+v", s, a.Stats())
	}
	if _, ok := n.NextDelivery(); ok {
		t.Fatal("a closed link still has queued datagrams")
	}
	n.mu.Lock()
	if len(n.pool.free) != len(n.pool.bufs) {
		t.Fatalf("%d of %d buffers free after Close", len(n.pool.free), len(n.pool.bufs))
	}
	n.mu.Unlock()
	// The address can be taken again; the old path's counters carry on.
	b2, err := n.AddHost(b.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	send(t, a, b2.LocalAddr(), payload(4, 10))
	clk.Advance(time.Millisecond)
	if got := recvAll(t, b2); len(got) != 1 || got[0].seq() != 4 {
		t.Fatalf("restarted host got %+v", got)
	}
	if s := n.PathStats(a.LocalAddr(), b.LocalAddr()); s.Sent != 4 || s.Delivered != 2 {
		t.Fatalf("path after restart %+v", s)
	}
}

func TestTxDoneCookies(t *testing.T) {
	clk := NewManualClock(0)
	a, b := Pair(Config{Clock: clk, TxDoneQueue: 4})
	pkts := make([]link.Packet, 6)
	for i := range pkts {
		pkts[i] = link.Packet{Remote: b.LocalAddr(), Cookie: uint64(100 + i)}
		pkts[i].SetData(payload(uint64(i), 16))
		if i != 1 {
			pkts[i].Flags = link.FlagZeroCopy
		}
	}
	// Five zero-copy packets, room for four cookies: Send stops at the fifth.
	n, err := a.Send(pkts)
	if n != 5 || err != nil {
		t.Fatalf("Send = %d, %v; want 5, nil", n, err)
	}
	var done [8]uint64
	if k := a.TxDone(done[:2]); k != 2 || done[0] != 100 || done[1] != 102 {
		t.Fatalf("TxDone = %d %v", k, done[:k])
	}
	if k := a.TxDone(done[:]); k != 2 || done[0] != 103 || done[1] != 104 {
		t.Fatalf("TxDone = %d %v", k, done[:k])
	}
	if n, err := a.Send(pkts[5:]); n != 1 || err != nil {
		t.Fatalf("Send after TxDone = %d, %v", n, err)
	}
	if k := a.TxDone(done[:]); k != 1 || done[0] != 105 {
		t.Fatalf("TxDone = %d %v", k, done[:k])
	}
	if k := a.TxDone(done[:]); k != 0 {
		t.Fatalf("TxDone with nothing pending = %d", k)
	}
	// The bytes were copied at Send: changing them now changes nothing received.
	for i := range pkts {
		clear(pkts[i].Segs[0])
	}
	got := recvAll(t, b)
	if len(got) != 6 {
		t.Fatalf("received %d", len(got))
	}
	for _, g := range got {
		if !g.intact() {
			t.Fatalf("datagram %d changed after Send", g.seq())
		}
	}
}

func TestManualClockDelivery(t *testing.T) {
	const lat = 5 * time.Millisecond
	a, b, clk := manualPair(0, Impairments{Latency: lat})
	clk.Set(1000)
	send(t, a, b.LocalAddr(), payload(1, 10))
	clk.Advance(time.Microsecond)
	send(t, a, b.LocalAddr(), payload(2, 10))
	if at, ok := a.Network().NextDelivery(); !ok || at != 1000+int64(lat) {
		t.Fatalf("NextDelivery = %d, %v; want %d", at, ok, 1000+int64(lat))
	}
	// Wait never blocks on a manual clock.
	start := time.Now()
	if err := b.Wait(time.Hour); err != nil || time.Since(start) > time.Minute {
		t.Fatalf("Wait: %v after %v", err, time.Since(start))
	}
	clk.Set(1000 + int64(lat) - 1)
	if got := recvAll(t, b); len(got) != 0 {
		t.Fatalf("received %d datagrams 1 ns early", len(got))
	}
	clk.Set(1000 + int64(lat))
	if got := recvAll(t, b); len(got) != 1 || got[0].seq() != 1 {
		t.Fatalf("at latency got %+v", got)
	}
	clk.Advance(time.Microsecond)
	if got := recvAll(t, b); len(got) != 1 || got[0].seq() != 2 {
		t.Fatalf("second got %+v", got)
	}
	if _, ok := a.Network().NextDelivery(); ok {
		t.Fatal("NextDelivery with nothing queued")
	}
}

func TestManualClock(t *testing.T) {
	var c ManualClock
	if c.Now() != 0 {
		t.Fatal("zero ManualClock not at 0")
	}
	c.Set(10)
	c.Set(5) // ignored: never backwards
	if c.Advance(-time.Second) != 10 || c.Advance(5) != 15 || c.Now() != 15 {
		t.Fatalf("clock at %d, want 15", c.Now())
	}
	c.Set(maxTime - 1)
	if c.Advance(time.Hour) != maxTime {
		t.Fatal("Advance did not saturate")
	}
	var r RealClock
	if r.Now() < 0 || NewRealClock().Now() < 0 {
		t.Fatal("negative real time")
	}
}

// Wait sleeps until a datagram is due, Wake, Close or the timeout, on a real clock. The
// bounds are loose: timers never fire early, and the upper bounds only catch a hang.
func TestWaitRealClock(t *testing.T) {
	const slack = 5 * time.Second
	a, b := Pair(Config{Default: Impairments{Latency: 30 * time.Millisecond}})

	start := time.Now()
	if err := b.Wait(40 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 40*time.Millisecond || d > slack {
		t.Fatalf("idle Wait(40ms) took %v", d)
	}

	start = time.Now()
	if err := b.Wait(0); err != nil || time.Since(start) > slack {
		t.Fatalf("Wait(0): %v", err)
	}

	// A datagram 30 ms away: Wait sleeps towards it, not to the timeout.
	start = time.Now()
	send(t, a, b.LocalAddr(), payload(1, 10))
	if err := b.Wait(time.Minute); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 30*time.Millisecond || d > slack {
		t.Fatalf("Wait for a datagram due in 30ms took %v", d)
	}
	if got := recvAll(t, b); len(got) != 1 {
		t.Fatalf("after Wait received %d", len(got))
	}

	// A Wait already sleeping towards a later datagram wakes for an earlier one: send one
	// with a long latency, then one with a short latency while b waits.
	if err := a.Network().SetPath(a.LocalAddr(), b.LocalAddr(), Impairments{Latency: time.Hour}); err != nil {
		t.Fatal(err)
	}
	send(t, a, b.LocalAddr(), payload(2, 10))
	done := make(chan error, 1)
	start = time.Now()
	go func() { done <- b.Wait(time.Minute) }()
	time.Sleep(10 * time.Millisecond)
	a.Network().ClearPath(a.LocalAddr(), b.LocalAddr())
	send(t, a, b.LocalAddr(), payload(3, 10))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 30*time.Millisecond || d > slack {
		t.Fatalf("Wait with an earlier datagram queued mid-sleep took %v", d)
	}
	if got := recvAll(t, b); len(got) != 1 || got[0].seq() != 3 {
		t.Fatalf("got %+v", got)
	}

	// Wake from another goroutine ends a long Wait; a Wake before Wait makes it return.
	go func() {
		time.Sleep(20 * time.Millisecond)
		b.Wake()
	}()
	start = time.Now()
	if err := b.Wait(time.Minute); err != nil || time.Since(start) > slack {
		t.Fatalf("Wait woken: %v after %v", err, time.Since(start))
	}
	b.Wake()
	start = time.Now()
	if err := b.Wait(time.Minute); err != nil || time.Since(start) > slack {
		t.Fatalf("Wait after Wake: %v after %v", err, time.Since(start))
	}
	// The Wake was consumed: the next Wait sleeps its timeout.
	start = time.Now()
	if err := b.Wait(20 * time.Millisecond); err != nil || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("Wait after a consumed Wake: %v after %v", err, time.Since(start))
	}

	// Close ends a Wait with ErrClosed.
	go func() {
		time.Sleep(20 * time.Millisecond)
		_ = b.Close()
	}()
	if err := b.Wait(time.Minute); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Wait across Close: %v", err)
	}
}
