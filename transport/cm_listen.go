package transport

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/xdpndk/xdpndk/transport/wire"
)

// The passive side of connection setup: listeners, the requests they deliver, and the
// half-open table those wait in until they are accepted and established.

// Listener receives connection requests for one service.
type Listener struct {
	e        *Engine
	service  uint64
	reqs     chan *ConnRequest
	closed   atomic.Bool
	siblings []*Listener // Group.Listen: the service's listeners on the group's other engines
}

// Listen starts accepting connection requests for service; at most backlog wait for Accept
// or Reject at a time (more are rejected busy).
func (e *Engine) Listen(service uint64, backlog int) (*Listener, error) {
	if backlog < 1 {
		backlog = 1
	}
	l := &Listener{e: e, service: service, reqs: make(chan *ConnRequest, backlog)}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cm.listeners[service] != nil {
		return nil, ErrListening
	}
	e.cm.listeners[service] = l
	return l, nil
}

// Requests delivers incoming connection requests. Each must be answered with Accept or
// Reject. One left unanswered stays answerable while its requester keeps retransmitting it
// (until the requester's Connect times out); it is rejected (RejectTimeout) 2 s after the
// last copy arrived.
func (l *Listener) Requests() <-chan *ConnRequest { return l.reqs }

// Next waits for the next connection request or for ctx to end.
func (l *Listener) Next(ctx context.Context) (*ConnRequest, error) {
	select {
	case r := <-l.reqs:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops the listener: new requests are rejected at once (NDKPI Listeners, Connectors,
// and Endpoints). Requests already delivered stay answerable.
func (l *Listener) Close() {
	if l.closed.Swap(true) {
		return
	}
	for _, s := range l.siblings {
		s.Close()
	}
	l.e.mu.Lock()
	if l.e.cm.listeners[l.service] == l {
		delete(l.e.cm.listeners, l.service)
	}
	l.e.mu.Unlock()
}

// ConnRequest is an incoming connection request.
type ConnRequest struct {
	// Peer is the requester's address; PrivateData its private data; IRD and ORD its read
	// limits.
	Peer        netip.AddrPort
	PrivateData []byte
	IRD, ORD    int

	l        *Listener
	connID   uint64
	peerQPN  uint32
	peerPSN  wire.PSN
	peerMax  int
	peerPort uint16
	qp       *QP
	replied  bool
	private  []byte
	retry    cmRetry // the reply's retransmissions, once accepted (replied)
	// When the reply went and whether it went again: the time from it to the ready-to-use
	// (or first data packet) is the handshake's round trip (Karn), for the retransmission
	// timer (sender.seedRTO).
	replyAt  int64
	resent   bool
	expireAt int64      // not yet answered: rejected then (cmQuiet after the latest copy of the request)
	done     chan error // established (nil) or failed
	answered atomic.Bool
	at       atomic.Pointer[Engine] // the engine it was handed to (group.go); nil: l.e
}

// Accept connects qp (idle, on the listener's engine or another engine of its Group) to the
// requester with private data, answering with a reply. A QP of another engine of the group
// moves to the request's engine first (QP.Engine changes), unless it takes its receives
// from a shared receive queue, whose engine it keeps: the request is handed to that engine. It returns at once; Wait reports when the requester's
// ready-to-use arrives (or its first data packet). The reply is sent again after
// Config.CMTimeout, then at doubling intervals up to 500 ms, so that a requester whose
// application is slow to complete the connection still gets it, until timeout has passed
// since the engine sent the first one; then Wait reports ErrConnectTimeout and qp fails. 0
// means Config.ConnectTimeout.
func (r *ConnRequest) Accept(qp *QP, private []byte, timeout time.Duration) error {
	if len(private) > wire.MaxPrivateData {
		return ErrPrivateData
	}
	if timeout < 0 {
		return fmt.Errorf("accept timeout %v: %w", timeout, ErrInvalidRequest)
	}
	if !r.engine().hosts(qp) {
		return fmt.Errorf("qp of another engine: %w", ErrBadState)
	}
	if !qp.state.CompareAndSwap(uint32(QPIdle), uint32(QPConnecting)) {
		return fmt.Errorf("accept on a %v qp: %w", qp.State(), ErrBadState)
	}
	if r.answered.Swap(true) {
		qp.leaveConnecting()
		return fmt.Errorf("request already answered: %w", ErrBadState)
	}
	priv := append([]byte(nil), private...)
	e := r.engine()
	if timeout == 0 {
		timeout = e.cfg.ConnectTimeout
	}
	r.place(qp, func(e *Engine, now int64) {
		r.qp, r.private, r.replied = qp, priv, true
		ird, ord := min(qp.cfg.IRD, r.ORD), min(qp.cfg.ORD, r.IRD)
		e.cm.connectQP(qp, r.Peer, r.peerPort, r.peerQPN, randUint64()|1, wire.PSN(randUint64()), r.peerPSN, r.peerMax, ird, ord)
		r.retry.start(now, e.cfg.CMTimeout, timeout)
		r.replyAt = now
		e.cm.sendReply(r)
	})
	return nil
}

// Reject refuses the request with private data.
func (r *ConnRequest) Reject(private []byte) error {
	if len(private) > wire.MaxPrivateData {
		return ErrPrivateData
	}
	if r.answered.Swap(true) {
		return fmt.Errorf("request already answered: %w", ErrBadState)
	}
	priv := append([]byte(nil), private...)
	e := r.engine()
	e.command(func(int64) {
		e.cm.sendReject(r.Peer, r.connID, RejectByPeer, priv)
		e.cm.dropHalfOpen(r, ErrRejected)
	})
	return nil
}

// Cancel abandons an accepted connection that is not established yet, as when the caller
// stops waiting for it: qp fails with cause (QP.Cause reports it) and Wait reports cause, so
// that a data packet arriving later cannot establish a connection the caller was told had
// failed. It does not wait for the engine: Wait then tells whether the connection was
// established before the cancel ran (nil) or the cancel took effect (cause). A request not
// accepted, or no longer half-open, is left as it is.
func (r *ConnRequest) Cancel(cause error) {
	e := r.engine()
	e.command(func(now int64) {
		if r.engine() != e {
			r.Cancel(cause) // handed to another engine meanwhile: cancel it there
			return
		}
		for _, x := range e.cm.halfOpen {
			if x == r && r.replied {
				r.qp.abort(cause)
				e.cm.dropHalfOpen(r, cause)
				return
			}
		}
	})
}

// Wait waits until an accepted connection is established (nil), fails, or ctx ends.
func (r *ConnRequest) Wait(ctx context.Context) error { return waitResult(ctx, r.done) }

// Established reports, without blocking, whether the accepted connection has been
// established (done, nil) or has failed (done, error).
func (r *ConnRequest) Established() (done bool, err error) { return pollResult(r.done) }

// established marks a replied passive connection as established (on its ready-to-use, or
// on the first packet that carries its cookie). It reports whether q is now connected.
func (c *cmState) established(now int64, q *QP) bool {
	for _, r := range c.halfOpen {
		if r.qp == q && r.replied {
			if q.State() != QPConnecting {
				c.dropHalfOpen(r, ErrConnectCancelled) // flushed while connecting: it stays failed
				return false
			}
			rtt := int64(0) // a reply sent again measures no round trip
			if !r.resent {
				rtt = now - r.replyAt
			}
			q.established(now, rtt)
			if len(c.recent) >= maxRecent {
				// The oldest goes: every entry lives as long, so the first expires first.
				c.recent = append(c.recent[:0], c.recent[1:]...)
			}
			c.recent = append(c.recent, recentConn{peer: r.Peer.Addr(), connID: r.connID, until: now + int64(cmQuiet)})
			c.dropHalfOpen(r, nil)
			return true
		}
	}
	return q.State() == QPConnected
}

// removeHalfOpen takes r off the half-open requests and reports whether it was there.
func (c *cmState) removeHalfOpen(r *ConnRequest) bool {
	for i, x := range c.halfOpen {
		if x == r {
			c.halfOpen = append(c.halfOpen[:i], c.halfOpen[i+1:]...)
			return true
		}
	}
	return false
}

func (c *cmState) dropHalfOpen(r *ConnRequest, err error) {
	c.removeHalfOpen(r)
	select {
	case r.done <- err:
	default:
	}
}

// onRequest handles a ConnRequest: a new request is offered to the service's listener
// (bounded by Config.MaxHalfOpen), a copy of one half open is answered again, a late copy
// of one established is dropped.
func (c *cmState) onRequest(now int64, from netip.AddrPort, p *wire.Packet) {
	e := c.e
	m := &p.CM
	if p.DestQPN != 0 || p.Cookie != 0 {
		e.ctr.cmDrops.Add(1)
		return
	}
	if !wire.ValidConnFields(p) {
		// Refused before anything is kept: the requester learns why at once.
		e.ctr.cmDrops.Add(1)
		c.sendReject(from, m.ConnID, RejectInvalid, nil)
		return
	}
	for _, r := range c.halfOpen {
		if r.connID == m.ConnID && r.Peer.Addr() == from.Addr() {
			if r.replied {
				r.resent = true
				c.sendReply(r) // our reply was lost
			} else {
				r.expireAt = now + int64(cmQuiet) // the requester still waits for an answer
			}
			return
		}
	}
	for _, r := range c.recent {
		if r.connID == m.ConnID && r.peer == from.Addr() {
			e.ctr.cmDrops.Add(1) // a late copy of a request already established
			return
		}
	}
	e.mu.Lock()
	l := c.listeners[m.ServiceID]
	e.mu.Unlock()
	if l == nil {
		c.sendReject(from, m.ConnID, RejectNoListener, nil)
		return
	}
	if len(c.halfOpen) >= e.cfg.MaxHalfOpen {
		e.ctr.halfOpenFull.Add(1)
		return
	}
	r := &ConnRequest{
		Peer: from, PrivateData: append([]byte(nil), p.PrivateData...), IRD: int(m.IRD), ORD: int(m.ORD),
		l: l, connID: m.ConnID, peerQPN: m.SrcQPN, peerPSN: m.InitialPSN, peerMax: int(m.MaxPayload),
		peerPort: m.DataPort, done: make(chan error, 1), expireAt: now + int64(cmQuiet),
	}
	select {
	case l.reqs <- r:
		c.halfOpen = append(c.halfOpen, r)
	default:
		c.sendReject(from, m.ConnID, RejectBusy, nil)
	}
}

// onReadyToUse handles a ReadyToUse: the replied request it names is established.
func (c *cmState) onReadyToUse(now int64, from netip.AddrPort, p *wire.Packet) {
	m := &p.CM
	for _, r := range c.halfOpen {
		if r.replied && r.connID == m.ConnID && r.Peer.Addr() == from.Addr() && p.Cookie == r.qp.cookie() &&
			m.SrcQPN == r.peerQPN && m.DataPort == r.peerPort {
			c.established(now, r.qp)
			return
		}
	}
	c.e.ctr.cmDrops.Add(1)
}
