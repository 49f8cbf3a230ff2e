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

	"github.com/xdpndk/xdpndk/cmd/ndkpeer/internal/proto"
	"github.com/xdpndk/xdpndk/internal/plumb"
	"github.com/xdpndk/xdpndk/ndk"
)

// The client's measurement loop: one goroutine, locked to its thread, posts the test's
// operations on every QP and polls every CQ (with ProgressInline, GetResults on an empty CQ
// runs the engine, so nothing else needs a thread). Latency tests keep one operation
// outstanding per QP; bandwidth tests keep --tx-depth.

// ctxOp is the request context of the measured operations (ctxRecv, the server's, marks the
// receives of send-lat's echoes here too).
const ctxOp = 2

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
}

func newRunner(s *session) *runner {
	r := &runner{s: s, kind: s.o.kind, qps: s.qps, window: 1}
	r.rsgl[0] = s.mr.SGE(s.buf[:s.o.sizes[len(s.o.sizes)-1]])
	return r
}

// latResult is one size's latency line.
type latResult struct {
	Bytes      int     `json:"bytes"`
	Iterations int     `json:"iterations"`
	MinUS      float64 `json:"min_us"`
	P50US      float64 `json:"p50_us"`
	P99US      float64 `json:"p99_us"`
	P999US     float64 `json:"p99_9_us"`
	MaxUS      float64 `json:"max_us"`
	MeanUS     float64 `json:"mean_us"`
	// Retransmits is what the client's QPs sent again during the size's run.
	Retransmits uint64 `json:"retransmits"`
}

// bwResult is one size's bandwidth line.
type bwResult struct {
	Bytes      int     `json:"bytes"`
	Iterations int64   `json:"iterations"`
	Seconds    float64 `json:"seconds"`
	Gbps       float64 `json:"gbit_per_s"`
	Mmsgs      float64 `json:"mmsg_per_s"`
	// Outstanding is the operations kept outstanding per QP.
	Outstanding int `json:"outstanding"`
	// Retransmits is what the client's QPs sent again during the size's run.
	Retransmits uint64 `json:"retransmits"`
}

// interval is one second of a -D run.
type interval struct {
	Bytes      int     `json:"bytes"`
	StartS     float64 `json:"start_s"`
	EndS       float64 `json:"end_s"`
	Iterations int64   `json:"iterations"`
	Gbps       float64 `json:"gbit_per_s,omitempty"`
	Mmsgs      float64 `json:"mmsg_per_s,omitempty"`
	P50US      float64 `json:"p50_us,omitempty"`
	P99US      float64 `json:"p99_us,omitempty"`
	MaxUS      float64 `json:"max_us,omitempty"`
}

// sizeResult is what measure returns for one size.
type sizeResult struct {
	lat latResult
	bw  bwResult
	// the client QPs' transport counters during the size's run (warm-up included)
	retx retxCounts
}

// retxCounts are a QP's retransmission counters (transport.QPStats), summed.
type retxCounts struct {
	retransmits, timeouts, byTimer, spurious, probes, needless uint64
}

// sub returns c - o, counter by counter.
func (c retxCounts) sub(o retxCounts) retxCounts {
	return retxCounts{c.retransmits - o.retransmits, c.timeouts - o.timeouts, c.byTimer - o.byTimer,
		c.spurious - o.spurious, c.probes - o.probes, c.needless - o.needless}
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
	samples []int32 // latency samples, ns (saturating)
	first   int64   // first post
	last    int64   // last counted completion
	end     int64   // -D: when the window ended
}

// measure runs one size: warm operations uncounted, then iters operations (or the
// duration, reporting each second to onInterval), and returns the result. The loop runs on
// a thread of its own.
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
	}()
	if warm > 0 {
		if _, err := r.phase(size, int64(warm), 0, false, nil); err != nil {
			return res, fmt.Errorf("warm-up at %d bytes: %w", size, err)
		}
	}
	if !r.kind.Latency() {
		r.window = r.s.o.depthForPath(size, r.pathRTT(), lineRate(r.s.n.ifi.Name))
	}
	t, err := r.phase(size, int64(iters), dur, true, onInterval)
	if err != nil {
		return res, fmt.Errorf("%s of %d bytes: %w", r.kind.Op(), size, err)
	}
	if r.kind.Latency() {
		res.lat = summarize(size, t.samples)
		return res, nil
	}
	secs := float64(t.last-t.first) / 1e9
	if dur > 0 {
		secs = float64(t.end-t.first) / 1e9
	}
	res.bw = bwResult{Bytes: size, Iterations: t.ops, Seconds: secs, Outstanding: r.window}
	if secs > 0 {
		res.bw.Gbps = float64(t.ops) * float64(size) * 8 / secs / 1e9
		res.bw.Mmsgs = float64(t.ops) / secs / 1e6
	}
	return res, nil
}

// errPeerGone is the failure of a run whose server went away.
var errPeerGone = errors.New("the server closed the connection")

// phase posts ops operations (or, with dur, as many as fit in it) of size bytes over the
// QPs and waits for every one to complete. With record it counts them.
func (r *runner) phase(size int, ops int64, dur time.Duration, record bool, onInterval func(interval)) (tally, error) {
	var t tally
	if record && r.kind.Latency() {
		t.samples = make([]int32, 0, min(max(ops, 1024), 1<<24))
	}
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
	start := clock()
	t.first = start
	var end, nextIv int64
	if dur > 0 {
		end = start + int64(dur)
		nextIv = start + int64(time.Second)
	}
	var ivOps int64
	ivStart, ivSample := start, 0
	lastProgress := start
	var posted int64
	posting, counting := true, record
	emit := func(now int64) {
		iv := interval{Bytes: size, StartS: float64(ivStart-start) / 1e9, EndS: float64(now-start) / 1e9, Iterations: ivOps}
		if secs := float64(now-ivStart) / 1e9; secs > 0 && !r.kind.Latency() {
			iv.Gbps = float64(ivOps) * float64(size) * 8 / secs / 1e9
			iv.Mmsgs = float64(ivOps) / secs / 1e6
		}
		if r.kind.Latency() && len(t.samples) > ivSample {
			seg := slices.Clone(t.samples[ivSample:])
			slices.Sort(seg)
			iv.P50US, iv.P99US = us(percentile(seg, 50)), us(percentile(seg, 99))
			iv.MaxUS = us(seg[len(seg)-1])
		}
		if onInterval != nil {
			onInterval(iv)
		}
		ivStart, ivOps, ivSample = now, 0, len(t.samples)
	}
	for it := 0; ; it++ {
		now := clock()
		if posting && ((ops > 0 && posted >= ops) || (end > 0 && now >= end) || r.stop.Load()) {
			posting = false
		}
		if counting && end > 0 && now >= end {
			counting = false
			t.end = now
			if record && now > ivStart && ivOps > 0 {
				emit(now)
			}
		}
		if counting && end > 0 && now >= nextIv {
			emit(now)
			nextIv += int64(time.Second)
		}
		if posting {
			for _, q := range r.qps {
				for q.out < r.window && (ops == 0 || posted < ops) {
					q.t0 = clock()
					if err := post(q); err != nil {
						if ndk.StatusOf(err) == ndk.StatusInsufficientResources {
							break // the initiator queue is full: completions first
						}
						return t, fmt.Errorf("post: %w", err)
					}
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
			n := q.cq.GetResults(r.res[:])
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
						err = fmt.Errorf("the receive of the echo completed with %v", res.Status)
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
				}
				q.out--
				if counting {
					t.ops++
					ivOps++
					t.last = now
					if t.samples != nil {
						t.samples = append(t.samples, int32(min(now-q.t0, math.MaxInt32)))
					}
				}
			}
			clear(r.res[:n]) // drop the context references
		}
		if !posting && r.idle() {
			if t.end == 0 {
				t.end = clock()
			}
			return t, nil
		}
		if !busy {
			if it&255 == 0 {
				now := clock()
				for _, q := range r.qps {
					if q.gone.Load() {
						return t, r.failure(errPeerGone, ndk.StatusConnectionDisconnected)
					}
				}
				if now-lastProgress > timeout {
					return t, failWrap(exitTimeout, ndk.StatusIOTimeout, "no completion for %v: the server stopped answering (STATUS_IO_TIMEOUT)", r.s.o.timeout)
				}
			}
			if r.s.n.cfg.progress != ndk.ProgressInline {
				runtime.Gosched()
			}
		}
	}
}

// idle reports whether nothing is outstanding on any QP.
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
