//go:build linux

package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/xdpndk/xdpndk/cmd/ndkpeer/internal/hist"
	"github.com/xdpndk/xdpndk/cmd/ndkpeer/internal/proto"
	"github.com/xdpndk/xdpndk/internal/plumb"
	"github.com/xdpndk/xdpndk/ndk"
)

// The client's measurement loop: one goroutine, locked to its thread, posts the test's
// operations on every QP and polls every CQ (with ProgressInline, GetResults on an empty CQ
// runs the engine, so nothing else needs a thread). Latency tests keep one operation
// outstanding per QP; bandwidth tests keep --tx-depth.

// ctxOp is the request context of the measured operations (ctxRecv, the server's, marks the
// receives of send-lat's echoes here too); ctxLoad that of --load's.
const (
	ctxOp   = 2
	ctxLoad = 3
)

// clockBase anchors clock: a time with a monotonic reading.
var clockBase = time.Now()

// clock returns monotonic nanoseconds (time.Since reads only the monotonic clock).
func clock() int64 { return int64(time.Since(clockBase)) }

// runner measures one session's QPs.
type runner struct {
	s      *session
	kind   proto.Kind
	qps    []*qpRun
	window int
	stop   atomic.Bool
	res    [64]ndk.Result
	sgl    [1]ndk.SGE
	rsgl   [1]ndk.SGE

	// --load: its QP (nil without), the operations it keeps outstanding, its SGE
	load      *qpRun
	loadDepth int
	lsgl      [1]ndk.SGE

	ev      *eventWaiter // -e: the epoll set of the CQs; nil when polling
	ctl     *ctlClient   // the control connection (--cpu-util, -b), or nil
	revRecv bool         // send-bw -b: our receives take the server's Sends
	// Latency of a duration run's window and of its current interval: fixed memory
	// whatever the run's length (-n runs keep every sample instead).
	total, ivh *hist.Histogram
	ivq        []pendingIv // intervals awaiting the server's counters (at most 2)
}

func newRunner(s *session) (*runner, error) {
	r := &runner{s: s, kind: s.o.kind, qps: s.qps, window: 1, ctl: s.ctl, revRecv: s.o.revRecvs() > 0,
		total: new(hist.Histogram), ivh: new(hist.Histogram), ivq: make([]pendingIv, 0, 2)}
	r.rsgl[0] = s.mr.SGE(s.buf[:s.o.sizes[len(s.o.sizes)-1]])
	if s.load != nil {
		r.load, r.loadDepth = s.load, s.o.loadDepth()
		r.lsgl[0] = s.loadMR.SGE(s.loadBuf[:s.o.loadSize])
	}
	if s.o.events {
		cqs := make([]*ndk.CQ, 0, len(s.qps)+2)
		for _, q := range s.qps {
			cqs = append(cqs, q.cq)
		}
		if r.load != nil {
			cqs = append(cqs, r.load.cq)
		}
		if s.ctl != nil {
			cqs = append(cqs, s.ctl.cq)
		}
		ev, err := newEventWaiter(cqs)
		if err != nil {
			return nil, fmt.Errorf("-e: %w", err)
		}
		r.ev = ev
	}
	return r, nil
}

// polls reports whether the client polls: without -e, or with an engine goroutine that
// never sleeps (--progress busy).
func (r *runner) polls() bool { return r.ev == nil || r.s.n.cfg.progress == ndk.ProgressBusy }

// close releases the event waiter.
func (r *runner) close() {
	if r.ev != nil {
		r.ev.close()
	}
}

// latResult is one size's latency line. The _us figures are ndkpeer's measure (the
// document's latency_timed says which); the perftest_ ones are the same figures in
// perftest's convention (× perftest_factor: ib_send_lat and ib_write_lat report half a
// round trip, ib_read_lat a whole Read).
type latResult struct {
	Bytes      int     `json:"bytes"`
	Iterations int     `json:"iterations"`
	Seconds    float64 `json:"seconds"`
	MsgPerS    float64 `json:"msg_per_s"`
	MinUS      float64 `json:"min_us"`
	P50US      float64 `json:"p50_us"`
	P99US      float64 `json:"p99_us"`
	P999US     float64 `json:"p99_9_us"`
	MaxUS      float64 `json:"max_us"`
	MeanUS     float64 `json:"mean_us"`

	PerftestFactor    float64 `json:"perftest_factor"`
	PerftestMinUS     float64 `json:"perftest_t_min_us"`
	PerftestTypicalUS float64 `json:"perftest_t_typical_us"`
	PerftestAvgUS     float64 `json:"perftest_t_avg_us"`
	PerftestP99US     float64 `json:"perftest_t_p99_us"`
	PerftestP999US    float64 `json:"perftest_t_p99_9_us"`
	PerftestMaxUS     float64 `json:"perftest_t_max_us"`

	// Retransmits is what the client's QPs sent again during the size's run, and why.
	Retransmits      uint64   `json:"retransmits"`
	RetransmitCauses retxJSON `json:"retransmit_causes"`
	CPU              cpuJSON  `json:"cpu"`

	// --load: the stream beside the latency test over the measured window (its verb, its
	// message size, what it kept outstanding, what completed, its payload rate); "" and 0
	// without --load.
	LoadOp          string  `json:"load_op"`
	LoadBytes       int     `json:"load_bytes"`
	LoadOutstanding int     `json:"load_outstanding"`
	LoadIterations  int64   `json:"load_iterations"`
	LoadGbps        float64 `json:"load_gbit_per_s"`
	LoadMsgPerS     float64 `json:"load_msg_per_s"`
}

// bwResult is one size's bandwidth line: the client's direction, with -b the server's
// (reverse_: server to client, as the server counted it over its window) and the sum.
type bwResult struct {
	Bytes      int     `json:"bytes"`
	Iterations int64   `json:"iterations"`
	Seconds    float64 `json:"seconds"`
	Gbps       float64 `json:"gbit_per_s"`
	Mmsgs      float64 `json:"mmsg_per_s"`
	MsgPerS    float64 `json:"msg_per_s"`
	// Outstanding is the operations kept outstanding per QP.
	Outstanding int `json:"outstanding"`

	ReverseIterations int64   `json:"reverse_iterations"`
	ReverseSeconds    float64 `json:"reverse_seconds"`
	ReverseGbps       float64 `json:"reverse_gbit_per_s"`
	ReverseMmsgs      float64 `json:"reverse_mmsg_per_s"`
	SumGbps           float64 `json:"sum_gbit_per_s"`
	SumMmsgs          float64 `json:"sum_mmsg_per_s"`

	// Retransmits is what the client's QPs sent again during the size's run, and why.
	Retransmits      uint64   `json:"retransmits"`
	RetransmitCauses retxJSON `json:"retransmit_causes"`
	CPU              cpuJSON  `json:"cpu"`
}

// interval is one second of a -D run. Every field is always there: 0 when nothing
// completed in the interval, or when the run does not measure it (latency fields of a
// bandwidth test, reverse_ without -b, cpu.measured false without --cpu-util).
type interval struct {
	Bytes      int     `json:"bytes"`
	StartS     float64 `json:"start_s"`
	EndS       float64 `json:"end_s"`
	Iterations int64   `json:"iterations"`
	MsgPerS    float64 `json:"msg_per_s"`
	Gbps       float64 `json:"gbit_per_s"`
	Mmsgs      float64 `json:"mmsg_per_s"`
	// latency tests: ndkpeer's measure, and p50 in perftest's convention
	P50US             float64 `json:"p50_us"`
	P99US             float64 `json:"p99_us"`
	MaxUS             float64 `json:"max_us"`
	PerftestTypicalUS float64 `json:"perftest_t_typical_us"`
	// -b: the server's direction over the server's side of the interval, and the sum
	ReverseIterations int64   `json:"reverse_iterations"`
	ReverseGbps       float64 `json:"reverse_gbit_per_s"`
	ReverseMmsgs      float64 `json:"reverse_mmsg_per_s"`
	SumGbps           float64 `json:"sum_gbit_per_s"`
	SumMmsgs          float64 `json:"sum_mmsg_per_s"`
	CPU               cpuJSON `json:"cpu"`
}

// cpuJSON is --cpu-util's figures over a window: each side's CPU time (getrusage
// RUSAGE_SELF: the whole process) per message in µs and as a share of a core (CPU seconds
// per second), and whether the side polls (a polling side spends its whole core whatever
// the rate). Messages is what the per-message figures divide by: the operations counted,
// of both directions with -b (a send-lat iteration, a round trip, is one).
type cpuJSON struct {
	Measured       bool    `json:"measured"`
	Messages       int64   `json:"messages"`
	ClientUSPerMsg float64 `json:"client_us_per_msg"`
	ServerUSPerMsg float64 `json:"server_us_per_msg"`
	BothUSPerMsg   float64 `json:"both_us_per_msg"`
	ClientCores    float64 `json:"client_cores"`
	ServerCores    float64 `json:"server_cores"`
	BothCores      float64 `json:"both_cores"`
	ClientUserS    float64 `json:"client_user_s"`
	ClientSysS     float64 `json:"client_sys_s"`
	ServerUserS    float64 `json:"server_user_s"`
	ServerSysS     float64 `json:"server_sys_s"`
	ClientPolls    bool    `json:"client_polls"`
	ServerPolls    bool    `json:"server_polls"`
}

// cpuFigures computes cpuJSON: the client's CPU over clientNs of wall time, the server's
// (user, sys) over serverNs, for msgs messages. Nothing divides by zero.
func cpuFigures(client cpuTimes, clientNs int64, server cpuTimes, serverNs int64, msgs int64, clientPolls, serverPolls bool) cpuJSON {
	c := cpuJSON{Measured: true, Messages: msgs, ClientPolls: clientPolls, ServerPolls: serverPolls,
		ClientUserS: float64(client.user) / 1e9, ClientSysS: float64(client.sys) / 1e9,
		ServerUserS: float64(server.user) / 1e9, ServerSysS: float64(server.sys) / 1e9}
	if msgs > 0 {
		c.ClientUSPerMsg = float64(client.total()) / 1e3 / float64(msgs)
		c.ServerUSPerMsg = float64(server.total()) / 1e3 / float64(msgs)
		c.BothUSPerMsg = c.ClientUSPerMsg + c.ServerUSPerMsg
	}
	if clientNs > 0 {
		c.ClientCores = float64(client.total()) / float64(clientNs)
	}
	if serverNs > 0 {
		c.ServerCores = float64(server.total()) / float64(serverNs)
	}
	c.BothCores = c.ClientCores + c.ServerCores
	return c
}

// perftestFactor is what turns a latency test's figures into perftest's convention:
// ib_send_lat and ib_write_lat report half of a ping-pong's round trip, ib_read_lat the
// whole Read.
func perftestFactor(k proto.Kind) float64 {
	if k == proto.KindReadLat {
		return 1
	}
	return 0.5
}

// withPerftest fills the perftest_ figures of l.
func withPerftest(l latResult, k proto.Kind) latResult {
	f := perftestFactor(k)
	l.PerftestFactor = f
	l.PerftestMinUS, l.PerftestTypicalUS, l.PerftestAvgUS = l.MinUS*f, l.P50US*f, l.MeanUS*f
	l.PerftestP99US, l.PerftestP999US, l.PerftestMaxUS = l.P99US*f, l.P999US*f, l.MaxUS*f
	return l
}

// sizeResult is what measure returns for one size.
type sizeResult struct {
	lat latResult
	bw  bwResult
	// the client QPs' transport counters during the size's run (warm-up included)
	retx retxCounts
	// rate is the rate asked (--rate), 0 unpaced
	rate int64
	// sleeps is how often an -e run slept on a notification or timer
	sleeps int64
}

// retxCounts are a QP's retransmission counters (transport.QPStats), summed.
type retxCounts struct {
	retransmits, timeouts, byTimer, spurious, probes, needless, byLoss, byRNR uint64
}

// sub returns c - o, counter by counter.
func (c retxCounts) sub(o retxCounts) retxCounts {
	return retxCounts{c.retransmits - o.retransmits, c.timeouts - o.timeouts, c.byTimer - o.byTimer,
		c.spurious - o.spurious, c.probes - o.probes, c.needless - o.needless, c.byLoss - o.byLoss, c.byRNR - o.byRNR}
}

// retxJSON is why the client's QPs sent packets again during a size's run: the causes of
// its retransmits (transport.QPStats).
type retxJSON struct {
	Loss             uint64 `json:"loss"`              // found lost by loss detection (SACK, RACK)
	Timer            uint64 `json:"timer"`             // sent by a retransmission timeout
	Timeouts         uint64 `json:"timeouts"`          // retransmission timeouts that expired
	SpuriousTimeouts uint64 `json:"spurious_timeouts"` // of them, undone: the original had arrived
	TailProbes       uint64 `json:"tail_probes"`       // tail loss probes
	NeedlessProbes   uint64 `json:"needless_probes"`   // of them, for packets that had arrived
	RNR              uint64 `json:"rnr"`               // sent again after an RNR wait
}

// json returns the causes of c as the JSON document has them.
func (c retxCounts) json() retxJSON {
	return retxJSON{Loss: c.byLoss, Timer: c.byTimer, Timeouts: c.timeouts, SpuriousTimeouts: c.spurious,
		TailProbes: c.probes, NeedlessProbes: c.needless, RNR: c.byRNR}
}

// transportCounters sums the QPs' retransmission counters.
func (r *runner) transportCounters() (c retxCounts) {
	for _, q := range r.qps {
		st := plumb.QP(q.qp).Stats()
		c.retransmits += st.Retransmits
		c.timeouts += st.Timeouts
		c.byTimer += st.RTORetransmits
		c.spurious += st.SpuriousTimeouts
		c.probes += st.TailProbes
		c.needless += st.NeedlessProbes
		c.byLoss += st.LossRetransmits
		c.byRNR += st.RNRRetransmits
	}
	return c
}

// pathRTT is the largest smoothed round trip of the QPs (after the warm-up: the path's).
func (r *runner) pathRTT() time.Duration {
	var rtt int64
	for _, q := range r.qps {
		rtt = max(rtt, plumb.QP(q.qp).Stats().SRTT)
	}
	return time.Duration(rtt)
}

// lineRate is the speed the interface reports (/sys/class/net/NAME/speed, Mbit/s, as the
// namespace the program runs in sees it), or defaultLineRate when it reports none.
func lineRate(ifname string) float64 {
	b, err := os.ReadFile("/sys/class/net/" + ifname + "/speed")
	if err != nil {
		return defaultLineRate
	}
	mbps, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || mbps <= 0 {
		return defaultLineRate
	}
	return float64(mbps) * 1e6
}

// tally is what one phase counted.
type tally struct {
	ops     int64
	samples []int32 // -n latency samples, ns (saturating); duration runs use runner.total
	first   int64   // first post
	last    int64   // last counted completion
	end     int64   // when counting ended (the -D window's end, or the last completion)
	cpu     cpuTimes
	// srv is the server's counters at the window's end (control connection), zero without
	srv proto.CtlMsg
	// loadOps is --load's operations completed in the window
	loadOps int64
}

// phaseSpec is one phase of a size: the warm-up (record false) or the measured window.
type phaseSpec struct {
	size       int
	ops        int64         // operations to post; 0 with a duration or until the stop
	dur        time.Duration // the window; 0 with ops or until the stop
	infinite   bool          // until runner.stop (-D 0)
	record     bool
	onInterval func(interval)
}

// pendingIv is an interval whose client figures are known and whose server figures come
// with the answer to a control command.
type pendingIv struct {
	iv       interval
	client   cpuTimes // the client's CPU over it
	clientNs int64
}

// measure runs one size: warm operations uncounted, then iters operations (or the
// duration, or until the stop, reporting each second to onInterval), and returns the
// result. The loop runs on a thread of its own.
func (r *runner) measure(size, iters int, dur time.Duration, warm int, onInterval func(interval)) (sizeResult, error) {
	type out struct {
		res sizeResult
		err error
	}
	done := make(chan out, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var o out
		o.res, o.err = r.measureLocked(size, iters, dur, warm, onInterval)
		done <- o
	}()
	o := <-done
	return o.res, o.err
}

func (r *runner) measureLocked(size, iters int, dur time.Duration, warm int, onInterval func(interval)) (res sizeResult, err error) {
	r.window = r.s.o.depthFor(size)
	c0 := r.transportCounters()
	defer func() {
		res.retx = r.transportCounters().sub(c0)
		res.lat.Retransmits, res.bw.Retransmits = res.retx.retransmits, res.retx.retransmits
		res.lat.RetransmitCauses, res.bw.RetransmitCauses = res.retx.json(), res.retx.json()
	}()
	if warm > 0 {
		if _, err := r.phase(phaseSpec{size: size, ops: int64(warm)}); err != nil {
			return res, fmt.Errorf("warm-up at %d bytes: %w", size, err)
		}
	}
	if !r.kind.Latency() {
		r.window = r.s.o.depthForPath(size, r.pathRTT(), lineRate(r.s.n.ifi.Name))
		if r.s.o.bidir {
			// The server sized its QPs for the depth it was told (maxDepth) before the path
			// was measured, and runs its direction at ours: stay within it.
			r.window = min(r.window, r.s.o.maxDepth())
		}
	}
	var sleeps0 int64
	if r.ev != nil {
		sleeps0 = r.ev.sleeps
	}
	o := &r.s.o
	t, err := r.phase(phaseSpec{size: size, ops: int64(iters), dur: dur, infinite: o.infinite, record: true, onInterval: onInterval})
	if err != nil {
		return res, fmt.Errorf("%s of %d bytes: %w", r.kind.Op(), size, err)
	}
	res.rate = o.rate
	if r.ev != nil {
		res.sleeps = r.ev.sleeps - sleeps0
	}
	windowNs := t.end - t.first
	var cpu cpuJSON
	if o.cpuUtil {
		msgs := t.ops + int64(t.srv.Ops)
		cpu = cpuFigures(t.cpu, windowNs, cpuTimes{int64(t.srv.UserNs), int64(t.srv.SysNs)}, int64(t.srv.ElapsedNs),
			msgs, r.polls(), t.srv.Flags&proto.CtlPolls != 0)
	}
	if r.kind.Latency() {
		if t.samples != nil {
			res.lat = summarize(size, t.samples)
		} else {
			res.lat = summarizeHist(size, r.total)
		}
		secs := float64(t.last-t.first) / 1e9
		if dur > 0 || o.infinite {
			secs = float64(windowNs) / 1e9
		}
		res.lat.Seconds = secs
		if secs > 0 {
			res.lat.MsgPerS = float64(t.ops) / secs
		}
		res.lat = withPerftest(res.lat, r.kind)
		res.lat.CPU = cpu
		if r.load != nil {
			l := &res.lat
			l.LoadOp, l.LoadBytes, l.LoadOutstanding, l.LoadIterations = r.s.o.loadKind.Op(), r.s.o.loadSize, r.loadDepth, t.loadOps
			if windowNs > 0 {
				l.LoadMsgPerS = float64(t.loadOps) / (float64(windowNs) / 1e9)
				l.LoadGbps = l.LoadMsgPerS * float64(r.s.o.loadSize) * 8 / 1e9
			}
		}
		return res, nil
	}
	secs := float64(t.last-t.first) / 1e9
	if dur > 0 || o.infinite {
		secs = float64(windowNs) / 1e9
	}
	b := bwResult{Bytes: size, Iterations: t.ops, Seconds: secs, Outstanding: r.window, CPU: cpu}
	if secs > 0 {
		b.Gbps = float64(t.ops) * float64(size) * 8 / secs / 1e9
		b.MsgPerS = float64(t.ops) / secs
		b.Mmsgs = b.MsgPerS / 1e6
	}
	if o.bidir {
		b.ReverseIterations = int64(t.srv.Ops)
		b.ReverseSeconds = float64(t.srv.ElapsedNs) / 1e9
		if b.ReverseSeconds > 0 {
			b.ReverseGbps = float64(t.srv.Ops) * float64(size) * 8 / b.ReverseSeconds / 1e9
			b.ReverseMmsgs = float64(t.srv.Ops) / b.ReverseSeconds / 1e6
		}
	}
	b.SumGbps, b.SumMmsgs = b.Gbps+b.ReverseGbps, b.Mmsgs+b.ReverseMmsgs
	res.bw = b
	return res, nil
}

// errPeerGone is the failure of a run whose server went away.
var errPeerGone = errors.New("the server closed the connection")

// take polls q's CQ (Poll: it also clears the CQ's FD for -e and reports the end of the
// connection).
func (r *runner) take(q *qpRun) (int, error) {
	n, err := q.cq.Poll(r.res[:])
	if err != nil {
		var ce *ndk.ConnectionEnded
		if errors.As(err, &ce) {
			return 0, r.failure(errPeerGone, ndk.StatusConnectionDisconnected)
		}
		return 0, fmt.Errorf("poll the CQ: %w", err)
	}
	return n, nil
}

// room reports whether some QP may post now (window and count allowing).
func (r *runner) room(ops, posted int64) bool {
	if ops > 0 && posted >= ops {
		return false
	}
	for _, q := range r.qps {
		if q.out < r.window {
			return true
		}
	}
	return false
}

// phase posts the phase's operations over the QPs and waits for every one to complete.
// With record it counts them, paces them (--rate), reports intervals, and, with a control
// connection, opens and closes the server's window (CtlStart, CtlSample, CtlStop).
func (r *runner) phase(sp phaseSpec) (tally, error) {
	var t tally
	size, ops, dur := sp.size, sp.ops, sp.dur
	lat := r.kind.Latency()
	exact := sp.record && lat && ops > 0
	if exact {
		t.samples = make([]int32, 0, min(max(ops, 1024), 1<<24))
	}
	r.total.Reset()
	r.ivh.Reset()
	r.ivq = r.ivq[:0]
	op := r.kind.Op()
	flags := ndk.OpFlags(0)
	if r.s.o.inlineSize > 0 && size <= r.s.o.inlineSize && op != "Read" {
		flags = ndk.OpInline
	}
	r.sgl[0] = r.s.mr.SGE(r.s.buf[:size])
	post := func(q *qpRun) error {
		switch op {
		case "Send":
			return q.qp.Send(ctxOp, r.sgl[:], flags)
		case "Write":
			return q.qp.Write(ctxOp, r.sgl[:], q.raddr, q.rtok, flags)
		}
		return q.qp.Read(ctxOp, r.sgl[:], q.raddr, q.rtok, 0)
	}
	sendLat := r.kind == proto.KindSendLat
	timeout := int64(r.s.o.timeout)
	ctl := r.ctl
	if !sp.record {
		ctl = nil
	}
	var srvPrev proto.CtlMsg // the server's counters at the current interval's start
	if ctl != nil {
		m := proto.CtlMsg{Op: proto.CtlStart}
		if r.s.o.bidir {
			m.Flags, m.Kind, m.Size, m.Depth, m.Rate = proto.CtlReverse, r.kind, uint32(size), uint16(r.window), uint64(r.s.o.rate)
		}
		if _, err := ctl.call(m, r.s.o.timeout); err != nil {
			return t, err
		}
	}
	start := clock()
	t.first = start
	var end, nextIv int64
	if dur > 0 {
		end = start + int64(dur)
	}
	intervals := sp.record && (dur > 0 || sp.infinite)
	if intervals {
		nextIv = start + int64(time.Second)
	}
	var pace pacer
	if sp.record {
		pace = newPacer(r.s.o.rate, start)
	}
	var cpu0, ivCPU cpuTimes
	if sp.record {
		cpu0 = processCPU()
		ivCPU = cpu0
	}
	var ivOps int64
	ivStart := start
	lastProgress := start
	var posted int64
	posting, counting := true, sp.record
	stopSent, stopDone := false, ctl == nil
	// closeIv ends the current interval at now; with a control connection its server
	// figures come with the answer to the command it posts (final: CtlStop).
	closeIv := func(now int64) {
		iv := interval{Bytes: size, StartS: float64(ivStart-start) / 1e9, EndS: float64(now-start) / 1e9, Iterations: ivOps}
		if secs := float64(now-ivStart) / 1e9; secs > 0 {
			iv.MsgPerS = float64(ivOps) / secs
			iv.Mmsgs = iv.MsgPerS / 1e6
			iv.Gbps = float64(ivOps) * float64(size) * 8 / secs / 1e9
		}
		if lat && r.ivh.Count() > 0 {
			iv.P50US, iv.P99US = float64(r.ivh.Percentile(50))/1e3, float64(r.ivh.Percentile(99))/1e3
			iv.MaxUS = float64(r.ivh.Max()) / 1e3
			iv.PerftestTypicalUS = iv.P50US * perftestFactor(r.kind)
		}
		iv.SumGbps, iv.SumMmsgs = iv.Gbps, iv.Mmsgs
		cpuNow := processCPU()
		p := pendingIv{iv: iv, client: cpuNow.sub(ivCPU), clientNs: now - ivStart}
		ivStart, ivOps, ivCPU = now, 0, cpuNow
		r.ivh.Reset()
		if ctl == nil { // no server figures to wait for (--cpu-util and -b open the connection)
			sp.onInterval(p.iv)
			return
		}
		r.ivq = append(r.ivq, p)
	}
	// answered completes the oldest pending interval with the server's counters m.
	answered := func(m proto.CtlMsg) {
		if len(r.ivq) == 0 {
			srvPrev = m
			return
		}
		p := r.ivq[0]
		copy(r.ivq, r.ivq[1:])
		r.ivq = r.ivq[:len(r.ivq)-1]
		d := proto.CtlMsg{Ops: m.Ops - srvPrev.Ops, ElapsedNs: m.ElapsedNs - srvPrev.ElapsedNs,
			UserNs: m.UserNs - srvPrev.UserNs, SysNs: m.SysNs - srvPrev.SysNs}
		srvPrev = m
		iv := &p.iv
		if r.s.o.bidir {
			iv.ReverseIterations = int64(d.Ops)
			if secs := float64(d.ElapsedNs) / 1e9; secs > 0 {
				iv.ReverseGbps = float64(d.Ops) * float64(size) * 8 / secs / 1e9
				iv.ReverseMmsgs = float64(d.Ops) / secs / 1e6
			}
			iv.SumGbps, iv.SumMmsgs = iv.Gbps+iv.ReverseGbps, iv.Mmsgs+iv.ReverseMmsgs
		}
		if r.s.o.cpuUtil {
			iv.CPU = cpuFigures(p.client, p.clientNs, cpuTimes{int64(d.UserNs), int64(d.SysNs)}, int64(d.ElapsedNs),
				iv.Iterations+int64(d.Ops), r.polls(), m.Flags&proto.CtlPolls != 0)
		}
		sp.onInterval(*iv)
	}
	// endCounting closes the window at now.
	endCounting := func(now int64) {
		counting = false
		t.end = now
		t.cpu = processCPU().sub(cpu0)
		if intervals && now > ivStart {
			closeIv(now)
		}
	}
	for it := 0; ; it++ {
		now := clock()
		stopNow := r.stop.Load()
		if posting && ((ops > 0 && posted >= ops) || (end > 0 && now >= end) || stopNow) {
			posting = false
		}
		if counting && ((end > 0 && now >= end) || stopNow) {
			endCounting(now)
		}
		if counting && intervals && now >= nextIv && (ctl == nil || ctl.pending == 0) {
			closeIv(now)
			if ctl != nil {
				if err := ctl.post(proto.CtlMsg{Op: proto.CtlSample}); err != nil {
					return t, err
				}
			}
			nextIv += int64(time.Second)
			for nextIv <= now { // a long stall: no empty intervals to catch up
				nextIv += int64(time.Second)
			}
		}
		if posting && r.load != nil {
			if err := r.postLoad(); err != nil {
				return t, err
			}
		}
		if posting {
			for _, q := range r.qps {
				for q.out < r.window && (ops == 0 || posted < ops) && pace.due(now) {
					// A latency test times each request from its own post; a bandwidth
					// test's posts of one round share the round's clock, which costs a
					// tenth of a small message to read on a VM.
					q.t0 = now
					if lat {
						q.t0 = clock()
					}
					if err := post(q); err != nil {
						if ndk.StatusOf(err) == ndk.StatusInsufficientResources {
							break // the initiator queue is full: completions first
						}
						return t, fmt.Errorf("post: %w", err)
					}
					pace.took(q.t0)
					lastProgress = q.t0
					q.out++
					posted++
					if sendLat {
						q.sends++
					}
				}
			}
		}
		busy := false
		for _, q := range r.qps {
			n, err := r.take(q)
			if err != nil {
				return t, err
			}
			if n == 0 {
				continue
			}
			busy = true
			now := clock()
			lastProgress = now
			for j := range r.res[:n] {
				res := &r.res[j]
				if res.Status != ndk.StatusSuccess {
					err := fmt.Errorf("%s completed with %v", op, res.Status)
					if c, _ := res.RequestContext.(int); c == ctxRecv {
						err = fmt.Errorf("a receive completed with %v", res.Status)
					}
					return t, r.failure(err, res.Status)
				}
				c, _ := res.RequestContext.(int)
				if sendLat && c == ctxOp {
					q.sends--
					continue
				}
				if c == ctxRecv {
					if err := q.qp.Receive(ctxRecv, r.rsgl[:]); err != nil {
						return t, fmt.Errorf("post receive: %w", err)
					}
					if r.revRecv {
						continue // the server's Send of -b: counted by the server
					}
				}
				q.out--
				if counting {
					t.ops++
					ivOps++
					t.last = now
					d := now - q.t0
					if t.samples != nil {
						t.samples = append(t.samples, int32(min(d, math.MaxInt32)))
					} else if lat {
						r.total.Record(d)
						r.ivh.Record(d)
					}
				}
			}
			clear(r.res[:n]) // drop the context references
		}
		if r.load != nil {
			n, err := r.takeLoad(counting, &t)
			if err != nil {
				return t, err
			}
			if n > 0 {
				busy = true
				lastProgress = clock()
			}
		}
		if counting && !posting && ops > 0 && r.idle() { // -n: the window ends at the last completion
			endCounting(clock())
		}
		if ctl != nil && (ctl.pending != 0 || !counting) {
			if ctl.pending != 0 {
				m, ok, err := ctl.poll()
				if err != nil {
					return t, err
				}
				if ok {
					busy = true
					if m.Op == proto.CtlCounters && stopSent {
						t.srv, stopDone = m, true
					}
					answered(m)
				}
			}
			if !counting && !stopSent && ctl.pending == 0 {
				if err := ctl.post(proto.CtlMsg{Op: proto.CtlStop}); err != nil {
					return t, err
				}
				stopSent = true
			}
		}
		if !posting && !counting && stopDone && r.idle() && r.loadIdle() {
			if t.end == 0 {
				t.end = clock()
			}
			return t, nil
		}
		if busy {
			continue
		}
		if it&255 == 0 || r.ev != nil {
			now := clock()
			for _, q := range r.qps {
				if q.gone.Load() {
					return t, r.failure(errPeerGone, ndk.StatusConnectionDisconnected)
				}
			}
			if r.load != nil && r.load.gone.Load() {
				return t, r.failure(fmt.Errorf("--load: %w", errPeerGone), ndk.StatusConnectionDisconnected)
			}
			if now-lastProgress > timeout && !(r.idle() && r.loadIdle()) {
				return t, failWrap(exitTimeout, ndk.StatusIOTimeout, "no completion for %v: the server stopped answering (STATUS_IO_TIMEOUT)", r.s.o.timeout)
			}
			if ctl != nil && ctl.overdue(now, r.s.o.timeout) {
				return t, failWrap(exitTimeout, ndk.StatusIOTimeout, "the server did not answer %v within %v (STATUS_IO_TIMEOUT)", ctlName(ctl.pending), r.s.o.timeout)
			}
		}
		if r.ev != nil {
			if posting && r.room(ops, posted) && pace.due(now) {
				continue // post before sleeping
			}
			wake := now + int64(100*time.Millisecond)
			if posting && r.room(ops, posted) {
				wake = min(wake, pace.next)
			}
			if counting && intervals {
				wake = min(wake, nextIv)
			}
			if counting && end > 0 {
				wake = min(wake, end)
			}
			if err := r.ev.wait(time.Duration(wake - clock())); err != nil {
				return t, err
			}
			continue
		}
		if r.s.n.cfg.progress != ndk.ProgressInline {
			runtime.Gosched()
		}
	}
}

// postLoad fills --load's window: its Writes (or Reads) are not paced and not timed.
func (r *runner) postLoad() error {
	q := r.load
	for q.out < r.loadDepth {
		var err error
		if r.s.o.loadKind == proto.KindWriteBW {
			err = q.qp.Write(ctxLoad, r.lsgl[:], q.raddr, q.rtok, 0)
		} else {
			err = q.qp.Read(ctxLoad, r.lsgl[:], q.raddr, q.rtok, 0)
		}
		if ndk.StatusOf(err) == ndk.StatusInsufficientResources {
			return nil // the initiator queue is full: completions first
		}
		if err != nil {
			return fmt.Errorf("--load: post: %w", err)
		}
		q.out++
	}
	return nil
}

// takeLoad takes --load's completions, counting them in t while counting.
func (r *runner) takeLoad(counting bool, t *tally) (int, error) {
	q := r.load
	n, err := r.take(q)
	if err != nil {
		return 0, fmt.Errorf("--load: %w", err)
	}
	for j := range r.res[:n] {
		if st := r.res[j].Status; st != ndk.StatusSuccess {
			return 0, r.failure(fmt.Errorf("--load: a %s completed with %v", r.s.o.loadKind.Op(), st), st)
		}
		q.out--
		if counting {
			t.loadOps++
		}
	}
	clear(r.res[:n])
	return n, nil
}

// loadIdle reports whether --load has nothing outstanding (true without --load).
func (r *runner) loadIdle() bool { return r.load == nil || r.load.out == 0 }

// idle reports whether nothing is outstanding on any of the test's QPs.
func (r *runner) idle() bool {
	for _, q := range r.qps {
		if q.out > 0 || q.sends > 0 {
			return false
		}
	}
	return true
}

// failure maps a failed completion to the user's error.
func (r *runner) failure(err error, st ndk.Status) error {
	switch st {
	case ndk.StatusIOTimeout:
		return failWrap(exitTimeout, err, "%v: the server stopped answering", err)
	case ndk.StatusConnectionDisconnected:
		return failWrap(exitFailed, err, "%v (did it stop?)", err)
	}
	return err
}

// us converts nanoseconds to microseconds.
func us(ns int32) float64 { return float64(ns) / 1e3 }

// percentile returns the p-th percentile of sorted by the nearest-rank method (the
// smallest sample with at least p percent of the samples at or below it), as
// bench/ndkbench computes its figures. The rank is rounded with a tolerance, so that a
// percentile like 99.9, which has no exact binary value, does not round up a whole rank.
func percentile(sorted []int32, p float64) int32 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p*float64(len(sorted))/100 - 1e-9))
	return sorted[max(1, min(rank, len(sorted)))-1]
}

// summarizeHist returns the latency line of size from a histogram: min, max and mean
// exact, percentiles within hist.RelativeError.
func summarizeHist(size int, h *hist.Histogram) latResult {
	l := latResult{Bytes: size, Iterations: int(h.Count())}
	if h.Count() == 0 {
		return l
	}
	ns := func(v int64) float64 { return float64(v) / 1e3 }
	l.MinUS, l.MaxUS = ns(h.Min()), ns(h.Max())
	l.P50US, l.P99US, l.P999US = ns(h.Percentile(50)), ns(h.Percentile(99)), ns(h.Percentile(99.9))
	l.MeanUS = h.Mean() / 1e3
	return l
}

// summarize sorts samples (ns) and returns the latency line of size.
func summarize(size int, samples []int32) latResult {
	l := latResult{Bytes: size, Iterations: len(samples)}
	if len(samples) == 0 {
		return l
	}
	slices.Sort(samples)
	var sum float64
	for _, v := range samples {
		sum += float64(v)
	}
	l.MinUS, l.MaxUS = us(samples[0]), us(samples[len(samples)-1])
	l.P50US, l.P99US, l.P999US = us(percentile(samples, 50)), us(percentile(samples, 99)), us(percentile(samples, 99.9))
	l.MeanUS = sum / float64(len(samples)) / 1e3
	return l
}
