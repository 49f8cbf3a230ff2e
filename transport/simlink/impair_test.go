package simlink

import (
	"errors"
	"math"
	"math/bits"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"
)

// within fails unless got is within k standard deviations of a binomial(n, p) mean.
func within(t *testing.T, what string, got, n int, p, k float64) {
	t.Helper()
	mean := float64(n) * p
	sd := math.Sqrt(float64(n) * p * (1 - p))
	if math.Abs(float64(got)-mean) > k*sd {
		t.Fatalf("%s: %d of %d, want %.0f ± %.0f (%.0fσ)", what, got, n, mean, k*sd, k)
	}
}

// sendSeq sends datagrams 0..n-1 of the given length from a to b, gap apart, and returns
// what b received while it did (each exactly at its delivery time).
func sendSeq(t *testing.T, a, b *Link, clk *ManualClock, n, length int, gap time.Duration) []got {
	t.Helper()
	out := make(map[*Link][]got)
	for i := 0; i < n; i++ {
		send(t, a, b.LocalAddr(), payload(uint64(i), length))
		if gap > 0 {
			runUntil(t, a.Network(), clk, clk.Now()+int64(gap), out, b)
		}
	}
	return out[b]
}

// sendAll is sendSeq followed by receiving everything still in flight.
func sendAll(t *testing.T, a, b *Link, clk *ManualClock, n, length int, gap time.Duration) []got {
	t.Helper()
	got := sendSeq(t, a, b, clk, n, length, gap)
	return append(got, runUntilIdle(t, a.Network(), clk, b)[b]...)
}

func TestRandomLoss(t *testing.T) {
	const n, p = 20000, 0.1
	a, b, clk := manualPair(7, Impairments{Loss: p})
	got := sendAll(t, a, b, clk, n, 64, 1)
	lost := n - len(got)
	within(t, "lost", lost, n, p, 4)
	s := a.Network().PathStats(a.LocalAddr(), b.LocalAddr())
	if s.DroppedLoss != uint64(lost) || s.Dropped() != uint64(lost) || a.Stats().TxDropped != uint64(lost) {
		t.Fatalf("counters %+v, TxDropped %d; lost %d", s, a.Stats().TxDropped, lost)
	}
	// Survivors arrive intact and in order.
	last := -1
	for _, g := range got {
		if !g.intact() || int(g.seq()) <= last {
			t.Fatalf("datagram %d damaged or out of order", g.seq())
		}
		last = int(g.seq())
	}
}

// lossRuns returns the lengths of the runs of consecutive missing sequence numbers in
// 0..n-1, given the received ones in order.
func lossRuns(received []uint64, n int) []int {
	var runs []int
	next, run := uint64(0), 0
	for _, s := range append(received, uint64(n)) {
		if s > next {
			run = int(s - next)
			runs = append(runs, run)
		}
		next = s + 1
	}
	return runs
}

func meanInt(xs []int) float64 {
	sum := 0
	for _, x := range xs {
		sum += x
	}
	return float64(sum) / float64(len(xs))
}

func TestBurstLoss(t *testing.T) {
	const n = 100000
	const p, r = 0.01, 0.25
	a, b, clk := manualPair(11, Impairments{Burst: Burst{GoodToBad: p, BadToGood: r, BadLoss: 1}})
	got := sendAll(t, a, b, clk, n, 16, 1)
	runs := lossRuns(seqs(got), n)
	// Gilbert: time in the bad state is geometric with mean 1/r, and every datagram there is
	// lost, so loss runs average 1/r = 4; the loss rate is p/(p+r).
	if m := meanInt(runs); math.Abs(m-1/r) > 0.1/r {
		t.Fatalf("mean loss run %.2f datagrams, want %.2f ± 10%%", m, 1/r)
	}
	lost := n - len(got)
	if rate, want := float64(lost)/n, p/(p+r); math.Abs(rate-want) > 0.15*want {
		t.Fatalf("burst loss rate %.4f, want %.4f ± 15%%", rate, want)
	}
	if s := a.Network().PathStats(a.LocalAddr(), b.LocalAddr()); s.DroppedBurst != uint64(lost) || s.DroppedLoss != 0 {
		t.Fatalf("counters %+v, lost %d", s, lost)
	}

	// The same loss rate without correlation: runs barely longer than 1.
	a, b, clk = manualPair(11, Impairments{Loss: p / (p + r)})
	got = sendAll(t, a, b, clk, n, 16, 1)
	if m := meanInt(lossRuns(seqs(got), n)); m > 1.1 {
		t.Fatalf("independent loss: mean run %.2f, want about 1.04", m)
	}

	// Off again: the chain returns to the good state and nothing more is lost.
	a, b, clk = manualPair(11, Impairments{Burst: Burst{GoodToBad: 0.5, BadToGood: 0.01, BadLoss: 1}})
	sendSeq(t, a, b, clk, 100, 16, 0)
	if err := a.Network().SetDefault(Impairments{}); err != nil {
		t.Fatal(err)
	}
	sendSeq(t, a, b, clk, 100, 16, 0)
	if s := a.Network().PathStats(a.LocalAddr(), b.LocalAddr()); s.DroppedBurst == 0 || s.DroppedBurst > 100 {
		t.Fatalf("burst then off: %d dropped", s.DroppedBurst)
	}
}

func TestDuplication(t *testing.T) {
	const n, p = 20000, 0.1
	a, b, clk := manualPair(3, Impairments{Duplicate: p})
	got := sendAll(t, a, b, clk, n, 32, 1)
	count := make([]int, n)
	for _, g := range got {
		if !g.intact() {
			t.Fatalf("duplicate of %d damaged", g.seq())
		}
		count[g.seq()]++
	}
	dups := 0
	for s, c := range count {
		if c < 1 || c > 2 {
			t.Fatalf("datagram %d arrived %d times", s, c)
		}
		dups += c - 1
	}
	within(t, "duplicated", dups, n, p, 4)
	if s := a.Network().PathStats(a.LocalAddr(), b.LocalAddr()); s.Duplicated != uint64(dups) || s.Delivered != uint64(n+dups) {
		t.Fatalf("counters %+v, duplicates %d", s, dups)
	}
}

// inversions counts pairs received in the opposite order to their sequence numbers.
func inversions(s []uint64) int {
	inv := 0
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[i] > s[j] {
				inv++
			}
		}
	}
	return inv
}

func TestReorderingByJitter(t *testing.T) {
	const n = 2000
	for _, jitter := range []time.Duration{0, time.Millisecond} {
		a, b, clk := manualPair(5, Impairments{Latency: time.Millisecond, Jitter: jitter})
		got := sendAll(t, a, b, clk, n, 32, 10*time.Microsecond)
		if len(got) != n {
			t.Fatalf("jitter %v: %d of %d arrived", jitter, len(got), n)
		}
		inv := inversions(seqs(got))
		s := a.Network().PathStats(a.LocalAddr(), b.LocalAddr())
		if jitter == 0 && (inv != 0 || s.Reordered != 0) {
			t.Fatalf("no jitter: %d inversions, %d reordered", inv, s.Reordered)
		}
		// Uniform jitter over 100 send gaps: most datagrams overtake or are overtaken.
		if jitter > 0 && (inv < n || s.Reordered < n/2) {
			t.Fatalf("jitter %v: only %d inversions, %d reordered", jitter, inv, s.Reordered)
		}
		for _, g := range got {
			if d := g.at - int64(g.seq())*int64(10*time.Microsecond); d < int64(time.Millisecond) || d > int64(time.Millisecond+jitter) {
				t.Fatalf("datagram %d took %v, want latency + [0, %v]", g.seq(), time.Duration(d), jitter)
			}
		}
	}
}

func TestCorruption(t *testing.T) {
	const n, p, length = 20000, 0.05, 100
	a, b, clk := manualPair(9, Impairments{Corrupt: p})
	got := sendAll(t, a, b, clk, n, length, 1)
	if len(got) != n {
		t.Fatalf("%d of %d arrived", len(got), n)
	}
	corrupted := 0
	var byFlips [4]int
	for i, g := range got {
		// Length and addresses are never touched; the sequence number may be, so compare
		// with what datagram i was.
		if len(g.data) != length || g.remote != a.LocalAddr() || g.localPort != b.LocalAddr().Port() {
			t.Fatalf("datagram %d: length %d from %v to :%d", i, len(g.data), g.remote, g.localPort)
		}
		want := payload(uint64(i), length)
		flips := 0
		for j := range want {
			flips += bits.OnesCount8(want[j] ^ g.data[j])
		}
		if flips > 3 {
			t.Fatalf("datagram %d: %d bits flipped, want at most 3", i, flips)
		}
		byFlips[flips]++
		if flips > 0 {
			corrupted++
		}
	}
	within(t, "corrupted", corrupted, n, p, 4)
	for k := 1; k <= 3; k++ {
		if byFlips[k] == 0 {
			t.Fatalf("no datagram with %d flipped bits: %v", k, byFlips)
		}
	}
	if s := a.Network().PathStats(a.LocalAddr(), b.LocalAddr()); s.Corrupted != uint64(corrupted) {
		t.Fatalf("Corrupted %d, counted %d", s.Corrupted, corrupted)
	}
}

// N bytes through a B bit/s path take N*8/B seconds of virtual time, and back-to-back
// datagrams queue behind each other.
func TestBandwidth(t *testing.T) {
	for _, bw := range []int64{8_000_000, 3_000_000, 1_000_000_007} {
		const n, length = 100, 1000
		const lat = time.Millisecond
		a, b, clk := manualPair(0, Impairments{Bandwidth: bw, Latency: lat})
		sendSeq(t, a, b, clk, n, length, 0) // all at t=0: a fast sender
		got := runUntilIdle(t, a.Network(), clk, b)[b]
		if len(got) != n {
			t.Fatalf("bw %d: %d of %d arrived", bw, len(got), n)
		}
		for i, g := range got {
			// Datagram i finishes serializing when (i+1)*length bytes have gone out.
			want := int64(lat) + int64(uint64(i+1)*length*8*1e9/uint64(bw))
			if g.seq() != uint64(i) || g.at != want {
				t.Fatalf("bw %d: datagram %d (seq %d) at %d ns, want %d", bw, i, g.seq(), g.at, want)
			}
		}
	}
}

func TestQueueTailDrop(t *testing.T) {
	// 8 Mbit/s is one byte per microsecond; the queue holds 10 datagrams of 1000 bytes.
	a, b, clk := manualPair(0, Impairments{Bandwidth: 8_000_000, QueueBytes: 10_000})
	sendSeq(t, a, b, clk, 100, 1000, 0)
	s := a.Network().PathStats(a.LocalAddr(), b.LocalAddr())
	if s.DroppedQueue != 90 || a.Stats().TxDropped != 90 {
		t.Fatalf("burst of 100 into a 10-datagram queue: %+v", s)
	}
	// 5 ms later half the queue has drained: 5 more fit.
	clk.Set(int64(5 * time.Millisecond))
	for i := 100; i < 110; i++ {
		send(t, a, b.LocalAddr(), payload(uint64(i), 1000))
	}
	s = a.Network().PathStats(a.LocalAddr(), b.LocalAddr())
	if s.DroppedQueue != 95 {
		t.Fatalf("after 5 ms: %d tail drops, want 95", s.DroppedQueue)
	}
	got := runUntilIdle(t, a.Network(), clk, b)[b]
	want := []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 100, 101, 102, 103, 104}
	if sq := seqs(got); !slices.Equal(sq, want) {
		t.Fatalf("received %v, want %v", sq, want)
	}
	if last := got[len(got)-1].at; last != int64(15*time.Millisecond) {
		t.Fatalf("last delivery at %v, want 15ms", time.Duration(last))
	}
}

func TestPathMTU(t *testing.T) {
	a, b, clk := manualPair(0, Impairments{MTU: 500})
	send(t, a, b.LocalAddr(), payload(1, 500))
	send(t, a, b.LocalAddr(), payload(2, 501)) // accepted, silently dropped
	got := runUntilIdle(t, a.Network(), clk, b)[b]
	if len(got) != 1 || got[0].seq() != 1 {
		t.Fatalf("got %+v", got)
	}
	if s := a.Network().PathStats(a.LocalAddr(), b.LocalAddr()); s.DroppedMTU != 1 || s.TooLarge != 0 {
		t.Fatalf("counters %+v", s)
	}
}

func TestPartition(t *testing.T) {
	clk := NewManualClock(0)
	n := NewNetwork(Config{Clock: clk, Default: Impairments{Latency: time.Millisecond}})
	a, _ := n.AddHost(hostAddr(1))
	b, _ := n.AddHost(hostAddr(2))
	c, _ := n.AddHost(hostAddr(3))
	send(t, a, b.LocalAddr(), payload(1, 20)) // due at 1ms: arrived before the cut
	clk.Set(int64(500 * time.Microsecond))
	send(t, a, b.LocalAddr(), payload(2, 20)) // in flight at the cut: lost
	clk.Set(int64(time.Millisecond))
	n.Partition(a.LocalAddr(), b.LocalAddr())
	for i := uint64(3); i < 13; i++ {
		send(t, a, b.LocalAddr(), payload(i, 20))
		send(t, b, a.LocalAddr(), payload(i, 20))
		send(t, a, c.LocalAddr(), payload(i, 20)) // unaffected
		clk.Advance(time.Millisecond)
	}
	out := runUntilIdle(t, n, clk, a, b, c)
	if sq := seqs(out[b]); len(sq) != 1 || sq[0] != 1 {
		t.Fatalf("b got %v during the partition, want [1]", sq)
	}
	if len(out[a]) != 0 || len(out[c]) != 10 {
		t.Fatalf("a got %d, c got %d", len(out[a]), len(out[c]))
	}
	if s := n.PathStats(a.LocalAddr(), b.LocalAddr()); s.DroppedPartition != 11 {
		t.Fatalf("a→b %+v", s)
	}
	if s := n.PathStats(b.LocalAddr(), a.LocalAddr()); s.DroppedPartition != 10 {
		t.Fatalf("b→a %+v", s)
	}
	n.Heal(a.LocalAddr(), b.LocalAddr())
	send(t, a, b.LocalAddr(), payload(20, 20))
	send(t, b, a.LocalAddr(), payload(21, 20))
	n.Partition(a.LocalAddr(), c.LocalAddr())
	n.HealAll()
	send(t, a, c.LocalAddr(), payload(22, 20))
	out = runUntilIdle(t, n, clk, a, b, c)
	if len(out[a]) != 1 || len(out[b]) != 1 || len(out[c]) != 1 {
		t.Fatalf("after healing: a %d, b %d, c %d", len(out[a]), len(out[b]), len(out[c]))
	}
}

func TestRxQueueLimit(t *testing.T) {
	clk := NewManualClock(0)
	a, b := Pair(Config{Clock: clk, RxQueue: 10})
	sendSeq(t, a, b, clk, 15, 20, 0)
	if got := recvAll(t, b); len(got) != 10 {
		t.Fatalf("received %d, want 10", len(got))
	}
	s := a.Network().PathStats(a.LocalAddr(), b.LocalAddr())
	if s.DroppedRxFull != 5 || b.Stats().RxDropped != 5 || a.Stats().TxDropped != 5 {
		t.Fatalf("counters %+v, rx %+v", s, b.Stats())
	}
}

// Per-path settings override the default, at run time, and go back to it when cleared.
func TestSetPath(t *testing.T) {
	a, b, clk := manualPair(0, Impairments{Latency: time.Millisecond})
	n := a.Network()
	if err := n.SetPath(a.LocalAddr(), b.LocalAddr(), Impairments{Latency: 3 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	send(t, a, b.LocalAddr(), payload(1, 20))
	send(t, b, a.LocalAddr(), payload(2, 20)) // the other direction keeps the default
	if got := n.Impairments(a.LocalAddr(), b.LocalAddr()); got.Latency != 3*time.Millisecond {
		t.Fatalf("Impairments = %+v", got)
	}
	n.ClearPath(a.LocalAddr(), b.LocalAddr())
	send(t, a, b.LocalAddr(), payload(3, 20))
	out := runUntilIdle(t, n, clk, a, b)
	at := map[uint64]int64{}
	for _, g := range append(out[a], out[b]...) {
		at[g.seq()] = g.at
	}
	if at[1] != int64(3*time.Millisecond) || at[2] != int64(time.Millisecond) || at[3] != int64(time.Millisecond) {
		t.Fatalf("delivery times %v", at)
	}
	// Bad values are refused and change nothing.
	for _, bad := range []Impairments{{Loss: -0.1}, {Duplicate: 2}, {Corrupt: math.NaN()},
		{Burst: Burst{BadToGood: 1.5}}, {Latency: -1}, {Jitter: -1}, {Bandwidth: -1}, {QueueBytes: -1}, {MTU: -1}} {
		if err := n.SetPath(a.LocalAddr(), b.LocalAddr(), bad); !errors.Is(err, ErrInvalid) {
			t.Fatalf("SetPath(%+v) = %v", bad, err)
		}
		if err := n.SetDefault(bad); !errors.Is(err, ErrInvalid) {
			t.Fatalf("SetDefault(%+v) = %v", bad, err)
		}
	}
	if got := n.Impairments(a.LocalAddr(), b.LocalAddr()); got.Latency != time.Millisecond {
		t.Fatalf("after refused changes: %+v", got)
	}
	// Paths may be configured before their hosts exist.
	far := netip.MustParseAddrPort("198.18.0.99:4793")
	if err := n.SetPath(a.LocalAddr(), far, Impairments{Loss: 1}); err != nil {
		t.Fatal(err)
	}
	c, err := n.AddHost(far)
	if err != nil {
		t.Fatal(err)
	}
	send(t, a, c.LocalAddr(), payload(4, 20))
	if s := n.PathStats(a.LocalAddr(), far); s.DroppedLoss != 1 {
		t.Fatalf("preconfigured path: %+v", s)
	}
}

// NewNetwork clamps what Validate refuses; it never fails or panics.
func TestConfigClamped(t *testing.T) {
	cfg := Config{MaxPayload: 1 << 20, SplitRx: -7, RxQueue: -1, Buffers: -1, TxDoneQueue: -1,
		Default: Impairments{Loss: 7, Duplicate: math.NaN(), Corrupt: -1, Latency: -time.Second,
			Jitter: math.MaxInt64, Burst: Burst{GoodToBad: math.Inf(1)}, Bandwidth: -5, QueueBytes: -5, MTU: -5}}
	if cfg.Validate() == nil {
		t.Fatal("Validate accepted a bad config")
	}
	clk := NewManualClock(0)
	cfg.Clock = clk
	a, b := Pair(cfg)
	if a.MaxPayload() != MaxMaxPayload {
		t.Fatalf("MaxPayload %d", a.MaxPayload())
	}
	send(t, a, b.LocalAddr(), payload(1, 100)) // Loss clamped to 1: dropped
	if s := a.Network().Stats(); s.DroppedLoss != 1 {
		t.Fatalf("stats %+v", s)
	}
	huge := Config{Buffers: math.MaxInt, TxDoneQueue: math.MaxInt}
	if huge.Validate() == nil {
		t.Fatal("Validate accepted huge allocations")
	}
	huge.normalize()
	if huge.Buffers*huge.MaxPayload > MaxPrealloc || huge.TxDoneQueue != MaxTxDoneQueue {
		t.Fatalf("huge config normalized to %+v", huge)
	}
	def := DefaultConfig()
	if def.Validate() != nil || def.MaxPayload != DefaultMaxPayload || def.RxQueue != DefaultRxQueue {
		t.Fatalf("DefaultConfig %+v", def)
	}
}

// Huge latencies and jitters saturate instead of wrapping into the past.
func TestExtremeDelays(t *testing.T) {
	a, b, clk := manualPair(1, Impairments{Latency: math.MaxInt64, Jitter: math.MaxInt64, Bandwidth: 1})
	clk.Set(maxTime / 2)
	send(t, a, b.LocalAddr(), payload(1, 100))
	if at, ok := a.Network().NextDelivery(); !ok || at < maxTime/2 {
		t.Fatalf("NextDelivery %d, %v", at, ok)
	}
	if got := recvAll(t, b); len(got) != 0 {
		t.Fatal("delivered early")
	}
}

// Every counter adds up: what was sent and copied is delivered, queued or dropped once.
func TestCountersAddUp(t *testing.T) {
	clk := NewManualClock(0)
	n := NewNetwork(Config{Clock: clk, Seed: 42, RxQueue: 300, Default: Impairments{
		Loss: 0.05, Burst: Burst{GoodToBad: 0.02, BadToGood: 0.3, BadLoss: 0.8}, Duplicate: 0.05,
		Corrupt: 0.05, Jitter: 50 * time.Microsecond, Latency: 100 * time.Microsecond,
		Bandwidth: 100_000_000, QueueBytes: 20_000, MTU: 1000}})
	a, _ := n.AddHost(hostAddr(1))
	b, _ := n.AddHost(hostAddr(2))
	var pkts [1]link.Packet
	for i := 0; i < 5000; i++ {
		send(t, a, b.LocalAddr(), payload(uint64(i), 8+i%1200))
		if i%7 == 0 {
			clk.Advance(20 * time.Microsecond)
		}
		if i%50 == 0 {
			_, _ = b.Receive(pkts[:])
			b.Release(pkts[:])
		}
		if i == 4000 {
			n.Partition(a.LocalAddr(), b.LocalAddr())
		}
		if i == 4100 {
			n.Heal(a.LocalAddr(), b.LocalAddr())
		}
	}
	_ = b.Close()
	s := n.PathStats(a.LocalAddr(), b.LocalAddr())
	if s.Sent+s.Duplicated != s.Delivered+s.Dropped() {
		t.Fatalf("sent %d + dup %d != delivered %d + dropped %d: %+v", s.Sent, s.Duplicated, s.Delivered, s.Dropped(), s)
	}
	for name, v := range map[string]uint64{"loss": s.DroppedLoss, "burst": s.DroppedBurst, "partition": s.DroppedPartition,
		"queue": s.DroppedQueue, "mtu": s.DroppedMTU, "rxfull": s.DroppedRxFull, "closed": s.DroppedClosed,
		"dup": s.Duplicated, "corrupt": s.Corrupted, "reorder": s.Reordered} {
		if v == 0 {
			t.Errorf("no %s events in %+v", name, s)
		}
	}
	if tot := n.Stats(); tot.Sent != s.Sent || tot.Delivered != s.Delivered {
		t.Fatalf("network totals %+v", tot)
	}
}
