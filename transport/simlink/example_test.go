package simlink_test

import (
	"fmt"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"
	"github.com/xdpndk/xdpndk/transport/simlink"
)

// A pair of hosts on a path that loses 10% of datagrams and delays the rest by 1 ms, in
// virtual time: the seed makes the outcome the same on every run.
func ExamplePair_lossy() {
	clk := simlink.NewManualClock(0)
	a, b := simlink.Pair(simlink.Config{
		Seed:    1,
		Clock:   clk,
		Default: simlink.Impairments{Loss: 0.1, Latency: time.Millisecond},
	})
	defer a.Network().Close()

	var tx [1]link.Packet
	for i := 0; i < 1000; i++ {
		tx[0] = link.Packet{Remote: b.LocalAddr()}
		tx[0].SetData([]byte(fmt.Sprintf("datagram %d", i)))
		if _, err := a.Send(tx[:]); err != nil {
			fmt.Println(err)
			return
		}
	}

	var rx [64]link.Packet
	early, _ := b.Receive(rx[:]) // nothing yet: the latency has not passed
	next, _ := a.Network().NextDelivery()
	clk.Set(next)
	received := 0
	for {
		n, _ := b.Receive(rx[:])
		if n == 0 {
			break
		}
		if received == 0 {
			fmt.Printf("first: %q from %v\n", rx[0].Segs[0], rx[0].Remote)
		}
		received += n
		b.Release(rx[:n])
	}
	s := a.Network().PathStats(a.LocalAddr(), b.LocalAddr())
	fmt.Printf("at %v: received %d early, %d of %d on time, %d lost\n",
		time.Duration(clk.Now()), early, received, s.Sent, s.DroppedLoss)
	// Output:
	// first: "datagram 0" from 198.18.0.1:4793
	// at 1ms: received 0 early, 899 of 1000 on time, 101 lost
}
