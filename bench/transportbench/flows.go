package transportbench

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/simlink"
)

// FlowSpec is one run of a Fabric scenario: Senders QPs pipelining Writes into one
// receiver through one bottleneck.
type FlowSpec struct {
	Senders int
	RTT     time.Duration // base round trip: two one-way latencies, no queueing
	Loss    float64       // random loss of every path, both directions
	Mode    string        // ModeSelective or ModeGoBackN
	Seed    uint64

	Bandwidth   int64 // the bottleneck's, bit/s
	QueueBytes  int   // the bottleneck's queue limit
	MaxPayload  int
	MsgSize     int
	Outstanding int // Writes each sender keeps posted
	Window      int // transport.Config.Window of every engine

	// Flow i starts posting at i*Stagger after the connections are up. The measured
	// window starts Warmup after the last start and lasts Measure. Fairness windows of
	// Sample each are taken from the last start to the end.
	Stagger, Warmup, Measure, Sample time.Duration

	// Engine, if not nil, adjusts every engine's configuration (the benchmark's overrides)
	// before Window and the mode are set.
	Engine func(*transport.Config)
	// MaxReal bounds the run's real time (0: one minute).
	MaxReal time.Duration
}

// FlowResult is what a FlowSpec run measured. Figures are over the measured window unless
// said otherwise.
type FlowResult struct {
	Spec FlowSpec
	// GoodputGbps is the bytes of Writes completed by all senders in the window × 8 /
	// window; FlowGbps the same per sender, from the new payload bytes its peer QP accepted
	// (finer-grained than whole Writes).
	GoodputGbps float64
	FlowGbps    []float64
	// Jain is Jain's fairness index of FlowGbps. JainWindows is the index of every
	// Sample-long window from the last start (per-flow bytes accepted by the receiver);
	// ConvergeRTTs the start of the first window from which every later one is >=
	// JainConverged, in base RTTs after the last start, or -1 if the last one is below.
	Jain         float64
	JainWindows  []float64
	ConvergeRTTs float64
	// Queueing delay at the bottleneck of the datagrams it accepted in the window.
	QueueP50, QueueP99, QueueMax time.Duration
	// Drops is the bottleneck's tail drops in the window, DropsTotal since the first start.
	Drops, DropsTotal uint64
	// Timeouts, Retransmits and TxPackets sum the senders' QP counters in the window;
	// TimeoutsRun sums the timeouts since the first start, MaxTimeoutsRun the most one
	// QP had.
	Timeouts, Retransmits, TxPackets uint64
	// Duplicates counts data packets the receivers got more than once in the window:
	// retransmissions that were not needed.
	Duplicates                  uint64
	TimeoutsRun, MaxTimeoutsRun uint64
	// TargetMean is the mean of the senders' controllers' Stats().TargetDelay, sampled at
	// each Sample boundary in the window (0 if the controller reports none); SRTTMean the
	// mean of the QPs' SRTT sampled the same way.
	TargetMean, SRTTMean time.Duration
	Steps                uint64
	Real                 time.Duration
	Err                  error
}

// JainConverged is the Jain index the fairness scenario waits for.
const JainConverged = 0.95

// Jain returns Jain's fairness index of x: (Σx)² / (n Σx²), 1 for equal shares, 1/n when one
// takes everything; 0 for an empty or all-zero x.
func Jain(x []float64) float64 {
	var s, s2 float64
	for _, v := range x {
		s += v
		s2 += v * v
	}
	if s2 == 0 {
		return 0
	}
	return s * s / (float64(len(x)) * s2)
}

// flowSnap is the counters RunFlows takes at both ends of the measured window.
type flowSnap struct {
	t          int64
	done       []uint64 // completed Write bytes per sender
	rx         []uint64 // payload bytes accepted per receiver QP
	dups       uint64   // data packets the receiver QPs got more than once
	tx         []transport.QPStats
	bottleneck simlink.BottleneckStats
}

func (f *Fabric) snap() flowSnap {
	s := flowSnap{t: f.Clock.Now(), bottleneck: f.Bottleneck.Stats()}
	for i := range f.Tx {
		s.done = append(s.done, f.TxSinks[i].Bytes[transport.OpWrite])
		rs := f.Rx[i].Stats()
		s.rx = append(s.rx, rs.RxBytes)
		s.dups += rs.Duplicates
		s.tx = append(s.tx, f.Tx[i].Stats())
	}
	return s
}

// RunFlows runs one FlowSpec.
func RunFlows(ctx context.Context, s FlowSpec) (res FlowResult) {
	realStart := time.Now()
	res.Spec, res.ConvergeRTTs = s, -1
	defer func() { res.Real = time.Since(realStart) }()
	if s.MaxReal <= 0 {
		s.MaxReal = time.Minute
	}
	slot := (s.MsgSize + 63) &^ 63
	f, err := NewFabric(FabricConfig{
		Senders: s.Senders, Seed: s.Seed, MaxPayload: s.MaxPayload,
		Latency: s.RTT / 2, Loss: s.Loss, Bandwidth: s.Bandwidth, QueueBytes: s.QueueBytes,
		SendDepth: s.Outstanding, MemPerSender: slot * s.Outstanding,
		Engine: func(c *transport.Config) {
			if s.Engine != nil {
				s.Engine(c)
			}
			c.Window = s.Window
			c.GoBackN = s.Mode == ModeGoBackN
		},
	})
	if err != nil {
		res.Err = err
		return res
	}
	defer f.Close()
	src := make([]byte, s.MsgSize)
	for i := range src {
		src[i] = byte(i*7 + i>>8)
	}
	n := s.Senders
	posted := make([]uint64, n)
	wr := transport.WorkRequest{Kind: transport.OpWrite, NSGE: 1, RemoteToken: RegionToken}
	wr.SGL[0] = src
	t0 := f.Clock.Now()
	lastStart := t0 + int64(n-1)*int64(s.Stagger)
	mStart := lastStart + int64(s.Warmup)
	end := mStart + int64(s.Measure)
	nextSample := lastStart
	var prevRx []uint64
	var s0 flowSnap
	var haveS0 bool
	var tgtSum, srttSum float64
	var tgtN int
	bps := float64(s.Bandwidth) / 8
	budget := uint64(100*bps*float64(end-t0)/1e9/float64(max(s.MaxPayload-64, 1))) + 1_000_000
	steps0 := f.Steps
	for {
		now := f.Clock.Now()
		// Events due now: starts and posting, samples, the window's first snapshot.
		limit := end
		for i := range n {
			start := t0 + int64(i)*int64(s.Stagger)
			if now < start {
				limit = min(limit, start)
				continue
			}
			sk := f.TxSinks[i]
			if sk.Failed > 0 {
				res.Err = fmt.Errorf("sender %d: %w: %+v", i, errFlowFailed, sk.First)
				break
			}
			for posted[i]-sk.N[transport.OpWrite] < uint64(s.Outstanding) {
				wr.RemoteAddr = RegionBase + uint64(i*f.MemPerSender) + uint64(slot)*(posted[i]%uint64(s.Outstanding))
				wr.Context = posted[i]
				if err := f.Tx[i].PostSend(&wr); err != nil {
					res.Err = fmt.Errorf("sender %d: post write %d: %w", i, posted[i], err)
					break
				}
				posted[i]++
			}
		}
		if res.Err != nil {
			break
		}
		if now >= nextSample && nextSample <= end {
			rx := make([]uint64, n)
			for i := range rx {
				rx[i] = f.Rx[i].Stats().RxBytes
			}
			if prevRx != nil {
				d := make([]float64, n)
				for i := range d {
					d[i] = float64(rx[i] - prevRx[i])
				}
				res.JainWindows = append(res.JainWindows, Jain(d))
			}
			prevRx = rx
			if nextSample >= mStart {
				for i := range n {
					if cc := f.CC[i]; cc != nil {
						tgtSum += float64(cc.Stats().TargetDelay)
					}
					srttSum += float64(f.Tx[i].Stats().SRTT)
					tgtN++
				}
			}
			nextSample += int64(s.Sample)
		}
		if nextSample <= end {
			limit = min(limit, nextSample)
		}
		if !haveS0 {
			if now >= mStart {
				s0, haveS0 = f.snap(), true
			} else {
				limit = min(limit, mStart)
			}
		}
		if now >= end {
			break
		}
		if f.Steps-steps0 > budget {
			res.Err = fmt.Errorf("step budget of %d exhausted at virtual time %v", budget, time.Duration(now-t0))
			break
		}
		if f.Steps&4095 == 0 {
			if ctx.Err() != nil {
				res.Err = ctx.Err()
				break
			}
			if time.Since(realStart) > s.MaxReal {
				res.Err = fmt.Errorf("real-time limit %v reached at virtual time %v", s.MaxReal, time.Duration(now-t0))
				break
			}
		}
		if !f.Step(limit) && f.Clock.Now() < limit {
			res.Err = fmt.Errorf("%w at virtual time %v", ErrStalled, time.Duration(now-t0))
			break
		}
	}
	res.Steps = f.Steps - steps0
	if !haveS0 {
		return res
	}
	s1 := f.snap()
	win := s.Measure.Seconds()
	var done uint64
	res.Duplicates = s1.dups - s0.dups
	res.FlowGbps = make([]float64, n)
	for i := range n {
		done += s1.done[i] - s0.done[i]
		res.FlowGbps[i] = float64(s1.rx[i]-s0.rx[i]) * 8 / win / 1e9
		a, b := &s0.tx[i], &s1.tx[i]
		res.Timeouts += b.Timeouts - a.Timeouts
		res.Retransmits += b.Retransmits - a.Retransmits
		res.TxPackets += b.TxPackets - a.TxPackets
		res.TimeoutsRun += b.Timeouts
		res.MaxTimeoutsRun = max(res.MaxTimeoutsRun, b.Timeouts)
	}
	res.GoodputGbps = float64(done) * 8 / win / 1e9
	res.Jain = Jain(res.FlowGbps)
	for k := len(res.JainWindows) - 1; k >= 0 && res.JainWindows[k] >= JainConverged; k-- {
		res.ConvergeRTTs = float64(k) * float64(s.Sample) / float64(s.RTT)
	}
	h := s1.bottleneck.Delay.Sub(&s0.bottleneck.Delay)
	res.QueueP50, res.QueueP99, res.QueueMax = h.Quantile(0.5), h.Quantile(0.99), h.Max()
	res.Drops = s1.bottleneck.Dropped - s0.bottleneck.Dropped
	res.DropsTotal = s1.bottleneck.Dropped
	if tgtN > 0 {
		res.TargetMean = time.Duration(tgtSum / float64(tgtN))
		res.SRTTMean = time.Duration(srttSum / float64(tgtN))
	}
	return res
}

// bdpBytes returns the bandwidth-delay product of bw bit/s and rtt.
func bdpBytes(bw int64, rtt time.Duration) int {
	return int(math.Ceil(float64(bw) / 8 * rtt.Seconds()))
}

// WindowFor returns the transport.Config.Window a path of bw bit/s and rtt needs: the
// next power of two of at least four times its bandwidth-delay product in packets of
// maxPayload bytes, at least 1024 and at most 65536. The window bounds the range from the
// oldest unacknowledged PSN, which a hole holds open for two to three round trips under
// loss; with twice the BDP (2048 at 1 ms) the sender stalled on the range at 1% loss, and
// when the hole was repaired sent the freed range at once, overflowing the bottleneck.
func WindowFor(bw int64, rtt time.Duration, maxPayload int) int {
	need := 4 * bdpBytes(bw, rtt) / max(maxPayload, 1)
	w := 1024
	for w < need && w < 1<<16 {
		w *= 2
	}
	return w
}

// QueueFor returns the bottleneck queue of the scenarios: one bandwidth-delay product,
// at least 64 KiB.
func QueueFor(bw int64, rtt time.Duration) int { return max(bdpBytes(bw, rtt), 64<<10) }

// OutstandingFor returns how many Writes of size bytes a sender keeps posted so that they
// cover four bandwidth-delay products: at least 16, at most 1024. Writes complete in
// posting order, so one whose packet was lost holds back the completions after it until
// its retransmission is acknowledged, about two round trips later; at 1% loss a third of
// 64 KiB Writes have a hole, and with only two round trips of Writes posted the sender ran
// out of work (0.65 of lossless at 10 ms), as a TCP receive window must cover recovery.
func OutstandingFor(bw int64, rtt time.Duration, size int) int {
	return min(max(16, (4*bdpBytes(bw, rtt)+size-1)/max(size, 1)), 1024)
}
