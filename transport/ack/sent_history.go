package ack

import (
	"math/bits"

	"github.com/xdpndk/xdpndk/transport/wire"
)

// Limits of a SentHistory's capacity, in packets.
const (
	// DefaultCapacity is the capacity NewSentHistory uses when given zero or less.
	DefaultCapacity = 1024
	// MaxCapacity is the largest capacity, far below the 2^31 PSNs that serial-number
	// comparison allows.
	MaxCapacity = 1 << 20
	// initialSlots is how many slots a history starts with (fewer if its capacity is
	// smaller): an idle or slow QP never needs more, and the ring doubles when OnSent
	// finds it full below the capacity.
	initialSlots = 16
	// initialRetx is how many entries the retransmission queue starts with; it doubles
	// when it fills with entries still pending.
	initialRetx = 8
)

// PacketInfo describes one data packet of the local stream, as recorded by SentHistory. O
// is what the caller records with the packet: its owner, in the caller's own terms (the
// engine's work request or read job and the payload's offset in it). SentHistory stores it
// and hands it back on acknowledgement, loss and timeout, and never interprets it.
type PacketInfo[O any] struct {
	// PSN is the packet's place in the stream; a retransmission keeps it.
	PSN wire.PSN
	// Owner is what the packet carries, as the caller named it in OnSent.
	Owner O
	// Bytes is what the packet counts for in flight (the caller's choice: payload or
	// datagram length).
	Bytes int
	// SentAt is the time of the packet's latest transmission, in monotonic nanoseconds.
	SentAt int64
	// Retransmits is how many times the packet was sent again (0: only once).
	Retransmits int
	// FirstSentAt is the time of the packet's first transmission, as the caller gave it to
	// OnSent; retransmissions keep it. The engine gives up on a packet only once it has been
	// outstanding long enough, however quickly its retransmissions were spent.
	FirstSentAt int64
}

// Stats counts what SentHistory saw on acknowledgements and loss detection. Every counter
// only grows.
type Stats struct {
	Acks            uint64 // OnAck calls
	DuplicateAcks   uint64 // valid acks that acknowledged no new packet
	StaleAcks       uint64 // acks whose AckPSN is behind the cumulative point already known (reordered or repeated acks)
	InvalidAcks     uint64 // acks ignored entirely: AckPSN beyond NextPSN (PSNs never sent)
	IgnoredSACKBits uint64 // SACK bits (of either block) naming PSNs outside (AckPSN, NextPSN), ignored one by one
	IgnoredBlocks   uint64 // recent-arrival blocks ignored: HighPSN outside [AckPSN, NextPSN]
	Acked           uint64 // packets acknowledged (each exactly once)
	Lost            uint64 // packets DetectLost reported
	Retransmitted   uint64 // OnRetransmitted calls that matched an outstanding packet
}

type sentSlot[O any] struct {
	PacketInfo[O]
	acked bool // acknowledged (only possible selectively while slots before it are not)
	lost  bool // reported lost by DetectLost since its latest transmission
}

// SentHistory is the requester's record of the packets of its stream that are in flight:
// what it sent, what the peer acknowledged (cumulatively or selectively), and what is lost.
// It stores packets in a ring indexed by PSN, from the oldest unacknowledged PSN up to
// NextPSN; a retransmission keeps the packet's PSN and slot. The ring starts at
// min(1024, capacity) slots and doubles, up to the capacity, when OnSent finds it full, so
// a QP that never has many packets in flight never pays for a large window: it costs
// 56 bytes per slot, 56 KiB at 1024 and 896 KiB at 16384.
//
// Loss detection follows RACK (RFC 8985) with a packet threshold as in RFC 9002 §6.1.1;
// RTT samples follow Karn's rule (RFC 6298 §3). Acknowledgements come from the network
// and are never trusted: whatever they say, no method panics, and nothing outside
// [oldest unacknowledged, NextPSN) is ever marked.
//
// A SentHistory is owned by one engine goroutine and is not safe for concurrent use.
// No method allocates except when the ring or the retransmission queue grows (a handful of
// times in a history's life, each doubling it); the append-style methods reuse the caller's
// slice and append to it.
type SentHistory[O any] struct {
	slots    []sentSlot[O]
	mask     uint32 // len(slots) - 1: a power of two; below limit only while Len fits in it
	limit    uint32 // most packets outstanding (the requested capacity)
	start    wire.PSN
	next     wire.PSN
	inflight int // unacknowledged packets in [start, next)
	bytes    int // their Bytes

	lostPkts, lostBytes int // reported lost, not yet retransmitted or acknowledged

	// Highest PSN acknowledged, for the packet threshold and the loss scan bound.
	highestAcked wire.PSN
	anyAcked     bool

	// RACK state (RFC 8985 §6.2 step 2): the most recently sent packet that was delivered.
	rackValid bool
	rackXmit  int64    // its SentAt
	rackPSN   wire.PSN // its PSN, the tie-break for equal send times
	rackRTT   int64    // now - SentAt when its ack arrived
	rackRetx  bool     // it had been retransmitted (loss candidates may lie beyond highestAcked)
	// The timestamp echo of the ack being applied (SetEcho), µs of the sender's clock as
	// wire.AckExt.EchoTS carries it; echoSet false when it has none.
	echo    uint32
	echoSet bool
	minRTT  int64 // smallest RTT sample (Karn-valid), 0 before the first

	lossTime earliest // earliest time a not-yet-lost packet becomes lost by the time rule

	// scan is DetectLost's cursor over first transmissions: every packet in [start, scan)
	// is acknowledged, reported lost or retransmitted. First transmissions are sent in PSN
	// order, so the scan resumes here and stops at the first that is not lost yet.
	scan wire.PSN
	// rq is the queue of retransmissions in the order they were sent: DetectLost applies
	// the time rule from its front. An entry is
	// stale once its packet is acknowledged, reported lost or sent again (gen no longer
	// equals its Retransmits) and is dropped when met.
	rq retxRing

	stats Stats
}

// retxEntry names one retransmission: the packet and which of its retransmissions.
type retxEntry struct {
	psn wire.PSN
	gen uint32 // the packet's Retransmits after this retransmission
}

// retxRing is a ring of retransmission entries: n of them from head, len(buf) a power of
// two.
type retxRing struct {
	buf     []retxEntry
	head, n uint32
}

func (q *retxRing) at(i uint32) retxEntry     { return q.buf[(q.head+i)&uint32(len(q.buf)-1)] }
func (q *retxRing) set(i uint32, e retxEntry) { q.buf[(q.head+i)&uint32(len(q.buf)-1)] = e }

// pop drops the front entry.
func (q *retxRing) pop() { q.head, q.n = (q.head+1)&uint32(len(q.buf)-1), q.n-1 }

// grow doubles the ring, keeping its n entries in order from the start.
func (q *retxRing) grow() {
	nb := make([]retxEntry, 2*len(q.buf))
	for i := uint32(0); i < q.n; i++ {
		nb[i] = q.at(i)
	}
	q.buf, q.head = nb, 0
}

// earliest is the earliest of the times given to set since it was zero; ok is false when
// none was.
type earliest struct {
	t  int64
	ok bool
}

func (e *earliest) set(t int64) {
	if !e.ok || t < e.t {
		*e = earliest{t, true}
	}
}

// NewSentHistory returns an empty history for a stream whose first PSN is initial (the QP's
// random initial PSN, NextPSN until the first OnSent), holding at most capacity
// outstanding packets (zero or less means DefaultCapacity; more than MaxCapacity is
// clamped). The capacity is the most the sender may have in flight: the peer's
// ReceiveTracker window must be at least as large.
func NewSentHistory[O any](initial wire.PSN, capacity int) *SentHistory[O] {
	switch {
	case capacity <= 0:
		capacity = DefaultCapacity
	case capacity > MaxCapacity:
		capacity = MaxCapacity
	}
	n := min(uint32(1)<<bits.Len32(uint32(capacity-1)), initialSlots)
	return &SentHistory[O]{
		slots: make([]sentSlot[O], n),
		mask:  n - 1,
		limit: uint32(capacity),
		start: initial,
		next:  initial,
		scan:  initial,
		rq:    retxRing{buf: make([]retxEntry, initialRetx)},
	}
}

func (h *SentHistory[O]) slot(psn wire.PSN) *sentSlot[O] { return &h.slots[uint32(psn)&h.mask] }

// Cap returns the most packets the history holds outstanding.
func (h *SentHistory[O]) Cap() int { return int(h.limit) }

// Len returns the number of slots in use: from the oldest unacknowledged packet to
// NextPSN, including packets after it that were selectively acknowledged.
func (h *SentHistory[O]) Len() int { return int(h.next.Sub(h.start)) }

// Full reports whether OnSent would refuse a packet for lack of room.
func (h *SentHistory[O]) Full() bool { return h.next.Sub(h.start) >= h.limit }

// OnSent records the first transmission of p, which must carry NextPSN. It returns false
// and records nothing when the history is full (Cap packets from the oldest
// unacknowledged one) or p.PSN is not NextPSN; p.Retransmits is recorded as given
// (normally 0). SentAt must not decrease from one packet to the next.
func (h *SentHistory[O]) OnSent(p PacketInfo[O]) bool {
	if !h.Sent(p.PSN, p.Owner, p.Bytes, p.SentAt) {
		return false
	}
	h.slot(p.PSN).PacketInfo = p // FirstSentAt and Retransmits as given
	if p.Retransmits > 0 {
		// Recorded as a retransmission already: only the time rule applies, from the queue.
		h.pushRetx(retxEntry{psn: p.PSN, gen: uint32(p.Retransmits)})
	}
	return true
}

// Sent records the first transmission, at time at, of the packet psn (which must be
// NextPSN) carrying owner o and counting bytes in flight: OnSent of PacketInfo{PSN: psn,
// Owner: o, Bytes: bytes, SentAt: at, FirstSentAt: at}, for the sender's every new packet.
// It takes the fields as they are, not a PacketInfo built by the caller: that is passed on
// the stack and copied with wide loads over the narrow stores that built it.
func (h *SentHistory[O]) Sent(psn wire.PSN, o O, bytes int, at int64) bool {
	if psn != h.next || h.Full() {
		return false
	}
	if h.next.Sub(h.start) == uint32(len(h.slots)) {
		h.grow() // below the capacity (not Full), so the ring may double
	}
	s := h.slot(psn)
	*s = sentSlot[O]{}
	s.PSN, s.Owner, s.Bytes, s.SentAt, s.FirstSentAt = psn, o, bytes, at, at
	h.next = h.next.Add(1)
	h.inflight++
	h.bytes += bytes
	return true
}

// grow doubles the ring, moving every slot in [start, next) to its place in the new one.
func (h *SentHistory[O]) grow() {
	ns := make([]sentSlot[O], 2*len(h.slots))
	nmask := uint32(len(ns) - 1)
	for p := h.start; p != h.next; p = p.Add(1) {
		ns[uint32(p)&nmask] = *h.slot(p)
	}
	h.slots, h.mask = ns, nmask
}

// outstanding returns the slot of psn if psn is in flight: sent and not acknowledged.
func (h *SentHistory[O]) outstanding(psn wire.PSN) *sentSlot[O] {
	if !psn.InWindow(h.start, h.next.Sub(h.start)) {
		return nil
	}
	s := h.slot(psn)
	if s.acked {
		return nil
	}
	return s
}

// OnRetransmitted records that the packet psn was sent again at now: its SentAt becomes
// now, Retransmits grows, and DetectLost may report it again (once) if this transmission
// is lost too. A psn that is not outstanding (acknowledged, or never sent) is ignored.
func (h *SentHistory[O]) OnRetransmitted(psn wire.PSN, now int64) {
	s := h.outstanding(psn)
	if s == nil {
		return
	}
	if s.lost {
		s.lost = false
		h.lostPkts--
		h.lostBytes -= s.Bytes
	}
	s.SentAt = now
	s.Retransmits++
	h.stats.Retransmitted++
	h.pushRetx(retxEntry{psn: psn, gen: uint32(s.Retransmits)})
}

// pushRetx appends e to the retransmission queue. A full queue first drops its stale
// entries; if more than half of it is still pending it doubles. The pending entries name
// distinct outstanding packets, at most len(slots), so a queue of 2*len(slots) entries never
// grows again and compaction then frees at least half of it (amortized O(1) per push).
func (h *SentHistory[O]) pushRetx(e retxEntry) {
	q := &h.rq
	if q.n == uint32(len(q.buf)) {
		j := uint32(0)
		for i := uint32(0); i < q.n; i++ {
			if x := q.at(i); h.pendingRetx(x) != nil {
				q.set(j, x)
				j++
			}
		}
		q.n = j
		if j > uint32(len(q.buf))/2 {
			q.grow()
		}
	}
	q.set(q.n, e)
	q.n++
}

// pendingRetx returns the slot of e's packet if e is its latest transmission and the
// packet is outstanding and not reported lost; nil when e is stale.
func (h *SentHistory[O]) pendingRetx(e retxEntry) *sentSlot[O] {
	s := h.outstanding(e.psn)
	if s == nil || s.lost || uint32(s.Retransmits) != e.gen {
		return nil
	}
	return s
}

// outstanding returns the slot of psn if psn is in flight: sent and not acknowledged.

// OnAck is OnAckBlocks without a block of recent arrivals: an acknowledgement of one SACK
// block (HighPSN equal to ackPSN).
func (h *SentHistory[O]) OnAck(ackPSN wire.PSN, sack uint64, now int64, acked []PacketInfo[O]) ([]PacketInfo[O], int64) {
	return h.OnAckBlocks(ackPSN, sack, ackPSN, 0, now, acked)
}

// OnAckBlocks applies an acknowledgement from the peer (the fields of wire.AckExt): every
// PSN before ackPSN arrived, bit i of sack says PSN ackPSN+1+i arrived, and bit i of
// highSack says PSN highPSN-1-i arrived (the peer's most recent arrivals, however far past
// ackPSN). It appends the packets this ack acknowledges
// for the first time to acked, in PSN order, and returns it, plus an RTT sample: now minus
// the SentAt of the newest newly acknowledged packet that was never retransmitted (Karn's
// rule, RFC 6298 §3), at least 1; 0 when there is none. The sample includes the time the
// peer held the ack (wire.AckExt.Delay); subtracting it is the caller's business.
//
// An ack is never trusted: an ackPSN beyond NextPSN makes the whole ack invalid and it
// changes nothing; an ackPSN behind the known cumulative point (a reordered or repeated
// ack) acknowledges nothing cumulatively but its SACK bits still count; a highPSN outside
// [ackPSN, NextPSN] makes the recent-arrivals block ignored (highPSN equal to ackPSN is the
// empty block); bits of either block naming PSNs outside (ackPSN, NextPSN) are ignored bit
// by bit. Stats counts each case. The work is proportional to the packets acknowledged
// (cumulatively or by set bits), whatever the window.
func (h *SentHistory[O]) OnAckBlocks(ackPSN wire.PSN, sack uint64, highPSN wire.PSN, highSack uint64, now int64, acked []PacketInfo[O]) ([]PacketInfo[O], int64) {
	h.stats.Acks++
	if h.next.Less(ackPSN) {
		h.stats.InvalidAcks++
		h.echoSet = false
		return acked, 0
	}
	// The recent-arrivals block, as bits of PSNs from restBase: the part within the first
	// block's reach (ackPSN+1..ackPSN+64) is merged into sack, so that packets are
	// acknowledged in PSN order; the rest lies beyond it.
	var rest uint64
	var restBase wire.PSN
	if d := highPSN.Sub(ackPSN); d > h.next.Sub(ackPSN) {
		h.stats.IgnoredBlocks++ // behind ackPSN, or beyond NextPSN
	} else if highSack != 0 {
		// r: bit j is PSN highPSN-64+j. Bits of PSNs at or before ackPSN are dropped (shifts
		// of 64 or more give 0).
		r := bits.Reverse64(highSack)
		if d < 65 {
			keep := r & (^uint64(0) << (65 - d))
			h.stats.IgnoredSACKBits += uint64(bits.OnesCount64(r &^ keep))
			r = keep
		}
		if d <= 65 {
			sack |= r >> (65 - d) // all within the first block: highPSN-1 <= ackPSN+64
		} else {
			// j maps to sack bit j+d-65; the bits past sack's top are PSNs from
			// ackPSN+65 on, or the whole block when it does not overlap sack at all.
			sack |= r << (d - 65)
			if d < 129 {
				rest, restBase = r>>(129-d), ackPSN.Add(65)
			} else {
				rest, restBase = r, highPSN-64
			}
		}
	}
	before := len(acked)
	var sample int64
	var sampled bool

	// Cumulative part: [start, ackPSN).
	if h.start.Less(ackPSN) {
		for p := h.start; p != ackPSN; p = p.Add(1) {
			if s := h.slot(p); !s.acked {
				acked = h.markAcked(s, now, acked, &sample, &sampled)
			}
		}
	} else if ackPSN.Less(h.start) {
		h.stats.StaleAcks++
	}

	// Selective part: bit i is ackPSN+1+i.
	for sack != 0 {
		i := uint32(bits.TrailingZeros64(sack))
		p := ackPSN.Add(1 + i)
		if !p.Less(h.next) {
			// This bit and every higher one name PSNs never sent.
			h.stats.IgnoredSACKBits += uint64(bits.OnesCount64(sack))
			break
		}
		sack &= sack - 1
		if s := h.outstanding(p); s != nil {
			acked = h.markAcked(s, now, acked, &sample, &sampled)
		}
	}
	// The recent arrivals beyond the first block (all before NextPSN: highPSN <= NextPSN).
	for rest != 0 {
		p := restBase.Add(uint32(bits.TrailingZeros64(rest)))
		rest &= rest - 1
		if s := h.outstanding(p); s != nil {
			acked = h.markAcked(s, now, acked, &sample, &sampled)
		}
	}

	h.echoSet = false
	if len(acked) == before {
		h.stats.DuplicateAcks++
		return acked, 0
	}
	// Release the ring from the front over everything acknowledged.
	for h.start != h.next && h.slot(h.start).acked {
		h.start = h.start.Add(1)
	}
	if sampled && (h.minRTT == 0 || sample < h.minRTT) {
		h.minRTT = sample
	}
	return acked, sample
}

// markAcked acknowledges one outstanding packet: counters, RACK state (RFC 8985 §6.2
// step 2), Karn's RTT sample. Packets arrive here in ascending PSN order.
func (h *SentHistory[O]) markAcked(s *sentSlot[O], now int64, acked []PacketInfo[O], sample *int64, sampled *bool) []PacketInfo[O] {
	s.acked = true
	h.inflight--
	h.bytes -= s.Bytes
	if s.lost {
		s.lost = false
		h.lostPkts--
		h.lostBytes -= s.Bytes
	}
	h.stats.Acked++
	if !h.anyAcked || h.highestAcked.Less(s.PSN) {
		h.highestAcked, h.anyAcked = s.PSN, true
	}
	rtt := now - s.SentAt
	if rtt < 1 {
		rtt = 1
	}
	if s.Retransmits == 0 {
		*sample, *sampled = rtt, true
	}
	// RACK: a retransmitted packet may be acknowledged for an earlier transmission; an RTT
	// below the minimum says so, and then it says nothing about what was delivered when.
	// So does an ack whose timestamp echo is older than the retransmission (RFC 8985 §6.2
	// step 2, "Packet.xmit_ts > ACK.TSecr"): after a spurious timeout during a host's stall
	// longer than the minimum RTT, taking the late ack of the original as the delivery of
	// the retransmission declared the whole flight sent before it lost, and sent it again
	// (TestLongPathSpurious, a 40 ms stall on a 10 ms path: 12 retransmissions for 3
	// timeouts and a tail probe, 4 with this check; on the delay line's bed 585 with
	// nothing lost in 6 s of write-bw).
	early := s.Retransmits > 0 && h.echoSet && int32(uint32(s.SentAt/1000)-h.echo) > 0
	if !early && (s.Retransmits == 0 || h.minRTT == 0 || rtt >= h.minRTT) {
		if !h.rackValid || sentAfter(s.SentAt, s.PSN, h.rackXmit, h.rackPSN) {
			h.rackValid = true
			h.rackXmit, h.rackPSN = s.SentAt, s.PSN
			h.rackRTT = rtt
			h.rackRetx = s.Retransmits > 0
		}
	}
	return append(acked, s.PacketInfo)
}

// SetEcho gives the timestamp echo (wire.AckExt.EchoTS, microseconds of the clock that
// sent the packets, wrapping; 0 for none) of the next ack OnAckBlocks applies, for RACK's
// check of retransmitted packets (markAcked). It holds for that one call.
func (h *SentHistory[O]) SetEcho(ts uint32) { h.echo, h.echoSet = ts, ts != 0 }

// sentAfter reports whether a packet sent at t1 with PSN p1 was sent after one sent at t2
// with PSN p2 (RFC 8985 RACK_sent_after; the PSN breaks ties of equal times).
func sentAfter(t1 int64, p1 wire.PSN, t2 int64, p2 wire.PSN) bool {
	return t1 > t2 || (t1 == t2 && p2.Less(p1))
}

// Oldest returns the unacknowledged packet with the lowest PSN (the one the RTO timer
// guards), and false when nothing is in flight.
func (h *SentHistory[O]) Oldest() (PacketInfo[O], bool) {
	if h.inflight == 0 {
		return PacketInfo[O]{}, false
	}
	// start is unacknowledged whenever something is in flight: OnAck releases the front.
	return h.slot(h.start).PacketInfo, true
}

// InFlight returns the number of packets sent and not yet acknowledged, and the sum of
// their Bytes. Packets reported lost and not yet retransmitted are included (Lost says how
// many); a congestion controller that wants the bytes actually in the network subtracts
// them.
func (h *SentHistory[O]) InFlight() (packets, bytes int) { return h.inflight, h.bytes }

// Lost returns the number of packets DetectLost reported that have been neither
// retransmitted nor acknowledged since, and the sum of their Bytes.
func (h *SentHistory[O]) Lost() (packets, bytes int) { return h.lostPkts, h.lostBytes }

// NextPSN returns the PSN the next OnSent must carry (the initial PSN before the first).
func (h *SentHistory[O]) NextPSN() wire.PSN { return h.next }

// MinRTT returns the smallest RTT sample OnAck has produced, in nanoseconds, 0 before the
// first. RFC 8985 §6.2 step 4 derives the reordering window from it (MinRTT/4).
func (h *SentHistory[O]) MinRTT() int64 { return h.minRTT }

// Stats returns the counters.
func (h *SentHistory[O]) Stats() Stats { return h.stats }

// Lookup returns the outstanding (sent, not yet acknowledged) packet psn, and false when
// psn is not outstanding.
func (h *SentHistory[O]) Lookup(psn wire.PSN) (PacketInfo[O], bool) {
	if s := h.outstanding(psn); s != nil {
		return s.PacketInfo, true
	}
	return PacketInfo[O]{}, false
}

// Reset forgets every outstanding packet, as when the QP enters the error state and its
// work completes with an error: nothing is in flight or lost afterwards and acks for the
// forgotten PSNs change nothing. NextPSN, MinRTT and Stats are kept; the stream continues
// from NextPSN.
func (h *SentHistory[O]) Reset() {
	for p := h.start; p != h.next; p = p.Add(1) {
		*h.slot(p) = sentSlot[O]{}
	}
	h.start = h.next
	h.inflight, h.bytes = 0, 0
	h.lostPkts, h.lostBytes = 0, 0
	h.anyAcked, h.highestAcked = false, 0
	h.rackValid, h.rackRetx = false, false
	h.rackXmit, h.rackPSN, h.rackRTT = 0, 0, 0
	h.lossTime = earliest{}
	h.scan = h.next
	h.rq.head, h.rq.n = 0, 0
}

// Unacked appends every unacknowledged packet to dst in PSN order and returns it. It
// exists for the go-back-N mode that the benchmarks compare against; selective
// retransmission uses DetectLost.
func (h *SentHistory[O]) Unacked(dst []PacketInfo[O]) []PacketInfo[O] {
	for p := h.start; p != h.next; p = p.Add(1) {
		if s := h.slot(p); !s.acked {
			dst = append(dst, s.PacketInfo)
		}
	}
	return dst
}
