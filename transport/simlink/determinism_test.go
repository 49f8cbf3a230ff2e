package simlink

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"
)

// everything turns every impairment on.
var everything = Impairments{
	Latency: 200 * time.Microsecond, Jitter: 100 * time.Microsecond,
	Loss: 0.05, Burst: Burst{GoodToBad: 0.02, BadToGood: 0.3, BadLoss: 0.9},
	Duplicate: 0.05, Corrupt: 0.05, Bandwidth: 200_000_000, QueueBytes: 30_000, MTU: 1400,
}

// scenario runs three hosts exchanging datagrams under every impairment, driven by a fixed
// script, and returns every delivery as a line of text.
func scenario(t *testing.T, seed uint64) []string {
	t.Helper()
	clk := NewManualClock(0)
	n := NewNetwork(Config{Seed: seed, Clock: clk, Default: everything, SplitRx: SplitRandom})
	var hosts [3]*Link
	for i := range hosts {
		hosts[i], _ = n.AddHost(hostAddr(byte(i + 1)))
	}
	script := rand.New(rand.NewPCG(99, 99)) // the same sends and times in every run
	var log []string
	var pkts [4]link.Packet
	for step := 0; step < 6000; step++ {
		from, to := script.IntN(3), script.IntN(3)
		send(t, hosts[from], hosts[to].LocalAddr(), payload(uint64(step), 8+script.IntN(1464)))
		if script.IntN(3) == 0 {
			clk.Advance(time.Duration(script.IntN(20_000)))
		}
		if step == 3000 {
			n.Partition(hosts[0].LocalAddr(), hosts[1].LocalAddr())
		}
		if step == 3300 {
			n.Heal(hosts[0].LocalAddr(), hosts[1].LocalAddr())
		}
		r := script.IntN(3)
		k, _ := hosts[r].Receive(pkts[:1+script.IntN(len(pkts))])
		for _, p := range pkts[:k] {
			h := fnv.New64a()
			for _, s := range p.Segs[:p.NSegs] {
				h.Write(s)
			}
			log = append(log, fmt.Sprintf("%d %d %v %d %x %d", clk.Now(), r, p.Remote, p.NSegs, h.Sum64(), len(p.Segs[0])))
		}
		hosts[r].Release(pkts[:k])
	}
	return log
}

func TestDeterministic(t *testing.T) {
	a, b := scenario(t, 1), scenario(t, 1)
	if len(a) < 1000 {
		t.Fatalf("scenario delivered only %d datagrams", len(a))
	}
	if !slices.Equal(a, b) {
		for i := range min(len(a), len(b)) {
			if a[i] != b[i] {
				t.Fatalf("runs differ at delivery %d: %q vs %q", i, a[i], b[i])
			}
		}
		t.Fatalf("runs delivered %d and %d datagrams", len(a), len(b))
	}
	if c := scenario(t, 2); slices.Equal(a, c) {
		t.Fatal("seeds 1 and 2 gave the same run")
	}
}

// pathRun sends 3000 datagrams a→b under imp, with (if noise) traffic on other paths
// interleaved, and returns what b received from a: sequence number, bytes and time.
func pathRun(t *testing.T, imp Impairments, noise bool) []string {
	t.Helper()
	clk := NewManualClock(0)
	n := NewNetwork(Config{Seed: 5, Clock: clk, Default: imp})
	a, _ := n.AddHost(hostAddr(1))
	if noise {
		// Hosts added in another order and extra paths in use change nothing for a→b.
		_, _ = n.AddHost(hostAddr(3))
	}
	b, _ := n.AddHost(hostAddr(2))
	c, _ := n.AddHost(hostAddr(4))
	var out []string
	for i := 0; i < 3000; i++ {
		send(t, a, b.LocalAddr(), payload(uint64(i), 200))
		if noise {
			send(t, c, b.LocalAddr(), payload(uint64(i), 300))
			send(t, b, a.LocalAddr(), payload(uint64(i), 100))
			send(t, a, c.LocalAddr(), payload(uint64(i), 100))
		}
		clk.Advance(7 * time.Microsecond)
		if i%10 == 0 {
			for _, g := range append(recvAll(t, b), recvAll(t, a)...) {
				if g.remote == a.LocalAddr() && len(g.data) == 200 {
					h := fnv.New64a()
					h.Write(g.data)
					out = append(out, fmt.Sprintf("%d %x %d", g.at, h.Sum64(), g.nsegs))
				}
			}
		}
	}
	return out
}

// A path's fates do not depend on traffic on other paths or the order hosts were added.
func TestPathsIndependent(t *testing.T) {
	quiet, noisy := pathRun(t, everything, false), pathRun(t, everything, true)
	if len(quiet) < 1000 || !slices.Equal(quiet, noisy) {
		t.Fatalf("a→b deliveries differ with traffic on other paths (%d vs %d)", len(quiet), len(noisy))
	}
}

// Turning on duplication, corruption and jitter does not change which datagrams random and
// burst loss drop.
func TestImpairmentsIndependent(t *testing.T) {
	lossOnly := Impairments{Loss: 0.1, Burst: Burst{GoodToBad: 0.05, BadToGood: 0.5, BadLoss: 1}}
	more := lossOnly
	more.Duplicate, more.Corrupt, more.Jitter = 0.3, 0.3, time.Millisecond
	lost := func(m Impairments) []uint64 {
		a, b, clk := manualPair(8, m)
		got := sendAll(t, a, b, clk, 3000, 64, time.Microsecond)
		seen := make([]bool, 3000)
		for _, g := range got {
			// Corruption may hit the sequence number: then find the datagram by content.
			if s := g.seq(); s < 3000 && hamming(g.data, payload(s, 64)) <= 3 {
				seen[s] = true
				continue
			}
			for s := range seen {
				if hamming(g.data, payload(uint64(s), 64)) <= 3 {
					seen[s] = true
					break
				}
			}
		}
		var l []uint64
		for s, ok := range seen {
			if !ok {
				l = append(l, uint64(s))
			}
		}
		return l
	}
	a, b := lost(lossOnly), lost(more)
	if len(a) < 100 || !slices.Equal(a, b) {
		t.Fatalf("lost sets differ: %d vs %d datagrams", len(a), len(b))
	}
}

func hamming(x, y []byte) int {
	d := 0
	for i := range x {
		for v := x[i] ^ y[i]; v != 0; v &= v - 1 {
			d++
		}
	}
	return d
}
