package ack

import (
	"testing"

	"github.com/xdpndk/xdpndk/transport/wire"
)

const benchStart = wire.PSN(1<<32 - 1000) // every benchmark crosses the wrap early

func BenchmarkReceiveTracker(b *testing.B) {
	b.Run("InOrder", func(b *testing.B) {
		b.ReportAllocs()
		r := NewReceiveTracker(benchStart, 1024)
		psn := benchStart
		for b.Loop() {
			r.Receive(psn)
			psn++
		}
	})
	// One packet in 100 is missing and arrives 10 packets later (as its retransmission
	// would): every block of 100 arrives as offsets 1..10, 0, 11..99.
	b.Run("Gaps1pct", func(b *testing.B) {
		b.ReportAllocs()
		var order [100]uint32
		for i := range order {
			switch {
			case i < 10:
				order[i] = uint32(i + 1)
			case i == 10:
				order[i] = 0
			default:
				order[i] = uint32(i)
			}
		}
		r := NewReceiveTracker(benchStart, 1024)
		base, i := benchStart, 0
		for b.Loop() {
			if r.Receive(base.Add(order[i])) != New {
				b.Fatal("not new")
			}
			if i++; i == len(order) {
				i, base = 0, base.Add(100)
			}
		}
	})
	// The same, plus building the ack fields after every packet.
	b.Run("Gaps1pctWithAck", func(b *testing.B) {
		b.ReportAllocs()
		r := NewReceiveTracker(benchStart, 1024)
		base, i := benchStart, uint32(0)
		var sink uint64
		for b.Loop() {
			off := i
			switch {
			case i < 10:
				off = i + 1
			case i == 10:
				off = 0
			}
			r.Receive(base.Add(off))
			sink += r.SACK() + uint64(r.Cumulative())
			if i++; i == 100 {
				i, base = 0, base.Add(100)
			}
		}
		_ = sink
	})
}

func BenchmarkSentHistory(b *testing.B) {
	// One OnSent and one cumulative OnAck per packet, 64 packets in flight.
	b.Run("OnSentOnAck", func(b *testing.B) {
		b.ReportAllocs()
		h := NewSentHistory[uint64](benchStart, 1024)
		acked := make([]PacketInfo[uint64], 0, 1024)
		next := benchStart
		var now int64
		for range 64 {
			h.OnSent(PacketInfo[uint64]{PSN: next, Bytes: 1500, SentAt: now})
			next++
		}
		for b.Loop() {
			now += 100
			h.OnSent(PacketInfo[uint64]{PSN: next, Bytes: 1500, SentAt: now})
			next++
			acked, _ = h.OnAck(next-64, 0, now, acked[:0])
		}
	})
	// Per packet, with an ack coalesced every 8 packets, DetectLost after each ack, and in
	// every 12th ack one packet missing (about 1% loss), SACKed around, found lost and
	// retransmitted.
	b.Run("OnSentCoalescedAckDetectLost", func(b *testing.B) {
		b.ReportAllocs()
		h := NewSentHistory[uint64](benchStart, 1024)
		acked := make([]PacketInfo[uint64], 0, 1024)
		lost := make([]PacketInfo[uint64], 0, 1024)
		next := benchStart
		var now int64
		blocks := 0
		for b.Loop() {
			now += 100
			h.OnSent(PacketInfo[uint64]{PSN: next, Bytes: 1500, SentAt: now})
			next++
			if h.Len() < 72 || uint32(next)%8 != 0 {
				continue
			}
			// The peer has everything up to 64 behind, except a hole in every 12th block.
			ackPSN := next - 64
			if blocks++; blocks%12 == 0 {
				acked, _ = h.OnAck(ackPSN, 0xff, now, acked[:0]) // ackPSN missing, 8 after it SACKed
				lost = h.DetectLost(now, 0, lost[:0])
				for _, p := range lost {
					h.OnRetransmitted(p.PSN, now)
				}
				continue
			}
			acked, _ = h.OnAck(ackPSN, 0, now, acked[:0])
			lost = h.DetectLost(now, 0, lost[:0])
		}
		if st := h.Stats(); blocks >= 12 && (st.Lost == 0 || st.Lost != st.Retransmitted) {
			b.Fatalf("scenario broken: %+v", st)
		}
	})
}
