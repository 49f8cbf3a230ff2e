package transport

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"

	"github.com/xdpndk/xdpndk/transport/wire"
)

// Engine runs the protocol for the QPs placed on one Link (one AF_XDP queue). Poll does one
// round of work (PollNow: at the engine's own clock); Run calls PollNow in a loop. Exactly
// one goroutine at a time may call Poll, PollNow or Run. NewQP, Listen, Connect and the
// posting methods of QPs are safe from any goroutine.
type Engine struct {
	cfg  Config
	link link.Link
	now  func() int64

	mu      sync.Mutex // guards qps (writers: NewQP/close), cmds, listeners
	qps     map[uint32]*QP
	qpView  atomic.Pointer[map[uint32]*QP] // copy of qps for lock-free lookups per packet
	nextQPN uint32
	cmds    []func(now int64) // control-path work for the engine goroutine
	hasCmd  atomic.Bool

	// engine goroutine state
	active []*QP // connected or erroring QPs the engine polls
	rxPkts [64]link.Packet
	tx     txBatch
	parsed wire.Packet
	entry  wire.Packet // the entry of a Bundle being handed to its QP
	segs   [link.MaxSegments][]byte
	txDone [64]uint64 // cookies read from the link's TxDone
	round  uint64     // Poll calls so far (never 0 after the first): acks deferred by a round

	cm cmState
	g  groupState // several engines of one host (group.go); zero when alone

	sleeping atomic.Bool
	ctr      engineCounters

	sched sched // which of the active QPs a round polls (sched.go)
}

// engineCounters count what the engine dropped and why.
type engineCounters struct {
	rxPackets, txPackets, badPackets, noQP, badSource, badCookie, outOfWindow atomic.Uint64
	cmDrops, halfOpenFull, txRefused                                          atomic.Uint64
	bundlesSent, bundledSent, bundlesRecv, bundledRecv, multiSent, multiRecv  atomic.Uint64
}

// EngineStats are an engine's counters.
type EngineStats struct {
	RxPackets, TxPackets uint64 // datagrams received from and handed to the link
	Malformed            uint64 // failed to parse (length, version, CRC...)
	// NoQP, BadSource and BadCookie count datagrams, and each group of a multi-QP Bundle
	// (it names its own QP), dropped because they were:
	NoQP         uint64 // addressed to a QP that does not exist
	BadSource    uint64 // from an address other than the QP's peer
	BadCookie    uint64 // with the wrong connection cookie
	OutOfWindow  uint64 // PSN outside the receive window
	CMDropped    uint64 // connection-management messages that matched nothing or had a field out of range
	HalfOpenFull uint64 // connection requests refused because MaxHalfOpen were pending
	TxRefused    uint64 // datagrams the link refused outright (too large: a bug); reliability resends or times out
	// BundlesSent and BundlesReceived count Bundle datagrams (several small data packets in
	// one datagram, of one QP or of several to one peer), BundledSent and BundledReceived
	// the data packets they carried. A bundle is received when at least one of its entries
	// reached its QP; in a group, a multi-QP Bundle whose entries two engines own counts at
	// each.
	BundlesSent, BundledSent, BundlesReceived, BundledReceived uint64
	// MultiBundlesSent and MultiBundlesReceived count the multi-QP Bundles among them
	// (entries of several QPs to one peer).
	MultiBundlesSent, MultiBundlesReceived uint64
}

// MaxQPs is the most QPs the engine holds at once (Config.MaxQPs).
func (e *Engine) MaxQPs() int { return e.cfg.MaxQPs }

// Stats returns the engine's counters. Safe from any goroutine.
func (e *Engine) Stats() EngineStats {
	c := &e.ctr
	return EngineStats{
		RxPackets: c.rxPackets.Load(), TxPackets: c.txPackets.Load(), Malformed: c.badPackets.Load(),
		NoQP: c.noQP.Load(), BadSource: c.badSource.Load(), BadCookie: c.badCookie.Load(),
		OutOfWindow: c.outOfWindow.Load(), CMDropped: c.cmDrops.Load(), HalfOpenFull: c.halfOpenFull.Load(),
		TxRefused: c.txRefused.Load(), BundlesSent: c.bundlesSent.Load(), BundledSent: c.bundledSent.Load(),
		BundlesReceived: c.bundlesRecv.Load(), BundledReceived: c.bundledRecv.Load(),
		MultiBundlesSent: c.multiSent.Load(), MultiBundlesReceived: c.multiRecv.Load(),
	}
}

// NewEngine creates an engine on cfg.Link.
func NewEngine(cfg Config) (*Engine, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	if cfg.Link.MaxPayload() < wire.MinMaxPayload {
		return nil, fmt.Errorf("link max payload %d is below the protocol's %d", cfg.Link.MaxPayload(), wire.MinMaxPayload)
	}
	e := &Engine{cfg: cfg, link: cfg.Link, now: cfg.Now, qps: make(map[uint32]*QP)}
	e.nextQPN = uint32(randUint64()>>40) | 1 // random start: QPNs of a restarted engine differ
	e.tx.link, e.tx.ctr = cfg.Link, &e.ctr
	e.tx.refused = e.txFinished
	for i := range e.tx.bounce {
		e.tx.bounce[i] = make([]byte, bounceLen(cfg.Link.MaxPayload()))
	}
	e.tx.small = make([]byte, max(cfg.PackLimit, 0))
	e.sched.init(cfg.MaxQPs)
	e.cm.init(e)
	return e, nil
}

// Limits of Config.MaxQPs.
const (
	// DefaultMaxQPs is Config.MaxQPs when it is 0.
	DefaultMaxQPs = 1024
	// MaxQPLimit is the largest Config.MaxQPs.
	MaxQPLimit = 1 << 16
)

// ErrTooManyQPs is returned by NewQP when Config.MaxQPs QPs exist.
var ErrTooManyQPs = errors.New("too many queue pairs")

// NewQP creates a queue pair on the engine, in the idle state. It fails with ErrTooManyQPs
// when Config.MaxQPs exist already.
func (e *Engine) NewQP(cfg QPConfig) (*QP, error) {
	if cfg.Sink == nil {
		return nil, errors.New("qp config: completion sink required")
	}
	if cfg.SendDepth == 0 {
		cfg.SendDepth = 256
	}
	if cfg.RecvDepth == 0 {
		cfg.RecvDepth = 256
	}
	if cfg.IRD == 0 {
		cfg.IRD = 16
	}
	if cfg.ORD == 0 {
		cfg.ORD = 16
	}
	if cfg.SendDepth < 1 || cfg.SendDepth > MaxQueueDepth || cfg.RecvDepth < 1 || cfg.RecvDepth > MaxQueueDepth || cfg.IRD < 0 || cfg.ORD < 0 || cfg.IRD > 255 || cfg.ORD > 255 {
		return nil, errors.New("qp config: depths must be in [1, 65536] and read limits in [0, 255]")
	}
	if cfg.SRQ != nil && cfg.SRQ.e != e {
		return nil, errors.New("qp config: the srq belongs to another engine")
	}
	if cfg.RetryTimeout < 0 || cfg.RNRTimeout < 0 {
		return nil, errors.New("qp config: negative retry or RNR timeout")
	}
	if cfg.RetryTimeout == 0 {
		cfg.RetryTimeout = e.cfg.RetryTimeout
	}
	if cfg.RNRTimeout == 0 {
		cfg.RNRTimeout = e.cfg.RNRTimeout
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = e.cfg.KeepAlive
	}
	q := newQP(e, cfg)
	e.mu.Lock()
	if len(e.qps) >= e.cfg.MaxQPs {
		e.mu.Unlock()
		return nil, fmt.Errorf("%d queue pairs exist (Config.MaxQPs): %w", len(e.qps), ErrTooManyQPs)
	}
	for {
		e.nextQPN += e.g.qpnStep()
		if e.nextQPN != 0 && e.qps[e.nextQPN] == nil {
			break
		}
	}
	q.qpn = e.nextQPN
	q.conn.qpn = q.qpn
	q.home.Store(e)
	slot := e.sched.alloc()
	q.setBell(e, slot)
	e.qps[q.qpn] = q
	e.publishQPs()
	e.mu.Unlock()
	return q, nil
}

// closeDrain bounds how long Close waits for the link to finish a QP's zero-copy packets.
const closeDrain = 100 * time.Millisecond

// Close removes a QP from the engine: outstanding requests complete cancelled first (with
// Config.ZeroCopyTx, each once the link has finished transmitting its packets, for at most
// 100 ms; after that the QP's memory is released regardless). Every work request and
// receive posted to it completes exactly once, whatever the QP's state: idle, connecting,
// refused, connected, disconnected or failed; a connection attempt or accepted request in
// progress is abandoned (the peer is refused), a graceful disconnect in progress ends
// (ErrConnectCancelled). The call returns once the engine goroutine has done it, or ctx
// ends.
func (q *QP) Close(ctx context.Context) error {
	done := make(chan struct{})
	var remove func(now int64)
	var since int64
	remove = func(now int64) {
		if since == 0 {
			since = now
			q.e.cm.forget(now, q)
		}
		if !q.close(now-since >= int64(closeDrain)) {
			q.e.command(remove)
			return
		}
		q.e.deactivate(q)
		q.e.mu.Lock()
		delete(q.e.qps, q.qpn)
		q.e.sched.release(q.schedSlot())
		q.e.publishQPs()
		q.e.mu.Unlock()
		close(done)
	}
	q.post(remove)
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// publishQPs replaces the lock-free view of the QP table. Called with e.mu held, on the
// rare creation and removal of a QP.
func (e *Engine) publishQPs() {
	m := make(map[uint32]*QP, len(e.qps))
	for k, v := range e.qps {
		m[k] = v
	}
	e.qpView.Store(&m)
}

// lookupQP finds a QP by number without locking.
func (e *Engine) lookupQP(qpn uint32) *QP {
	if m := e.qpView.Load(); m != nil {
		return (*m)[qpn]
	}
	return nil
}

// command queues control-path work for the engine goroutine.
func (e *Engine) command(fn func(now int64)) {
	e.mu.Lock()
	e.cmds = append(e.cmds, fn)
	e.hasCmd.Store(true)
	e.mu.Unlock()
	e.wake()
}

// wake rings the doorbell of a sleeping engine.
func (e *Engine) wake() {
	if e.sleeping.Load() {
		e.link.Wake()
	}
}

// Run polls until ctx ends. After spin of idle time it sleeps in Link.Wait until the next
// timer, a datagram, or a post (adaptive progress: a busy engine never sleeps, so a packet
// and its acknowledgement do not each pay a wake-up; an idle one costs no CPU). A spin of 0
// sleeps at once; a negative spin never sleeps (busy polling).
func (e *Engine) Run(ctx context.Context, spin time.Duration) error {
	lastBusy := e.now()
	for ctx.Err() == nil {
		now, next, busy := e.PollNow()
		if busy {
			lastBusy = now
			continue
		}
		if spin < 0 || now-lastBusy < int64(spin) {
			// Spinning without work: let the other goroutines of this P run. Where
			// spinners outnumber cores (an application loop and the engine on one CPU)
			// they would otherwise wait for the runtime's 10 ms preemption.
			runtime.Gosched()
			continue
		}
		if err := e.Sleep(now, next, 10*time.Millisecond); errors.Is(err, link.ErrClosed) {
			return err
		}
	}
	return ctx.Err()
}

// Park prepares a sleep that another goroutine than the poller does (Link Watch): it makes
// posts ring the link's doorbell from now on, and reports false, undoing that, if work was
// posted since the last Poll (poll again instead). The poller calls it, after a Poll; the
// sleeper calls Unpark when it wakes.
func (e *Engine) Park() bool {
	e.sleeping.Store(true)
	if e.hasCmd.Load() || e.pendingPosts() || e.g.pending() {
		e.sleeping.Store(false)
		return false
	}
	return true
}

// Unpark ends what Park began. Safe from any goroutine.
func (e *Engine) Unpark() { e.sleeping.Store(false) }

// Sleep waits, as Run does between rounds, until a datagram may have arrived, a post or a
// command came, Wake was called, or the time next that Poll returned (0: nothing due), but
// at most limit from now. A post made meanwhile rings the link's doorbell (Link.Wake). It
// returns at once if work was posted since the last Poll. Only the goroutine that polls the
// engine may call it; it returns ErrClosed once the link is closed.
func (e *Engine) Sleep(now, next int64, limit time.Duration) error {
	wait := limit
	if next > 0 {
		wait = min(wait, time.Duration(max(next-now, 0)))
	}
	e.sleeping.Store(true)
	defer e.sleeping.Store(false)
	if e.hasCmd.Load() || e.pendingPosts() || e.g.pending() {
		return nil
	}
	return e.link.Wait(wait)
}

// pendingPosts reports whether an application posted work the engine has not taken yet:
// a QP's doorbell rang since the last round (a Flush is a command).
func (e *Engine) pendingPosts() bool { return e.sched.bells.any() }

// Poll does one round of work at time now: receive and process a batch, take posted work,
// run timers, transmit what windows allow. It returns the earliest time something is due
// (0: nothing scheduled) and whether it did anything. When a batch arrived, the round goes
// on at Config.Now if that is later than now: a clock read before a stall would date the
// datagrams that came during it before they arrived (round trips shorter than the path).
func (e *Engine) Poll(now int64) (next int64, busy bool) {
	_, next, busy = e.poll(now, false)
	return next, busy
}

// PollNow is Poll at the engine's own clock (Config.Now), read once in the round and as
// late as it can be: after the receive, so that a batch is dated when it was taken, as
// Poll's second reading dates it, without a first one before it (only waiting commands,
// which run before the receive, make the round read it before, and a batch then again).
// A clock read costs tens of nanoseconds, and a poller that spins pays it every round.
// It returns the time the round ran at as well, for the poller's own bookkeeping.
func (e *Engine) PollNow() (now, next int64, busy bool) { return e.poll(0, true) }

// poll is Poll at time now, or, with read, at a reading of the clock taken in the round.
func (e *Engine) poll(now int64, read bool) (int64, int64, bool) {
	e.round++
	busy := false
	if e.hasCmd.Load() {
		if read {
			now, read = e.now(), false
		}
		e.runCommands(now)
		busy = true
		e.sched.markAll(e.active) // a command may have changed any QP (Flush, StartDisconnect)
		e.sched.cmDirty = true    // or the connection manager
	}
	n, err := e.link.Receive(e.rxPkts[:])
	got := err == nil && n > 0
	if got || read {
		now = max(now, e.now())
	}
	if got {
		busy = true
		e.ctr.rxPackets.Add(uint64(n))
		for i := range e.rxPkts[:n] {
			e.input(now, &e.rxPkts[i])
		}
		e.link.Release(e.rxPkts[:n])
	}
	if e.g.grp != nil && e.groupPoll(now) {
		busy = true
	}
	next, cmBusy := e.pollCM(now)
	busy = busy || cmBusy
	// The QPs with work or a deadline that came (sched.go), not every connected one.
	d, qpBusy := e.pollRound(now)
	busy = busy || qpBusy
	next = earlier(next, d)
	e.tx.flush()
	if e.cfg.ZeroCopyTx && e.collectTxDone() {
		busy = true
	}
	return now, next, busy
}

// collectTxDone takes the link's finished zero-copy transmissions and lets the work
// requests and read jobs they belong to complete. It reports whether there were any.
func (e *Engine) collectTxDone() bool {
	any := false
	for {
		n := e.link.TxDone(e.txDone[:])
		for _, c := range e.txDone[:n] {
			e.txFinished(c)
		}
		any = any || n > 0
		if n < len(e.txDone) {
			return any
		}
	}
}

// txFinished accounts one zero-copy packet whose bytes the link no longer reads.
func (e *Engine) txFinished(cookie uint64) {
	qpn, o := cookieOwner(cookie)
	if q := e.lookupQP(qpn); q != nil {
		q.zcDone(o)
		e.sched.mark(q)
	}
}

func (e *Engine) runCommands(now int64) {
	e.mu.Lock()
	cmds := e.cmds
	e.cmds = nil
	e.hasCmd.Store(false)
	e.mu.Unlock()
	for _, fn := range cmds {
		fn(now)
	}
}

// activate puts a QP on the polled list, and polls it in the next round.
func (e *Engine) activate(q *QP) {
	if q.connIndex >= 0 {
		e.sched.mark(q) // already polled: its state changed (an abort)
		return
	}
	q.connIndex = len(e.active)
	e.active = append(e.active, q)
	e.sched.attach(q)
}

// deactivate takes a QP off the polled list.
func (e *Engine) deactivate(q *QP) {
	i := q.connIndex
	if i < 0 {
		return
	}
	e.sched.detach(q, i)
	last := len(e.active) - 1
	e.active[i] = e.active[last]
	e.active[i].connIndex = i
	e.active[last] = nil
	e.active = e.active[:last]
	q.connIndex = -1
}

// input parses one datagram and hands it to its QP or to the connection manager. Anything
// that does not match a live QP exactly is dropped and counted; nothing a forged packet
// carries can change a QP that it does not match.
func (e *Engine) input(now int64, pkt *link.Packet) {
	nseg := min(int(pkt.NSegs), link.MaxSegments)
	for i := range nseg {
		e.segs[i] = pkt.Segs[i]
	}
	p := &e.parsed
	if err := wire.Parse(e.segs[:nseg], p); err != nil {
		e.ctr.badPackets.Add(1)
		return
	}
	if e.g.grp != nil && e.forward(now, pkt, p) {
		return // another engine's: handed to its inbox
	}
	switch {
	case wire.IsCM(p.Opcode):
		e.cm.input(now, pkt.Remote, p)
		e.sched.cmDirty = true
		if q := e.lookupQP(p.DestQPN); q != nil {
			e.sched.mark(q) // a disconnect request may have changed it
		}
	case p.Opcode == wire.OpBundle || p.Opcode == wire.OpMultiBundle:
		e.inputBundle(now, pkt.Remote, p)
	default:
		if q := e.matchQP(pkt.Remote, p); q != nil {
			e.deliverTo(now, q, p)
		}
	}
}

// deliverTo hands q, which data packet or Ack p (a datagram's, or a Bundle entry's)
// matched, its packet, and polls q in the next round unless the packet left it quiet.
func (e *Engine) deliverTo(now int64, q *QP, p *wire.Packet) {
	if q.State() == QPConnecting {
		e.sched.cmDirty = true // the packet may establish it (an implicit ready-to-use)
	}
	q.input(now, p)
	if !q.quiet() {
		e.sched.mark(q)
	}
}

// matchQP returns the QP a data packet, Ack or Bundle from the link address from is for, or
// nil (counted) when it matches no live QP exactly: its QPN, the peer's source, the cookie.
func (e *Engine) matchQP(from netip.AddrPort, p *wire.Packet) *QP {
	q := e.lookupQP(p.DestQPN)
	if q == nil {
		e.ctr.noQP.Add(1)
		return nil
	}
	switch q.match(from, p.Cookie) {
	case matched:
		return q
	case unconnected:
		e.ctr.noQP.Add(1)
	case wrongSource:
		e.ctr.badSource.Add(1)
	case wrongCookie:
		e.ctr.badCookie.Add(1)
	}
	return nil
}

// randUint64 returns a random 64-bit value (cookies, initial PSNs, QPNs).
func randUint64() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("transport: no randomness: " + err.Error()) // crypto/rand never fails on Linux
	}
	return binary.LittleEndian.Uint64(b[:])
}
