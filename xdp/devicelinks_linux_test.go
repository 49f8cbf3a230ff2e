package xdp

import (
	"fmt"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/transport/link"
)

// DeviceLinks splits a 4-queue device into two links that share no queue (queues 0 and 2,
// 1 and 3), each sending only on its own queues and receiving only from them: on veth a
// flow that A's link k sends arrives on one of B's link k's queues, none on the other
// link's, and each link gives every frame back to its own queue.
func TestDeviceLinksSplit(t *testing.T) {
	const queues = 4
	bed := testbed.NewT(t, testbed.Options{Queues: queues})
	cfg := Config{RingSize: 256, Frames: 512}
	a, b := openOn(t, bed.A, cfg), openOn(t, bed.B, cfg)
	resolvePair(t, a.Links()[0], b.Links()[0])
	la, lb := a.DeviceLinks(2), b.DeviceLinks(2)
	if len(la) != 2 || len(lb) != 2 {
		t.Fatalf("%d and %d links, want 2 each", len(la), len(lb))
	}
	for i, want := range [][]int{{0, 2}, {1, 3}} {
		if got := lb[i].Queues(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("link %d serves queues %v, want %v", i, got, want)
		}
	}
	if n := len(a.DeviceLinks(9)); n != queues {
		t.Errorf("DeviceLinks(9) on %d queues made %d links", queues, n)
	}
	if n := len(a.DeviceLinks(0)); n != 1 {
		t.Errorf("DeviceLinks(0) made %d links, want 1", n)
	}

	const flows, perFlow = 16, 4
	dst := lb[0].LocalAddr()
	sent := [2]int{}
	for k := range 2 {
		for f := range flows {
			for s := range perFlow {
				pk := []link.Packet{{Remote: dst, LocalPort: uint16(50000 + 100*k + f)}}
				pk[0].SetData([]byte(fmt.Sprintf("%d/%d/%d", k, f, s)))
				if n, err := la[k].Send(pk); n != 1 || err != nil {
					t.Fatalf("send: %d, %v", n, err)
				}
				sent[k]++
			}
		}
	}
	var pkts [64]link.Packet
	for k := range 2 {
		got := 0
		for deadline := time.Now().Add(10 * time.Second); got < sent[k] && time.Now().Before(deadline); {
			n, err := lb[k].Receive(pkts[:])
			if err != nil {
				t.Fatal(err)
			}
			for i := range pkts[:n] {
				var from, f, s int
				if _, err := fmt.Sscanf(string(pkts[i].Segs[0]), "%d/%d/%d", &from, &f, &s); err != nil {
					t.Fatalf("datagram %q: %v", pkts[i].Segs[0], err)
				}
				if from != k {
					t.Fatalf("B's link %d received a datagram A's link %d sent", k, from)
				}
			}
			got += n
			if n > 0 {
				lb[k].Release(pkts[:n])
			} else if err := lb[k].Wait(10 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		if got != sent[k] {
			t.Fatalf("link %d received %d of %d", k, got, sent[k])
		}
	}
	for q, l := range a.Links() {
		if st := l.Stats(); st.TxPackets == 0 {
			t.Errorf("A's queue %d sent nothing: flows did not spread over the link's queues", q)
		}
	}
	framesHome(t, b, cfg.Frames)
}
