package ack

import (
	"testing"

	"github.com/xdpndk/xdpndk/transport/wire"
)

// TestReceiveTrackerGrows: a tracker starts with initialBits of ring whatever its window,
// doubles it when a PSN of the window arrives beyond it, keeps every arrival across the
// move (the stream wrapping), and still refuses past the window.
func TestReceiveTrackerGrows(t *testing.T) {
	const initial = wire.PSN(1<<32 - 700)
	tr := NewReceiveTracker(initial, 65536)
	if len(tr.words)*64 != initialBits || tr.Window() != 65536 {
		t.Fatalf("%d bits, window %d", len(tr.words)*64, tr.Window())
	}
	arrived := []uint32{1, 5, 63, 64, 900, 1023}
	for _, d := range arrived {
		if v := tr.Receive(initial.Add(d)); v != New {
			t.Fatalf("Receive(+%d) = %v", d, v)
		}
	}
	if len(tr.words)*64 != initialBits {
		t.Fatalf("grew early: %d bits", len(tr.words)*64)
	}
	if v := tr.Check(initial.Add(5000)); v != New {
		t.Fatalf("Check beyond the ring = %v, want New", v)
	}
	if v := tr.Receive(initial.Add(5000)); v != New || len(tr.words)*64 != 8192 {
		t.Fatalf("Receive(+5000) = %v, %d bits", v, len(tr.words)*64)
	}
	for _, d := range append(arrived, 5000) {
		if v := tr.Check(initial.Add(d)); v != Duplicate {
			t.Fatalf("after growing, Check(+%d) = %v, want Duplicate", d, v)
		}
	}
	for _, d := range []uint32{0, 2, 62, 65, 1024, 4999, 5001} {
		if v := tr.Check(initial.Add(d)); v != New {
			t.Fatalf("after growing, Check(+%d) = %v, want New", d, v)
		}
	}
	if v := tr.Receive(initial.Add(65536)); v != TooNew || len(tr.words)*64 != 8192 {
		t.Fatalf("Receive(+65536) = %v, %d bits", v, len(tr.words)*64)
	}
	if sack := tr.SACK(); sack != 1|1<<4|1<<62|1<<63 {
		t.Fatalf("SACK %#x", sack)
	}
	tr.Receive(initial)
	tr.Receive(initial.Add(2))
	tr.Receive(initial.Add(3))
	tr.Receive(initial.Add(4))
	if tr.Cumulative() != initial.Add(6) {
		t.Fatalf("Cumulative +%d, want +6", tr.Cumulative().Sub(initial))
	}
}
