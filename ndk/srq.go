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

	// A receive's record is the transport's: its request context and memory holds travel
	// with it as its PosterData, from the SRQ to the QP that takes it and back in its
	// completion. The receives outstanding are those posted and not completed (on a QP,
	// or dropped by Close).
	posted    atomic.Int64      // written by the poster
	completed atomic.Int64      // written by the engine goroutine
	rr        transport.Receive // the poster's, copied into the queue

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
	s := &SRQ{pd: pd, a: a, ts: ts, maxSGE: maxSGE, notify: notify}
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
func (s *SRQ) outstanding() int64 { return s.posted.Load() - s.completed.Load() }

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
	r := &s.rr
	*r = transport.Receive{Poster: transport.PosterData{Context: requestContext}}
	if !s.pd.acquire(&r.Poster.Holds, sgl, true) {
		return errorf(StatusAccessViolation, "receive SGE outside its region or without local write")
	}
	r.NSGE = fillSGL(&r.SGL, sgl)
	s.posted.Add(1) // before the engine can complete it
	if err := s.ts.PostReceive(r); err != nil {
		// Only a concurrent Close refuses it (the SGE count was checked, the queue has
		// room for every outstanding receive): the SRQ is done with.
		releaseHolds(&r.Poster.Holds)
		*r = transport.Receive{}
		s.completed.Add(1)
		return postError(err)
	}
	*r = transport.Receive{} // the queue has its copy: drop the references
	return nil
}

// dropped releases what a receive that Close dropped held, and counts it completed.
func (s *SRQ) dropped(r *transport.Receive) {
	releaseHolds(&r.Poster.Holds)
	s.completed.Add(1)
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
		if depth > s.ts.Cap() {
			return errorf(StatusInsufficientResources, "SRQ depth %d over its capacity %d", depth, s.ts.Cap())
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
	if err := s.ts.Close(ctx, s.dropped); err != nil {
		return wrap(StatusPending, err)
	}
	return nil
}
