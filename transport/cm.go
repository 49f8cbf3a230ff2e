package transport

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"

	"github.com/xdpndk/xdpndk/transport/ack"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// Connection management runs over the same link as data: request, reply, ready-to-use,
// reject, disconnect request and reply (docs/PROTOCOL.md). Every message that expects an
// answer is retransmitted every Config.CMTimeout until answered or Config.CMRetries sends;
// answers to duplicates are sent again. Incoming requests wait in a bounded half-open table
// (Config.MaxHalfOpen), so a flood of requests cannot exhaust memory; the other tables a
// peer or the application grows are bounded too (maxRecent, maxLingering).
//
// Every message is checked before anything in it is used (docs/PROTOCOL.md §9): wire.Parse
// drops what is wrong whoever receives it; here a source that is not a unicast address with
// a port is dropped, a ConnRequest or ConnReply that fails wire.ValidConnFields is answered
// with a ConnReject (RejectInvalid), and a ReadyToUse or disconnect message whose SrcQPN or
// DataPort is not the connection's is dropped. Drops are counted in EngineStats.CMDropped.

// Errors of connection setup and teardown.
var (
	// ErrRejected: the peer (or no listener at the peer) refused the connection.
	ErrRejected = errors.New("connection rejected")
	// ErrConnectTimeout: the peer did not answer within the retry budget.
	ErrConnectTimeout = errors.New("connection attempt timed out")
	// ErrConnectCancelled: the attempt was abandoned with Connector.Cancel before an answer.
	ErrConnectCancelled = errors.New("connection attempt cancelled")
	// ErrBadState: the QP is not in a state that allows the call.
	ErrBadState = errors.New("queue pair in the wrong state")
	// ErrListening: a listener already exists for the service.
	ErrListening = errors.New("service already has a listener")
	// ErrPrivateData: more private data than wire.MaxPrivateData.
	ErrPrivateData = fmt.Errorf("private data over %d bytes", wire.MaxPrivateData)
	// ErrPeerInvalid: the peer's reply had a field out of range (wire.ValidConnFields: a
	// MaxPayload outside [wire.MinMaxPayload, wire.MaxMaxPayload], a zero SrcQPN or DataPort,
	// a cookie that is zero or differs from the header's; or it was addressed to another
	// QP). The attempt failed, the QP is idle again, and the peer was sent a ConnReject with
	// RejectInvalid so that its half-open connection ends at once.
	ErrPeerInvalid = errors.New("connection reply with a field out of range")
	// ErrPeerAddress: Connect was given a peer that is not a unicast address with a non-zero
	// port.
	ErrPeerAddress = errors.New("peer is not a unicast address with a port")
)

// Reject reasons carried in ConnReject.
const (
	RejectByPeer      = 1 // the peer's application rejected
	RejectNoListener  = 2 // nothing listens on the service
	RejectBusy        = 3 // the listener's backlog is full
	RejectTimeout     = 4 // the request waited too long for Accept or Reject
	RejectUnsupported = 5 // the request asks for something this side cannot do
	RejectInvalid     = 6 // a field of the request (or of the reply) is out of range (wire.ValidConnFields)
)

// Bounds of the connection manager's tables that peers and the application grow; each
// evicts its oldest entry to make room for a new one. (The half-open table has its own
// bound, Config.MaxHalfOpen, and refuses rather than evicts; attempts still waiting for
// a reply are bounded by the QPs, one each.)
const (
	// maxRecent bounds the established incoming connections remembered for
	// CMTimeout*CMRetries so that a late copy of their request is dropped rather than
	// offered to the listener again. An entry evicted early only lets such a copy through:
	// the listener may see it as a new request, whose reply the requester, connected
	// already, does not complete, so that attempt expires.
	maxRecent = 1024
	// maxLingering bounds the outgoing attempts kept for CMTimeout*CMRetries after they
	// completed or were abandoned, to answer a retransmitted reply (a lost ready-to-use is
	// sent again; a refused reply is refused again). An entry evicted early only leaves the
	// peer's half-open connection to be established by the first data packet or to time out.
	maxLingering = 1024
)

type cmState struct {
	e         *Engine
	listeners map[uint64]*Listener
	conns     []*Connector   // our outgoing attempts, and completed ones lingering to re-send RTU
	halfOpen  []*ConnRequest // incoming requests: waiting for the application, or for RTU
	recent    []recentConn   // established incoming connections, remembered to drop late duplicates of their request
	discs     []*disconnectState
	cmPkt     wire.Packet
}

func (c *cmState) init(e *Engine) {
	c.e = e
	c.listeners = make(map[uint64]*Listener)
}

// recentConn is an incoming connection established a moment ago.
type recentConn struct {
	peer   netip.Addr
	connID uint64
	until  int64
}

// Listener receives connection requests for one service.
type Listener struct {
	e       *Engine
	service uint64
	reqs    chan *ConnRequest
	closed  atomic.Bool
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
// Reject; unanswered ones are rejected after the connection manager's retry budget.
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
	tries    int
	nextAt   int64
	expireAt int64
	done     chan error // established (nil) or failed
	answered atomic.Bool
}

// Accept connects qp (idle, on the listener's engine) to the requester with private data,
// answering with a reply. It returns at once; Wait reports when the requester's
// ready-to-use arrives.
func (r *ConnRequest) Accept(qp *QP, private []byte) error {
	if len(private) > wire.MaxPrivateData {
		return ErrPrivateData
	}
	if qp.e != r.l.e {
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
	e := r.l.e
	e.command(func(now int64) {
		r.qp, r.private, r.replied = qp, priv, true
		ird, ord := min(qp.cfg.IRD, r.ORD), min(qp.cfg.ORD, r.IRD)
		qp.setup(r.Peer, r.peerPort, r.peerQPN, randUint64()|1, wire.PSN(randUint64()), r.peerPSN, r.peerMax, ird, ord)
		r.tries, r.nextAt = 1, now+int64(e.cfg.CMTimeout)
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
	e := r.l.e
	e.command(func(int64) {
		e.cm.sendReject(r.Peer, r.connID, RejectByPeer, priv)
		e.cm.dropHalfOpen(r, ErrRejected)
	})
	return nil
}

// Wait waits until an accepted connection is established (nil), fails, or ctx ends.
func (r *ConnRequest) Wait(ctx context.Context) error { return waitResult(ctx, r.done) }

// Established reports, without blocking, whether the accepted connection has been
// established (done, nil) or has failed (done, error).
func (r *ConnRequest) Established() (done bool, err error) { return pollResult(r.done) }

// waitResult waits for the one result a channel of capacity one will carry, and leaves it
// there for later callers.
func waitResult(ctx context.Context, ch chan error) error {
	select {
	case err := <-ch:
		ch <- err
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pollResult is waitResult without waiting.
func pollResult(ch chan error) (bool, error) {
	select {
	case err := <-ch:
		ch <- err
		return true, err
	default:
		return false, nil
	}
}

// Connector is an outgoing connection attempt.
type Connector struct {
	qp      *QP
	peer    netip.AddrPort
	service uint64
	private []byte
	connID  uint64
	ourPSN  wire.PSN

	state   atomic.Int32 // connSent, connReplied, connCompleted, connFailed
	tries   int
	nextAt  int64
	linger  int64
	refusal uint16 // the reason a late reply is refused with (0: RejectByPeer); engine goroutine
	replied chan error

	// Filled from the reply.
	peerPrivate []byte
	peerIRD     int
	peerORD     int
	peerQPN     uint32
	peerPSN     wire.PSN
	peerMax     int
	peerPort    uint16
	cookie      uint64
}

const (
	connSent = iota
	connReplied
	connCompleted
	connFailed
)

// Connect starts connecting qp (idle) to the listener of service at peer, with private
// data. Wait reports the reply; then Complete finishes the handshake (or Reject refuses the
// peer's reply), as NdkConnect and NdkCompleteConnect do.
func (e *Engine) Connect(qp *QP, peer netip.AddrPort, service uint64, private []byte) (*Connector, error) {
	if len(private) > wire.MaxPrivateData {
		return nil, ErrPrivateData
	}
	if qp.e != e {
		return nil, fmt.Errorf("qp of another engine: %w", ErrBadState)
	}
	if !validSource(peer) {
		return nil, fmt.Errorf("connect to %v: %w", peer, ErrPeerAddress)
	}
	if !qp.state.CompareAndSwap(uint32(QPIdle), uint32(QPConnecting)) {
		return nil, fmt.Errorf("connect on a %v qp: %w", qp.State(), ErrBadState)
	}
	// The ConnID is never 0 (wire.Parse refuses that).
	c := &Connector{qp: qp, peer: peer, service: service, private: append([]byte(nil), private...),
		connID: randUint64() | 1, ourPSN: wire.PSN(randUint64()), replied: make(chan error, 1)}
	e.command(func(now int64) {
		c.tries, c.nextAt = 1, now+int64(e.cfg.CMTimeout)
		e.cm.conns = append(e.cm.conns, c)
		e.cm.sendRequest(c)
	})
	return c, nil
}

// Wait waits for the peer's reply (nil), a rejection (ErrRejected), a timeout
// (ErrConnectTimeout), a reply with a field out of range (ErrPeerInvalid), or ctx to end.
func (c *Connector) Wait(ctx context.Context) error { return waitResult(ctx, c.replied) }

// Replied reports, without blocking, whether the attempt has its answer: the peer's reply
// (done, nil), or a rejection or timeout (done, error).
func (c *Connector) Replied() (done bool, err error) { return pollResult(c.replied) }

// PeerPrivateData returns the private data of the peer's reply or rejection (after Wait).
func (c *Connector) PeerPrivateData() []byte { return c.peerPrivate }

// PeerReadLimits returns the peer's IRD and ORD from its reply (after Wait).
func (c *Connector) PeerReadLimits() (ird, ord int) { return c.peerIRD, c.peerORD }

// Complete finishes a replied connection: the ready-to-use goes to the peer and the QP
// becomes connected (State says when; it does not wait for the engine).
func (c *Connector) Complete() error {
	if !c.state.CompareAndSwap(connReplied, connCompleted) {
		return fmt.Errorf("complete without a reply: %w", ErrBadState)
	}
	e := c.qp.e
	e.command(func(now int64) {
		e.cm.lingerConn(now, c)
		q := c.qp
		if q.State() != QPConnecting {
			// Flushed while connecting: the QP stays failed, the peer's reply is refused.
			c.state.Store(connFailed)
			e.cm.sendReject(c.peer, c.connID, RejectByPeer, nil)
			return
		}
		ird, ord := min(q.cfg.IRD, c.peerORD), min(q.cfg.ORD, c.peerIRD)
		q.setup(c.peer, c.peerPort, c.peerQPN, c.cookie, c.ourPSN, c.peerPSN, c.peerMax, ird, ord)
		q.state.Store(uint32(QPConnected))
		e.activate(q)
		e.cm.sendRTU(c)
	})
	return nil
}

// Cancel abandons an attempt that has not completed, as when the caller stops waiting for
// it: a request not yet answered is no longer retransmitted (Wait and Replied report
// ErrConnectCancelled), and a reply not yet completed is refused as Reject would, so that
// the peer's half-open connection ends at once instead of timing out. The QP returns to
// idle (State says when; it does not wait for the engine). Cancel reports whether it
// abandoned the attempt: false when the attempt completed or failed already.
func (c *Connector) Cancel() bool {
	for {
		st := c.state.Load()
		if st != connSent && st != connReplied {
			return false
		}
		if !c.state.CompareAndSwap(st, connFailed) {
			continue // the engine moved it on meanwhile: look again
		}
		if st == connSent {
			c.replied <- ErrConnectCancelled // nothing else sends once the state left connSent
		}
		e := c.qp.e
		e.command(func(now int64) {
			if st == connReplied {
				e.cm.sendReject(c.peer, c.connID, RejectByPeer, nil)
			}
			c.qp.leaveConnecting()
			// The attempt stays listed for as long as the peer may retransmit its reply,
			// so that a late reply is refused (poll removes it then).
			e.cm.lingerConn(now, c)
		})
		return true
	}
}

// Reject refuses the peer's reply; the QP returns to idle.
func (c *Connector) Reject(private []byte) error {
	if len(private) > wire.MaxPrivateData {
		return ErrPrivateData
	}
	if !c.state.CompareAndSwap(connReplied, connFailed) {
		return fmt.Errorf("reject without a reply: %w", ErrBadState)
	}
	e := c.qp.e
	priv := append([]byte(nil), private...)
	e.command(func(int64) {
		e.cm.sendReject(c.peer, c.connID, RejectByPeer, priv)
		c.qp.leaveConnecting()
		e.cm.removeConn(c)
	})
	return nil
}

// leaveConnecting returns a QP whose connection attempt ended without a connection to idle,
// so that it can connect again. A QP flushed while connecting stays in the error state: the
// engine polls it already, so that what is posted to it completes cancelled.
func (q *QP) leaveConnecting() { q.state.CompareAndSwap(uint32(QPConnecting), uint32(QPIdle)) }

// setup gives a QP its connection: peer addresses, QPN, cookie, both streams' initial PSNs,
// the payload size and read limits. Engine goroutine.
func (q *QP) setup(peer netip.AddrPort, peerPort uint16, peerQPN uint32, cookie uint64, ourPSN, peerPSN wire.PSN, peerMax, ird, ord int) {
	e := q.e
	q.peer = peer
	q.peerSrc = netip.AddrPortFrom(peer.Addr(), peerPort)
	q.peerQPN, q.cookie = peerQPN, cookie
	q.ird, q.ord = ird, ord
	maxp := min(e.link.MaxPayload(), peerMax)
	q.mss = maxp - wire.HeaderLen - maxDataExt - wire.TrailerLen
	q.req.sent = ack.NewSentHistory(ourPSN, e.cfg.Window)
	q.resp.rx = ack.NewReceiveTracker(peerPSN, e.cfg.Window)
	q.req.cc = e.cfg.NewController(q.mss)
	q.req.jobs = q.req.jobs[:min(len(q.req.jobs), 2*ird)] // IRD 0: the peer may not read
	q.publishStats()
}

// established marks a replied passive connection as established (on its ready-to-use, or
// on the first packet that carries its cookie). It reports whether q is now connected.
func (c *cmState) established(now int64, q *QP) bool {
	for _, r := range c.halfOpen {
		if r.qp == q && r.replied {
			if q.State() != QPConnecting {
				c.dropHalfOpen(r, ErrConnectCancelled) // flushed while connecting: it stays failed
				return false
			}
			q.state.Store(uint32(QPConnected))
			c.e.activate(q)
			if len(c.recent) >= maxRecent {
				// The oldest goes: every entry lives as long, so the first expires first.
				c.recent = append(c.recent[:0], c.recent[1:]...)
			}
			c.recent = append(c.recent, recentConn{peer: r.Peer.Addr(), connID: r.connID,
				until: now + int64(c.e.cfg.CMTimeout)*int64(c.e.cfg.CMRetries)})
			c.dropHalfOpen(r, nil)
			return true
		}
	}
	return q.State() == QPConnected
}

// poll retransmits what waits for an answer and expires what waited too long.
func (c *cmState) poll(now int64) (next int64) {
	e := c.e
	due := func(t int64) {
		if t > 0 && (next == 0 || t < next) {
			next = t
		}
	}
	for i := 0; i < len(c.conns); i++ {
		cn := c.conns[i]
		switch cn.state.Load() {
		case connSent:
			if now >= cn.nextAt {
				if cn.tries >= e.cfg.CMRetries {
					if cn.state.CompareAndSwap(connSent, connFailed) { // else Cancel won
						cn.qp.leaveConnecting()
						cn.replied <- ErrConnectTimeout
					}
					c.removeConn(cn)
					i--
					continue
				}
				cn.tries++
				cn.nextAt = now + int64(e.cfg.CMTimeout)
				c.sendRequest(cn)
			}
			due(cn.nextAt)
		case connCompleted, connFailed: // a cancelled attempt lingers too (Cancel)
			if cn.linger == 0 {
				continue // Cancel's command has not run yet
			}
			if now >= cn.linger {
				c.removeConn(cn)
				i--
				continue
			}
			due(cn.linger)
		}
	}
	for i := 0; i < len(c.halfOpen); i++ {
		r := c.halfOpen[i]
		switch {
		case r.replied && now >= r.nextAt:
			if r.tries >= e.cfg.CMRetries {
				r.qp.abort(now)
				c.dropHalfOpen(r, ErrConnectTimeout)
				i--
				continue
			}
			r.tries++
			r.nextAt = now + int64(e.cfg.CMTimeout)
			c.sendReply(r)
		case !r.replied && now >= r.expireAt:
			c.sendReject(r.Peer, r.connID, RejectTimeout, nil)
			r.answered.Store(true)
			c.dropHalfOpen(r, ErrConnectTimeout)
			i--
			continue
		}
		if r.replied {
			due(r.nextAt)
		} else {
			due(r.expireAt)
		}
	}
	for i := 0; i < len(c.recent); i++ {
		if now >= c.recent[i].until {
			c.recent = append(c.recent[:i], c.recent[i+1:]...)
			i--
		} else {
			due(c.recent[i].until)
		}
	}
	for i := 0; i < len(c.discs); i++ {
		d := c.discs[i]
		if now >= d.nextAt {
			if d.tries >= e.cfg.CMRetries {
				c.finishDisconnect(d, ErrConnectTimeout)
				i--
				continue
			}
			d.tries++
			d.nextAt = now + int64(e.cfg.CMTimeout)
			c.sendDisconnect(d.q, wire.OpDisconnectReq)
		}
		due(d.nextAt)
	}
	return next
}

// lingerConn keeps an attempt that completed or was abandoned listed until
// CMTimeout*CMRetries from now, evicting the lingering attempt that ends first when more
// than maxLingering linger.
func (c *cmState) lingerConn(now int64, cn *Connector) {
	cn.linger = now + int64(c.e.cfg.CMTimeout)*int64(c.e.cfg.CMRetries)
	n := 0
	var oldest *Connector
	for _, x := range c.conns {
		if x.linger == 0 {
			continue // waiting for a reply, or Cancel's command has not run yet
		}
		if st := x.state.Load(); st != connCompleted && st != connFailed {
			continue
		}
		n++
		if oldest == nil || x.linger < oldest.linger {
			oldest = x
		}
	}
	if n > maxLingering {
		c.removeConn(oldest)
	}
}

// refuseReply fails the attempt cn, whose reply from from had a field out of range: Wait
// reports ErrPeerInvalid, the QP is idle again, and the peer is sent a ConnReject with
// RejectInvalid at once (and for every copy of the reply while the attempt lingers), so
// that its half-open connection ends. Engine goroutine.
func (c *cmState) refuseReply(now int64, cn *Connector, from netip.AddrPort) {
	c.e.ctr.cmDrops.Add(1)
	cn.refusal = RejectInvalid
	c.sendReject(from, cn.connID, RejectInvalid, nil)
	if !cn.state.CompareAndSwap(connSent, connFailed) {
		return // cancelled meanwhile: Cancel reports it and lingers the attempt
	}
	cn.qp.leaveConnecting()
	cn.replied <- ErrPeerInvalid
	c.lingerConn(now, cn)
}

// validSource reports whether a is a unicast address with a non-zero port: where a
// connection-management message may come from and an answer may go (never a broadcast,
// multicast or unspecified address).
func validSource(a netip.AddrPort) bool {
	ip := a.Addr().Unmap()
	return a.Port() != 0 && ip.IsValid() && !ip.IsUnspecified() && !ip.IsMulticast() &&
		ip != netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

// disconnectMatches reports whether a disconnect message for a QP names the connection's
// peer QP and data port (the QP itself, its cookie and peer address are checked with the
// message). A message for no QP matches: it is dropped as such.
func (c *cmState) disconnectMatches(p *wire.Packet) bool {
	q := c.e.lookupQP(p.DestQPN)
	return q == nil || (p.CM.SrcQPN == q.peerQPN && p.CM.DataPort == q.peerSrc.Port())
}

func (c *cmState) removeConn(cn *Connector) {
	for i, x := range c.conns {
		if x == cn {
			c.conns = append(c.conns[:i], c.conns[i+1:]...)
			return
		}
	}
}

func (c *cmState) dropHalfOpen(r *ConnRequest, err error) {
	for i, x := range c.halfOpen {
		if x == r {
			c.halfOpen = append(c.halfOpen[:i], c.halfOpen[i+1:]...)
			break
		}
	}
	select {
	case r.done <- err:
	default:
	}
}

// input handles a connection-management message from from.
func (c *cmState) input(now int64, from netip.AddrPort, p *wire.Packet) {
	e := c.e
	m := &p.CM
	if !validSource(from) {
		e.ctr.cmDrops.Add(1) // nothing may answer it
		return
	}
	if (p.Opcode == wire.OpDisconnectReq || p.Opcode == wire.OpDisconnectRep) && !c.disconnectMatches(p) {
		e.ctr.cmDrops.Add(1)
		return
	}
	switch p.Opcode {
	case wire.OpConnRequest:
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
					c.sendReply(r) // our reply was lost
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
			peerPort: m.DataPort, done: make(chan error, 1),
			expireAt: now + int64(e.cfg.CMTimeout)*int64(e.cfg.CMRetries)*4,
		}
		select {
		case l.reqs <- r:
			c.halfOpen = append(c.halfOpen, r)
		default:
			c.sendReject(from, m.ConnID, RejectBusy, nil)
		}
	case wire.OpConnReply:
		for _, cn := range c.conns {
			if cn.connID != m.ConnID || cn.peer.Addr() != from.Addr() {
				continue
			}
			switch cn.state.Load() {
			case connSent:
				if !wire.ValidConnFields(p) || p.DestQPN != cn.qp.qpn {
					c.refuseReply(now, cn, from)
					return
				}
				cn.peerPrivate = append([]byte(nil), p.PrivateData...)
				cn.peerIRD, cn.peerORD = int(m.IRD), int(m.ORD)
				cn.peerQPN, cn.peerPSN, cn.peerMax, cn.cookie = m.SrcQPN, m.InitialPSN, int(m.MaxPayload), m.Cookie
				cn.peer = from
				cn.peerPort = m.DataPort
				if !cn.state.CompareAndSwap(connSent, connReplied) {
					// Cancelled meanwhile: the peer's half-open connection is refused now
					// rather than left to time out.
					c.sendReject(from, cn.connID, RejectByPeer, nil)
					return
				}
				cn.replied <- nil
			case connFailed: // cancelled or refused before this reply came (or its first copy)
				reason := uint16(RejectByPeer)
				if cn.refusal != 0 {
					reason = cn.refusal
				}
				c.sendReject(from, cn.connID, reason, nil)
			case connCompleted:
				c.sendRTU(cn) // our ready-to-use was lost
			}
			return
		}
		e.ctr.cmDrops.Add(1)
	case wire.OpReadyToUse:
		for _, r := range c.halfOpen {
			if r.replied && r.connID == m.ConnID && r.Peer.Addr() == from.Addr() && p.Cookie == r.qp.cookie &&
				m.SrcQPN == r.peerQPN && m.DataPort == r.peerPort {
				c.established(now, r.qp)
				return
			}
		}
		e.ctr.cmDrops.Add(1)
	case wire.OpConnReject:
		for _, cn := range c.conns {
			if cn.connID == m.ConnID && cn.peer.Addr() == from.Addr() && cn.state.CompareAndSwap(connSent, connFailed) {
				cn.peerPrivate = append([]byte(nil), p.PrivateData...)
				cn.qp.leaveConnecting()
				cn.replied <- fmt.Errorf("reason %d: %w", m.Reason, ErrRejected)
				c.removeConn(cn)
				return
			}
		}
		for _, r := range c.halfOpen {
			if r.replied && r.connID == m.ConnID && r.Peer.Addr() == from.Addr() {
				r.qp.abort(now)
				c.dropHalfOpen(r, ErrRejected)
				return
			}
		}
		e.ctr.cmDrops.Add(1)
	case wire.OpDisconnectReq, wire.OpDisconnectRep:
		q := e.lookupQP(p.DestQPN)
		if q == nil || q.cookie == 0 || p.Cookie != q.cookie || from != q.peer {
			e.ctr.cmDrops.Add(1)
			return
		}
		if p.Opcode == wire.OpDisconnectRep {
			for _, d := range c.discs {
				if d.q == q {
					c.finishDisconnect(d, nil)
					return
				}
			}
			return
		}
		c.sendDisconnect(q, wire.OpDisconnectRep)
		if st := q.State(); st == QPConnected || st == QPError || st == QPConnecting {
			// Peer-initiated: no flush (NetworkDirect Disconnect Scheme); outstanding
			// requests and posted receives stay until the application flushes, disconnects
			// or closes. A QP that failed before was flushed already.
			q.held = st != QPError
			q.state.Store(uint32(QPDisconnected))
			q.indicateDisconnect()
		}
	}
}

// disconnectState is a graceful disconnect in progress.
type disconnectState struct {
	q      *QP
	tries  int
	nextAt int64
	done   chan error
}

// Disconnect closes the connection gracefully: everything outstanding completes cancelled
// (the implicit flush of NDKPI NdkDisconnect), the peer is told, and the call returns when
// it answers (nil), the retry budget runs out (ErrConnectTimeout), or ctx ends. The QP
// cannot be connected again.
func (q *QP) Disconnect(ctx context.Context) error { return q.StartDisconnect().Wait(ctx) }

// StartDisconnect begins Disconnect without waiting for it.
func (q *QP) StartDisconnect() *Disconnecting {
	d := &disconnectState{q: q, done: make(chan error, 1)}
	e := q.e
	e.command(func(now int64) {
		switch q.State() {
		case QPConnected, QPError:
		case QPDisconnected:
			// After the peer's own disconnect: the implicit flush of what it left posted.
			q.flush(now, StatusCancelled, -1)
			d.done <- nil
			return
		default:
			d.done <- fmt.Errorf("disconnect a %v qp: %w", q.State(), ErrBadState)
			return
		}
		q.flush(now, StatusCancelled, -1)
		q.state.Store(uint32(QPDisconnected))
		d.tries, d.nextAt = 1, now+int64(e.cfg.CMTimeout)
		e.cm.discs = append(e.cm.discs, d)
		e.cm.sendDisconnect(q, wire.OpDisconnectReq)
	})
	return &Disconnecting{done: d.done}
}

// Disconnecting is a graceful disconnect in progress.
type Disconnecting struct{ done chan error }

// Wait waits until the peer answered (nil), the retry budget ran out, or ctx ends.
func (d *Disconnecting) Wait(ctx context.Context) error { return waitResult(ctx, d.done) }

// Done reports, without blocking, whether the disconnect finished, and how.
func (d *Disconnecting) Done() (bool, error) { return pollResult(d.done) }

func (c *cmState) finishDisconnect(d *disconnectState, err error) {
	for i, x := range c.discs {
		if x == d {
			c.discs = append(c.discs[:i], c.discs[i+1:]...)
			break
		}
	}
	d.done <- err
}

// CM message senders.

func (c *cmState) packet(op wire.Opcode, destQPN uint32, cookie uint64) *wire.Packet {
	p := &c.cmPkt
	*p = wire.Packet{}
	p.Header = wire.Header{Opcode: op, DestQPN: destQPN, Cookie: cookie, TS: uint32(c.e.now() / 1000)}
	return p
}

func (c *cmState) send(to netip.AddrPort, p *wire.Packet) {
	e := c.e
	i := e.tx.slot()
	if i < 0 {
		return // the link is full: the retransmission timer sends it again
	}
	p.CM.PrivateLen = uint16(len(p.PrivateData))
	hl, err := wire.Encode(e.tx.hdr[i][:], p)
	if err != nil {
		panic("transport: encoding a connection-management message failed: " + err.Error())
	}
	e.tx.emit(i, to, 0, hl)
}

func (c *cmState) sendRequest(cn *Connector) {
	q := cn.qp
	p := c.packet(wire.OpConnRequest, 0, 0)
	p.CM = wire.CMExt{ServiceID: cn.service, ConnID: cn.connID, SrcQPN: q.qpn, InitialPSN: cn.ourPSN,
		MaxPayload: c.maxPayload(), IRD: uint8(q.cfg.IRD), ORD: uint8(q.cfg.ORD), DataPort: q.srcPort}
	p.PrivateData = cn.private
	c.send(cn.peer, p)
}

func (c *cmState) sendReply(r *ConnRequest) {
	q := r.qp
	p := c.packet(wire.OpConnReply, r.peerQPN, q.cookie)
	p.CM = wire.CMExt{ServiceID: r.l.service, ConnID: r.connID, SrcQPN: q.qpn, InitialPSN: q.req.sent.NextPSN(),
		Cookie: q.cookie, MaxPayload: c.maxPayload(), IRD: uint8(q.ird), ORD: uint8(q.ord), DataPort: q.srcPort}
	p.PrivateData = r.private
	c.send(r.Peer, p)
}

// maxPayload is the MaxPayload this engine announces: its link's (NewEngine checked it is
// at least wire.MinMaxPayload), at most wire.MaxMaxPayload.
func (c *cmState) maxPayload() uint16 { return uint16(min(c.e.link.MaxPayload(), wire.MaxMaxPayload)) }

func (c *cmState) sendRTU(cn *Connector) {
	p := c.packet(wire.OpReadyToUse, cn.peerQPN, cn.cookie)
	p.CM = wire.CMExt{ConnID: cn.connID, SrcQPN: cn.qp.qpn, DataPort: cn.qp.srcPort}
	c.send(cn.peer, p)
}

func (c *cmState) sendReject(to netip.AddrPort, connID uint64, reason uint16, private []byte) {
	p := c.packet(wire.OpConnReject, 0, 0)
	p.CM = wire.CMExt{ConnID: connID, Reason: reason}
	p.PrivateData = private
	c.send(to, p)
}

func (c *cmState) sendDisconnect(q *QP, op wire.Opcode) {
	p := c.packet(op, q.peerQPN, q.cookie)
	p.CM = wire.CMExt{SrcQPN: q.qpn, DataPort: q.srcPort}
	c.send(q.peer, p)
}
