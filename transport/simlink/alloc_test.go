package simlink

import (
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"
)

// Send, TxDone, Receive, Release and a polling Wait allocate nothing once warm, with every
// impairment on, with split receive, and on a real clock.
func TestNoAllocsSteadyState(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
	}{
		{"plain", Config{}},
		{"impaired", Config{Default: everything, SplitRx: SplitRandom}},
		{"realclock", Config{Default: Impairments{Jitter: time.Microsecond}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := NewManualClock(0)
			if c.name != "realclock" {
				c.cfg.Clock = clk
			}
			a, b := Pair(c.cfg)
			defer a.Network().Close()
			data := make([]byte, 1000)
			var tx [8]link.Packet
			for i := range tx {
				tx[i] = link.Packet{Remote: b.LocalAddr(), LocalPort: uint16(40000 + i), Cookie: uint64(i),
					NSegs: 2, Flags: link.FlagZeroCopy}
				tx[i].Segs[0], tx[i].Segs[1] = data[:24], data[24:24+i*100]
			}
			var rx [16]link.Packet
			var done [16]uint64
			step := func() {
				clk.Advance(50 * time.Microsecond)
				if _, err := a.Send(tx[:]); err != nil {
					t.Fatal(err)
				}
				a.TxDone(done[:])
				n, err := b.Receive(rx[:])
				if err != nil {
					t.Fatal(err)
				}
				b.Release(rx[:n])
				_ = b.Wait(0)
			}
			for i := 0; i < 2000; i++ {
				step()
			}
			if allocs := testing.AllocsPerRun(1000, step); allocs != 0 {
				t.Fatalf("%v allocations per Send+Receive+Release round", allocs)
			}
		})
	}
}
