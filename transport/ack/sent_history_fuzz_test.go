package ack

import (
	"encoding/binary"
	"math"
	"slices"
	"testing"

	"github.com/xdpndk/xdpndk/transport/wire"
)

// sentModel is the obvious implementation of the acknowledgement bookkeeping: a map of the
// packets in flight.
type sentModel struct {
	capacity     int
	next         wire.PSN
	out          map[wire.PSN]*modelPkt // sent, not acknowledged
	acked        map[wire.PSN]bool      // acknowledged at some point
	highestAcked wire.PSN
	anyAcked     bool
	ackedTotal   int
}

type modelPkt struct {
	info PacketInfo[uint64]
	lost bool
}

// front is the lowest PSN still occupying the history: the lowest one in flight, or next.
func (m *sentModel) front() wire.PSN {
	f := m.next
	for p := range m.out {
		if p.Less(f) {
			f = p
		}
	}
	return f
}

func (m *sentModel) inFlight() (n, bytes int) {
	for _, p := range m.out {
		n++
		bytes += p.info.Bytes
	}
	return n, bytes
}

func (m *sentModel) lost() (n, bytes int) {
	for _, p := range m.out {
		if p.lost {
			n++
			bytes += p.info.Bytes
		}
	}
	return n, bytes
}

// ack returns the PSNs an ack newly acknowledges, ascending, and the Karn RTT sample.
func (m *sentModel) ack(ackPSN wire.PSN, sack uint64, now int64) (newly []wire.PSN, rtt int64) {
	return m.ackBlocks(ackPSN, sack, ackPSN, 0, now)
}

// ackBlocks is ack with a block of recent arrivals: bit i of highSack is PSN highPSN-1-i,
// taken when highPSN is in [ackPSN, next] and the PSN in (ackPSN, next).
func (m *sentModel) ackBlocks(ackPSN wire.PSN, sack uint64, highPSN wire.PSN, highSack uint64, now int64) (newly []wire.PSN, rtt int64) {
	if m.next.Less(ackPSN) {
		return nil, 0
	}
	take := func(p wire.PSN) {
		pk, ok := m.out[p]
		if !ok {
			return
		}
		delete(m.out, p)
		m.acked[p] = true
		m.ackedTotal++
		newly = append(newly, p)
		if !m.anyAcked || m.highestAcked.Less(p) {
			m.highestAcked, m.anyAcked = p, true
		}
		if pk.info.Retransmits == 0 {
			rtt = max(now-pk.info.SentAt, 1)
		}
	}
	// Everything in flight before ackPSN, ascending (the window is small: walk it).
	for p := m.front(); p.Less(ackPSN); p = p.Add(1) {
		take(p)
	}
	// The selective bits of both blocks, taken in PSN order.
	var offs []uint32 // distances from ackPSN
	for i := uint32(0); i < 64; i++ {
		if p := ackPSN.Add(1 + i); sack&(1<<i) != 0 && p.Less(m.next) {
			offs = append(offs, 1+i)
		}
	}
	if highPSN.Sub(ackPSN) <= m.next.Sub(ackPSN) {
		for i := uint32(0); i < 64; i++ {
			p := highPSN - 1 - wire.PSN(i)
			if highSack&(1<<i) != 0 && ackPSN.Less(p) && p.Less(m.next) {
				offs = append(offs, p.Sub(ackPSN))
			}
		}
	}
	slices.Sort(offs)
	for _, o := range slices.Compact(offs) {
		take(ackPSN.Add(o))
	}
	return newly, rtt
}

// referenceLost is loss detection as a full scan of the history (the definition that
// DetectLost computes incrementally): the packets it would report, in PSN order, and the
// loss time. It changes nothing.
func referenceLost(h *SentHistory[uint64], now, reoWnd int64) (lost []wire.PSN, lossTime int64, lossTimeSet bool) {
	if !h.anyAcked || h.inflight == 0 {
		return nil, 0, false
	}
	reoWnd = max(reoWnd, 0)
	end := h.next
	if !h.rackRetx && h.highestAcked.Less(end) {
		end = h.highestAcked
	}
	for p := h.start; p.Less(end); p = p.Add(1) {
		s := h.slot(p)
		if s.acked || s.lost {
			continue
		}
		isLost := s.Retransmits == 0 && p.Add(ReorderThreshold).LessEq(h.highestAcked)
		if !isLost && h.rackValid && sentAfter(h.rackXmit, h.rackPSN, s.SentAt, p) {
			deadline := s.SentAt + h.rackRTT + reoWnd
			if now >= deadline {
				isLost = true
			} else if !lossTimeSet || deadline < lossTime {
				lossTime, lossTimeSet = deadline, true
			}
		}
		if isLost {
			lost = append(lost, p)
		}
	}
	return lost, lossTime, lossTimeSet
}

// FuzzSentHistory drives a SentHistory and sentModel with the same operations and checks
// that they agree on every acknowledgement, that no packet is acknowledged twice or
// reported lost twice per transmission, that the packet threshold is always applied, and
// that the in-flight and lost counts stay consistent.
//
// Input: byte 0 sets the capacity (1 + b%48), byte 1 the initial PSN (just below 2^32, so
// the stream wraps), then ops of a kind byte and an argument byte:
//
//	kind%8 0: send a packet of arg bytes at now
//	       1: ack: AckPSN = front + arg%(len+8) - 4 (stale, valid and beyond NextPSN),
//	          or front + 2^31 when arg is 255; SACK from the next 8 bytes
//	       2: retransmit front + arg%(len+2) at now
//	       3: DetectLost(now, arg*100)
//	       4: now += arg*50
//	       5: ack of everything up to front + arg%(len+1) (no SACK)
//	       6: arg < 8: Reset; else Lookup(front + arg%(len+2))
//	       7: ack with both blocks: AckPSN as for 1 (without the 255 case), HighPSN =
//	          AckPSN + next byte - 8 (behind, within and beyond NextPSN), SACK and HighSACK
//	          from the following 16 bytes
//
// Before every DetectLost the packets it must report and the loss time are computed by a
// full scan of the history (referenceLost); DetectLost, which looks only at a cursor and
// a queue, must agree exactly.
func FuzzSentHistory(f *testing.F) {
	f.Add([]byte{8, 3, 0, 10, 0, 20, 0, 30, 0, 40, 1, 4, 0, 0, 0, 0, 0, 0, 0, 6, 3, 1})
	f.Add([]byte{3, 0, 0, 1, 0, 2, 0, 3, 0, 4, 4, 10, 1, 5, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 3, 0, 2, 0, 4, 200, 5, 9})
	f.Add([]byte{40, 200, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 4, 100, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0x40, 3, 0, 4, 255, 3, 0, 2, 0, 2, 1, 4, 30, 5, 255, 1, 255, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		capacity := 1 + int(data[0])%48
		initial := wire.PSN(math.MaxUint32 - uint32(data[1]))
		data = data[2:]
		h := NewSentHistory[uint64](initial, capacity)
		m := &sentModel{capacity: capacity, next: initial, out: map[wire.PSN]*modelPkt{}, acked: map[wire.PSN]bool{}}
		var now int64
		var buf []PacketInfo[uint64]
		for i := 0; i+1 < len(data); i += 2 {
			kind, arg := data[i]%8, data[i+1]
			used := h.Len()
			switch kind {
			case 0:
				p := PacketInfo[uint64]{PSN: m.next, Bytes: int(arg), SentAt: now, Owner: uint64(i)}
				want := int(m.next.Sub(m.front())) < capacity
				if got := h.OnSent(p); got != want {
					t.Fatalf("op %d: OnSent = %v, model %v (len %d cap %d)", i, got, want, used, capacity)
				}
				if want {
					m.out[p.PSN] = &modelPkt{info: p}
					m.next = m.next.Add(1)
				}
			case 1, 5:
				front := m.front()
				ackPSN := front.Add(uint32(arg)%uint32(used+8) - 4)
				var sack uint64
				if kind == 5 {
					ackPSN = front.Add(uint32(arg) % uint32(used+1))
				} else {
					if arg == 255 {
						ackPSN = front.Add(1 << 31)
					}
					if len(data) >= i+2+8 {
						sack = binary.LittleEndian.Uint64(data[i+2:])
						i += 8
					}
				}
				newly, wantRTT := m.ack(ackPSN, sack, now)
				var rtt int64
				buf, rtt = h.OnAck(ackPSN, sack, now, buf[:0])
				if len(buf) != len(newly) {
					t.Fatalf("op %d: OnAck(%d, %#x) acked %v, model %v", i, ackPSN, sack, psns(buf), newly)
				}
				for j, p := range buf {
					if p.PSN != newly[j] {
						t.Fatalf("op %d: OnAck(%d, %#x) acked %v, model %v", i, ackPSN, sack, psns(buf), newly)
					}
				}
				if rtt != wantRTT {
					t.Fatalf("op %d: rtt %d, model %d", i, rtt, wantRTT)
				}
			case 7:
				ackPSN := m.front().Add(uint32(arg)%uint32(used+8) - 4)
				var highOff byte
				var sack, highSack uint64
				if len(data) >= i+2+17 {
					highOff = data[i+2]
					sack = binary.LittleEndian.Uint64(data[i+3:])
					highSack = binary.LittleEndian.Uint64(data[i+11:])
					i += 17
				}
				highPSN := ackPSN.Add(uint32(highOff)) - 8
				newly, wantRTT := m.ackBlocks(ackPSN, sack, highPSN, highSack, now)
				var rtt int64
				buf, rtt = h.OnAckBlocks(ackPSN, sack, highPSN, highSack, now, buf[:0])
				if !slices.Equal(psns(buf), newly) || rtt != wantRTT {
					t.Fatalf("op %d: OnAckBlocks(%d, %#x, %d, %#x) acked %v rtt %d, model %v rtt %d", i, ackPSN, sack, highPSN, highSack, psns(buf), rtt, newly, wantRTT)
				}
			case 2:
				psn := m.front().Add(uint32(arg) % uint32(used+2))
				h.OnRetransmitted(psn, now)
				if pk, ok := m.out[psn]; ok {
					pk.info.Retransmits++
					pk.info.SentAt = now
					pk.lost = false
				}
			case 3:
				wantLost, wantLT, wantLTSet := referenceLost(h, now, int64(arg)*100)
				buf = h.DetectLost(now, int64(arg)*100, buf[:0])
				if !slices.Equal(psns(buf), wantLost) {
					t.Fatalf("op %d: DetectLost reported %v, full scan %v", i, psns(buf), wantLost)
				}
				if lt, ok := h.LossTime(); ok != wantLTSet || ok && lt != wantLT {
					t.Fatalf("op %d: LossTime %d %v, full scan %d %v", i, lt, ok, wantLT, wantLTSet)
				}
				prev := wire.PSN(0)
				for j, p := range buf {
					pk, ok := m.out[p.PSN]
					if !ok || pk.lost {
						t.Fatalf("op %d: DetectLost reported %d: in flight %v, already lost", i, p.PSN, ok)
					}
					if j > 0 && !prev.Less(p.PSN) {
						t.Fatalf("op %d: DetectLost out of order: %v", i, psns(buf))
					}
					if p != pk.info {
						t.Fatalf("op %d: reported %+v, sent %+v", i, p, pk.info)
					}
					pk.lost = true
					prev = p.PSN
				}
				for p, pk := range m.out {
					if m.anyAcked && pk.info.Retransmits == 0 && p.Add(ReorderThreshold).LessEq(m.highestAcked) && !pk.lost {
						t.Fatalf("op %d: %d is %d behind the highest acked %d, not reported lost", i, p, ReorderThreshold, m.highestAcked)
					}
				}
			case 4:
				now += int64(arg) * 50
			case 6:
				if arg < 8 {
					h.Reset()
					clear(m.out)
					m.anyAcked = false
					break
				}
				psn := m.front().Add(uint32(arg) % uint32(used+2))
				got, ok := h.Lookup(psn)
				if pk, want := m.out[psn]; ok != want || ok && got != pk.info {
					t.Fatalf("op %d: Lookup(%d) = %+v %v, model %v", i, psn, got, ok, want)
				}
			}
			// Invariants after every operation.
			if h.NextPSN() != m.next {
				t.Fatalf("op %d: NextPSN %d, model %d", i, h.NextPSN(), m.next)
			}
			n, b := h.InFlight()
			if wn, wb := m.inFlight(); n != wn || b != wb {
				t.Fatalf("op %d: InFlight %d/%d, model %d/%d", i, n, b, wn, wb)
			}
			ln, lb := h.Lost()
			if wn, wb := m.lost(); ln != wn || lb != wb {
				t.Fatalf("op %d: Lost %d/%d, model %d/%d", i, ln, lb, wn, wb)
			}
			if h.Len() != int(m.next.Sub(m.front())) || h.Len() > capacity {
				t.Fatalf("op %d: Len %d, model %d, cap %d", i, h.Len(), m.next.Sub(m.front()), capacity)
			}
			if st := h.Stats(); st.Acked != uint64(m.ackedTotal) {
				t.Fatalf("op %d: Stats.Acked %d, model %d", i, st.Acked, m.ackedTotal)
			}
			o, ok := h.Oldest()
			if ok != (n > 0) || ok && (o.PSN != m.front() || o != m.out[o.PSN].info) {
				t.Fatalf("op %d: Oldest %+v %v, model front %d", i, o, ok, m.front())
			}
			buf = h.Unacked(buf[:0])
			if len(buf) != n {
				t.Fatalf("op %d: Unacked has %d, in flight %d", i, len(buf), n)
			}
			for j, p := range buf {
				if pk, ok := m.out[p.PSN]; !ok || pk.info != p || j > 0 && !buf[j-1].PSN.Less(p.PSN) {
					t.Fatalf("op %d: Unacked %v wrong at %d", i, psns(buf), j)
				}
			}
		}
	})
}
