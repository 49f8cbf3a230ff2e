package transport_test

import (
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/congestion"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// TestWindowCountsPayload: the congestion window (bytes) holds back a packet only when its
// own payload does not fit, not room for a full-size one: with a window of one MSS and no
// acknowledgement coming back, 64-byte Writes fill it (MSS/64 of them leave), while
// full-size Writes leave one at a time.
func TestWindowCountsPayload(t *testing.T) {
	for _, tc := range []struct {
		name string
		size func(mss int) int
		want func(mss, n int) int
	}{
		{"64 bytes", func(int) int { return 64 }, func(mss, n int) int { return min(n, mss/64) }},
		{"full size", func(mss int) int { return mss }, func(int, int) int { return 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mss int
			w, a, b := newSemPair(t, func(c *transport.Config) {
				c.NewController = func(m int) congestion.Controller {
					mss = m
					f, err := congestion.NewFixed(m)
					if err != nil {
						t.Fatal(err)
					}
					return f
				}
			})
			qa, _ := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
			g := newSemGuarded(1<<20, 1)
			b.mem.add(0x11, 0, 0x10000, g.region, semRW)
			b.tap.setDrop(func(p *wire.Packet) bool { return p.Opcode == wire.OpAck }) // no ack returns
			const n = 200
			size := tc.size(mss)
			for i := range n {
				semPost(t, qa, semWrite(uint64(i), 0, 0x10000+uint64(i*size), 0x11, make([]byte, size)))
			}
			w.runFor(100 * time.Microsecond) // well before the retransmission timer
			if got, want := a.tap.sentCount(wire.OpWrite), tc.want(mss, n); got != want {
				t.Fatalf("%d Writes of %d bytes left with a window of %d bytes and no ack, want %d", got, size, mss, want)
			}
		})
	}
}
