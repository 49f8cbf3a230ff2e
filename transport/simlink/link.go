package simlink

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"
)

// Link is one simulated host's link.Link. It is created by Network.AddHost (or Pair)
// and behaves as the contract in package transport says, so an engine cannot tell it from
// the AF_XDP link:
//
//   - Send copies every datagram into a network buffer (so FlagZeroCopy cookies are
//     reported by the next TxDone) and decides its fate on the spot; it never blocks.
//   - Receive returns the datagrams whose delivery time the clock has reached, in order of
//     delivery time, then of queueing (so in the order sent, without jitter). Each is a view of a network buffer, in one segment
//     or two (Config.SplitRx), valid until Release. Remote is the sender's address with
//     the port it sent from (its Packet.LocalPort, or its link's port when that was 0);
//     LocalPort is this link's port.
//   - Send refuses with link.ErrTooLarge a datagram longer than MaxPayload, empty, or
//     with more than link.MaxSegments segments (as the AF_XDP link does); datagrams
//     to an address no host has are accepted and dropped (counted in TxDropped and
//     Network.Stats).
//
// One engine goroutine calls Receive, Release, Send, TxDone and Wait; Wake, Stats, Close
// and the other methods are safe from any goroutine. Links on different goroutines may
// exchange datagrams concurrently.
type Link struct {
	net  *Network
	id   int32
	addr netip.AddrPort

	// Guarded by net.mu.
	q     rxQueue
	stats link.Stats

	// Engine-owned (only Send and TxDone touch them; Send also holds net.mu).
	route struct {
		gen  uint64
		dst  netip.AddrPort
		to   *Link
		path *path
	}
	done  link.CookieQueue // FlagZeroCopy cookies for TxDone
	fate  fate
	timer *time.Timer

	closed   atomic.Bool   // set under net.mu
	closedCh chan struct{} // closed by Close
	wake     chan struct{} // Wake's doorbell (capacity 1)
	kick     chan struct{} // rung when a datagram becomes the queue head (capacity 1)
}

func newLink(n *Network, id int32, addr netip.AddrPort) *Link {
	l := &Link{
		net:      n,
		id:       id,
		addr:     addr,
		done:     link.NewCookieQueue(n.cfg.TxDoneQueue),
		closedCh: make(chan struct{}),
		wake:     make(chan struct{}, 1),
		kick:     make(chan struct{}, 1),
	}
	if n.sleeps {
		l.timer = time.NewTimer(time.Duration(math.MaxInt64))
		l.timer.Stop()
	}
	return l
}

// Network returns the network the link belongs to.
func (l *Link) Network() *Network { return l.net }

// Receive implements link.Link: it fills pkts with the datagrams due by the
// network's clock (never blocking) and returns how many. After Close it returns
// link.ErrClosed.
func (l *Link) Receive(pkts []link.Packet) (int, error) {
	n := l.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if l.closed.Load() {
		return 0, link.ErrClosed
	}
	if len(pkts) == 0 || l.q.len() == 0 {
		return 0, nil
	}
	now := n.clock.Now()
	k := 0
	for k < len(pkts) && l.q.len() > 0 && l.q.head().at <= now {
		e := l.q.pop()
		n.pool.owner[e.buf] = l.id
		b := n.pool.bufs[e.buf][:e.n:e.n]
		p := &pkts[k]
		p.Remote = netip.AddrPortFrom(e.path.key.from.Addr(), e.srcPort)
		p.LocalPort = l.addr.Port()
		p.Flags, p.Cookie = 0, 0
		if s := int(e.split); s > 0 && s < len(b) {
			p.Segs[0], p.Segs[1] = b[:s:s], b[s:]
			p.NSegs = 2
		} else {
			p.Segs[0] = b
			p.NSegs = 1
			if p.Segs[1] != nil {
				p.Segs[1] = nil
			}
		}
		for j := 2; j < link.MaxSegments; j++ {
			if p.Segs[j] != nil {
				p.Segs[j] = nil
			}
		}
		e.path.stats.Delivered++
		e.path.stats.DeliveredBytes += uint64(e.n)
		l.stats.RxPackets++
		l.stats.RxBytes += uint64(e.n)
		k++
	}
	return k, nil
}

// Release implements link.Link: it gives the buffers of received packets back to the
// network and clears the packets' segments. A segment may have been trimmed or resliced
// (it still finds its buffer); anything that is not a buffer this link received and has
// not released yet is ignored. Release still works after Close, for packets received
// before it.
func (l *Link) Release(pkts []link.Packet) {
	n := l.net
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := range pkts {
		p := &pkts[i]
		for j := 0; j < int(p.NSegs) && j < link.MaxSegments; j++ {
			if b, ok := n.pool.find(p.Segs[j]); ok && n.pool.owner[b] == l.id {
				n.pool.put(b)
			}
			p.Segs[j] = nil
		}
		p.NSegs = 0
	}
}

// Send implements link.Link: it copies pkts into network buffers and decides each
// one's fate (see Impairments). It stops with a nil error at a FlagZeroCopy packet while
// TxDoneQueue cookies wait for TxDone, and with an error wrapping link.ErrTooLarge at a
// datagram it cannot send at all; after Close it returns link.ErrClosed.
func (l *Link) Send(pkts []link.Packet) (int, error) {
	n := l.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if l.closed.Load() {
		return 0, link.ErrClosed
	}
	if len(pkts) == 0 {
		return 0, nil
	}
	now := n.clock.Now()
	for i := range pkts {
		p := &pkts[i]
		zc := p.Flags&link.FlagZeroCopy != 0
		if zc && l.done.Full() {
			return i, nil // the caller must collect TxDone first
		}
		to, pa := l.lookup(p.Remote)
		plen := p.Len()
		if int(p.NSegs) > link.MaxSegments || plen > n.cfg.MaxPayload || plen == 0 {
			if pa != nil {
				pa.stats.TooLarge++
			} else {
				n.other.TooLarge++
			}
			return i, fmt.Errorf("simlink: send %d-byte datagram in %d segments (max %d bytes): %w",
				plen, p.NSegs, n.cfg.MaxPayload, link.ErrTooLarge)
		}
		l.stats.TxPackets++
		l.stats.TxBytes += uint64(plen)
		if zc {
			l.done.Push(p.Cookie)
		}
		if pa == nil {
			n.other.DroppedUnknown++
			l.stats.TxDropped++
			continue
		}
		if l.transmit(p, plen, to, pa, now) == 0 {
			l.stats.TxDropped++
		}
	}
	return len(pkts), nil
}

// lookup returns the link and path for a destination (nil, nil for an address no host
// has), remembering the last answer until the set of hosts changes.
func (l *Link) lookup(dst netip.AddrPort) (*Link, *path) {
	n := l.net
	dst = canon(dst)
	r := &l.route
	if r.gen == n.gen && r.dst == dst && r.path != nil {
		return r.to, r.path
	}
	to := n.hosts[dst]
	if to == nil {
		return nil, nil
	}
	r.gen, r.dst, r.to, r.path = n.gen, dst, to, n.paths[pathKey{l.addr, dst}]
	return r.to, r.path
}

// transmit decides the fate of one datagram on path pa to link to, queues the copies that
// survive, and returns how many it queued. Called with net.mu held.
func (l *Link) transmit(p *link.Packet, plen int, to *Link, pa *path, now int64) int {
	n := l.net
	f := &l.fate
	pa.stats.Sent++
	pa.stats.SentBytes += uint64(plen)
	pa.decide(pa.impairments(&n.def), plen, now, n.cfg.SplitRx, f)
	if f.drop != keep {
		pa.count(f.drop)
		return 0
	}
	srcPort := p.LocalPort
	if srcPort == 0 {
		srcPort = l.addr.Port()
	}
	queued := 0
	for c := 0; c < f.copies; c++ {
		if c == 1 {
			pa.stats.Duplicated++
		}
		if to.closed.Load() {
			pa.stats.DroppedClosed++
			continue
		}
		if to.q.len() >= n.cfg.RxQueue {
			pa.stats.DroppedRxFull++
			to.stats.RxDropped++
			continue
		}
		bi := n.pool.get()
		b := n.pool.bufs[bi][:plen]
		off := 0
		for j := 0; j < int(p.NSegs); j++ {
			off += copy(b[off:], p.Segs[j])
		}
		if f.nflip[c] > 0 {
			f.applyFlips(b, c)
			pa.stats.Corrupted++
		}
		e := entry{at: f.at[c], seq: n.seq, path: pa, buf: bi, n: int32(plen), split: f.split[c], srcPort: srcPort}
		n.seq++
		if e.at < pa.maxAt {
			pa.stats.Reordered++
		} else {
			pa.maxAt = e.at
		}
		if to.q.push(e) && n.sleeps {
			select { // the receiver's Wait may be sleeping towards a later time
			case to.kick <- struct{}{}:
			default:
			}
		}
		queued++
	}
	return queued
}

// TxDone implements link.Link: it reports the cookies of FlagZeroCopy packets, all of
// which were copied (so done) by the Send that took them. It returns 0 after Close.
func (l *Link) TxDone(dst []uint64) int {
	if l.closed.Load() {
		return 0
	}
	return l.done.Pop(dst)
}

// Wait implements link.Link. On a network with a RealClock it sleeps (on a timer to
// the next delivery time and the doorbells, never spinning) until a datagram is due, Wake
// is called, TxDone has cookies to report, the link is closed, or timeout passes. With any
// other clock it returns at once: virtual time moves only when the test moves it. It
// returns link.ErrClosed after Close.
func (l *Link) Wait(timeout time.Duration) error {
	defer l.drainWake()
	if l.closed.Load() {
		return link.ErrClosed
	}
	if l.done.Len() > 0 {
		return nil
	}
	return l.sleep(timeout, l.timer)
}

// Watch implements link.Watcher: Wait without the engine's own state (its timer and
// its finished zero-copy cookies), for a goroutine that watches the link while another
// polls the engine. It allocates a timer per call.
func (l *Link) Watch(timeout time.Duration) error {
	defer l.drainWake()
	if l.closed.Load() {
		return link.ErrClosed
	}
	timer := time.NewTimer(time.Duration(math.MaxInt64))
	timer.Stop()
	return l.sleep(timeout, timer)
}

// sleep is Wait's and Watch's wait, on timer: on a network that sleeps, until a datagram
// is due, a Wake, a kick, Close or timeout (nil at once on a network that does not).
func (l *Link) sleep(timeout time.Duration, timer *time.Timer) error {
	n := l.net
	if !n.sleeps || timeout <= 0 {
		return nil
	}
	defer timer.Stop()
	deadline := time.Now().Add(timeout)
	for {
		n.mu.Lock()
		if l.closed.Load() {
			n.mu.Unlock()
			return link.ErrClosed
		}
		now := n.clock.Now()
		next, pending := int64(0), l.q.len() > 0
		if pending {
			next = l.q.head().at
		}
		n.mu.Unlock()
		if pending && next <= now {
			return nil
		}
		d := time.Until(deadline)
		if d <= 0 {
			return nil
		}
		if pending && time.Duration(next-now) < d {
			d = time.Duration(next - now)
		}
		timer.Reset(d)
		select {
		case <-l.wake:
			return nil
		case <-l.closedCh:
			return link.ErrClosed
		case <-l.kick:
		case <-timer.C:
		}
	}
}

// drainWake consumes a pending Wake: any return from Wait answers it.
func (l *Link) drainWake() {
	select {
	case <-l.wake:
	default:
	}
}

// Wake implements link.Link: it makes a Wait in progress, or the next one, return at
// once. Safe from any goroutine, also after Close.
func (l *Link) Wake() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// MaxPayload implements link.Link: the network's Config.MaxPayload.
func (l *Link) MaxPayload() int { return l.net.cfg.MaxPayload }

// LocalAddr implements link.Link: the address the host was added with.
func (l *Link) LocalAddr() netip.AddrPort { return l.addr }

// Stats implements link.Link: TxPackets and TxBytes count what Send accepted;
// TxDropped those of them of which no copy reached the destination's queue (any
// impairment, unknown or closed destination, full receiver); RxDropped the copies refused
// because this link's queue was full. TxZeroCopy and Kicks stay 0. Safe from any
// goroutine.
func (l *Link) Stats() link.Stats {
	l.net.mu.Lock()
	defer l.net.mu.Unlock()
	return l.stats
}

// Close implements link.Link: it drops the datagrams queued for the link
// (PathStats.DroppedClosed), wakes a Wait, and makes the engine methods return
// link.ErrClosed; datagrams sent to it from then on are dropped. Buffers the engine
// still holds from Receive stay valid until it releases them. Idempotent; safe from any
// goroutine.
func (l *Link) Close() error {
	n := l.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if l.closed.Load() {
		return nil
	}
	l.closed.Store(true)
	for l.q.len() > 0 {
		e := l.q.pop()
		e.path.stats.DroppedClosed++
		n.pool.put(e.buf)
	}
	l.q.reset()
	if i := slices.Index(n.links, l); i >= 0 {
		n.links = slices.Delete(n.links, i, i+1)
	}
	n.gen++
	close(l.closedCh)
	return nil
}

var (
	_ link.Link    = (*Link)(nil)
	_ link.Watcher = (*Link)(nil)
)
