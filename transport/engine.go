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

	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport/ack"
	"github.com/xdpndk/xdpndk/transport/congestion"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// Config configures an Engine. DefaultConfig fills every field but Link.
type Config struct {
	// Link is what the engine sends and receives on. Required. The engine owns it while it
	// runs but does not close it.
	Link Link
	// Now is the monotonic clock in nanoseconds. Default: time since the engine's creation.
	// Tests pass a manual clock shared with transport/simlink.
	Now func() int64
	// Resolver checks and resolves the peer's remote accesses. Default: refuses everything.
	Resolver MemoryResolver

	// RTO configures the retransmission timer (RFC 6298 estimator).
	RTO ack.RTOConfig
	// RetryLimit is how many times one packet is retransmitted before the QP fails with
	// StatusTimeout; the QP fails only once that packet has also been outstanding for
	// RTO.Max, so that a peer whose host stalls for less than that (with a microsecond SRTT
	// the limit alone is spent in 51 ms) keeps its connection. Default 7.
	RetryLimit int
	// RNRRetryLimit is how many RNR NAKs one Send may get before it fails with
	// StatusTimeout. Default 7.
	RNRRetryLimit int
	// RNRDelay is how long a sender waits after the first RNR NAK of a request that names no
	// delay; it doubles with each further RNR NAK of the same request (up to 64 times). The
	// wait is capped at 655.36 ms (InfiniBand's largest RNR timer), or at RNRDelay if that
	// is longer, whatever delay the NAK names. Default 100 µs.
	RNRDelay time.Duration
	// CreditTimeout is how long a Send waits for the peer to advertise a receive for it
	// before it is sent anyway as a probe, so that a peer that never posts one fails it
	// through the RNR retry limit (StatusTimeout) instead of holding it forever. Default
	// 100 ms.
	CreditTimeout time.Duration
	// AckEvery acknowledges after this many new packets; AckDelay at the latest this long
	// after the oldest unacknowledged one. Defaults 4 and 20 µs: with the windows of a
	// delay-based controller on a ~20 µs path (about a dozen packets) a larger AckEvery
	// leaves every round trip waiting out AckDelay (measured: 34% of a 10 Gbit/s link at
	// 16, 100% at 4).
	AckEvery int
	AckDelay time.Duration
	// Window bounds the packets one QP has in flight (and the receiver's reorder window).
	// Power of two. Default 1024.
	Window int
	// NewController makes a QP's congestion controller for a payload size (MSS) in bytes.
	// Default: congestion.NewSwift with its defaults.
	NewController func(mss int) congestion.Controller
	// GoBackN retransmits everything unacknowledged after a loss instead of just the missing
	// packets. It exists so benchmarks can show the difference; never use it otherwise.
	GoBackN bool
	// MaxHalfOpen bounds connection requests waiting for Accept/Reject or for their
	// ready-to-use, per engine. Default 64.
	MaxHalfOpen int
	// MaxQPs bounds the QPs that exist on the engine at once (NewQP fails with
	// ErrTooManyQPs beyond it); each costs memory sized by its queue depths and Window
	// (about 300 KiB at the defaults). Default 1024, at most MaxQPLimit.
	MaxQPs int
	// CMTimeout is the connection manager's retransmission interval; CMRetries how many
	// times a CM message is sent before the attempt fails. Defaults 20 ms and 10.
	CMTimeout time.Duration
	CMRetries int
	// ZeroCopyTx marks every data packet whose payload is the caller's memory (a Send's or
	// Write's gather list, a Read's resolved region) with FlagZeroCopy, so a link whose
	// registered memory holds it transmits it by reference. A work request then completes,
	// and a Read's region is released, only when the link has reported every such packet
	// of it done (TxDone) as well as acknowledged. Default false: links copy payloads.
	ZeroCopyTx bool
}

// DefaultConfig returns a Config with every default filled in, for link.
func DefaultConfig(link Link) Config {
	c := Config{Link: link}
	_ = c.normalize()
	return c
}

func (c *Config) normalize() error {
	if c.Link == nil {
		return errors.New("transport config: link required")
	}
	if c.Now == nil {
		start := time.Now()
		c.Now = func() int64 { return int64(time.Since(start)) }
	}
	if c.Resolver == nil {
		c.Resolver = refuseAll{}
	}
	if c.RetryLimit == 0 {
		c.RetryLimit = 7
	}
	if c.RNRRetryLimit == 0 {
		c.RNRRetryLimit = 7
	}
	if c.RNRDelay == 0 {
		c.RNRDelay = 100 * time.Microsecond
	}
	if c.CreditTimeout == 0 {
		c.CreditTimeout = 100 * time.Millisecond
	}
	if c.AckEvery == 0 {
		c.AckEvery = 4
	}
	if c.AckDelay == 0 {
		c.AckDelay = 20 * time.Microsecond
	}
	if c.Window == 0 {
		c.Window = 1024
	}
	if c.Window&(c.Window-1) != 0 || c.Window < 64 || c.Window > 1<<16 {
		return fmt.Errorf("transport config: window %d must be a power of two in [64, 65536]", c.Window)
	}
	if c.NewController == nil {
		c.NewController = func(mss int) congestion.Controller {
			cfg := congestion.DefaultSwiftConfig()
			cfg.MSS = mss
			if s, err := congestion.NewSwift(cfg); err == nil {
				return s
			}
			// Only an MSS outside Swift's range gets here; a fixed window still works.
			f, err := congestion.NewFixed(64 * max(mss, 1))
			if err != nil {
				panic("transport: fixed congestion window refused: " + err.Error())
			}
			return f
		}
	}
	if c.MaxHalfOpen == 0 {
		c.MaxHalfOpen = 64
	}
	if c.MaxQPs == 0 {
		c.MaxQPs = DefaultMaxQPs
	}
	if c.MaxQPs < 0 || c.MaxQPs > MaxQPLimit {
		return fmt.Errorf("transport config: max qps %d not in [1, %d]", c.MaxQPs, MaxQPLimit)
	}
	if c.CMTimeout == 0 {
		c.CMTimeout = 20 * time.Millisecond
	}
	if c.CMRetries == 0 {
		c.CMRetries = 10
	}
	if c.RetryLimit < 0 || c.RNRRetryLimit < 0 || c.AckEvery < 1 || c.MaxHalfOpen < 1 || c.CMRetries < 1 {
		return errors.New("transport config: negative limits")
	}
	return nil
}

// refuseAll is the resolver of an engine without memory: every remote access is refused.
type refuseAll struct{}

func (refuseAll) Acquire(memreg.PD, uint32, uint64, uint32, Access) (memreg.Span, error) {
	return memreg.Span{}, ErrAccess
}
func (refuseAll) Invalidate(memreg.PD, uint32) error { return ErrAccess }

// Engine runs the protocol for the QPs placed on one Link (one AF_XDP queue). Poll does one
// round of work; Run calls Poll in a loop. Exactly one goroutine at a time may call Poll or
// Run. NewQP, Listen, Connect and the posting methods of QPs are safe from any goroutine.
type Engine struct {
	cfg  Config
	link Link
	now  func() int64

	mu      sync.Mutex // guards qps (writers: NewQP/close), cmds, listeners
	qps     map[uint32]*QP
	qpView  atomic.Pointer[map[uint32]*QP] // copy of qps for lock-free lookups per packet
	nextQPN uint32
	cmds    []func(now int64) // control-path work for the engine goroutine
	hasCmd  atomic.Bool

	// engine goroutine state
	active   []*QP // connected or erroring QPs the engine polls
	rxPkts   [64]Packet
	txPkts   [64]Packet
	txHdr    [64][wire.HeaderLen + wire.CMExtLen + wire.MaxPrivateData]byte
	txTrl    [64][wire.TrailerLen]byte
	txBounce [64][]byte
	ntx      int
	parsed   wire.Packet
	txWire   wire.Packet // the packet being encoded
	segs     [MaxSegments][]byte
	txDone   [64]uint64 // cookies read from the link's TxDone
	round    uint64     // Poll calls so far (never 0 after the first): acks deferred by a round

	cm cmState

	sleeping atomic.Bool
	ctr      engineCounters
}

// engineCounters count what the engine dropped and why.
type engineCounters struct {
	rxPackets, txPackets, badPackets, noQP, badSource, badCookie, outOfWindow atomic.Uint64
	cmDrops, halfOpenFull, txRefused                                          atomic.Uint64
}

// EngineStats are an engine's counters.
type EngineStats struct {
	RxPackets, TxPackets uint64 // datagrams received from and handed to the link
	Malformed            uint64 // failed to parse (length, version, CRC...)
	NoQP                 uint64 // addressed to a QP that does not exist
	BadSource            uint64 // from an address other than the QP's peer
	BadCookie            uint64 // with the wrong connection cookie
	OutOfWindow          uint64 // PSN outside the receive window
	CMDropped            uint64 // connection-management messages that matched nothing or had a field out of range
	HalfOpenFull         uint64 // connection requests refused because MaxHalfOpen were pending
	TxRefused            uint64 // datagrams the link refused outright (too large: a bug); reliability resends or times out
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
		TxRefused: c.txRefused.Load(),
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
	for i := range e.txBounce {
		e.txBounce[i] = make([]byte, cfg.Link.MaxPayload())
	}
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
	q := &QP{e: e, cfg: cfg, sink: cfg.Sink, connIndex: -1, maxORD: cfg.ORD, srq: cfg.SRQ}
	q.sendQ = newSPSC[WorkRequest](cfg.SendDepth)
	if q.srq != nil {
		q.recvQ = newSPSC[Receive](1) // never posted to: receives come from the SRQ
	} else {
		q.recvQ = newSPSC[Receive](cfg.RecvDepth)
	}
	sd, rd := len(q.sendQ.slots), ceilPow2(cfg.RecvDepth) // the receive ring: RecvDepth rounded up, as recvQ
	q.req.wrs = make([]wrState, sd)
	q.req.mask = uint32(sd - 1)
	// Twice IRD job slots: a read whose responses were all sent stops counting against IRD
	// but keeps its slot until they are acknowledged (they may need retransmission).
	q.req.jobs = make([]readJob, 2*cfg.IRD)
	q.resp.recvs = make([]recvState, rd)
	q.resp.mask = uint32(rd - 1)
	q.req.scratch = make([]ack.PacketInfo, 0, e.cfg.Window)
	q.req.retx = make([]ack.PacketInfo, 0, e.cfg.Window)
	q.req.rto = ack.NewRTO(e.cfg.RTO)
	q.srcPort = uint16(49152 + randUint64()%16384)
	e.mu.Lock()
	if len(e.qps) >= e.cfg.MaxQPs {
		e.mu.Unlock()
		return nil, fmt.Errorf("%d queue pairs exist (Config.MaxQPs): %w", len(e.qps), ErrTooManyQPs)
	}
	for {
		e.nextQPN++
		if e.nextQPN != 0 && e.qps[e.nextQPN] == nil {
			break
		}
	}
	q.qpn = e.nextQPN
	e.qps[q.qpn] = q
	e.publishQPs()
	e.mu.Unlock()
	return q, nil
}

// closeDrain bounds how long Close waits for the link to finish a QP's zero-copy packets.
const closeDrain = 100 * time.Millisecond

// Close removes a QP from the engine: outstanding requests complete cancelled first (with
// Config.ZeroCopyTx, each once the link has finished transmitting its packets, for at most
// 100 ms; after that the QP's memory is released regardless). The call returns once the
// engine goroutine has done it, or ctx ends.
func (q *QP) Close(ctx context.Context) error {
	done := make(chan struct{})
	var remove func(now int64)
	var since int64
	remove = func(now int64) {
		q.flush(now, StatusCancelled, -1)
		if since == 0 {
			since = now
		}
		// Requests and read jobs whose zero-copy packets the link still transmits complete
		// (and release their memory) when it is done with them; give it closeDrain.
		if q.zcPending() && now-since < int64(closeDrain) {
			q.e.command(remove)
			return
		}
		q.forceDrain()
		q.e.deactivate(q)
		q.e.mu.Lock()
		delete(q.e.qps, q.qpn)
		q.e.publishQPs()
		q.e.mu.Unlock()
		close(done)
	}
	q.e.command(remove)
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
		now := e.now()
		next, busy := e.Poll(now)
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
		if err := e.Sleep(now, next, 10*time.Millisecond); errors.Is(err, ErrClosed) {
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
	if e.hasCmd.Load() || e.pendingPosts() {
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
	if e.hasCmd.Load() || e.pendingPosts() {
		return nil
	}
	return e.link.Wait(wait)
}

// pendingPosts reports whether an application posted work the engine has not taken yet.
func (e *Engine) pendingPosts() bool {
	for _, q := range e.active {
		if q.sendQ.len() > 0 || q.recvQ.len() > 0 || q.flushReq.Load() {
			return true
		}
	}
	return false
}

// Poll does one round of work at time now: receive and process a batch, take posted work,
// run timers, transmit what windows allow. It returns the earliest time something is due
// (0: nothing scheduled) and whether it did anything.
func (e *Engine) Poll(now int64) (next int64, busy bool) {
	e.round++
	if e.hasCmd.Load() {
		e.runCommands(now)
		busy = true
	}
	n, err := e.link.Receive(e.rxPkts[:])
	if err == nil && n > 0 {
		busy = true
		e.ctr.rxPackets.Add(uint64(n))
		for i := range e.rxPkts[:n] {
			e.input(now, &e.rxPkts[i])
		}
		e.link.Release(e.rxPkts[:n])
	}
	next = e.cm.poll(now)
	for i := 0; i < len(e.active); i++ {
		q := e.active[i]
		d, b := q.poll(now)
		busy = busy || b
		if d > 0 && (next == 0 || d < next) {
			next = d
		}
	}
	// Idle QPs may have receives posted before they connected.
	e.flushTx()
	if e.cfg.ZeroCopyTx && e.collectTxDone(now) {
		busy = true
	}
	return next, busy
}

// zcCookie names a zero-copy packet's QP and what its payload belongs to: bits 32-63 the
// QPN, bits 0-31 the upper half of the packet's tag (wrTag, jobTag: the job bit and the
// work request's sequence number or the job's index; the offset is left out).
func zcCookie(qpn uint32, tag uint64) uint64 { return uint64(qpn)<<32 | tag>>32 }

// collectTxDone takes the link's finished zero-copy transmissions and lets the work
// requests and read jobs they belong to complete. It reports whether there were any.
func (e *Engine) collectTxDone(now int64) bool {
	any := false
	for {
		n := e.link.TxDone(e.txDone[:])
		for _, c := range e.txDone[:n] {
			e.txFinished(now, c)
		}
		any = any || n > 0
		if n < len(e.txDone) {
			return any
		}
	}
}

// txFinished accounts one zero-copy packet whose bytes the link no longer reads.
func (e *Engine) txFinished(now int64, cookie uint64) {
	if q := e.lookupQP(uint32(cookie >> 32)); q != nil {
		job, idx, _ := splitTag(cookie << 32) // the tag half zcCookie kept
		q.zcDone(now, job, idx)
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

// activate puts a QP on the polled list.
func (e *Engine) activate(q *QP) {
	if q.connIndex >= 0 {
		return
	}
	q.connIndex = len(e.active)
	e.active = append(e.active, q)
}

// deactivate takes a QP off the polled list.
func (e *Engine) deactivate(q *QP) {
	i := q.connIndex
	if i < 0 {
		return
	}
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
func (e *Engine) input(now int64, pkt *Packet) {
	nseg := min(int(pkt.NSegs), MaxSegments)
	for i := range nseg {
		e.segs[i] = pkt.Segs[i]
	}
	p := &e.parsed
	if err := wire.Parse(e.segs[:nseg], p); err != nil {
		e.ctr.badPackets.Add(1)
		return
	}
	if p.Opcode >= wire.OpConnRequest {
		e.cm.input(now, pkt.Remote, p)
		return
	}
	q := e.lookupQP(p.DestQPN)
	switch {
	case q == nil || q.cookie == 0:
		e.ctr.noQP.Add(1)
	case pkt.Remote != q.peerSrc:
		e.ctr.badSource.Add(1)
	case p.Cookie != q.cookie:
		e.ctr.badCookie.Add(1)
	default:
		q.input(now, p)
	}
}

// txSlot returns the next free transmit slot, flushing the batch to the link when full. It
// returns -1 when the link takes nothing more now.
func (e *Engine) txSlot() int {
	if e.ntx == len(e.txPkts) {
		e.flushTx()
		if e.ntx == len(e.txPkts) {
			return -1
		}
	}
	return e.ntx
}

// canTransmit reports whether a packet can be queued now.
func (e *Engine) canTransmit() bool { return e.txSlot() >= 0 }

// markZeroCopy makes the packet emitted last a zero-copy packet with cookie c.
func (e *Engine) markZeroCopy(c uint64) {
	pk := &e.txPkts[e.ntx-1]
	pk.Flags |= FlagZeroCopy
	pk.Cookie = c
}

// emit finishes the packet in slot i: header bytes hdr (already in e.txHdr[i]), payload
// pieces, CRC trailer; it queues it for the link.
func (e *Engine) emit(i int, to netip.AddrPort, srcPort uint16, hdrLen int, payload ...[]byte) {
	hdr := e.txHdr[i][:hdrLen]
	crc := wire.UpdateCRC(0, hdr)
	pk := &e.txPkts[i]
	*pk = Packet{Remote: to, LocalPort: srcPort}
	pk.Segs[0] = hdr
	n := 1
	for _, b := range payload {
		if len(b) == 0 {
			continue
		}
		crc = wire.UpdateCRC(crc, b)
		pk.Segs[n] = b
		n++
	}
	wire.PutTrailer(e.txTrl[i][:], crc)
	pk.Segs[n] = e.txTrl[i][:]
	pk.NSegs = uint8(n + 1)
	e.ntx++
}

// flushTx hands the queued packets to the link. Packets the link does not take now stay
// queued, in order.
func (e *Engine) flushTx() {
	if e.ntx == 0 {
		return
	}
	n, err := e.link.Send(e.txPkts[:e.ntx])
	if err != nil {
		// A datagram the link can never send (too large for it: a bug, or an unreachable
		// peer): drop it, counted; reliability retransmits or times the QP out. The link
		// will never report its cookie, so account it here.
		e.ctr.txRefused.Add(1)
		if n < e.ntx && e.txPkts[n].Flags&FlagZeroCopy != 0 {
			e.txFinished(e.now(), e.txPkts[n].Cookie)
		}
		n++
	}
	n = min(n, e.ntx)
	e.ctr.txPackets.Add(uint64(n))
	if n == 0 {
		return
	}
	// Keep the rest at the front, with their buffers.
	for j := n; j < e.ntx; j++ {
		e.txPkts[j-n] = e.txPkts[j]
		e.txHdr[j-n], e.txHdr[j] = e.txHdr[j], e.txHdr[j-n]
		e.txTrl[j-n] = e.txTrl[j]
		e.txBounce[j-n], e.txBounce[j] = e.txBounce[j], e.txBounce[j-n]
		e.fixSegs(j-n, j)
	}
	e.ntx -= n
}

// fixSegs points the segments of a packet moved from slot from to slot to at its new
// buffers.
func (e *Engine) fixSegs(to, from int) {
	pk := &e.txPkts[to]
	hl := len(pk.Segs[0])
	pk.Segs[0] = e.txHdr[to][:hl]
	last := int(pk.NSegs) - 1
	pk.Segs[last] = e.txTrl[to][:]
	for k := 1; k < last; k++ {
		if sameBuffer(pk.Segs[k], e.txBounce[from]) {
			pk.Segs[k] = e.txBounce[to][:len(pk.Segs[k])]
		}
	}
}

// sameBuffer reports whether b starts at the start of buf.
func sameBuffer(b, buf []byte) bool {
	return len(b) > 0 && len(buf) > 0 && &b[0] == &buf[0]
}

// randUint64 returns a random 64-bit value (cookies, initial PSNs, QPNs).
func randUint64() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("transport: no randomness: " + err.Error()) // crypto/rand never fails on Linux
	}
	return binary.LittleEndian.Uint64(b[:])
}
