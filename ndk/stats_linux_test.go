package ndk

import (
	"testing"
)

// The AF_XDP parts of the view: every counter of the socket, the XDP program and the
// next-hop table is mapped, exactly once.
func TestStatsMapDeviceCounters(t *testing.T) {
	mapsEveryCounter(t, "xsk.Statistics", socketStats)
	mapsEveryCounter(t, "bpf.Counters", steeringStats)
	mapsEveryCounter(t, "nexthop.NeighbourStats", neighbourStats)
}

// Over AF_XDP between two namespace hosts, the view shows each queue's socket, the XDP
// program's verdicts and the next-hop table, and its counters follow the traffic.
func TestStatsAFXDP(t *testing.T) {
	k := linkKinds()[1]
	if k.name != "afxdp" {
		t.Fatalf("link kind %q", k.name)
	}
	p := newPair(t, k, pairOpts{})
	s0 := p.B.a.Stats()
	const n, size = 50, 2000
	writes(t, p, n, size)
	b := p.B.qp.Stats()
	if b.RxPackets != n || b.RxBytes != n*size {
		t.Errorf("B received %d packets, %d bytes; want %d, %d", b.RxPackets, b.RxBytes, n, n*size)
	}
	s := p.B.a.Stats()
	if len(s.Queues) != len(p.B.a.Device().Queues()) || len(s.Queues) == 0 {
		t.Fatalf("queues %+v, the device serves %v", s.Queues, p.B.a.Device().Queues())
	}
	for i, q := range s.Queues {
		if q.Socket == nil || q.Queue != p.B.a.Device().Queues()[i] {
			t.Errorf("queue %d: %+v", i, q)
		}
	}
	if s.Socket == nil || s.Steering == nil || s.Neighbours == nil {
		t.Fatalf("an adapter from Open has sockets, a program, a next-hop table: %+v", s)
	}
	if got := s.Steering.Redirected - s0.Steering.Redirected; got < n {
		t.Errorf("the XDP program redirected %d datagrams during %d Writes", got, n)
	}
	if got := s.Link.RxPackets - s0.Link.RxPackets; got < n || s.Engine.RxDatagrams-s0.Engine.RxDatagrams < n {
		t.Errorf("link received %d datagrams, engine %d, during %d Writes", got, s.Engine.RxDatagrams-s0.Engine.RxDatagrams, n)
	}
	if m := s.Memory; m.UMEMSize <= 0 || m.Frames < 1 || m.HeapSize != DefaultHeapSize || m.Regions != 1 {
		t.Errorf("memory %+v", m)
	}
	// After Close the kernel's counters are gone; the rest stays readable.
	final := p.B.qp.Stats()
	vanish(p.B.a)
	after := p.B.a.Stats()
	if after.Steering != nil || after.Socket != nil || after.QPs.RxPackets != final.RxPackets {
		t.Errorf("after Close: steering %+v, socket %+v, QP totals %+v", after.Steering, after.Socket, after.QPs)
	}
}
