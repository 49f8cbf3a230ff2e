//go:build linux

package ndkbench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/internal/plumb"
	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/ndk"
	"github.com/xdpndk/xdpndk/xdp"
)

// The engines figure (Options.Engines): 64-byte Writes over several QPs between adapters of
// n engines each, both serving both queues of the bed, compared by the CPU they cost per
// message delivered. Both hosts share the machine's two CPUs, so what two engines buy shows
// as cost, not as rate: the goal is that splitting an adapter's QPs over two engines, each
// with its own queue, costs at most 10% more CPU per message than one engine serving both.

// engQP is one QP of the engines figure, with its CQ and memory.
type engQP struct {
	qp     *ndk.QP
	cq     *ndk.CQ
	src    []byte // A: the Writes' sources, MsgSize bytes each
	mr     *ndk.MR
	region *ndk.MR // B: where the peer QP writes
	peer   *ndk.MR // A: the peer QP's region
	sgls   [][1]ndk.SGE
	posted uint64
	done   uint64
}

// engSide is one host of the engines figure.
type engSide struct {
	a   *ndk.Adapter
	pd  *ndk.PD
	qps []*engQP
}

// engPair is the two hosts of the engines figure, with n engines each.
type engPair struct {
	engines int
	A, B    engSide
	ln      *ndk.Listener
}

// openEngines opens an adapter of n engines (inline progress, every queue served) on each
// host and connects qps QP pairs, each QP with a CQ of its own and memory of its own (so
// that nothing but the adapter is shared between QPs of different engines).
func openEngines(bed *testbed.Bed, n, qps, outstanding int) (p *engPair, err error) {
	p = &engPair{engines: n}
	defer func() {
		if err != nil {
			p.close()
			p = nil
		}
	}()
	opts := ndk.DefaultOptions()
	opts.Engines = n
	for _, s := range []struct {
		h    *testbed.Host
		side *engSide
	}{{bed.A, &p.A}, {bed.B, &p.B}} {
		if s.side.a, err = openAdapter(s.h, nil, xdp.SteerServeAll, opts); err != nil {
			return p, err
		}
		if s.side.pd, err = s.side.a.NewPD(); err != nil {
			return p, err
		}
		for range qps {
			q := &engQP{}
			if q.cq, err = s.side.a.NewCQ(4096, nil); err != nil {
				return p, err
			}
			if q.qp, err = s.side.pd.NewQP(ndk.QPConfig{ReceiveCQ: q.cq, InitiatorCQ: q.cq, InitiatorQueueDepth: 1024}); err != nil {
				return p, err
			}
			if s.side == &p.A {
				if q.src, err = s.side.a.Alloc(MsgSize*outstanding, 4096); err != nil {
					return p, err
				}
				if q.mr, err = s.side.pd.RegisterMR(q.src, ndk.MRAllowLocalWrite); err != nil {
					return p, err
				}
				q.sgls = make([][1]ndk.SGE, outstanding)
				for i := range q.sgls {
					q.sgls[i][0] = q.mr.SGE(q.src[i*MsgSize : (i+1)*MsgSize])
				}
			} else {
				buf, err := s.side.a.Alloc(MsgSize*outstanding, 4096)
				if err != nil {
					return p, err
				}
				if q.region, err = s.side.pd.RegisterMR(buf, ndk.MRAllowRemoteWrite); err != nil {
					return p, err
				}
			}
			s.side.qps = append(s.side.qps, q)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	next := make(chan *engQP, 1)
	accepted := make(chan error, 1)
	if p.ln, err = p.B.a.NewListener(func(c *ndk.Connector) {
		q := <-next
		go func() { accepted <- c.Accept(ctx, q.qp, 4, 4, nil, nil) }()
	}); err != nil {
		return p, err
	}
	if err := p.ln.Listen(netip.AddrPortFrom(netip.Addr{}, ServicePort)); err != nil {
		return p, err
	}
	for i, qa := range p.A.qps {
		next <- p.B.qps[i]
		c, err := p.A.a.NewConnector()
		if err != nil {
			return p, err
		}
		if err := c.Connect(ctx, qa.qp, netip.AddrPortFrom(bed.B.Addr, ServicePort), 4, 4, nil); err != nil {
			return p, fmt.Errorf("connect %d: %w", i, err)
		}
		if err := c.CompleteConnect(ctx, nil); err != nil {
			return p, fmt.Errorf("complete connect %d: %w", i, err)
		}
		if err := <-accepted; err != nil {
			return p, fmt.Errorf("accept %d: %w", i, err)
		}
	}
	// Each loop drives the QPs of one engine, and each QP pair has both ends on engines of
	// the same index (veth, and the placement at Accept): say so, or the figure is not the
	// one described.
	for i := range p.A.qps {
		ea, eb := plumb.QP(p.A.qps[i].qp).Engine().Index(), plumb.QP(p.B.qps[i].qp).Engine().Index()
		if ea != eb {
			return p, fmt.Errorf("QP pair %d on engines %d and %d", i, ea, eb)
		}
	}
	return p, nil
}

func (p *engPair) close() { closeAdapters(p.ln, p.A.a, p.B.a) }

// loopsOf splits a side's QPs into the loops that drive them: one loop for all of them
// (perEngine false), or one per engine with the QPs of that engine.
func (s *engSide) loopsOf(perEngine bool, engines int) [][]*engQP {
	if !perEngine {
		return [][]*engQP{s.qps}
	}
	out := make([][]*engQP, engines)
	for _, q := range s.qps {
		i := plumb.QP(q.qp).Engine().Index()
		out[i] = append(out[i], q)
	}
	return out
}

// yield lets another loop run: a loop pass that found nothing to do gives its P to another
// goroutine (runtime.Gosched: the loops are locked to their threads, and more of them than
// Ps wait for one) and its thread's CPU to another thread (sched_yield: should two loops
// share a CPU, because other work on the machine took one, or the process was given fewer
// than there are loops), instead of spinning out a time slice while the loop it waits for
// cannot run. With nobody waiting, both return at once.
func yield() {
	runtime.Gosched()
	_, _, _ = unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
}

// engResult is the engines figure's window.
type engResult struct {
	msgs      uint64
	secs      float64
	cpu       time.Duration
	forwarded uint64
}

// rate runs the Writes for o.Warmup and then o.Duration: A's loops keep outstanding
// Writes posted on each of their QPs (every signalEvery-th signaled), B's loops poll their
// QPs' CQs (which polls B's engines). It returns the messages delivered in the window and
// the process's CPU over it.
func (p *engPair) rate(ctx context.Context, o Options, perEngine bool, outstanding, signalEvery int) (engResult, error) {
	var out engResult
	var stop, measuring atomic.Bool
	var msgs atomic.Uint64
	start := report.Now()
	deadline := start + int64(o.Warmup+o.Duration+5*time.Second)
	var wg sync.WaitGroup
	var errs []error
	var mu sync.Mutex
	run := func(fn func() error) {
		wg.Add(1)
		done := report.Worker(true, fn)
		go func() {
			defer wg.Done()
			if err := <-done; err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				stop.Store(true)
			}
		}()
	}
	// B completes nothing (A's Writes are one-sided): its loops only drive its engines. One
	// loop for all polls the adapter (which reports whether its engines did anything); one
	// loop per engine polls the CQs of that engine's QPs.
	for _, qs := range p.B.loopsOf(perEngine, p.engines) {
		run(func() error {
			var res [16]ndk.Result
			for it := 0; ; it++ {
				busy := true
				if perEngine {
					for _, q := range qs {
						if n := q.cq.GetResults(res[:]); n > 0 {
							return fmt.Errorf("host B's CQ has %d results: %+v", n, res[0])
						}
					}
				} else {
					busy = p.B.a.Poll()
				}
				if it&1023 == 0 && (stop.Load() || report.Now() > deadline) {
					return nil
				}
				if !busy {
					yield()
				}
			}
		})
	}
	for _, qs := range p.A.loopsOf(perEngine, p.engines) {
		run(func() error {
			var res [64]ndk.Result
			for !stop.Load() && report.Now() < deadline {
				busy := false
				for _, q := range qs {
					posted := q.posted
					for q.posted-q.done < uint64(outstanding) {
						flags := ndk.OpSilentSuccess
						if (q.posted+1)%uint64(signalEvery) == 0 {
							flags = 0
						}
						k := q.posted % uint64(outstanding)
						if err := q.qp.Write(ctxWrite, q.sgls[k][:], q.peer.VA()+k*MsgSize, q.peer.RemoteToken(), flags); err != nil {
							if ndk.StatusOf(err) == ndk.StatusInsufficientResources {
								break
							}
							return fmt.Errorf("post write: %w", err)
						}
						q.posted++
					}
					n := q.cq.GetResults(res[:])
					for j := range res[:n] {
						if res[j].Status != ndk.StatusSuccess {
							return resultError("Write", &res[j])
						}
					}
					q.done += uint64(n * signalEvery)
					if measuring.Load() {
						msgs.Add(uint64(n * signalEvery))
					}
					busy = busy || n > 0 || q.posted != posted
				}
				if !busy {
					yield()
				}
			}
			// Drain: nothing more is posted; what is outstanding completes (the last
			// posted Writes may be silent: their done count is rounded to the signaled).
			for end := report.Now() + int64(2*time.Second); report.Now() < end; {
				left := false
				for _, q := range qs {
					n := q.cq.GetResults(res[:])
					q.done += uint64(n * signalEvery)
					left = left || q.posted-q.done >= uint64(signalEvery)
				}
				if !left {
					return nil
				}
			}
			return errors.New("outstanding Writes did not complete within 2 s")
		})
	}
	// The window.
	warm := time.NewTimer(o.Warmup)
	select {
	case <-warm.C:
	case <-ctx.Done():
	}
	fwd0 := plumb.Group(p.A.a).Stats().Forwarded + plumb.Group(p.B.a).Stats().Forwarded
	cpu0, t0 := processCPU(), report.Now()
	measuring.Store(true)
	win := time.NewTimer(o.Duration)
	select {
	case <-win.C:
	case <-ctx.Done():
	}
	measuring.Store(false)
	out.msgs = msgs.Load()
	out.cpu, out.secs = processCPU()-cpu0, float64(report.Now()-t0)/1e9
	out.forwarded = plumb.Group(p.A.a).Stats().Forwarded + plumb.Group(p.B.a).Stats().Forwarded - fwd0
	stop.Store(true)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return out, err
	}
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	if out.msgs == 0 {
		return out, errors.New("no Write completed in the window")
	}
	return out, nil
}

// engines measures the engines figure for every count of o.Engines, in ascending order in
// even repetitions and descending in odd ones.
func (r *runner) engines(ctx context.Context, rep int) error {
	counts := append([]int(nil), r.o.Engines...)
	if rep%2 == 1 {
		for i, j := 0, len(counts)-1; i < j; i, j = i+1, j-1 {
			counts[i], counts[j] = counts[j], counts[i]
		}
	}
	perQP := max(r.o.Outstanding/r.o.EngineQPs, r.o.SignalEvery)
	for _, n := range counts {
		p, err := openEngines(r.bed, n, r.o.EngineQPs, perQP)
		if err != nil {
			return fmt.Errorf("%d engines: %w", n, err)
		}
		for i, q := range p.A.qps {
			q.peer = p.B.qps[i].region
		}
		sys := SystemEngines(n)
		r.res.Header.Modes[sys] = fmt.Sprintf("ndk.Open, progress=inline, Engines=%d, both queues served, %d QPs (a CQ and memory each), %d outstanding per QP, loops: %s",
			n, r.o.EngineQPs, perQP, r.o.EngineLoops)
		var m engResult
		labeled(ctx, fmt.Sprintf("engines-%d", n), func() {
			m, err = p.rate(ctx, r.o, r.o.EngineLoops == EngineLoopsPerEngine, perQP, r.o.SignalEvery)
		})
		if r.o.Counters {
			for i := range p.A.qps {
				qa, qb := plumb.QP(p.A.qps[i].qp).Stats(), plumb.QP(p.B.qps[i].qp).Stats()
				r.progress("  QP %d: A tx %d rx %d retx %d timeouts %d; B tx %d rx %d acks %d", i, qa.TxPackets, qa.RxPackets,
					qa.Retransmits, qa.Timeouts, qb.TxPackets, qb.RxPackets, qb.AcksSent)
			}
			r.progress("  A %+v\n  B %+v", plumb.Group(p.A.a).Stats(), plumb.Group(p.B.a).Stats())
		}
		p.close()
		if err != nil {
			return fmt.Errorf("%d engines: %w", n, err)
		}
		ref := func(metric string) Ref { return Ref{BenchEngines, sys, OpWriteSilent, MsgSize, metric} }
		r.col.add(ref(MetricOps), UnitPerSec, rep, float64(m.msgs)/m.secs)
		r.col.add(ref(MetricCPUOp), UnitCPUOp, rep, m.cpu.Seconds()*1e6/float64(m.msgs))
		r.col.add(ref(MetricCore), UnitCores, rep, m.cpu.Seconds()/m.secs)
		r.col.add(ref(MetricForwarded), UnitCount, rep, float64(m.forwarded))
		r.progress("rep %d %-22s %.3f M msg/s, CPU %.3f us/msg (%.2f cores), %d forwarded", rep+1, sys,
			float64(m.msgs)/m.secs/1e6, m.cpu.Seconds()*1e6/float64(m.msgs), m.cpu.Seconds()/m.secs, m.forwarded)
		runtime.GC() // the next count starts from the same heap
	}
	return nil
}
