package ndk

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/xdpndk/xdpndk/transport"
)

// maxSRQDepth is the deepest SRQ (AdapterInfo.MaxSrqDepth): the transport's.
const maxSRQDepth = transport.MaxSRQDepth

// SRQ is a shared receive queue (NDK_SRQ: NDKPI NdkCreateSrq, NdkSrqReceive, NdkModifySrq):
// receives posted to it are consumed by every QP created with QPConfig.SRQ set to it, each
// QP taking the next one when a new incoming Send needs it. A receive's result goes to the
// receive CQ of the QP that took it, with that QP's context and the receive's request
// context. Flushing or closing a QP cancels only the receives it took; those still queued
// stay in the SRQ.
//
// Receive calls are serialized by the caller (NDKPI Work Request Posting Requirements);
// Receive never blocks and never allocates. Modify and Close are safe concurrently with
// each other and with Receive. The notification callback runs on the adapter's event
// goroutine.
type SRQ struct {
	pd     *PD
	a      *Adapter
	ts     *transport.SRQ
	maxSGE int

	depth atomic.Int64 // the most receives outstanding (posted, not completed); Modify changes it

	// Slots hold each receive's context and memory holds. Receives complete in any order
	// (several QPs), so slots are handed out from a free list: the poster takes indices,
	// the engine goroutine returns them. The slots not on it are the receives outstanding.
	slots []rslot
	free  idxRing
	rr    transport.Receive // poster's scratch receive

	notify  func(Status)
	fire    func() // the engine's limit event: queues deliver on the event goroutine
	deliver func()

	mu     sync.Mutex // serializes Modify and Close
	closed atomic.Bool
}

// NewSRQ creates a shared receive queue in the PD (NdkCreateSrq) that holds up to depth
// receives of at most maxSGE SGEs each (0: the adapter's maximum). notify, if not nil, is
// the SRQ's notification callback (NdkSrqNotificationCallback), run on the adapter's
// event goroutine: with notifyThreshold > 0 it is armed for one call with StatusSuccess
// when taking a receive leaves fewer than notifyThreshold queued (the new SRQ is empty:
// posting and then consuming receives is what fires it); Modify re-arms it. Errors:
// STATUS_INVALID_PARAMETER for a value beyond the adapter's limits (QueryAdapterInfo) or a
// threshold over the depth.
func (pd *PD) NewSRQ(depth, maxSGE, notifyThreshold int, notify func(Status)) (*SRQ, error) {
	a := pd.a
	if err := a.checkOpen(); err != nil {
		return nil, err
	}
	if maxSGE == 0 {
		maxSGE = transport.MaxSGE
	}
	switch {
	case depth < 1 || depth > maxSRQDepth:
		return nil, errorf(StatusInvalidParameter, "SRQ depth %d not in [1, %d]", depth, maxSRQDepth)
	case maxSGE < 1 || maxSGE > transport.MaxSGE:
		return nil, errorf(StatusInvalidParameter, "SRQ SGE limit %d not in [1, %d]", maxSGE, transport.MaxSGE)
	case notifyThreshold < 0 || notifyThreshold > depth:
		return nil, errorf(StatusInvalidParameter, "SRQ notify threshold %d not in [0, depth %d]", notifyThreshold, depth)
	}
	ts, err := a.grp.NewSRQ(depth)
	if err != nil {
		return nil, wrap(StatusInvalidParameter, err)
	}
	n := ts.Cap()
	s := &SRQ{pd: pd, a: a, ts: ts, maxSGE: maxSGE, slots: make([]rslot, n), notify: notify}
	s.free.init(n)
	s.depth.Store(int64(depth))
	s.deliver = func() {
		if !s.closed.Load() {
			s.notify(StatusSuccess)
		}
	}
	s.fire = func() { s.a.event(s.deliver) }
	if notifyThreshold > 0 && notify != nil {
		ts.SetLimit(notifyThreshold, false, s.fire)
	}
	a.objMu.Lock()
	if a.srqs == nil {
		a.srqs = make(map[*SRQ]struct{})
	}
	a.srqs[s] = struct{}{}
	a.objMu.Unlock()
	return s, nil
}

// Depth is the SRQ's current depth: the most receives it holds outstanding.
func (s *SRQ) Depth() int { return int(s.depth.Load()) }

// Queued is how many receives wait in the SRQ (posted, not yet taken by a QP): a snapshot.
func (s *SRQ) Queued() int { return s.ts.Len() }

// outstanding is how many receives are posted and not completed: a snapshot.
func (s *SRQ) outstanding() int64 { return int64(len(s.slots) - s.free.len()) }

// Receive posts a receive buffer to the SRQ (NdkSrqReceive); any QP on the SRQ may
// consume it. The SGEs need local write. Errors: STATUS_INVALID_PARAMETER (too many SGEs),
// STATUS_ACCESS_VIOLATION (an SGE outside its region), STATUS_INSUFFICIENT_RESOURCES
// (depth receives are outstanding), STATUS_INVALID_DEVICE_STATE after Close.
func (s *SRQ) Receive(requestContext any, sgl []SGE) error {
	if err := s.a.checkOpen(); err != nil {
		return err
	}
	if s.closed.Load() {
		return errorf(StatusInvalidDeviceState, "SRQ closed")
	}
	if len(sgl) > s.maxSGE {
		return errorf(StatusInvalidParameter, "%d SGEs (max %d)", len(sgl), s.maxSGE)
	}
	if s.outstanding() >= s.depth.Load() {
		return errorf(StatusInsufficientResources, "SRQ full (%d)", s.depth.Load())
	}
	// A slot is free: fewer than depth receives are outstanding, and the depth is at most
	// len(s.slots). It leaves the free list only once its receive is ready to post.
	i, _ := s.free.peek()
	sl := &s.slots[i]
	if !s.pd.acquire(&sl.holds, sgl, true) {
		return errorf(StatusAccessViolation, "receive SGE outside its region or without local write")
	}
	sl.ctx = requestContext
	r := &s.rr
	*r = transport.Receive{Context: uint64(i)}
	r.NSGE = fillSGL(&r.SGL, sgl)
	s.free.pop() // before the engine can complete it and return the slot
	if err := s.ts.PostReceive(r); err != nil {
		// Only a concurrent Close refuses it (the SGE count was checked, the queue has
		// room for every outstanding receive): the SRQ is done with, its slot stays taken.
		releaseHolds(&sl.holds)
		*sl = rslot{}
		return postError(err)
	}
	return nil
}

// complete frees the slot of a receive that completed (on a QP) or was dropped (Close),
// and returns its request context. Engine goroutine.
func (s *SRQ) complete(i uint64) any {
	sl := &s.slots[i&uint64(len(s.slots)-1)]
	releaseHolds(&sl.holds)
	ctx := sl.ctx
	*sl = rslot{}
	s.free.push(uint32(i & uint64(len(s.slots)-1)))
	return ctx
}

// Modify changes the SRQ's depth and arms its notification (NdkModifySrq). A depth
// of 0 keeps the depth; another depth must be at least the receives outstanding (posted
// and not completed) and at most the adapter's MaxSrqDepth, else STATUS_INVALID_PARAMETER.
// The SRQ's storage is sized at creation for the creation depth rounded up to a power of
// two; a depth beyond that fails with STATUS_INSUFFICIENT_RESOURCES (the SRQ is not
// resized, as on hardware without SRQ resize). A threshold > 0 (at most the depth) arms
// one notification, fired when the number of queued receives falls below it, or at once
// if it already is; after firing the notification is disarmed until the next Modify with
// a threshold > 0. A threshold of 0 keeps the current threshold and arm state.
func (s *SRQ) Modify(depth, notifyThreshold int) error {
	if err := s.a.checkOpen(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return errorf(StatusInvalidDeviceState, "SRQ closed")
	}
	if depth < 0 || depth > maxSRQDepth || notifyThreshold < 0 {
		return errorf(StatusInvalidParameter, "SRQ depth %d / threshold %d out of range", depth, notifyThreshold)
	}
	d := s.depth.Load()
	if depth > 0 {
		if out := s.outstanding(); int64(depth) < out {
			return errorf(StatusInvalidParameter, "SRQ depth %d below the %d receives outstanding", depth, out)
		}
		if depth > len(s.slots) {
			return errorf(StatusInsufficientResources, "SRQ depth %d over its capacity %d", depth, len(s.slots))
		}
		d = int64(depth)
	}
	if int64(notifyThreshold) > d {
		return errorf(StatusInvalidParameter, "SRQ notify threshold %d over the depth %d", notifyThreshold, d)
	}
	s.depth.Store(d)
	if notifyThreshold > 0 && s.notify != nil {
		s.ts.SetLimit(notifyThreshold, true, s.fire)
	}
	return nil
}

// Close closes the SRQ (NdkCloseObject): the receives still queued are dropped (no
// result; their memory holds are released) and no notification is delivered afterwards.
// Close the QPs on it first: receives they took complete on them as usual. ctx bounds the
// wait for the engine (STATUS_PENDING if it ends first).
func (s *SRQ) Close(ctx context.Context) error {
	if s.a.stopped.Load() {
		return nil // the adapter closed it
	}
	return s.close(ctx)
}

// close is Close, also while the adapter closes.
func (s *SRQ) close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Swap(true) {
		return nil
	}
	s.a.objMu.Lock()
	delete(s.a.srqs, s)
	s.a.objMu.Unlock()
	if err := s.ts.Close(ctx, func(r *transport.Receive) { s.complete(r.Context) }); err != nil {
		return wrap(StatusPending, err)
	}
	return nil
}

// idxRing is a fixed single-producer/single-consumer ring of slot indices: the engine
// goroutine returns freed slots (push), the poster takes them (pop). It holds every index
// at most once, so it never overflows.
type idxRing struct {
	idx  []uint32
	mask uint64
	head atomic.Uint64 // next to pop; written by the consumer
	_    [56]byte
	tail atomic.Uint64 // next to push; written by the producer
}

// init fills the ring with the indices 0..n-1 (n a power of two). Before any concurrency.
func (r *idxRing) init(n int) {
	r.idx, r.mask = make([]uint32, n), uint64(n-1)
	for i := range r.idx {
		r.idx[i] = uint32(i)
	}
	r.tail.Store(uint64(n))
}

// push returns index i. Producer side.
func (r *idxRing) push(i uint32) {
	t := r.tail.Load()
	r.idx[t&r.mask] = i
	r.tail.Store(t + 1)
}

// peek returns the next index pop takes; false when none is free. Consumer side.
func (r *idxRing) peek() (uint32, bool) {
	h := r.head.Load()
	if h == r.tail.Load() {
		return 0, false
	}
	return r.idx[h&r.mask], true
}

// pop takes the index peek returned. Consumer side, after a successful peek.
func (r *idxRing) pop() { r.head.Add(1) }

// len is how many indices are free: a snapshot, from any goroutine (head is read first:
// tail only grows, so the difference is never negative).
func (r *idxRing) len() int {
	h := r.head.Load()
	return int(r.tail.Load() - h)
}
