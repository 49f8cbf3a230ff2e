package congestion

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// A small deterministic discrete-event simulator of N flows sharing one bottleneck: each
// flow has its own Swift controller and sends MSS-sized packets whenever its bytes in
// flight are below Window and NextSendTime allows. The bottleneck is a FIFO of capacity
// C with tail drop; a packet's fabric delay is its queueing wait plus serialization plus
// the base propagation round trip (plus optional constant extra delay and seeded jitter
// on the ack path). Every delivered packet is acked individually with its measured
// delay; a dropped packet is reported to its sender as a loss event one base round trip
// later (what a SACK gap would show). No real time is read anywhere.

type simConfig struct {
	capacity   float64 // bytes per ns at the bottleneck (1.25 = 10 Gbit/s)
	baseRTT    int64   // ns of propagation, both directions together
	extraDelay int64   // ns added to every ack (a constant delay the flows cannot drain)
	jitter     int64   // ns: each ack is delayed by a seeded uniform [0, jitter)
	randomLoss float64 // probability that a packet is lost before the bottleneck (not congestion)
	buffer     int     // bytes the bottleneck queue holds before it drops
	flows      int
	lateStart  int64 // ns: start time of the last flow (0: all flows start together)
	duration   int64 // ns of simulated time; statistics cover the second half
	seed       uint64
	swift      SwiftConfig
	delay      *DelayConfig                            // if set, the flows run Delay with it instead of Swift
	newCtl     func(t testing.TB, flow int) Controller // if set, makes each flow's controller (delay and swift unused)
	// Host stalls: at seeded random times (exponential gaps of mean stallEvery ns) the
	// ack path stops for a seeded uniform [stallMin, stallMax) ns, and every ack due
	// meanwhile arrives when it ends, together, as a descheduled host delivers them.
	stallEvery, stallMin, stallMax int64
	onAck                          func(now int64, flow int, ctls []Controller) // optional hook after every OnAck
}

type simResult struct {
	utilization float64   // bottleneck busy fraction over the second half
	queueMedian int64     // ns, median queueing wait of packets enqueued in the second half
	delayMedian int64     // ns, median fabric delay of those packets
	throughput  []float64 // Gbit/s per flow over the second half
	fairness    float64   // Jain's index of throughput
	meanTarget  float64   // ns, mean TargetDelay of the flows at the end
	drops       int
	flows       []Controller
}

type simEventKind uint8

const (
	evStart simEventKind = iota
	evAck
	evLoss
	evWake
)

type simEvent struct {
	at     int64
	seq    uint64 // tie-break: equal times run in scheduling order (determinism)
	kind   simEventKind
	flow   int
	sentAt int64
}

type simQueue []simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type simFlow struct {
	ctl         Controller
	inflight    int
	wakePending bool
	wakeAt      int64
	bytes       int // bytes that left the bottleneck in the measured half
}

type sim struct {
	cfg       simConfig
	rng       *rand.Rand
	events    simQueue
	seq       uint64
	flows     []simFlow
	ctls      []Controller // flows[i].ctl, for hooks
	busyUntil int64        // ns, when the bottleneck finishes everything queued so far
	ser       int64        // ns to serialize one MSS packet
	measureAt int64
	busy      int64 // ns the bottleneck was busy in the measured half
	queueWait []int64
	delays    []int64
	drops     int
	stalls    [][2]int64 // [start, end) of the host stalls, in order
}

func runSim(t testing.TB, cfg simConfig) simResult {
	t.Helper()
	s := &sim{
		cfg:       cfg,
		rng:       rand.New(rand.NewPCG(cfg.seed, 0x5eed)),
		ser:       int64(math.Round(float64(cfg.swift.MSS) / cfg.capacity)),
		measureAt: cfg.duration / 2,
	}
	if cfg.stallEvery > 0 {
		srng := rand.New(rand.NewPCG(cfg.seed, 0x57a11))
		for at := int64(0); at < cfg.duration; {
			at += int64(srng.ExpFloat64() * float64(cfg.stallEvery))
			end := at + cfg.stallMin + srng.Int64N(max(cfg.stallMax-cfg.stallMin, 1))
			s.stalls = append(s.stalls, [2]int64{at, end})
			at = end
		}
	}
	for i := range cfg.flows {
		var ctl Controller
		var err error
		if cfg.newCtl != nil {
			ctl = cfg.newCtl(t, i)
		} else if cfg.delay != nil {
			ctl, err = NewDelay(*cfg.delay)
		} else {
			ctl, err = NewSwift(cfg.swift)
		}
		if err != nil {
			t.Fatal(err)
		}
		s.flows = append(s.flows, simFlow{ctl: ctl})
		s.ctls = append(s.ctls, ctl)
		start := int64(i) * 100 // stagger by 100 ns so flows are not in lock step
		if cfg.lateStart > 0 && i == cfg.flows-1 {
			start = cfg.lateStart
		}
		s.schedule(simEvent{at: start, kind: evStart, flow: i})
	}
	for s.events.Len() > 0 {
		e := heap.Pop(&s.events).(simEvent)
		if e.at >= cfg.duration {
			break
		}
		f := &s.flows[e.flow]
		mss := cfg.swift.MSS
		switch e.kind {
		case evAck:
			f.inflight -= mss
			f.ctl.OnAck(e.at, mss, e.at-e.sentAt)
			if cfg.onAck != nil {
				cfg.onAck(e.at, e.flow, s.ctls)
			}
		case evLoss:
			f.inflight -= mss
			f.ctl.OnLoss(e.at, mss)
		case evWake:
			if e.at == f.wakeAt {
				f.wakePending = false
			}
		}
		s.trySend(e.flow, e.at)
	}

	res := simResult{drops: s.drops}
	half := float64(cfg.duration - s.measureAt)
	res.utilization = float64(s.busy) / half
	res.queueMedian = median(s.queueWait)
	res.delayMedian = median(s.delays)
	var sum, sumSq float64
	for i := range s.flows {
		f := &s.flows[i]
		gbps := float64(f.bytes) * 8 / half // bytes/ns*8 = Gbit/s
		res.throughput = append(res.throughput, gbps)
		sum += gbps
		sumSq += gbps * gbps
		res.meanTarget += float64(f.ctl.Stats().TargetDelay) / float64(len(s.flows))
		res.flows = append(res.flows, f.ctl)
	}
	if sumSq > 0 {
		res.fairness = sum * sum / (float64(len(s.flows)) * sumSq)
	}
	return res
}

func (s *sim) schedule(e simEvent) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.events, e)
}

func (s *sim) trySend(i int, now int64) {
	f := &s.flows[i]
	mss := s.cfg.swift.MSS
	for f.inflight < f.ctl.Window() {
		next := f.ctl.NextSendTime(now, mss)
		if next > now {
			if !f.wakePending || next < f.wakeAt {
				f.wakePending, f.wakeAt = true, next
				s.schedule(simEvent{at: next, kind: evWake, flow: i})
			}
			return
		}
		f.ctl.OnSent(now, mss)
		f.inflight += mss
		s.enqueue(i, now)
	}
}

// enqueue puts one MSS packet of flow i into the bottleneck FIFO at now.
func (s *sim) enqueue(i int, now int64) {
	if s.cfg.randomLoss > 0 && s.rng.Float64() < s.cfg.randomLoss {
		s.schedule(simEvent{at: now + s.cfg.baseRTT, kind: evLoss, flow: i, sentAt: now})
		return
	}
	queued := 0.0
	if s.busyUntil > now {
		queued = float64(s.busyUntil-now) * s.cfg.capacity
	}
	if queued+float64(s.cfg.swift.MSS) > float64(s.cfg.buffer) {
		s.drops++
		s.schedule(simEvent{at: now + s.cfg.baseRTT, kind: evLoss, flow: i, sentAt: now})
		return
	}
	start := max(now, s.busyUntil)
	depart := start + s.ser
	s.busyUntil = depart
	ack := depart + s.cfg.baseRTT + s.cfg.extraDelay
	if s.cfg.jitter > 0 {
		ack += s.rng.Int64N(s.cfg.jitter)
	}
	ack = s.afterStall(ack)
	if now >= s.measureAt {
		s.queueWait = append(s.queueWait, start-now)
		s.delays = append(s.delays, ack-now)
	}
	if busy := min(depart, s.cfg.duration) - max(start, s.measureAt); busy > 0 {
		s.busy += busy // the part of this packet's serialization inside the measured half
	}
	if depart > s.measureAt && depart <= s.cfg.duration {
		s.flows[i].bytes += s.cfg.swift.MSS
	}
	s.schedule(simEvent{at: ack, kind: evAck, flow: i, sentAt: now})
}

// afterStall returns when an ack due at t arrives: at the end of the host stall t falls
// in, or at t.
func (s *sim) afterStall(t int64) int64 {
	i, _ := slices.BinarySearchFunc(s.stalls, t, func(st [2]int64, t int64) int {
		switch {
		case st[1] <= t:
			return -1
		case st[0] > t:
			return 1
		}
		return 0
	})
	if i < len(s.stalls) && s.stalls[i][0] <= t && t < s.stalls[i][1] {
		return s.stalls[i][1]
	}
	return t
}

func median(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	w := slices.Clone(v)
	slices.Sort(w)
	return w[len(w)/2]
}

// baseSim is a 10 Gbit/s bottleneck with a 10 µs base round trip and a 256 KB buffer.
func baseSim(flows int) simConfig {
	return simConfig{
		capacity: 1.25,
		baseRTT:  10_000,
		jitter:   500,
		buffer:   256 << 10,
		flows:    flows,
		duration: 60_000_000, // 60 ms
		seed:     uint64(flows),
		swift:    DefaultSwiftConfig(),
	}
}

func TestSimConvergence(t *testing.T) {
	tests := []struct {
		name  string
		flows int
		mod   func(*simConfig)
	}{
		{"2flows", 2, nil},
		{"4flows", 4, nil},
		{"8flows", 8, nil},
		// A buffer (20 KB, 16 µs) below the target queue: tail drops and OnLoss all along.
		{"8flows-shallow-buffer", 8, func(c *simConfig) { c.buffer = 20 << 10 }},
		// Flows that start from one packet must grow into their share, not shrink into it.
		{"2flows-initial-1", 2, func(c *simConfig) { c.swift.InitialCwnd = 1 }},
		{"8flows-initial-1", 8, func(c *simConfig) { c.swift.InitialCwnd = 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 3; seed++ {
				cfg := baseSim(tt.flows)
				cfg.seed = seed
				cfg.lateStart = cfg.duration / 3
				if tt.mod != nil {
					tt.mod(&cfg)
				}
				n := tt.flows
				// Convergence time of the late flow: from its start until its window first
				// reaches 80% of the mean window of the others.
				converged := int64(-1)
				cfg.onAck = func(now int64, flow int, ctls []Controller) {
					if flow != n-1 || converged >= 0 {
						return
					}
					others := 0.0
					for _, c := range ctls[:n-1] {
						others += c.(*Swift).cwnd / float64(n-1)
					}
					if ctls[n-1].(*Swift).cwnd >= 0.8*others {
						converged = now - cfg.lateStart
					}
				}
				r := runSim(t, cfg)
				t.Logf("seed %d: utilization %.4f, Jain %.4f, queueing delay median %.1f µs, fabric delay median %.1f µs, mean target %.1f µs, drops %d, late flow at 80%% of the others' window after %.0f µs",
					seed, r.utilization, r.fairness, float64(r.queueMedian)/1e3, float64(r.delayMedian)/1e3, r.meanTarget/1e3, r.drops, float64(converged)/1e3)
				t.Logf("seed %d: per-flow Gbit/s over the second half (the last joined at T/3): %.3f", seed, r.throughput)
				if r.utilization <= 0.90 {
					t.Errorf("utilization %.4f, want > 0.90", r.utilization)
				}
				if cfg.buffer == baseSim(n).buffer && float64(r.queueMedian) >= 2*r.meanTarget {
					t.Errorf("median queueing delay %d ns, want < 2x target (%.0f ns)", r.queueMedian, 2*r.meanTarget)
				}
				if r.fairness <= 0.95 {
					t.Errorf("Jain's fairness %.4f, want > 0.95", r.fairness)
				}
				fair := 10.0 * r.utilization / float64(n)
				if late := r.throughput[n-1]; late < 0.8*fair {
					t.Errorf("late flow got %.3f Gbit/s, want at least 80%% of its share %.3f", late, fair)
				}
				if converged < 0 {
					t.Errorf("late flow never reached 80%% of the others' window")
				}
			}
		})
	}
}

func TestSimExtraDelayShrinksWindow(t *testing.T) {
	cfg := baseSim(2)
	cfg.duration = 5_000_000
	// Delay can never fall below 10+70 µs, above the largest target (BaseTarget+FSRange).
	cfg.extraDelay = 70_000
	cfg.swift.MinCwnd = 0.01 // this test follows the window below one packet, into pacing
	last := []float64{math.Inf(1), math.Inf(1)}
	cfg.onAck = func(_ int64, flow int, ctls []Controller) {
		s := ctls[flow].(*Swift)
		if s.cwnd > last[flow] {
			t.Fatalf("flow %d: window grew from %g to %g packets with delay above target", flow, last[flow], s.cwnd)
		}
		last[flow] = s.cwnd
	}
	r := runSim(t, cfg)
	for i, c := range r.flows {
		s := c.(*Swift)
		st := s.Stats()
		t.Logf("flow %d: cwnd %d B, delay decreases %d, target %d ns, last delay %d ns",
			i, st.Cwnd, st.DelayDecreases, st.TargetDelay, st.LastDelay)
		// From 16 packets to below one: the flow now paces, one packet per several RTTs.
		if st.DelayDecreases == 0 || s.cwnd >= 1 || st.PacingInterval <= st.LastDelay {
			t.Errorf("flow %d: cwnd %g packets, pacing interval %d ns after %d decreases, want < 1 packet paced slower than one per round trip",
				i, s.cwnd, st.PacingInterval, st.DelayDecreases)
		}
	}
}

// TestSimLongPathLearnsBase runs flows on a 100 µs path, longer than the default target:
// with an absolute target the window would sit at its minimum, while with BaseDelayWindow
// the controller learns the path's delay and fills the link.
func TestSimLongPathLearnsBase(t *testing.T) {
	for _, learn := range []bool{false, true} {
		cfg := baseSim(2)
		cfg.baseRTT = 100_000
		cfg.lateStart = 0
		if learn {
			cfg.swift.BaseDelayWindow = 10_000_000_000
		}
		r := runSim(t, cfg)
		t.Logf("learning %v: utilization %.3f, Jain %.4f, mean target %.1f µs", learn, r.utilization, r.fairness, r.meanTarget/1000)
		// Fairness under learning is the documented weakness (flows learn the base at
		// different moments); what learning is for is filling a long path.
		if learn && r.utilization < 0.9 {
			t.Errorf("with learning: utilization %.3f, want > 0.9", r.utilization)
		}
		if !learn && r.utilization > 0.5 {
			t.Errorf("without learning a 100 µs path should not fill the link under a 25 µs target (got %.3f): the test no longer shows what learning is for", r.utilization)
		}
	}
}
