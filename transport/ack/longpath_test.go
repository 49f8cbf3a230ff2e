package ack

import (
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/wire"
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

// An ack whose timestamp echo predates a packet's retransmission acknowledges its first
// transmission: RACK must not take the retransmission's time as delivered, else every
// packet sent before it and not yet acknowledged is declared lost (the late acks of a
// stall that outlasted the RTO).
func TestRACKIgnoresAckOfOriginal(t *testing.T) {
	const ms = int64(time.Millisecond)
	for _, echoCheck := range []bool{false, true} {
		h := NewSentHistory[uint64](1, 64)
		for i := range 10 { // PSNs 1-10 sent at 0..9 ms
			h.OnSent(PacketInfo[uint64]{PSN: wire.PSN(1 + i), Bytes: 1000, SentAt: int64(i) * ms, FirstSentAt: int64(i) * ms})
		}
		var acked []PacketInfo[uint64]
		// PSN 1 acked at 10 ms: min RTT 10 ms.
		acked, _ = h.OnAckBlocks(2, 0, 2, 0, 10*ms, acked[:0])
		// The timer resends PSN 2 at 30 ms; the ack of its original (echo 1 ms) comes at
		// 45 ms, 15 ms after the retransmission, above the minimum RTT.
		h.OnRetransmitted(2, 30*ms)
		if echoCheck {
			h.SetEcho(uint32(ms / 1000))
		}
		acked, _ = h.OnAckBlocks(3, 0, 3, 0, 45*ms, acked[:0])
		if len(acked) != 1 {
			t.Fatalf("acked %d packets, want PSN 2", len(acked))
		}
		lost := h.DetectLost(45*ms, ms, nil)
		if echoCheck && len(lost) != 0 {
			t.Errorf("with the echo: %d packets declared lost, want none (PSNs 3-10 are merely late)", len(lost))
		}
		if !echoCheck && len(lost) == 0 {
			t.Errorf("without the echo the retransmission's time counts as delivered and PSNs 3-10 are lost: the test does not show the difference")
		}
	}
}
