//go:build linux

package ndkbench

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"time"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/bench/linkbench"
	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/ndk"
)

// BedOptions returns the test bed the benchmark runs on: bench/linkbench's (MTU 9000, two
// queues per veth end, static neighbours) tagged with name.
func BedOptions(name string) testbed.Options { return linkbench.BedOptions(name) }

// Run creates a test bed (BedOptions("ndkbench")), measures everything on it, and removes
// it, also when ctx is cancelled or a measurement fails. It needs root. It returns the
// results gathered even when err is not nil (failures are in the header's notes).
func Run(ctx context.Context, opts Options) (*Results, error) {
	if _, err := opts.normalize(); err != nil {
		return nil, err
	}
	return testbed.With(BedOptions("ndkbench"), func(bed *testbed.Bed) (*Results, error) { return RunBed(ctx, bed, opts) })
}

// RunBed measures everything on bed, which the caller owns and closes; no XDP program may
// be attached to it, and its MTU should be 9000 (the raw 9000-byte figure needs at least
// that). Everything RunBed opens on the bed is closed before it returns.
func RunBed(ctx context.Context, bed *testbed.Bed, opts Options) (*Results, error) {
	o, err := opts.normalize()
	if err != nil {
		return nil, err
	}
	res := &Results{Header: Header{
		Host: report.ThisHost(), MTU: bed.MTU(), Queues: BedOptions("").Queues, Date: time.Now().UTC().Format(time.RFC3339),
		Modes: map[string]string{}, Notes: definitionNotes(o),
		Config: Config{
			Runs: o.Runs, Modes: o.Modes, PingPongN: o.PingPongN, PingPongWarmup: o.PingPongWarmup,
			LatencyN: o.LatencyN, BoundMS: o.Bound.Milliseconds(), DurationMS: o.Duration.Milliseconds(),
			WarmupMS: o.Warmup.Milliseconds(), Outstanding: o.Outstanding, SignalEvery: o.SignalEvery,
			GoodputOutstanding: o.GoodputOutstanding, Baselines: o.Baselines, IdleMS: o.Idle.Milliseconds(),
			AllQueues: o.AllQueues, Engines: o.Engines, EngineQPs: o.EngineQPs, EngineLoops: o.EngineLoops,
			OnlyEngines: o.OnlyEngines, Scale: o.Scale, ScaleOutstanding: o.ScaleOutstanding,
			ScaleIdleMS: o.ScaleIdle.Milliseconds(),
		},
	}}
	r := &runner{bed: bed, o: o, res: res, col: newCollector()}
	var errs []error
	fail := func(what string, rep int, err error) {
		err = fmt.Errorf("%s, repetition %d: %w", what, rep+1, err)
		res.Header.Notes = append(res.Header.Notes, report.FailedNote(err))
		errs = append(errs, err)
	}
	var steps []step
	only := o.OnlyEngines || o.ScaleOnly // one figure alone
	if o.Baselines && !only {
		steps = append(steps, step{SystemRaw, r.raw}, step{SystemTCP, r.tcp})
	}
	for _, m := range o.Modes {
		if only {
			break
		}
		steps = append(steps, step{SystemNDK(m), func(ctx context.Context, rep int) error { return r.ndk(ctx, rep, m) }})
	}
	if len(o.Engines) > 0 && !o.ScaleOnly {
		steps = append(steps, step{BenchEngines, r.engines})
	}
	if o.Scale > 0 && !o.OnlyEngines {
		steps = append(steps, step{SystemNDK(ModeInline) + " scale", r.scale})
	}
	for rep := range o.Runs {
		for _, s := range steps {
			err := ctx.Err()
			if err == nil {
				err = s.fn(ctx, rep)
			}
			if ctx.Err() != nil {
				r.finish()
				return res, fmt.Errorf("ndkbench interrupted: %w", ctx.Err())
			}
			if err != nil {
				fail(s.name, rep, err)
			}
		}
	}
	r.finish()
	return res, errors.Join(errs...)
}

// step is one system's measurement in a repetition.
type step struct {
	name string
	fn   func(ctx context.Context, rep int) error
}

// runner holds the state of one RunBed.
type runner struct {
	bed *testbed.Bed
	o   Options
	res *Results
	col *collector
}

// finish puts the records and the evaluated goals into the results.
func (r *runner) finish() {
	r.res.Records = r.col.records()
	r.res.Header.Goals = Evaluate(DefaultGoals(), r.res.Records)
}

func (r *runner) progress(format string, args ...any) {
	if r.o.Progress != nil {
		fmt.Fprintf(r.o.Progress, format+"\n", args...)
	}
}

// counters returns the pair's counters for a progress line when Options.Counters asks.
func (r *runner) counters(p *ndkPair) string {
	if !r.o.Counters {
		return ""
	}
	return "; counters so far:" + p.diag()
}

// raw measures the raw link with bench/linkbench (system xdpndk): 64-byte ping-pong,
// 64-byte and 9000-byte one-way.
func (r *runner) raw(ctx context.Context, rep int) error {
	lo := linkbench.DefaultOptions()
	lo.Systems = []string{linkbench.SystemXDPNDK}
	lo.Sizes = []int{64, 9000}
	lo.Runs = 1
	lo.Duration, lo.Warmup = r.o.Duration, r.o.Warmup
	lo.PingPongN, lo.PingPongWarmup, lo.PingPongTimeout = r.o.PingPongN, r.o.PingPongWarmup, r.o.Bound
	lres, err := linkbench.RunBed(ctx, r.bed, lo)
	if lres == nil {
		return err
	}
	r.res.Header.Modes[SystemRaw] = "bench/linkbench xdpndk: " + lres.Header.Modes[linkbench.SystemXDPNDK]
	get := func(bench string, size int, metric string) (float64, bool) {
		rec := lres.Find(bench, linkbench.SystemXDPNDK, size, metric)
		if rec == nil || len(rec.Runs) == 0 {
			return 0, false
		}
		return rec.Value, true
	}
	copyFig := func(bench string, size int, metric string, to Ref, unit string) {
		if v, ok := get(bench, size, metric); ok {
			r.col.add(to, unit, rep, v)
		}
	}
	pp := func(m string) Ref { return Ref{BenchPingPong, SystemRaw, OpRTT, linkbench.PingSize, m} }
	copyFig(linkbench.BenchPingPong, linkbench.PingSize, linkbench.MetricRTTP50, pp(MetricP50), UnitMicros)
	copyFig(linkbench.BenchPingPong, linkbench.PingSize, linkbench.MetricRTTP90, pp(MetricP90), UnitMicros)
	copyFig(linkbench.BenchPingPong, linkbench.PingSize, linkbench.MetricRTTP99, pp(MetricP99), UnitMicros)
	copyFig(linkbench.BenchPingPong, linkbench.PingSize, linkbench.MetricRTTMean, pp(MetricMean), UnitMicros)
	copyFig(linkbench.BenchPingPong, linkbench.PingSize, linkbench.MetricRTTLost, pp(MetricLost), UnitCount)
	for _, size := range lo.Sizes {
		ow := func(m string) Ref { return Ref{BenchOneWay, SystemRaw, OpSend, size, m} }
		copyFig(linkbench.BenchOneWay, size, linkbench.MetricPPS, ow(MetricPPS), UnitPerSec)
		copyFig(linkbench.BenchOneWay, size, linkbench.MetricGbps, ow(MetricGbps), UnitGbps)
	}
	p50, _ := get(linkbench.BenchPingPong, linkbench.PingSize, linkbench.MetricRTTP50)
	pps, _ := get(linkbench.BenchOneWay, 64, linkbench.MetricPPS)
	gbps, _ := get(linkbench.BenchOneWay, 9000, linkbench.MetricGbps)
	r.progress("rep %d %-15s ping-pong p50 %.2f us; one-way 64 B %.3f Mpps; 9000 B %.2f Gbit/s", rep+1, SystemRaw, p50, pps/1e6, gbps)
	for _, n := range lres.Header.Notes {
		if report.IsFailed(n) {
			r.res.Header.Notes = append(r.res.Header.Notes, "raw-xdp (linkbench) "+n)
		}
	}
	return err
}

// tcp measures the kernel TCP ping-pong.
func (r *runner) tcp(ctx context.Context, rep int) error {
	rtts, err := tcpPingPong(ctx, r.bed, r.o)
	if len(rtts) > 0 {
		st := report.Summarize(rtts)
		r.col.addLatency(BenchPingPong, SystemTCP, OpRTT, MsgSize, rep, st, 0)
		r.progress("rep %d %-15s ping-pong p50 %.2f us, p99 %.2f us (%d samples)", rep+1, SystemTCP, st.P50, st.P99, st.N)
	}
	r.res.Header.Modes[SystemTCP] = "net.TCPConn A->B, TCP_NODELAY, blocking reads through the Go netpoller (goroutines not locked), no XDP program"
	return err
}

// ndk opens the ndk pair in mode and measures it: the ping-pong, and with the inline mode
// the latencies, message rates and goodputs.
func (r *runner) ndk(ctx context.Context, rep int, mode string) (err error) {
	sys := SystemNDK(mode)
	p, err := openNDK(r.bed, mode, r.o.AllQueues)
	if err != nil {
		return err
	}
	defer p.close()
	defer func() {
		if err != nil && ctx.Err() == nil {
			err = fmt.Errorf("%w; counters:%s", err, p.diag())
		}
	}()
	r.res.Header.Modes[sys] = p.modeString()

	var rtts []int64
	var allocs float64
	labeled(ctx, "pingpong", func() { rtts, allocs, err = p.pingPong(ctx, r.o, nil) })
	if len(rtts) > 0 {
		st := report.Summarize(rtts)
		r.col.addLatency(BenchPingPong, sys, OpSendRecv, MsgSize, rep, st, 0)
		r.col.add(Ref{BenchPingPong, sys, OpSendRecv, MsgSize, MetricAllocs}, UnitObjects, rep, allocs)
		r.progress("rep %d %-15s ping-pong p50 %.2f us, p99 %.2f us (%d samples)", rep+1, sys, st.P50, st.P99, st.N)
	}
	if err != nil {
		return fmt.Errorf("ping-pong: %w", err)
	}
	if mode != ModeInline {
		return nil
	}
	if err := r.waitPingPongs(ctx, rep, p); err != nil {
		return fmt.Errorf("ping-pong with CQ.Wait: %w", err)
	}
	if err := r.idle(ctx, rep, p); err != nil {
		return fmt.Errorf("idle: %w", err)
	}
	if err := r.unresolvedPingPong(ctx, rep, p); err != nil {
		return fmt.Errorf("ping-pong with unresolved peers: %w", err)
	}
	for _, read := range []bool{false, true} {
		op := OpWrite
		if read {
			op = OpRead
		}
		var lat []int64
		labeled(ctx, "latency-"+op, func() { lat, err = p.latency(ctx, r.o, read) })
		if len(lat) > 0 {
			st := report.Summarize(lat)
			r.col.addLatency(BenchLatency, sys, op, MsgSize, rep, st, 0)
			r.progress("rep %d %-15s %-5s latency p50 %.2f us, p99 %.2f us (%d samples)", rep+1, sys, op, st.P50, st.P99, st.N)
		}
		if err != nil {
			return fmt.Errorf("%s latency: %w", op, err)
		}
	}
	for _, v := range []struct {
		op     string
		signal int
	}{{OpWrite, 1}, {OpWriteSilent, r.o.SignalEvery}} {
		if v.op == OpWriteSilent && v.signal == 1 {
			continue
		}
		src := p.A.small[2048 : 2048+MsgSize]
		var m rateResult
		labeled(ctx, "rate-"+v.op, func() { m, err = p.pipeline(ctx, r.o, src, p.A.smallMR, MsgSize, r.o.Outstanding, v.signal) })
		if err != nil {
			return fmt.Errorf("%s rate: %w", v.op, err)
		}
		ref := func(metric string) Ref { return Ref{BenchMsgRate, sys, v.op, MsgSize, metric} }
		r.col.add(ref(MetricOps), UnitPerSec, rep, float64(m.ops)/m.secs)
		r.col.add(ref(MetricCQEs), UnitPerSec, rep, float64(m.cqes)/m.secs)
		r.col.add(ref(MetricAllocs), UnitObjects, rep, float64(m.allocs)/float64(max(m.ops, 1)))
		r.addCPU(ref, rep, m)
		r.progress("rep %d %-15s %-12s rate %.3f Mop/s, %.3f M CQE/s%s", rep+1, sys, v.op, float64(m.ops)/m.secs/1e6, float64(m.cqes)/m.secs/1e6, r.counters(p))
	}
	return r.goodput(ctx, rep, p)
}

// waitPingPongs runs the ping-pong on p with both loops waiting in CQ.Wait instead of
// polling; then, with a tenth of the round trips, the ping-pong where B answers 1 ms after
// each receive, A polling, and again with A waiting in CQ.Wait: A's Wait spins 50 us and
// sleeps, and the difference between the two is what its wake-up costs.
func (r *runner) waitPingPongs(ctx context.Context, rep int, p *ndkPair) error {
	few := r.o
	few.PingPongN, few.PingPongWarmup = max(r.o.PingPongN/10, 100), r.o.PingPongWarmup/10
	few.Bound = r.o.Bound + time.Duration(few.PingPongN)*wakeDelay
	for _, v := range []struct {
		op           string
		o            Options
		waitA, waitB bool
		delay        time.Duration
	}{
		{OpSendRecvWait, r.o, true, true, 0},
		{OpSendRecvDelay, few, false, false, wakeDelay},
		{OpSendRecvDelayWait, few, true, false, wakeDelay},
	} {
		var rtts []int64
		var allocs float64
		var err error
		p.waitA, p.waitB, p.echoDelay = v.waitA, v.waitB, v.delay
		labeled(ctx, "pingpong-"+v.op, func() { rtts, allocs, err = p.pingPong(ctx, v.o, nil) })
		p.waitA, p.waitB, p.echoDelay = false, false, 0
		sys := SystemNDK(p.mode)
		if len(rtts) > 0 {
			st := report.Summarize(rtts)
			r.col.addLatency(BenchPingPong, sys, v.op, MsgSize, rep, st, 0)
			r.col.add(Ref{BenchPingPong, sys, v.op, MsgSize, MetricAllocs}, UnitObjects, rep, allocs)
			r.progress("rep %d %-15s %s ping-pong p50 %.2f us, p99 %.2f us (%d samples)", rep+1, sys, v.op, st.P50, st.P99, st.N)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", v.op, err)
		}
	}
	return nil
}

// wakeDelay is how long B waits before each echo in the wake-up figures: well over
// Options.Spin (50 us), so that A's Wait sleeps every time, and short of the
// retransmission timer's floor (B acknowledges meanwhile anyway).
const wakeDelay = time.Millisecond

// idle records the process's CPU while the pair sits idle (idleCPU) for o.Idle.
func (r *runner) idle(ctx context.Context, rep int, p *ndkPair) error {
	var cpu, wall time.Duration
	var err error
	labeled(ctx, "idle", func() { cpu, wall, err = p.idleCPU(ctx, r.o.Idle) })
	if err != nil {
		return err
	}
	sys := SystemNDK(p.mode)
	ref := func(m string) Ref { return Ref{BenchIdle, sys, OpIdleWait, 0, m} }
	r.col.add(ref(MetricCPU), UnitSeconds, rep, cpu.Seconds())
	r.col.add(ref(MetricWall), UnitSeconds, rep, wall.Seconds())
	r.col.add(ref(MetricCore), UnitCores, rep, cpu.Seconds()/wall.Seconds())
	r.progress("rep %d %-15s idle %v, B in CQ.Wait: process CPU %v, %.3f%% of a core", rep+1, sys, wall.Round(time.Millisecond), cpu, 100*cpu.Seconds()/wall.Seconds())
	return nil
}

// goodput measures 64 KiB Writes from a UMEM buffer and from a Go heap buffer.
func (r *runner) goodput(ctx context.Context, rep int, p *ndkPair) error {
	sys := SystemNDK(p.mode)
	n := GoodputSize * r.o.GoodputOutstanding
	umem, err := p.A.a.Alloc(n, 4096)
	if err != nil {
		return fmt.Errorf("alloc goodput source: %w", err)
	}
	heap := make([]byte, n)
	for i := range heap {
		heap[i] = byte(i)
	}
	copy(umem, heap)
	for _, v := range []struct {
		op  string
		buf []byte
	}{{OpWriteUMEM, umem}, {OpWriteHeap, heap}} {
		mr, err := p.A.pd.RegisterMR(v.buf, ndk.MRAllowLocalWrite)
		if err != nil {
			return fmt.Errorf("register %s source: %w", v.op, err)
		}
		var m rateResult
		labeled(ctx, "goodput-"+v.op, func() { m, err = p.pipeline(ctx, r.o, v.buf, mr, GoodputSize, r.o.GoodputOutstanding, 1) })
		derr := mr.Deregister(context.Background())
		if err != nil {
			return fmt.Errorf("%s goodput: %w", v.op, err)
		}
		if derr != nil {
			return fmt.Errorf("deregister %s source: %w", v.op, derr)
		}
		if v.op == OpWriteUMEM && !mr.InUMEM() {
			r.res.Header.Notes = append(r.res.Header.Notes, "write-umem source is not in the UMEM: it was copied")
		}
		ref := func(metric string) Ref { return Ref{BenchGoodput, sys, v.op, GoodputSize, metric} }
		gbps := float64(m.bytes) * 8 / m.secs / 1e9
		r.col.add(ref(MetricGbps), UnitGbps, rep, gbps)
		r.col.add(ref(MetricOps), UnitPerSec, rep, float64(m.ops)/m.secs)
		r.col.add(ref(MetricAllocs), UnitObjects, rep, float64(m.allocs)/float64(max(m.ops, 1)))
		r.addCPU(ref, rep, m)
		r.progress("rep %d %-15s %-12s goodput %.2f Gbit/s%s", rep+1, sys, v.op, gbps, r.counters(p))
	}
	return nil
}

// addCPU records the process's CPU over a pipelined window: per completed request (in µs)
// and in cores.
func (r *runner) addCPU(ref func(metric string) Ref, rep int, m rateResult) {
	if m.ops > 0 {
		r.col.add(ref(MetricCPUOp), UnitCPUOp, rep, m.cpu.Seconds()*1e6/float64(m.ops))
	}
	r.col.add(ref(MetricCore), UnitCores, rep, m.cpu.Seconds()/m.secs)
}

// labeled runs fn with the profiler label figure=name on this goroutine and the ones it
// starts, so that a -cpuprofile of the whole run can be cut by figure
// (go tool pprof -tagfocus figure=goodput-write-umem).
func labeled(ctx context.Context, name string, fn func()) {
	pprof.Do(ctx, pprof.Labels("figure", name), func(context.Context) { fn() })
}

// definitionNotes are the header notes that define the figures.
func definitionNotes(o Options) []string {
	return []string{
		"host A initiates, host B is the target; both are network namespaces on one 2-CPU machine joined by a veth pair (AF_XDP copy mode)",
		fmt.Sprintf("ndk ping-pong: A posts a %d-byte Send and polls its CQ until the receive of B's %d-byte answer completes; B polls its CQ and answers each receive with a Send; %d round trips, the first %d left out, bounded by %v",
			MsgSize, MsgSize, o.PingPongN, o.PingPongWarmup, o.Bound),
		"ProgressInline: no engine goroutine, the CQ polls (A's and B's loops run on goroutines locked to their threads); busy/adaptive: the adapters' own engine goroutines, the loops yield (runtime.Gosched) when the CQ is empty",
		"ndk ping-pong send/recv+wait (inline): the same ping-pong, on the same pair, with A's and B's loops taking their results with CQ.Wait instead of polling GetResults (Wait polls for Options.Spin, 50 us, then sleeps while the adapter's fallback goroutine serves the engine)",
		fmt.Sprintf("ndk ping-pong send/recv+1ms and send/recv+1ms+wait (inline): %d round trips (the first %d left out) where B answers %v after each receive (polling its engine meanwhile), A polling for the answer, then A waiting for it in CQ.Wait, which sleeps every time: the difference is the cost of Wait's wake-up", max(o.PingPongN/10, 100), o.PingPongWarmup/10, wakeDelay),
		fmt.Sprintf("ndk idle (inline): right after the Wait ping-pong, both adapters open with their connected QP, B's application blocked in CQ.Wait, nothing polling A; %v to settle, then the process's user+system CPU (getrusage) over %v; the goal is at most 1%% of one core", idleSettle, o.Idle),
		fmt.Sprintf("ndk latency: one %d-byte Write (or Read) posted, its completion polled, then the next; %d samples, the first %d left out", MsgSize, o.LatencyN, o.PingPongWarmup),
		"ndk ping-pong send/recv+unresolved (inline): the same ping-pong, right after the plain one on the same pair, while A's device resolves two on-link addresses nobody answers ARP for: the source of a connection request injected into A from B's namespace (A answers it) and the destination of a Connect by A's application; it stops when either resolution ends (ResolveTimeout, 3 s)",
		fmt.Sprintf("ndk msgrate: %d outstanding %d-byte Writes on one QP, reposted as they complete, %v window after %v warm-up; ops = Writes completed per second, cqes = completions taken per second (write-silent: only every %d-th Write is signaled)",
			o.Outstanding, MsgSize, o.Duration, o.Warmup, o.SignalEvery),
		fmt.Sprintf("ndk goodput: %d outstanding %d-byte Writes, payload bytes completed x 8 / window, in Gbit/s; write-umem sources from Adapter.Alloc (zero-copy transmit path), write-heap from the Go heap (copied)", o.GoodputOutstanding, GoodputSize),
		fmt.Sprintf("ndk scale (inline, its own adapter pair, one CQ per side for all its QPs): %d QP pairs connected one after the other; write-1qp: %d outstanding %d-byte Writes on QP 0 while the others sit idle, as msgrate; write-allqp: %d outstanding on every QP, each Write reposted on the QP that completed it; qp_min_per_s and qp_max_per_s are the Writes per second of the QP that completed fewest and most in the window; odd repetitions measure write-allqp first; %v window after %v warm-up each. wait-allqp (idle): then all %d pairs idle, B's application in CQ.Wait, %v to settle and the process's CPU over %v (every idle QP sends a keepalive probe every 10 s)",
			o.Scale, o.Outstanding, MsgSize, o.ScaleOutstanding, o.Duration, o.Warmup, o.Scale, idleSettle, o.ScaleIdle),
		"raw-xdpndk: bench/linkbench's raw-xdpndk system on the same bed in the same repetition (64 = IP packet length; Gbit/s counts IP packet bytes); kernel-tcp: 64-byte messages, TCP_NODELAY",
		"cpu_us_per_msg and cpu_cores (msgrate, goodput): the process's user+system CPU (getrusage; both hosts, their loops and the kernel work of their system calls) over the window, per Write completed and per second of the window",
		"allocs_per_op: heap objects the whole process allocated in the window per completed request (or round trip)",
		fmt.Sprintf("ndk engines (inline): adapters of 1 and of %v engines on both hosts (ndk.Options.Engines), each serving both queues of the bed (engine i queue i), %d QP pairs spread over the engines, each QP with a CQ and memory of its own, %d outstanding %d-byte Writes shared out among them, every %d-th signaled; loops: %s (side: one loop per host drives all its QPs, so every count runs two loops on the two CPUs; engine: one loop per engine and host); the engine counts alternate in order by repetition; cpu_us_per_msg = the process's user+system CPU over the window per Write delivered (= CPU seconds per million messages), forwarded = datagrams forwarded between engines (both hosts; 0 when placed right)",
			o.Engines, o.EngineQPs, o.Outstanding, MsgSize, o.SignalEvery, o.EngineLoops),
		fmt.Sprintf("value is the median of %d repetitions; goal ratios pair figures of the same repetition", o.Runs),
	}
}
