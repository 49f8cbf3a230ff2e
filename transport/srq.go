package transport

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
)

// SRQ is a shared receive queue (NDKPI NdkCreateSrq and NdkModifySrq, InfiniBand's SRQ): a
// pool of receives that several QPs of one engine consume. A QP created with QPConfig.SRQ
// takes the next receive of the pool at the moment a new incoming Send message needs one,
// in the QP's message order; the receive's completion is delivered to that QP's sink with
// the receive's Context, as for the QP's own receives.
//
// PostReceive may be called from any goroutine, one poster at a time (NDKPI Work Request
// Posting Requirements), never blocks and never allocates. Len is safe from any goroutine.
// The limit event (SetLimit) runs on the engine goroutine.
//
// A receive belongs to the SRQ until a QP takes it: flushing or failing a QP cancels only
// the receives it took (they complete StatusCancelled on that QP), never those still
// queued here.
type SRQ struct {
	e      *Engine
	q      *spsc[Receive, *Receive]
	closed atomic.Bool
	// posting is 1 while PostReceive runs: Close waits for it to end before emptying the
	// queue, so a post racing Close either fails ErrSRQClosed or is dropped by Close.
	posting atomic.Int32

	// limit event; engine goroutine only
	limit int    // fire when fewer than limit receives are queued
	armed bool   // the event fires once, then disarms
	fn    func() // what it calls
}

// Errors of SRQs.
var (
	// ErrSRQReceive: receives of a QP created with an SRQ are posted to the SRQ.
	ErrSRQReceive = fmt.Errorf("queue pair takes its receives from a shared receive queue: %w", ErrInvalidRequest)
	// ErrSRQClosed: the SRQ was closed.
	ErrSRQClosed = errors.New("shared receive queue closed")
)

// MaxSRQDepth is the most receives an SRQ holds.
const MaxSRQDepth = 1 << 16

// NewSRQ creates a shared receive queue on the engine that holds up to depth receives
// (rounded up to a power of two; depth in [1, 65536]). QPs of this engine use it through
// QPConfig.SRQ.
func (e *Engine) NewSRQ(depth int) (*SRQ, error) {
	if depth < 1 || depth > MaxSRQDepth {
		return nil, fmt.Errorf("srq depth %d not in [1, %d]: %w", depth, MaxSRQDepth, ErrInvalidRequest)
	}
	return &SRQ{e: e, q: newSPSC[Receive, *Receive](depth, 0)}, nil
}

// Cap is how many receives the SRQ can hold at once: the depth it was created with,
// rounded up to a power of two.
func (s *SRQ) Cap() int { return s.q.capacity() }

// Len is the number of receives queued in the SRQ (posted, not yet taken by a QP): a
// snapshot, safe from any goroutine.
func (s *SRQ) Len() int { return s.q.len() }

// PostReceive queues a receive in the SRQ. It returns ErrQueueFull when Cap receives are
// queued, ErrInvalidRequest for more than MaxSGE SGEs, ErrSRQClosed after Close. The SGL's
// memory belongs to the transport until the receive completes on the QP that took it, or
// until Close returns it. One poster at a time, which may run concurrently with Close;
// never blocks, never allocates.
func (s *SRQ) PostReceive(r *Receive) error {
	if r.NSGE > MaxSGE {
		return fmt.Errorf("%d SGEs (max %d): %w", r.NSGE, MaxSGE, ErrInvalidRequest)
	}
	// Announce the post before looking at closed (Close sets closed before looking at
	// posting): either Close sees the post and waits for it, or the post sees closed.
	s.posting.Store(1)
	defer s.posting.Store(0)
	if s.closed.Load() {
		return ErrSRQClosed
	}
	if !s.q.push(r) {
		return ErrQueueFull
	}
	// No doorbell: a receive is taken when a Send arrives, and a sender that was refused
	// for lack of one retries on its own (RNR NAK).
	return nil
}

// SetLimit arms the SRQ's limit event (NdkModifySrq's notification threshold): fn runs
// once, on the engine goroutine, when taking a receive leaves fewer than n queued, and the
// event is then disarmed until the next SetLimit. With now, the count is also checked
// when the engine runs this request, so an SRQ already below n fires at once (NDK's
// "fires immediately"); without it only a take fires it (a newly created, empty SRQ).
// n <= 0 disarms. fn must not block or call into the engine. SetLimit returns at once; the
// engine applies it at its next poll, in call order with other SetLimit calls. Safe from
// any goroutine.
func (s *SRQ) SetLimit(n int, now bool, fn func()) {
	s.e.command(func(int64) {
		s.limit, s.fn, s.armed = n, fn, n > 0 && fn != nil
		if now {
			s.checkLimit()
		}
	})
}

// checkLimit fires the limit event if it is armed and the queue is below it. Engine
// goroutine.
func (s *SRQ) checkLimit() {
	if s.armed && s.q.len() < s.limit {
		s.armed = false
		s.fn()
	}
}

// take returns the next queued receive for a QP (nil when the SRQ is empty or closed); the
// caller copies it and calls taken. Engine goroutine.
func (s *SRQ) take() *Receive {
	if s.closed.Load() {
		return nil
	}
	return s.q.peek()
}

// taken removes the receive take returned and runs the limit check. Engine goroutine.
func (s *SRQ) taken() {
	s.q.pop()
	s.checkLimit()
}

// Close disarms the limit event and empties the SRQ: every receive still queued is handed
// to drop (if not nil), on the engine goroutine, so the owner can release its memory;
// further posts fail with ErrSRQClosed and QPs on it find it empty (their peers' Sends are
// refused, RNR). Receives QPs already took complete on those QPs as usual. Close the QPs
// first. A PostReceive concurrent with Close either fails ErrSRQClosed or its receive is
// dropped. The call returns once the engine goroutine has done it, or ctx ends.
func (s *SRQ) Close(ctx context.Context, drop func(r *Receive)) error {
	s.closed.Store(true)
	for s.posting.Load() != 0 { // a post in flight: it is a few instructions from done
		if ctx.Err() != nil {
			return ctx.Err()
		}
		runtime.Gosched()
	}
	done := make(chan struct{})
	s.e.command(func(int64) {
		s.armed = false
		for r := s.q.peek(); r != nil; r = s.q.peek() {
			if drop != nil {
				drop(r)
			}
			s.q.pop()
		}
		close(done)
	})
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// srqCredit is how far beyond the oldest incomplete message a QP on an SRQ advertises
// credits: it cannot promise receives, so it sets no limit (the sender's own queue bounds
// what it has outstanding, far below this) and refuses a Send the SRQ has no receive for
// with an RNR NAK. See docs/TRANSPORT.md.
const srqCredit = 1 << 30

// takeSRQ takes receives from the QP's SRQ for every message up to and including msn that
// has none yet, in message order. It reports false when the SRQ ran out (or the QP holds
// as many receives as its ring takes) before msn had one. Engine goroutine.
func (rs *responder) takeSRQ(msn uint32) bool {
	if msn-rs.base >= rs.recvCap {
		return false // beyond the ring: take nothing for it (the sender retries later)
	}
	for !msnBefore(msn, rs.posted) {
		if rs.posted-rs.base >= rs.recvCap {
			return false
		}
		r := rs.srq.take()
		if r == nil {
			return false
		}
		rs.room()
		rs.recvs[rs.posted&rs.mask] = recvState{r: *r}
		rs.posted++
		rs.srq.taken()
	}
	return true
}
