//go:build linux

package pathbench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/internal/plumb"
	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/ndk"
	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/xdp"
)

// targetSize is B's Write target: 16 Write-sized pieces, Write k lands on piece k%16.
const targetSize = 16 * WriteSize

// ctxWrite is the request context of every Write (a small integer boxes without
// allocating).
const ctxWrite = 1

// flow is one of A's QPs and its CQ, and what the pump has posted and seen completed.
type flow struct {
	qp           *ndk.QP
	cq           *ndk.CQ
	posted, done uint64
}

// pair is an adapter on each host of a bed, with n connected QPs: A's (ProgressInline,
// driven by the pump's goroutine) write into B's target (ProgressAdaptive: B only
// acknowledges, on its own engine goroutine).
type pair struct {
	bed      *testbed.Bed
	a, b     *ndk.Adapter
	ln       *ndk.Listener
	srcMR    *ndk.MR
	src      []byte
	targetMR *ndk.MR
	flows    []*flow
}

// openPair opens the adapters on bed's hosts and connects n QPs from A to B.
func openPair(bed *testbed.Bed, n int, outstanding int) (p *pair, err error) {
	p = &pair{bed: bed}
	defer func() {
		if err != nil {
			p.close()
			p = nil
		}
	}()
	open := func(h *testbed.Host, prog ndk.Progress) (a *ndk.Adapter, err error) {
		cfg := xdp.Config{Interface: h.Ifname, Port: NDKPort, RingSize: 4096, Frames: 8192, HeapSize: 4 << 20,
			Logger: slog.New(slog.DiscardHandler)}
		opts := ndk.DefaultOptions()
		opts.Progress = prog
		err = h.Do(func() (err error) { a, err = ndk.Open(cfg, opts); return err })
		if err != nil {
			return nil, fmt.Errorf("open adapter on %s: %w", h.Ifname, err)
		}
		return a, nil
	}
	if p.a, err = open(bed.A, ndk.ProgressInline); err != nil {
		return p, err
	}
	if p.b, err = open(bed.B, ndk.ProgressAdaptive); err != nil {
		return p, err
	}
	apd, err := p.a.NewPD()
	if err != nil {
		return p, fmt.Errorf("host A: new PD: %w", err)
	}
	bpd, err := p.b.NewPD()
	if err != nil {
		return p, fmt.Errorf("host B: new PD: %w", err)
	}
	if p.src, err = p.a.Alloc(WriteSize, 4096); err != nil {
		return p, fmt.Errorf("host A: alloc: %w", err)
	}
	for i := range p.src {
		p.src[i] = byte(i * 7)
	}
	if p.srcMR, err = apd.RegisterMR(p.src, ndk.MRAllowLocalWrite); err != nil {
		return p, fmt.Errorf("host A: register: %w", err)
	}
	target, err := p.b.Alloc(targetSize, 4096)
	if err != nil {
		return p, fmt.Errorf("host B: alloc: %w", err)
	}
	if p.targetMR, err = bpd.RegisterMR(target, ndk.MRAllowRemoteWrite); err != nil {
		return p, fmt.Errorf("host B: register: %w", err)
	}
	bqps := make(chan *ndk.QP, n)
	for range n {
		qp, err := newQP(p.b, bpd, 16)
		if err != nil {
			return p, fmt.Errorf("host B: %w", err)
		}
		bqps <- qp
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	accepted := make(chan error, n)
	if p.ln, err = p.b.NewListener(func(c *ndk.Connector) {
		select {
		case qp := <-bqps:
			go func() { accepted <- c.Accept(ctx, qp, 0, 0, nil, nil) }()
		default:
			accepted <- errors.New("more connection requests than QPs")
		}
	}); err != nil {
		return p, fmt.Errorf("host B: new listener: %w", err)
	}
	if err := p.ln.Listen(netip.AddrPortFrom(netip.Addr{}, ServicePort)); err != nil {
		return p, fmt.Errorf("host B: listen: %w", err)
	}
	dest := netip.AddrPortFrom(bed.B.Addr, ServicePort)
	for i := range n {
		cq, err := p.a.NewCQ(2*outstanding+16, nil)
		if err != nil {
			return p, fmt.Errorf("host A: new CQ: %w", err)
		}
		qp, err := newQPWith(p.a, apd, cq, outstanding+8)
		if err != nil {
			return p, fmt.Errorf("host A: %w", err)
		}
		p.flows = append(p.flows, &flow{qp: qp, cq: cq})
		conn, err := p.a.NewConnector()
		if err != nil {
			return p, fmt.Errorf("host A: new connector: %w", err)
		}
		if err := conn.Connect(ctx, qp, dest, 0, 0, nil); err != nil {
			return p, fmt.Errorf("connect QP %d: %w", i+1, err)
		}
		if err := conn.CompleteConnect(ctx, nil); err != nil {
			return p, fmt.Errorf("complete connect of QP %d: %w", i+1, err)
		}
		select {
		case err := <-accepted:
			if err != nil {
				return p, fmt.Errorf("accept of QP %d: %w", i+1, err)
			}
		case <-ctx.Done():
			return p, fmt.Errorf("accept of QP %d: no answer within 10 s", i+1)
		}
	}
	return p, nil
}

// newQP makes a QP on pd with its own CQ for both queues.
func newQP(a *ndk.Adapter, pd *ndk.PD, depth int) (*ndk.QP, error) {
	cq, err := a.NewCQ(2*depth+16, nil)
	if err != nil {
		return nil, fmt.Errorf("new CQ: %w", err)
	}
	return newQPWith(a, pd, cq, depth)
}

// newQPWith makes a QP on pd whose completions go to cq.
func newQPWith(_ *ndk.Adapter, pd *ndk.PD, cq *ndk.CQ, depth int) (*ndk.QP, error) {
	qp, err := pd.NewQP(ndk.QPConfig{ReceiveCQ: cq, InitiatorCQ: cq, ReceiveQueueDepth: 16, InitiatorQueueDepth: depth})
	if err != nil {
		return nil, fmt.Errorf("new QP: %w", err)
	}
	return qp, nil
}

// close closes both adapters, which closes their devices and detaches their XDP programs.
func (p *pair) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if p.ln != nil {
		_ = p.ln.Close(ctx)
	}
	for _, a := range []*ndk.Adapter{p.a, p.b} {
		if a != nil {
			_ = a.Close(ctx)
		}
	}
}

// linkDrops returns the datagrams both adapters' links dropped on receipt so far (no
// buffer, a full RX ring, malformed).
func (p *pair) linkDrops() uint64 {
	return plumb.Link(p.a).Stats().RxDropped + plumb.Link(p.b).Stats().RxDropped
}

// modes describes what the two hosts run with, for the header.
func (p *pair) modes() string {
	dev := "?"
	if d := p.a.Device(); d != nil {
		dev = fmt.Sprintf("%v, queues served %d of %d", d.Mode(), len(d.Queues()), d.InterfaceQueues())
	}
	return "ndk.Open on each host; A ProgressInline, one goroutine locked to its thread posts the Writes and polls A's CQs; " +
		"B ProgressAdaptive (its engine goroutine acknowledges, no application thread); " + dev +
		fmt.Sprintf("; UMEM source zero-copy=%v", p.srcMR.InUMEM())
}

// sample is the state of the flows at one instant of a pump.
type sample struct {
	at    int64               // ns since the pump started
	bytes []uint64            // per flow: Write bytes completed
	stats []transport.QPStats // per flow: A's QP counters
}

// pump keeps o.Outstanding Writes posted on each of flows, flow i from starts[i] (since
// the pump's start) until total, sampling every o.Sample (and at total); then it waits
// (at most drainLimit) until every posted Write completed. It runs on its own goroutine
// locked to its thread, and returns the samples, or an error when a Write fails, the
// drain does not finish or ctx ends.
func (p *pair) pump(ctx context.Context, flows []*flow, starts []time.Duration, total time.Duration, o Options) ([]sample, error) {
	var stop atomic.Bool
	defer context.AfterFunc(ctx, func() { stop.Store(true) })()
	samples := make([]sample, 0, int(total/o.Sample)+2)
	err := <-report.Worker(true, func() error {
		rtok, va := p.targetMR.RemoteToken(), p.targetMR.VA()
		var sgl [1]ndk.SGE
		sgl[0] = p.srcMR.SGE(p.src)
		var res [64]ndk.Result
		take := func() error {
			for _, f := range flows {
				n := f.cq.GetResults(res[:])
				for j := range res[:n] {
					if res[j].Status != ndk.StatusSuccess {
						return fmt.Errorf("a Write completed with %v", res[j].Status)
					}
				}
				f.done += uint64(n)
			}
			return nil
		}
		record := func(at int64) {
			s := sample{at: at, bytes: make([]uint64, len(flows)), stats: make([]transport.QPStats, len(flows))}
			for i, f := range flows {
				s.bytes[i] = f.done * WriteSize
				s.stats[i] = plumb.QP(f.qp).Stats()
			}
			samples = append(samples, s)
		}
		t0 := report.Now()
		next := int64(0)
		for {
			t := report.Now() - t0
			if t >= int64(total) {
				record(t)
				break
			}
			if stop.Load() {
				return ctx.Err()
			}
			if t >= next {
				record(t)
				next += int64(o.Sample)
			}
			for i, f := range flows {
				if t < int64(starts[i]) {
					continue
				}
				for f.posted-f.done < uint64(o.Outstanding) {
					off := (f.posted % (targetSize / WriteSize)) * WriteSize
					if err := f.qp.Write(ctxWrite, sgl[:], va+off, rtok, 0); err != nil {
						if ndk.StatusOf(err) == ndk.StatusInsufficientResources {
							break
						}
						return fmt.Errorf("post Write: %w", err)
					}
					f.posted++
				}
			}
			if err := take(); err != nil {
				return err
			}
		}
		deadline := report.Now() + int64(drainLimit)
		for {
			pending := false
			for _, f := range flows {
				pending = pending || f.done < f.posted
			}
			if !pending {
				return nil
			}
			if stop.Load() {
				return ctx.Err()
			}
			if report.Now() > deadline {
				return fmt.Errorf("the outstanding Writes did not complete within %v after the window", drainLimit)
			}
			if err := take(); err != nil {
				return err
			}
		}
	})
	return samples, err
}

// drainLimit bounds the wait for the Writes outstanding when a pump's window ends.
const drainLimit = 15 * time.Second

// window returns the first sample at or after from and the last at or before to, ns since
// the pump's start, to < 0 meaning the pump's final sample (taken when its total time was
// up); ok is false when they do not span a positive time.
func window(s []sample, from, to int64) (a, b sample, ok bool) {
	ia, ib := -1, -1
	for i := range s {
		if ia < 0 && s[i].at >= from {
			ia = i
		}
		if to < 0 || s[i].at <= to {
			ib = i
		}
	}
	if ia < 0 || ib <= ia {
		return a, b, false
	}
	return s[ia], s[ib], true
}

// gbps returns flow i's goodput between samples a and b, in Gbit/s.
func gbps(a, b sample, i int) float64 {
	return float64(b.bytes[i]-a.bytes[i]) * 8 / float64(b.at-a.at)
}
