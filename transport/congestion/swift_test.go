package congestion

import (
	"errors"
	"math"
	"strings"
	"testing"
)

const mss = 1400

func newTestSwift(t testing.TB, mod func(*SwiftConfig)) *Swift {
	t.Helper()
	cfg := DefaultSwiftConfig()
	if mod != nil {
		mod(&cfg)
	}
	s, err := NewSwift(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// wantTarget computes the target delay independently of target.go (paper §3.5, one hop).
func wantTarget(c SwiftConfig, cwnd float64) float64 {
	a := float64(c.FSRange) / (1/math.Sqrt(c.FSMinCwnd) - 1/math.Sqrt(c.FSMaxCwnd))
	b := -a / math.Sqrt(c.FSMaxCwnd)
	fs := math.Max(0, math.Min(a/math.Sqrt(cwnd)+b, float64(c.FSRange)))
	return float64(c.BaseTarget+c.HopScale) + fs
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

func TestDefaultSwiftConfigValid(t *testing.T) {
	s := newTestSwift(t, nil)
	if got, want := s.Window(), 16*mss; got != want {
		t.Errorf("initial Window = %d, want %d", got, want)
	}
	if s.Config() != DefaultSwiftConfig() {
		t.Errorf("Config() = %+v, want the defaults", s.Config())
	}
}

func TestSwiftConfigValidation(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		field string
		mod   func(*SwiftConfig)
	}{
		{"MSS", func(c *SwiftConfig) { c.MSS = 0 }},
		{"MSS", func(c *SwiftConfig) { c.MSS = MaxMSS + 1 }},
		{"MinCwnd", func(c *SwiftConfig) { c.MinCwnd = 0 }},
		{"MinCwnd", func(c *SwiftConfig) { c.MinCwnd = nan }},
		{"MaxCwnd", func(c *SwiftConfig) { c.MaxCwnd = c.MinCwnd / 2 }},
		{"MaxCwnd", func(c *SwiftConfig) { c.MaxCwnd = math.Inf(1) }},
		{"MaxCwnd", func(c *SwiftConfig) { c.MaxCwnd = MaxWindowBytes }},
		{"InitialCwnd", func(c *SwiftConfig) { c.InitialCwnd = c.MaxCwnd + 1 }},
		{"InitialCwnd", func(c *SwiftConfig) { c.InitialCwnd = c.MinCwnd / 2 }},
		{"AI", func(c *SwiftConfig) { c.AI = 0 }},
		{"AI", func(c *SwiftConfig) { c.AI = math.Inf(1) }},
		{"Beta", func(c *SwiftConfig) { c.Beta = 0 }},
		{"Beta", func(c *SwiftConfig) { c.Beta = 1.5 }},
		{"MaxMDF", func(c *SwiftConfig) { c.MaxMDF = 0 }},
		{"MaxMDF", func(c *SwiftConfig) { c.MaxMDF = 1 }},
		{"BaseTarget", func(c *SwiftConfig) { c.BaseTarget = 0 }},
		{"BaseTarget", func(c *SwiftConfig) { c.BaseTarget = MaxDelay + 1 }},
		{"HopScale", func(c *SwiftConfig) { c.HopScale = -1 }},
		{"FSRange", func(c *SwiftConfig) { c.FSRange = -1 }},
		{"FSRange", func(c *SwiftConfig) { c.FSRange = MaxDelay + 1 }},
		{"FSMinCwnd", func(c *SwiftConfig) { c.FSMinCwnd = 0 }},
		{"FSMaxCwnd", func(c *SwiftConfig) { c.FSMaxCwnd = c.FSMinCwnd }},
		{"RetxResetThreshold", func(c *SwiftConfig) { c.RetxResetThreshold = 0 }},
		{"InitialRTT", func(c *SwiftConfig) { c.InitialRTT = 0 }},
		{"InitialRTT", func(c *SwiftConfig) { c.InitialRTT = MaxDelay + 1 }},
	}
	for _, tt := range tests {
		cfg := DefaultSwiftConfig()
		tt.mod(&cfg)
		s, err := NewSwift(cfg)
		if !errors.Is(err, ErrInvalidConfig) || s != nil {
			t.Errorf("%s: NewSwift = %v, %v; want nil, ErrInvalidConfig", tt.field, s, err)
			continue
		}
		if !strings.Contains(err.Error(), tt.field+" = ") {
			t.Errorf("%s: error %q does not name the field", tt.field, err)
		}
	}
}

func TestTargetDelay(t *testing.T) {
	c := DefaultSwiftConfig()
	c.HopScale = 3_000
	tg := newTarget(&c)
	base := float64(c.BaseTarget + c.HopScale)
	if got := tg.at(c.FSMinCwnd); !near(got, base+float64(c.FSRange), 1e-6) {
		t.Errorf("target at FSMinCwnd = %v, want base+FSRange %v", got, base+float64(c.FSRange))
	}
	if got := tg.at(c.FSMinCwnd / 100); !near(got, base+float64(c.FSRange), 1e-6) {
		t.Errorf("target below FSMinCwnd = %v, want base+FSRange", got)
	}
	if got := tg.at(c.FSMaxCwnd); !near(got, base, 1e-6) {
		t.Errorf("target at FSMaxCwnd = %v, want base %v", got, base)
	}
	if got := tg.at(c.FSMaxCwnd * 10); got != base {
		t.Errorf("target above FSMaxCwnd = %v, want base %v", got, base)
	}
	prev := math.Inf(1)
	for w := 0.1; w <= 100; w *= 1.5 {
		got := tg.at(w)
		if got > prev {
			t.Errorf("target rises with the window at %v packets", w)
		}
		if want := wantTarget(c, w); !near(got, want, 1e-6) {
			t.Errorf("target(%v) = %v, want %v", w, got, want)
		}
		prev = got
	}
	c.FSRange = 0
	tg = newTarget(&c)
	if got := tg.at(0.5); got != base {
		t.Errorf("target without flow scaling = %v, want %v", got, base)
	}
}

func TestAdditiveIncreaseBelowTarget(t *testing.T) {
	s := newTestSwift(t, nil) // 16 packets
	low := int64(10_000)      // below any target
	s.OnAck(0, mss, low)
	if want := 16 + 1.0/16; !near(s.cwnd, want, 1e-9) {
		t.Fatalf("cwnd after one ack = %v, want %v", s.cwnd, want)
	}
	// One window's worth of acks adds about AI = 1 packet.
	s = newTestSwift(t, nil)
	for i := range 16 {
		s.OnAck(int64(i), mss, low)
	}
	if !near(s.cwnd, 17, 0.05) {
		t.Errorf("cwnd after a window of acks = %v, want about 17", s.cwnd)
	}
	// A coalesced ack of a whole window does the same in one step.
	s = newTestSwift(t, nil)
	s.OnAck(0, 16*mss, low)
	if !near(s.cwnd, 17, 1e-9) {
		t.Errorf("cwnd after one ack of 16 packets = %v, want 17", s.cwnd)
	}
	if st := s.Stats(); st.DelayDecreases != 0 || st.LastDelay != low || st.Window != 17*mss {
		t.Errorf("stats %+v", st)
	}
	// Below one packet the increase is AI per acked packet.
	s = newTestSwift(t, func(c *SwiftConfig) { c.MinCwnd = 0.01; c.InitialCwnd = 0.25 })
	s.OnAck(0, mss, low)
	if !near(s.cwnd, 1.25, 1e-9) {
		t.Errorf("cwnd from 0.25 after one ack = %v, want 1.25", s.cwnd)
	}
}

func TestMultiplicativeDecreaseAboveTarget(t *testing.T) {
	cfg := DefaultSwiftConfig()
	tgt := wantTarget(cfg, 16)
	delay := int64(tgt * 1.25) // 25% above target
	s := newTestSwift(t, nil)
	s.OnAck(1000, mss, delay)
	d := float64(delay)
	wantF := 1 - cfg.Beta*(d-tgt)/d // 1 - 0.8*0.2 = 0.84
	if !near(s.cwnd, 16*wantF, 1e-9) {
		t.Errorf("cwnd = %v, want %v (factor %v)", s.cwnd, 16*wantF, wantF)
	}
	st := s.Stats()
	if st.DelayDecreases != 1 || st.LastDelay != delay {
		t.Errorf("stats %+v, want one delay decrease and LastDelay %d", st, delay)
	}

	// A huge excess is capped at MaxMDF.
	s = newTestSwift(t, nil)
	s.OnAck(1000, mss, 50*int64(tgt))
	if !near(s.cwnd, 16*(1-cfg.MaxMDF), 1e-9) {
		t.Errorf("cwnd after a huge delay = %v, want %v", s.cwnd, 16*(1-cfg.MaxMDF))
	}

	// Delay exactly at target neither grows nor shrinks.
	s = newTestSwift(t, func(c *SwiftConfig) { c.FSRange = 0 })
	s.OnAck(1000, mss, cfg.BaseTarget)
	if s.cwnd != 16 {
		t.Errorf("cwnd at exactly target = %v, want 16", s.cwnd)
	}
}

func TestDecreaseAtMostOncePerRTT(t *testing.T) {
	s := newTestSwift(t, nil)
	const high = 100_000 // ns, well above target; also the RTT estimate after the sample
	s.OnAck(0, mss, high)
	w1 := s.cwnd
	if w1 >= 16 {
		t.Fatalf("no first decrease: cwnd %v", w1)
	}
	for _, now := range []int64{1, high / 2, high - 1} {
		s.OnAck(now, mss, high)
		if s.cwnd != w1 {
			t.Fatalf("second decrease at %d ns, within one RTT (%d ns) of the first: cwnd %v -> %v", now, high, w1, s.cwnd)
		}
		s.OnLoss(now, mss)
		s.OnTimeout(now)
		if s.cwnd != w1 {
			t.Fatalf("loss/timeout decreased again at %d ns, within one RTT", now)
		}
	}
	s.OnAck(high, mss, high)
	if s.cwnd >= w1 {
		t.Errorf("no decrease one RTT later: cwnd %v, before %v", s.cwnd, w1)
	}
	if st := s.Stats(); st.DelayDecreases != 2 || st.LossDecreases != 0 || st.RTODecreases != 0 {
		t.Errorf("stats %+v, want exactly 2 delay decreases", st)
	}

	// The period is the larger of the smoothed delay and the last sample: after a jump in
	// delay the period follows the new, larger sample at once.
	s = newTestSwift(t, nil)
	s.OnAck(0, mss, 10_000) // smoothed 10 µs, growth
	s.OnAck(1, mss, 200_000)
	w := s.cwnd
	s.OnAck(150_000, mss, 200_000) // 150 µs later: less than the 200 µs sample
	if s.cwnd != w {
		t.Errorf("decreased again %d ns after the last decrease with a 200 µs RTT", 150_000-1)
	}
	s.OnAck(200_001, mss, 200_000)
	if s.cwnd >= w {
		t.Errorf("no decrease after a full 200 µs RTT")
	}

	// Before any sample the period is InitialRTT.
	s = newTestSwift(t, nil)
	s.OnLoss(0, mss)
	s.OnLoss(DefaultSwiftConfig().InitialRTT-1, mss)
	if s.cwnd != 8 {
		t.Errorf("cwnd = %v after two losses within InitialRTT, want 8", s.cwnd)
	}
	s.OnLoss(DefaultSwiftConfig().InitialRTT, mss)
	if s.cwnd != 4 {
		t.Errorf("cwnd = %v after a loss one InitialRTT later, want 4", s.cwnd)
	}
}

func TestLossDecrease(t *testing.T) {
	s := newTestSwift(t, nil)
	s.OnLoss(1000, 3*mss)
	if s.cwnd != 8 {
		t.Errorf("cwnd after loss = %v, want 8 (16 * (1 - MaxMDF))", s.cwnd)
	}
	st := s.Stats()
	if st.LossDecreases != 1 || st.LossEvents != 1 || st.LostBytes != 3*mss {
		t.Errorf("stats %+v", st)
	}
	s.OnLoss(1001, -5) // within the RTT: counted, no decrease, negative bytes ignored
	if st := s.Stats(); s.cwnd != 8 || st.LossEvents != 2 || st.LostBytes != 3*mss || st.LossDecreases != 1 {
		t.Errorf("second loss: cwnd %v stats %+v", s.cwnd, st)
	}
}

func TestTimeoutResetAfterThreshold(t *testing.T) {
	s := newTestSwift(t, nil) // threshold 5, MaxMDF 0.5, InitialRTT 25 µs
	rtt := s.cfg.InitialRTT
	now := int64(0)
	want := 16.0
	for i := 1; i < s.cfg.RetxResetThreshold; i++ {
		s.OnTimeout(now)
		want /= 2
		if s.cwnd != want {
			t.Fatalf("after timeout %d: cwnd %v, want %v", i, s.cwnd, want)
		}
		now += rtt
	}
	s.OnTimeout(now)
	if s.cwnd != s.cfg.MinCwnd {
		t.Fatalf("after %d timeouts: cwnd %v, want MinCwnd %v", s.cfg.RetxResetThreshold, s.cwnd, s.cfg.MinCwnd)
	}
	st := s.Stats()
	if st.Timeouts != 5 || st.RTODecreases != 4 || st.WindowResets != 1 {
		t.Errorf("stats %+v", st)
	}

	// An ack (or a loss event) between timeouts restarts the count.
	s = newTestSwift(t, nil)
	for i := range 10 {
		now := int64(i) * rtt
		s.OnTimeout(now)
		if i%2 == 0 {
			s.OnAck(now+1, mss, 0) // no sample, but it ends the run of timeouts
		} else {
			s.OnLoss(now+1, mss)
		}
	}
	if st := s.Stats(); st.WindowResets != 0 {
		t.Errorf("window reset although acks and losses interleaved the timeouts: %+v", st)
	}

	// Timeouts past the threshold keep the window at the minimum.
	s = newTestSwift(t, func(c *SwiftConfig) { c.RetxResetThreshold = 1 })
	s.OnTimeout(0)
	s.OnTimeout(1)
	if s.cwnd != s.cfg.MinCwnd || s.Stats().WindowResets != 2 {
		t.Errorf("threshold 1: cwnd %v, stats %+v", s.cwnd, s.Stats())
	}
}

func TestClamps(t *testing.T) {
	s := newTestSwift(t, func(c *SwiftConfig) { c.MaxCwnd = 20 })
	for i := range 1000 {
		s.OnAck(int64(i), 10*mss, 5_000)
	}
	if s.cwnd != 20 || s.Window() != 20*mss {
		t.Errorf("cwnd %v Window %d, want clamped to MaxCwnd 20 packets", s.cwnd, s.Window())
	}
	s.OnAck(0, math.MaxInt, 1) // a huge ack cannot pass the maximum either
	if s.cwnd != 20 {
		t.Errorf("cwnd %v after a huge ack, want 20", s.cwnd)
	}

	s = newTestSwift(t, func(c *SwiftConfig) { c.MinCwnd = 0.5 })
	for i := range 100 {
		s.OnLoss(int64(i)*1_000_000, mss)
	}
	if s.cwnd != 0.5 {
		t.Errorf("cwnd %v after many losses, want MinCwnd 0.5", s.cwnd)
	}
	if s.Window() != mss {
		t.Errorf("Window %d below one packet, want one MSS %d", s.Window(), mss)
	}
	if st := s.Stats(); st.Cwnd != mss/2 {
		t.Errorf("Stats.Cwnd %d, want %d", st.Cwnd, mss/2)
	}
}

func TestPacingBelowOnePacket(t *testing.T) {
	s := newTestSwift(t, nil)
	s.OnSent(1000, mss)
	if got := s.NextSendTime(1000, mss); got != 1000 {
		t.Errorf("pacing at 16 packets: NextSendTime = %d, want now", got)
	}
	if s.Stats().PacingInterval != 0 {
		t.Errorf("PacingInterval %d at 16 packets, want 0", s.Stats().PacingInterval)
	}

	s = newTestSwift(t, func(c *SwiftConfig) { c.MinCwnd = 0.01; c.InitialCwnd = 0.25; c.InitialRTT = 20_000 })
	if got := s.NextSendTime(5, mss); got != 5 {
		t.Errorf("before the first send: NextSendTime = %d, want now", got)
	}
	s.OnSent(1000, mss)
	const gap = 20_000 * 4 // rtt / cwnd
	if got := s.NextSendTime(1000, mss); got != 1000+gap {
		t.Errorf("NextSendTime = %d, want %d", got, 1000+gap)
	}
	if got := s.NextSendTime(1000, mss/2); got != 1000+gap/2 {
		t.Errorf("NextSendTime(half packet) = %d, want %d", got, 1000+gap/2)
	}
	if got := s.NextSendTime(1000+gap+7, mss); got != 1000+gap+7 {
		t.Errorf("after the gap: NextSendTime = %d, want now", got)
	}
	if got := s.NextSendTime(1000, 0); got != 1000 {
		t.Errorf("zero bytes: NextSendTime = %d, want now", got)
	}
	if st := s.Stats(); st.PacingInterval != gap || st.Window != mss {
		t.Errorf("stats %+v, want PacingInterval %d and Window one MSS", st, gap)
	}

	// With samples the gap follows the smoothed delay: 0.25 packets per 40 µs.
	s = newTestSwift(t, func(c *SwiftConfig) { c.MinCwnd = 0.01; c.InitialCwnd = 0.25; c.FSRange = 0; c.BaseTarget = 30_000 })
	s.OnAck(0, 1, 40_000) // above target: one decrease to 0.25*(1-0.8*10/40) = 0.2
	s.OnSent(0, mss)
	if !near(s.cwnd, 0.2, 1e-12) {
		t.Fatalf("cwnd %v, want 0.2", s.cwnd)
	}
	if got := s.NextSendTime(0, mss); got != 200_000 {
		t.Errorf("NextSendTime = %d, want 40 µs / 0.2 = 200000", got)
	}
}

func TestNoSampleLeavesWindow(t *testing.T) {
	s := newTestSwift(t, nil)
	for _, d := range []int64{0, -1, math.MinInt64} {
		s.OnAck(10, mss, d)
	}
	st := s.Stats()
	if s.cwnd != 16 || st.AckedBytes != 3*mss || st.LastDelay != 0 || st.SmoothedDelay != 0 {
		t.Errorf("cwnd %v stats %+v, want unchanged window and bytes counted", s.cwnd, st)
	}
	s.OnAck(10, 0, 5_000)
	s.OnAck(10, -mss, 5_000)
	if st := s.Stats(); s.cwnd != 16 || st.AckedBytes != 3*mss {
		t.Errorf("non-positive acked changed state: cwnd %v stats %+v", s.cwnd, st)
	}
}

func TestOddInputsStayInBounds(t *testing.T) {
	s := newTestSwift(t, nil)
	times := []int64{math.MinInt64, -1, 0, 1, math.MaxInt64 - 1, math.MaxInt64}
	sizes := []int{math.MinInt, -1, 0, 1, mss, math.MaxInt}
	delays := []int64{math.MinInt64, -1, 0, 1, MaxDelay, MaxDelay + 1, math.MaxInt64}
	check := func(op string) {
		t.Helper()
		if !(s.cwnd >= s.cfg.MinCwnd && s.cwnd <= s.cfg.MaxCwnd) {
			t.Fatalf("%s: cwnd %v out of [%v, %v]", op, s.cwnd, s.cfg.MinCwnd, s.cfg.MaxCwnd)
		}
		if w := s.Window(); w < 1 || w > MaxWindowBytes {
			t.Fatalf("%s: Window %d", op, w)
		}
		st := s.Stats()
		if st.TargetDelay < s.cfg.BaseTarget || st.LastDelay < 0 || st.LastDelay > MaxDelay || st.PacingInterval < 0 {
			t.Fatalf("%s: stats %+v", op, st)
		}
	}
	for _, now := range times {
		for _, n := range sizes {
			for _, d := range delays {
				s.OnAck(now, n, d)
				check("OnAck")
			}
			s.OnSent(now, n)
			if got := s.NextSendTime(now, n); got < now {
				t.Fatalf("NextSendTime(%d, %d) = %d, before now", now, n, got)
			}
			s.OnLoss(now, n)
			check("OnLoss")
		}
		s.OnTimeout(now)
		check("OnTimeout")
	}
}

// FuzzSwift drives a controller with operations decoded from the input and checks its
// invariants after each one.
func FuzzSwift(f *testing.F) {
	f.Add([]byte{0, 10, 20, 1, 30, 40, 2, 3, 4, 5, 6})
	f.Add([]byte{3, 3, 3, 3, 3, 3, 0, 255, 255, 4, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		s := newTestSwift(t, func(c *SwiftConfig) { c.MinCwnd = 0.001 })
		now := int64(0)
		for i := 0; i+2 < len(ops); i += 3 {
			a, b := int64(ops[i+1]), int64(ops[i+2])
			now += a * 997
			switch ops[i] % 6 {
			case 0:
				s.OnAck(now, int(b)*64, (b-8)*a*311)
			case 1:
				s.OnSent(now, int(b)*64)
			case 2:
				s.OnLoss(now, int(b))
			case 3:
				s.OnTimeout(now)
			case 4:
				if got := s.NextSendTime(now, int(b)*64); got < now {
					t.Fatalf("NextSendTime before now")
				}
			case 5:
				now -= b * 10_000 // time going backwards must not break anything
			}
			if !(s.cwnd >= s.cfg.MinCwnd && s.cwnd <= s.cfg.MaxCwnd) || s.Window() < 1 {
				t.Fatalf("cwnd %v Window %d", s.cwnd, s.Window())
			}
		}
	})
}

func TestSwiftAllocs(t *testing.T) {
	s := newTestSwift(t, nil)
	now := int64(0)
	allocs := testing.AllocsPerRun(1000, func() {
		now += 1000
		s.OnSent(now, mss)
		_ = s.Window()
		_ = s.NextSendTime(now, mss)
		s.OnAck(now, mss, 20_000+now%20_000)
		s.OnLoss(now, mss)
		s.OnTimeout(now)
		_ = s.Stats()
	})
	if allocs != 0 {
		t.Errorf("%v allocations per run, want 0", allocs)
	}
	var c Controller = s // through the interface too
	allocs = testing.AllocsPerRun(1000, func() {
		now += 1000
		c.OnSent(now, mss)
		_ = c.Window()
		c.OnAck(now, mss, 20_000)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per run through Controller, want 0", allocs)
	}
}

func BenchmarkSwiftOnAck(b *testing.B) {
	s := newTestSwift(b, nil)
	delays := [4]int64{15_000, 22_000, 31_000, 45_000} // below and above target
	b.ReportAllocs()
	now := int64(0)
	for i := 0; b.Loop(); i++ {
		now += 200
		s.OnAck(now, mss, delays[i&3])
	}
}

func BenchmarkSwiftOnAckInterface(b *testing.B) {
	var c Controller = newTestSwift(b, nil)
	b.ReportAllocs()
	now := int64(0)
	for i := 0; b.Loop(); i++ {
		now += 200
		c.OnAck(now, mss, 15_000+int64(i&1)*30_000)
	}
}

func BenchmarkSwiftSendPath(b *testing.B) {
	s := newTestSwift(b, nil)
	b.ReportAllocs()
	now := int64(0)
	for b.Loop() {
		now += 100
		if s.NextSendTime(now, mss) <= now && s.Window() > 0 {
			s.OnSent(now, mss)
		}
	}
}
