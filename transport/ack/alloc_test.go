package ack

import (
	"testing"

	"github.com/xdpndk/xdpndk/transport/wire"
)

// The hot-path methods allocate nothing after construction.
func TestNoAllocs(t *testing.T) {
	r := NewReceiveTracker(wire.PSN(1<<32-100), 1024)
	var psn wire.PSN = 1<<32 - 100
	if n := testing.AllocsPerRun(1000, func() {
		// a hole filled three packets later, across the wrap
		r.Receive(psn.Add(1))
		r.Receive(psn.Add(2))
		r.Receive(psn)
		r.Receive(psn) // duplicate
		_ = r.Check(psn.Add(3))
		_ = r.SACK()
		_ = r.Cumulative()
		_ = r.HasGap()
		psn = psn.Add(3)
	}); n != 0 {
		t.Errorf("ReceiveTracker: %v allocs per run", n)
	}

	h := NewSentHistory[uint64](1<<32-50, 256)
	acked := make([]PacketInfo[uint64], 0, 256)
	lost := make([]PacketInfo[uint64], 0, 256)
	unacked := make([]PacketInfo[uint64], 0, 256)
	next := wire.PSN(1<<32 - 50)
	var now int64
	if n := testing.AllocsPerRun(1000, func() {
		for i := 0; i < 8; i++ {
			now += 1000
			h.OnSent(PacketInfo[uint64]{PSN: next, Bytes: 1500, SentAt: now, Owner: uint64(next)})
			next = next.Add(1)
		}
		// the oldest of the 8 is missing, the rest SACKed; then it is found lost,
		// retransmitted and acknowledged
		base := next - 8
		acked, _ = h.OnAck(base, 0x7f, now+50_000, acked[:0])
		lost = h.DetectLost(now+50_000, 0, lost[:0])
		h.OnRetransmitted(base, now+50_000)
		_, _ = h.Oldest()
		_, _ = h.Lookup(base)
		_, _ = h.InFlight()
		_, _ = h.LossTime()
		unacked = h.Unacked(unacked[:0])
		acked, _ = h.OnAck(next, 0, now+100_000, acked[:0])
	}); n != 0 {
		t.Errorf("SentHistory: %v allocs per run", n)
	}
	if len(lost) != 1 {
		t.Fatalf("scenario broken: lost %d", len(lost))
	}

	rto := NewRTO(RTOConfig{})
	if n := testing.AllocsPerRun(1000, func() {
		rto.Sample(50_000)
		rto.Backoff()
		_ = rto.Timeout()
		rto.ResetBackoff()
	}); n != 0 {
		t.Errorf("RTO: %v allocs per run", n)
	}
}
