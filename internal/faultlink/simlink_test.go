package faultlink

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"
	"github.com/xdpndk/xdpndk/transport/simlink"
)

// simPair wraps end a of a simlink pair on a manual clock; the wrapper shares the clock.
func simPair(t *testing.T, cfg Config) (*Link, *simlink.Link, *simlink.ManualClock) {
	t.Helper()
	clock := simlink.NewManualClock(0)
	a, b := simlink.Pair(simlink.Config{Clock: clock, MaxPayload: 1500, Buffers: 1024})
	cfg.Now = clock.Now
	l, err := Wrap(a, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(); _ = b.Close() })
	return l, b, clock
}

// Over simlink: every datagram arrives (once, or twice for a duplicate), byte-exact unless
// corrupted (one byte), and every zero-copy cookie comes back once.
func TestOverSimlink(t *testing.T) {
	l, peerLink, clock := simPair(t, Config{Seed: 9, InjectBuffers: 4,
		Impairments: Impairments{Reorder: 0.1, Corrupt: 0.05, Duplicate: 0.05}})
	to := peerLink.LocalAddr()
	const n = 2000
	var out [32]link.Packet
	cookies := map[uint64]int{}
	var done [64]uint64
	got := map[uint64]int{}
	var rx [64]link.Packet
	receive := func() {
		for {
			k, err := peerLink.Receive(rx[:])
			if err != nil {
				t.Fatal(err)
			}
			for i := range rx[:k] {
				var d []byte
				for s := 0; s < int(rx[i].NSegs); s++ {
					d = append(d, rx[i].Segs[s]...)
				}
				id, diff := identify(d)
				if diff > 1 {
					t.Fatalf("datagram with %d bytes changed", diff)
				}
				got[id]++
			}
			peerLink.Release(rx[:k])
			if k == 0 {
				return
			}
		}
	}
	for id := uint64(0); id < n; id += uint64(len(out)) {
		for i := range out {
			out[i] = packet(id + uint64(i))
			out[i].Remote = to
		}
		for sent := 0; sent < len(out); {
			k, err := l.Send(out[sent:])
			if err != nil {
				t.Fatal(err)
			}
			sent += k
			for m := l.TxDone(done[:]); m > 0; m = l.TxDone(done[:]) {
				for _, c := range done[:m] {
					cookies[c]++
				}
			}
		}
		clock.Advance(100 * time.Microsecond)
		receive()
	}
	clock.Advance(time.Second)
	if err := l.Wait(0); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Millisecond)
	receive()
	for m := l.TxDone(done[:]); m > 0; m = l.TxDone(done[:]) {
		for _, c := range done[:m] {
			cookies[c]++
		}
	}
	st := l.FaultStats()
	dups := 0
	for id := uint64(0); id < n; id++ {
		switch got[id] {
		case 1:
		case 2:
			dups++
		default:
			t.Fatalf("datagram %d arrived %d times; stats %+v; held %d pending %d; net %+v", id, got[id], st, len(l.held), len(l.pending), peerLink.Network().Stats())
		}
		if id%3 == 0 && cookies[1000+id] != 1 {
			t.Fatalf("cookie of %d reported %d times", id, cookies[1000+id])
		}
	}
	if uint64(dups) != st.Duplicated || st.Reordered == 0 || st.Released != st.Reordered {
		t.Fatalf("%d duplicates arrived; stats %+v", dups, st)
	}

	// Injection next to a real link.
	if err := l.Inject(Datagram{Remote: to, Data: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	k, err := l.Receive(rx[:])
	if err != nil || k != 1 || !bytes.Equal(rx[0].Segs[0], []byte("hello")) || rx[0].Remote != to {
		t.Fatalf("Receive = %d, %v", k, err)
	}
	l.Release(rx[:k])
}

// No allocation per datagram: Send with every fault, TxDone, Receive (with injected and
// real datagrams, recorded) and Release.
func TestNoAllocations(t *testing.T) {
	l, peerLink, clock := simPair(t, Config{Seed: 2, InjectBuffers: 8,
		Impairments: Impairments{Drop: 0.1, Reorder: 0.2, Corrupt: 0.1, Duplicate: 0.1}})
	back, err := Wrap(peerLink, Config{})
	if err != nil {
		t.Fatal(err)
	}
	to := peerLink.LocalAddr()
	var out [16]link.Packet
	for i := range out {
		out[i] = packet(uint64(i))
		out[i].Remote = to
	}
	var rx [32]link.Packet
	var done [32]uint64
	reply := []link.Packet{{Remote: l.LocalAddr(), NSegs: 1}}
	reply[0].Segs[0] = make([]byte, 200)
	inj := Datagram{Remote: netip.MustParseAddrPort("198.18.0.9:1"), Data: make([]byte, 100)}
	l.Record(4, 1)
	round := func() {
		if _, err := l.Send(out[:]); err != nil {
			t.Fatal(err)
		}
		l.TxDone(done[:])
		if _, err := back.Send(reply); err != nil {
			t.Fatal(err)
		}
		clock.Advance(2 * time.Millisecond)
		_ = l.Inject(inj)
		k, _ := l.Receive(rx[:])
		l.Release(rx[:k])
		k, _ = peerLink.Receive(rx[:])
		peerLink.Release(rx[:k])
		_ = l.Wait(0)
	}
	for i := 0; i < 50; i++ {
		round() // warm up: simlink's pool grows to its working size
	}
	if a := testing.AllocsPerRun(200, round); a != 0 {
		t.Fatalf("%.1f allocations per round", a)
	}
	if st := l.FaultStats(); st.Dropped == 0 || st.Reordered == 0 || st.Corrupted == 0 || st.Duplicated == 0 || st.Injected == 0 {
		t.Fatalf("a fault was not exercised: %+v", st)
	}
	_ = netip.AddrPort{}
}
