package simlink

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"
)

// incastNet is hosts 1..senders sending to host 100 through one bottleneck of bw bit/s and
// a queue of q bytes, with latency one way on every path.
func incastNet(t *testing.T, senders int, bw int64, q int, latency time.Duration) (*Network, *ManualClock, []*Link, *Link, *Bottleneck) {
	t.Helper()
	clk := NewManualClock(0)
	n := NewNetwork(Config{Clock: clk, RxQueue: 1 << 20, Default: Impairments{Latency: latency}})
	t.Cleanup(func() { _ = n.Close() })
	rx, err := n.AddHost(hostAddr(100))
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.NewBottleneck("rx-ingress", BottleneckConfig{Bandwidth: bw, QueueBytes: q})
	if err != nil {
		t.Fatal(err)
	}
	var tx []*Link
	for i := range senders {
		l, err := n.AddHost(hostAddr(byte(i + 1)))
		if err != nil {
			t.Fatal(err)
		}
		if err := n.SetBottleneck(l.LocalAddr(), rx.LocalAddr(), b); err != nil {
			t.Fatal(err)
		}
		tx = append(tx, l)
	}
	return n, clk, tx, rx, b
}

// Two senders that each burst into one bottleneck at the same instant share its wire: the
// datagrams leave one serialization time apart in the order sent, whoever sent them; each
// one's queueing delay is what was ahead of it; the path's own bandwidth is not used.
func TestBottleneckSharedWire(t *testing.T) {
	const size = 1000 // bytes: 8 µs at 1 Gbit/s
	n, clk, tx, rx, b := incastNet(t, 2, 1e9, 0, 5*time.Microsecond)
	// A path bandwidth that would be far slower: ignored while the path feeds b.
	if err := n.SetPath(tx[0].LocalAddr(), rx.LocalAddr(), Impairments{Latency: 5 * time.Microsecond, Bandwidth: 1e6}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		send(t, tx[i%2], rx.LocalAddr(), payload(uint64(i), size))
	}
	got := runUntilIdle(t, n, clk, rx)[rx]
	if len(got) != 10 {
		t.Fatalf("received %d datagrams, want 10", len(got))
	}
	for i, g := range got {
		want := int64((i+1)*8000 + 5000) // serialization of i+1 datagrams, then latency
		if g.seq() != uint64(i) || !g.intact() || g.at != want {
			t.Errorf("datagram %d: seq %d intact %v at %d, want seq %d at %d", i, g.seq(), g.intact(), g.at, i, want)
		}
		if wantFrom := tx[i%2].LocalAddr(); g.remote != wantFrom {
			t.Errorf("datagram %d from %v, want %v", i, g.remote, wantFrom)
		}
	}
	s := b.Stats()
	if s.Packets != 10 || s.Bytes != 10*size || s.Dropped != 0 || s.Delay.Count() != 10 {
		t.Errorf("stats %+v", s)
	}
	// Delays 0, 8, 16, ..., 72 µs; backlog before the last: 9 datagrams.
	if s.Delay.Max() != 72*time.Microsecond || s.Delay.Mean() != 36*time.Microsecond || s.MaxBacklog != 9*size {
		t.Errorf("delay max %v mean %v, max backlog %d", s.Delay.Max(), s.Delay.Mean(), s.MaxBacklog)
	}
	if q := s.Delay.Quantile(0.5); q < 32*time.Microsecond || q > 33*time.Microsecond {
		t.Errorf("median delay %v, want 32 µs (+1/32)", q)
	}
	// Detached, the path's own (slow) bandwidth applies again: 1000 bytes at 1 Mbit/s = 8 ms.
	if err := n.SetBottleneck(tx[0].LocalAddr(), rx.LocalAddr(), nil); err != nil {
		t.Fatal(err)
	}
	start := clk.Now()
	send(t, tx[0], rx.LocalAddr(), payload(99, size))
	got = runUntilIdle(t, n, clk, rx)[rx]
	if len(got) != 1 || got[0].at-start != 8*int64(time.Millisecond)+5000 {
		t.Errorf("after detaching: %d datagrams, delay %v", len(got), time.Duration(got[0].at-start))
	}
	if b.Stats().Packets != 10 {
		t.Error("a detached path still fed the bottleneck")
	}
}

// A full queue tail-drops, counted at the bottleneck and in the feeding path's
// DroppedQueue; what fits is delivered; the accounting identities hold.
func TestBottleneckTailDrop(t *testing.T) {
	const size = 1000
	n, clk, tx, rx, b := incastNet(t, 4, 1e9, 3*size, 0)
	// 4 senders x 5 datagrams at one instant: the backlog counts the datagram on the wire,
	// so 3 fit and the other 17 are dropped.
	for range 5 {
		for _, l := range tx {
			send(t, l, rx.LocalAddr(), payload(1, size))
		}
	}
	got := runUntilIdle(t, n, clk, rx)[rx]
	s := b.Stats()
	if len(got) != 3 || s.Packets != 3 || s.Dropped != 17 || s.DroppedBytes != 17*size || s.MaxBacklog != 2*size {
		t.Fatalf("received %d; accepted %d, dropped %d (%d bytes), max backlog %d", len(got), s.Packets, s.Dropped, s.DroppedBytes, s.MaxBacklog)
	}
	var queueDrops, sent uint64
	for _, l := range tx {
		ps := n.PathStats(l.LocalAddr(), rx.LocalAddr())
		queueDrops += ps.DroppedQueue
		sent += ps.Sent
	}
	if queueDrops != s.Dropped || sent != s.Packets+s.Dropped {
		t.Errorf("paths: %d queue drops, %d sent; bottleneck %d accepted %d dropped", queueDrops, sent, s.Packets, s.Dropped)
	}
	// Once the queue has drained, it accepts again.
	clk.Advance(time.Millisecond)
	send(t, tx[3], rx.LocalAddr(), payload(2, size))
	if got := runUntilIdle(t, n, clk, rx)[rx]; len(got) != 1 || b.Stats().Dropped != 17 {
		t.Errorf("after draining: %d delivered, %d dropped", len(got), b.Stats().Dropped)
	}
}

// The bottleneck's drops and delays are a function of the Sends: two networks given the
// same Sends at the same clock readings agree exactly, random loss on the paths included.
func TestBottleneckDeterministic(t *testing.T) {
	run := func() (BottleneckStats, []int64) {
		n, clk, tx, rx, b := incastNet(t, 3, 2e9, 20_000, 2*time.Microsecond)
		n.SetDefault(Impairments{Latency: 2 * time.Microsecond, Loss: 0.05})
		r := rand.New(rand.NewPCG(7, 7))
		var at []int64
		for range 2000 {
			clk.Advance(time.Duration(r.IntN(3000)))
			send(t, tx[r.IntN(3)], rx.LocalAddr(), payload(3, 200+r.IntN(1200)))
			for _, g := range recvAll(t, rx) {
				at = append(at, g.at)
			}
		}
		for _, g := range runUntilIdle(t, n, clk, rx)[rx] {
			at = append(at, g.at)
		}
		return b.Stats(), at
	}
	s1, at1 := run()
	s2, at2 := run()
	if s1 != s2 || !slices.Equal(at1, at2) {
		t.Errorf("two identical runs differ: %+v vs %+v", s1.Delay.Count(), s2.Delay.Count())
	}
	if s1.Dropped == 0 || s1.Packets == 0 {
		t.Errorf("the run exercised nothing: %d accepted, %d dropped", s1.Packets, s1.Dropped)
	}
}

func TestBottleneckConfig(t *testing.T) {
	n := NewNetwork(Config{Clock: NewManualClock(0)})
	defer n.Close()
	for _, c := range []BottleneckConfig{{}, {Bandwidth: -1}, {Bandwidth: 1e9, QueueBytes: -1}} {
		if _, err := n.NewBottleneck("x", c); !errors.Is(err, ErrInvalid) {
			t.Errorf("NewBottleneck(%+v) = %v, want ErrInvalid", c, err)
		}
	}
	b, err := n.NewBottleneck("x", BottleneckConfig{Bandwidth: 1e9})
	if err != nil || b.Name() != "x" {
		t.Fatal(b, err)
	}
	if err := b.SetConfig(BottleneckConfig{}); !errors.Is(err, ErrInvalid) || b.Config().Bandwidth != 1e9 {
		t.Errorf("SetConfig of a bad config: %v, config now %+v", err, b.Config())
	}
	if err := b.SetConfig(BottleneckConfig{Bandwidth: 2e9, QueueBytes: 5}); err != nil || b.Config() != (BottleneckConfig{Bandwidth: 2e9, QueueBytes: 5}) {
		t.Errorf("SetConfig: %v, %+v", err, b.Config())
	}
	other := NewNetwork(Config{})
	defer other.Close()
	if err := other.SetBottleneck(hostAddr(1), hostAddr(2), b); !errors.Is(err, ErrNoBottleneck) {
		t.Errorf("SetBottleneck with another network's bottleneck: %v", err)
	}
}

// The histogram's quantiles are upper bounds within 1/32 of the true order statistic.
func TestDelayHistogram(t *testing.T) {
	var h DelayHistogram
	if h.Quantile(0.99) != 0 || h.Mean() != 0 {
		t.Error("empty histogram")
	}
	r := rand.New(rand.NewPCG(1, 2))
	var v []int64
	for range 10000 {
		d := int64(r.ExpFloat64() * 50_000)
		if r.IntN(10) == 0 {
			d = int64(r.IntN(100)) // small values: exact buckets
		}
		v = append(v, d)
		h.Record(time.Duration(d))
	}
	h.Record(-5) // counts as 0
	v = append(v, 0)
	slices.Sort(v)
	for _, q := range []float64{0, 0.01, 0.5, 0.9, 0.99, 0.999, 1} {
		rank := int(q*float64(len(v)) + 0.999999)
		want := v[max(rank, 1)-1]
		got := int64(h.Quantile(q))
		if got < want || float64(got) > float64(want)*(1+1.0/32)+1 {
			t.Errorf("Quantile(%v) = %d, true %d", q, got, want)
		}
	}
	if h.Count() != uint64(len(v)) || int64(h.Max()) != v[len(v)-1] {
		t.Errorf("count %d max %v", h.Count(), h.Max())
	}
	for _, x := range []uint64{0, 63, 64, 65, 127, 128, 1 << 40, 1<<63 - 1, 1<<64 - 1} {
		i := histIndex(x)
		if i < 0 || i >= histBuckets || histUpper(i) < x || (i > 0 && histUpper(i-1) >= x) {
			t.Errorf("value %d: bucket %d, upper %d", x, i, histUpper(i))
		}
	}
	// Sub: the interval's histogram.
	early := h
	for range 100 {
		h.Record(time.Second)
	}
	d := h.Sub(&early)
	if d.Count() != 100 || d.Quantile(0) < time.Second || d.Mean() != time.Second {
		t.Errorf("Sub: count %d q0 %v mean %v", d.Count(), d.Quantile(0), d.Mean())
	}
}

// Sends through a bottleneck allocate nothing once warm.
func TestBottleneckNoAllocs(t *testing.T) {
	n, clk, tx, rx, _ := incastNet(t, 2, 10e9, 64<<10, time.Microsecond)
	data := make([]byte, 1400)
	var pk [4]link.Packet
	for i := range pk {
		pk[i].Remote = rx.LocalAddr()
		pk[i].SetData(data)
	}
	var in [16]link.Packet
	step := func() {
		clk.Advance(5 * time.Microsecond)
		for _, l := range tx {
			if _, err := l.Send(pk[:]); err != nil {
				t.Fatal(err)
			}
		}
		k, err := rx.Receive(in[:])
		if err != nil {
			t.Fatal(err)
		}
		rx.Release(in[:k])
	}
	for range 2000 {
		step()
	}
	if a := testing.AllocsPerRun(1000, step); a != 0 {
		t.Fatalf("%v allocations per round", a)
	}
	_ = n
}
