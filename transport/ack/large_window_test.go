package ack

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/xdpndk/xdpndk/transport/wire"
)

// lossSim is a sender (SentHistory) and a receiver (ReceiveTracker) joined by a path with
// a fixed one-way-and-back delay: a packet sent at t arrives at the receiver, and is
// acknowledged, at t+rtt, unless it is one of the lost first transmissions. The receiver
// acknowledges every ackEvery arrivals with both blocks; the sender runs DetectLost on
// every ack and retransmits what it reports (retransmissions always arrive). Everything is
// preallocated: a step allocates nothing once the history has grown.
type lossSim struct {
	h       *SentHistory[uint64]
	r       *ReceiveTracker
	rtt     int64 // ns
	gap     int64 // ns between two new packets
	reoWnd  int64
	window  int     // new packets leave while fewer than this are in flight
	lossPct float64 // chance that a first transmission is lost
	// lossUntil: only the first lossUntil new packets may be lost (0: all), so that
	// packets follow the last hole and reveal it (a tail loss is the RTO's business)
	lossUntil int
	rng       *rand.Rand

	initial  wire.PSN
	now      int64
	pipe     []arrival // packets on their way, in arrival order (a ring)
	head     int
	n        int
	arrived  int // arrivals since the last ack
	acked    []PacketInfo[uint64]
	lost     []PacketInfo[uint64]
	holes    map[wire.PSN]bool // first transmissions dropped (test only; nil in benchmarks)
	reported map[wire.PSN]int  // lost PSN -> new packets sent when it was reported (test only)
	sentNew  int
}

type arrival struct {
	psn wire.PSN
	at  int64
}

const simAckEvery = 4

func newLossSim(initial wire.PSN, window int, lossPct float64, track bool) *lossSim {
	s := &lossSim{
		initial: initial,
		h:       NewSentHistory[uint64](initial, 4*window),
		r:       NewReceiveTracker(initial, 4*window),
		rtt:     10_000_000, // 10 ms
		// the packet rate that keeps window packets in flight over the round trip
		gap:     10_000_000 / int64(window),
		reoWnd:  10_000_000 / 4,
		window:  window,
		lossPct: lossPct,
		rng:     rand.New(rand.NewPCG(1, uint64(window))),
		pipe:    make([]arrival, 8*window),
		acked:   make([]PacketInfo[uint64], 0, 4*window),
		lost:    make([]PacketInfo[uint64], 0, 4*window),
	}
	if track {
		s.holes, s.reported = map[wire.PSN]bool{}, map[wire.PSN]int{}
	}
	return s
}

func (s *lossSim) push(psn wire.PSN, at int64) {
	s.pipe[(s.head+s.n)%len(s.pipe)] = arrival{psn, at}
	s.n++
}

// step advances time by one packet gap: a new packet leaves if the window allows, what
// is due arrives, and every ackEvery arrivals the sender takes an ack, detects losses and
// retransmits them. It reports whether an ack was taken.
func (s *lossSim) step(send bool) bool {
	s.now += s.gap
	if n, _ := s.h.InFlight(); send && n < s.window {
		psn := s.h.NextPSN()
		if !s.h.OnSent(PacketInfo[uint64]{PSN: psn, Bytes: 1472, SentAt: s.now, FirstSentAt: s.now}) {
			panic("history full")
		}
		s.sentNew++
		if s.rng.Float64() < s.lossPct && (s.lossUntil == 0 || s.sentNew < s.lossUntil) {
			if s.holes != nil {
				s.holes[psn] = true
			}
		} else {
			s.push(psn, s.now+s.rtt)
		}
	}
	for s.n > 0 && s.pipe[s.head].at <= s.now {
		s.r.Receive(s.pipe[s.head].psn)
		s.head = (s.head + 1) % len(s.pipe)
		s.n--
		s.arrived++
	}
	// Every ackEvery arrivals; with nothing more to send, at once (the ack delay).
	if s.arrived < simAckEvery && (send || s.arrived == 0) {
		return false
	}
	s.arrived = 0
	// The ack reaches the sender at once: the path's delay is all on the way out.
	hp, hs := s.r.High()
	s.acked, _ = s.h.OnAckBlocks(s.r.Cumulative(), s.r.SACK(), hp, hs, s.now, s.acked[:0])
	s.lost = s.h.DetectLost(s.now, s.reoWnd, s.lost[:0])
	for _, p := range s.lost {
		if s.reported != nil {
			s.reported[p.PSN] = s.sentNew
		}
		s.h.OnRetransmitted(p.PSN, s.now)
		s.push(p.PSN, s.now+s.rtt)
	}
	return true
}

// TestSentHistoryLargeWindow runs 16384 packets in flight over a 10 ms round trip with 1%
// of first transmissions lost: the acks' two blocks report every arrival, so DetectLost
// reports exactly the dropped packets (no packet the peer had), each within a few acks of
// the arrivals that reveal it, and everything is delivered in the end. The history grows
// from initialSlots slots as the window opens.
func TestSentHistoryLargeWindow(t *testing.T) {
	const window, total = 16384, 3 * 16384
	s := newLossSim(wire.PSN(1<<32-5000), window, 0.01, true)
	s.lossUntil = total - 64
	if len(s.h.slots) != initialSlots {
		t.Fatalf("history starts with %d slots, want %d", len(s.h.slots), initialSlots)
	}
	maxLen := 0
	for s.sentNew < total {
		s.step(true)
		maxLen = max(maxLen, s.h.Len())
	}
	// Drain: no new packets, until everything is acknowledged (bounded).
	for i := 0; i < 10*window; i++ {
		if n, _ := s.h.InFlight(); n == 0 {
			break
		}
		s.step(false)
	}
	if n, _ := s.h.InFlight(); n != 0 {
		t.Fatalf("%d packets still in flight after the drain", n)
	}
	if len(s.holes) < total/200 {
		t.Fatalf("scenario broken: only %d holes", len(s.holes))
	}
	for p := range s.reported {
		if !s.holes[p] {
			t.Errorf("%d reported lost, but the peer had it", p)
		}
	}
	var late []wire.PSN
	for p := range s.holes {
		at, ok := s.reported[p]
		if !ok {
			t.Errorf("hole %d never reported lost", p)
			continue
		}
		// The packets sent after p by the time it was reported. The ReorderThreshold
		// packets after it reveal it one round trip later (window packets, at most, leave
		// in a round trip), at the next ack; a few more when holes are adjacent. Many more
		// would mean the acks did not report the arrivals beyond it.
		if after := at - int(p.Sub(s.initial)) - 1; after > window+ReorderThreshold+2*simAckEvery+4 {
			late = append(late, p)
		}
	}
	if len(late) > 0 {
		slices.Sort(late)
		t.Errorf("%d holes found more than a round trip late, first %v", len(late), late[:min(len(late), 5)])
	}
	st := s.h.Stats()
	if st.Lost != uint64(len(s.holes)) || st.Retransmitted != st.Lost || st.IgnoredBlocks != 0 || st.IgnoredSACKBits != 0 {
		t.Errorf("stats %+v, holes %d", st, len(s.holes))
	}
	if maxLen <= window || len(s.h.slots) < maxLen {
		t.Errorf("history reached %d packets in %d slots; window %d", maxLen, len(s.h.slots), window)
	}
	t.Logf("%d holes, history up to %d packets, %d slots, retransmission queue %d", len(s.holes), maxLen, len(s.h.slots), len(s.h.rq.buf))

	// Once grown, the steady state allocates nothing.
	if n := testing.AllocsPerRun(2000, func() { s.step(true) }); n != 0 {
		t.Errorf("%v allocs per step", n)
	}
}

// BenchmarkDetectLostLargeWindow measures one ack's work at the sender (OnAckBlocks,
// DetectLost, the retransmissions it finds) with 1% loss over a 10 ms round trip, at 1024
// and 16384 packets in flight: the cost per ack does not grow with the window.
func BenchmarkDetectLostLargeWindow(b *testing.B) {
	for _, window := range []int{1024, 16384} {
		b.Run("inflight="+itoa(window), func(b *testing.B) {
			s := newLossSim(benchStart, window, 0.01, false)
			for s.sentNew < 4*window { // warm up: the window opens, the history grows
				s.step(true)
			}
			b.ReportAllocs()
			for b.Loop() {
				for !s.step(true) {
				}
			}
			if n, _ := s.h.InFlight(); n < window*9/10 {
				b.Fatalf("only %d in flight", n)
			}
		})
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
