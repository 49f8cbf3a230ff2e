package simlink

import (
	"fmt"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"
)

// BenchmarkSendReceiveRelease measures one datagram's trip through a pair: Send, Receive
// and Release, per datagram (ns/op, B/op, allocs/op), in batches as an engine makes them:
// on a perfect path, on an impaired one (1% loss, bursts, 1% duplicates, 1% corruption,
// jitter, a 100 Gbit/s bandwidth limit; the virtual clock moves 1 ms per batch, so nothing
// queues), and on a real clock.
func BenchmarkSendReceiveRelease(b *testing.B) {
	cases := []struct {
		name string
		imp  Impairments
		real bool
	}{
		{"perfect", Impairments{}, false},
		{"impaired", Impairments{Latency: 20 * time.Microsecond, Jitter: 10 * time.Microsecond,
			Loss: 0.01, Burst: Burst{GoodToBad: 0.001, BadToGood: 0.5, BadLoss: 1},
			Duplicate: 0.01, Corrupt: 0.01, Bandwidth: 100_000_000_000}, false},
		{"realclock", Impairments{}, true},
	}
	for _, c := range cases {
		for _, size := range []int{64, 1472} {
			for _, batch := range []int{1, 32} {
				b.Run(fmt.Sprintf("%s/%dB/batch%d", c.name, size, batch), func(b *testing.B) {
					benchTrip(b, c.imp, c.real, size, batch)
				})
			}
		}
	}
}

func benchTrip(b *testing.B, imp Impairments, real bool, size, batch int) {
	clk := NewManualClock(0)
	cfg := Config{Default: imp, Clock: clk}
	if real {
		cfg.Clock = nil
	}
	x, y := Pair(cfg)
	defer x.Network().Close()
	data := make([]byte, size)
	tx := make([]link.Packet, batch)
	for i := range tx {
		tx[i] = link.Packet{Remote: y.LocalAddr()}
		tx[i].SetData(data)
	}
	rx := make([]link.Packet, 2*batch)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		k := min(batch, b.N-i)
		if _, err := x.Send(tx[:k]); err != nil {
			b.Fatal(err)
		}
		clk.Advance(time.Millisecond)
		n, _ := y.Receive(rx)
		y.Release(rx[:n])
	}
}
