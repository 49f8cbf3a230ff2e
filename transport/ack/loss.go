package ack

import (
	"slices"

	"github.com/xdpndk/xdpndk/transport/wire"
)

// ReorderThreshold is the packet threshold of loss detection: a packet that was never
// retransmitted is lost once a PSN at least this far beyond it is acknowledged (the value
// of RFC 9002 §6.1.1 and of TCP's three duplicate acks). The peer places out of order, so
// only network reordering can trip it early, and the RTO backstop covers the rest.
const ReorderThreshold = 3

// DetectLost appends the outstanding packets now considered lost to lost, in PSN order,
// and returns it. A packet is lost when either
//
//   - packet threshold (first transmissions only): a PSN at least ReorderThreshold beyond
//     it was acknowledged, necessarily selectively; or
//   - time threshold, RACK (RFC 8985 §6.2 step 5): it was sent before the most recently
//     sent packet that was delivered, and now is at least its SentAt plus that packet's
//     RTT plus reoWnd. When DetectLost runs as the ack arrives, that is: it was sent more
//     than reoWnd before the delivered packet was.
//
// A retransmission keeps its PSN, so for a retransmitted packet only the time threshold
// applies: acknowledgements of higher PSNs say nothing about a copy sent after them. Each
// packet is reported once per transmission: not again until OnRetransmitted. reoWnd is
// the reordering window in nanoseconds (RFC 8985 suggests MinRTT/4; negative counts as 0).
//
// DetectLost also computes LossTime. It never reports a packet beyond the highest
// acknowledged PSN, unless the latest delivered packet was a retransmission: then older
// first transmissions beyond it, sent before it, are late by the time rule too. The bound
// matters because a peer can only report what fits in its acknowledgement: with one SACK
// bitmap of 64 PSNs after the cumulative point, packets past that reach that the peer
// already had were declared lost (found by the transport benchmark: at 5% loss, 610 of
// 1511 retransmissions were such packets). The block of recent arrivals
// (wire.AckExt.HighPSN) reports the peer's highest arrival, so the highest acknowledged PSN
// follows it, and what lies beyond it had not arrived when the peer acknowledged.
//
// The cost is proportional to the packets it reports plus a few it looks at, not to the
// packets in flight: first transmissions are examined from a cursor below which all are
// acknowledged, lost or retransmitted, in PSN order (which is also send order, SentAt not
// decreasing from one OnSent to the next), up to the first that is not lost yet (later
// ones were sent later); retransmissions from the front of a queue in the order they were
// sent (OnRetransmitted with non-decreasing now), up to the first not due yet.
func (h *SentHistory[O]) DetectLost(now int64, reoWnd int64, lost []PacketInfo[O]) []PacketInfo[O] {
	h.lossTime = earliest{}
	if !h.anyAcked || h.inflight == 0 {
		return lost
	}
	if reoWnd < 0 {
		reoWnd = 0
	}
	end := h.next
	if !h.rackRetx && h.highestAcked.Less(end) {
		end = h.highestAcked
	}
	before := len(lost)
	lost = h.detectLostRetx(now, reoWnd, end, lost)
	sort := len(lost) > before

	// First transmissions, from the cursor.
	if h.scan.Less(h.start) {
		h.scan = h.start
	}
	p := h.scan
	for ; p.Less(end); p = p.Add(1) {
		s := h.slot(p)
		if s.acked || s.lost || s.Retransmits > 0 {
			continue
		}
		isLost := s.Retransmits == 0 && p.Add(ReorderThreshold).LessEq(h.highestAcked)
		if !isLost && h.rackValid && sentAfter(h.rackXmit, h.rackPSN, s.SentAt, p) {
			deadline := s.SentAt + h.rackRTT + reoWnd
			if now >= deadline {
				isLost = true
			} else {
				h.lossTime.set(deadline)
			}
		}
		if !isLost {
			// Neither rule holds: a later PSN was sent no earlier, and is further from
			// the highest acknowledged PSN, so no rule holds for it either.
			break
		}
		lost = h.markLost(s, lost)
	}
	h.scan = p
	if sort {
		slices.SortFunc(lost[before:], func(a, b PacketInfo[O]) int { return int(int32(a.PSN - b.PSN)) })
	}
	return lost
}

// detectLostRetx applies the time rule to the retransmissions, from the front of the
// queue: stale entries there are dropped, and the scan stops at the first retransmission
// that is not due yet, or that was sent after the latest delivered packet (every later
// one was too). Retransmissions at or beyond end are skipped (kept).
func (h *SentHistory[O]) detectLostRetx(now, reoWnd int64, end wire.PSN, lost []PacketInfo[O]) []PacketInfo[O] {
	if !h.rackValid {
		return lost
	}
	front := true // every entry before i was dropped
	for i := uint32(0); i < h.rq.n; {
		e := h.rq.at(i)
		s := h.pendingRetx(e)
		switch {
		case s == nil:
			// stale: dropped below if at the front
		case !sentAfter(h.rackXmit, h.rackPSN, s.SentAt, e.psn):
			if s.SentAt > h.rackXmit {
				return lost // this and every later one was sent after the delivered packet
			}
			front = false // same time, higher PSN: a later entry may still be earlier
		case !e.psn.Less(end):
			front = false
		default:
			deadline := s.SentAt + h.rackRTT + reoWnd
			if now < deadline {
				h.lossTime.set(deadline) // the earliest: later entries were sent no earlier
				return lost
			}
			lost = h.markLost(s, lost)
		}
		if front && (s == nil || s.lost) {
			h.rq.pop()
			continue
		}
		i++
	}
	return lost
}

// markLost reports s lost.
func (h *SentHistory[O]) markLost(s *sentSlot[O], lost []PacketInfo[O]) []PacketInfo[O] {
	s.lost = true
	h.lostPkts++
	h.lostBytes += s.Bytes
	h.stats.Lost++
	return append(lost, s.PacketInfo)
}

// LossTime returns when the RACK reordering timer should fire (RFC 8985 §6.3): the
// earliest time at which a packet that the last DetectLost call found sent before the
// latest delivered one, but not yet late enough, becomes lost. Call DetectLost again then.
// It is false when no packet waits on the time threshold. Acks and retransmissions since
// that DetectLost call are not reflected until the next one.
func (h *SentHistory[O]) LossTime() (int64, bool) { return h.lossTime.t, h.lossTime.ok }
