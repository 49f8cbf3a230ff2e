//go:build linux

package pathbench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/bpf"
	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/xdp"
)

// RoutedBedOptions returns the routed bed of the bottleneck scenarios: A, router, B, MTU
// 9000, one queue per veth end, static neighbours.
func RoutedBedOptions() testbed.Options {
	return testbed.Options{Routed: true, MTU: MTU, Name: "pathbench", StaticNeighbors: true}
}

// PlainBedOptions returns the plain bed of the XDP-loss scenario: A and B on one veth pair,
// MTU 9000, one queue per end, static neighbours.
func PlainBedOptions() testbed.Options {
	return testbed.Options{MTU: MTU, Name: "pathbenchxdp", StaticNeighbors: true}
}

// Run runs the selected scenarios, the routed bed's first, each bed created for them and
// removed after them, also when ctx is cancelled or a measurement fails. It needs root
// and, for the tcp scenario, iperf3. It returns the results gathered even when err is not
// nil (failures are in the header's notes, and their goals are not evaluated).
func Run(ctx context.Context, opts Options) (*Results, error) {
	o, err := opts.normalize()
	if err != nil {
		return nil, err
	}
	res := &Results{Header: Header{
		Host: report.ThisHost(), MTU: MTU, Date: time.Now().UTC().Format(time.RFC3339),
		Modes: map[string]string{}, Notes: definitionNotes(o),
		Config: Config{
			Scenarios: o.Scenarios, Runs: o.Runs, DurationMS: o.Duration.Milliseconds(), WarmupMS: o.Warmup.Milliseconds(),
			SampleMS: o.Sample.Milliseconds(), Outstanding: o.Outstanding, WriteSize: WriteSize,
			RateBps: o.Rate, BurstBytes: o.Burst, LimitBytes: o.Limit, RouterLoss: pct(o.RouterLoss),
		},
		Goals: Goals(o),
	}}
	for _, p := range o.XDPLosses {
		res.Header.Config.XDPLosses = append(res.Header.Config.XDPLosses, pct(p))
	}
	r := &runner{o: o, res: res}
	var errs []error
	r.fail = func(what string, err error) {
		err = fmt.Errorf("%s: %w", what, err)
		res.Header.Notes = append(res.Header.Notes, report.FailedNote(err))
		errs = append(errs, err)
	}
	var routedSel []string
	for _, s := range o.Scenarios {
		if routed(s) {
			routedSel = append(routedSel, s)
		}
	}
	if len(routedSel) > 0 && ctx.Err() == nil {
		_, err := testbed.With(RoutedBedOptions(), func(bed *testbed.Bed) (struct{}, error) {
			return struct{}{}, r.routed(ctx, bed, routedSel)
		})
		if err != nil {
			r.fail("routed bed", err)
		}
	}
	if o.has(ScenarioXDP) && ctx.Err() == nil {
		_, err := testbed.With(PlainBedOptions(), func(bed *testbed.Bed) (struct{}, error) {
			return struct{}{}, r.xdp(ctx, bed)
		})
		if err != nil {
			r.fail(ScenarioXDP, err)
		}
	}
	res.Header.Goals = Evaluate(res.Header.Goals, res)
	if ctx.Err() != nil {
		return res, fmt.Errorf("pathbench interrupted: %w", ctx.Err())
	}
	return res, errors.Join(errs...)
}

// runner holds the state of one Run.
type runner struct {
	o    Options
	res  *Results
	fail func(what string, err error)
}

func (r *runner) progress(format string, args ...any) {
	if r.o.Progress != nil {
		fmt.Fprintf(r.o.Progress, format+"\n", args...)
	}
}

// routed runs the bottleneck scenarios of sel on bed, on one pair of adapters with two
// QPs (the one-QP scenarios use the first). A failed scenario is noted and the next runs;
// it returns an error only when the bed or the pair cannot be set up.
func (r *runner) routed(ctx context.Context, bed *testbed.Bed, sel []string) error {
	o := r.o
	if err := bed.SetBottleneck(testbed.Bottleneck{Rate: o.Rate, Burst: o.Burst, Limit: o.Limit}); err != nil {
		return err
	}
	p, err := openPair(bed, 2, o.Outstanding)
	if err != nil {
		return err
	}
	defer func() { p.close() }()
	r.res.Header.Modes["routed"] = fmt.Sprintf("routed bed A - router - B (%v -> %v), tc tbf on the router's egress towards B: rate %d bit/s, burst %d B, limit %d B; ",
		bed.A.Addr, bed.B.Addr, o.Rate, o.Burst, o.Limit) + p.modes()
	for rep := range o.Runs {
		for _, sc := range sel {
			if ctx.Err() != nil {
				return nil
			}
			var err error
			switch sc {
			case ScenarioSingle:
				err = r.single(ctx, bed, p)
			case ScenarioTwo:
				err = r.two(ctx, bed, p)
			case ScenarioTCP:
				err = r.tcp(ctx, bed, p)
			case ScenarioLoss:
				err = r.loss(ctx, bed, p)
			}
			if err != nil && ctx.Err() == nil {
				r.fail(fmt.Sprintf("%s, run %d", sc, rep+1), err)
				// A failed QP fails what follows on it: start again on new adapters.
				p.close()
				if p, err = openPair(bed, 2, o.Outstanding); err != nil {
					p = &pair{}
					return fmt.Errorf("reopen the adapters: %w", err)
				}
			}
		}
	}
	return nil
}

// qpFigures records flow i's transport counters between samples a and b, and its
// estimates at b, under ref's scenario, system and loss.
func (r *runner) qpFigures(ref Ref, a, b sample, i int) (retx, timeouts uint64) {
	sa, sb := a.stats[i], b.stats[i]
	retx, timeouts = sb.Retransmits-sa.Retransmits, sb.Timeouts-sa.Timeouts
	byTimer := sb.RTORetransmits - sa.RTORetransmits
	at := func(m string) Ref { ref.Metric = m; return ref }
	r.res.add(at(MetricTxPackets), UnitCount, float64(sb.TxPackets-sa.TxPackets))
	r.res.add(at(MetricRetransmit), UnitCount, float64(retx))
	r.res.add(at(MetricTimeouts), UnitCount, float64(timeouts))
	if retx > 0 {
		r.res.add(at(MetricRTOShare), UnitRatio, float64(byTimer)/float64(retx))
	} else if byTimer == 0 {
		r.res.add(at(MetricRTOShare), UnitRatio, 0)
	}
	r.res.add(at(MetricSRTT), UnitMicro, float64(sb.SRTT)/1e3)
	r.res.add(at(MetricCwnd), UnitBytes, float64(sb.CongestionWindow))
	return retx, timeouts
}

// bottleneckDrops records the packets the bottleneck's queue dropped since before.
func (r *runner) bottleneckDrops(sc string, bed *testbed.Bed, before testbed.QdiscStats, loss float64) {
	if after, err := bed.BottleneckStats(); err == nil {
		r.res.add(Ref{sc, SystemBottleneck, OpWrite, WriteSize, loss, MetricDrops}, UnitCount, float64(after.Drops-before.Drops))
	}
}

// oneQP runs the first QP alone for o.Warmup + o.Duration and records its goodput (and
// share of the bottleneck rate when rate > 0) and counters over the window under sc and
// loss. It returns the goodput.
func (r *runner) oneQP(ctx context.Context, p *pair, sc string, loss float64, rate uint64) (float64, error) {
	o := r.o
	d0, v0 := p.linkDrops(), vethDrops(p.bed)
	s, err := p.pump(ctx, p.flows[:1], []time.Duration{0}, o.Warmup+o.Duration, o)
	if err != nil {
		return 0, err
	}
	drops, vdrops := p.linkDrops()-d0, vethDrops(p.bed)-v0
	r.res.add(Ref{sc, SystemLinks, OpWrite, WriteSize, loss, MetricDrops}, UnitCount, float64(drops))
	r.res.add(Ref{sc, SystemVeth, OpWrite, WriteSize, loss, MetricDrops}, UnitCount, float64(vdrops))
	a, b, ok := window(s, int64(o.Warmup), -1)
	if !ok {
		return 0, errors.New("no measured window")
	}
	ref := Ref{sc, SystemNDK, OpWrite, WriteSize, loss, MetricGoodput}
	g := gbps(a, b, 0)
	r.res.add(ref, UnitGbps, g)
	if rate > 0 {
		ref.Metric = MetricShare
		r.res.add(ref, UnitRatio, g*1e9/float64(rate))
	}
	retx, tmo := r.qpFigures(ref, a, b, 0)
	r.progress("%-6s loss %5g%%: goodput %.3f Gbit/s; %d retransmits, %d timeouts; srtt %v cwnd %d; sockets dropped %d, veth ends %d",
		sc, loss, g, retx, tmo, time.Duration(b.stats[0].SRTT), b.stats[0].CongestionWindow, drops, vdrops)
	return g, nil
}

// single: one QP through the bottleneck.
func (r *runner) single(ctx context.Context, bed *testbed.Bed, p *pair) error {
	before, err := bed.BottleneckStats()
	if err != nil {
		return err
	}
	if _, err := r.oneQP(ctx, p, ScenarioSingle, 0, r.o.Rate); err != nil {
		return err
	}
	r.bottleneckDrops(ScenarioSingle, bed, before, 0)
	return nil
}

// two: two QPs through the bottleneck, the second started o.Warmup after the first; the
// window starts o.Warmup after that. Jain's index is over the second half of the window.
func (r *runner) two(ctx context.Context, bed *testbed.Bed, p *pair) error {
	o := r.o
	before, err := bed.BottleneckStats()
	if err != nil {
		return err
	}
	s, err := p.pump(ctx, p.flows[:2], []time.Duration{0, o.Warmup}, 2*o.Warmup+o.Duration, o)
	if err != nil {
		return err
	}
	from := int64(2 * o.Warmup)
	a, b, ok := window(s, from, -1)
	ha, hb, hok := window(s, from+int64(o.Duration/2), -1)
	if !ok || !hok {
		return errors.New("no measured window")
	}
	var all, half []float64
	for i := range 2 {
		ref := Ref{ScenarioTwo, SystemQP(i + 1), OpWrite, WriteSize, 0, MetricGoodput}
		g := gbps(a, b, i)
		all = append(all, g)
		half = append(half, gbps(ha, hb, i))
		r.res.add(ref, UnitGbps, g)
		ref.Metric = MetricShare
		r.res.add(ref, UnitRatio, g*1e9/float64(o.Rate))
		r.qpFigures(ref, a, b, i)
	}
	allRef := Ref{ScenarioTwo, SystemAll, OpWrite, WriteSize, 0, MetricJain}
	j := Jain(half)
	r.res.add(allRef, UnitRatio, j)
	allRef.Metric = MetricShare
	r.res.add(allRef, UnitRatio, (all[0]+all[1])*1e9/float64(o.Rate))
	r.bottleneckDrops(ScenarioTwo, bed, before, 0)
	r.progress("two    QP1 %.3f QP2 %.3f Gbit/s; second half %.3f / %.3f, Jain %.3f", all[0], all[1], half[0], half[1], j)
	return nil
}

// tcp: one QP and one iperf3 TCP flow through the bottleneck, started together; both are
// measured over the same window.
func (r *runner) tcp(ctx context.Context, bed *testbed.Bed, p *pair) error {
	o := r.o
	before, err := bed.BottleneckStats()
	if err != nil {
		return err
	}
	total := o.Warmup + o.Duration
	ictx, cancel := context.WithTimeout(ctx, total+30*time.Second)
	defer cancel()
	ip, err := startIperf(ictx, bed, total, o.Sample)
	if err != nil {
		return err
	}
	defer ip.stop()
	r.res.Header.Modes[SystemTCP] = "iperf3 -c (host A) to iperf3 -s -1 (host B), one TCP stream, the kernel's default congestion control, through the same router and bottleneck"
	s, err := p.pump(ctx, p.flows[:1], []time.Duration{0}, total, o)
	if err != nil {
		return err
	}
	iv, err := ip.wait()
	if err != nil {
		return err
	}
	a, b, ok := window(s, int64(o.Warmup), -1)
	if !ok {
		return errors.New("no measured window")
	}
	tg, span, ok := tcpGoodput(iv, o.Warmup.Seconds(), total.Seconds())
	if !ok {
		return fmt.Errorf("iperf3 reported no interval within [%v, %v]", o.Warmup, total)
	}
	qg := gbps(a, b, 0)
	ref := Ref{ScenarioTCP, SystemNDK, OpWrite, WriteSize, 0, MetricGoodput}
	r.res.add(ref, UnitGbps, qg)
	ref.Metric = MetricShare
	r.res.add(ref, UnitRatio, qg*1e9/float64(o.Rate))
	r.qpFigures(ref, a, b, 0)
	tref := Ref{ScenarioTCP, SystemTCP, OpTCP, 0, 0, MetricGoodput}
	r.res.add(tref, UnitGbps, tg)
	tref.Metric = MetricShare
	r.res.add(tref, UnitRatio, tg*1e9/float64(o.Rate))
	r.bottleneckDrops(ScenarioTCP, bed, before, 0)
	r.progress("tcp    QP %.3f Gbit/s, TCP %.3f Gbit/s (iperf3 intervals over %.2f s)", qg, tg, span)
	return nil
}

// loss: one QP through the bottleneck without loss, then with the router dropping
// o.RouterLoss at random in both directions; the ratio of the two goodputs.
func (r *runner) loss(ctx context.Context, bed *testbed.Bed, p *pair) (err error) {
	o := r.o
	l := pct(o.RouterLoss)
	lossless, err := r.oneQP(ctx, p, ScenarioLoss, 0, o.Rate)
	if err != nil {
		return fmt.Errorf("lossless: %w", err)
	}
	before, err := bed.BottleneckStats()
	if err != nil {
		return err
	}
	toB0, toA0, err := bed.RouterLoss()
	if err != nil {
		return err
	}
	if err := bed.SetRouterLoss(o.RouterLoss, o.RouterLoss); err != nil {
		return err
	}
	defer func() {
		if cerr := bed.SetRouterLoss(0, 0); cerr != nil && err == nil {
			err = cerr
		}
	}()
	g, err := r.oneQP(ctx, p, ScenarioLoss, l, o.Rate)
	if err != nil {
		return fmt.Errorf("%g%% loss: %w", l, err)
	}
	r.res.add(Ref{ScenarioLoss, SystemNDK, OpWrite, WriteSize, l, MetricRatio}, UnitRatio, g/lossless)
	r.bottleneckDrops(ScenarioLoss, bed, before, l)
	if toB, toA, err := bed.RouterLoss(); err == nil {
		r.res.add(Ref{ScenarioLoss, SystemPath, OpWrite, WriteSize, l, MetricDrops}, UnitCount,
			float64(toB.Dropped-toB0.Dropped+toA.Dropped-toA0.Dropped))
	}
	r.progress("loss   %g%%: ratio %.3f", l, g/lossless)
	return nil
}

// xdp: on the plain bed, one QP without loss, then with both hosts' XDP programs dropping
// each rate of o.XDPLosses; ratios to lossless and the timer's share of the retransmissions.
func (r *runner) xdp(ctx context.Context, bed *testbed.Bed) (err error) {
	o := r.o
	p, err := openPair(bed, 1, o.Outstanding)
	if err != nil {
		return err
	}
	defer p.close()
	r.res.Header.Modes["plain"] = fmt.Sprintf("plain bed A - B (%v -> %v), no bottleneck, bpf.Program.SetFaultDrop on both hosts' XDP programs; ", bed.A.Addr, bed.B.Addr) + p.modes()
	progs := []*bpf.Program{p.a.Device().Program(), p.b.Device().Program()}
	defer func() {
		for _, pr := range progs {
			_ = pr.SetFaultDrop(0, 0)
		}
	}()
	for rep := range o.Runs {
		if err := r.xdpRun(ctx, p, progs, rep); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("run %d: %w", rep+1, err)
		}
	}
	return nil
}

// xdpRun is one run of the xdp scenario: lossless, then each loss rate.
func (r *runner) xdpRun(ctx context.Context, p *pair, progs []*bpf.Program, rep int) error {
	o := r.o
	lossless, err := r.oneQP(ctx, p, ScenarioXDP, 0, 0)
	if err != nil {
		return fmt.Errorf("lossless: %w", err)
	}
	for i, prob := range o.XDPLosses {
		if ctx.Err() != nil {
			return nil
		}
		l := pct(prob)
		d0 := xdpDropped(p)
		for k, pr := range progs {
			if err := pr.SetFaultDrop(prob, uint64(1000*rep+100*i+k+1)); err != nil {
				return err
			}
		}
		g, err := r.oneQP(ctx, p, ScenarioXDP, l, 0)
		for _, pr := range progs {
			_ = pr.SetFaultDrop(0, 0)
		}
		if err != nil {
			return fmt.Errorf("%g%% loss: %w", l, err)
		}
		r.res.add(Ref{ScenarioXDP, SystemNDK, OpWrite, WriteSize, l, MetricRatio}, UnitRatio, g/lossless)
		r.res.add(Ref{ScenarioXDP, SystemPath, OpWrite, WriteSize, l, MetricDrops}, UnitCount, float64(xdpDropped(p)-d0))
		r.progress("xdp    %g%%: ratio %.3f", l, g/lossless)
	}
	return nil
}

// xdpDropped returns what both hosts' XDP programs have dropped on purpose so far.
func xdpDropped(p *pair) uint64 {
	var n uint64
	for _, d := range []*xdp.Device{p.a.Device(), p.b.Device()} {
		if c, err := d.Program().Counters(); err == nil {
			n += c.FaultDropped
		}
	}
	return n
}

// vethDrops returns the packets the kernel dropped on receive or transmit at every veth end
// of bed (the router's included), as `ip -s link` counts them; unreadable counters count 0.
func vethDrops(bed *testbed.Bed) uint64 {
	hosts := []*testbed.Host{bed.A, bed.B}
	if bed.R != nil {
		hosts = append(hosts, bed.R.A, bed.R.B)
	}
	var n uint64
	for _, h := range hosts {
		if c, err := h.LinkCounters(); err == nil {
			n += c.RxDropped + c.TxDropped
		}
	}
	return n
}

// definitionNotes are the header notes that define the figures.
func definitionNotes(o Options) []string {
	return []string{
		"host A writes to host B: 64 KiB RDMA Writes from A's UMEM into a 1 MiB region of B's, Outstanding per QP reposted as they complete; goodput (gbit_per_s) = Write bytes completed in the window x 8 / window",
		fmt.Sprintf("every scenario runs %d times on the same bed, the scenarios interleaved; value = median of the runs, a ratio's runs are ratios within a run", o.Runs),
		fmt.Sprintf("every scenario: %v warm-up, then the %v window; counters (tx_pkts, retransmits, timeouts) are A's QP's over the window, srtt_us and cwnd_bytes its estimates at the window's end", o.Warmup, o.Duration),
		"share = goodput / bottleneck rate; jain = (sum x)^2 / (n sum x^2) of the QPs' goodputs over the second half of the two-QP window",
		"loss: the router's tc BPF classifiers (internal/tcloss) drop at random on its egress in both directions (data towards B, acknowledgements towards A); ratio = lossy / lossless goodput, measured one after the other on the same QP",
		"xdp: both hosts' XDP programs drop each of our datagrams they receive at random (both directions); rto_share = QPStats.RTORetransmits / Retransmits: the share of retransmissions the timer caused (the rest: SACK/RACK loss detection, tail probes, RNR)",
		"tcp: iperf3 server intervals (received bytes) within the window, the QP and iperf3 started together",
		"drops: bottleneck = packets tbf dropped with its queue full; path = packets the loss programs dropped; links = datagrams both AF_XDP sockets dropped on receipt (Link.Stats().RxDropped); veth = the kernel's receive and transmit drops at every veth end (ip -s link); retransmissions beyond these are spurious",
	}
}
