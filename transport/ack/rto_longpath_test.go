package ack

import (
	"testing"
	"time"
)

// A handshake's round trip raises the timeout before the first sample, never lowers it,
// stays below Max, and is forgotten once a sample comes.
func TestRTOSeed(t *testing.T) {
	r := NewRTO(DefaultRTOConfig())
	r.Seed(int64(10 * time.Millisecond))
	if got := r.Timeout(); got != int64(30*time.Millisecond) {
		t.Errorf("seeded with 10ms: timeout %v, want 30ms", time.Duration(got))
	}
	r2 := NewRTO(DefaultRTOConfig())
	r2.Seed(int64(100 * time.Microsecond))
	if got := r2.Timeout(); got != int64(2*time.Millisecond) {
		t.Errorf("seeded with 100µs: timeout %v, want Initial 2ms", time.Duration(got))
	}
	r3 := NewRTO(DefaultRTOConfig())
	r3.Seed(int64(time.Second))
	if got := r3.Timeout(); got != int64(500*time.Millisecond) {
		t.Errorf("seeded with 1s: timeout %v, want Max 500ms", time.Duration(got))
	}
	r.Sample(int64(10 * time.Millisecond))
	r.Seed(int64(100 * time.Millisecond))
	if got := r.Timeout(); got != int64(30*time.Millisecond) {
		t.Errorf("sampled 10ms, then seeded: timeout %v, want 10ms + 4 x 5ms", time.Duration(got))
	}
}

// On a steady long path the timeout stays at least 1.5 x SRTT; on a short one the floor
// is Min/2 as before.
func TestRTOSRTTFloor(t *testing.T) {
	r := NewRTO(DefaultRTOConfig())
	for range 200 {
		r.Sample(int64(10 * time.Millisecond))
	}
	if got := r.Timeout(); got != int64(15*time.Millisecond) {
		t.Errorf("steady 10ms: timeout %v, want 15ms", time.Duration(got))
	}
	s := NewRTO(DefaultRTOConfig())
	for range 200 {
		s.Sample(int64(20 * time.Microsecond))
	}
	if got := s.Timeout(); got != int64(200*time.Microsecond) {
		t.Errorf("steady 20µs: timeout %v, want Min 200µs", time.Duration(got))
	}
}
