//go:build linux

package ndkbench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/ndk"
	"github.com/xdpndk/xdpndk/xdp"
)

// The scale figures (Options.Scale QP pairs on one adapter pair, inline progress): the
// 64-byte Write message rate of one QP (QP 0, Options.Outstanding outstanding, as the
// msgrate figure) and over all of them (Options.ScaleOutstanding outstanding on each),
// measured on the same adapters with the same QPs connected, in alternating order; then
// the process's CPU while the pairs sit idle. Both sides use one CQ for all their QPs, so
// the loops' work follows the completions, not the number of QPs.

// scaleSide is one host's QPs of the scale pair beyond QP 0 (the ndkPair's), and the
// connections of all.
type scaleSide struct {
	qps   []*ndk.QP
	conns []*ndk.Connector
}

// scalePair is an ndkPair (QP 0) with n-1 more connected QP pairs on the same adapters,
// PD, CQs and memory.
type scalePair struct {
	*ndkPair
	n    int
	A, B scaleSide // QPs 1..n-1
}

// qpsA returns A's QPs, QP 0 first.
func (p *scalePair) qpsA() []*ndk.QP {
	return append([]*ndk.QP{p.ndkPair.A.qp}, p.A.qps...)
}

// openScale opens an inline adapter on each host (queue 0, as openNDK) that holds n QPs,
// and connects n QP pairs between them. A's QP 0 has room for outstanding requests, the
// others for perQP.
func openScale(ctx context.Context, bed *testbed.Bed, n, outstanding, perQP int) (sp *scalePair, err error) {
	p := &ndkPair{mode: ModeInline, inline: true}
	sp = &scalePair{ndkPair: p, n: n}
	defer func() {
		if err != nil {
			sp.close()
			sp = nil
		}
	}()
	opts := ndk.DefaultOptions()
	opts.MaxQPs = n
	cqDepth := min(outstanding+n*perQP+1024, 1<<20)
	for _, s := range []struct {
		h    *testbed.Host
		side *ndkSide
	}{{bed.A, &p.A}, {bed.B, &p.B}} {
		if s.side.a, err = openAdapter(s.h, []int{0}, xdp.SteerExternal, opts); err != nil {
			return sp, err
		}
		side := s.side
		if side.pd, err = side.a.NewPD(); err != nil {
			return sp, fmt.Errorf("new PD: %w", err)
		}
		if side.cq, err = side.a.NewCQ(cqDepth, nil); err != nil {
			return sp, fmt.Errorf("new CQ: %w", err)
		}
		if side.small, err = side.a.Alloc(4096, 4096); err != nil {
			return sp, fmt.Errorf("alloc: %w", err)
		}
		if side.smallMR, err = side.pd.RegisterMR(side.small, ndk.MRAllowLocalWrite); err != nil {
			return sp, fmt.Errorf("register: %w", err)
		}
	}
	b := &p.B
	if b.target, err = b.a.Alloc(targetSize, 4096); err != nil {
		return sp, fmt.Errorf("alloc target: %w", err)
	}
	if b.targetMR, err = b.pd.RegisterMR(b.target, ndk.MRAllowRemoteRead|ndk.MRAllowRemoteWrite); err != nil {
		return sp, fmt.Errorf("register target: %w", err)
	}
	newQP := func(s *ndkSide, depth int) (*ndk.QP, error) {
		return s.pd.NewQP(ndk.QPConfig{ReceiveCQ: s.cq, InitiatorCQ: s.cq, ReceiveQueueDepth: 1, InitiatorQueueDepth: depth})
	}
	for i := range n {
		depth := perQP + 16
		if i == 0 {
			depth = max(outstanding, perQP) + 16
		}
		qa, err := newQP(&p.A, depth)
		if err != nil {
			return sp, fmt.Errorf("new QP %d on A: %w", i, err)
		}
		qb, err := newQP(&p.B, 16)
		if err != nil {
			_ = qa.Close(context.Background())
			return sp, fmt.Errorf("new QP %d on B: %w", i, err)
		}
		if i == 0 {
			p.A.qp, p.B.qp = qa, qb
		} else {
			sp.A.qps, sp.B.qps = append(sp.A.qps, qa), append(sp.B.qps, qb)
		}
	}
	if err := sp.connect(ctx, netip.AddrPortFrom(bed.B.Addr, ServicePort)); err != nil {
		return sp, err
	}
	return sp, nil
}

// connect connects A's QP i to B's QP i, one pair after the other, while a goroutine polls
// B's engine (inline progress).
func (sp *scalePair) connect(ctx context.Context, dest netip.AddrPort) error {
	p := sp.ndkPair
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	qpsB := append([]*ndk.QP{p.B.qp}, sp.B.qps...)
	next := make(chan *ndk.QP, 1) // the QP of B that takes the next request
	type acceptance struct {
		c   *ndk.Connector
		err error
	}
	accepted := make(chan acceptance, 1)
	ln, err := p.B.a.NewListener(func(c *ndk.Connector) {
		qp := <-next // sent before A connects
		go func() { accepted <- acceptance{c, c.Accept(ctx, qp, 16, 16, nil, nil)} }()
	})
	if err != nil {
		return fmt.Errorf("new listener: %w", err)
	}
	p.ln = ln
	if err := ln.Listen(netip.AddrPortFrom(netip.Addr{}, dest.Port())); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	var stop atomic.Bool
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for !stop.Load() {
			if !p.B.a.Poll() {
				runtime.Gosched()
			}
		}
	}()
	defer func() { stop.Store(true); <-polled }()
	for i, qa := range sp.qpsA() {
		next <- qpsB[i]
		conn, err := p.A.a.NewConnector()
		if err != nil {
			return fmt.Errorf("new connector %d: %w", i, err)
		}
		sp.A.conns = append(sp.A.conns, conn)
		if err := conn.Connect(ctx, qa, dest, 16, 16, nil); err != nil {
			return fmt.Errorf("connect %d: %w", i, err)
		}
		if err := conn.CompleteConnect(ctx, nil); err != nil {
			return fmt.Errorf("complete connect %d: %w", i, err)
		}
		select {
		case a := <-accepted:
			sp.B.conns = append(sp.B.conns, a.c)
			if a.err != nil {
				return fmt.Errorf("accept %d: %w", i, a.err)
			}
		case <-ctx.Done():
			return fmt.Errorf("accept %d: %w", i, ctx.Err())
		}
	}
	return nil
}

// close closes the pair's adapters, which closes their QPs, connections and memory.
func (sp *scalePair) close() { sp.ndkPair.close() }

// spreadQP is one of A's QPs in a spread measurement: the request context of its Writes.
type spreadQP struct {
	qp       *ndk.QP
	off      uint64 // where its Writes land in B's target
	out      int    // outstanding
	done, d0 uint64 // completed; at the window's start
}

// spreadResult is a spread measurement's window: the total and each QP's least and most.
type spreadResult struct {
	rateResult
	minOps, maxOps uint64 // the fewest and most Writes one QP completed in the window
	idleQPs        int    // QPs that completed none in the window
}

// spread keeps perQP 64-byte Writes outstanding on every QP of qps (reposted on the QP that
// completed one), for o.Warmup and the measured window o.Duration, B's loop polling its
// CQ, and returns the window's figures.
func (sp *scalePair) spread(ctx context.Context, o Options, qps []*ndk.QP, perQP int) (spreadResult, error) {
	p := sp.ndkPair
	a, b := &p.A, &p.B
	var out spreadResult
	bound := o
	bound.Bound = o.Warmup + o.Duration + 5*time.Second
	err := p.measurement(ctx, bound, false, func(stop *atomic.Bool, deadline int64) error {
		st := make([]spreadQP, len(qps))
		slots := uint64(len(b.target) / MsgSize)
		for i, q := range qps {
			st[i] = spreadQP{qp: q, off: uint64(i) % slots * MsgSize}
		}
		var sgl [1]ndk.SGE
		sgl[0] = a.smallMR.SGE(a.small[2048 : 2048+MsgSize])
		raddr, rtok := b.targetMR.VA(), b.targetMR.RemoteToken()
		post := func(s *spreadQP) error {
			err := s.qp.Write(s, sgl[:], raddr+s.off, rtok, 0)
			if err == nil {
				s.out++
			}
			return err
		}
		for i := range st {
			for st[i].out < perQP {
				if err := post(&st[i]); err != nil {
					return fmt.Errorf("post write on QP %d: %w", i, err)
				}
			}
		}
		var res [64]ndk.Result
		start := report.Now()
		warmEnd := start + int64(o.Warmup)
		end := warmEnd + int64(o.Duration)
		var t0, objs0, total, done0, cqes, cqes0 uint64
		var cpu0 time.Duration
		measuring, posting := false, true
		outstanding := len(st) * perQP
		var t int64
		for it := 0; outstanding > 0; it++ {
			if it%clockEvery == 0 { // as the message-rate loop: the clock is the loop's cost
				t = report.Now()
			}
			if !measuring && posting && t >= warmEnd {
				measuring = true
				t0, done0, cqes0, objs0 = uint64(t), total, cqes, report.HeapObjects()
				cpu0 = processCPU()
				for i := range st {
					st[i].d0 = st[i].done
				}
			}
			if posting && (t >= end || stop.Load() || t > deadline) {
				posting = false
				if measuring && t >= end {
					out.allocs = report.HeapObjects() - objs0
					out.cpu = processCPU() - cpu0
					out.ops, out.cqes = total-done0, cqes-cqes0
					out.bytes = out.ops * MsgSize
					out.secs = float64(t-int64(t0)) / 1e9
					out.minOps = ^uint64(0)
					for i := range st {
						w := st[i].done - st[i].d0
						out.minOps, out.maxOps = min(out.minOps, w), max(out.maxOps, w)
						if w == 0 {
							out.idleQPs++
						}
					}
				}
			}
			if !posting && t > deadline+int64(2*time.Second) {
				return fmt.Errorf("draining: %d Writes still outstanding", outstanding)
			}
			n := a.cq.GetResults(res[:])
			cqes += uint64(n)
			for j := range res[:n] {
				r := &res[j]
				if r.Status != ndk.StatusSuccess {
					return resultError("Write", r)
				}
				s, ok := r.RequestContext.(*spreadQP)
				if !ok {
					return fmt.Errorf("a completion of %v", r.RequestContext)
				}
				s.out--
				s.done++
				total++
				outstanding--
				if posting {
					if err := post(s); err != nil {
						return fmt.Errorf("post write: %w", err)
					}
					outstanding++
				}
			}
			if n == 0 {
				p.idle()
			}
		}
		if out.secs == 0 {
			return errors.New("the measured window did not complete")
		}
		return nil
	})
	return out, err
}

// scale measures the scale figures (see the top of this file) on a fresh adapter pair.
func (r *runner) scale(ctx context.Context, rep int) (err error) {
	n := r.o.Scale
	sys := SystemNDK(ModeInline)
	t0 := time.Now()
	sp, err := openScale(ctx, r.bed, n, r.o.Outstanding, r.o.ScaleOutstanding)
	if err != nil {
		return err
	}
	defer sp.close()
	p := sp.ndkPair
	defer func() {
		if err != nil && ctx.Err() == nil {
			err = fmt.Errorf("%w; QP 0 counters:%s", err, p.diag())
		}
	}()
	r.progress("rep %d %-15s %d QP pairs connected in %v", rep+1, sys, n, time.Since(t0).Round(time.Millisecond))
	one := func() error {
		src := p.A.small[2048 : 2048+MsgSize]
		var m rateResult
		var err error
		labeled(ctx, "scale-one", func() { m, err = p.pipeline(ctx, r.o, src, p.A.smallMR, MsgSize, r.o.Outstanding, 1) })
		if err != nil {
			return fmt.Errorf("one QP's rate: %w", err)
		}
		ref := func(metric string) Ref { return Ref{BenchScale, sys, OpWriteOneQP, MsgSize, metric} }
		r.col.add(ref(MetricOps), UnitPerSec, rep, float64(m.ops)/m.secs)
		r.col.add(ref(MetricAllocs), UnitObjects, rep, float64(m.allocs)/float64(max(m.ops, 1)))
		r.addCPU(ref, rep, m)
		r.progress("rep %d %-15s %-12s rate %.3f Mop/s on QP 0 of %d, %d outstanding%s", rep+1, sys, OpWriteOneQP, float64(m.ops)/m.secs/1e6, n, r.o.Outstanding, r.counters(p))
		return nil
	}
	all := func() error {
		var m spreadResult
		var err error
		labeled(ctx, "scale-all", func() { m, err = sp.spread(ctx, r.o, sp.qpsA(), r.o.ScaleOutstanding) })
		if err != nil {
			return fmt.Errorf("the rate over %d QPs: %w", n, err)
		}
		ref := func(metric string) Ref { return Ref{BenchScale, sys, OpWriteAllQPs, MsgSize, metric} }
		r.col.add(ref(MetricOps), UnitPerSec, rep, float64(m.ops)/m.secs)
		r.col.add(ref(MetricQPMin), UnitPerSec, rep, float64(m.minOps)/m.secs)
		r.col.add(ref(MetricQPMax), UnitPerSec, rep, float64(m.maxOps)/m.secs)
		r.col.add(ref(MetricAllocs), UnitObjects, rep, float64(m.allocs)/float64(max(m.ops, 1)))
		r.addCPU(ref, rep, m.rateResult)
		r.progress("rep %d %-15s %-12s rate %.3f Mop/s over %d QPs, %d outstanding each; per QP min %.0f max %.0f op/s (%d QPs completed none)%s",
			rep+1, sys, OpWriteAllQPs, float64(m.ops)/m.secs/1e6, n, r.o.ScaleOutstanding, float64(m.minOps)/m.secs, float64(m.maxOps)/m.secs, m.idleQPs, r.counters(p))
		return nil
	}
	order := []func() error{one, all}
	if rep%2 == 1 {
		order = []func() error{all, one}
	}
	for _, f := range order {
		if err := f(); err != nil {
			return err
		}
	}
	var cpu, wall time.Duration
	labeled(ctx, "scale-idle", func() { cpu, wall, err = p.idleCPU(ctx, r.o.ScaleIdle) })
	if err != nil {
		return fmt.Errorf("idle with %d QPs: %w", n, err)
	}
	ref := func(m string) Ref { return Ref{BenchIdle, sys, OpIdleWaitScale, 0, m} }
	r.col.add(ref(MetricCPU), UnitSeconds, rep, cpu.Seconds())
	r.col.add(ref(MetricWall), UnitSeconds, rep, wall.Seconds())
	r.col.add(ref(MetricCore), UnitCores, rep, cpu.Seconds()/wall.Seconds())
	r.progress("rep %d %-15s idle %v with %d QP pairs, B in CQ.Wait: process CPU %v, %.3f%% of a core", rep+1, sys, wall.Round(time.Millisecond), n, cpu, 100*cpu.Seconds()/wall.Seconds())
	return nil
}
