package workload

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/faultlink"
	"github.com/xdpndk/xdpndk/internal/plumb"
	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/ndk"
	"github.com/xdpndk/xdpndk/transport"
)

// kaPeriod is the keepalive tests' KeepAlive.
const kaPeriod = 3 * time.Second

// kaSlack is what TestKeepAliveKilledIdlePeer allows beyond KeepAlive: the QP fails at the
// end of the period of silence (measured from the last packet heard, before the kill), and
// the engine and the waiting goroutines may run late on the shared 2-CPU machine.
const kaSlack = time.Second

// cqOf is a CQ of the initiator and the QP whose connection event it must report.
type cqOf struct {
	name string
	cq   *ndk.CQ
	qp   *ndk.QP
}

// initiatorCQs lists every CQ of in with its QP: each data connection's initiator and
// receive CQs, the control connection's.
func initiatorCQs(in *Initiator) []cqOf {
	var l []cqOf
	for _, c := range in.conns {
		l = append(l, cqOf{fmt.Sprintf("data %d initiator CQ", c.idx), c.icq, c.qp},
			cqOf{fmt.Sprintf("data %d receive CQ", c.idx), c.rcq, c.qp})
	}
	return append(l, cqOf{"control initiator CQ", in.ctl.icq, in.ctl.qp}, cqOf{"control receive CQ", in.ctl.rcq, in.ctl.qp})
}

// cqWatch is what one CQ.Wait loop saw: results by status, then the connection event (or
// the error that ended the loop) and when it came.
type cqWatch struct {
	cqOf
	statuses map[ndk.Status]int
	ended    *ndk.ConnectionEnded
	err      error
	at       time.Time
}

// watchCQ takes w.cq's results with CQ.Wait until a connection event or another error (ctx
// bounds it) and reports on done.
func watchCQ(ctx context.Context, w *cqWatch, done chan<- *cqWatch) {
	var res [16]ndk.Result
	w.statuses = map[ndk.Status]int{}
	for {
		n, err := w.cq.Wait(ctx, res[:])
		for i := range res[:n] {
			w.statuses[res[i].Status]++
		}
		if err != nil {
			w.at = time.Now()
			if !errors.As(err, &w.ended) {
				w.err = err
			}
			done <- w
			return
		}
	}
}

// A peer killed while its connections are idle is noticed through the keepalive alone.
// This side's adapter has KeepAlive 3 s; the verb mix runs against the target process to a
// clean end, the connections go idle (no request outstanding; the control connection's
// receives posted), and just after every QP's first probe was answered (a third of
// KeepAlive into the idleness: the worst case, the whole KeepAlive of silence counts from
// about the kill) the target is killed with SIGKILL. Every CQ of the initiator, taken with CQ.Wait alone, must
// report the connection event of its QP (STATUS_CONNECTION_ABORTED, cause: the keepalive)
// within KeepAlive + 1 s of the kill; the control connection's receives complete first,
// cancelled; nothing else completes; every disconnect callback runs within the same bound.
func TestKeepAliveKilledIdlePeer(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	opts := ndkOptions()
	opts.KeepAlive = kaPeriod
	parent := openXDP(t, bed.A, xdpConfig(), faultlink.Config{}, opts)
	tgt := startTarget(t, bed.B)
	in := dialTo(t, parent.a, bed.B.Addr, Config{Seed: 23, QPs: 4, Outstanding: 8, MaxSize: 16 << 10})
	r := in.Run(context.Background(), Limits{Requests: 1000, Duration: 10 * time.Second})
	if err := r.Err(); err != nil {
		t.Fatalf("the mix before the kill: %v\n%s", err, r.String())
	}
	recvs := in.ctl.recvs // the control connection's receives, posted and idle
	if recvs == 0 {
		t.Fatal("no receive posted on the control connection")
	}
	// The kill comes just after every QP's first probe was answered (a third of KeepAlive
	// into the idleness): the peer was heard last at about the kill, so the whole KeepAlive
	// of silence runs from it, the longest detection there is.
	ka0, idleFrom := kaProbes(in), time.Now()
	n := uint64(in.Connections())
	waitFor(t, kaPeriod, "a probe on every QP", func() bool { return kaProbes(in)-ka0 >= n })
	time.Sleep(20 * time.Millisecond) // the answers
	if err := connected(in); err != nil {
		t.Fatalf("after %v idle, before the kill: %v", time.Since(idleFrom).Round(time.Millisecond), err)
	}
	idleProbes, idleFor := kaProbes(in)-ka0, time.Since(idleFrom)

	cqs := initiatorCQs(in)
	ctx, cancel := context.WithTimeout(context.Background(), kaPeriod+kaSlack+10*time.Second)
	defer cancel()
	done := make(chan *cqWatch, len(cqs))
	for _, c := range cqs {
		go watchCQ(ctx, &cqWatch{cqOf: c}, done)
	}
	// (A watcher that started late would still get its event: it is kept until taken.)
	killed := time.Now()
	tgt.kill(t)
	disc := make(chan time.Duration, 1) // when the last disconnect callback was seen (0: not all ran)
	go func() {
		deadline := killed.Add(kaPeriod + kaSlack + 5*time.Second)
		for in.Disconnects() < in.Connections() && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if in.Disconnects() == in.Connections() {
			disc <- time.Since(killed)
		}
		close(disc)
	}()
	var ws []*cqWatch
	for range cqs {
		ws = append(ws, <-done) // each watcher ends by the context's deadline at the latest
	}
	discAt := <-disc

	bound := kaPeriod + kaSlack
	lo, hi := time.Duration(1<<62), time.Duration(0)
	cancelled := 0
	for _, w := range ws {
		if w.ended == nil {
			t.Errorf("%s: no connection event: Wait returned %v after %v", w.name, w.err, w.at.Sub(killed).Round(time.Millisecond))
			continue
		}
		d := w.at.Sub(killed)
		lo, hi = min(lo, d), max(hi, d)
		e := w.ended
		if e.QP != w.qp || e.Status != ndk.StatusConnectionAborted || !errors.Is(e, transport.ErrKeepAlive) {
			t.Errorf("%s: %v (QP %p, want %p), want STATUS_CONNECTION_ABORTED by the keepalive", w.name, e, e.QP, w.qp)
		}
		if d > bound {
			t.Errorf("%s: connection event %.2f s after the kill, want within KeepAlive + %v = %v", w.name, d.Seconds(), kaSlack, bound)
		}
		want := 0
		if w.cq == in.ctl.rcq {
			want, cancelled = recvs, w.statuses[ndk.StatusCancelled]
		}
		got := 0
		for st, n := range w.statuses {
			got += n
			if st != ndk.StatusCancelled && !(st == ndk.StatusSuccess && w.cq == in.ctl.rcq) {
				t.Errorf("%s: %d results with %v", w.name, n, st)
			}
		}
		if got != want || (want > 0 && w.statuses[ndk.StatusCancelled] == 0) {
			t.Errorf("%s: %d results (%v) before the connection event, want the %d receives posted, cancelled", w.name, got, w.statuses, want)
		}
	}
	for i, q := range append(in.QPs(), in.ControlQP()) {
		if c := plumb.QP(q).Cause(); !errors.Is(c, transport.ErrKeepAlive) {
			t.Errorf("QP %d: cause %v, want the keepalive", i, c)
		}
	}
	if discAt == 0 || discAt > bound {
		t.Errorf("%d of %d disconnect callbacks ran, the last %v after the kill (want all within %v)", in.Disconnects(),
			in.Connections(), discAt.Round(time.Millisecond), bound)
	}
	t.Logf("idle peer killed (KeepAlive %v): detected %.2f–%.2f s after kill -9 on %d CQs of %d QPs "+
		"(STATUS_CONNECTION_ABORTED, cause %v); %d control receives cancelled; %d disconnect callbacks, the last %.2f s after the kill; "+
		"%d probes in the %v idle before the kill",
		kaPeriod, lo.Seconds(), hi.Seconds(), len(ws), in.Connections(), plumb.QP(in.ControlQP()).Cause(), cancelled,
		in.Disconnects(), discAt.Seconds(), idleProbes, idleFor.Round(time.Millisecond))
	// The connections failed: the initiator's Close must not disconnect them again.
	for _, c := range in.conns {
		c.failed = true
	}
	in.ctl.failed = true
}

// kaProbes sums the keepalive probes sent by the initiator's QPs.
func kaProbes(in *Initiator) uint64 {
	n := uint64(0)
	for _, q := range append(in.QPs(), in.ControlQP()) {
		n += plumb.QP(q).Stats().KeepAlives
	}
	return n
}

// connected returns an error unless every QP of in is connected and no disconnect callback
// ran.
func connected(in *Initiator) error {
	for i, q := range append(in.QPs(), in.ControlQP()) {
		if st := plumb.QP(q).State(); st != transport.QPConnected {
			return fmt.Errorf("QP %d (of %d; the last is the control QP) is %v (cause %v)", i, in.Connections(), st, plumb.QP(q).Cause())
		}
	}
	if n := in.Disconnects(); n != 0 {
		return fmt.Errorf("%d disconnect callbacks", n)
	}
	return nil
}

// An idle connection to a live peer stays up and costs little. This side's adapter has
// KeepAlive 3 s; the target's has its default (30 s: it sends nothing unasked, so this
// side's probes alone keep the connections) or 3 s too (both sides probe). After a short
// mix the connections stay idle for 3 x KeepAlive: every QP must still be connected with no
// disconnect callback and no connection event on any CQ; this side must have heard its
// peer at least once per KeepAlive per QP (it stayed up because probes were answered, not
// because the keepalive was off); at most one probe goes per third of KeepAlive of silence
// from each probing side, so at most 2 x (3 x 3 + 1) datagrams both ways per QP and probing
// side; with the target's default, this side's probes are at least one per KeepAlive per QP. Then the mix runs again, clean, on
// the same connections.
func TestKeepAliveLiveIdlePeer(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	opts := ndkOptions()
	opts.KeepAlive = kaPeriod
	parent := openXDP(t, bed.A, xdpConfig(), faultlink.Config{}, opts)
	for i, tc := range []struct {
		name string
		o    targetOptions
	}{{"target-keepalive-default", targetOptions{}}, {"target-keepalive-3s", targetOptions{KeepAlive: kaPeriod}}} {
		t.Run(tc.name, func(t *testing.T) {
			startTargetWith(t, bed.B, tc.o)
			in := dialTo(t, parent.a, bed.B.Addr, Config{Seed: 24 + uint64(i), QPs: 4, Outstanding: 8, MaxSize: 16 << 10})
			r := in.Run(context.Background(), Limits{Requests: 1000, Duration: 10 * time.Second})
			if err := r.Err(); err != nil {
				t.Fatalf("the mix before the idle period: %v\n%s", err, r.String())
			}
			time.Sleep(50 * time.Millisecond) // the last acknowledgements
			qps := append(in.QPs(), in.ControlQP())
			ka0, e0 := kaProbes(in), plumb.Engine(parent.a).Stats()
			idle := 3 * kaPeriod
			start := time.Now()
			time.Sleep(idle)
			ka, e := kaProbes(in), plumb.Engine(parent.a).Stats()
			idleFor := time.Since(start)
			probes, tx, rx := ka-ka0, e.TxPackets-e0.TxPackets, e.RxPackets-e0.RxPackets
			// The peer's answers to several QPs' probes may share a datagram (a multi-QP
			// Bundle): what was heard is the packets, a Bundle counted as its entries.
			heard := rx - (e.BundlesReceived - e0.BundlesReceived) + (e.BundledReceived - e0.BundledReceived)
			t.Logf("live idle peer (target KeepAlive %v): %v idle (3 x KeepAlive %v), %d QPs: %d probes by this side (%.1f per QP), "+
				"%d datagrams sent, %d received carrying %d packets",
				targetKA(tc.o), idleFor.Round(time.Millisecond), kaPeriod, len(qps), probes, float64(probes)/float64(len(qps)), tx, rx, heard)
			if err := connected(in); err != nil {
				t.Fatalf("after %v idle with a live peer: %v", idleFor.Round(time.Millisecond), err)
			}
			for _, c := range initiatorCQs(in) {
				if c.cq == in.ctl.rcq {
					continue // the target's control messages may land here; Run takes them
				}
				var res [1]ndk.Result
				if n, err := c.cq.Poll(res[:]); n != 0 || err != nil {
					t.Fatalf("%s after the idle period: %d results, %v", c.name, n, err)
				}
			}
			periods := uint64(idle / kaPeriod)
			maxProbes := uint64(idle/(kaPeriod/3)) + 1 // per QP and side
			n := uint64(len(qps))
			if heard < n*periods {
				t.Errorf("%d packets heard from the peer (%d datagrams) in %v over %d QPs, want at least one per KeepAlive per QP", heard, rx, idle, n)
			}
			// Each side that probes sends at most one probe per third of KeepAlive of silence
			// per QP, each answered. With both sides at the same KeepAlive their timers fire
			// together and both may probe before hearing the other's (CI: 102 datagrams in
			// 9 s over 5 QPs, 22 of the probes this side's), so the bound counts both sides.
			sides := uint64(1)
			if tc.o.KeepAlive != 0 {
				sides = 2
			}
			if tx+rx > 2*sides*n*maxProbes {
				t.Errorf("%d datagrams both ways in %v over %d QPs, want at most %d (a probe per third of KeepAlive per QP and probing side, each answered)",
					tx+rx, idle, n, 2*sides*n*maxProbes)
			}
			if probes > n*maxProbes {
				t.Errorf("%d probes by this side, want at most %d (one per third of KeepAlive of silence per QP)", probes, n*maxProbes)
			}
			if tc.o.KeepAlive == 0 && probes < n*periods {
				t.Errorf("%d probes by this side, want at least %d (the peer sends nothing unasked)", probes, n*periods)
			}
			r = in.Run(context.Background(), Limits{Requests: 1000, Duration: 10 * time.Second})
			if err := r.Err(); err != nil {
				t.Fatalf("the mix after the idle period: %v\n%s", err, r.String())
			}
			// The initiator disconnects (its cleanup) before the target is killed (the
			// target's, registered first).
		})
	}
}

// targetKA is the target's KeepAlive for o.
func targetKA(o targetOptions) time.Duration {
	if o.KeepAlive == 0 {
		return ndk.DefaultKeepAlive
	}
	return o.KeepAlive
}
