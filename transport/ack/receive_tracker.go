package ack

import (
	"math/bits"

	"github.com/xdpndk/xdpndk/transport/wire"
)

// Limits and default of a ReceiveTracker's window, in PSNs.
const (
	// DefaultWindow is the window NewReceiveTracker uses when given a window of zero or less.
	DefaultWindow = 1024
	// MinWindow is the smallest window: at least the 64 PSNs one SACK bitmap covers.
	MinWindow = 64
	// MaxWindow is the largest window (a 128 KiB bitmap), far below the 2^31 PSNs that
	// serial-number comparison allows.
	MaxWindow = 1 << 20
	// initialBits is the ring a tracker starts with (its window if smaller): 128 bytes.
	// It doubles when a PSN arrives further ahead of the cumulative point, up to the window.
	initialBits = 1024
)

// Verdict is what a ReceiveTracker says about an arriving data packet.
type Verdict uint8

// Verdicts returned by ReceiveTracker.Receive.
const (
	// New: the first arrival of this PSN. Deliver (place) the packet.
	New Verdict = iota
	// Duplicate: this PSN arrived before, either behind the cumulative point by at most a
	// window (a retransmission whose acknowledgement the sender has not seen) or beyond it
	// and already recorded. Drop the packet but acknowledge again, so the sender learns
	// what it missed.
	Duplicate
	// TooOld: more than a window behind the cumulative point. It is a duplicate of
	// something acknowledged long ago; a sender that respects the window never sends it,
	// so it is stale or forged. Drop it; re-acknowledging is not needed.
	TooOld
	// TooNew: at or beyond the end of the window (the cumulative point plus the window).
	// A sender that respects the window never sends it. Drop it, record nothing.
	TooNew
)

// String returns the verdict's name.
func (v Verdict) String() string {
	switch v {
	case New:
		return "New"
	case Duplicate:
		return "Duplicate"
	case TooOld:
		return "TooOld"
	case TooNew:
		return "TooNew"
	}
	return "Verdict(?)"
}

// ReceiveTracker is the responder's record of which PSNs of the peer's stream arrived: a
// cumulative point (every PSN before it arrived), a bitmap of the window of PSNs after it
// and the highest PSN that arrived. It tells the engine whether an arriving packet is new
// and produces the AckPSN and SACK fields of wire.AckExt (Cumulative, SACK) and its block of
// the most recent arrivals (High).
//
// The bitmap is a ring of bits indexed by PSN modulo the ring's size (a power of two that
// starts at initialBits and doubles, up to the window, when a PSN arrives beyond it): the
// slot of PSN p holds whether p arrived, for every p in [Cumulative, Cumulative+ring).
// Every PSN of the window beyond the ring has not arrived. Invariants: the bit of
// Cumulative itself is clear (else the point would have advanced), and every bit whose PSN
// is outside [Cumulative, Cumulative+ring) is clear, so a slot is clean when the ring
// slides onto it; high (one past the highest PSN that arrived) lies in [Cumulative,
// Cumulative+window].
//
// A ReceiveTracker is owned by one engine goroutine and is not safe for concurrent use.
// Only Receive allocates, to grow the ring (see there).
type ReceiveTracker struct {
	words   []uint64 // the ring: a power of two bits, at least 64, at most window
	mask    uint32   // bits in the ring - 1
	window  uint32
	cum     wire.PSN // next expected PSN: every PSN before it arrived
	high    wire.PSN // one past the highest PSN that arrived; cum when none after cum did
	last    wire.PSN // one past the PSN that arrived last (new arrivals only)
	pending int      // number of set bits: PSNs after cum that arrived
}

// NewReceiveTracker returns a tracker whose stream starts at initial (the peer's initial
// PSN, the first one expected) and that accepts PSNs up to window ahead of the cumulative
// point. The sender never has more than its window in flight, so the window must be at
// least the sender's; it is rounded up to a power of two and clamped to
// [MinWindow, MaxWindow]; zero or less means DefaultWindow.
func NewReceiveTracker(initial wire.PSN, window int) *ReceiveTracker {
	w := normalizeWindow(window)
	n := min(w, initialBits)
	return &ReceiveTracker{
		words:  make([]uint64, n/64),
		mask:   n - 1,
		window: w,
		cum:    initial,
		high:   initial,
		last:   initial,
	}
}

func normalizeWindow(window int) uint32 {
	switch {
	case window <= 0:
		window = DefaultWindow
	case window < MinWindow:
		window = MinWindow
	case window > MaxWindow:
		window = MaxWindow
	}
	// Round up to a power of two (window <= MaxWindow, so this fits).
	return uint32(1) << bits.Len32(uint32(window-1))
}

// Window returns the tracker's window in PSNs (after rounding and clamping).
func (t *ReceiveTracker) Window() int { return int(t.window) }

// Check returns the verdict Receive would return for psn, without recording anything. The
// engine checks a packet first, validates and places it, and calls Receive only if it was
// accepted, so a packet refused after the check (no receive posted: RNR) is taken again
// when it is retransmitted.
func (t *ReceiveTracker) Check(psn wire.PSN) Verdict {
	if psn.Less(t.cum) {
		if t.cum.Sub(psn) <= t.window {
			return Duplicate
		}
		return TooOld
	}
	if !psn.InWindow(t.cum, t.window) {
		return TooNew
	}
	if psn.Sub(t.cum) > t.mask {
		return New // beyond the ring: nothing there arrived yet
	}
	slot := uint32(psn) & t.mask
	if t.words[slot>>6]&(uint64(1)<<(slot&63)) != 0 {
		return Duplicate
	}
	return New
}

// grow doubles the ring until psn fits in it (psn is in the window), moving the arrivals
// after the cumulative point to their slots in the new ring.
func (t *ReceiveTracker) grow(psn wire.PSN) {
	n := uint32(len(t.words)) * 64
	for psn.Sub(t.cum) >= n {
		n <<= 1
	}
	nw := make([]uint64, n/64)
	for p := t.cum.Add(1); t.pending > 0 && p != t.high; p = p.Add(1) {
		slot := uint32(p) & t.mask
		if t.words[slot>>6]&(uint64(1)<<(slot&63)) != 0 {
			ns := uint32(p) & (n - 1)
			nw[ns>>6] |= uint64(1) << (ns & 63)
		}
	}
	t.words, t.mask = nw, n-1
}

// Receive records the arrival of psn and says what to do with the packet (the verdicts
// are those of Check). A New PSN equal to the cumulative point advances it over every
// contiguous PSN that arrived. Receive never panics, whatever psn is; it allocates only to
// grow the ring (doubling, up to the window) for a PSN further ahead of the cumulative
// point than it covers, so a tracker whose peer keeps few packets in flight stays small.
func (t *ReceiveTracker) Receive(psn wire.PSN) Verdict {
	if psn == t.cum {
		// Always new (the bit of the cumulative point is clear). Slide over the run of
		// arrivals after it.
		t.cum = t.cum.Add(1)
		if t.pending > 0 {
			t.advance()
		}
		t.high = t.high.Max(t.cum)
		t.last = psn.Add(1)
		return New
	}
	if v := t.Check(psn); v != New {
		return v
	}
	if psn.Sub(t.cum) > t.mask {
		t.grow(psn)
	}
	slot := uint32(psn) & t.mask
	t.words[slot>>6] |= uint64(1) << (slot & 63)
	t.pending++
	t.high = t.high.Max(psn.Add(1))
	t.last = psn.Add(1)
	return New
}

// advance moves the cumulative point over the run of set bits starting at its slot,
// clearing them. It works a word at a time.
func (t *ReceiveTracker) advance() {
	for t.pending > 0 {
		slot := uint32(t.cum) & t.mask
		w, off := slot>>6, slot&63
		// Length of the run of set bits from off; the zeros shifted in at the top stop it
		// at the word's end (64-off) at the latest.
		run := uint32(bits.TrailingZeros64(^(t.words[w] >> off)))
		if run == 0 {
			return
		}
		if run == 64 {
			t.words[w] = 0
		} else {
			t.words[w] &^= ((uint64(1) << run) - 1) << off
		}
		t.pending -= int(run)
		t.cum = t.cum.Add(run)
		if off+run < 64 {
			return // stopped at a clear bit inside this word
		}
	}
}

// Cumulative returns the next expected PSN: every PSN before it arrived. It is the AckPSN
// of an acknowledgement.
func (t *ReceiveTracker) Cumulative() wire.PSN { return t.cum }

// SACK returns the selective-acknowledgement bitmap of an acknowledgement: bit i is set
// when PSN Cumulative()+1+i arrived.
func (t *ReceiveTracker) SACK() uint64 {
	if t.pending == 0 {
		return 0
	}
	return t.bits64(t.cum.Add(1))
}

// High returns the block of the most recent arrivals of an acknowledgement (wire.AckExt
// HighPSN, HighSACK): one past the PSN that arrived last if that is past the cumulative
// point, else one past the highest PSN that arrived (Cumulative() when none after it did);
// and a bitmap whose bit i is set when PSN high-1-i arrived after the cumulative point
// (bits of PSNs before Cumulative() are clear: the cumulative part acknowledges them).
//
// Anchoring at the latest arrival, as TCP's first SACK block contains the segment that
// triggered the ack (RFC 2018), reports a retransmission that filled a hole far from both
// the cumulative point and the highest arrival: anchored at the highest arrival only, such
// a repair was invisible until the cumulative point passed it, and RACK declared it lost
// again (14% of retransmissions were duplicates at 1% loss on a 1 ms path).
func (t *ReceiveTracker) High() (wire.PSN, uint64) {
	if t.pending == 0 {
		return t.cum, 0
	}
	a := t.high
	if t.cum.Less(t.last) && t.last.Less(t.high) {
		a = t.last
	}
	b := t.bits64(a - 64) // bit j is PSN a-64+j
	if below := t.cum.Sub(a - 64); below < 64 && (a - 64).Less(t.cum) {
		// PSNs before the cumulative point: their slots may hold arrivals a window later.
		b &^= (uint64(1) << below) - 1
	}
	return a, bits.Reverse64(b)
}

// bits64 returns the ring bits of the 64 PSNs from first: bit j is the slot of first+j. The
// caller makes sure each of those slots holds that PSN or one that did not arrive.
func (t *ReceiveTracker) bits64(first wire.PSN) uint64 {
	start := uint32(first) & t.mask
	w, off := start>>6, start&63
	s := t.words[w] >> off
	if off != 0 {
		// The next word of the ring (with a one-word ring, the same word: its bits below
		// off are the slots of first+64-off..., which the callers guarantee read correctly
		// as not arrived).
		next := (w + 1) & (t.mask >> 6)
		s |= t.words[next] << (64 - off)
	}
	return s
}

// HasGap reports whether some PSN beyond the cumulative point arrived, i.e. whether
// Cumulative() is a hole the sender should fill.
func (t *ReceiveTracker) HasGap() bool { return t.pending > 0 }

// Pending returns the number of PSNs beyond the cumulative point that arrived.
func (t *ReceiveTracker) Pending() int { return t.pending }
