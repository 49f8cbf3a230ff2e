package transportbench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/congestion"
	"github.com/xdpndk/xdpndk/transport/simlink"
)

// Case is one run of the goodput benchmark.
type Case struct {
	Loss float64 // random loss probability of each direction
	Mode string  // ModeSelective or ModeGoBackN
	Seed uint64  // network seed
}

// CaseResult is what one run measured. Counts are over the measured window only (the
// difference of the counters at its end and at its start); means are weighted by virtual
// time.
type CaseResult struct {
	Case

	// GoodputGbps is the bytes of the Writes that completed in the window × 8 / window.
	GoodputGbps float64
	Writes      uint64 // Writes completed in the window
	// TxPackets, Retransmits, Timeouts and NaksReceived are QA's counters (QPStats);
	// RetxPerPkt = Retransmits / TxPackets.
	TxPackets, Retransmits, Timeouts, NaksReceived uint64
	RetxPerPkt                                     float64
	// Duplicates and AcksSent are QB's counters: data packets it got twice, acks it sent.
	Duplicates, AcksSent uint64
	// WireUtil is the bytes of the A→B datagrams B received (duplicates included) /
	// (bandwidth × window): how busy the bottleneck was with data that got through.
	WireUtil float64
	// DataLost, DataQueueDrops: A→B datagrams dropped by random loss and by the bandwidth
	// queue; AckLost, AckQueueDrops: the same for B→A.
	DataLost, DataQueueDrops, AckLost, AckQueueDrops uint64
	// CwndMean and InFlightMean are QA's congestion window and bytes in flight, in bytes;
	// SRTTMean and RTOMean its smoothed RTT and retransmission timeout, in ns (all as
	// QPStats publishes them, after each acknowledgement is processed and before the sends
	// it allows: InFlightMean is therefore a lower bound).
	CwndMean, InFlightMean, SRTTMean, RTOMean float64
	// FabricDelayMean and TargetMean are the congestion controller's smoothed delay sample
	// (round trip less the time the peer held the ack) and its target delay, in ns (0 for
	// a controller that does not track them).
	FabricDelayMean, TargetMean float64
	// CC is the difference of QA's congestion controller counters over the window (the
	// state fields are the values at the end).
	CC congestion.Stats
	// Steps is how many times the engines were polled (both at once), and Real how long
	// the whole run took in real time.
	Steps uint64
	Real  time.Duration
	// Err is why the run did not finish normally (a failed Write, a stall, a time limit);
	// the figures then cover what happened until then.
	Err error
}

// snapshot is the counters RunCase takes at both ends of the window.
type snapshot struct {
	t          int64
	bytes      uint64
	writes     uint64
	qa, qb     transport.QPStats
	fwd, back  simlink.PathStats
	cc         congestion.Stats
	haveCC     bool
	failedWork uint64
}

func (p *Pair) snapshot() snapshot {
	s := snapshot{
		t:      p.Clock.Now(),
		bytes:  p.SinkA.Bytes[transport.OpWrite],
		writes: p.SinkA.N[transport.OpWrite],
		qa:     p.QA.Stats(), qb: p.QB.Stats(),
		fwd:        p.Net.PathStats(p.LinkA.LocalAddr(), p.LinkB.LocalAddr()),
		back:       p.Net.PathStats(p.LinkB.LocalAddr(), p.LinkA.LocalAddr()),
		failedWork: p.SinkA.Failed,
	}
	if p.CCA != nil {
		s.cc, s.haveCC = p.CCA.Stats(), true
	}
	return s
}

// RunCase runs one case of the goodput benchmark with the link and traffic of o (its
// Duration, Warmup, Latency, Bandwidth, QueueBytes, MaxPayload, MsgSize, Outstanding and
// MaxReal; o must have been validated by Run, or come from DefaultOptions).
func RunCase(ctx context.Context, o Options, c Case) (res CaseResult) {
	realStart := time.Now()
	res.Case = c
	defer func() { res.Real = time.Since(realStart) }()
	if o.MaxReal <= 0 {
		o.MaxReal = time.Minute
	}
	if err := ctx.Err(); err != nil {
		res.Err = err
		return res
	}
	slot := (o.MsgSize + 63) &^ 63
	p, err := NewPair(PairConfig{
		Seed:       c.Seed,
		MaxPayload: o.MaxPayload,
		Impairments: simlink.Impairments{
			Latency: o.Latency, Loss: c.Loss, Bandwidth: o.Bandwidth, QueueBytes: o.QueueBytes,
		},
		Engine: func(cfg *transport.Config) { o.Tweak(cfg, c.Mode) },
		QP: transport.QPConfig{
			SendDepth: max(o.Outstanding, 1), RecvDepth: 16,
		},
		MemSize: slot * o.Outstanding,
	})
	if err != nil {
		res.Err = err
		return res
	}
	defer p.Close()
	src := make([]byte, o.MsgSize)
	for i := range src {
		src[i] = byte(i*7 + i>>8)
	}
	wr := transport.WorkRequest{Kind: transport.OpWrite, NSGE: 1, RemoteToken: RegionToken}
	wr.SGL[0] = src
	var posted uint64
	post := func() error {
		for posted-(p.SinkA.N[transport.OpWrite]+p.SinkA.Failed) < uint64(o.Outstanding) {
			wr.RemoteAddr = RegionBase + uint64(slot)*(posted%uint64(o.Outstanding))
			wr.Context = posted
			if err := p.QA.PostSend(&wr); err != nil {
				return fmt.Errorf("post write %d: %w", posted, err)
			}
			posted++
		}
		return nil
	}

	// The step budget: a hundred steps per data packet the window could carry at full
	// rate, plus slack. A run normally takes two to four per packet.
	pkts := float64(o.Bandwidth) / 8 * (o.Warmup + o.Duration).Seconds() / float64(max(o.MaxPayload-64, 1))
	budget := uint64(100*pkts) + 1_000_000
	start := p.Clock.Now()
	warmEnd := start + int64(o.Warmup)
	end := warmEnd + int64(o.Duration)
	var s0 snapshot
	var acc struct{ cwnd, inflight, srtt, rto, fabric, target float64 }
	last := start
	for phase := 0; phase < 2; phase++ {
		limit := warmEnd
		if phase == 1 {
			s0 = p.snapshot()
			limit = end
		}
		for p.Clock.Now() < limit {
			if err := post(); err != nil {
				res.Err = err
				break
			}
			if p.SinkA.Failed > 0 {
				res.Err = fmt.Errorf("write failed: %+v", p.SinkA.First)
				break
			}
			if p.Steps > budget {
				res.Err = fmt.Errorf("step budget of %d exhausted at virtual time %v", budget, time.Duration(p.Clock.Now()-start))
				break
			}
			if p.Steps&4095 == 0 {
				if ctx.Err() != nil {
					res.Err = ctx.Err()
					break
				}
				if time.Since(realStart) > o.MaxReal {
					res.Err = fmt.Errorf("real-time limit %v reached at virtual time %v", o.MaxReal, time.Duration(p.Clock.Now()-start))
					break
				}
			}
			if !p.Step(limit) {
				res.Err = fmt.Errorf("%w at virtual time %v with %d Writes outstanding", ErrStalled,
					time.Duration(p.Clock.Now()-start), posted-p.SinkA.N[transport.OpWrite])
				break
			}
			if now := p.Clock.Now(); phase == 1 && now > last {
				// The state at the end of instant last holds until now.
				st := p.QA.Stats()
				dt := float64(now - last)
				acc.cwnd += float64(st.CongestionWindow) * dt
				acc.inflight += float64(st.InFlight) * dt
				acc.srtt += float64(st.SRTT) * dt
				acc.rto += float64(st.RTO) * dt
				if p.CCA != nil {
					cs := p.CCA.Stats()
					acc.fabric += float64(cs.SmoothedDelay) * dt
					acc.target += float64(cs.TargetDelay) * dt
				}
				last = now
			} else if now > last {
				last = now
			}
		}
		if res.Err != nil {
			break
		}
	}
	if res.Err != nil && s0.t == 0 {
		return res
	}
	s1 := p.snapshot()
	res.fill(o, &s0, &s1, p.Steps)
	span := float64(s1.t - s0.t)
	if span > 0 {
		res.CwndMean, res.InFlightMean = acc.cwnd/span, acc.inflight/span
		res.SRTTMean, res.RTOMean = acc.srtt/span, acc.rto/span
		res.FabricDelayMean, res.TargetMean = acc.fabric/span, acc.target/span
	}
	return res
}

// fill computes the figures from the snapshots at both ends of the window.
func (r *CaseResult) fill(o Options, s0, s1 *snapshot, steps uint64) {
	// The window's nominal length: a run that stopped early still divides by it, so a
	// failure shows as lost goodput.
	win := o.Duration.Seconds()
	r.Writes = s1.writes - s0.writes
	r.GoodputGbps = float64(s1.bytes-s0.bytes) * 8 / win / 1e9
	r.TxPackets = s1.qa.TxPackets - s0.qa.TxPackets
	r.Retransmits = s1.qa.Retransmits - s0.qa.Retransmits
	r.Timeouts = s1.qa.Timeouts - s0.qa.Timeouts
	r.NaksReceived = s1.qa.NaksReceived - s0.qa.NaksReceived
	if r.TxPackets > 0 {
		r.RetxPerPkt = float64(r.Retransmits) / float64(r.TxPackets)
	}
	r.Duplicates = s1.qb.Duplicates - s0.qb.Duplicates
	r.AcksSent = s1.qb.AcksSent - s0.qb.AcksSent
	r.WireUtil = float64(s1.fwd.DeliveredBytes-s0.fwd.DeliveredBytes) * 8 / (float64(o.Bandwidth) * win)
	r.DataLost = s1.fwd.DroppedLoss - s0.fwd.DroppedLoss
	r.DataQueueDrops = s1.fwd.DroppedQueue - s0.fwd.DroppedQueue
	r.AckLost = s1.back.DroppedLoss - s0.back.DroppedLoss
	r.AckQueueDrops = s1.back.DroppedQueue - s0.back.DroppedQueue
	if s0.haveCC && s1.haveCC {
		a, b := s0.cc, s1.cc
		b.DelayDecreases -= a.DelayDecreases
		b.LossDecreases -= a.LossDecreases
		b.RTODecreases -= a.RTODecreases
		b.WindowResets -= a.WindowResets
		b.Timeouts -= a.Timeouts
		b.LossEvents -= a.LossEvents
		b.SentBytes -= a.SentBytes
		b.AckedBytes -= a.AckedBytes
		b.LostBytes -= a.LostBytes
		r.CC = b
	}
	r.Steps = steps
}

// Cases returns the runs Run makes for o, in the order they are started: by seed, then
// loss, then mode.
func Cases(o Options) []Case {
	var out []Case
	for _, s := range o.Seeds {
		for _, l := range o.Losses {
			for _, m := range o.Modes {
				out = append(out, Case{Loss: l, Mode: m, Seed: s})
			}
		}
	}
	return out
}

// Run runs every case of o, Parallel at a time, and returns the figures. The error is
// ErrInvalidOptions, the context's, or the first failed run's (the Results then still hold
// every run, and header notes name the failures).
func Run(ctx context.Context, o Options) (*Results, []CaseResult, error) {
	o, err := o.normalize()
	if err != nil {
		return nil, nil, err
	}
	cases := Cases(o)
	out := make([]CaseResult, len(cases))
	work := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range min(o.Parallel, len(cases)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				out[i] = RunCase(ctx, o, cases[i])
				if o.Progress != nil {
					mu.Lock()
					r := &out[i]
					status := "ok"
					if r.Err != nil {
						status = "FAILED: " + r.Err.Error()
					}
					fmt.Fprintf(o.Progress, "  loss %5.2f%% %-9s seed %d: %6.3f Gbit/s, retx/pkt %.4f, %d steps, %v real: %s\n",
						r.Loss*100, r.Mode, r.Seed, r.GoodputGbps, r.RetxPerPkt, r.Steps, r.Real.Round(time.Millisecond), status)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range cases {
		if ctx.Err() != nil {
			break
		}
		work <- i
	}
	close(work)
	wg.Wait()
	res := Collect(o, out)
	for i := range out {
		if out[i].Err != nil {
			return res, out, fmt.Errorf("loss %g%% %s seed %d: %w", out[i].Loss*100, out[i].Mode, out[i].Seed, out[i].Err)
		}
	}
	return res, out, ctx.Err()
}
