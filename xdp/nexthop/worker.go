package nexthop

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/xdpndk/xdpndk/xdp/frame"
)

// The resolution worker: one goroutine per Table (per xdp.Device), for all its links. It takes resolution
// requests from the links (through a bounded queue they never wait on) and from ResolvePeer
// callers, resolves many peers at once through a backend (the kernel over netlink in
// production, netlink_linux.go), publishes the results in the table, and keeps the
// table fresh: negative entries expire, resolved entries in use are re-validated, unused
// ones are removed, and the table stays within its bound.

// Constants of the worker.
const (
	// neighTick is the worker's housekeeping period while resolutions are in progress or
	// negative entries exist: job deadlines, negative entries, re-validation and idle
	// entries are looked at this often, and the table clock moves at least this often.
	// 100 ms is a tenth of the default negative TTL, so a failed peer is retried within 10%
	// of its TTL.
	neighTick = 100 * time.Millisecond
	// neighIdleTick is the housekeeping period otherwise: then the clock only orders
	// entries for eviction and times re-validation (30 s) and idle expiry (a minute), and
	// a quiet device's worker wakes once a second.
	neighIdleTick = time.Second
	// neighQueueLen is the capacity of the queue of resolution requests from the links.
	// A link asks once per new peer (not per datagram), so it fills only under a flood of
	// new peers; then requests are dropped and counted and the next datagram asks again.
	neighQueueLen = 256
	// neighNotesLen is the capacity of the queue of backend messages (kernel neighbour
	// events, results of a resolve function).
	neighNotesLen = 256
	// neighDrainMax bounds the requests taken in one round before the worker looks at its
	// other inputs, so that a flood of requests cannot starve events and timers.
	neighDrainMax = 64
)

// resolveFunc resolves a peer's next hop MAC (tests inject one through Config.resolve).
type resolveFunc func(ctx context.Context, peer netip.Addr) ([6]byte, error)

// neighReq asks the worker to resolve a peer.
type neighReq struct {
	ip netip.Addr
	// sync marks a ResolvePeer request: its caller waits, so it is not subject to the
	// bound on resolutions in progress.
	sync bool
}

// neighJob is one resolution or re-validation in progress. Worker only.
type neighJob struct {
	e        *neighEntry
	refresh  bool  // re-validation of a resolved entry (its snapshot stays in use)
	deadline int64 // table clock at which it fails with ErrNextHopUnresolved
	idx      int   // position in neighWorker.jobs
	done     bool

	// Backend state.
	target  netip.Addr // the neighbour to resolve: the peer or its gateway
	gateway netip.Addr
	asked   int // resolution requests made to the kernel
	cancel  context.CancelFunc
}

// neighNote is a message from a backend's goroutines to the worker.
type neighNote struct {
	// job and err (or mac) are a resolve function's result (funcBackend).
	job *neighJob
	mac [6]byte
	err error
	// A kernel neighbour update (netlinkBackend): target's MAC when usable, or failed.
	target netip.Addr
	usable bool
	failed bool
	// lost reports that the kernel's event stream ended (netlinkBackend).
	lost bool
}

// neighBackend finds next hops for the worker. Its methods run on the worker goroutine.
type neighBackend interface {
	// start begins resolving j.e.ip: it may finish j at once (w.finish) or leave it to
	// poll or to a note.
	start(w *neighWorker, j *neighJob)
	// poll advances the jobs in progress; the worker calls it at the time requested
	// through w.pollAt.
	poll(w *neighWorker, now int64)
	// note handles a message of the backend's own goroutines.
	note(w *neighWorker, n neighNote)
	// forget drops j, which ended (deadline, eviction) without the backend finishing it.
	forget(j *neighJob)
	// tick runs with the worker's housekeeping.
	tick(w *neighWorker, now int64)
	// close releases the backend's resources; the worker has stopped.
	close()
}

// neighConfig is what the worker needs from the device.
type neighConfig struct {
	srcMAC       [6]byte
	src          netip.Addr
	port         uint16
	timeout      time.Duration // Config.ResolveTimeout
	negativeTTL  time.Duration
	refresh      time.Duration // Config.NeighbourRefresh
	idle         time.Duration // unused this long, an entry is removed: 2 × refresh
	maxResolving int
}

// neighWorker is a device's resolution worker.
type neighWorker struct {
	t     *neighTable
	cfg   neighConfig
	b     neighBackend
	reqs  chan neighReq
	notes chan neighNote
	// wake rings the doorbells of the links that hold datagrams.
	wake func()

	jobs     []*neighJob
	byTarget map[netip.Addr][]*neighEntry // resolved entries by the neighbour they use
	pollAt   int64                        // when the backend wants poll (0: never)
	lastKeep int64                        // clock of the previous housekeeping
	finished bool                         // this round finished a resolution: broadcast
	start    time.Time
	done     chan struct{}
	stopped  chan struct{}
}

func newNeighWorker(t *neighTable, cfg neighConfig, b neighBackend, wake func()) *neighWorker {
	return &neighWorker{
		t: t, cfg: cfg, b: b, wake: wake,
		reqs:     make(chan neighReq, neighQueueLen),
		notes:    make(chan neighNote, neighNotesLen),
		byTarget: make(map[netip.Addr][]*neighEntry),
		start:    time.Now(),
		done:     make(chan struct{}),
		stopped:  make(chan struct{}),
	}
}

// now returns the table clock, advancing it.
func (w *neighWorker) now() int64 {
	n := int64(time.Since(w.start))
	w.t.clock.Store(n)
	return n
}

// ask queues a request without waiting: a full queue drops it (counted). Any goroutine.
func (w *neighWorker) ask(ip netip.Addr) {
	select {
	case w.reqs <- neighReq{ip: ip}:
	default:
		w.t.stats.dropped.Add(1)
	}
}

// run is the worker goroutine.
func (w *neighWorker) run() {
	defer close(w.stopped)
	timer := time.NewTimer(neighTick)
	defer timer.Stop()
	now := w.now()
	nextTick := now + int64(neighTick)
	for {
		select {
		case <-w.done:
			for _, j := range w.jobs {
				w.b.forget(j)
				if j.cancel != nil {
					j.cancel()
				}
			}
			return
		case r := <-w.reqs:
			now = w.now()
			w.request(r, now)
		drain:
			for range neighDrainMax - 1 {
				select {
				case r := <-w.reqs:
					w.request(r, now)
				default:
					break drain
				}
			}
		case n := <-w.notes:
			w.now()
			w.b.note(w, n)
		case <-timer.C:
		}
		now = w.now()
		busy := len(w.jobs) > 0 || w.t.nFailed.Load() > 0
		switch {
		case now >= nextTick:
			w.housekeep(now)
			w.b.tick(w, now)
			nextTick = now + int64(neighIdleTick)
			if len(w.jobs) > 0 || w.t.nFailed.Load() > 0 {
				nextTick = now + int64(neighTick)
			}
		case busy:
			nextTick = min(nextTick, now+int64(neighTick))
		}
		if w.pollAt != 0 && now >= w.pollAt {
			w.pollAt = 0
			w.b.poll(w, w.now())
		}
		if w.finished {
			w.finished = false
			w.t.broadcast()
			w.wake()
		}
		next := nextTick
		if w.pollAt != 0 && w.pollAt < next {
			next = w.pollAt
		}
		timer.Reset(time.Duration(max(next-w.now(), 0)))
	}
}

// stop ends the worker and, if it was started, waits for it.
func (w *neighWorker) stop(started bool) {
	select {
	case <-w.done:
	default:
		close(w.done)
	}
	if started {
		<-w.stopped
	}
}

// wantPoll asks for a backend poll at time at.
func (w *neighWorker) wantPoll(at int64) {
	if w.pollAt == 0 || at < w.pollAt {
		w.pollAt = at
	}
}

// request handles one resolution request.
func (w *neighWorker) request(r neighReq, now int64) {
	if e := w.t.entries[r.ip]; e != nil {
		return // pending (being resolved), resolved, or failed and not expired yet
	}
	if !r.sync && len(w.jobs) >= w.cfg.maxResolving {
		w.t.stats.dropped.Add(1)
		return
	}
	w.t.stats.requests.Add(1)
	e := w.t.insert(r.ip, now, w.evict)
	w.startJob(e, false, now)
}

// startJob begins resolving e (a first resolution, or a re-validation when refresh).
func (w *neighWorker) startJob(e *neighEntry, refresh bool, now int64) {
	j := &neighJob{e: e, refresh: refresh, deadline: now + int64(w.cfg.timeout), idx: len(w.jobs)}
	e.job = j
	e.stale = false
	w.jobs = append(w.jobs, j)
	w.t.nResolving.Store(int64(len(w.jobs)))
	w.b.start(w, j)
}

// endJob takes j out of the jobs in progress.
func (w *neighWorker) endJob(j *neighJob) {
	j.done = true
	last := len(w.jobs) - 1
	w.jobs[j.idx] = w.jobs[last]
	w.jobs[j.idx].idx = j.idx
	w.jobs[last] = nil
	w.jobs = w.jobs[:last]
	w.t.nResolving.Store(int64(len(w.jobs)))
	if j.e.job == j {
		j.e.job = nil
	}
	if j.cancel != nil {
		j.cancel()
	}
}

// evict removes e from the table, ending its job.
func (w *neighWorker) evict(e *neighEntry) {
	if j := e.job; j != nil {
		w.b.forget(j)
		w.endJob(j)
	}
	w.untarget(e)
	w.t.remove(e)
}

// finish ends job j: resolved through gateway (the zero Addr on-link) to mac when err is
// nil, else failed with err.
func (w *neighWorker) finish(j *neighJob, mac [6]byte, gateway netip.Addr, err error) {
	if j.done {
		return
	}
	w.endJob(j)
	e := j.e
	old := e.snap.Load()
	if old.state == neighEvicted {
		return
	}
	now := w.now()
	var s *Snap
	if err == nil {
		s, err = w.resolvedSnap(e.ip, mac, gateway)
	}
	if j.refresh {
		w.t.stats.refreshes.Add(1)
	}
	switch {
	case err == nil:
		e.validated = now
		if j.refresh {
			if old.state == NeighbourResolved && old.mac == mac && old.gateway == gateway {
				return
			}
			w.t.stats.changes.Add(1)
		} else {
			w.t.stats.resolutions.Add(1)
		}
		target := gateway
		if !target.IsValid() {
			target = e.ip
		}
		w.retarget(e, target)
		w.t.publish(e, s)
		w.finished = true
		return
	case j.refresh && !definitive(err):
		// A netlink error, not an answer: keep the next hop we have and look again after
		// the next refresh period.
		e.validated = now
		return
	case j.refresh:
		w.t.stats.changes.Add(1)
	default:
		w.t.stats.failures.Add(1)
	}
	e.expires = now + int64(w.cfg.negativeTTL)
	w.untarget(e)
	w.t.publish(e, &Snap{state: NeighbourFailed, err: err})
	w.finished = true
}

// definitive reports whether a resolution error is an answer about the peer (no route, no
// Ethernet next hop, nobody answered) rather than a failure to ask.
func definitive(err error) bool {
	return errors.Is(err, ErrNoRoute) || errors.Is(err, ErrNoEthernetNextHop) || errors.Is(err, ErrNextHopUnresolved)
}

// resolvedSnap builds the snapshot of a peer resolved through gateway to mac.
func (w *neighWorker) resolvedSnap(ip netip.Addr, mac [6]byte, gateway netip.Addr) (*Snap, error) {
	s := &Snap{state: NeighbourResolved, mac: mac, gateway: gateway}
	s.encap = frame.Encap{SrcMAC: w.cfg.srcMAC, DstMAC: mac, Src: w.cfg.src, Dst: ip.WithZone(""),
		SrcPort: w.cfg.port, DstPort: w.cfg.port}
	if err := s.encap.Validate(); err != nil {
		return nil, fmt.Errorf("header template for %v: %w", ip, err)
	}
	return s, nil
}

// retarget lists e under the neighbour it now uses.
func (w *neighWorker) retarget(e *neighEntry, target netip.Addr) {
	if e.tidx >= 0 && e.target == target {
		return
	}
	w.untarget(e)
	e.target = target
	list := w.byTarget[target]
	e.tidx = len(list)
	w.byTarget[target] = append(list, e)
}

// untarget drops e from the neighbour index.
func (w *neighWorker) untarget(e *neighEntry) {
	if e.tidx < 0 {
		return
	}
	list := w.byTarget[e.target]
	last := len(list) - 1
	list[e.tidx] = list[last]
	list[e.tidx].tidx = e.tidx
	list[last] = nil
	if last == 0 {
		delete(w.byTarget, e.target)
	} else {
		w.byTarget[e.target] = list[:last]
	}
	e.tidx = -1
}

// neighbourChanged applies a kernel report that neighbour target now has mac: resolved
// entries through it take the new MAC at once.
func (w *neighWorker) neighbourChanged(target netip.Addr, mac [6]byte) {
	for _, e := range w.byTarget[target] {
		old := e.snap.Load()
		if old.state != NeighbourResolved || old.mac == mac {
			continue
		}
		s, err := w.resolvedSnap(e.ip, mac, old.gateway)
		if err != nil {
			continue // the MAC is not usable (multicast): the next re-validation decides
		}
		e.validated = w.t.clock.Load()
		w.t.stats.changes.Add(1)
		w.t.publish(e, s)
		w.finished = true
	}
}

// neighbourFailed applies a kernel report that neighbour target failed: resolved entries
// through it are re-validated at the next tick.
func (w *neighWorker) neighbourFailed(target netip.Addr) {
	for _, e := range w.byTarget[target] {
		e.stale = true
	}
}

// staleAll marks every resolved entry for re-validation (neighbour events were lost).
func (w *neighWorker) staleAll() {
	for _, list := range w.byTarget {
		for _, e := range list {
			e.stale = true
		}
	}
}

// housekeep fails jobs past their deadline, removes expired and idle entries, and starts
// re-validations.
func (w *neighWorker) housekeep(now int64) {
	for i := 0; i < len(w.jobs); i++ {
		j := w.jobs[i]
		if now < j.deadline {
			continue
		}
		target := j.target
		if !target.IsValid() {
			target = j.e.ip
		}
		err := fmt.Errorf("next hop for %v: neighbour %v not resolved within %v after %d requests: %w",
			j.e.ip, target, w.cfg.timeout, j.asked, ErrNextHopUnresolved)
		w.b.forget(j)
		w.finish(j, [6]byte{}, netip.Addr{}, err)
		i-- // finish moved the last job here
	}
	refresh, idle := int64(w.cfg.refresh), int64(w.cfg.idle)
	since := w.lastKeep // a use stored a clock value at least this: used since the last round
	w.lastKeep = now
	t := w.t
	for i := 0; i < len(t.all); i++ {
		e := t.all[i]
		switch e.snap.Load().state {
		case NeighbourFailed:
			if now >= e.expires {
				w.evict(e)
				t.stats.expired.Add(1)
				i--
			}
		case NeighbourResolved:
			used := e.used.Load()
			switch {
			case e.job != nil:
			case now-used > idle && used < since:
				w.evict(e)
				t.stats.expired.Add(1)
				i--
			case (e.stale || now-e.validated >= refresh) && (now-used < refresh || used >= since) &&
				len(w.jobs) < w.cfg.maxResolving:
				// In use lately (the clock moves only at the worker's rounds, so a use
				// since the previous round counts too) and not validated for a while (or
				// reported failed): look again, keeping the old next hop meanwhile.
				w.startJob(e, true, now)
			}
		}
	}
}

// resolvePeer resolves peer (ResolvePeer's work): it returns nil when the peer is
// resolved, the resolution error when it failed (also a recent failure, from the negative
// entry), or ctx's error.
func (w *neighWorker) resolvePeer(ctx context.Context, peer netip.Addr) error {
	for {
		e, changed := w.t.lookupWait(peer)
		if e != nil {
			s := e.snap.Load()
			w.t.touch(e)
			switch s.state {
			case NeighbourResolved:
				return nil
			case NeighbourFailed:
				return s.err
			case neighEvicted:
				continue // removed meanwhile: look it up again
			}
		} else {
			select {
			case w.reqs <- neighReq{ip: peer, sync: true}:
			case <-ctx.Done():
				return fmt.Errorf("resolve %v: %w", peer, ctx.Err())
			case <-w.done:
				return fmt.Errorf("resolve %v: device closed", peer)
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("resolve %v: %w", peer, ctx.Err())
		case <-w.done:
			return fmt.Errorf("resolve %v: device closed", peer)
		}
	}
}

// funcBackend resolves through a function, one goroutine per peer (tests).
type funcBackend struct{ fn resolveFunc }

func (b funcBackend) start(w *neighWorker, j *neighJob) {
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.timeout)
	j.cancel = cancel
	ip := j.e.ip
	timeout := w.cfg.timeout
	go func() {
		mac, err := b.fn(ctx, ip)
		if err != nil && ctx.Err() != nil {
			// The device's own deadline, not a caller's: the peer did not resolve in time.
			err = fmt.Errorf("next hop for %v: not resolved within %v: %w", ip, timeout, ErrNextHopUnresolved)
		}
		select {
		case w.notes <- neighNote{job: j, mac: mac, err: err}:
		case <-w.done:
		}
	}()
}

func (funcBackend) poll(*neighWorker, int64) {}

func (funcBackend) note(w *neighWorker, n neighNote) {
	if n.job != nil {
		w.finish(n.job, n.mac, netip.Addr{}, n.err)
	}
}

func (funcBackend) forget(*neighJob)         {}
func (funcBackend) tick(*neighWorker, int64) {}
func (funcBackend) close()                   {}
