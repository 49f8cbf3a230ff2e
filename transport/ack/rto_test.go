package ack

import (
	"math"
	"testing"
	"time"
)

const us = int64(time.Microsecond)

// TestRTOSamples checks SRTT, RTTVAR and the RTO after each sample against values worked
// out by hand from RFC 6298 §2 (integer nanoseconds, truncating division).
func TestRTOSamples(t *testing.T) {
	type after struct{ sample, srtt, rttvar, rto int64 }
	for _, tc := range []struct {
		name  string
		cfg   RTOConfig
		steps []after
	}{
		{
			name: "defaults",
			steps: []after{
				// first: SRTT = R, RTTVAR = R/2, RTO = SRTT + 4*RTTVAR = 100 + 200
				{100 * us, 100 * us, 50 * us, 300 * us},
				// RTTVAR = (3*50 + |100-200|)/4 = 62.5; SRTT = (7*100 + 200)/8 = 112.5
				{200 * us, 112_500, 62_500, 112_500 + 4*62_500},
				// RTTVAR = (3*62.5 + 12.5)/4 = 50; SRTT = (7*112.5 + 100)/8 = 110.9375
				{100 * us, 110_937, 50_000, 110_937 + 200_000},
			},
		},
		{
			name: "clamped to Min",
			steps: []after{
				// 10 + 4*5 = 30 µs < 200 µs
				{10 * us, 10 * us, 5 * us, 200 * us},
				// RTTVAR = (15 + 0)/4 = 3.75; SRTT 10: 25 µs < 200 µs
				{10 * us, 10 * us, 3_750, 200 * us},
			},
		},
		{
			name: "clamped to Max",
			steps: []after{
				// 400 + 4*200 ms = 1.2 s > 500 ms
				{400 * int64(time.Millisecond), 400 * int64(time.Millisecond), 200 * int64(time.Millisecond), 500 * int64(time.Millisecond)},
			},
		},
		{
			name: "granularity G = 1 µs when RTTVAR is tiny",
			cfg:  RTOConfig{Min: 1},
			steps: []after{
				{1000, 1000, 500, 3000},
				// RTTVAR = (1500 + 0)/4 = 375; 4*375 = 1500 > G
				{1000, 1000, 375, 2500},
				// RTTVAR = 1125/4 = 281; 4*281 = 1124 > G
				{1000, 1000, 281, 2124},
				// RTTVAR = 843/4 = 210; 4*210 = 840 < G: RTO = SRTT + G
				{1000, 1000, 210, 2000},
			},
		},
		{
			name: "a decreasing RTT",
			cfg:  RTOConfig{Min: 1},
			steps: []after{
				{8000, 8000, 4000, 24000},
				// RTTVAR = (3*4000 + |8000-1000|)/4 = 4750; SRTT = (7*8000 + 1000)/8 = 7125
				{1000, 7125, 4750, 7125 + 4*4750},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRTO(tc.cfg)
			for i, s := range tc.steps {
				r.Sample(s.sample)
				if r.SRTT() != s.srtt || r.RTTVar() != s.rttvar || r.Timeout() != s.rto {
					t.Errorf("after sample %d (%d): SRTT %d RTTVAR %d RTO %d, want %d %d %d",
						i, s.sample, r.SRTT(), r.RTTVar(), r.Timeout(), s.srtt, s.rttvar, s.rto)
				}
			}
		})
	}
}

func TestRTOInitialAndConfig(t *testing.T) {
	ms := int64(time.Millisecond)
	for _, tc := range []struct {
		name              string
		cfg               RTOConfig
		initial, min, max int64
	}{
		{"zero means defaults", RTOConfig{}, 2 * ms, 200 * us, 500 * ms},
		{"negative means defaults", RTOConfig{Initial: -1, Min: -1, Max: -1}, 2 * ms, 200 * us, 500 * ms},
		{"Initial above Max", RTOConfig{Initial: time.Second, Max: 100 * time.Millisecond}, 100 * ms, 200 * us, 100 * ms},
		{"Initial below Min", RTOConfig{Initial: time.Microsecond, Min: time.Millisecond}, ms, ms, 500 * ms},
		{"Max below Min", RTOConfig{Min: time.Second, Max: time.Millisecond}, time.Second.Nanoseconds(), time.Second.Nanoseconds(), time.Second.Nanoseconds()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRTO(tc.cfg)
			if r.Timeout() != tc.initial || r.SRTT() != 0 || r.RTTVar() != 0 {
				t.Fatalf("Timeout %d SRTT %d RTTVAR %d, want %d 0 0", r.Timeout(), r.SRTT(), r.RTTVar(), tc.initial)
			}
			r.Sample(1) // tiny: clamped to Min
			if r.Timeout() != tc.min {
				t.Errorf("min: Timeout %d, want %d", r.Timeout(), tc.min)
			}
			r.Sample(int64(time.Hour)) // huge: clamped to Max
			if r.Timeout() != tc.max {
				t.Errorf("max: Timeout %d, want %d", r.Timeout(), tc.max)
			}
		})
	}
	if d := DefaultRTOConfig(); d.Initial != 2*time.Millisecond || d.Min != 200*time.Microsecond || d.Max != 500*time.Millisecond {
		t.Errorf("DefaultRTOConfig = %+v", d)
	}
}

func TestRTOBackoff(t *testing.T) {
	r := NewRTO(RTOConfig{})
	if r.Timeout() != 2000*us {
		t.Fatalf("initial %d", r.Timeout())
	}
	// Backoff before any sample doubles the initial RTO.
	r.Backoff()
	if r.Timeout() != 4000*us || r.Backoffs() != 1 {
		t.Fatalf("backed-off initial %d (%d)", r.Timeout(), r.Backoffs())
	}
	r.Sample(100 * us) // RTO 300 µs; a new sample replaces the backed-off value
	if r.Timeout() != 300*us || r.Backoffs() != 0 {
		t.Fatalf("after sample %d (%d)", r.Timeout(), r.Backoffs())
	}
	want := []int64{600, 1200, 2400, 4800, 9600, 19200, 38400, 76800, 153600, 307200, 500000, 500000}
	for i, w := range want {
		r.Backoff()
		if r.Timeout() != w*us || r.Backoffs() != i+1 {
			t.Fatalf("backoff %d: Timeout %d (%d), want %d", i+1, r.Timeout(), r.Backoffs(), w*us)
		}
	}
	for i := 0; i < 1000; i++ { // the count keeps growing, the timeout stays at Max
		r.Backoff()
	}
	if r.Timeout() != 500*int64(time.Millisecond) || r.Backoffs() != len(want)+1000 {
		t.Fatalf("after many: %d (%d)", r.Timeout(), r.Backoffs())
	}
	r.ResetBackoff()
	if r.Timeout() != 300*us || r.Backoffs() != 0 {
		t.Fatalf("after reset %d (%d)", r.Timeout(), r.Backoffs())
	}
}

func TestRTOExtremes(t *testing.T) {
	// A Max near the int64 limit: doubling must not overflow.
	r := NewRTO(RTOConfig{Initial: time.Duration(math.MaxInt64 / 3), Max: time.Duration(math.MaxInt64)})
	for i := 0; i < 100; i++ {
		r.Backoff()
	}
	if r.Timeout() != math.MaxInt64 {
		t.Fatalf("Timeout %d", r.Timeout())
	}
	// Samples that are nonsense are ignored or capped.
	r = NewRTO(RTOConfig{})
	r.Sample(0)
	r.Sample(-5)
	if r.SRTT() != 0 || r.Timeout() != 2000*us {
		t.Fatalf("non-positive samples used: SRTT %d", r.SRTT())
	}
	r.Sample(math.MaxInt64)
	r.Sample(math.MaxInt64)
	if r.SRTT() != maxRTTSample || r.RTTVar() <= 0 || r.Timeout() != 500*int64(time.Millisecond) {
		t.Fatalf("huge samples: SRTT %d RTTVAR %d RTO %d", r.SRTT(), r.RTTVar(), r.Timeout())
	}
}

// TestRTOSpuriousMargin: a spurious timeout whose proof came late adds twice that to the
// RTO, at most one SRTT; the margin halves every spurHalfLife, also over several at once,
// and a margin never shrinks on a smaller spurious timeout.
func TestRTOSpuriousMargin(t *testing.T) {
	r := NewRTO(RTOConfig{Min: 200 * time.Microsecond, Max: 500 * time.Millisecond})
	for range 64 {
		r.Sample(int64(2 * time.Millisecond))
	}
	base := r.Timeout()
	r.Spurious(0, int64(time.Millisecond))
	if got, want := r.Timeout(), base+int64(2*time.Millisecond); got != want {
		t.Fatalf("after a spurious timeout 1 ms late: RTO %d, want %d", got, want)
	}
	r.Spurious(1, int64(100*time.Microsecond)) // smaller: the margin stays
	if got := r.Margin(); got != int64(2*time.Millisecond) {
		t.Fatalf("margin %d after a smaller spurious timeout, want 2 ms", got)
	}
	r.Spurious(2, int64(40*time.Millisecond)) // a long stall: 80 ms recorded, one SRTT counts
	if got, want := r.Margin(), r.SRTT(); got != want {
		t.Fatalf("margin %d after a 40 ms stall, want SRTT %d", got, want)
	}
	if got, want := r.Timeout(), base+r.SRTT(); got != want {
		t.Fatalf("RTO %d after a 40 ms stall, want %d", got, want)
	}
	r.Age(2 + spurHalfLife - 1)
	if got, want := r.Margin(), r.SRTT(); got != want {
		t.Fatalf("margin %d before a half-life, want %d", got, want)
	}
	r.Age(2 + 6*spurHalfLife) // 80 ms / 64
	if got, want := r.Margin(), int64(80*time.Millisecond)/64; got != want {
		t.Fatalf("margin %d after six half-lives, want %d", got, want)
	}
	r.Spurious(0, 0) // not late: nothing
	if got, want := r.Margin(), int64(80*time.Millisecond)/64; got != want {
		t.Fatalf("margin %d after a spurious timeout that was not late, want %d", got, want)
	}
	if NewRTO(RTOConfig{}).Margin() != 0 {
		t.Fatal("a new estimator has a margin")
	}
}
