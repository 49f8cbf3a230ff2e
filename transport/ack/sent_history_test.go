package ack

import (
	"math"
	"slices"
	"testing"

	"github.com/xdpndk/xdpndk/transport/wire"
)

const top = wire.PSN(math.MaxUint32) // the last PSN before the wrap

// sendN records n first transmissions from initial: packet i has PSN initial+i, Bytes
// 100+i, SentAt 1000+10*i and Tag i.
func sendN(t *testing.T, h *SentHistory[uint64], initial wire.PSN, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		p := PacketInfo[uint64]{PSN: initial.Add(uint32(i)), Bytes: 100 + i, SentAt: 1000 + 10*int64(i), Owner: uint64(i)}
		if !h.OnSent(p) {
			t.Fatalf("OnSent(%d) refused", p.PSN)
		}
	}
}

func psns(ps []PacketInfo[uint64]) []wire.PSN {
	out := make([]wire.PSN, len(ps))
	for i, p := range ps {
		out[i] = p.PSN
	}
	return out
}

type ackStep struct {
	ack  wire.PSN
	sack uint64
	now  int64
	want []wire.PSN // newly acknowledged, in order
	rtt  int64
}

func TestSentHistoryOnAck(t *testing.T) {
	for _, tc := range []struct {
		name     string
		initial  wire.PSN
		n        int
		acks     []ackStep
		inflight int
		stats    Stats
	}{
		{
			name: "cumulative in order", initial: 100, n: 5,
			acks: []ackStep{
				{ack: 102, now: 2000, want: []wire.PSN{100, 101}, rtt: 2000 - 1010},
				{ack: 105, now: 3000, want: []wire.PSN{102, 103, 104}, rtt: 3000 - 1040},
			},
			stats: Stats{Acks: 2, Acked: 5},
		},
		{
			name: "cumulative across the wrap", initial: top - 1, n: 5,
			acks: []ackStep{
				{ack: 1, now: 2000, want: []wire.PSN{top - 1, top, 0}, rtt: 2000 - 1020},
			},
			inflight: 2,
			stats:    Stats{Acks: 1, Acked: 3},
		},
		{
			name: "SACK with holes", initial: 10, n: 10,
			acks: []ackStep{
				// bit i is 11+i: 12, 13, 15 arrived, 10, 11, 14 missing
				{ack: 10, sack: 1<<1 | 1<<2 | 1<<4, now: 2000, want: []wire.PSN{12, 13, 15}, rtt: 2000 - 1050},
				{ack: 11, sack: 1<<0 | 1<<1 | 1<<3, now: 2100, want: []wire.PSN{10}, rtt: 2100 - 1000},
				{ack: 14, sack: 1 << 0, now: 2200, want: []wire.PSN{11}, rtt: 2200 - 1010},
			},
			inflight: 5, // 14, 16..19
			stats:    Stats{Acks: 3, Acked: 5},
		},
		{
			name: "SACK with holes across the wrap", initial: top - 2, n: 6,
			acks: []ackStep{
				// bit i is top-1+i: top-1 (bit 0), 0 (bit 2), 2 (bit 4)
				{ack: top - 2, sack: 1<<0 | 1<<2 | 1<<4, now: 5000, want: []wire.PSN{top - 1, 0, 2}, rtt: 5000 - 1050},
				{ack: 1, now: 5000, want: []wire.PSN{top - 2, top}, rtt: 5000 - 1020},
			},
			inflight: 1, // PSN 1
			stats:    Stats{Acks: 2, Acked: 5},
		},
		{
			name: "duplicate ack", initial: 0, n: 4,
			acks: []ackStep{
				{ack: 2, now: 2000, want: []wire.PSN{0, 1}, rtt: 2000 - 1010},
				{ack: 2, now: 2100},
				{ack: 2, sack: 0, now: 2200},
			},
			inflight: 2,
			stats:    Stats{Acks: 3, DuplicateAcks: 2, Acked: 2},
		},
		{
			name: "reordered ack: an older one after a newer one", initial: 0, n: 6,
			acks: []ackStep{
				{ack: 4, now: 2000, want: []wire.PSN{0, 1, 2, 3}, rtt: 2000 - 1030},
				{ack: 2, sack: 1 << 0, now: 2100}, // says 3 arrived: known
				// an older ack still carrying news: 5 arrived (bit i is 3+i)
				{ack: 2, sack: 1 << 2, now: 2200, want: []wire.PSN{5}, rtt: 2200 - 1050},
			},
			inflight: 1,
			stats:    Stats{Acks: 3, DuplicateAcks: 1, StaleAcks: 2, Acked: 5},
		},
		{
			name: "forged cumulative ack beyond NextPSN changes nothing", initial: 0, n: 3,
			acks: []ackStep{
				{ack: 4, sack: 1, now: 2000},
				{ack: 1 << 31, now: 2000},                                        // half the PSN space away
				{ack: 3, now: 2100, want: []wire.PSN{0, 1, 2}, rtt: 2100 - 1020}, // NextPSN itself is fine
			},
			stats: Stats{Acks: 3, InvalidAcks: 2, Acked: 3},
		},
		{
			name: "forged SACK bits beyond NextPSN ignored bit by bit", initial: 0, n: 3,
			acks: []ackStep{
				// bit 0 is PSN 2 (sent), bits 1..63 are 3..65 (never sent)
				{ack: 1, sack: math.MaxUint64, now: 2000, want: []wire.PSN{0, 2}, rtt: 2000 - 1020},
			},
			inflight: 1,
			stats:    Stats{Acks: 1, Acked: 2, IgnoredSACKBits: 63},
		},
		{
			name: "forged acks across the wrap", initial: top, n: 2,
			acks: []ackStep{
				{ack: 2, now: 2000}, // NextPSN is 1
				{ack: top - 1000, sack: math.MaxUint64, now: 2000},                    // far behind: stale, bits name old PSNs
				{ack: top, sack: 1 << 1, now: 2000},                                   // bit 1 is PSN 1: never sent
				{ack: top, sack: 1, now: 2000, want: []wire.PSN{0}, rtt: 2000 - 1010}, // bit 0 is PSN 0
			},
			inflight: 1,
			stats:    Stats{Acks: 4, InvalidAcks: 1, StaleAcks: 1, DuplicateAcks: 2, IgnoredSACKBits: 1, Acked: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewSentHistory[uint64](tc.initial, 64)
			sendN(t, h, tc.initial, tc.n)
			var buf []PacketInfo[uint64]
			for i, a := range tc.acks {
				var rtt int64
				buf, rtt = h.OnAck(a.ack, a.sack, a.now, buf[:0])
				if got := psns(buf); !slices.Equal(got, a.want) && (len(got) != 0 || len(a.want) != 0) {
					t.Errorf("ack %d (%d, %#x): acked %v, want %v", i, a.ack, a.sack, got, a.want)
				}
				if rtt != a.rtt {
					t.Errorf("ack %d: rtt %d, want %d", i, rtt, a.rtt)
				}
				for _, p := range buf {
					if i := uint32(p.PSN.Sub(tc.initial)); p.Bytes != 100+int(i) || p.Owner != uint64(i) || p.SentAt != 1000+10*int64(i) {
						t.Errorf("acked packet %+v does not match what was sent", p)
					}
				}
			}
			if n, _ := h.InFlight(); n != tc.inflight {
				t.Errorf("InFlight = %d packets, want %d", n, tc.inflight)
			}
			if got := h.Stats(); got != tc.stats {
				t.Errorf("Stats = %+v\nwant    %+v", got, tc.stats)
			}
			if h.NextPSN() != tc.initial.Add(uint32(tc.n)) {
				t.Errorf("NextPSN = %d, want %d", h.NextPSN(), tc.initial.Add(uint32(tc.n)))
			}
		})
	}
}

func TestSentHistoryAckBeforeSend(t *testing.T) {
	h := NewSentHistory[uint64](top-5, 8)
	if h.NextPSN() != top-5 {
		t.Fatalf("NextPSN before the first send = %d, want the initial PSN", h.NextPSN())
	}
	// AckPSN = NextPSN: valid but acknowledges nothing; every SACK bit names a PSN never sent.
	acked, rtt := h.OnAck(top-5, math.MaxUint64, 100, nil)
	if len(acked) != 0 || rtt != 0 {
		t.Fatalf("ack before any send: acked %v rtt %d", acked, rtt)
	}
	acked, _ = h.OnAck(top-4, 0, 100, acked) // beyond NextPSN
	if want := (Stats{Acks: 2, DuplicateAcks: 1, InvalidAcks: 1, IgnoredSACKBits: 64}); h.Stats() != want || len(acked) != 0 {
		t.Fatalf("stats %+v, want %+v", h.Stats(), want)
	}
	if _, ok := h.Oldest(); ok {
		t.Fatal("Oldest on an empty history")
	}
	if _, ok := h.Lookup(top - 5); ok {
		t.Fatal("Lookup on an empty history")
	}
	if lost := h.DetectLost(100, 0, nil); len(lost) != 0 {
		t.Fatalf("DetectLost on an empty history: %v", lost)
	}
	h.OnRetransmitted(top-5, 100) // nothing to retransmit: ignored
	if h.Stats().Retransmitted != 0 || h.NextPSN() != top-5 {
		t.Fatalf("stats %+v next %d", h.Stats(), h.NextPSN())
	}
}

func TestSentHistoryOnSent(t *testing.T) {
	h := NewSentHistory[uint64](top-1, 8)
	for _, p := range []wire.PSN{0, top, top - 2} { // not the initial PSN
		if h.OnSent(PacketInfo[uint64]{PSN: p}) {
			t.Errorf("OnSent(%d) accepted, NextPSN is %d", p, h.NextPSN())
		}
	}
	if !h.OnSent(PacketInfo[uint64]{PSN: top - 1, Bytes: 10}) {
		t.Fatal("first packet refused")
	}
	if h.NextPSN() != top {
		t.Fatalf("NextPSN = %d", h.NextPSN())
	}
	for _, p := range []wire.PSN{top - 1, top - 2, 0, 5, 1 << 31} { // repeats and gaps
		if h.OnSent(PacketInfo[uint64]{PSN: p}) {
			t.Errorf("OnSent(%d) accepted, NextPSN is %d", p, h.NextPSN())
		}
	}
	if !h.OnSent(PacketInfo[uint64]{PSN: top, Bytes: 20}) || !h.OnSent(PacketInfo[uint64]{PSN: 0, Bytes: 30}) {
		t.Fatal("contiguous packets across the wrap refused")
	}
	if n, b := h.InFlight(); n != 3 || b != 60 || h.Len() != 3 || h.NextPSN() != 1 {
		t.Fatalf("InFlight %d/%d Len %d NextPSN %d", n, b, h.Len(), h.NextPSN())
	}
	// Everything acknowledged: the next packet still has to be NextPSN.
	h.OnAck(1, 0, 5000, nil)
	if h.OnSent(PacketInfo[uint64]{PSN: 7}) || !h.OnSent(PacketInfo[uint64]{PSN: 1}) {
		t.Fatal("after a full ack: wrong PSN accepted or NextPSN refused")
	}
}

func TestSentHistoryLookupReset(t *testing.T) {
	h := NewSentHistory[uint64](top-1, 16)
	sendN(t, h, top-1, 6)         // top-1 .. 3
	h.OnAck(top, 1<<1, 2000, nil) // top-1 and 1 acknowledged
	for _, tc := range []struct {
		psn wire.PSN
		ok  bool
	}{{top - 2, false}, {top - 1, false}, {top, true}, {0, true}, {1, false}, {3, true}, {4, false}, {1 << 31, false}} {
		p, ok := h.Lookup(tc.psn)
		if ok != tc.ok || ok && (p.PSN != tc.psn || p.Owner != uint64(tc.psn.Sub(top-1))) {
			t.Errorf("Lookup(%d) = %+v %v, want found %v", tc.psn, p, ok, tc.ok)
		}
	}
	h.OnAck(top, 1<<3, 2000, nil) // 3 arrived: top and 0 lost by the packet threshold
	if lost := h.DetectLost(2000, 1e9, nil); len(lost) != 2 {
		t.Fatalf("lost %v", psns(lost))
	}
	h.Reset()
	if n, b := h.InFlight(); n != 0 || b != 0 || h.Len() != 0 || h.NextPSN() != 4 {
		t.Fatalf("after Reset: InFlight %d/%d Len %d NextPSN %d", n, b, h.Len(), h.NextPSN())
	}
	if n, _ := h.Lost(); n != 0 {
		t.Fatalf("after Reset: Lost %d", n)
	}
	if _, ok := h.Oldest(); ok {
		t.Fatal("after Reset: Oldest found")
	}
	if _, ok := h.Lookup(0); ok {
		t.Fatal("after Reset: Lookup found a forgotten packet")
	}
	// Acks for the forgotten PSNs change nothing; the stream goes on from NextPSN.
	acked, _ := h.OnAck(4, math.MaxUint64, 3000, nil)
	if len(acked) != 0 {
		t.Fatalf("ack after Reset acknowledged %v", psns(acked))
	}
	if h.OnSent(PacketInfo[uint64]{PSN: 0}) || !h.OnSent(PacketInfo[uint64]{PSN: 4, SentAt: 3000}) {
		t.Fatal("after Reset: OnSent wrong")
	}
	if lost := h.DetectLost(1e12, 0, nil); len(lost) != 0 {
		t.Fatalf("after Reset: lost %v", psns(lost))
	}
	if acked, _ = h.OnAck(5, 0, 3100, acked); len(acked) != 1 || acked[0].PSN != 4 {
		t.Fatalf("after Reset: acked %v", psns(acked))
	}
}

func TestSentHistoryFull(t *testing.T) {
	h := NewSentHistory[uint64](top-2, 5) // ring of 8 slots, 5 usable
	if h.Cap() != 5 {
		t.Fatalf("Cap = %d", h.Cap())
	}
	sendN(t, h, top-2, 5)
	if !h.Full() || h.OnSent(PacketInfo[uint64]{PSN: h.NextPSN()}) {
		t.Fatal("sixth packet accepted in a history of 5")
	}
	// Selective acks do not free the front of the ring.
	acked, _ := h.OnAck(top-2, 0b1111, 3000, nil)
	if len(acked) != 4 || !h.Full() || h.Len() != 5 {
		t.Fatalf("after SACK of 4: acked %d Full %v Len %d", len(acked), h.Full(), h.Len())
	}
	if n, b := h.InFlight(); n != 1 || b != 100 {
		t.Fatalf("InFlight %d/%d, want 1/100", n, b)
	}
	// Filling the hole frees all of it.
	acked, _ = h.OnAck(top-1, 0, 3100, acked[:0])
	if psns(acked)[0] != top-2 || len(acked) != 1 || h.Full() || h.Len() != 0 {
		t.Fatalf("after the cumulative ack: acked %v Full %v Len %d", psns(acked), h.Full(), h.Len())
	}
	for i := 0; i < 5; i++ {
		if !h.OnSent(PacketInfo[uint64]{PSN: h.NextPSN(), SentAt: 4000}) {
			t.Fatalf("refill %d refused", i)
		}
	}
	if h.OnSent(PacketInfo[uint64]{PSN: h.NextPSN()}) {
		t.Fatal("refilled history accepted one more")
	}
	for _, tc := range []struct{ in, want int }{{0, DefaultCapacity}, {-3, DefaultCapacity}, {1, 1}, {MaxCapacity + 1, MaxCapacity}} {
		if got := NewSentHistory[uint64](0, tc.in).Cap(); got != tc.want {
			t.Errorf("NewSentHistory[uint64](%d).Cap() = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestSentHistoryOldestUnacked(t *testing.T) {
	h := NewSentHistory[uint64](top-1, 16)
	sendN(t, h, top-1, 5)                // top-1, top, 0, 1, 2
	h.OnAck(top-1, 1<<0|1<<2, 2000, nil) // top and 1
	if o, ok := h.Oldest(); !ok || o.PSN != top-1 || o.Owner != 0 {
		t.Fatalf("Oldest = %+v %v", o, ok)
	}
	if got := psns(h.Unacked(nil)); !slices.Equal(got, []wire.PSN{top - 1, 0, 2}) {
		t.Fatalf("Unacked = %v", got)
	}
	h.OnAck(top, 0, 2100, nil) // acks top-1; top already: front moves to 0
	if o, ok := h.Oldest(); !ok || o.PSN != 0 || o.Bytes != 102 {
		t.Fatalf("Oldest = %+v %v", o, ok)
	}
	if n, b := h.InFlight(); n != 2 || b != 102+104 {
		t.Fatalf("InFlight %d/%d", n, b)
	}
	h.OnRetransmitted(0, 2200)
	if o, _ := h.Oldest(); o.SentAt != 2200 || o.Retransmits != 1 {
		t.Fatalf("Oldest after retransmit = %+v", o)
	}
	dst := make([]PacketInfo[uint64], 1, 8)
	if got := h.Unacked(dst); len(got) != 3 || got[1].PSN != 0 || got[2].PSN != 2 {
		t.Fatalf("Unacked appends: %v", psns(got))
	}
	h.OnAck(3, 0, 2300, nil)
	if _, ok := h.Oldest(); ok || len(h.Unacked(nil)) != 0 {
		t.Fatal("all acked: still something outstanding")
	}
}

func TestSentHistoryRetransmitAndKarn(t *testing.T) {
	h := NewSentHistory[uint64](50, 16)
	sendN(t, h, 50, 4) // 50..53 sent at 1000..1030
	h.OnRetransmitted(53, 2000)
	h.OnRetransmitted(53, 2500)
	h.OnRetransmitted(49, 2500) // never sent: ignored
	h.OnRetransmitted(54, 2500) // never sent: ignored
	if h.Stats().Retransmitted != 2 {
		t.Fatalf("Retransmitted = %d", h.Stats().Retransmitted)
	}
	// Only the retransmitted packet acknowledged: no sample.
	acked, rtt := h.OnAck(50, 1<<2, 3000, nil)
	if rtt != 0 || len(acked) != 1 || acked[0].Retransmits != 2 || acked[0].SentAt != 2500 {
		t.Fatalf("retransmitted only: rtt %d acked %+v", rtt, acked)
	}
	h.OnRetransmitted(53, 3000) // acknowledged now: ignored
	if h.Stats().Retransmitted != 2 {
		t.Fatal("retransmission of an acknowledged packet counted")
	}
	// 50 and 52 never retransmitted, 51 retransmitted: the sample comes from 52.
	h.OnRetransmitted(51, 3100)
	acked, rtt = h.OnAck(54, 0, 4000, acked[:0])
	if rtt != 4000-1020 || len(acked) != 3 {
		t.Fatalf("mixed: rtt %d acked %v", rtt, psns(acked))
	}
	if h.MinRTT() != 4000-1020 {
		t.Fatalf("MinRTT = %d", h.MinRTT())
	}
	// A sample is at least 1 ns, even with no time passed or a clock that went back.
	h.OnSent(PacketInfo[uint64]{PSN: 54, SentAt: 5000})
	h.OnSent(PacketInfo[uint64]{PSN: 55, SentAt: 5000})
	if _, rtt = h.OnAck(55, 0, 5000, nil); rtt != 1 {
		t.Fatalf("zero RTT sample = %d, want 1", rtt)
	}
	if _, rtt = h.OnAck(56, 0, 4000, nil); rtt != 1 {
		t.Fatalf("negative RTT sample = %d, want 1", rtt)
	}
	if h.MinRTT() != 1 {
		t.Fatalf("MinRTT = %d", h.MinRTT())
	}
}

// lossStep is one operation of a loss-detection scenario.
type lossStep struct {
	send     int      // > 0: send this many more packets, at now (SentAt), Bytes 100
	retx     []uint32 // retransmit these offsets from the initial PSN at now
	ack      bool     // apply ackPSN/sack at now
	ackOff   uint32   // cumulative ack: initial + ackOff
	sack     uint64
	detect   bool // run DetectLost(now, reo)
	reo      int64
	now      int64
	lost     []uint32 // detect: offsets reported lost
	lossTime int64    // detect: LossTime, -1 for none
}

func TestSentHistoryDetectLost(t *testing.T) {
	for _, tc := range []struct {
		name    string
		initial wire.PSN
		steps   []lossStep
	}{
		{
			name: "packet threshold only", initial: top - 3,
			steps: []lossStep{
				{send: 8, now: 0}, // all at 0: the time rule orders by PSN
				// offset 3 arrived: 0 is 3 behind it, 1 and 2 are not
				{ack: true, sack: 1 << 2, now: 100_000},
				{detect: true, reo: 1e9, now: 100_000, lost: []uint32{0}, lossTime: 0 + 100_000 + 1e9},
				{detect: true, reo: 1e9, now: 100_000, lossTime: 100_000 + 1e9}, // reported once
			},
		},
		{
			name: "time threshold (RACK)", initial: 7,
			steps: []lossStep{
				{send: 1, now: 0}, {send: 1, now: 10}, {send: 1, now: 20}, {send: 1, now: 30},
				{ack: true, sack: 1 << 0, now: 100}, // offset 1, sent at 10: RACK RTT 90
				{detect: true, reo: 20, now: 100, lossTime: 0 + 90 + 20},
				{detect: true, reo: 20, now: 109, lossTime: 110},
				{detect: true, reo: 20, now: 110, lost: []uint32{0}, lossTime: -1},
			},
		},
		{
			name: "time threshold with a small reordering window", initial: top,
			steps: []lossStep{
				{send: 1, now: 0}, {send: 1, now: 10}, {send: 1, now: 20}, {send: 1, now: 30},
				{ack: true, sack: 1 << 1, now: 100}, // offset 2, sent at 20: RACK RTT 80
				{detect: true, reo: 5, now: 100, lost: []uint32{0, 1}, lossTime: -1},
			},
		},
		{
			name: "lost retransmission found by a later delivery", initial: top - 1,
			steps: []lossStep{
				{send: 8, now: 0},
				{ack: true, sack: 1 << 2, now: 100_000},
				{detect: true, reo: 1e9, now: 100_000, lost: []uint32{0}, lossTime: 100_000 + 1e9},
				{retx: []uint32{0}, now: 100_000},
				// retransmitted: the packet threshold no longer applies to it
				{detect: true, reo: 1e9, now: 100_000, lossTime: 100_000 + 1e9},
				{send: 1, now: 100_100},                 // offset 8
				{ack: true, sack: 1 << 7, now: 101_000}, // 8 arrived: RACK RTT 900
				{detect: true, reo: 50, now: 101_000, lost: []uint32{0, 1, 2, 4, 5, 6, 7}, lossTime: -1},
			},
		},
		{
			name: "ack of a retransmission faster than min RTT does not move RACK", initial: 0,
			steps: []lossStep{
				{send: 1, now: 0}, {send: 1, now: 10}, {send: 1, now: 20},
				{ack: true, ackOff: 1, now: 100}, // 0 acked: min RTT 100
				{retx: []uint32{1}, now: 150},
				// acks 1 after 10 ns: that was the first transmission's ack, RACK stays at 0
				{ack: true, ackOff: 2, now: 160},
				{detect: true, reo: 0, now: 160, lossTime: -1},
			},
		},
		{
			name: "delivered retransmission: older first transmissions beyond it are lost", initial: top - 1,
			steps: []lossStep{
				{send: 1, now: 0}, {send: 1, now: 10}, {send: 1, now: 20}, {send: 1, now: 30},
				{retx: []uint32{0}, now: 1000}, // an RTO
				{ack: true, ackOff: 1, now: 1010},
				{detect: true, reo: 0, now: 1010, lost: []uint32{1, 2, 3}, lossTime: -1},
			},
		},
		{
			name: "no loss in order", initial: top - 1,
			steps: []lossStep{
				{send: 4, now: 0},
				{ack: true, ackOff: 2, now: 50},
				{detect: true, reo: 0, now: 1e9, lossTime: -1},
				{ack: true, ackOff: 4, now: 60},
				{detect: true, reo: 0, now: 1e9, lossTime: -1},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewSentHistory[uint64](tc.initial, 64)
			var buf []PacketInfo[uint64]
			sent := uint32(0)
			for i, s := range tc.steps {
				for j := 0; j < s.send; j++ {
					if !h.OnSent(PacketInfo[uint64]{PSN: tc.initial.Add(sent), Bytes: 100, SentAt: s.now}) {
						t.Fatalf("step %d: send refused", i)
					}
					sent++
				}
				for _, off := range s.retx {
					h.OnRetransmitted(tc.initial.Add(off), s.now)
				}
				if s.ack {
					h.OnAck(tc.initial.Add(s.ackOff), s.sack, s.now, nil)
				}
				if !s.detect {
					continue
				}
				buf = h.DetectLost(s.now, s.reo, buf[:0])
				var got []uint32
				for _, p := range buf {
					got = append(got, p.PSN.Sub(tc.initial))
				}
				if !slices.Equal(got, s.lost) {
					t.Errorf("step %d: lost offsets %v, want %v", i, got, s.lost)
				}
				lt, ok := h.LossTime()
				if s.lossTime < 0 && ok || s.lossTime >= 0 && (!ok || lt != s.lossTime) {
					t.Errorf("step %d: LossTime %d %v, want %d", i, lt, ok, s.lossTime)
				}
			}
		})
	}
}

func TestSentHistoryLostAccounting(t *testing.T) {
	h := NewSentHistory[uint64](0, 16)
	sendN(t, h, 0, 8)
	h.OnAck(0, 1<<5, 5000, nil) // 6 arrived: 0..3 lost by the packet threshold
	lost := h.DetectLost(5000, 1e9, nil)
	if got := psns(lost); !slices.Equal(got, []wire.PSN{0, 1, 2, 3}) {
		t.Fatalf("lost %v", got)
	}
	if n, b := h.Lost(); n != 4 || b != 100+101+102+103 {
		t.Fatalf("Lost %d/%d", n, b)
	}
	h.OnRetransmitted(1, 5100) // no longer lost: in flight again
	h.OnAck(1, 0, 5200, nil)   // 0 acknowledged after all: no longer lost
	if n, b := h.Lost(); n != 2 || b != 102+103 {
		t.Fatalf("Lost %d/%d after a retransmission and an ack", n, b)
	}
	if n, b := h.InFlight(); n != 6 || b != 101+102+103+104+105+107 {
		t.Fatalf("InFlight %d/%d", n, b)
	}
	if s := h.Stats(); s.Lost != 4 || s.Retransmitted != 1 {
		t.Fatalf("Stats %+v", s)
	}
	if lost = h.DetectLost(5200, 1e9, lost[:0]); len(lost) != 0 {
		t.Fatalf("reported again: %v", psns(lost))
	}
	// A negative reordering window counts as zero: 4 and 5 (sent at 1040 and 1050, before
	// 6 at 1060, whose RACK RTT is 3940) are lost at 1040+3940.
	if lost = h.DetectLost(4979, -1e9, lost[:0]); len(lost) != 0 {
		t.Fatalf("lost early: %v", psns(lost))
	}
	if lost = h.DetectLost(4980, -1e9, lost[:0]); !slices.Equal(psns(lost), []wire.PSN{4}) {
		t.Fatalf("negative reoWnd: lost %v, want [4]", psns(lost))
	}
}

// TestSentHistoryOnAckBlocks checks the block of recent arrivals: it acknowledges PSNs
// however far past the first block, in PSN order with the first block's, and whatever it
// says outside (AckPSN, NextPSN) is ignored and counted.
func TestSentHistoryOnAckBlocks(t *testing.T) {
	const initial = top - 100 // the stream wraps
	for _, tc := range []struct {
		name          string
		ackOff        uint32
		sack          uint64
		highOff       uint32 // HighPSN - initial
		highSack      uint64
		want          []uint32 // offsets acknowledged, in order
		ignoredBlocks uint64
		ignoredBits   uint64
	}{
		{name: "far beyond the first block", ackOff: 10, sack: 1, highOff: 400, highSack: 1 | 1<<2,
			want: []uint32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 397, 399}},
		{name: "overlapping the first block: merged in PSN order", ackOff: 0, sack: 1<<4 | 1<<8, highOff: 70, highSack: 1 | 1<<63 | 1<<60,
			want: []uint32{5, 6, 9, 69}},
		{name: "straddling the first block's end", ackOff: 0, highOff: 100, highSack: 1<<34 | 1<<36,
			want: []uint32{63, 65}},
		{name: "HighPSN equal to AckPSN is the empty block", ackOff: 3, highOff: 3,
			want: []uint32{0, 1, 2}},
		{name: "bits at or before AckPSN ignored", ackOff: 3, highOff: 5, highSack: 1 | 1<<1 | 1<<2 | 1<<3,
			want: []uint32{0, 1, 2, 4}, ignoredBits: 3},
		{name: "HighPSN beyond NextPSN ignored", ackOff: 3, highOff: 1001, highSack: math.MaxUint64,
			want: []uint32{0, 1, 2}, ignoredBlocks: 1},
		{name: "HighPSN at NextPSN taken", ackOff: 3, highOff: 1000, highSack: 1,
			want: []uint32{0, 1, 2, 999}},
		{name: "HighPSN behind AckPSN ignored", ackOff: 300, highOff: 200, highSack: math.MaxUint64,
			ignoredBlocks: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewSentHistory[uint64](initial, 1000)
			sendN(t, h, initial, 1000)
			acked, _ := h.OnAckBlocks(initial.Add(tc.ackOff), tc.sack, initial.Add(tc.highOff), tc.highSack, 1e9, nil)
			var got []uint32
			for _, p := range acked {
				got = append(got, p.PSN.Sub(initial))
			}
			if tc.name == "HighPSN behind AckPSN ignored" {
				tc.want = make([]uint32, 300)
				for i := range tc.want {
					tc.want[i] = uint32(i)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("acked %v, want %v", got, tc.want)
			}
			if st := h.Stats(); st.IgnoredBlocks != tc.ignoredBlocks || st.IgnoredSACKBits != tc.ignoredBits {
				t.Errorf("IgnoredBlocks %d IgnoredSACKBits %d, want %d %d", st.IgnoredBlocks, st.IgnoredSACKBits, tc.ignoredBlocks, tc.ignoredBits)
			}
			if n, _ := h.InFlight(); n != 1000-len(tc.want) {
				t.Errorf("InFlight %d after %d acknowledged", n, len(tc.want))
			}
		})
	}
}

// TestSentHistoryGrows checks that the ring starts at initialSlots slots, doubles only when full
// below the capacity (a capacity that is not a power of two included), keeps every packet
// across the move (the stream wrapping), and still refuses past the capacity.
func TestSentHistoryGrows(t *testing.T) {
	const initial = top - 1500
	h := NewSentHistory[uint64](initial, 5000)
	if len(h.slots) != initialSlots || h.Cap() != 5000 {
		t.Fatalf("%d slots, Cap %d", len(h.slots), h.Cap())
	}
	sendN(t, h, initial, initialSlots)
	h.OnAck(initial.Add(10), 0, 1e9, nil) // the live range no longer starts at slot 0
	if len(h.slots) != initialSlots {
		t.Fatalf("grew early: %d slots", len(h.slots))
	}
	for i := initialSlots; i < 5010; i++ {
		ok := h.OnSent(PacketInfo[uint64]{PSN: initial.Add(uint32(i)), Bytes: 100 + i, SentAt: 1000 + 10*int64(i), Owner: uint64(i)})
		if !ok {
			t.Fatalf("OnSent(%d) = %v", i, ok)
		}
	}
	if !h.Full() || h.Len() != 5000 || len(h.slots) != 8192 {
		t.Fatalf("Full %v Len %d, %d slots", h.Full(), h.Len(), len(h.slots))
	}
	if h.OnSent(PacketInfo[uint64]{PSN: initial.Add(5010)}) {
		t.Fatal("OnSent past the capacity accepted")
	}
	for i := 10; i < 5010; i++ {
		p, ok := h.Lookup(initial.Add(uint32(i)))
		if !ok || p.Bytes != 100+i || p.Owner != uint64(i) {
			t.Fatalf("Lookup(%d) = %+v %v after growing", i, p, ok)
		}
	}
}

// TestSentMatchesOnSent checks that Sent records what OnSent of the PacketInfo it stands
// for records: the same slots, the same in flight, the same refusals (a PSN that is not
// NextPSN, a full history), also across the ring's growth and a wrap of the PSN space.
func TestSentMatchesOnSent(t *testing.T) {
	const start = wire.PSN(1<<32 - 3)
	a, b := NewSentHistory[uint64](start, 2048), NewSentHistory[uint64](start, 2048)
	for i := range 2100 {
		psn := start.Add(uint32(i))
		at := int64(1000 + 3*i)
		okA := a.OnSent(PacketInfo[uint64]{PSN: psn, Owner: uint64(i), Bytes: 100 + i, SentAt: at, FirstSentAt: at})
		okB := b.Sent(psn, uint64(i), 100+i, at)
		if okA != okB {
			t.Fatalf("packet %d: OnSent %v, Sent %v", i, okA, okB)
		}
		if okB != (i < 2048) {
			t.Fatalf("packet %d: recorded %v with capacity 2048", i, okB)
		}
		if okA && (a.OnSent(PacketInfo[uint64]{PSN: psn}) || b.Sent(psn, 0, 0, at)) {
			t.Fatalf("packet %d: a PSN other than NextPSN was recorded", i)
		}
	}
	for i := range 2048 {
		psn := start.Add(uint32(i))
		pa, okA := a.Lookup(psn)
		pb, okB := b.Lookup(psn)
		if !okA || !okB || pa != pb {
			t.Fatalf("psn %d: OnSent recorded %+v (%v), Sent %+v (%v)", psn, pa, okA, pb, okB)
		}
	}
	na, ba := a.InFlight()
	if nb, bb := b.InFlight(); na != nb || ba != bb || na != 2048 {
		t.Fatalf("in flight: OnSent %d packets %d bytes, Sent %d packets %d bytes", na, ba, nb, bb)
	}
	if a.NextPSN() != b.NextPSN() {
		t.Fatalf("NextPSN: OnSent %d, Sent %d", a.NextPSN(), b.NextPSN())
	}
}
