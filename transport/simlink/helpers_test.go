package simlink

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/xdpndk/xdpndk/transport/link"
)

// Test hosts live in 198.18.0.0/15, the benchmarking range.
func hostAddr(i byte) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 0, i}), pairPort)
}

// payload returns a datagram of n bytes (n >= 8) that starts with seq and whose other
// bytes are a function of seq, so a receiver can check it byte for byte.
func payload(seq uint64, n int) []byte {
	b := make([]byte, n)
	fillPayload(b, seq)
	return b
}

func fillPayload(b []byte, seq uint64) {
	binary.BigEndian.PutUint64(b, seq)
	x := uint32(seq)*2654435761 + 1
	for i := 8; i < len(b); i++ {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
}

// got is one received datagram, copied out of the link's buffers.
type got struct {
	remote    netip.AddrPort
	localPort uint16
	nsegs     int
	data      []byte
	at        int64 // the clock when it was received
}

func (g got) seq() uint64 { return binary.BigEndian.Uint64(g.data) }

// intact reports whether the datagram is exactly what payload(seq, len) made.
func (g got) intact() bool {
	return len(g.data) >= 8 && bytes.Equal(g.data, payload(g.seq(), len(g.data)))
}

// recvAll receives and releases everything due at l now.
func recvAll(t testing.TB, l *Link) []got {
	t.Helper()
	var out []got
	var pkts [16]link.Packet
	for {
		n, err := l.Receive(pkts[:])
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		for i := range pkts[:n] {
			p := &pkts[i]
			var data []byte
			for j := 0; j < int(p.NSegs); j++ {
				data = append(data, p.Segs[j]...)
			}
			out = append(out, got{remote: p.Remote, localPort: p.LocalPort, nsegs: int(p.NSegs),
				data: data, at: l.net.clock.Now()})
		}
		l.Release(pkts[:n])
		if n < len(pkts) {
			return out
		}
	}
}

// runUntilIdle moves clk from delivery to delivery, receiving at every host, until nothing
// is queued anywhere. It returns what each link received, in order.
func runUntilIdle(t testing.TB, n *Network, clk *ManualClock, links ...*Link) map[*Link][]got {
	t.Helper()
	out := make(map[*Link][]got)
	runUntil(t, n, clk, maxTime, out, links...)
	return out
}

// runUntil moves clk from delivery to delivery up to until, receiving at every host each
// time, so that every datagram is received exactly at its delivery time; then it sets the
// clock to until (unless it is maxTime). What each link receives is appended to out.
func runUntil(t testing.TB, n *Network, clk *ManualClock, until int64, out map[*Link][]got, links ...*Link) {
	t.Helper()
	for {
		for _, l := range links {
			out[l] = append(out[l], recvAll(t, l)...)
		}
		next, ok := n.NextDelivery()
		if !ok || next > until {
			if until != maxTime {
				clk.Set(until)
			}
			return
		}
		if next <= clk.Now() {
			t.Fatalf("datagram due at %d is queued at a link not being received", next)
		}
		clk.Set(next)
	}
}

// send sends one single-segment datagram and fails the test on error.
func send(t testing.TB, l *Link, to netip.AddrPort, data []byte) {
	t.Helper()
	var p [1]link.Packet
	p[0].Remote = to
	p[0].SetData(data)
	if n, err := l.Send(p[:]); n != 1 || err != nil {
		t.Fatalf("send: %d, %v", n, err)
	}
}

// manualPair is a Pair on a ManualClock at 0 with the given default impairments (and room
// for a million datagrams in flight).
func manualPair(seed uint64, m Impairments) (a, b *Link, clk *ManualClock) {
	clk = NewManualClock(0)
	a, b = Pair(Config{Seed: seed, Clock: clk, Default: m, RxQueue: 1 << 20})
	return a, b, clk
}

// seqs returns the sequence numbers of gs.
func seqs(gs []got) []uint64 {
	s := make([]uint64, len(gs))
	for i, g := range gs {
		s[i] = g.seq()
	}
	return s
}
