package congestion

import (
	"errors"
	"fmt"
	"math"
	"testing"
)

func newDelayT(t *testing.T, mod func(*DelayConfig)) *Delay {
	t.Helper()
	cfg := DefaultDelayConfig()
	if mod != nil {
		mod(&cfg)
	}
	d, err := NewDelay(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDelayConfigValidation(t *testing.T) {
	for _, tt := range []struct {
		field string
		mod   func(*DelayConfig)
	}{
		{"MSS", func(c *DelayConfig) { c.MSS = 0 }},
		{"MinCwnd", func(c *DelayConfig) { c.MinCwnd = math.NaN() }},
		{"MaxCwnd", func(c *DelayConfig) { c.MaxCwnd = 1e9 }},
		{"InitialCwnd", func(c *DelayConfig) { c.InitialCwnd = 0.5 }},
		{"AI", func(c *DelayConfig) { c.AI = 0 }},
		{"Beta", func(c *DelayConfig) { c.Beta = 1.5 }},
		{"MaxMDF", func(c *DelayConfig) { c.MaxMDF = 1 }},
		{"BaseTarget", func(c *DelayConfig) { c.BaseTarget = 0 }},
		{"TargetRatio", func(c *DelayConfig) { c.TargetRatio = -1 }},
		{"FSRange", func(c *DelayConfig) { c.FSRange = -1 }},
		{"FSMaxCwnd", func(c *DelayConfig) { c.FSMaxCwnd = c.FSMinCwnd }},
		{"BaseWindow", func(c *DelayConfig) { c.BaseWindow = 0 }},
		{"RandomLossMax", func(c *DelayConfig) { c.RandomLossMax = 2 }},
		{"LongPath", func(c *DelayConfig) { c.LongPath = -1 }},
		{"PaceGain", func(c *DelayConfig) { c.PaceGain = 0.5 }},
		{"RetxResetThreshold", func(c *DelayConfig) { c.RetxResetThreshold = 0 }},
		{"InitialRTT", func(c *DelayConfig) { c.InitialRTT = 0 }},
	} {
		cfg := DefaultDelayConfig()
		tt.mod(&cfg)
		_, err := NewDelay(cfg)
		if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: err %v, want ErrInvalidConfig", tt.field, err)
		}
	}
}

// The target is max(BaseTarget, base + max(QueueFloor, TargetRatio*base)): a 10 µs path
// gets the absolute BaseTarget, a 100 µs one 25 µs of queue, a 10 ms one 2.5 ms (flow
// scaling off here).
func TestDelayTargetScalesWithPath(t *testing.T) {
	for _, tt := range []struct{ base, want int64 }{
		{10_000, 25_000},
		{30_000, 37_500},
		{100_000, 125_000},
		{1_000_000, 1_250_000},
		{10_000_000, 12_500_000},
	} {
		d := newDelayT(t, func(c *DelayConfig) { c.FSRange = 0 })
		d.OnAck(1, 1400, tt.base)
		if got := d.Stats().TargetDelay; got != tt.want {
			t.Errorf("base %d ns: target %d ns, want %d", tt.base, got, tt.want)
		}
		if got := d.Stats().BaseDelay; got != tt.base {
			t.Errorf("base %d ns: learned %d", tt.base, got)
		}
	}
}

// Slow start doubles the window per round trip below the target; the first sample above
// it ends slow start with a cut that removes the queue the sample shows (Beta 1).
func TestDelaySlowStartAndDrainCut(t *testing.T) {
	d := newDelayT(t, func(c *DelayConfig) { c.FSRange = 0 })
	const base = 100_000
	now := int64(0)
	for range 3 { // three round trips of a full window acknowledged at the base delay
		w := d.Stats().Cwnd
		now += base
		for a := 0; a < w; a += 1400 {
			d.OnAck(now, 1400, base)
		}
		if got := d.Stats().Cwnd; got < 2*w-1400 {
			t.Fatalf("slow start: window %d after a round of %d", got, w)
		}
	}
	if !d.Stats().SlowStart {
		t.Fatal("left slow start below the target")
	}
	before := float64(d.Stats().Cwnd)
	now += base
	d.OnAck(now, 1400, 150_000) // 50 µs of queue, above the 25 µs allowed
	st := d.Stats()
	if st.SlowStart || st.DelayDecreases != 1 {
		t.Fatalf("above target: slow start %v, %d decreases", st.SlowStart, st.DelayDecreases)
	}
	if want := before * base / 150_000 * (1 - d.cfg.DrainMargin); math.Abs(float64(st.Cwnd)-want) > 1400 {
		t.Errorf("cut to %d bytes, want the queue drained and DrainMargin more: %.0f", st.Cwnd, want)
	}
	// Congestion avoidance: AI packets per round trip, scaled by base/AIScale (4 here).
	w := d.Stats().Cwnd
	now += 2 * base
	for a := 0; a < w; a += 1400 {
		d.OnAck(now, 1400, base)
	}
	want := 1400 * d.cfg.AI * base / float64(d.cfg.AIScale)
	if got := float64(d.Stats().Cwnd - w); math.Abs(got-want) > 0.05*want {
		t.Errorf("congestion avoidance grew %.0f bytes in a round trip, want %.0f", got, want)
	}
}

// Loss at low delay is noise; loss with the delay above the target, or too much of it in
// a round, is congestion.
func TestDelayLossClassification(t *testing.T) {
	d := newDelayT(t, nil)
	now := int64(0)
	for range 200 {
		now += 1000
		d.OnAck(now, 1400, 20_000)
	}
	w := d.Stats().Cwnd
	d.OnLoss(now, 1400)
	if st := d.Stats(); st.Cwnd != w || st.RandomLosses != 1 || st.LossDecreases != 0 {
		t.Fatalf("isolated loss at low delay: window %d -> %d, %d random, %d decreases", w, st.Cwnd, st.RandomLosses, st.LossDecreases)
	}
	// A burst: more than RandomLossMax of the round lost.
	for range 100 {
		d.OnLoss(now, 1400)
	}
	if st := d.Stats(); st.LossDecreases != 1 || st.Cwnd >= w {
		t.Errorf("a loss burst: %d decreases, window %d (was %d)", st.LossDecreases, st.Cwnd, w)
	}
	// Loss with the delay above the target.
	d2 := newDelayT(t, nil)
	d2.OnAck(1000, 1400, 20_000)
	d2.OnAck(2000, 1400, 200_000)
	now = 1_000_000
	w = d2.Stats().Cwnd
	d2.OnLoss(now, 1400)
	if st := d2.Stats(); st.LossDecreases != 1 || st.Cwnd >= w {
		t.Errorf("loss at high delay: %d decreases, window %d (was %d)", st.LossDecreases, st.Cwnd, w)
	}
}

// A timeout restarts slow start from InitialCwnd; a spurious one is undone; five in a row
// reset to MinCwnd.
func TestDelayTimeoutAndUndo(t *testing.T) {
	d := newDelayT(t, nil)
	now := int64(0)
	for range 1000 {
		now += 1000
		d.OnAck(now, 1400, 20_000)
	}
	w := d.Stats().Cwnd
	initial := int(d.cfg.InitialCwnd) * 1400
	if w <= initial {
		t.Fatalf("window %d did not grow", w)
	}
	d.OnTimeout(now)
	if st := d.Stats(); st.Cwnd != initial || !st.SlowStart {
		t.Fatalf("after a timeout: window %d, slow start %v", st.Cwnd, st.SlowStart)
	}
	d.OnSpuriousTimeout(now)
	if st := d.Stats(); st.Cwnd != w || st.SpuriousTimeouts != 1 {
		t.Fatalf("after the undo: window %d, want %d (%d spurious)", st.Cwnd, w, st.SpuriousTimeouts)
	}
	d.OnSpuriousTimeout(now) // nothing left to undo
	if st := d.Stats(); st.Cwnd != w {
		t.Fatalf("a second undo changed the window to %d", st.Cwnd)
	}
	for range 5 {
		d.OnTimeout(now)
	}
	if st := d.Stats(); st.Cwnd != 1400 || st.WindowResets != 1 {
		t.Errorf("after five timeouts: window %d, %d resets", st.Cwnd, st.WindowResets)
	}
}

// Nothing panics or leaves the window's range, whatever the calls.
func FuzzDelay(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 0xff, 0x80})
	f.Fuzz(func(t *testing.T, ops []byte) {
		d, err := NewDelay(DefaultDelayConfig())
		if err != nil {
			t.Fatal(err)
		}
		now := int64(0)
		for i, op := range ops {
			arg := int64(op) * int64(op) * 997
			switch op % 6 {
			case 0:
				d.OnAck(now, int(arg%100_000)-10, arg-5000)
			case 1:
				d.OnLoss(now, int(arg%50_000)-10)
			case 2:
				d.OnTimeout(now)
			case 3:
				d.OnSpuriousTimeout(now)
			case 4:
				d.OnSent(now, int(arg%10_000))
			case 5:
				if at := d.NextSendTime(now, int(arg%3000)); at < now {
					t.Fatalf("op %d: next send %d before now %d", i, at, now)
				}
			}
			now += arg % 1_000_000
			if w := d.Window(); w < 1 || w > int(d.cfg.MaxCwnd)*d.cfg.MSS {
				t.Fatalf("op %d: window %d", i, w)
			}
		}
	})
}

// The simulator's single flow fills a 10 Gbit/s bottleneck on every path from 10 µs to
// 10 ms, with and without 1% random loss, and keeps the queue near its target.
func TestSimDelayPaths(t *testing.T) {
	for _, base := range []int64{10_000, 100_000, 1_000_000, 10_000_000} {
		for _, loss := range []float64{0, 0.01} {
			t.Run(fmt.Sprintf("rtt%dus-loss%g", base/1000, loss), func(t *testing.T) {
				cfg := baseSim(1)
				dc := DefaultDelayConfig()
				cfg.delay = &dc
				cfg.baseRTT = base
				cfg.buffer = max(256<<10, int(1.25*float64(base))) // one BDP
				cfg.duration = max(60_000_000, 80*base)
				cfg.randomLoss = loss
				r := runSim(t, cfg)
				st := r.flows[0].Stats()
				t.Logf("utilization %.4f, queueing median %.1f µs, target %.1f µs, drops %d, random losses %d, loss decreases %d, delay decreases %d",
					r.utilization, float64(r.queueMedian)/1e3, r.meanTarget/1e3, r.drops, st.RandomLosses, st.LossDecreases, st.DelayDecreases)
				want := 0.9
				if loss > 0 {
					want = 0.7 * 0.99
				}
				if r.utilization < want {
					t.Errorf("utilization %.4f, want >= %.3f", r.utilization, want)
				}
				if float64(r.queueMedian) > r.meanTarget {
					t.Errorf("median queueing %d ns above the target %.0f", r.queueMedian, r.meanTarget)
				}
			})
		}
	}
}

// Flows that join late on a standing queue get their share: the drain cut empties the
// queue, so they learn the true base delay.
func TestSimDelayFairness(t *testing.T) {
	// (Longer paths are the transport benchmark's fairness scenario, with the engine.)
	for _, base := range []int64{10_000, 20_000, 100_000} {
		for _, n := range []int{2, 8} {
			t.Run(fmt.Sprintf("rtt%dus-%dflows", base/1000, n), func(t *testing.T) {
				for seed := uint64(1); seed <= 2; seed++ {
					cfg := baseSim(n)
					dc := DefaultDelayConfig()
					cfg.delay = &dc
					cfg.seed = seed
					cfg.baseRTT = base
					cfg.buffer = max(256<<10, int(1.25*float64(base)))
					cfg.duration = max(60_000_000, 300*base)
					cfg.lateStart = cfg.duration / 3
					r := runSim(t, cfg)
					t.Logf("seed %d: utilization %.4f, Jain %.4f, queueing median %.1f µs, target %.1f µs, drops %d, Gbit/s %.3f",
						seed, r.utilization, r.fairness, float64(r.queueMedian)/1e3, r.meanTarget/1e3, r.drops, r.throughput)
					if r.utilization < 0.9 {
						t.Errorf("utilization %.4f", r.utilization)
					}
					if r.fairness < 0.95 {
						t.Errorf("Jain %.4f, want >= 0.95", r.fairness)
					}
				}
			})
		}
	}
}

// A queue that never drains is somebody else's: after CompeteRounds round trips of it
// the controller competes (grows although the delay is above target, cuts by 0.3 on
// loss) and it stops as soon as a round sees the queue drain.
func TestDelayCompetesWithBufferFillers(t *testing.T) {
	d := newDelayT(t, nil)
	const base, rtt = 20_000, 2_000_000 // a 20 µs path behind a 2 ms standing queue
	now := int64(0)
	d.OnAck(now, 1400, base) // the path's base, seen once
	step := func(delay int64) {
		now += rtt
		for range 4 {
			d.OnAck(now, 1400, delay)
		}
	}
	for i := 0; i < d.cfg.CompeteRounds+2 && !d.Stats().Competitive; i++ {
		step(rtt)
	}
	st := d.Stats()
	if !st.Competitive || st.CompetitiveEntries != 1 {
		t.Fatalf("after %d rounds above the queue: competitive %v (%d entries)", d.cfg.CompeteRounds+2, st.Competitive, st.CompetitiveEntries)
	}
	w := st.Cwnd
	step(rtt)
	if got := d.Stats().Cwnd; got <= w {
		t.Fatalf("competing: window %d -> %d with the delay above target, want growth", w, got)
	}
	w = d.Stats().Cwnd
	now += rtt
	d.OnLoss(now, 1400)
	if got := d.Stats().Cwnd; math.Abs(float64(got)-0.7*float64(w)) > 1400 {
		t.Fatalf("competing: a loss cut %d to %d, want 0.7 of it", w, got)
	}
	step(base + 1000) // the queue drained: delay rules again
	step(base + 1000)
	if d.Stats().Competitive {
		t.Fatal("still competing after the queue drained")
	}
}
