package simlink

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/xdpndk/xdpndk/transport/link"
)

// A host of several queues: with SteerSenderQueue a datagram from queue q arrives on the
// peer's queue q (a host of one queue sends from queue 0); with SteerFlowHash where it
// arrives depends on the sender's port alone, and the flows of many ports use every queue.
// Every queue receives at the host's address and may send; a partition drops what is in
// flight to every queue.
func TestAddQueues(t *testing.T) {
	clk := NewManualClock(0)
	n := NewNetwork(Config{Clock: clk})
	addrA := netip.MustParseAddrPort("198.18.0.1:4793")
	addrB := netip.MustParseAddrPort("198.18.0.2:4793")
	addrC := netip.MustParseAddrPort("198.18.0.3:4793")
	qa, err := n.AddQueues(addrA, 2, SteerSenderQueue)
	if err != nil {
		t.Fatal(err)
	}
	qb, err := n.AddQueues(addrB, 2, SteerSenderQueue)
	if err != nil {
		t.Fatal(err)
	}
	c, err := n.AddQueues(addrC, 4, SteerFlowHash)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.AddQueues(addrA, 2, SteerSenderQueue); err == nil {
		t.Fatal("AddQueues on an address in use succeeded")
	}
	if _, err := n.AddQueues(netip.MustParseAddrPort("198.18.0.9:1"), 0, SteerSenderQueue); err == nil {
		t.Fatal("AddQueues of 0 queues succeeded")
	}
	send := func(from *Link, to netip.AddrPort, port uint16, data string) {
		t.Helper()
		p := []link.Packet{{Remote: to, LocalPort: port}}
		p[0].SetData([]byte(data))
		if k, err := from.Send(p); k != 1 || err != nil {
			t.Fatalf("send: %d %v", k, err)
		}
	}
	recv := func(l *Link) []string {
		var pk [16]link.Packet
		k, err := l.Receive(pk[:])
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for i := range pk[:k] {
			if pk[i].Remote.Addr() == (netip.Addr{}) || pk[i].LocalPort != 4793 {
				t.Fatalf("addresses %v :%d", pk[i].Remote, pk[i].LocalPort)
			}
			out = append(out, string(pk[i].Segs[0]))
		}
		l.Release(pk[:k])
		return out
	}
	for q := range 2 {
		for p := range 8 {
			send(qa[q], addrB, uint16(40000+p), fmt.Sprint(q))
		}
	}
	for q := range 2 {
		got := recv(qb[q])
		if len(got) != 8 {
			t.Fatalf("B's queue %d received %v, want A's queue %d's 8", q, got, q)
		}
		for _, g := range got {
			if g != fmt.Sprint(q) {
				t.Fatalf("B's queue %d received from A's queue %s", q, g)
			}
		}
	}
	// Flow hash: the same port always lands on the same queue, whichever queue sends.
	perQueue := make([]int, len(c))
	for p := range 64 {
		send(qa[p%2], addrC, uint16(50000+p), fmt.Sprint(p))
		send(qb[(p+1)%2], addrC, uint16(50000+p), fmt.Sprint(p))
		want := int(flowHash(addrA.Addr(), uint16(50000+p)) % 4)
		got := recv(c[want])
		if len(got) != 1 || got[0] != fmt.Sprint(p) {
			t.Fatalf("port %d: queue %d received %v", p, want, got)
		}
		if got := recv(c[int(flowHash(addrB.Addr(), uint16(50000+p))%4)]); len(got) != 1 {
			t.Fatalf("port %d from B: %v", p, got)
		}
		perQueue[want]++
	}
	for q, k := range perQueue {
		if k == 0 {
			t.Errorf("flow hash left queue %d unused (%v)", q, perQueue)
		}
	}
	// A partition drops what is in flight to every queue.
	if err := n.SetDefault(Impairments{Latency: 1000}); err != nil {
		t.Fatal(err)
	}
	for q := range 2 {
		send(qa[q], addrB, 40000, "late")
	}
	n.Partition(addrA, addrB)
	clk.Advance(2000)
	for q := range 2 {
		if got := recv(qb[q]); len(got) != 0 {
			t.Fatalf("queue %d received %v across a partition", q, got)
		}
	}
	if s := n.PathStats(addrA, addrB); s.DroppedPartition != 2 {
		t.Fatalf("dropped by the partition: %d, want 2", s.DroppedPartition)
	}
	if qb[1].Queue() != 1 || qa[0].Queue() != 0 {
		t.Fatalf("queue indices %d %d", qb[1].Queue(), qa[0].Queue())
	}
	n.Close()
}
