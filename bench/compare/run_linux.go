//go:build linux

package compare

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/bench/linkbench"
	"github.com/xdpndk/xdpndk/bench/longpath"
	"github.com/xdpndk/xdpndk/bench/tools"
	"github.com/xdpndk/xdpndk/internal/testbed"
)

// BedOptions returns the bed of a run of runs repetitions: two namespaces joined by a veth
// pair, MTU 9000, static neighbours, and 1 + runs queues per veth end: queue 0 carries
// xdpndk and the raw xdpndk link; each repetition's asavie/xdp sockets take a queue of
// their own, since they stay bound until the process exits (bench/linkbench).
func BedOptions(runs int) testbed.Options {
	return testbed.Options{MTU: linkbench.BedMTU, Queues: max(2, 1+runs), Name: "compare", StaticNeighbors: true}
}

// Run measures every system of o on a bed of its own (BedOptions), which it removes at
// the end, also when ctx is cancelled or a measurement fails. It needs root. See RunBed.
func Run(ctx context.Context, opts Options) (*Results, error) {
	o, err := opts.normalize()
	if err != nil {
		return nil, err
	}
	return testbed.With(BedOptions(o.Runs), func(bed *testbed.Bed) (*Results, error) { return RunBed(ctx, bed, o) })
}

// RunBed measures every system of o on bed, which the caller owns and closes: a plain bed
// with MTU 9000, no XDP program attached, and at least 1 + Runs queues per veth end
// (BedOptions). Without Options.Ndkpeer it first builds cmd/ndkpeer (go build) into a
// temporary directory, removed at the end. Everything it starts is stopped before it
// returns; the asavie/xdp sockets stay bound to their queues until the process exits
// (bench/linkbench).
//
// It returns the results gathered even when err is not nil: a failed measurement is
// recorded in the header's notes (report.FailedNote) and its figures stay without runs
// where no repetition gave them; the others are still measured.
func RunBed(ctx context.Context, bed *testbed.Bed, opts Options) (*Results, error) {
	o, err := opts.normalize()
	if err != nil {
		return nil, err
	}
	if q, err := queueCount(bed); err != nil {
		return nil, err
	} else if q < 1+o.Runs {
		return nil, fmt.Errorf("%w: the bed has %d queues per veth end, %d repetitions need %d (BedOptions)", ErrInvalidOptions, q, o.Runs, 1+o.Runs)
	}
	r := &runner{o: o, bed: bed, start: time.Now(), col: newCollector(), modes: map[string]string{}, rtt: map[rttKey]float64{}}
	r.bin = o.Ndkpeer
	if r.bin == "" {
		dir, err := os.MkdirTemp("", "compare-ndkpeer-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		r.progress("building cmd/ndkpeer into %s", dir)
		if r.bin, err = buildNdkpeer(ctx, dir); err != nil {
			return nil, err
		}
	}
	return r.run(ctx)
}

// queueCount returns the RX queues of B's veth end.
func queueCount(bed *testbed.Bed) (int, error) {
	n := 0
	err := bed.B.Do(func() error {
		l, err := netlink.LinkByName(bed.B.Ifname)
		if err != nil {
			return err
		}
		n = l.Attrs().NumRxQueues
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("read the queue count of %s: %w", bed.B.Ifname, err)
	}
	return n, nil
}

// buildNdkpeer builds cmd/ndkpeer (statically, as its tests do) into dir.
func buildNdkpeer(ctx context.Context, dir string) (string, error) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("build ndkpeer: the go command is not on PATH (give -ndkpeer BINARY): %w", err)
	}
	bin := filepath.Join(dir, "ndkpeer")
	cmd := exec.CommandContext(ctx, gobin, "build", "-o", bin, "github.com/xdpndk/xdpndk/cmd/ndkpeer")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build cmd/ndkpeer (run from the xdpndk module, or give -ndkpeer BINARY): %v\n%s", err, out)
	}
	return bin, nil
}

// rttKey names a round trip remembered to size fi_pingpong's next runs.
type rttKey struct {
	system string
	size   int
}

// runner is one Run's state.
type runner struct {
	o     Options
	bed   *testbed.Bed
	bin   string // ndkpeer
	start time.Time
	col   *collector
	modes map[string]string
	notes []string
	errs  []error
	rtt   map[rttKey]float64 // fi_pingpong's last round trip per system and size, µs
	// versions are the tools' versions (qperf, iperf3, sockperf, libfabric)
	versions map[string]string
	// the long paths' records and goals (bench/longpath)
	lpRecords []report.Record
	lpGoals   []report.Goal

	rep   int    // the repetition under way (0-based)
	pos   string // "i/n" of the system in the repetition
	where string // the system under way
}

// run measures every repetition and returns the results.
func (r *runner) run(ctx context.Context) (*Results, error) {
	vctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	v, verr := tools.ToolVersions(vctx)
	cancel()
	if verr != nil {
		r.notes = append(r.notes, "tool versions: "+verr.Error())
	}
	r.versions = map[string]string{"qperf": v.Qperf, "iperf3": v.Iperf3, "sockperf": v.Sockperf, "libfabric": v.Libfabric}
	ndkVersion := r.ndkpeerVersion(ctx)
	for rep := range r.o.Runs {
		order := Order(r.o.Systems, rep)
		for i, sys := range order {
			if ctx.Err() != nil {
				break
			}
			r.rep, r.pos, r.where = rep, fmt.Sprintf("%d/%d", i+1, len(order)), sys
			r.progress("%s", "start")
			r.system(ctx, rep, sys)
		}
	}
	if r.o.LongPath && ctx.Err() == nil {
		r.longPath(ctx)
	}
	res := r.results(v, ndkVersion)
	if ctx.Err() != nil {
		return res, fmt.Errorf("compare interrupted: %w", ctx.Err())
	}
	return res, errors.Join(r.errs...)
}

// system measures one system's turn in a repetition.
func (r *runner) system(ctx context.Context, rep int, sys string) {
	switch sys {
	case SystemXDPNDK, SystemXDPNDKEvents:
		r.ndkpeerTurn(ctx, rep, sys)
	case SystemRawXDPNDK, SystemRawAsavie:
		r.linkTurn(ctx, rep, sys)
	case SystemQperfTCP:
		r.qperfTurn(ctx, rep)
	case SystemIperf3TCP:
		r.iperf3Turn(ctx, rep)
	case SystemSockperfUDP, SystemSockperfUDPPoll:
		r.sockperfTurn(ctx, rep, sys == SystemSockperfUDPPoll)
	case SystemFabricTCP, SystemFabricUDPRxd:
		r.fabricTurn(ctx, rep, sys)
	}
}

// progress writes a line on Options.Progress: the time since the start, the repetition,
// the system's place in it, the system and what happened.
func (r *runner) progress(format string, args ...any) {
	if r.o.Progress == nil {
		return
	}
	el := time.Since(r.start).Round(100 * time.Millisecond)
	if r.where == "" || r.pos == "" {
		fmt.Fprintf(r.o.Progress, "[%7s] %s%s\n", el, prefix(r.where), fmt.Sprintf(format, args...))
		return
	}
	fmt.Fprintf(r.o.Progress, "[%7s] rep %d/%d %5s %-17s %s\n", el, r.rep+1, r.o.Runs, r.pos, r.where, fmt.Sprintf(format, args...))
}

// measure runs one measurement of the current system: fn returns its figures (and may
// return some with an error). A failure is noted (report.FailedNote), the figures it
// should have given (expect) are kept without this repetition's value, and the run goes
// on.
func (r *runner) measure(ctx context.Context, what string, expect []figure, fn func() ([]figure, error)) {
	if ctx.Err() != nil {
		return
	}
	t0 := time.Now()
	figs, err := fn()
	r.col.add(r.rep, figs...)
	took := time.Since(t0).Round(10 * time.Millisecond)
	if err != nil {
		if ctx.Err() != nil {
			r.progress("%s: interrupted", what)
			return
		}
		r.col.failed(expect...)
		err = fmt.Errorf("%s %s, repetition %d: %w", r.where, what, r.rep+1, err)
		r.notes = append(r.notes, report.FailedNote(err))
		r.errs = append(r.errs, err)
		r.progress("%s: FAILED after %v: %s", what, took, firstLine(err.Error()))
		return
	}
	if len(figs) == 0 {
		r.progress("%s (%v)", what, took)
		return
	}
	r.progress("%s (%v): %s", what, took, summarize(figs))
}

// firstLine returns s up to its first newline.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// expect returns the figures a measurement gives at each size, as placeholders for a
// failure (fig's value unused).
func expect(scenario, system, op string, sizes []int, params map[string]float64, metrics ...string) []figure {
	var out []figure
	for _, s := range sizes {
		for _, m := range metrics {
			out = append(out, fig(scenario, system, op, s, params, m, 0, ""))
		}
	}
	return out
}

// summarize describes figures in a progress line: the headline metrics of the smallest
// size, 64 KiB and the largest.
func summarize(figs []figure) string {
	var sizes []int
	for _, f := range figs {
		if !slices.Contains(sizes, f.ref.Size) {
			sizes = append(sizes, f.ref.Size)
		}
	}
	slices.Sort(sizes)
	show := sizes
	if len(sizes) > 3 {
		show = []int{sizes[0]}
		if slices.Contains(sizes, 64<<10) {
			show = append(show, 64<<10)
		}
		show = append(show, sizes[len(sizes)-1])
	}
	var parts []string
	for _, s := range show {
		var ms []string
		for _, f := range figs {
			if f.ref.Size != s {
				continue
			}
			switch f.ref.Metric {
			case report.MetricRTTP50:
				ms = append(ms, "p50 "+report.FormatValue(f.value)+" us")
			case report.MetricRTTMean:
				ms = append(ms, "mean "+report.FormatValue(f.value)+" us")
			case report.MetricMsgRate:
				ms = append(ms, report.FormatValue(f.value)+" msg/s")
			case report.MetricGbps:
				ms = append(ms, report.FormatValue(f.value)+" Gbit/s")
			case report.MetricCPUMsg:
				ms = append(ms, "CPU "+report.FormatValue(f.value)+" us/msg")
			case report.MetricUnsup:
				ms = append(ms, "unsupported")
			}
		}
		parts = append(parts, sizeName(s)+" "+strings.Join(ms, ", "))
	}
	if len(sizes) > len(show) {
		return fmt.Sprintf("%d sizes: %s", len(sizes), strings.Join(parts, "; "))
	}
	return strings.Join(parts, "; ")
}

// linkTurn measures the raw link (bench/linkbench, in this process): 64 B ping-pong, 64 B
// and 9000 B one-way, with the process's CPU.
func (r *runner) linkTurn(ctx context.Context, rep int, sys string) {
	lo := linkbench.DefaultOptions()
	lo.Systems = []string{sys}
	lo.Sizes = []int{64, linkbench.BedMTU}
	lo.Runs = 1
	lo.Duration, lo.Warmup = r.o.LinkWindow, r.o.LinkWarmup
	lo.PingPongN, lo.PingPongWarmup, lo.PingPongTimeout = r.o.LinkPingPongN, r.o.LinkPingPongN/10, 30*time.Second
	lo.AsavieQueue = 1 + rep
	exp := append(expect(ScenarioPingPong, sys, OpPingPong, []int{linkbench.PingSize}, nil, report.MetricRTTP50, report.MetricRTTP99, report.MetricRTTMean),
		expect(ScenarioStream, sys, OpSend, lo.Sizes, nil, report.MetricMsgRate, report.MetricGbps)...)
	r.measure(ctx, "ping-pong 64 B, one-way 64 and 9000 B (bench/linkbench)", exp, func() ([]figure, error) {
		res, err := linkbench.RunBed(ctx, r.bed, lo)
		if res == nil {
			return nil, err
		}
		if m := res.Header.Modes[sys]; m != "" {
			r.modes[sys] = "bench/linkbench " + sys + ": " + m
		}
		figs, ferr := linkFigures(sys, res)
		return figs, errors.Join(err, ferr)
	})
}

// qperfTurn measures qperf's tcp_lat and tcp_bw at every size, then tcp_lat under an
// iperf3 stream.
func (r *runner) qperfTurn(ctx context.Context, rep int) {
	sys := SystemQperfTCP
	d := r.o.ToolTime
	for _, size := range r.o.Sizes {
		r.measure(ctx, fmt.Sprintf("tcp_lat %s", sizeName(size)), expect(ScenarioPingPong, sys, OpPingPong, []int{size}, nil, report.MetricRTTMean),
			func() ([]figure, error) {
				res, err := tools.RunQperfLat(ctx, r.bed, tools.QperfTCP, size, d)
				if err != nil {
					return nil, err
				}
				return qperfLatFigures(res, CPUSizes), nil
			})
	}
	for _, size := range r.o.Sizes {
		r.measure(ctx, fmt.Sprintf("tcp_bw -m %s", sizeName(size)), expect(ScenarioStream, sys, OpSend, []int{size}, nil, report.MetricMsgRate, report.MetricGbps),
			func() ([]figure, error) {
				res, err := tools.RunQperfBW(ctx, r.bed, tools.QperfTCP, size, d)
				if err != nil {
					return nil, err
				}
				return qperfBWFigures(res, CPUSizes), nil
			})
	}
	p := loadParams(LoadSize)
	exp := append(expect(ScenarioLoaded, sys, OpPingPong, []int{PingSize}, p, report.MetricRTTMean),
		expect(ScenarioLoaded, SystemIperf3TCP, OpSend, []int{LoadSize}, p, report.MetricGbps)...)
	r.measure(ctx, fmt.Sprintf("tcp_lat %d B while iperf3 streams %s", PingSize, sizeName(LoadSize)), exp, func() ([]figure, error) {
		return r.tcpLoaded(ctx)
	})
	r.modes[sys] = "qperf " + r.version("qperf") + ": tcp_lat -m SIZE (ping-pong, one message in flight) and tcp_bw -m SIZE (A sends, B receives), " +
		fmt.Sprintf("-t %v each", d)
}

// tcpLoaded runs qperf's tcp_lat of PingSize bytes while iperf3 streams LoadSize-byte
// writes over another connection: iperf3 starts a second before qperf and ends a second
// after it.
func (r *runner) tcpLoaded(ctx context.Context) ([]figure, error) {
	type out struct {
		res *tools.Iperf3
		err error
	}
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan out, 1)
	go func() {
		res, err := tools.RunIperf3(ictx, r.bed, LoadSize, 1, r.o.LoadTime+2*time.Second)
		done <- out{res, err}
	}()
	select {
	case <-time.After(time.Second):
	case o := <-done:
		return nil, fmt.Errorf("iperf3 ended before the ping-pong: %v", o.err)
	}
	lat, lerr := tools.RunQperfLat(ctx, r.bed, tools.QperfTCP, PingSize, r.o.LoadTime)
	if lerr != nil {
		cancel()
	}
	o := <-done
	if lerr != nil {
		return nil, fmt.Errorf("qperf tcp_lat: %w", lerr)
	}
	if o.err != nil {
		return nil, fmt.Errorf("iperf3: %w", o.err)
	}
	return tcpLoadedFigures(lat, o.res), nil
}

// iperf3Turn measures iperf3's bulk TCP at every write size of Iperf3Sizes.
func (r *runner) iperf3Turn(ctx context.Context, rep int) {
	sys := SystemIperf3TCP
	for _, size := range r.o.Iperf3Sizes {
		r.measure(ctx, fmt.Sprintf("-l %s", sizeName(size)), expect(ScenarioStream, sys, OpSend, []int{size}, nil, report.MetricMsgRate, report.MetricGbps),
			func() ([]figure, error) {
				res, err := tools.RunIperf3(ctx, r.bed, size, 1, r.o.ToolTime)
				if err != nil {
					return nil, err
				}
				if res.Congestion != "" {
					r.modes[sys] = fmt.Sprintf("iperf3 %s: one TCP stream A -> B, congestion control %s, -l SIZE, -t %v", res.Version, res.Congestion, r.o.ToolTime)
				}
				return iperf3Figures(res, CPUSizes), nil
			})
	}
}

// sockperfTurn measures sockperf's ping-pong and throughput over UDP at every size of
// SockperfSizes, blocking or polling; the sizes of Sizes UDP cannot carry are recorded as
// unsupported.
func (r *runner) sockperfTurn(ctx context.Context, rep int, polling bool) {
	sys := sockperfSystem(polling)
	for _, size := range r.o.SockperfSizes {
		r.measure(ctx, fmt.Sprintf("ping-pong %s", sizeName(size)), expect(ScenarioPingPong, sys, OpPingPong, []int{size}, nil, report.MetricRTTP50, report.MetricRTTP99, report.MetricRTTMean),
			func() ([]figure, error) {
				res, err := tools.RunSockperfPingPong(ctx, r.bed, size, r.o.ToolTime, polling)
				if err != nil {
					return nil, err
				}
				return sockperfPingPongFigures(res, CPUSizes), nil
			})
	}
	for _, size := range r.o.SockperfSizes {
		r.measure(ctx, fmt.Sprintf("throughput %s", sizeName(size)), expect(ScenarioStream, sys, OpSend, []int{size}, nil, report.MetricMsgRate, report.MetricGbps),
			func() ([]figure, error) {
				res, err := tools.RunSockperfThroughput(ctx, r.bed, size, r.o.ToolTime, polling)
				if err != nil {
					return nil, err
				}
				return sockperfThroughputFigures(res, CPUSizes), nil
			})
	}
	why := fmt.Sprintf("UDP carries at most %d bytes of payload", tools.SockperfMaxSize)
	for _, size := range r.o.Sizes {
		if size > tools.SockperfMaxSize {
			r.col.add(rep, unsupported(ScenarioPingPong, sys, OpPingPong, size, why), unsupported(ScenarioStream, sys, OpSend, size, why))
		}
	}
	how := "blocking sockets"
	if polling {
		how = "--nonblocked on both sides: they spin on recvfrom of a non-blocking socket"
	}
	r.modes[sys] = fmt.Sprintf("sockperf %s over UDP, %s, -t %v (plus about 2 s of the client's warm-up idle per run)", r.version("sockperf"), how, r.o.ToolTime)
}

// fabricTurn measures fi_pingpong over system's provider at every size of FabricSizes,
// its iterations chosen to take about FabricTarget (FabricCPUTarget at the CPU sizes) from
// the round trip last measured at that size, else the previous size's.
func (r *runner) fabricTurn(ctx context.Context, rep int, sys string) {
	fab, _ := Fabric(sys)
	prev, prevSize := 0.0, 0
	for _, size := range r.o.FabricSizes {
		if why := tools.FabricSupport(fab, size); why != "" {
			r.col.add(rep, unsupported(ScenarioPingPong, sys, OpPingPong, size, why))
			continue
		}
		iters := r.fabricIterations(sys, size, prev, prevSize)
		r.measure(ctx, fmt.Sprintf("fi_pingpong %s x%d", sizeName(size), iters), expect(ScenarioPingPong, sys, OpPingPong, []int{size}, nil, report.MetricRTTMean),
			func() ([]figure, error) {
				res, err := tools.RunFabricPingPong(ctx, r.bed, fab, size, iters)
				if errors.Is(err, tools.ErrUnsupported) && res != nil {
					return []figure{unsupported(ScenarioPingPong, sys, OpPingPong, size, res.Unsupported)}, nil
				}
				if err != nil {
					return nil, err
				}
				r.rtt[rttKey{sys, size}] = res.RTTUS
				prev, prevSize = res.RTTUS, size
				return fabricFigures(sys, res, CPUSizes), nil
			})
	}
	r.modes[sys] = fmt.Sprintf("libfabric %s fi_pingpong -p %q -e %s (both sides poll their completion queue); iterations chosen to take about %v (%v at the CPU sizes)",
		r.version("libfabric"), fab.Provider, fab.Endpoint, r.o.FabricTarget, r.o.FabricCPUTarget)
}

// fabricIterations returns the iterations of fi_pingpong of sys at size (fabricIters):
// its target time over the round trip measured at that size in an earlier repetition,
// else over the previous size's (prev µs at prevSize) grown.
func (r *runner) fabricIterations(sys string, size int, prev float64, prevSize int) int {
	target := r.o.FabricTarget
	if wantCPU(size, CPUSizes) {
		target = r.o.FabricCPUTarget
	}
	known, ok := r.rtt[rttKey{sys, size}]
	return fabricIters(target, size, known, ok, prev, prevSize)
}

// version returns a tool's version as ToolVersions reported it at the start.
func (r *runner) version(tool string) string {
	if v, ok := r.versions[tool]; ok && v != "" {
		return v
	}
	return "(version unknown)"
}

// results assembles what the run measured so far.
func (r *runner) results(v tools.Versions, ndkVersion string) *Results {
	modes := maps.Clone(r.modes)
	for _, sys := range []string{SystemXDPNDK, SystemXDPNDKEvents} {
		if m, ok := modes[sys]; ok {
			modes[sys] = ndkVersion + "; " + m
		}
	}
	notes := slices.Clone(r.notes)
	notes = append(notes, fmt.Sprintf("tools: qperf %s, iperf3 %s, sockperf %s, libfabric %s (providers %s); %s",
		v.Qperf, v.Iperf3, v.Sockperf, v.Libfabric, strings.Join(v.FabricProviders, ", "), ndkVersion))
	records := append(r.col.records(), r.lpRecords...)
	goals := r.lpGoals
	if r.o.LongPath && goals == nil { // not run (interrupted): its goals unevaluated
		goals = longPathGoals(nil, r.o.LongPathRTTs, r.o.LongPathOps)
	}
	return newResults(r.o, r.start, time.Since(r.start), BedOptions(r.o.Runs).Queues, modes, notes, records, goals...)
}

// longPath runs bench/longpath (a routed bed of its own, with a delay line) with this
// run's ndkpeer, and keeps its records, goals and notes.
func (r *runner) longPath(ctx context.Context) {
	r.where, r.pos = "longpath", ""
	lo := longpath.DefaultOptions()
	lo.RTTs, lo.Ops, lo.Runs = r.o.LongPathRTTs, r.o.LongPathOps, r.o.LongPathRuns
	lo.Duration, lo.Skip, lo.Rate = r.o.LongPathDuration, r.o.LongPathSkip, r.o.LongPathRate
	lo.Ndkpeer, lo.Progress = r.bin, r.o.Progress
	r.progress("bench/longpath: %v at %g Gbit/s, %s, %d run(s) of %v", lo.RTTs, float64(lo.Rate)/1e9, strings.Join(lo.Ops, ", "), lo.Runs, lo.Duration)
	t0 := time.Now()
	res, err := longpath.Run(ctx, lo)
	if res != nil {
		r.lpRecords = longPathRecords(res)
		r.notes = append(r.notes, longPathNotes(res)...)
	}
	r.lpGoals = longPathGoals(res, lo.RTTs, lo.Ops)
	if err != nil && ctx.Err() == nil {
		err = fmt.Errorf("bench/longpath: %w", err)
		if res == nil { // otherwise its notes say what failed
			r.notes = append(r.notes, report.FailedNote(err))
		}
		r.errs = append(r.errs, err)
	}
	r.progress("done in %v: %d records", time.Since(t0).Round(time.Second), len(r.lpRecords))
	r.notes = append(r.notes, fmt.Sprintf("long paths: bench/longpath, %d run(s) of %v (the first %v cut) per path and operation: a routed bed, the router a delay line of %g Gbit/s, MTU %d; ndkpeer (this build) -s %d, iperf3 one TCP stream",
		lo.Runs, lo.Duration, lo.Skip, float64(lo.Rate)/1e9, longpath.MTU, longpath.MessageSize))
}

// prefix is where's prefix of a progress line: "where: ", or nothing.
func prefix(where string) string {
	if where == "" {
		return ""
	}
	return where + ": "
}
