package congestion

import (
	"fmt"
	"math"
	"testing"
)

// longPathT is a Delay on a 10 ms path, driven like a busy engine: a clock reading every
// 20 µs, an acknowledgement of one packet at each, and the window kept full (a bulk
// transfer limited by the window).
type longPathT struct {
	t        *testing.T
	d        *Delay
	now      int64
	inflight int // bytes
}

// fill sends packets until the window is full.
func (p *longPathT) fill() {
	for p.inflight < p.d.Window() {
		p.d.OnSent(p.now, p.d.cfg.MSS)
		p.inflight += p.d.cfg.MSS
	}
}

// ack acknowledges bytes with a sample of delay at now, and fills the window.
func (p *longPathT) ack(bytes int, delay int64) {
	p.fill()
	p.d.OnAck(p.now, bytes, delay)
	p.inflight = max(p.inflight-bytes, 0)
	p.fill()
}

const (
	lpBase = 10_000_000 // ns
	lpStep = 20_000     // ns between readings
)

func newLongPathT(t *testing.T, mod func(*DelayConfig)) *longPathT {
	t.Helper()
	return &longPathT{t: t, d: newDelayT(t, func(c *DelayConfig) {
		c.FSRange = 0
		if mod != nil {
			mod(c)
		}
	})}
}

// acks acknowledges n packets, one per reading, each with the delay f returns for it.
func (p *longPathT) acks(n int, f func(i int) int64) {
	for i := range n {
		p.now += lpStep
		p.ack(p.d.cfg.MSS, f(i))
	}
}

func constDelay(d int64) func(int) int64 { return func(int) int64 { return d } }

// warm takes the window out of slow start at about bdp packets with the queue empty.
func (p *longPathT) warm() {
	p.acks(2000, constDelay(lpBase))
	p.acks(1, constDelay(lpBase+4_000_000)) // above the target: slow start ends
	p.acks(600, constDelay(lpBase))         // a round trip below the target again
	if st := p.d.Stats(); st.SlowStart || st.BaseDelay != lpBase {
		p.t.Fatalf("warm-up: slow start %v, base %d", st.SlowStart, st.BaseDelay)
	}
}

// A poll whose clock was read before a stall makes its samples short by the stall; the
// next reading, that much later, bounds the error, and the base is not lowered by more
// than the tolerance. A base that really dropped shows in samples taken while the engine
// is busy (readings microseconds apart) and is learned.
func TestDelayScreensStaleSamples(t *testing.T) {
	p := newLongPathT(t, nil)
	p.warm()
	tol := lowMargin(lpBase, p.d.cfg.QueueFloor) + 4*p.d.gapAvg
	// A stale reading: 40 acks that arrived during a 6 ms stall, all taken at one now,
	// each a little shorter than the one before (4 to 9.9 ms).
	p.now += lpStep
	for i := range 40 {
		p.ack(p.d.cfg.MSS, lpBase-100_000-int64(i)*150_000)
	}
	p.now += 6_000_000
	p.d.OnSent(p.now, p.d.cfg.MSS)
	p.acks(100, constDelay(lpBase+200_000))
	st := p.d.Stats()
	if st.BaseDelay < lpBase-tol || st.LowSamples != 1 {
		t.Fatalf("after a stale reading: base %d ns (true %d, tolerance %d), %d low samples", st.BaseDelay, lpBase, tol, st.LowSamples)
	}
	// Another poller's stale reading: older than one already seen.
	p.d.OnAck(p.now-3_000_000, p.d.cfg.MSS, 7_000_000)
	p.acks(10, constDelay(lpBase))
	if st := p.d.Stats(); st.BaseDelay < lpBase-tol {
		t.Fatalf("after a reading older than the last: base %d ns", st.BaseDelay)
	}
	// The path got shorter (a queue that was taken for path delay drained): learned.
	p.acks(50, constDelay(lpBase-2_000_000))
	if st := p.d.Stats(); st.BaseDelay != lpBase-2_000_000 {
		t.Fatalf("a real drop of the base: learned %d ns, want %d", st.BaseDelay, lpBase-2_000_000)
	}
}

// On a long path a sample above the target ends slow start without a cut, and only a
// queue that stood for a whole smoothed round trip is drained: the window is multiplied
// by base/(smallest delay of that round trip) * (1 - DrainMargin), once.
func TestDelayLongPathCutsOnStandingQueue(t *testing.T) {
	p := newLongPathT(t, nil)
	p.acks(2000, constDelay(lpBase))
	w := p.d.Stats().Cwnd
	p.acks(1, constDelay(lpBase+4_000_000))
	if st := p.d.Stats(); st.SlowStart || st.DelayDecreases != 0 || st.Cwnd < w {
		t.Fatalf("a sample above the target in slow start: slow start %v, %d decreases, window %d -> %d", st.SlowStart, st.DelayDecreases, w, st.Cwnd)
	}
	target := p.d.Stats().TargetDelay
	// Above the target for most of a round trip, with one sample below it now and then
	// (the heads of bursts): no cut.
	p.acks(2000, func(i int) int64 {
		if i%400 == 399 {
			return lpBase
		}
		return target + 3_000_000
	})
	if st := p.d.Stats(); st.DelayDecreases != 0 {
		t.Fatalf("a queue that comes and goes: %d decreases", st.DelayDecreases)
	}
	// Every sample above the target for longer than the smoothed round trip: one cut.
	w = p.d.Stats().Cwnd
	standing := target + 1_000_000
	n := int(2*p.d.srtt/lpStep) + 10
	p.acks(n, func(i int) int64 { return standing + int64(i%7)*100_000 })
	st := p.d.Stats()
	if st.DelayDecreases != 1 {
		t.Fatalf("a standing queue for %d µs: %d decreases, want 1", int64(n)*lpStep/1000, st.DelayDecreases)
	}
	want := float64(w) * lpBase / float64(standing) * (1 - p.d.cfg.DrainMargin)
	if math.Abs(float64(st.Cwnd)-want) > 0.01*want {
		t.Errorf("cut %d -> %d bytes, want %.0f (the standing queue drained, DrainMargin more)", w, st.Cwnd, want)
	}
}

// On a long path a loss is congestion only with a queue standing a whole round trip (or
// in a burst); a moment above the target is not one.
func TestDelayLongPathLossNeedsStandingQueue(t *testing.T) {
	p := newLongPathT(t, nil)
	p.warm()
	target := p.d.Stats().TargetDelay
	p.acks(1, constDelay(target+2_000_000))
	p.d.OnLoss(p.now, p.d.cfg.MSS)
	if st := p.d.Stats(); st.LossDecreases != 0 || st.RandomLosses != 1 {
		t.Fatalf("a loss a moment after the delay rose: %d decreases, %d random", st.LossDecreases, st.RandomLosses)
	}
	// A queue that stands: the delay cut drains it, and a loss meanwhile is congestion
	// (not random), answered by that cut.
	p.acks(int(2*p.d.srtt/lpStep), constDelay(target+200_000))
	before := p.d.Stats()
	p.d.OnLoss(p.now, p.d.cfg.MSS)
	if st := p.d.Stats(); before.DelayDecreases != 1 || st.RandomLosses != 1 || st.Cwnd != before.Cwnd {
		t.Fatalf("a loss with a queue standing: %d delay decreases before it, %d random, window %d -> %d", before.DelayDecreases, st.RandomLosses, before.Cwnd, st.Cwnd)
	}
	// Long after that cut, at low delay, a burst of loss (a buffer smaller than the
	// target): a cut.
	p.now += 4 * p.d.srtt
	p.acks(int(p.d.srtt/lpStep), constDelay(lpBase))
	before = p.d.Stats()
	for range int(p.d.srtt/lpStep) / 4 {
		p.d.OnLoss(p.now, p.d.cfg.MSS)
	}
	if st := p.d.Stats(); st.LossDecreases != 1 || st.Cwnd >= before.Cwnd {
		t.Fatalf("a burst of loss: %d loss decreases, window %d -> %d", st.LossDecreases, before.Cwnd, st.Cwnd)
	}
}

// On a long path packets are paced at PaceGain times the window per smoothed round trip
// after a burst of paceBurst; on a shorter one never.
func TestDelayLongPathPaces(t *testing.T) {
	p := newLongPathT(t, nil)
	p.warm()
	st := p.d.Stats()
	mss := p.d.cfg.MSS
	gap := float64(p.d.srtt) / (float64(st.Cwnd) / float64(mss) * p.d.cfg.PaceGain)
	if math.Abs(float64(st.PacingInterval)-gap) > 1 {
		t.Fatalf("pacing interval %d ns, want %.0f", st.PacingInterval, gap)
	}
	now := p.now + 50_000_000 // after a pause
	sent := 0
	for p.d.NextSendTime(now, mss) <= now && sent < 100_000 {
		p.d.OnSent(now, mss)
		sent++
	}
	if burst := float64(p.d.paceBurst()) / gap; math.Abs(float64(sent)-burst) > 2 {
		t.Fatalf("%d packets left at once after a pause, want the burst of %.0f", sent, burst)
	}
	at := p.d.NextSendTime(now, mss)
	p.d.OnSent(at, mss)
	if next := p.d.NextSendTime(at, mss); math.Abs(float64(next-at)-gap) > 2 {
		t.Fatalf("next packet %d ns later, want %.0f", next-at, gap)
	}
	short := newDelayT(t, nil)
	for i := range 3000 {
		short.OnAck(int64(i)*1000, mss, 100_000)
		short.OnSent(int64(i)*1000, mss)
		if at := short.NextSendTime(int64(i)*1000, mss); at != int64(i)*1000 {
			t.Fatalf("a 100 µs path paced: next send %d at %d", at, int64(i)*1000)
		}
	}
}

// A timeout sets the slow start threshold to half the window: slow start ends there.
func TestDelayTimeoutSlowStartThreshold(t *testing.T) {
	p := newLongPathT(t, nil)
	p.warm()
	w := p.d.cwnd
	p.d.OnTimeout(p.now)
	p.acks(int(w/2)+10, constDelay(lpBase))
	if st := p.d.Stats(); st.SlowStart || math.Abs(p.d.cwnd-w/2) > w/40 {
		t.Fatalf("after a timeout at %.0f packets: slow start %v, window %.0f, want about %.0f", w, st.SlowStart, p.d.cwnd, w/2)
	}
}

// round acknowledges one round trip of p's window at delay.
func (p *longPathT) round(delay int64) {
	w := max(int(p.d.cwnd/4), 1)
	step := max(p.d.rtt()/int64(w), 1)
	for range w {
		p.now += step
		p.ack(4*p.d.cfg.MSS, delay)
	}
	p.now += lpStep
	p.ack(p.d.cfg.MSS, delay) // rolls the round
}

// On a long path the controller competes once 5 of the last 8 rounds had a standing
// queue: slow start to the first loss, then CUBIC, growing although the delay is above
// the target; a probe every competeProbeEvery rounds ends the competition once the queue
// drains when the flow makes room, and otherwise gives the window back.
func TestDelayLongPathCompetes(t *testing.T) {
	p := newLongPathT(t, nil)
	p.warm()
	target := p.d.Stats().TargetDelay
	queue := target + 5_000_000 // somebody else's queue
	for i := 0; i < 8 && !p.d.Stats().Competitive; i++ {
		p.round(queue)
	}
	st := p.d.Stats()
	if !st.Competitive || st.CompetitiveEntries != 1 || !st.SlowStart {
		t.Fatalf("after rounds of a standing queue: competitive %v (%d entries), slow start %v", st.Competitive, st.CompetitiveEntries, st.SlowStart)
	}
	p.round(queue)
	w := p.d.cwnd
	p.d.OnLoss(p.now, p.d.cfg.MSS)
	if st := p.d.Stats(); st.SlowStart || math.Abs(p.d.cwnd-cubicBeta*w) > 1 {
		t.Fatalf("competing, a loss: slow start %v, window %.0f -> %.0f, want %.0f", st.SlowStart, w, p.d.cwnd, cubicBeta*w)
	}
	w = p.d.cwnd
	for range 4 {
		p.round(queue)
	}
	if p.d.cwnd <= w {
		t.Fatalf("competing: window %.0f -> %.0f with the delay above the target, want growth", w, p.d.cwnd)
	}
	// The queue stays: probes come and go, the window comes back, the competition goes on.
	probes := 0
	for range 2 * competeProbeEvery {
		before, probing := p.d.cwnd, p.d.probing
		p.round(queue)
		if probing == 0 && p.d.probing > 0 {
			probes++
			if p.d.cwnd >= before {
				t.Fatalf("a probe did not make room: window %.0f -> %.0f", before, p.d.cwnd)
			}
		}
	}
	if st := p.d.Stats(); !st.Competitive || probes < 1 || p.d.cwnd < w {
		t.Fatalf("with the queue standing: competitive %v after %d probes, window %.0f (was %.0f)", st.Competitive, probes, p.d.cwnd, w)
	}
	// The competitor leaves: the next probe sees the queue drain.
	for i := 0; i < competeProbeEvery+competeProbeRounds+2 && p.d.Stats().Competitive; i++ {
		p.round(lpBase + 100_000)
	}
	if p.d.Stats().Competitive {
		t.Fatal("still competing after the queue drained")
	}
}

// CUBIC's window function (RFC 9438): a reduction to beta, wMax reached again K seconds
// later, fast convergence when the window was below the last maximum.
func TestCubic(t *testing.T) {
	var c cubic
	if w := c.reduce(1e9, 1000); w != 1000*cubicBeta || c.wMax != 1000 {
		t.Fatalf("reduce 1000: window %.1f, wMax %.1f", w, c.wMax)
	}
	if k := math.Cbrt(1000 * (1 - cubicBeta) / cubicC); math.Abs(c.k-k) > 1e-9 || math.Abs(c.at(c.k)-1000) > 1e-6 {
		t.Fatalf("K %.3f s (want %.3f), W(K) %.1f", c.k, k, c.at(c.k))
	}
	if c.reduce(2e9, 800); c.wMax != 800*(1+cubicBeta)/2 {
		t.Fatalf("fast convergence: wMax %.1f, want %.1f", c.wMax, 800*(1+cubicBeta)/2)
	}
	// Growth over the epoch: monotone, concave up to wMax, never by more than half the
	// window per round trip of acks.
	w, now := c.wMax*cubicBeta, int64(2e9)
	c.start(now, w)
	prev := w
	for range 20000 {
		now += 1_000_000
		w = c.grow(now, w, 1, 20_000_000)
		if w < prev || w > 1.5*prev+1 {
			t.Fatalf("grow: %.2f -> %.2f", prev, w)
		}
		prev = w
	}
	if w < c.wMax {
		t.Fatalf("20 s into the epoch the window is %.0f, below wMax %.0f", w, c.wMax)
	}
}

// cubicRef is a loss-based flow for the simulator, as Linux's default: slow start to the
// first loss, then CUBIC (the package's cubic), cut once per round trip.
type cubicRef struct {
	mss            float64
	cwnd, ssthresh float64
	c              cubic
	lastCut, srtt  int64
	cuts           uint64
}

func (r *cubicRef) Window() int                         { return int(r.cwnd * r.mss) }
func (r *cubicRef) OnSent(int64, int)                   {}
func (r *cubicRef) NextSendTime(now int64, _ int) int64 { return now }
func (r *cubicRef) OnSpuriousTimeout(int64)             {}
func (r *cubicRef) OnTimeout(int64)                     { r.cwnd = 1 }
func (r *cubicRef) Stats() Stats                        { return Stats{Cwnd: r.Window(), LossDecreases: r.cuts} }

func (r *cubicRef) OnAck(now int64, acked int, delay int64) {
	if delay > 0 {
		if r.srtt == 0 {
			r.srtt = delay
		}
		r.srtt += (delay - r.srtt) / 8
	}
	pkts := float64(acked) / r.mss
	if r.ssthresh == 0 || r.cwnd < r.ssthresh {
		r.cwnd += pkts
		return
	}
	r.cwnd = r.c.grow(now, r.cwnd, pkts, r.srtt)
}

func (r *cubicRef) OnLoss(now int64, _ int) {
	if r.lastCut != 0 && now-r.lastCut < r.srtt {
		return
	}
	r.lastCut = now
	r.cwnd = max(r.c.reduce(now, r.cwnd), 2)
	r.ssthresh = r.cwnd
	r.cuts++
}

// A Delay flow and a CUBIC flow started together on a 1 Gbit/s path of 2 and 10 ms with a
// one-BDP buffer, with and without host stalls that deliver acks in bursts: neither gets
// less than a quarter of the line (bench/longpath's goal on the delay line's bed).
func TestSimDelayCompetesWithCubic(t *testing.T) {
	for _, rtt := range []int64{2_000_000, 10_000_000} {
		for _, stalls := range []bool{false, true} {
			t.Run(fmt.Sprintf("rtt%dms-stalls%v", rtt/1e6, stalls), func(t *testing.T) {
				cfg := simConfig{
					capacity: 0.125, // 1 Gbit/s
					baseRTT:  rtt,
					jitter:   200_000,
					buffer:   int(0.125 * float64(rtt)),
					flows:    2,
					duration: 8_000_000_000,
					seed:     1,
					swift:    DefaultSwiftConfig(),
				}
				cfg.swift.MSS = DefaultDelayConfig().MSS
				if stalls {
					cfg.stallEvery, cfg.stallMin, cfg.stallMax = 100_000_000, 1_000_000, 10_000_000
				}
				cfg.newCtl = func(t testing.TB, i int) Controller {
					if i == 0 {
						return &cubicRef{mss: float64(cfg.swift.MSS), cwnd: 10}
					}
					d, err := NewDelay(DefaultDelayConfig())
					if err != nil {
						t.Fatal(err)
					}
					return d
				}
				r := runSim(t, cfg)
				st := r.flows[1].Stats()
				t.Logf("CUBIC %.3f, Delay %.3f Gbit/s over the second half; utilization %.3f, drops %d; Delay: competitive %v (%d entries), %d loss and %d delay decreases; CUBIC: %d cuts",
					r.throughput[0], r.throughput[1], r.utilization, r.drops, st.Competitive, st.CompetitiveEntries, st.LossDecreases, st.DelayDecreases, r.flows[0].Stats().LossDecreases)
				for i, name := range []string{"CUBIC", "Delay"} {
					if share := r.throughput[i]; share < 0.25 {
						t.Errorf("%s got %.3f of the line, want >= 0.25", name, share)
					}
				}
				if r.utilization < 0.9 {
					t.Errorf("utilization %.3f", r.utilization)
				}
			})
		}
	}
}

// Nothing on a long path allocates: the screen, pacing, competition and CUBIC included.
func TestDelayLongPathAllocs(t *testing.T) {
	p := newLongPathT(t, nil)
	p.warm()
	mss := p.d.cfg.MSS
	i := 0
	allocs := testing.AllocsPerRun(2000, func() {
		i++
		p.now += lpStep
		p.d.OnSent(p.now, mss)
		_ = p.d.NextSendTime(p.now, mss)
		delay := int64(lpBase + (i%50)*200_000) // below and above the target, standing at times
		if i%97 == 0 {
			delay = lpBase - 3_000_000 // a short sample
		}
		p.d.OnAck(p.now, mss, delay)
		if i%301 == 0 {
			p.d.OnLoss(p.now, mss)
		}
		if i%1009 == 0 {
			p.d.OnTimeout(p.now)
			p.d.OnSpuriousTimeout(p.now)
		}
		_ = p.d.Stats()
	})
	if allocs != 0 {
		t.Errorf("%v allocations per run, want 0", allocs)
	}
}

// On a long path the window grows only while it limits the flow: one whose host sends
// less than half of it per round trip keeps it (RFC 7661), however low the delay.
func TestDelayLongPathGrowsOnlyWhenWindowLimited(t *testing.T) {
	p := newLongPathT(t, nil)
	p.warm()
	mss := p.d.cfg.MSS
	// Round trips of acks with a quarter of the window in flight at most: once the full
	// window of the warm-up is two rounds back, the window stays.
	limited := func() {
		w := p.d.Stats().Cwnd
		for range int(4 * p.d.srtt / lpStep) {
			p.now += lpStep
			if p.inflight < w/4 {
				p.d.OnSent(p.now, mss)
				p.inflight += mss
			}
			p.d.OnAck(p.now, mss, lpBase)
			p.inflight = max(p.inflight-mss, 0)
		}
	}
	limited()
	w := p.d.Stats().Cwnd
	limited()
	if got := p.d.Stats().Cwnd; got != w {
		t.Fatalf("host-limited at a quarter of the window: window %d -> %d", w, got)
	}
	p.acks(int(p.d.srtt/lpStep), constDelay(lpBase)) // window-limited again
	if got := p.d.Stats().Cwnd; got <= w {
		t.Fatalf("window-limited again: window %d -> %d, want growth", w, got)
	}
}
