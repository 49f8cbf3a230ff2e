package xdp

import (
	"context"
	"fmt"
	"math/bits"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdpndk/xdpndk/xdp/frame"
	"github.com/xdpndk/xdpndk/xdp/nexthop"
	"github.com/xdpndk/xdpndk/xdp/xsk"

	"golang.org/x/sys/unix"

	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport/link"
)

const (
	rxBatch   = 64 // descriptors taken from the RX ring per refill
	compBatch = 64 // addresses taken from the completion ring per read
)

// Link is one AF_XDP socket (one interface queue) as a link.Link: it frames datagrams in
// Ethernet/IP/UDP on the way out and unwraps them on the way in. One engine goroutine owns it
// (see link.Link for which methods are safe elsewhere).
//
// Transmit copies headers and small or foreign segments into UMEM frames; with FlagZeroCopy,
// large segments in the UMEM heap go by reference (see zerocopy_linux.go), and the cookie is
// reported by TxDone once the kernel has completed every descriptor of the datagram.
// Receive hands out views of the frames the kernel wrote, with no copy.
//
// The next hop of each peer comes from the device's next-hop table, which a worker
// goroutine fills (package xdp/nexthop): no method of the engine ever waits for a
// resolution. A datagram to a peer not resolved yet is held (copied) and sent once the
// worker has resolved the peer, or dropped (counted) if it cannot be; ResolvePeer resolves
// a peer ahead of time.
//
// The Link coordinates parts that own their state, each a value field, engine goroutine
// only: rxState (rx_linux.go) the RX descriptors taken from the ring and the frames going
// back to the fill ring; zcState (zerocopy_linux.go) the layout of a datagram in frames and
// descriptors, its framing, and the zero-copy records behind TxDone; hops (a nexthop.Hops)
// the peers' table entries and the hold area. The Link keeps the rings' staging, kicks,
// counters and the link.Link contract; waiting is in wait_linux.go.
type Link struct {
	dev   *Device
	sock  *xsk.Socket
	umem  *memreg.UMEM
	mem   []byte
	pool  *memreg.FramePool
	queue int
	fsize uint64

	local      netip.AddrPort
	maxPayload int

	// engine-owned state
	rx       rxState    // RX descriptors taken from the ring, frames going back to the fill ring
	tx       []xsk.Desc // staged TX descriptors: a whole Send, up to the TX ring size
	ntx      int
	comp     [compBatch]uint64
	zc       zcState      // datagram layout and framing, the FlagZeroCopy records for TxDone
	hops     nexthop.Hops // next hops of the peers and the datagrams held for them
	acc      txAcc
	pollfds  [2]unix.PollFd // Wait's: the socket and the doorbell
	timeout  unix.Timespec
	eventBuf [8]byte
	mono     monoClock // CLOCK_MONOTONIC, the arrival stamps' clock
	rxNow    int64     // its reading for the current receive (0: not read yet)
	rxStamp  rxStampAcc

	// shared with other goroutines
	eventfd int
	busy    atomic.Int32
	closed  atomic.Bool
	holding atomic.Bool // hops.Held() > 0: the worker rings this link when it finishes resolutions
	once    sync.Once
	stats   linkCounters
}

type linkCounters struct {
	rxPackets, rxBytes, txPackets, txBytes, rxDropped, txErrors, txZeroCopy, kicks atomic.Uint64
	txHeld, txUnresolved, txHoldOverflow, txFailed                                 atomic.Uint64
	rxStamped, rxWaitNanos                                                         atomic.Uint64
}

// rxStampAcc counts the arrival stamps one receive took, added to the counters at its end.
type rxStampAcc struct {
	n, wait uint64
}

// txAcc counts what one engine call transmitted, added to the counters once at its end.
type txAcc struct {
	pkts, bytes, refs uint64
}

func newLink(d *Device, s *xsk.Socket, pool *memreg.FramePool, queue int) (*Link, error) {
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("create doorbell eventfd: %w", err)
	}
	l := &Link{
		dev: d, sock: s, umem: d.umem, mem: d.umem.Bytes(), pool: pool, queue: queue,
		fsize:      uint64(d.umem.FrameSize()),
		local:      netip.AddrPortFrom(d.addr, d.cfg.Port),
		maxPayload: d.maxPayload,
		tx:         make([]xsk.Desc, s.Config().TxSize),
		eventfd:    efd,
	}
	l.hops = nexthop.NewHops(d.hops, d.addr, (*hopsTx)(l), d.maxPayload, &l.holding)
	l.zc = newZCState(d, s, pool, len(l.tx))
	l.pollfds[0] = unix.PollFd{Fd: int32(s.FD()), Events: unix.POLLIN}
	l.pollfds[1] = unix.PollFd{Fd: int32(efd), Events: unix.POLLIN}
	l.rx = newRxState(s, pool, l.fsize)
	l.mono = newMonoClock()
	return l, nil
}

// enter marks an engine call in progress; it fails once Close has begun, so Close never
// unmaps rings or closes descriptors under a running call. The empty paths of Receive and
// TxDone, the calls a spinning engine makes every round, do without it (see Receive).
func (l *Link) enter() bool {
	l.busy.Add(1)
	if l.closed.Load() {
		l.busy.Add(-1)
		return false
	}
	return true
}

func (l *Link) exit() { l.busy.Add(-1) }

// Receive implements link.Link.
//
// A Receive that finds nothing takes no guard (enter/exit, two locked operations): a
// spinning engine makes that call every round, on every queue. It reads only what the
// engine goroutine owns and the RX ring's producer index, which stays mapped across a
// racing Close (xsk.Socket.Close replaces that mapping instead of unmapping it), and it
// checks closed before that read: an empty result is then one from before Close. Whatever
// else it may have to do (held datagrams, frames owed to the fill ring, descriptors taken
// earlier, busy polling's system call, a ring that has something or a mapping replaced
// under it) goes the guarded way, which looks at closed again.
func (l *Link) Receive(pkts []link.Packet) (int, error) {
	if l.closed.Load() {
		return 0, link.ErrClosed
	}
	if l.rx.head == l.rx.tail && l.rx.owed == 0 && l.hops.Held() == 0 && !l.sock.Mode().BusyPoll && !l.sock.RxReady() {
		return 0, nil
	}
	return l.receive(pkts)
}

// receive is Receive inside the guard.
func (l *Link) receive(pkts []link.Packet) (int, error) {
	if !l.enter() {
		return 0, link.ErrClosed
	}
	defer l.exit()
	if l.hops.Held() > 0 && l.hops.Service() {
		l.finishTx()
	}
	if l.rx.owed > 0 {
		l.rx.repay()
	}
	l.rxNow, l.rxStamp = 0, rxStampAcc{}
	n := 0
	var rxBytes, dropped uint64
	r := &l.rx
	for n < len(pkts) {
		// The walk stays here rather than in an rxState method: it runs per packet, and
		// as a method it would be too large to inline.
		if r.head == r.tail {
			r.head, r.tail = 0, r.sock.Receive(r.descs[:])
			l.rxNow = 0 // what this read took may have arrived after the last clock reading
			if r.tail == 0 && n == 0 && r.sock.BusyPoll() {
				// Busy polling: the device's interrupts stay off while we poll, so an
				// empty ring is where we run its NAPI (TUNING.md, "Busy polling").
				l.stats.kicks.Add(1)
				r.tail = r.sock.Receive(r.descs[:])
			}
			if r.tail == 0 {
				break
			}
		}
		// One packet: its descriptors run to the first without DescContinued.
		first := r.head
		last := first
		for last < r.tail-1 && r.descs[last].Options&xsk.DescContinued != 0 {
			last++
		}
		r.head = last + 1
		descs := r.descs[first : last+1]
		p := &pkts[n]
		if l.unwrap(descs, p) {
			rxBytes += uint64(p.Len())
			n++
		} else {
			dropped++
			for _, d := range descs {
				r.recycleFrame(d.Addr)
			}
		}
	}
	l.rx.flushRecycle()
	if n > 0 {
		l.stats.rxPackets.Add(uint64(n))
		l.stats.rxBytes.Add(rxBytes)
	}
	if l.rxStamp.n > 0 {
		l.stats.rxStamped.Add(l.rxStamp.n)
		l.stats.rxWaitNanos.Add(l.rxStamp.wait)
	}
	if dropped > 0 {
		l.stats.rxDropped.Add(dropped)
	}
	return n, nil
}

// unwrap parses one received packet's descriptors into p. It reports false for anything
// that is not a well-formed datagram to our address and port.
func (l *Link) unwrap(descs []xsk.Desc, p *link.Packet) bool {
	if len(descs) > link.MaxSegments {
		return false
	}
	total := 0
	for _, d := range descs {
		// Each buffer the kernel fills is one of our frames: a descriptor that leaves its
		// frame, or points outside our pool, is refused.
		if d.Addr >= uint64(len(l.mem)) || !l.pool.Owns(d.Addr) || d.Addr&(l.fsize-1)+uint64(d.Len) > l.fsize {
			return false
		}
		total += int(d.Len)
	}
	first := l.mem[descs[0].Addr : descs[0].Addr+uint64(descs[0].Len)]
	var dg frame.Datagram
	if frame.ParseUDP(first, total, &dg) != nil || dg.PayloadLen == 0 || dg.Dst != l.local {
		return false
	}
	left := dg.PayloadLen
	seg := first[dg.PayloadOffset:]
	for i, d := range descs {
		if i > 0 {
			seg = l.mem[d.Addr : d.Addr+uint64(d.Len)]
		}
		if len(seg) > left {
			seg = seg[:left]
		}
		if len(seg) == 0 {
			// Trailing bytes beyond the UDP length in a buffer of their own: not ours.
			return false
		}
		p.Segs[i] = seg
		left -= len(seg)
	}
	if left != 0 {
		return false
	}
	p.NSegs = uint8(len(descs))
	p.Remote = dg.Src
	p.LocalPort = dg.Dst.Port()
	p.Flags = 0
	p.Cookie = 0
	l.countWait(descs[0].Addr)
	return true
}

// countWait counts how long the datagram at addr waited since the XDP program stamped its
// arrival (arrival_linux.go), if it carries a believable stamp. The clock is read at the
// first stamped datagram of each read of the RX ring, after the read: a datagram the ring
// gave later than a reading may have arrived after it.
func (l *Link) countWait(addr uint64) {
	at, ok := takeArrival(l.mem, addr, l.fsize)
	if !ok {
		return
	}
	if l.rxNow == 0 {
		l.rxNow = l.mono.now()
	}
	if w, ok := waitedSince(l.rxNow, at); ok {
		l.rxStamp.n++
		l.rxStamp.wait += uint64(w)
	}
}

// Release implements link.Link.
func (l *Link) Release(pkts []link.Packet) {
	if !l.enter() {
		return
	}
	defer l.exit()
	for i := range pkts {
		p := &pkts[i]
		for j := 0; j < int(p.NSegs) && j < link.MaxSegments; j++ {
			if off, ok := offsetIn(l.mem, p.Segs[j]); ok {
				l.rx.recycleFrame(off)
			}
			p.Segs[j] = nil
		}
		p.NSegs = 0
	}
	l.rx.flushRecycle()
}

// Send implements link.Link. A datagram to a peer whose next hop is not resolved yet
// is taken and held (a copy), or dropped and counted if the peer failed to resolve a moment
// ago: Send returns short only for lack of ring space, frames or zero-copy records, never
// because of a resolution.
func (l *Link) Send(pkts []link.Packet) (int, error) {
	if !l.enter() {
		return 0, link.ErrClosed
	}
	defer l.exit()
	l.reclaim()
	if l.hops.Held() > 0 {
		l.hops.Service()
	}
	taken := 0
	var err error
	for i := range pkts {
		p := &pkts[i]
		plen := p.Len()
		if int(p.NSegs) > link.MaxSegments || plen > l.maxPayload || plen == 0 {
			err = fmt.Errorf("send %d-byte datagram in %d segments (max %d bytes): %w", plen, p.NSegs, l.maxPayload, link.ErrTooLarge)
			break
		}
		if p.Remote.Port() == 0 {
			err = fmt.Errorf("send to %v: zero UDP port", p.Remote)
			break
		}
		ip := p.Remote.Addr()
		s := l.hops.Lookup(ip)
		if s == nil || !s.Resolved() || (l.hops.Held() > 0 && l.hops.Holds(ip)) {
			if s != nil && s.Resolved() {
				break // earlier datagrams to the peer wait in the hold for room: they go first
			}
			// Held or dropped. A FlagZeroCopy datagram's cookie is reported done at once
			// (the hold keeps a copy; a drop keeps nothing), so it needs a record.
			zc := p.Flags&link.FlagZeroCopy != 0
			if zc && l.zc.queue.full() {
				break // the caller must collect TxDone first
			}
			if err = l.hops.Take(p, ip, s); err != nil {
				break
			}
			if zc {
				l.zc.track(p.Cookie, 0, 0, 0) // copied or dropped: done now, in send order
			}
			taken++
			continue
		}
		ok, terr := l.transmit(p, s.Encap(), plen)
		if terr != nil {
			err = terr
			break
		}
		if !ok {
			break
		}
		taken++
	}
	l.finishTx()
	return taken, err
}

// hopsTx is a Link as its next hops' nexthop.Transmitter, which sends held datagrams.
type hopsTx Link

// Transmit is Link.transmit.
func (t *hopsTx) Transmit(p *link.Packet, e *frame.Encap, plen int) (bool, error) {
	return (*Link)(t).transmit(p, e, plen)
}

// transmit frames datagram p (plen bytes) with header template e and stages it on the TX
// ring. It reports false when there is no room now (frames, ring slots, zero-copy records).
func (l *Link) transmit(p *link.Packet, e *frame.Encap, plen int) (bool, error) {
	hl := e.HeaderLen()
	descs, nframes, refs := l.zc.plan(p, hl, plen)
	if nframes > len(l.tx) {
		return false, fmt.Errorf("send %d-byte datagram: needs %d frames: %w", plen, nframes, link.ErrTooLarge)
	}
	zc := p.Flags&link.FlagZeroCopy != 0
	if zc && l.zc.queue.full() {
		return false, nil // the caller must collect TxDone first
	}
	if l.ntx+descs > len(l.tx) {
		l.flushTx()
	}
	if l.pool.Len() < nframes || l.sock.TxFree(l.ntx+descs) < l.ntx+descs {
		l.reclaim()
		if l.pool.Len() < nframes || l.sock.TxFree(l.ntx+descs) < l.ntx+descs {
			return false, nil
		}
	}
	first, err := l.zc.build(p, e, plen, descs, refs, l.tx[l.ntx:])
	if err != nil {
		return false, fmt.Errorf("frame datagram: %w", err)
	}
	l.ntx += descs
	if zc {
		l.zc.track(p.Cookie, first, descs, refs)
	}
	l.acc.pkts++
	l.acc.bytes += uint64(plen)
	l.acc.refs += uint64(bits.OnesCount8(refs))
	return true, nil
}

// finishTx puts what an engine call staged on the ring, kicks the kernel, and adds the
// call's counts to the counters.
func (l *Link) finishTx() {
	l.flushTx()
	// One kick per call, also when nothing new fit: what is on the ring must move for
	// room to come back.
	if l.sock.TxPending() > 0 {
		l.kickTx()
	}
	a := &l.acc
	if a.pkts > 0 {
		l.stats.txPackets.Add(a.pkts)
		l.stats.txBytes.Add(a.bytes)
	}
	if a.refs > 0 {
		l.stats.txZeroCopy.Add(a.refs)
	}
	*a = txAcc{}
	if h := l.hops.Counters(); h.Held|h.Unresolved|h.Overflow|h.Failed != 0 {
		l.stats.txHeld.Add(h.Held)
		l.stats.txUnresolved.Add(h.Unresolved)
		l.stats.txHoldOverflow.Add(h.Overflow)
		l.stats.txFailed.Add(h.Failed)
		*h = nexthop.Counters{}
	}
}

// ResolvePeer implements link.PeerResolver: it resolves peer's next hop through the
// device (Device.ResolvePeer), blocking its caller, never the engine. Safe from any
// goroutine.
func (l *Link) ResolvePeer(ctx context.Context, peer netip.Addr) error {
	if l.closed.Load() {
		return link.ErrClosed
	}
	return l.dev.ResolvePeer(ctx, peer)
}

// flushTx puts the staged descriptors on the TX ring. Kicking is left to the caller, so a
// Send makes one system call however many datagrams it carries.
func (l *Link) flushTx() {
	if l.ntx == 0 {
		return
	}
	put := l.sock.Transmit(l.tx[:l.ntx])
	if put != l.ntx {
		// Send checked TxFree for every packet, so this cannot happen.
		panic("xdp: tx ring refused reserved descriptors")
	}
	l.ntx = 0
}

// kickTx makes the kernel transmit. In copy mode one system call transmits at most the
// kernel's per-call budget, so it kicks until the ring is drained (bounded). A hard error
// (the interface went down) is counted; the descriptors stay on the ring for a later kick.
func (l *Link) kickTx() {
	if !l.sock.TxNeedsWakeup() {
		return
	}
	kicks := uint64(0)
	for tries := 0; tries < 64; tries++ {
		kicks++
		if err := l.sock.Kick(); err != nil {
			l.stats.txErrors.Add(1)
			break
		}
		if l.sock.Mode().ZeroCopy || l.sock.TxPending() == 0 {
			break
		}
	}
	l.stats.kicks.Add(kicks)
}

// reclaim takes the completion ring: transmitted frames go back to the pool, and the
// descriptors of zero-copy datagrams count towards their TxDone records.
func (l *Link) reclaim() {
	for {
		n := l.sock.Complete(l.comp[:])
		if l.zc.pending() {
			for _, a := range l.comp[:n] {
				l.zc.completed(a)
			}
		} else {
			// No datagram with referenced segments in flight: every address is a frame of
			// the pool (completed would find no record for it).
			for _, a := range l.comp[:n] {
				l.pool.Put(a)
			}
		}
		if n < len(l.comp) {
			return
		}
	}
}

// TxDone implements link.Link. It reclaims the completion ring itself, so cookies flow
// without a Send, and kicks the kernel when descriptors of zero-copy datagrams still wait on
// the TX ring. Cookies come in send order: a copied datagram's cookie waits behind an
// earlier one whose descriptors the kernel has not completed yet.
//
// With no zero-copy datagram in flight and nothing held it touches no ring, only the
// engine's record queue, and takes no guard (only closed is looked at).
func (l *Link) TxDone(dst []uint64) int {
	if l.closed.Load() {
		return 0
	}
	if !l.zc.pending() && l.hops.Held() == 0 {
		return l.zc.queue.pop(dst)
	}
	if !l.enter() {
		return 0
	}
	defer l.exit()
	if l.hops.Held() > 0 && l.hops.Service() {
		l.finishTx()
	}
	if l.zc.pending() {
		l.reclaim()
		if l.zc.pending() && l.sock.TxPending() > 0 {
			l.kickTx()
			l.reclaim()
		}
	}
	return l.zc.queue.pop(dst)
}

// MaxPayload implements link.Link.
func (l *Link) MaxPayload() int { return l.maxPayload }

// LocalAddr implements link.Link.
func (l *Link) LocalAddr() netip.AddrPort { return l.local }

// Queue is the interface queue the link's socket is bound to.
func (l *Link) Queue() int { return l.queue }

// Socket returns the link's AF_XDP socket (for its Mode and Statistics).
func (l *Link) Socket() *xsk.Socket { return l.sock }

// Stats implements link.Link. RxDropped includes the kernel's drops for the socket.
func (l *Link) Stats() link.Stats {
	s := link.Stats{
		RxPackets:  l.stats.rxPackets.Load(),
		RxBytes:    l.stats.rxBytes.Load(),
		TxPackets:  l.stats.txPackets.Load(),
		TxBytes:    l.stats.txBytes.Load(),
		RxDropped:  l.stats.rxDropped.Load(),
		TxErrors:   l.stats.txErrors.Load(),
		TxZeroCopy: l.stats.txZeroCopy.Load(),
		Kicks:      l.stats.kicks.Load(),

		TxHeld:         l.stats.txHeld.Load(),
		TxUnresolved:   l.stats.txUnresolved.Load(),
		TxHoldOverflow: l.stats.txHoldOverflow.Load(),
		RxStamped:      l.stats.rxStamped.Load(),
		RxWaitNanos:    l.stats.rxWaitNanos.Load(),
	}
	s.TxDropped = s.TxUnresolved + s.TxHoldOverflow + l.stats.txFailed.Load()
	if l.enter() {
		if ks, err := l.sock.Statistics(); err == nil {
			s.RxDropped += ks.RxDropped + ks.RxRingFull + ks.RxInvalidDescs
			s.TxDropped += ks.TxInvalidDescs
		}
		l.exit()
	}
	return s
}

// Close implements link.Link. It waits for an engine call in progress to return
// (Wait is woken), then unmaps the rings and closes the socket.
func (l *Link) Close() error {
	var err error
	l.once.Do(func() {
		l.closed.Store(true)
		writeEventfd(l.eventfd)
		for l.busy.Load() != 0 {
			time.Sleep(50 * time.Microsecond)
		}
		if l.dev.prog != nil {
			_ = l.dev.prog.ClearSocket(l.queue)
		}
		err = l.sock.Close()
		unix.Close(l.eventfd)
	})
	return err
}

var (
	_ link.Link         = (*Link)(nil)
	_ link.PeerResolver = (*Link)(nil)
	_ link.Watcher      = (*Link)(nil)
)
