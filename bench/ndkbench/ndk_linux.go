//go:build linux

package ndkbench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/internal/plumb"
	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/ndk"
	"github.com/xdpndk/xdpndk/xdp"
)

// Request contexts. Receives carry their slot (0..recvSlots-1); the small integers box
// without allocating.
const (
	recvSlots  = 16
	ctxSend    = 200 // ping-pong Sends
	ctxWrite   = 201 // latency, rate and goodput Writes
	ctxRead    = 202 // latency Reads
	ctxFence   = 203 // the signaled Write that ends a silent rate measurement
	targetSize = 1 << 20
)

// ndkSide is one host's adapter, protection domain, CQ, QP and registered memory.
type ndkSide struct {
	a  *ndk.Adapter
	pd *ndk.PD
	cq *ndk.CQ
	qp *ndk.QP
	// small is 4 KiB of the adapter's UMEM: [0, 64) the Send source, receive slot i at
	// 64*(i+1), a Write source at 2048, a Read sink at 3072.
	small   []byte
	smallMR *ndk.MR
	// target (B only): 1 MiB of UMEM registered for remote read and write.
	target   []byte
	targetMR *ndk.MR
}

// ndkPair is two adapters (A initiates, B is the target) with one connected QP each.
type ndkPair struct {
	mode   string
	inline bool
	A, B   ndkSide
	ln     *ndk.Listener
	// waitA and waitB make A's and B's loops of the measurements wait in CQ.Wait instead
	// of polling GetResults; waitCtx bounds those Waits while a measurement runs.
	waitA, waitB bool
	waitCtx      context.Context
	// echoDelay is how long B's echo waits after each receive (B polls its engine
	// meanwhile, so acknowledgements are not delayed).
	echoDelay time.Duration
}

// openNDK opens an adapter with mode's progress on each host, registers memory, posts the
// receives and connects A's QP to B's.
func openNDK(bed *testbed.Bed, mode string, allQueues bool) (p *ndkPair, err error) {
	prog, ok := progressOf(mode)
	if !ok {
		return nil, fmt.Errorf("unknown mode %q", mode)
	}
	p = &ndkPair{mode: mode, inline: prog == ndk.ProgressInline}
	defer func() {
		if err != nil {
			p.close()
			p = nil
		}
	}()
	opts := ndk.DefaultOptions()
	opts.Progress = prog
	for _, s := range []struct {
		h    *testbed.Host
		side *ndkSide
	}{{bed.A, &p.A}, {bed.B, &p.B}} {
		// Queue 0 only, steered "externally": both sides transmit from queue 0, which veth
		// delivers to the peer's queue 0 (the raw baseline measures one queue too).
		queues, steer := []int{0}, xdp.SteerExternal
		if allQueues {
			queues, steer = nil, xdp.SteerServeAll
		}
		if s.side.a, err = openAdapter(s.h, queues, steer, opts); err != nil {
			return p, err
		}
		if err := s.side.setup(s.side == &p.B); err != nil {
			return p, err
		}
	}
	if err := p.connect(netip.AddrPortFrom(bed.B.Addr, ServicePort)); err != nil {
		return p, err
	}
	return p, nil
}

// setup creates the side's PD, CQ and QP, registers its memory and posts its receives.
func (s *ndkSide) setup(target bool) (err error) {
	if s.pd, err = s.a.NewPD(); err != nil {
		return fmt.Errorf("new PD: %w", err)
	}
	if s.cq, err = s.a.NewCQ(4096, nil); err != nil {
		return fmt.Errorf("new CQ: %w", err)
	}
	qc := ndk.QPConfig{ReceiveCQ: s.cq, InitiatorCQ: s.cq, ReceiveQueueDepth: 256, InitiatorQueueDepth: 1024}
	if s.qp, err = s.pd.NewQP(qc); err != nil {
		return fmt.Errorf("new QP: %w", err)
	}
	if s.small, err = s.a.Alloc(4096, 4096); err != nil {
		return fmt.Errorf("alloc: %w", err)
	}
	if s.smallMR, err = s.pd.RegisterMR(s.small, ndk.MRAllowLocalWrite); err != nil {
		return fmt.Errorf("register: %w", err)
	}
	if target {
		if s.target, err = s.a.Alloc(targetSize, 4096); err != nil {
			return fmt.Errorf("alloc target: %w", err)
		}
		if s.targetMR, err = s.pd.RegisterMR(s.target, ndk.MRAllowRemoteRead|ndk.MRAllowRemoteWrite); err != nil {
			return fmt.Errorf("register target: %w", err)
		}
	}
	for i := range recvSlots {
		if err := s.postReceive(i); err != nil {
			return err
		}
	}
	return nil
}

// recvBuf returns receive slot i.
func (s *ndkSide) recvBuf(i int) []byte { return s.small[MsgSize*(i+1) : MsgSize*(i+2)] }

func (s *ndkSide) postReceive(i int) error {
	var sgl [1]ndk.SGE
	sgl[0] = s.smallMR.SGE(s.recvBuf(i))
	if err := s.qp.Receive(i, sgl[:]); err != nil {
		return fmt.Errorf("post receive: %w", err)
	}
	return nil
}

// connect connects A's QP to B's listener at dest. With ProgressInline B's engine has no
// goroutine, so one polls it until the connection is up.
func (p *ndkPair) connect(dest netip.AddrPort) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	accepted := make(chan error, 1)
	ln, err := p.B.a.NewListener(func(c *ndk.Connector) {
		go func() { accepted <- c.Accept(ctx, p.B.qp, 16, 16, nil, nil) }()
	})
	if err != nil {
		return fmt.Errorf("new listener: %w", err)
	}
	p.ln = ln
	if err := ln.Listen(netip.AddrPortFrom(netip.Addr{}, dest.Port())); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() { // B's engine, until connected (a no-op without ProgressInline)
		defer close(polled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if !p.B.a.Poll() {
				runtime.Gosched()
			}
		}
	}()
	defer func() { close(stop); <-polled }()
	conn, err := p.A.a.NewConnector()
	if err != nil {
		return fmt.Errorf("new connector: %w", err)
	}
	if err := conn.Connect(ctx, p.A.qp, dest, 16, 16, nil); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	if err := conn.CompleteConnect(ctx, nil); err != nil {
		return fmt.Errorf("complete connect: %w", err)
	}
	select {
	case err := <-accepted:
		if err != nil {
			return fmt.Errorf("accept: %w", err)
		}
	case <-ctx.Done():
		return errors.New("accept: no answer within 10 s")
	}
	return nil
}

// modeString describes what the pair runs with, for the header.
func (p *ndkPair) modeString() string {
	dev := "?"
	if d := p.A.a.Device(); d != nil {
		dev = d.Mode().String()
	}
	queues := "?"
	if d := p.A.a.Device(); d != nil {
		queues = fmt.Sprintf("%d of %d", len(d.Queues()), d.InterfaceQueues())
	}
	return fmt.Sprintf("ndk.Open, progress=%s, %s, queues served %s, UMEM buffers zero-copy=%v", p.mode, dev, queues, p.A.smallMR.InUMEM())
}

// close closes both adapters (which closes their devices and detaches the XDP programs).
func (p *ndkPair) close() { closeAdapters(p.ln, p.A.a, p.B.a) }

// openAdapter opens an ndkbench adapter on h: NDKPort, 4096-entry rings, 8192 frames, an
// 8 MiB heap, no logging; queues nil serves them all.
func openAdapter(h *testbed.Host, queues []int, steer xdp.Steering, opts ndk.Options) (*ndk.Adapter, error) {
	cfg := xdp.Config{Interface: h.Ifname, Port: NDKPort, Queues: queues, Steering: steer,
		RingSize: 4096, Frames: 8192, HeapSize: 8 << 20, Logger: slog.New(slog.DiscardHandler)}
	var a *ndk.Adapter
	if err := h.Do(func() (err error) { a, err = ndk.Open(cfg, opts); return err }); err != nil {
		return nil, fmt.Errorf("open adapter on %s: %w", h.Ifname, err)
	}
	return a, nil
}

// closeAdapters closes ln (if any) and then the adapters that were opened, within 2 s.
func closeAdapters(ln *ndk.Listener, as ...*ndk.Adapter) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if ln != nil {
		_ = ln.Close(ctx)
	}
	for _, a := range as {
		if a != nil {
			_ = a.Close(ctx)
		}
	}
}

// idle is what a loop does when its CQ was empty: nothing with ProgressInline (the next
// GetResults polls the engine), else let the engine goroutines run.
func (p *ndkPair) idle() {
	if !p.inline {
		runtime.Gosched()
	}
}

// resultError reports a failed completion.
func resultError(what string, r *ndk.Result) error {
	return fmt.Errorf("%s completed with %v (context %v)", what, r.Status, r.RequestContext)
}

// serveB runs B's side until stop or the deadline: it takes B's completions (which polls
// B's engine with ProgressInline), and with echo answers every receive with a Send of
// MsgSize bytes and reposts the receive.
func (p *ndkPair) serveB(stop *atomic.Bool, deadline int64, echo bool) error {
	b := &p.B
	var res [32]ndk.Result
	var sgl [1]ndk.SGE
	sgl[0] = b.smallMR.SGE(b.small[:MsgSize])
	for it := 0; ; it++ {
		n := 0
		if p.waitB {
			var err error
			if n, err = b.cq.Wait(p.waitCtx, res[:]); err != nil {
				if p.waitCtx.Err() != nil {
					return nil // the measurement ended
				}
				return fmt.Errorf("wait at B: %w", err)
			}
		} else {
			n = b.cq.GetResults(res[:])
		}
		if n == 0 {
			if it&1023 == 0 && (stop.Load() || report.Now() > deadline) {
				return nil
			}
			p.idle()
			continue
		}
		for i := range res[:n] {
			r := &res[i]
			if r.Status != ndk.StatusSuccess {
				return resultError("B's request", r)
			}
			slot, _ := r.RequestContext.(int)
			if slot >= recvSlots { // our Send
				continue
			}
			if err := b.postReceive(slot); err != nil {
				return err
			}
			if p.echoDelay > 0 {
				for until := report.Now() + int64(p.echoDelay); report.Now() < until; {
					b.a.Poll()
				}
			}
			if echo {
				if err := postRetry(func() error { return b.qp.Send(ctxSend, sgl[:], 0) }, b.cq, deadline); err != nil {
					return fmt.Errorf("echo send: %w", err)
				}
			}
		}
		clear(res[:n]) // drop the references to the contexts
	}
}

// postRetry posts with post; while the initiator queue is full it waits for the queue
// to drain (other completions are the loop's to take, so it only polls the engine), up to
// the deadline.
func postRetry(post func() error, cq *ndk.CQ, deadline int64) error {
	for {
		err := post()
		if err == nil || ndk.StatusOf(err) != ndk.StatusInsufficientResources {
			return err
		}
		if report.Now() > deadline {
			return err
		}
		runtime.Gosched()
	}
}

// measurement runs a loop on A (fn) while B serves (echo or passive), both bounded by
// o.Bound, and stops early when ctx ends.
func (p *ndkPair) measurement(ctx context.Context, o Options, echo bool, fn func(stop *atomic.Bool, deadline int64) error) error {
	var stop atomic.Bool
	defer context.AfterFunc(ctx, func() { stop.Store(true) })()
	deadline := report.Now() + int64(o.Bound)
	endWaits := func() {}
	if p.waitA || p.waitB {
		// Waits cannot look at stop: they end with this context, when A is done, or at the
		// latest after the bound.
		wctx, cancel := context.WithTimeout(ctx, o.Bound+2*time.Second)
		p.waitCtx, endWaits = wctx, cancel
		defer func() { cancel(); p.waitCtx = nil }()
	}
	bDone := report.Worker(p.inline, func() error { return p.serveB(&stop, deadline+int64(time.Second), echo) })
	aErr := <-report.Worker(p.inline, func() error { return fn(&stop, deadline) })
	stop.Store(true)
	endWaits()
	bErr := <-bDone
	if aErr != nil {
		return fmt.Errorf("host A: %w", aErr)
	}
	if bErr != nil {
		return fmt.Errorf("host B: %w", bErr)
	}
	return ctx.Err()
}

// tripTimeout is how long A waits for one echo or completion before the measurement
// stops as failed.
const tripTimeout = time.Second

// pingPong runs o.PingPongN Send/Receive round trips (bounded by o.Bound, and, if keep is
// not nil, by keep reporting false, looked at every 64 round trips) and returns the
// round-trip times after the warm-up, and the heap objects allocated per round trip.
func (p *ndkPair) pingPong(ctx context.Context, o Options, keep func() bool) (rtts []int64, allocsPerOp float64, err error) {
	a := &p.A
	rtts = make([]int64, 0, o.PingPongN)
	err = p.measurement(ctx, o, true, func(stop *atomic.Bool, deadline int64) error {
		var res [32]ndk.Result
		var sgl [1]ndk.SGE
		sgl[0] = a.smallMR.SGE(a.small[:MsgSize])
		// The echo is the receive of B's answer; its receive is posted again at once.
		echo := func(r *ndk.Result) (bool, error) {
			slot, _ := r.RequestContext.(int)
			if slot >= recvSlots {
				return false, nil // our Send
			}
			return true, a.postReceive(slot)
		}
		var objs0 uint64
		for i := 0; i < o.PingPongN; i++ {
			if i == o.PingPongWarmup {
				objs0 = report.HeapObjects()
			}
			if stop.Load() || report.Now() > deadline || (keep != nil && i&63 == 0 && !keep()) {
				break
			}
			t0 := report.Now()
			if err := postRetry(func() error { return a.qp.Send(ctxSend, sgl[:], 0) }, a.cq, deadline); err != nil {
				return fmt.Errorf("send: %w", err)
			}
			if err := p.awaitA(res[:], t0, tripTimeout, echo); err != nil {
				return fmt.Errorf("round trip %d: %w", i, err)
			}
			rtts = append(rtts, report.Now()-t0)
		}
		if k := len(rtts) - o.PingPongWarmup; k > 0 {
			allocsPerOp = float64(report.HeapObjects()-objs0) / float64(k)
		}
		return nil
	})
	// Slow modes may not get through the warm-up within the bound: then the first half
	// is the warm-up.
	return rtts[min(o.PingPongWarmup, len(rtts)/2):], allocsPerOp, err
}

// awaitA polls A's CQ, results into res, until match accepts one, t0 being when the
// request was posted; every result taken must be a success. While the CQ is empty it idles,
// and it gives up limit after t0. With waitA it waits in CQ.Wait instead (bounded by the
// measurement's waitCtx, not by limit).
func (p *ndkPair) awaitA(res []ndk.Result, t0 int64, limit time.Duration, match func(r *ndk.Result) (bool, error)) error {
	for spin := 0; ; spin++ {
		n := 0
		if p.waitA {
			var err error
			if n, err = p.A.cq.Wait(p.waitCtx, res); err != nil {
				return fmt.Errorf("wait at A: %w", err)
			}
		} else {
			n = p.A.cq.GetResults(res)
		}
		got := false
		for j := range res[:n] {
			r := &res[j]
			if r.Status != ndk.StatusSuccess {
				return resultError("A's request", r)
			}
			ok, err := match(r)
			if err != nil {
				return err
			}
			got = got || ok
		}
		if got {
			return nil
		}
		if n == 0 {
			if spin&255 == 255 && report.Now()-t0 > int64(limit) {
				return fmt.Errorf("no completion within %v", limit)
			}
			p.idle()
		}
	}
}

// latency posts o.LatencyN Writes (read false) or Reads (read true) of MsgSize bytes one at
// a time, polling each to its completion, and returns the latencies after the warm-up.
func (p *ndkPair) latency(ctx context.Context, o Options, read bool) ([]int64, error) {
	a, b := &p.A, &p.B
	lat := make([]int64, 0, o.LatencyN)
	err := p.measurement(ctx, o, false, func(stop *atomic.Bool, deadline int64) error {
		var res [32]ndk.Result
		var sgl [1]ndk.SGE
		raddr, rtok := b.targetMR.VA(), b.targetMR.RemoteToken()
		post := func() error { return a.qp.Write(ctxWrite, sgl[:], raddr, rtok, 0) }
		want := ctxWrite
		if read {
			sgl[0] = a.smallMR.SGE(a.small[3072 : 3072+MsgSize])
			post = func() error { return a.qp.Read(ctxRead, sgl[:], raddr, rtok, 0) }
			want = ctxRead
		} else {
			sgl[0] = a.smallMR.SGE(a.small[2048 : 2048+MsgSize])
		}
		done := func(r *ndk.Result) (bool, error) {
			c, _ := r.RequestContext.(int)
			return c == want, nil
		}
		for i := 0; i < o.LatencyN; i++ {
			if stop.Load() || report.Now() > deadline {
				break
			}
			t0 := report.Now()
			if err := post(); err != nil {
				return fmt.Errorf("post: %w", err)
			}
			if err := p.awaitA(res[:], t0, tripTimeout, done); err != nil {
				return fmt.Errorf("request %d: %w", i, err)
			}
			if t1 := report.Now(); i >= o.PingPongWarmup {
				lat = append(lat, t1-t0)
			}
		}
		return nil
	})
	return lat, err
}

// rateResult is one pipelined measurement's window.
type rateResult struct {
	ops, cqes, bytes, allocs uint64
	secs                     float64
	cpu                      time.Duration // the process's user+system CPU in the window
}

// pipeline keeps outstanding Writes of size bytes from src (registered as mr; Write i
// uses the size-byte piece i%outstanding of src when it is large enough, else its start)
// posted into B's target, for o.Warmup and then the measured window o.Duration. With
// signalEvery > 1 only every signalEvery-th Write asks for a completion
// (OpSilentSuccess on the others). It returns what completed in the window.
func (p *ndkPair) pipeline(ctx context.Context, o Options, src []byte, mr *ndk.MR, size, outstanding, signalEvery int) (rateResult, error) {
	a, b := &p.A, &p.B
	var out rateResult
	if size > len(src) || size > len(b.target) {
		return out, fmt.Errorf("write of %d bytes: buffers too small", size)
	}
	bound := o
	bound.Bound = o.Warmup + o.Duration + 5*time.Second
	err := p.measurement(ctx, bound, false, func(stop *atomic.Bool, deadline int64) error {
		pieces := min(len(src)/size, len(b.target)/size, outstanding)
		sgls := make([][1]ndk.SGE, pieces)
		for i := range sgls {
			sgls[i][0] = mr.SGE(src[i*size : (i+1)*size])
		}
		rtok := b.targetMR.RemoteToken()
		var res [64]ndk.Result
		var posted, done, cqes uint64
		start := report.Now()
		warmEnd := start + int64(o.Warmup)
		end := warmEnd + int64(o.Duration)
		var t0, done0, cqes0, objs0 uint64
		var cpu0 time.Duration
		measuring := false
		for it := 0; ; it++ {
			// The clock is read every clockEvery rounds of the loop: on a VM a read costs
			// a tenth of what a message does, and it is the loop's cost, not the verbs'.
			if it%clockEvery == 0 {
				t := report.Now()
				if !measuring && t >= warmEnd {
					measuring = true
					t0, done0, cqes0, objs0 = uint64(t), done, cqes, report.HeapObjects()
					cpu0 = processCPU()
				}
				if t >= end || stop.Load() || t > deadline {
					if measuring && t >= end {
						out.allocs = report.HeapObjects() - objs0
						out.cpu = processCPU() - cpu0
						out.ops, out.cqes = done-done0, cqes-cqes0
						out.bytes = out.ops * uint64(size)
						out.secs = float64(t-int64(t0)) / 1e9
					}
					break
				}
			}
			for posted-done < uint64(outstanding) {
				flags := ndk.OpFlags(0)
				if signalEvery > 1 && (posted+1)%uint64(signalEvery) != 0 {
					flags = ndk.OpSilentSuccess
				}
				k := int(posted % uint64(pieces))
				off := uint64(k * size)
				if err := a.qp.Write(ctxWrite, sgls[k][:], b.targetMR.VA()+off, rtok, flags); err != nil {
					if ndk.StatusOf(err) == ndk.StatusInsufficientResources {
						break
					}
					return fmt.Errorf("post write: %w", err)
				}
				posted++
			}
			n := a.cq.GetResults(res[:])
			for j := range res[:n] {
				if res[j].Status != ndk.StatusSuccess {
					return resultError("Write", &res[j])
				}
			}
			cqes += uint64(n)
			done += uint64(n * signalEvery) // completions arrive in posting order
			if n == 0 {
				p.idle()
			}
		}
		// Drain: a signaled Write after everything posted; when it completes, all did.
		var fence [1]ndk.SGE
		fence[0] = mr.SGE(src[:min(size, MsgSize)])
		if err := postRetry(func() error { return a.qp.Write(ctxFence, fence[:], b.targetMR.VA(), rtok, 0) }, a.cq, report.Now()+int64(2*time.Second)); err != nil {
			return fmt.Errorf("post fence: %w", err)
		}
		fenced := func(r *ndk.Result) (bool, error) {
			c, _ := r.RequestContext.(int)
			return c == ctxFence, nil
		}
		if err := p.awaitA(res[:], report.Now(), 2*time.Second, fenced); err != nil {
			return fmt.Errorf("draining the outstanding Writes: %w", err)
		}
		if out.secs == 0 {
			return errors.New("the measured window did not complete")
		}
		return nil
	})
	return out, err
}

// clockEvery is how many rounds of the message-rate loop read the clock once: a round
// takes a microsecond or two, so the window's ends move by at most a few dozen.
const clockEvery = 16

// idleSettle is how long the idle figure lets the pair settle before its window: the last
// acknowledgements, and the inline fallbacks' quiet period after work (20 ms).
const idleSettle = 200 * time.Millisecond

// idleCPU leaves the pair idle for window, B's application blocked in CQ.Wait on a
// goroutine and nothing polling A, and returns the process's CPU time (user+system) over
// the window and the window's measured length.
func (p *ndkPair) idleCPU(ctx context.Context, window time.Duration) (cpu, wall time.Duration, err error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waited := make(chan error, 1)
	var inWindow atomic.Bool
	go func() {
		var res [4]ndk.Result
		for {
			n, err := p.B.cq.Wait(wctx, res[:])
			if n > 0 && !inWindow.Load() {
				continue // completions of the last measurement (B's last echo Send)
			}
			switch {
			case n > 0:
				err = fmt.Errorf("wait at B returned %d results in the idle window", n)
			case wctx.Err() != nil:
				err = nil
			}
			waited <- err
			return
		}
	}()
	settle := time.NewTimer(idleSettle)
	defer settle.Stop()
	select {
	case <-settle.C:
	case err := <-waited:
		return 0, 0, fmt.Errorf("idle Wait ended early: %w", err)
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	inWindow.Store(true)
	c0, t0 := processCPU(), time.Now()
	win := time.NewTimer(window)
	defer win.Stop()
	select {
	case <-win.C:
	case err := <-waited:
		return 0, 0, fmt.Errorf("idle Wait ended early: %w", err)
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	cpu, wall = processCPU()-c0, time.Since(t0)
	cancel()
	return cpu, wall, <-waited
}

// processCPU returns the user+system CPU time the process has used (0 if getrusage fails).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// diag describes both sides' QP and link counters, for a failure's note.
func (p *ndkPair) diag() string {
	var s string
	for _, x := range []struct {
		name string
		side *ndkSide
	}{{"A", &p.A}, {"B", &p.B}} {
		if x.side.qp == nil {
			continue
		}
		q := plumb.QP(x.side.qp).Stats()
		l := plumb.Link(x.side.a).Stats()
		s += fmt.Sprintf(" [%s: qp tx %d rx %d retx %d timeouts %d acks %d naks %d/%d dup %d rnr %d srtt %v rto %v cwnd %d state %v; link rx %d tx %d kicks %d rxdrop %d txdrop %d txerr %d]",
			x.name, q.TxPackets, q.RxPackets, q.Retransmits, q.Timeouts, q.AcksSent, q.NaksSent, q.NaksReceived, q.Duplicates,
			q.RNRNaks, time.Duration(q.SRTT), time.Duration(q.RTO), q.CongestionWindow, q.State, l.RxPackets, l.TxPackets, l.Kicks, l.RxDropped, l.TxDropped, l.TxErrors)
	}
	return s
}
