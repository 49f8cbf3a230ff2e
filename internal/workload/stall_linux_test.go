package workload

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/faultlink"
	"github.com/xdpndk/xdpndk/internal/plumb"
	"github.com/xdpndk/xdpndk/internal/racebuild"
	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/ndk"
	"github.com/xdpndk/xdpndk/transport"
)

// bgRun is an Initiator.Run in its own goroutine. The test's cleanup stops it and waits for
// it (registered after the initiator's, so it runs before the initiator is closed), also
// when the test fails half-way.
type bgRun struct {
	cancel context.CancelFunc
	done   chan Report
	once   sync.Once
	r      Report
}

// startRun runs in.Run(lim) in the background.
func startRun(t *testing.T, in *Initiator, lim Limits) *bgRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b := &bgRun{cancel: cancel, done: make(chan Report, 1)}
	go func() { b.done <- in.Run(ctx, lim) }()
	t.Cleanup(func() { b.stop() })
	return b
}

// stop ends Run (it stops starting requests and drains) and returns its report.
func (b *bgRun) stop() Report {
	b.once.Do(func() {
		b.cancel()
		b.r = <-b.done
	})
	return b.r
}

// wait returns Run's report once it returns by itself, or false after d.
func (b *bgRun) wait(d time.Duration) (Report, bool) {
	select {
	case r := <-b.done:
		b.once.Do(func() { b.r = r; b.cancel() })
		return r, true
	case <-time.After(d):
		return Report{}, false
	}
}

// commas formats n with thousands separators, as the docs quote figures.
func commas(n uint64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// failures counts the completions of r with a status other than success.
func failures(r *Report) uint64 {
	n := uint64(0)
	for st, k := range r.Statuses {
		if st != ndk.StatusSuccess {
			n += k
		}
	}
	return n
}

// logQPs logs the transport state of an initiator's QPs and engine, for a failure.
func logQPs(t *testing.T, in *Initiator, s xdpSide) {
	t.Helper()
	for i, q := range in.QPs() {
		t.Logf("QP %d: %+v (cause %v)", i, plumb.QP(q).Stats(), plumb.QP(q).Cause())
	}
	t.Logf("control QP: %+v (cause %v)", plumb.QP(in.ControlQP()).Stats(), plumb.QP(in.ControlQP()).Cause())
	t.Logf("engine %+v", plumb.Engine(s.a).Stats())
}

// stallFlow is the completions the stall tests wait for before a stop and after it.
func stallFlow() uint64 {
	if racebuild.Enabled {
		return 600
	}
	return 3000
}

// A stall of the peer shorter than the retransmission budget never costs a connection.
// The target runs in a child process in host B, both adapters with the default options
// (RetryTimeout 10 s); the verb mix runs against it, and while it runs the target process
// is stopped with SIGSTOP for 1 s, then (in a second run, on the same connections) for
// 3 s, and resumed with SIGCONT: its engine and timers freeze, what arrives meanwhile (this
// side's retransmissions) waits in its socket's receive ring, and it wakes with every timer
// late. After each stop traffic must
// flow again, and each run must end clean: every request completed successfully (no other
// status), every byte checked at both ends, nothing left in flight, no disconnect. The run
// must also have seen the stop (a completion gap at least as long as it), so that the
// test cannot pass without the fault.
func TestStallSIGSTOP(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	parent := openXDP(t, bed.A, xdpConfig(), faultlink.Config{}, ndkOptions())
	tgt := startTarget(t, bed.B)
	in := dialTo(t, parent.a, bed.B.Addr, Config{Seed: 21, QPs: 4, Outstanding: 8, MaxSize: 16 << 10})
	flow := stallFlow()
	for _, stall := range []time.Duration{time.Second, 3 * time.Second} {
		retx0, rto0 := qpTotals(in)
		ctl0 := plumb.QP(in.ControlQP()).Stats()
		run := startRun(t, in, Limits{Requests: 1 << 22, Duration: 40 * time.Second, Drain: 15 * time.Second})
		p := in.Progress()
		waitFor(t, 20*time.Second, "traffic before the stop", func() bool { return in.Progress() >= p+flow })

		signalled, stopped := tgt.stop(t)
		time.Sleep(stall)
		resumed := tgt.cont(t)
		p = in.Progress()
		waitFor(t, 20*time.Second, "traffic after SIGCONT", func() bool { return in.Progress() >= p+flow })
		back := in.Progress()
		r := run.stop()

		retx, rto := qpTotals(in)
		ctl := plumb.QP(in.ControlQP()).Stats()
		stoppedFor := resumed.Sub(stopped) // every thread stopped until SIGCONT
		t.Logf("SIGSTOP %v: %s ops, %d failures, longest completion gap %.2f s (ended %v after SIGCONT; stopped %v, SIGSTOP to SIGCONT %v), "+
			"%s retransmissions (%s RTOs) on the data QPs, %d (%d RTOs) on the control QP; %.1f MB in %v",
			stall, commas(r.Started), failures(&r), r.LongestGap.Seconds(), r.GapEnd.Sub(resumed).Round(time.Millisecond),
			stoppedFor.Round(time.Millisecond), resumed.Sub(signalled).Round(time.Millisecond),
			commas(retx-retx0), commas(rto-rto0), ctl.Retransmits-ctl0.Retransmits, ctl.Timeouts-ctl0.Timeouts,
			float64(r.Bytes)/1e6, r.Elapsed.Round(time.Millisecond))
		if err := r.Err(); err != nil {
			logQPs(t, in, parent)
			t.Fatalf("SIGSTOP %v: %v\n%s", stall, err, r.String())
		}
		if r.Sends == 0 || r.Writes == 0 || r.Reads == 0 || r.WindowWrites == 0 {
			t.Fatalf("SIGSTOP %v: an operation never ran: %s", stall, r.String())
		}
		if n := in.Disconnects(); n != 0 {
			t.Fatalf("SIGSTOP %v: %d disconnect callbacks", stall, n)
		}
		// The run saw the stop: nothing completed from shortly after the target's last thread
		// stopped (what it sent before may still be taken) until after SIGCONT.
		if r.LongestGap < stoppedFor-100*time.Millisecond {
			t.Fatalf("SIGSTOP %v: the target was stopped for %v but the longest completion gap was %v: the stop did not stall the run",
				stall, stoppedFor.Round(time.Millisecond), r.LongestGap)
		}
		if back < p+flow {
			t.Fatalf("SIGSTOP %v: %d completions after SIGCONT, want %d", stall, back-p, flow)
		}
	}
}

// stallBudget is TestStallPastRetryTimeout's RetryTimeout.
const stallBudget = 2 * time.Second

// stallSlack is what the stall tests allow beyond a budget: the budget is checked by a
// transmission made after it ran out and left unanswered for a retransmission timeout
// (RTO.Max, 500 ms, at most), and the engine and the test's polling may run late on the
// shared 2-CPU machine.
const stallSlack = time.Second

// A peer stopped for longer than the retransmission budget is given up on within the
// budget. This side's adapter has RetryTimeout 2 s; the verb mix runs against the target
// process, which is stopped with SIGSTOP mid-stream and left stopped. Every data request
// outstanding at the stop must end within RetryTimeout + 1 s of the stop: the first failure
// STATUS_IO_TIMEOUT, the others STATUS_IO_TIMEOUT or STATUS_CANCELLED (behind the first
// failure of their QP); no failure before the budget ran out (a stall shorter than it
// keeps its connection); every QP's cause the retransmission budget; nothing left
// outstanding, every disconnect callback run. The control connection's receipt requests,
// posted once the data connections failed, start their budget then: Run must return within
// two budgets (each with its slack) of the stop. Then the stopped target is killed.
func TestStallPastRetryTimeout(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	opts := ndkOptions()
	opts.RetryTimeout = stallBudget
	parent := openXDP(t, bed.A, xdpConfig(), faultlink.Config{}, opts)
	tgt := startTarget(t, bed.B)
	in := dialTo(t, parent.a, bed.B.Addr, Config{Seed: 22, QPs: 4, Outstanding: 8, MaxSize: 16 << 10})
	run := startRun(t, in, Limits{Requests: 1 << 22, Duration: 40 * time.Second, Drain: 10 * time.Second})
	waitFor(t, 20*time.Second, "traffic before the stop", func() bool { return in.Progress() >= stallFlow() })

	stopped, _ := tgt.stop(t) // measured from the signal: the bound is then the strictest
	r, ok := run.wait(2*(stallBudget+stallSlack) + 10*time.Second)
	returned := time.Since(stopped)
	if !ok {
		logQPs(t, in, parent)
		r = run.stop()
		t.Fatalf("Run still going %v after the target stopped: %s; in flight: %s", returned.Round(time.Millisecond),
			r.String(), strings.Join(r.InFlight, "; "))
	}
	tgt.kill(t)

	first, last := r.FirstFailureAt.Sub(stopped), r.LastDataCompletion.Sub(stopped)
	t.Logf("stopped past RetryTimeout %v: first failure %.2f s after SIGSTOP, last data completion %.2f s; "+
		"%s STATUS_IO_TIMEOUT, %s STATUS_CANCELLED (%s completions succeeded before); Run returned %.2f s after SIGSTOP",
		stallBudget, first.Seconds(), last.Seconds(), commas(r.Statuses[ndk.StatusIOTimeout]),
		commas(r.Statuses[ndk.StatusCancelled]), commas(r.Statuses[ndk.StatusSuccess]), returned.Seconds())
	t.Log(r.String())
	for st := range r.Statuses {
		if st != ndk.StatusSuccess && st != ndk.StatusIOTimeout && st != ndk.StatusCancelled {
			t.Errorf("completion with %v (want STATUS_IO_TIMEOUT or STATUS_CANCELLED after the stop)", st)
		}
	}
	if r.Statuses[ndk.StatusIOTimeout] == 0 || r.FirstFailureAt.IsZero() {
		t.Fatalf("no request failed STATUS_IO_TIMEOUT: %s", r.String())
	}
	// Each connection's first failure (its requests complete in posting order) says why:
	// STATUS_IO_TIMEOUT; the cancellations come behind it.
	for i, st := range r.FirstFailures {
		if st != ndk.StatusIOTimeout {
			t.Errorf("connection %d: first failure %v, want STATUS_IO_TIMEOUT (first failure of the run: %s)", i, st, r.FirstFailure)
		}
	}
	if r.Outstanding != 0 || r.ControlReceives != 0 || r.Mismatches != 0 || r.Unexpected != 0 || r.PostErrors != 0 {
		t.Errorf("after the stop: %d outstanding (%s), %d control receives, %d mismatches (%s), %d unexpected (%s), %d posts refused (%v)",
			r.Outstanding, strings.Join(r.InFlight, "; "), r.ControlReceives, r.Mismatches, r.FirstMismatch,
			r.Unexpected, r.FirstUnexpected, r.PostErrors, r.FirstPostError)
	}
	if r.Failed != in.Connections() {
		t.Errorf("%d of %d connections failed", r.Failed, in.Connections())
	}
	// The property under test: the budget, in time.
	if bound := stallBudget + stallSlack; first > bound || last > bound {
		t.Errorf("requests ended %.2f–%.2f s after the stop, want within RetryTimeout + %v = %v", first.Seconds(),
			last.Seconds(), stallSlack, bound)
	}
	// And not before it: a packet outstanding at the stop was first sent at most a few
	// round trips earlier (microseconds here), and the budget counts from there.
	if early := stallBudget - 100*time.Millisecond; first < early {
		t.Errorf("first failure %.2f s after the stop, before RetryTimeout %v", first.Seconds(), stallBudget)
	}
	if bound := 2*(stallBudget+stallSlack) + time.Second; returned > bound {
		t.Errorf("Run returned %.2f s after the stop, want within %v (the control connection's last requests: two budgets)",
			returned.Seconds(), bound)
	}
	for i, q := range in.QPs() {
		if c := plumb.QP(q).Cause(); !errors.Is(c, transport.ErrRetryTimeout) {
			t.Errorf("QP %d failed with cause %v, want the retransmission budget", i, c)
		}
	}
	waitFor(t, 5*time.Second, "every disconnect callback", func() bool { return in.Disconnects() == in.Connections() })
}
