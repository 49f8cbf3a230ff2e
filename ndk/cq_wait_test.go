package ndk

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/simlink"
)

// CQ.Wait, CQ.Poll and the connection event.

// waitResult is what a Wait in a goroutine returned.
type waitResult struct {
	n   int
	r   ResultEx
	err error
}

// waitAsync runs WaitEx on cq in a goroutine (bounded by 10 s) and returns its outcome.
func waitAsync(cq *CQ) chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(bg, 10*time.Second)
		defer cancel()
		var r [1]ResultEx
		n, err := cq.WaitEx(ctx, r[:])
		ch <- waitResult{n, r[0], err}
	}()
	return ch
}

func awaitWait(t *testing.T, ch chan waitResult) waitResult {
	t.Helper()
	select {
	case w := <-ch:
		return w
	case <-time.After(15 * time.Second):
		t.Fatal("Wait did not return")
	}
	return waitResult{}
}

// Wait returns a receive that completes while it sleeps, with every progress mode: the
// engine is served while the application sleeps in Wait.
func TestWaitWakesOnResult(t *testing.T) {
	for _, m := range []struct {
		name string
		mode Progress
	}{{"inline", ProgressInline}, {"adaptive", ProgressAdaptive}, {"busy", ProgressBusy}} {
		t.Run(m.name, func(t *testing.T) {
			forEachLink(t, func(t *testing.T, k linkKind) {
				opts := DefaultOptions()
				opts.Progress = m.mode
				p := newPair(t, k, pairOpts{opts: opts})
				rbuf, rmr := p.B.region(t, 64, MRAllowLocalWrite)
				sbuf, smr := p.A.region(t, 64, 0)
				for i := 0; i < 20; i++ {
					if err := p.B.qp.Receive(i, []SGE{rmr.SGE(rbuf)}); err != nil {
						t.Fatal(err)
					}
					ch := waitAsync(p.B.rcq)
					time.Sleep(time.Millisecond) // Wait spins 50 µs, then sleeps
					fill(sbuf, byte(i))
					if err := p.A.qp.Send(i, []SGE{smr.SGE(sbuf)}, 0); err != nil {
						t.Fatal(err)
					}
					results(t, p.A.icq, 1) // A polls (its engine, with ProgressInline)
					w := awaitWait(t, ch)
					if w.err != nil || w.n != 1 {
						t.Fatalf("round %d: Wait = %d, %v", i, w.n, w.err)
					}
					want(t, w.r, StatusSuccess, OpTypeReceive, i)
				}
			})
		})
	}
}

// Wait ends with its context: StatusCancelled for a cancel, StatusTimeout for a deadline,
// both matching the context's error; Poll on an empty CQ returns (0, nil); an empty
// destination is STATUS_INVALID_PARAMETER.
func TestWaitContextAndPoll(t *testing.T) {
	a := cqAdapter(t)
	cq, _ := a.NewCQ(8, nil)
	var r [4]Result
	t0 := time.Now() // before the context: its deadline is 20 ms after its creation
	ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
	defer cancel()
	n, err := cq.Wait(ctx, r[:])
	if n != 0 || !errors.Is(err, ctx.Err()) || !errors.Is(err, context.DeadlineExceeded) || StatusOf(err) != StatusTimeout {
		t.Fatalf("Wait past its deadline: %d, %v (status %v)", n, err, StatusOf(err))
	}
	if d := time.Since(t0); d < 20*time.Millisecond {
		t.Fatalf("Wait returned after %v, before its deadline", d)
	}
	ctx2, cancel2 := context.WithCancel(bg)
	time.AfterFunc(10*time.Millisecond, cancel2)
	n, err = cq.Wait(ctx2, r[:])
	if n != 0 || !errors.Is(err, context.Canceled) || StatusOf(err) != StatusCancelled {
		t.Fatalf("cancelled Wait: %d, %v (status %v)", n, err, StatusOf(err))
	}
	if n, err := cq.Poll(r[:]); n != 0 || err != nil {
		t.Fatalf("Poll of an empty CQ: %d, %v", n, err)
	}
	if _, err := cq.Poll(nil); !errors.Is(err, StatusInvalidParameter) {
		t.Fatalf("Poll(nil): %v", err)
	}
	if _, err := cq.Wait(bg, nil); !errors.Is(err, StatusInvalidParameter) {
		t.Fatalf("Wait(nil): %v", err)
	}
	push(cq, StatusSuccess, false)
	push(cq, StatusCancelled, false)
	if n, err := cq.Wait(bg, r[:]); n != 2 || err != nil || r[1].Status != StatusCancelled {
		t.Fatalf("Wait with two results queued: %d, %v, %+v", n, err, r[:n])
	}
}

// Close wakes a Wait (STATUS_INVALID_DEVICE_STATE), and so does closing the adapter
// (STATUS_DEVICE_REMOVED); an overrun is STATUS_BUFFER_OVERFLOW.
func TestWaitEnds(t *testing.T) {
	a := cqAdapter(t)
	cq, _ := a.NewCQ(1, nil)
	ch := waitAsync(cq)
	time.Sleep(5 * time.Millisecond)
	_ = cq.Close(bg)
	if w := awaitWait(t, ch); !errors.Is(w.err, StatusInvalidDeviceState) {
		t.Fatalf("Wait on a CQ closed meanwhile: %v", w.err)
	}
	cq2, _ := a.NewCQ(1, nil)
	push(cq2, StatusSuccess, false)
	push(cq2, StatusSuccess, false) // overruns a CQ of depth 1
	var r [2]Result
	if _, err := cq2.Poll(r[:]); !errors.Is(err, StatusBufferOverflow) {
		t.Fatalf("Poll of an overrun CQ: %v", err)
	}
	cq3, _ := a.NewCQ(1, nil)
	ch = waitAsync(cq3)
	time.Sleep(5 * time.Millisecond)
	_ = a.Close(bg)
	if w := awaitWait(t, ch); !errors.Is(w.err, StatusDeviceRemoved) {
		t.Fatalf("Wait on a CQ whose adapter closed meanwhile: %v", w.err)
	}
}

// Wait and the CQ's own notification (NdkArmCq) do not interfere: an armed notification
// fires once for a completion that a Wait returns; a Wait without an Arm fires nothing;
// Arm's rules stay those of TestArmOneShotAndImmediate.
func TestWaitLeavesArmAlone(t *testing.T) {
	a := cqAdapter(t)
	fn, notes := notes()
	cq, _ := a.NewCQ(8, fn)
	var r [4]Result

	ch := waitAsync(cq) // not armed: nothing is notified
	time.Sleep(2 * time.Millisecond)
	push(cq, StatusSuccess, false)
	if w := awaitWait(t, ch); w.n != 1 || w.err != nil {
		t.Fatalf("Wait: %+v", w)
	}
	expectNoNote(t, notes)

	cq.Arm(NotifyAny) // the completion Wait took was there at no callback, but is gone
	expectNoNote(t, notes)
	ch = waitAsync(cq)
	time.Sleep(2 * time.Millisecond)
	push(cq, StatusSuccess, false)
	if w := awaitWait(t, ch); w.n != 1 || w.err != nil {
		t.Fatalf("Wait while armed: %+v", w)
	}
	expectNote(t, notes, StatusSuccess) // Wait neither ate nor doubled the armed event
	expectNoNote(t, notes)

	push(cq, StatusSuccess, false) // one-shot: not armed any more
	expectNoNote(t, notes)
	if n, err := cq.Wait(bg, r[:]); n != 1 || err != nil {
		t.Fatalf("Wait: %d, %v", n, err)
	}
	expectNoNote(t, notes)
}

// Once warm, Wait allocates nothing: neither when results are queued, nor when it sleeps
// and a result wakes it.
func TestWaitNoAllocs(t *testing.T) {
	la, _ := simlink.Pair(simlink.Config{Seed: 1})
	opts := DefaultOptions()
	opts.Progress = ProgressBusy // a sleeping Wait hands nothing to a fallback (whose simlink Watch allocates a timer)
	opts.Spin = time.Microsecond
	a := openT(t, la, opts)
	cq, _ := a.NewCQ(64, nil)
	var r [4]Result
	queued := func() {
		push(cq, StatusSuccess, false)
		if n, err := cq.Wait(bg, r[:]); n != 1 || err != nil {
			t.Fatalf("Wait: %d, %v", n, err)
		}
	}
	// A producer goroutine pushes 200 µs after each request: Wait has slept by then.
	req, stop := make(chan struct{}), make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-req:
			case <-stop:
				return
			}
			time.Sleep(200 * time.Microsecond)
			push(cq, StatusSuccess, false)
		}
	}()
	slept := func() {
		req <- struct{}{}
		if n, err := cq.Wait(bg, r[:]); n != 1 || err != nil {
			t.Fatalf("Wait: %d, %v", n, err)
		}
	}
	for name, fn := range map[string]func(){"queued": queued, "slept": slept} {
		for range 20 {
			fn()
		}
		if n := testing.AllocsPerRun(200, fn); n != 0 {
			t.Errorf("%s: %v allocations per Wait, want 0", name, n)
		}
	}
}

// waitConnEvent waits (bounded) with Wait until it returns an error and returns it; the
// results it passes on the way are returned too.
func waitConnEvent(t *testing.T, cq *CQ) ([]ResultEx, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	var out []ResultEx
	var r [4]ResultEx
	for {
		n, err := cq.WaitEx(ctx, r[:])
		out = append(out, r[:n]...)
		if err != nil {
			return out, err
		}
	}
}

// A peer's graceful disconnect comes out of Wait as a *ConnectionEnded with
// STATUS_REMOTE_DISCONNECT, after the results queued before it, once; it flushes nothing
// (NetworkDirect Disconnect Scheme) and the disconnect callback still runs. The side that
// disconnected gets no event.
func TestConnectionEndedPeerDisconnect(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		a, b := idleSides(t, k, DefaultOptions())
		disc := make(chan struct{}, 4)
		accept, accepted := acceptor(b, 8, 8, nil, func() { disc <- struct{}{} })
		b.listen(t, accept)
		c, err := a.dial(t, b, servicePort, 8, 8, nil)
		if err != nil {
			t.Fatal(err)
		}
		complete(t, c, nil, accepted)
		rbuf, rmr := b.region(t, 4*64, MRAllowLocalWrite)
		for i := 0; i < 3; i++ {
			if err := b.qp.Receive(i, []SGE{rmr.SGE(rbuf[i*64 : (i+1)*64])}); err != nil {
				t.Fatal(err)
			}
		}
		sbuf, smr := a.region(t, 64, 0)
		if err := a.qp.Send("hello", []SGE{smr.SGE(sbuf)}, 0); err != nil {
			t.Fatal(err)
		}
		want(t, results(t, a.icq, 1)[0], StatusSuccess, OpTypeSend, "hello")
		ctx, cancel := context.WithTimeout(bg, 10*time.Second)
		defer cancel()
		if err := c.Disconnect(ctx); err != nil {
			t.Fatalf("disconnect: %v", err)
		}
		rs, err := waitConnEvent(t, b.rcq)
		if len(rs) != 1 {
			t.Fatalf("results before the event: %+v", rs)
		}
		want(t, rs[0], StatusSuccess, OpTypeReceive, 0)
		var ce *ConnectionEnded
		if !errors.As(err, &ce) || ce.QP != b.qp || ce.Status != StatusRemoteDisconnect ||
			!errors.Is(err, StatusRemoteDisconnect) || StatusOf(err) != StatusRemoteDisconnect {
			t.Fatalf("Wait after the peer's disconnect: %v (%+v)", err, ce)
		}
		t.Logf("event: %v", err)
		select {
		case <-disc:
		case <-time.After(10 * time.Second):
			t.Fatal("the disconnect callback did not run")
		}
		var r [4]Result
		noResults(t, b.rcq, quiet) // the two other receives stay posted
		if n, err := b.rcq.Poll(r[:]); n != 0 || err != nil {
			t.Fatalf("Poll after the event: %d, %v (the event is returned once)", n, err)
		}
		if n, err := a.rcq.Poll(r[:]); n != 0 || err != nil {
			t.Fatalf("the disconnecting side's Poll: %d, %v", n, err)
		}
		if err := b.conn.Disconnect(ctx); err != nil {
			t.Fatal(err)
		}
		for i, r := range results(t, b.rcq, 2) {
			want(t, r, StatusCancelled, OpTypeReceive, i+1)
		}
		if n, err := b.rcq.Poll(r[:]); n != 0 || err != nil {
			t.Fatalf("Poll after the local disconnect: %d, %v", n, err)
		}
	})
}

// A connection that aborts (a Write the peer refuses: STATUS_ACCESS_VIOLATION, which ends
// the connection) comes out of Poll as a *ConnectionEnded with STATUS_CONNECTION_ABORTED
// after the failed request's result, on both sides. A QP closed before its event was
// taken takes the event with it.
func TestConnectionEndedAbort(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		p := newPair(t, k, pairOpts{})
		buf, mr := p.A.region(t, 64, 0)
		_, tmr := p.B.region(t, 4096, MRAllowRemoteWrite)
		if err := p.A.qp.Write("bad", []SGE{mr.SGE(buf)}, tmr.VA(), tmr.RemoteToken()+1, 0); err != nil {
			t.Fatal(err)
		}
		rs, err := waitConnEvent(t, p.A.icq)
		if len(rs) != 1 {
			t.Fatalf("results before the event: %+v", rs)
		}
		want(t, rs[0], StatusAccessViolation, OpTypeWrite, "bad")
		var ce *ConnectionEnded
		if !errors.As(err, &ce) || ce.QP != p.A.qp || !errors.Is(err, StatusConnectionAborted) {
			t.Fatalf("Wait after the abort: %v", err)
		}
		t.Logf("initiator's event: %v", err)

		// B refused the Write and aborted too; closing its QP before taking the event
		// drops it.
		deadline := time.Now().Add(10 * time.Second)
		for p.B.rcq.nev.Load() == 0 && time.Now().Before(deadline) {
			p.B.a.Poll()
			time.Sleep(100 * time.Microsecond)
		}
		if p.B.rcq.nev.Load() != 1 {
			t.Fatal("no connection event at the target")
		}
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		if err := p.B.qp.Close(ctx); err != nil {
			t.Fatal(err)
		}
		var r [4]Result
		for {
			n, err := p.B.rcq.Poll(r[:])
			if err != nil {
				t.Fatalf("Poll after the QP closed: %v", err)
			}
			if n == 0 {
				break
			}
		}
	})
}
