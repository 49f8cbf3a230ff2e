package faultlink

import (
	"errors"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/linktest"
	"github.com/xdpndk/xdpndk/transport/link"
)

// TestFlagCRC checks link.FlagCRC through the wrapper over simlink: datagrams passed on
// keep the flag (simlink fills the trailer in), the wrapper's own copies (held,
// duplicated, corrupted) get the CRC32C as it copies them, before a corruption, so every
// datagram arrives with a correct trailer except exactly the corrupted ones; the caller's
// trailer is never written.
func TestFlagCRC(t *testing.T) {
	l, peer, clock := simPair(t, Config{Seed: 5,
		Impairments: Impairments{Reorder: 0.15, Corrupt: 0.1, Duplicate: 0.1}})
	to := peer.LocalAddr()
	const total = 1200
	var out [8]link.Packet
	bufs := make([][]byte, len(out))
	trls := make([][link.CRCLen]byte, len(out))
	for i := range bufs {
		bufs[i] = make([]byte, 1500)
	}
	var rx [64]link.Packet
	scratch := make([]byte, 65536)
	arrived, bad := map[uint64]int{}, 0
	receive := func() {
		for {
			k, err := peer.Receive(rx[:])
			if err != nil {
				t.Fatal(err)
			}
			for i := range rx[:k] {
				seq, err := linktest.CheckCRC(&rx[i], scratch)
				if err != nil {
					bad++
					continue
				}
				arrived[seq]++
			}
			peer.Release(rx[:k])
			if k == 0 {
				return
			}
		}
	}
	for seq := 0; seq < total; seq += len(out) {
		for i := range out {
			s := seq + i
			size := linktest.MinSize + s*53%(1500-linktest.MinSize+1)
			linktest.CRCDatagram(&out[i], to, uint64(s), size, 2+s%3, bufs[i], trls[i][:])
		}
		if n, err := l.Send(out[:]); n != len(out) || err != nil {
			t.Fatalf("send: %d, %v", n, err)
		}
		for i := range trls {
			if !linktest.TrailerIntact(trls[i][:]) {
				t.Fatalf("datagram %d: the caller's trailer was written: %x", seq+i, trls[i])
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
	st := l.FaultStats()
	if uint64(bad) != st.Corrupted || st.Corrupted == 0 || st.Reordered == 0 || st.Duplicated == 0 {
		t.Fatalf("%d datagrams failed the CRC check; stats %+v", bad, st)
	}
	dups := 0
	for s := uint64(0); s < total; s++ {
		switch arrived[s] {
		case 0, 1: // a corrupted datagram's only copy was the corrupted one
		case 2:
			dups++
		default:
			t.Fatalf("datagram %d arrived %d times", s, arrived[s])
		}
	}
	if len(arrived)+int(st.Corrupted) != total || uint64(dups) != st.Duplicated {
		t.Fatalf("%d intact distinct datagrams, %d corrupted, %d duplicates of %d made; want %d", len(arrived), st.Corrupted, dups, st.Duplicated, total)
	}

	// A FlagCRC datagram without a trailer segment is the inner link's to refuse.
	var p [1]link.Packet
	p[0] = link.Packet{Remote: to, Flags: link.FlagCRC}
	p[0].Segs[0], p[0].Segs[1], p[0].NSegs = make([]byte, 20), make([]byte, 5), 2
	if n, err := l.Send(p[:]); n != 0 || !errors.Is(err, link.ErrNoTrailer) {
		t.Fatalf("send without a trailer: %d, %v; want 0, ErrNoTrailer", n, err)
	}
}
