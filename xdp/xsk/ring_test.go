package xsk

import (
	"testing"
)

// ringPair returns two views of one ring in plain memory: ours and a simulated kernel's on
// the other side.
func ringPair(size uint32) (us, kernel *ring) {
	var prod, cons, flags uint32
	us = &ring{producer: &prod, consumer: &cons, flags: &flags, size: size, mask: size - 1}
	kernel = &ring{producer: &prod, consumer: &cons, flags: &flags, size: size, mask: size - 1}
	return us, kernel
}

func TestRingProducerConsumer(t *testing.T) {
	const size = 8
	prod, cons := ringPair(size)
	entries := make([]uint64, size)
	next, want := uint64(0), uint64(0)
	// Many rounds so the free-running indices wrap the ring many times.
	for round := range 100 {
		n := prod.free(5)
		if n > 5 {
			t.Fatalf("round %d: free(5) = %d", round, n)
		}
		i := prod.reserve(n)
		for k := range n {
			entries[(i+k)&prod.mask] = next
			next++
		}
		prod.submit()
		got := cons.available(size)
		if got != uint32(next-want) {
			t.Fatalf("round %d: available %d, want %d", round, got, next-want)
		}
		// Consume all but one, leaving the ring partly full across rounds.
		take := got
		if take > 1 {
			take--
		}
		j := cons.peek(take)
		for k := range take {
			if v := entries[(j+k)&cons.mask]; v != want {
				t.Fatalf("round %d: entry %d, want %d", round, v, want)
			}
			want++
		}
		cons.release()
	}
}

func TestRingFullAndEmpty(t *testing.T) {
	prod, cons := ringPair(4)
	if n := cons.available(4); n != 0 {
		t.Fatalf("empty ring has %d available", n)
	}
	if n := prod.free(10); n != 4 {
		t.Fatalf("free(10) on an empty ring of 4 = %d", n)
	}
	prod.reserve(4)
	prod.submit()
	if n := prod.free(1); n != 0 {
		t.Fatalf("full ring has %d free", n)
	}
	if p := prod.pending(); p != 4 {
		t.Fatalf("pending = %d, want 4", p)
	}
	cons.peek(cons.available(4))
	cons.unpeek(1)
	cons.release()
	if n := prod.free(4); n != 3 {
		t.Fatalf("after consuming 3, free = %d", n)
	}
	if n := cons.available(4); n != 1 {
		t.Fatalf("after unpeek(1), available = %d", n)
	}
}

func TestRingNeedWakeup(t *testing.T) {
	us, kernel := ringPair(4)
	if us.needWakeup() {
		t.Fatal("flag clear, needWakeup true")
	}
	*kernel.flags = ringNeedWakeup
	if !us.needWakeup() {
		t.Fatal("flag set, needWakeup false")
	}
}

func TestRingNoAllocs(t *testing.T) {
	prod, cons := ringPair(64)
	if n := testing.AllocsPerRun(1000, func() {
		prod.reserve(prod.free(8))
		prod.submit()
		cons.peek(cons.available(8))
		cons.release()
	}); n != 0 {
		t.Fatalf("ring operations allocate %v times", n)
	}
}

func TestSocketConfigRejected(t *testing.T) {
	for _, c := range []SocketConfig{
		{IfIndex: 0},
		{IfIndex: 1, Queue: -1},
		{IfIndex: 1, RxSize: 1000},
		{IfIndex: 1, TxSize: 1 << 21},
		{IfIndex: 1, Bind: BindMode(9)},
		{IfIndex: 1, MultiBuffer: MultiBuffer(-1)},
	} {
		if err := c.normalize(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

func TestSocketModeString(t *testing.T) {
	for m, want := range map[SocketMode]string{
		{}:                                  "copy",
		{ZeroCopy: true, MultiBuffer: true}: "zerocopy+sg",
		{NeedWakeup: true, TxBudget: 64}:    "copy+need_wakeup+tx_budget=64",
	} {
		if got := m.String(); got != want {
			t.Errorf("%+v: %q, want %q", m, got, want)
		}
	}
}
