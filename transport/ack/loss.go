package ack

// ReorderThreshold is the packet threshold of loss detection: a packet that was never
// retransmitted is lost once a PSN at least this far beyond it is acknowledged (the value
// of RFC 9002 §6.1.1 and of TCP's three duplicate acks). The peer places out of order, so
// only network reordering can trip it early, and the RTO backstop covers the rest.
const ReorderThreshold = 3

// SACKReach is how far beyond the cumulative point a peer can report arrivals: the 64 bits
// of the SACK bitmap. Loss detection never declares a packet beyond it lost, since the peer
// could not have said otherwise (found by the transport benchmark: at 5% loss, 610 of 1511
// retransmissions were of packets past that reach that the peer already had).
const SACKReach = 64

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
// DetectLost also computes LossTime. It scans only the packets below the highest
// acknowledged PSN (all outstanding ones when the latest delivered packet was a
// retransmission, since older first transmissions beyond it may be lost too).
func (h *SentHistory) DetectLost(now int64, reoWnd int64, lost []PacketInfo) []PacketInfo {
	h.lossTimeSet = false
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
	if reach := h.start.Add(SACKReach + 1); reach.Less(end) {
		end = reach
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
			} else if !h.lossTimeSet || deadline < h.lossTime {
				h.lossTime, h.lossTimeSet = deadline, true
			}
		}
		if isLost {
			s.lost = true
			h.lostPkts++
			h.lostBytes += s.Bytes
			h.stats.Lost++
			lost = append(lost, s.PacketInfo)
		}
	}
	return lost
}

// LossTime returns when the RACK reordering timer should fire (RFC 8985 §6.3): the
// earliest time at which a packet that the last DetectLost call found sent before the
// latest delivered one, but not yet late enough, becomes lost. Call DetectLost again then.
// It is false when no packet waits on the time threshold. Acks and retransmissions since
// that DetectLost call are not reflected until the next one.
func (h *SentHistory) LossTime() (int64, bool) { return h.lossTime, h.lossTimeSet }
