package ndk

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Result is NDK_RESULT: the outcome of one work request or receive.
type Result struct {
	// Status is the request's NTSTATUS (StatusSuccess, or the failure).
	Status Status
	// BytesTransferred is the bytes received (receives) or moved (Send, Write, Read).
	// NDK defines it for receives only.
	BytesTransferred uint32
	// QPContext is the context the QP was created with.
	QPContext any
	// RequestContext is the context the request was posted with.
	RequestContext any
}

// ResultEx is NDK_RESULT_EX: a Result with the operation type and its type-specific output.
type ResultEx struct {
	Result
	// Type is the operation that completed.
	Type OpType
	// ProviderErrorCode is 0 on success; on failure, the transport's own status code
	// (diagnostic only, NDK 2.1).
	ProviderErrorCode uint32
	// TypeSpecific is, for OpTypeReceiveAndInvalidate, the token the peer invalidated.
	TypeSpecific uint64
}

// NotifyFunc is a CQ's notification callback (NdkCqNotificationCallback): status is
// StatusSuccess for an armed event, StatusBufferOverflow when the CQ overran (it and its
// QPs are unusable from then on). Callbacks of an adapter run one at a time on its event
// goroutine, never on the engine's; a callback may call GetResults and Arm.
type NotifyFunc func(status Status)

// CQ is a completion queue (NDK_CQ). One goroutine at a time may take results and arm it
// (GetResults, GetResultsEx, Poll, PollEx, Wait, WaitEx, Arm: NDKPI Completion Handling
// Requirements); the adapter produces into it concurrently. It never allocates on those
// paths. Wait blocks without spinning; Poll and Wait also return the connection events of
// its QPs (ConnectionEnded); FD serves epoll loops.
type CQ struct {
	a      *Adapter
	notify NotifyFunc
	depth  uint64
	ring   []ResultEx
	mask   uint64
	head   atomic.Uint64 // next result to take; written by the consumer
	_      [56]byte
	tail   atomic.Uint64 // next free slot; written by the producer (the engine)

	arm     atomic.Uint32 // 0: not armed; else 1+NotifyType
	since   atomic.Uint32 // sinceAny|sinceSolicited: completions since the last callback
	count   atomic.Uint32 // completions since the last callback (moderation)
	pending atomic.Bool   // queued for the event goroutine
	overrun atomic.Bool
	told    atomic.Bool // the overrun was notified
	closed  atomic.Bool
	cbMu    sync.Mutex // held while the callback runs
	stopped bool       // under cbMu: Close has returned, no callback may start

	// interrupt moderation (ControlInterruptModeration)
	modInterval atomic.Int64  // ns; 0: none
	modCount    atomic.Uint32 // 0/1: none
	modTimer    *time.Timer
	timerSet    atomic.Bool

	// The engines whose QPs complete into the CQ (feed, engines.go): bit i is engine i;
	// bits are never cleared. Once there are two, shared is set and every push holds prodMu.
	engines atomic.Uint64
	shared  atomic.Bool
	prodMu  sync.Mutex
	feedMu  sync.Mutex // serializes feed

	mu  sync.Mutex
	qps []*QP       // QPs completing into this CQ (made unusable by an overrun)
	evs []connEvent // under mu: connection events, at most one per QP in qps (cq_wait.go)

	// Wait and Poll (cq_wait.go)
	waiting atomic.Bool   // a Wait sleeps on wake: the producer signals it
	wake    chan struct{} // buffered 1: a result, an event or Close for the sleeping Wait
	nev     atomic.Int32  // connection events in evs not yet returned

	fd cqFD // the eventfd of FD (cq_fd_linux.go)
}

const (
	sinceAny       = 1
	sinceSolicited = 2 // a solicited receive, or any completion in error
)

// NewCQ creates a completion queue of depth results (NdkCreateCq). notify, if not nil, is
// called after Arm when the armed event happens. Errors: STATUS_INVALID_PARAMETER for a
// depth outside [1, MaxCqDepth], STATUS_INSUFFICIENT_RESOURCES when the adapter has
// too many CQs.
func (a *Adapter) NewCQ(depth int, notify NotifyFunc) (*CQ, error) {
	if err := a.checkOpen(); err != nil {
		return nil, err
	}
	if depth < 1 || depth > maxCQDepth {
		return nil, errorf(StatusInvalidParameter, "CQ depth %d not in [1, %d]", depth, maxCQDepth)
	}
	if a.ncq.Add(1) > maxCQs {
		a.ncq.Add(-1)
		return nil, errorf(StatusInsufficientResources, "more than %d CQs", maxCQs)
	}
	n := pow2(depth)
	cq := &CQ{a: a, notify: notify, depth: uint64(depth), ring: make([]ResultEx, n), mask: uint64(n - 1),
		wake: make(chan struct{}, 1)}
	cq.modTimer = time.AfterFunc(time.Hour, cq.moderationExpired)
	cq.modTimer.Stop()
	return cq, nil
}

// Depth returns the CQ's depth.
func (cq *CQ) Depth() int { return int(cq.depth) }

// GetResults moves up to len(dst) completions into dst, oldest first, and returns how many
// (NdkGetCqResults). With ProgressInline it polls the engine first when the CQ is empty.
// After an overrun it returns 0.
func (cq *CQ) GetResults(dst []Result) int {
	h, n := cq.available(len(dst))
	for i := 0; i < n; i++ {
		r := &cq.ring[(h+uint64(i))&cq.mask]
		dst[i] = r.Result
		*r = ResultEx{}
	}
	if n > 0 {
		cq.head.Store(h + uint64(n)) // not at every empty poll: an atomic exchange
	}
	return n
}

// GetResultsEx is GetResults with the operation type and type-specific output
// (NdkGetCqResultsEx).
func (cq *CQ) GetResultsEx(dst []ResultEx) int {
	h, n := cq.available(len(dst))
	for i := 0; i < n; i++ {
		r := &cq.ring[(h+uint64(i))&cq.mask]
		dst[i] = *r
		*r = ResultEx{}
	}
	if n > 0 {
		cq.head.Store(h + uint64(n)) // not at every empty poll: an atomic exchange
	}
	return n
}

// available returns the head and how many results (at most max) can be taken now.
func (cq *CQ) available(max int) (uint64, int) {
	if cq.overrun.Load() || max <= 0 {
		return cq.head.Load(), 0
	}
	h := cq.head.Load()
	t := cq.tail.Load()
	if t == h && cq.a.opts.Progress == ProgressInline {
		cq.a.pollEngines(cq.engines.Load())
		t = cq.tail.Load()
	}
	return h, int(min(t-h, uint64(max)))
}

// push adds a result. Engine goroutine (or the inline poller): of one engine, or, once QPs
// of several complete into the CQ (shared), of any of them, one at a time. On a full CQ it
// overruns: the CQ and its QPs become unusable and the notification reports
// STATUS_BUFFER_OVERFLOW.
func (cq *CQ) push(r *ResultEx, solicited bool) {
	if cq.shared.Load() {
		cq.prodMu.Lock()
		cq.put(r, solicited)
		cq.prodMu.Unlock()
		return
	}
	cq.put(r, solicited)
}

// put is push by the one producer.
func (cq *CQ) put(r *ResultEx, solicited bool) {
	if cq.overrun.Load() || cq.closed.Load() {
		return
	}
	t := cq.tail.Load()
	if t-cq.head.Load() >= cq.depth {
		cq.overrun.Store(true)
		cq.mu.Lock()
		for _, q := range cq.qps {
			q.unusable.Store(true)
			q.tq.Flush()
		}
		cq.mu.Unlock()
		if cq.arm.Swap(0) != 0 {
			cq.signal()
		}
		cq.wakeWaiter()
		return
	}
	cq.ring[t&cq.mask] = *r
	cq.tail.Store(t + 1)
	if cq.waiting.Load() {
		cq.wakeWaiter()
	}

	bits := uint32(sinceAny)
	if solicited || r.Status != StatusSuccess {
		bits |= sinceSolicited
	}
	if cq.since.Load()&bits != bits {
		cq.since.Or(bits) // a locked operation only when a bit is new
	}
	c := cq.count.Add(1)
	a := cq.arm.Load()
	if a == 0 || !matches(NotifyType(a-1), bits) {
		return
	}
	if !cq.moderationDue(c) {
		return
	}
	if cq.arm.CompareAndSwap(a, 0) {
		cq.signal()
	}
}

// matches reports whether completions with bits satisfy an arm of type t.
func matches(t NotifyType, bits uint32) bool {
	switch t {
	case NotifyAny:
		return bits&sinceAny != 0
	case NotifySolicited:
		return bits&sinceSolicited != 0
	}
	return false // NotifyErrors: CQ errors only
}

// armRank orders notify types for the re-arm merge table (NDKPI Completion Handling
// Requirements): ERRORS < SOLICITED < ANY, and a second arm keeps the broader.
func armRank(t NotifyType) int {
	switch t {
	case NotifyAny:
		return 2
	case NotifySolicited:
		return 1
	}
	return 0
}

// Arm requests one notification (NdkArmCq): of the next completion (NotifyAny), the next
// solicited receive or completion in error (NotifySolicited), or a CQ error only
// (NotifyErrors). It is one-shot; arming again before it fires merges as NDKPI Completion
// Handling Requirements's table says. If completions that match arrived since the last
// callback and are still queued, it fires at once. Unknown types are treated as NotifyAny.
func (cq *CQ) Arm(t NotifyType) {
	if t != NotifyErrors && t != NotifySolicited {
		t = NotifyAny
	}
	cq.a.handOff(cq.engines.Load()) // ProgressInline: the application is about to wait; the adapter serves the engines
	var now uint32
	for {
		cur := cq.arm.Load()
		now = 1 + uint32(t)
		if cur != 0 && armRank(NotifyType(cur-1)) > armRank(t) {
			now = cur
		}
		if cq.arm.CompareAndSwap(cur, now) {
			break
		}
	}
	fire := cq.overrun.Load() && !cq.told.Load()
	if !fire && cq.tail.Load() != cq.head.Load() {
		fire = matches(NotifyType(now-1), cq.since.Load())
	}
	if fire && cq.arm.CompareAndSwap(now, 0) {
		cq.signal()
	}
}

// signal fires the armed notification: it makes the CQ's FD readable, and queues the CQ
// for its callback on the event goroutine. A CQ without a callback counts the notification
// as delivered at once (its FD is all there is to tell).
func (cq *CQ) signal() {
	if cq.closed.Load() {
		return
	}
	cq.fd.kick()
	if cq.notify == nil {
		if cq.overrun.Load() {
			cq.told.Store(true)
		}
		cq.since.Store(0)
		cq.count.Store(0)
		return
	}
	if cq.pending.CompareAndSwap(false, true) {
		select {
		case cq.a.cqs <- cq:
		default: // cannot happen: the channel holds every CQ once
			cq.pending.Store(false)
		}
	}
}

// deliverNotification runs the callback. Event goroutine.
func (cq *CQ) deliverNotification() {
	cq.pending.Store(false)
	cq.cbMu.Lock()
	defer cq.cbMu.Unlock()
	if cq.stopped || cq.closed.Load() {
		return
	}
	st := StatusSuccess
	if cq.overrun.Load() {
		if cq.told.Swap(true) {
			return
		}
		st = StatusBufferOverflow
	}
	cq.since.Store(0)
	cq.count.Store(0)
	cq.notify(st)
}

// ControlInterruptModeration sets notification moderation (NdkControlCqInterruptModeration):
// an armed notification waits until count completions arrived since the last one, or
// interval microseconds after the first of them, whichever comes first. interval 0 or
// count 0/1 turns moderation off; interval math.MaxUint32 lets the count alone govern;
// count math.MaxUint32 or above the depth lets the interval alone govern. Both
// math.MaxUint32 (or the interval MaxUint32 with a count above the depth) is
// STATUS_INVALID_PARAMETER_MIX. The latest call wins.
func (cq *CQ) ControlInterruptModeration(interval, count uint32) error {
	if interval == math.MaxUint32 && (count == math.MaxUint32 || uint64(count) > cq.depth) {
		return errorf(StatusInvalidParameterMix, "interval MAXULONG with count %d", count)
	}
	if interval == 0 || count <= 1 {
		cq.modInterval.Store(0)
		cq.modCount.Store(0)
		return nil
	}
	iv := int64(interval) * int64(time.Microsecond)
	if interval == math.MaxUint32 {
		iv = -1 // count only
	}
	if count == math.MaxUint32 || uint64(count) > cq.depth {
		count = 0 // interval only
	}
	cq.modCount.Store(count)
	cq.modInterval.Store(iv)
	return nil
}

// moderationDue reports whether an armed, matching notification may fire now, with c
// completions since the last callback; if not, it makes sure the interval timer runs.
func (cq *CQ) moderationDue(c uint32) bool {
	iv := cq.modInterval.Load()
	if iv == 0 {
		return true
	}
	if n := cq.modCount.Load(); n > 1 && c >= n {
		return true
	}
	if iv > 0 && cq.timerSet.CompareAndSwap(false, true) {
		cq.modTimer.Reset(time.Duration(iv))
	}
	return false
}

// moderationExpired fires a moderated notification whose interval has passed.
func (cq *CQ) moderationExpired() {
	cq.timerSet.Store(false)
	a := cq.arm.Load()
	if a != 0 && cq.tail.Load() != cq.head.Load() && matches(NotifyType(a-1), cq.since.Load()) &&
		cq.arm.CompareAndSwap(a, 0) {
		cq.signal()
	}
}

// Overrun reports whether the CQ overran (it and its QPs are unusable).
func (cq *CQ) Overrun() bool { return cq.overrun.Load() }

// attach records a QP completing into the CQ, and makes room for its connection event
// now, so that connectionEnded never allocates for it.
func (cq *CQ) attach(q *QP) {
	cq.mu.Lock()
	cq.qps = append(cq.qps, q)
	if cap(cq.evs) < len(cq.qps) {
		evs := make([]connEvent, len(cq.evs), 2*len(cq.qps))
		copy(evs, cq.evs)
		cq.evs = evs
	}
	cq.mu.Unlock()
}

// detach forgets a QP, and its connection event if Wait or Poll has not returned it.
func (cq *CQ) detach(q *QP) {
	cq.mu.Lock()
	for i, x := range cq.qps {
		if x == q {
			cq.qps = append(cq.qps[:i], cq.qps[i+1:]...)
			break
		}
	}
	cq.dropEvent(q)
	cq.mu.Unlock()
}

// Close closes the CQ: no callback runs after it returns (a callback in progress is waited
// for, so Close must not be called from the CQ's own callback). Its QPs should be closed
// first. ctx is unused and kept for symmetry with the other Close methods.
func (cq *CQ) Close(ctx context.Context) error {
	if cq.closed.Swap(true) {
		return nil
	}
	cq.wakeWaiter() // a Wait returns STATUS_INVALID_DEVICE_STATE
	cq.modTimer.Stop()
	cq.cbMu.Lock() // waits for a callback in progress
	cq.stopped = true
	cq.cbMu.Unlock()
	cq.fd.close()
	cq.a.ncq.Add(-1)
	return nil
}
