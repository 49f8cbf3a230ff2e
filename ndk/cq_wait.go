package ndk

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"
)

// Waiting for completions without spinning, and connection events (docs/NDK.md,
// "Completions and CQs").
//
// Wait and Poll never touch the CQ's armed notification (Arm, NotifyFunc): they sleep on a
// flag and a channel of their own that push, connectionEnded and Close signal. The flag is
// set before the last look at the ring and cleared by the producer that signals, so a
// result published after that look always finds it set (both are sequentially consistent
// atomics) and a result published before it is seen by the look.

// ConnectionEnded is the error Wait, WaitEx, Poll and PollEx return, once per QP and CQ,
// when the connection of a QP that completes into the CQ (as its ReceiveCQ or InitiatorCQ)
// ended other than by this side: the peer disconnected (Status StatusRemoteDisconnect) or
// the connection aborted (StatusConnectionAborted: a request ran out of retries, the peer
// stopped answering, a remote or local error ended the connection). It comes after every
// result the CQ held when the connection ended. errors.Is(err, e.Status) holds, StatusOf
// returns e.Status, and errors.As(err, &e) gives the QP. It changes nothing else: the
// disconnect callback runs as well, and a peer's disconnect flushes nothing (outstanding
// requests and receives stay until Flush, Disconnect or Close).
type ConnectionEnded struct {
	// QP is the QP whose connection ended.
	QP *QP
	// Status is StatusRemoteDisconnect or StatusConnectionAborted.
	Status Status
	// Cause is the transport's reason, when it gives one (nil otherwise).
	Cause error
}

// Error describes the event.
func (e *ConnectionEnded) Error() string {
	s := "connection ended: " + e.Status.Name()
	if e.QP != nil && e.QP.tq != nil {
		s = fmt.Sprintf("connection of QP %d ended: %s", e.QP.tq.QPN(), e.Status.Name())
	}
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Is reports whether target is the event's Status.
func (e *ConnectionEnded) Is(target error) bool {
	s, ok := target.(Status)
	return ok && s == e.Status
}

// As sets a *Status target to the event's Status (what StatusOf uses).
func (e *ConnectionEnded) As(target any) bool {
	if s, ok := target.(*Status); ok {
		*s = e.Status
		return true
	}
	return false
}

// Unwrap returns the cause.
func (e *ConnectionEnded) Unwrap() error { return e.Cause }

// connEvent is one QP's connection event on a CQ.
type connEvent struct {
	q    *QP
	at   uint64 // the CQ's tail when it happened: returned once head reaches it
	err  *ConnectionEnded
	told bool // returned by Wait or Poll (kept so that it is returned once)
}

// connectionEnded queues the connection event of q, a QP completing into the CQ, whose
// connection ended other than by this side with st (StatusRemoteDisconnect or
// StatusConnectionAborted) and cause (may be nil). Once per QP; ignored for a QP that is
// not attached (closed). It wakes a sleeping Wait and makes FD readable. Engine or event
// goroutine: it never blocks (a short lock) and allocates only the event.
func (cq *CQ) connectionEnded(q *QP, st Status, cause error) {
	if q == nil || cq.closed.Load() {
		return
	}
	cq.mu.Lock()
	attached := false
	for _, x := range cq.qps {
		attached = attached || x == q
	}
	for i := range cq.evs {
		if cq.evs[i].q == q {
			attached = false // told or pending already
		}
	}
	if !attached || len(cq.evs) == cap(cq.evs) { // attach made room for every QP
		cq.mu.Unlock()
		return
	}
	cq.evs = append(cq.evs, connEvent{q: q, at: cq.tail.Load(), err: &ConnectionEnded{QP: q, Status: st, Cause: cause}})
	cq.nev.Add(1)
	cq.mu.Unlock()
	cq.wakeWaiter()
	cq.fd.kick()
}

// dropEvent forgets q's connection event. Called with mu held.
func (cq *CQ) dropEvent(q *QP) {
	for i := range cq.evs {
		if cq.evs[i].q != q {
			continue
		}
		if !cq.evs[i].told {
			cq.nev.Add(-1)
		}
		last := len(cq.evs) - 1
		copy(cq.evs[i:], cq.evs[i+1:])
		cq.evs[last] = connEvent{}
		cq.evs = cq.evs[:last]
		return
	}
}

// nextEvent returns the oldest connection event not returned yet whose results have all
// been taken (head reached it), marking it returned, or nil.
func (cq *CQ) nextEvent() *ConnectionEnded {
	if cq.nev.Load() == 0 {
		return nil
	}
	h := cq.head.Load()
	cq.mu.Lock()
	defer cq.mu.Unlock()
	for i := range cq.evs {
		e := &cq.evs[i]
		if e.told || e.at > h {
			continue
		}
		e.told = true
		cq.nev.Add(-1)
		return e.err
	}
	return nil
}

// wakeWaiter wakes a Wait asleep on the CQ. Any goroutine; it never blocks.
func (cq *CQ) wakeWaiter() {
	if cq.waiting.CompareAndSwap(true, false) {
		select {
		case cq.wake <- struct{}{}:
		default:
		}
	}
}

// Errors of Wait and Poll, made once: returning them allocates nothing.
var (
	errWaitCancelled = &statusError{st: StatusCancelled, detail: "wait", cause: context.Canceled}
	errWaitTimeout   = &statusError{st: StatusTimeout, detail: "wait", cause: context.DeadlineExceeded}
	errCQOverrun     = &statusError{st: StatusBufferOverflow, detail: "the CQ overran"}
	errCQClosed      = &statusError{st: StatusInvalidDeviceState, detail: "CQ closed"}
	errCQAdapter     = &statusError{st: StatusDeviceRemoved, cause: errClosed}
	errNoRoom        = &statusError{st: StatusInvalidParameter, detail: "no room for results"}
)

// ctxError is Wait's error for a context that ended with err.
func ctxError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return errWaitTimeout
	}
	return errWaitCancelled
}

// Poll is the non-blocking Wait, for event loops: it returns the results available
// (oldest first, as GetResults: with ProgressInline it polls the engine when the CQ is
// empty); else, once every result before it has been taken, a pending connection event as
// (0, *ConnectionEnded); else (0, nil). It also clears FD (reads the eventfd if it was
// made readable), before it looks, so that anything that arrives afterwards makes the FD
// readable again. Errors: STATUS_BUFFER_OVERFLOW after the CQ overran,
// STATUS_INVALID_DEVICE_STATE once it is closed, STATUS_DEVICE_REMOVED once the adapter
// is, STATUS_INVALID_PARAMETER for an empty dst. It never blocks and never allocates.
// One goroutine at a time may take results from a CQ (GetResults, Poll, Wait).
func (cq *CQ) Poll(dst []Result) (int, error) { return cq.poll(dst, nil) }

// PollEx is Poll with the operation type and type-specific output (ResultEx).
func (cq *CQ) PollEx(dst []ResultEx) (int, error) { return cq.poll(nil, dst) }

// poll is Poll into dst or dstEx (the other one is nil).
func (cq *CQ) poll(dst []Result, dstEx []ResultEx) (int, error) {
	if len(dst) == 0 && len(dstEx) == 0 {
		return 0, errNoRoom
	}
	cq.fd.clear()
	var n int
	if dst != nil {
		n = cq.GetResults(dst)
	} else {
		n = cq.GetResultsEx(dstEx)
	}
	switch {
	case n > 0:
		return n, nil
	case cq.overrun.Load():
		return 0, errCQOverrun
	}
	if e := cq.nextEvent(); e != nil {
		return 0, e
	}
	switch {
	case cq.closed.Load():
		return 0, errCQClosed
	case cq.a.closed.Load():
		return 0, errCQAdapter
	}
	return 0, nil
}

// ready reports whether Poll has something to return (results, an event, an error).
func (cq *CQ) ready() bool {
	return cq.tail.Load() != cq.head.Load() || cq.nev.Load() > 0 || cq.overrun.Load() ||
		cq.closed.Load() || cq.a.closed.Load()
}

// Wait blocks until results are available and returns them (up to len(dst), oldest first,
// as GetResults), or a connection event (0, *ConnectionEnded: see Poll), or an error: when
// ctx ends, (0, err) with errors.Is(err, ctx.Err()) true and StatusOf(err) StatusCancelled
// (ctx cancelled) or StatusTimeout (its deadline passed, NT's STATUS_TIMEOUT of a wait);
// and Poll's errors.
//
// While results come quickly it is as fast as polling: it polls (with ProgressInline, the
// engine itself, as GetResults does) for up to Options.Spin. Then it sleeps until the
// engine produces a result or an event, burning no CPU; with ProgressInline it first hands
// the engine to the adapter's own goroutine, as Arm does, which serves it event-driven
// while the application sleeps, and the next poll takes it back.
//
// Wait leaves the CQ's notification alone: it neither consumes nor fires an Arm, and a
// NotifyFunc runs as it would without Wait (NDKPI NdkArmCq semantics are unchanged). Wait
// is not subject to interrupt moderation either. It clears FD as Poll does. One goroutine
// at a time may take results from a CQ (GetResults, Poll, Wait; NDKPI Completion
// Handling Requirements). It does not allocate.
func (cq *CQ) Wait(ctx context.Context, dst []Result) (int, error) { return cq.wait(ctx, dst, nil) }

// WaitEx is Wait with the operation type and type-specific output (ResultEx).
func (cq *CQ) WaitEx(ctx context.Context, dst []ResultEx) (int, error) {
	return cq.wait(ctx, nil, dst)
}

// wait is Wait into dst or dstEx (the other one is nil).
func (cq *CQ) wait(ctx context.Context, dst []Result, dstEx []ResultEx) (int, error) {
	inline := cq.a.opts.Progress == ProgressInline
	spin := max(cq.a.opts.Spin, 0)
	var start time.Time
	for i := 0; ; i++ {
		if n, err := cq.poll(dst, dstEx); n > 0 || err != nil {
			return n, err
		}
		if err := ctx.Err(); err != nil {
			return 0, ctxError(err)
		}
		if i == 0 {
			start = time.Now()
		} else if time.Since(start) >= spin {
			break
		}
		if !inline {
			runtime.Gosched() // the engine goroutine may need this thread
		}
	}
	done := ctx.Done()
	for {
		select { // a signal left over from an earlier Wait
		case <-cq.wake:
		default:
		}
		cq.waiting.Store(true)
		if !cq.ready() {
			cq.a.handOff(cq.engines.Load()) // ProgressInline: the adapter's goroutines serve the engines meanwhile
			select {
			case <-cq.wake:
			case <-done:
				cq.waiting.Store(false)
				return 0, ctxError(ctx.Err())
			case <-cq.a.stopEv:
			}
		}
		cq.waiting.Store(false)
		if n, err := cq.poll(dst, dstEx); n > 0 || err != nil {
			return n, err
		}
		if err := ctx.Err(); err != nil {
			return 0, ctxError(err)
		}
	}
}
