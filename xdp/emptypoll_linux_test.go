package xdp

import (
	"testing"

	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/transport/link"
)

// BenchmarkEmptyRound is the link's part of an idle engine round: a Receive that finds the
// RX ring empty and a TxDone with nothing in flight, on one queue.
func BenchmarkEmptyRound(b *testing.B) {
	bed := testbed.NewT(b, testbed.Options{})
	l := openOn(b, bed.A, Config{RingSize: 256, Frames: 512}).Links()[0]
	var in [32]link.Packet
	var c [32]uint64
	b.ReportAllocs()
	for b.Loop() {
		if n, err := l.Receive(in[:]); n != 0 || err != nil {
			b.Fatalf("Receive: %d, %v", n, err)
		}
		l.TxDone(c[:])
	}
}
