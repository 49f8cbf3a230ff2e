package ack

import (
	"math"
	"testing"

	"github.com/xdpndk/xdpndk/transport/wire"
)

// step is one Receive and its expected verdict.
type step struct {
	psn  wire.PSN
	want Verdict
}

func TestReceiveTracker(t *testing.T) {
	const top = math.MaxUint32 // the last PSN before the wrap
	for _, tc := range []struct {
		name    string
		initial wire.PSN
		window  int
		steps   []step
		cum     wire.PSN
		sack    uint64
		gap     bool
	}{
		{
			name:    "in order",
			initial: 100, window: 64,
			steps: []step{{100, New}, {101, New}, {102, New}},
			cum:   103,
		},
		{
			name:    "in order across the wrap",
			initial: top - 1, window: 64,
			steps: []step{{top - 1, New}, {top, New}, {0, New}, {1, New}},
			cum:   2,
		},
		{
			name:    "holes",
			initial: 100, window: 64,
			steps: []step{{101, New}, {103, New}, {110, New}},
			cum:   100, sack: 1<<0 | 1<<2 | 1<<9, gap: true,
		},
		{
			name:    "hole filled slides over the run",
			initial: 100, window: 64,
			steps: []step{{101, New}, {102, New}, {104, New}, {100, New}},
			cum:   103, sack: 1 << 0, gap: true,
		},
		{
			name:    "all holes filled",
			initial: 100, window: 64,
			steps: []step{{103, New}, {101, New}, {102, New}, {100, New}},
			cum:   104,
		},
		{
			name:    "holes across the wrap",
			initial: top - 2, window: 64,
			steps: []step{{top - 1, New}, {0, New}, {2, New}},
			// cum top-2; bit i = top-1+i: top-1 -> 0, 0 -> 2, 2 -> 4
			cum: top - 2, sack: 1<<0 | 1<<2 | 1<<4, gap: true,
		},
		{
			name:    "fill across the wrap",
			initial: top - 2, window: 64,
			steps: []step{{top - 1, New}, {0, New}, {2, New}, {top - 2, New}, {top, New}},
			cum:   1, sack: 1 << 0, gap: true,
		},
		{
			name:    "duplicates beyond and behind the cumulative point",
			initial: 100, window: 64,
			steps: []step{{100, New}, {102, New}, {102, Duplicate}, {100, Duplicate}, {99 - 62, Duplicate}},
			cum:   101, sack: 1 << 0, gap: true,
		},
		{
			name:    "too old: more than a window behind",
			initial: 100, window: 64,
			steps: []step{{36, Duplicate}, {35, TooOld}, {0, TooOld}},
			cum:   100,
		},
		{
			name:    "too old across the wrap",
			initial: 10, window: 64,
			steps: []step{{top - 53, Duplicate}, {top - 54, TooOld}},
			cum:   10,
		},
		{
			name:    "too new: at the window's end",
			initial: 100, window: 64,
			steps: []step{{164, TooNew}, {163, New}, {100 + 1<<20, TooNew}},
			cum:   100, sack: 1 << 62, gap: true,
		},
		{
			name:    "too new across the wrap",
			initial: top - 9, window: 64,
			steps: []step{{54, TooNew}, {53, New}},
			cum:   top - 9, sack: 1 << 62, gap: true,
		},
		{
			name:    "half the PSN space away is old, just under it is new",
			initial: 1000, window: 64,
			steps: []step{{1000 + 1<<31, TooOld}, {1000 + 1<<31 - 1, TooNew}},
			cum:   1000,
		},
		{
			name:    "window of 64: bit 63 never set",
			initial: 0, window: 64,
			steps: []step{{62, New}, {63, New}, {64, TooNew}},
			cum:   0, sack: 1<<61 | 1<<62, gap: true,
		},
		{
			name:    "window of 128: bit 63 is cum+64",
			initial: 0, window: 128,
			steps: []step{{64, New}, {127, New}, {128, TooNew}},
			cum:   0, sack: 1 << 63, gap: true,
		},
		{
			name:    "window slides and slots are reused",
			initial: 0, window: 64,
			steps: []step{{0, New}, {64, New}, {65, TooNew}, {1, New}, {65, New}},
			// cum 2; 64 and 65 arrived: bits 61, 62
			cum: 2, sack: 1<<61 | 1<<62, gap: true,
		},
		{
			name:    "window rounded up to a power of two",
			initial: 0, window: 100, // -> 128
			steps: []step{{127, New}, {128, TooNew}},
			cum:   0, gap: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReceiveTracker(tc.initial, tc.window)
			for i, s := range tc.steps {
				if got := r.Receive(s.psn); got != s.want {
					t.Errorf("step %d: Receive(%d) = %v, want %v", i, s.psn, got, s.want)
				}
			}
			if got := r.Cumulative(); got != tc.cum {
				t.Errorf("Cumulative = %d, want %d", got, tc.cum)
			}
			if got := r.SACK(); got != tc.sack {
				t.Errorf("SACK = %#x, want %#x", got, tc.sack)
			}
			if got := r.HasGap(); got != tc.gap {
				t.Errorf("HasGap = %v, want %v", got, tc.gap)
			}
		})
	}
}

// TestReceiveTrackerLongRuns fills a large window out of order so that the slide crosses
// many words of the ring at once, also across the wrap.
func TestReceiveTrackerLongRuns(t *testing.T) {
	for _, initial := range []wire.PSN{0, math.MaxUint32 - 300, math.MaxUint32 - 63} {
		r := NewReceiveTracker(initial, 1024)
		for i := uint32(1); i < 1000; i++ {
			if v := r.Receive(initial.Add(i)); v != New {
				t.Fatalf("initial %d: Receive(+%d) = %v", initial, i, v)
			}
		}
		if r.Cumulative() != initial || r.SACK() != math.MaxUint64 || r.Pending() != 999 {
			t.Fatalf("initial %d: cum %d sack %#x pending %d", initial, r.Cumulative(), r.SACK(), r.Pending())
		}
		if v := r.Receive(initial); v != New {
			t.Fatalf("Receive(initial) = %v", v)
		}
		if r.Cumulative() != initial.Add(1000) || r.SACK() != 0 || r.HasGap() {
			t.Fatalf("initial %d: after fill cum %d sack %#x gap %v", initial, r.Cumulative(), r.SACK(), r.HasGap())
		}
		// The whole ring is clean again: the next window's worth arrives in order.
		for i := uint32(1000); i < 3000; i++ {
			if v := r.Receive(initial.Add(i)); v != New {
				t.Fatalf("initial %d: second pass Receive(+%d) = %v", initial, i, v)
			}
		}
		if r.Cumulative() != initial.Add(3000) || r.HasGap() {
			t.Fatalf("second pass: cum %d gap %v", r.Cumulative(), r.HasGap())
		}
	}
}

func TestNormalizeWindow(t *testing.T) {
	for _, tc := range []struct{ in, want int }{
		{-5, DefaultWindow}, {0, DefaultWindow}, {1, MinWindow}, {64, 64}, {65, 128},
		{1000, 1024}, {1024, 1024}, {MaxWindow, MaxWindow}, {MaxWindow + 1, MaxWindow}, {math.MaxInt, MaxWindow},
	} {
		if got := NewReceiveTracker(0, tc.in).Window(); got != tc.want {
			t.Errorf("window %d -> %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestVerdictString(t *testing.T) {
	for v, s := range map[Verdict]string{New: "New", Duplicate: "Duplicate", TooOld: "TooOld", TooNew: "TooNew", 9: "Verdict(?)"} {
		if v.String() != s {
			t.Errorf("%d.String() = %q, want %q", v, v.String(), s)
		}
	}
}

// TestReceiveTrackerHigh checks the block of the most recent arrivals: it follows the
// latest arrival (the highest, for first transmissions in order; a repair far past the
// first hole when one arrives) however far past the first hole, reports the 64 PSNs below
// it (clear for
// the holes and for PSNs before the cumulative point), and collapses to (Cumulative, 0) when
// nothing after the cumulative point arrived.
func TestReceiveTrackerHigh(t *testing.T) {
	const initial = wire.PSN(math.MaxUint32 - 100) // the stream wraps inside the test
	r := NewReceiveTracker(initial, 16384)
	if hp, hs := r.High(); hp != initial || hs != 0 {
		t.Fatalf("empty: High %d %#x, want %d 0", hp, hs, initial)
	}
	// Everything up to initial+5000 except initial+10 and every 100th PSN after it.
	for i := uint32(0); i < 5000; i++ {
		if i == 10 || (i > 10 && i%100 == 0) {
			continue
		}
		r.Receive(initial.Add(i))
	}
	if r.Cumulative() != initial.Add(10) {
		t.Fatalf("Cumulative %d, want %d", r.Cumulative(), initial.Add(10))
	}
	hp, hs := r.High()
	if hp != initial.Add(5000) {
		t.Fatalf("HighPSN %d, want %d", hp, initial.Add(5000))
	}
	// PSNs 4999 down to 4936 all arrived (none is a multiple of 100).
	if hs != math.MaxUint64 {
		t.Fatalf("HighSACK %#x, want all ones", hs)
	}
	r.Receive(initial.Add(5050)) // a new highest beyond a run of holes (5000..5049)
	hp, hs = r.High()
	// Bit 0 is 5050; bits 51..63 are 4999..4987, which arrived.
	const older = uint64(1<<13-1) << 51
	if want := 1 | older; hp != initial.Add(5051) || hs != want {
		t.Fatalf("after 5050: High %d %#x, want %d %#x", hp, hs, initial.Add(5051), want)
	}
	r.Receive(initial.Add(5020)) // below the highest (a repair): the block follows it
	hp, hs = r.High()
	// Bit 0 is 5020; 5019..5000 are holes; bits 21..63 are 4999..4957, which arrived.
	if want := 1 | uint64(1<<43-1)<<21; hp != initial.Add(5021) || hs != want {
		t.Fatalf("after 5020: High %d %#x, want %d %#x", hp, hs, initial.Add(5021), want)
	}
	r.Receive(initial.Add(5051)) // a new highest again: the block returns to the front
	if hp, _ = r.High(); hp != initial.Add(5052) {
		t.Fatalf("after 5051: HighPSN %d, want %d", hp, initial.Add(5052))
	}

	// A short stream: the block overlaps the cumulative point, whose PSNs read clear.
	r = NewReceiveTracker(initial, 64)
	r.Receive(initial)
	r.Receive(initial.Add(2))
	hp, hs = r.High()
	if hp != initial.Add(3) || hs != 1 {
		t.Fatalf("short: High %d %#x, want %d 0x1", hp, hs, initial.Add(3))
	}
	r.Receive(initial.Add(1)) // fills the hole: nothing beyond the cumulative point
	if hp, hs = r.High(); hp != initial.Add(3) || hs != 0 || r.Cumulative() != hp {
		t.Fatalf("filled: High %d %#x, Cumulative %d", hp, hs, r.Cumulative())
	}
}
