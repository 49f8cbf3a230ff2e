package transport

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/xdpndk/xdpndk/transport/wire"
)

// Connection management runs over the same link as data: request, reply, ready-to-use,
// reject, disconnect request and reply (docs/PROTOCOL.md). Every message that expects an
// answer is retransmitted (cmRetry) after Config.CMTimeout, then at doubling intervals up to
// cmMaxInterval, until answered or until the deadline its caller gave (Connect, Accept,
// StartDisconnect); answers to duplicates are sent again. Incoming requests wait in a
// bounded half-open table (Config.MaxHalfOpen), so a flood of requests cannot exhaust
// memory; the other tables a peer or the application grows are bounded too (maxRecent,
// maxLingering). Entries kept for the copies a peer may still send live cmQuiet past the
// last copy seen (or, for recent connections, past the connection).
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
	// ErrConnectTimeout: the peer did not answer before the operation's timeout (Connect,
	// Accept, StartDisconnect).
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
	RejectTimeout     = 4 // the request waited too long for Accept or Reject (its requester stopped retransmitting it)
	RejectUnsupported = 5 // the request asks for something this side cannot do
	RejectInvalid     = 6 // a field of the request (or of the reply) is out of range (wire.ValidConnFields)
)

// Bounds of the connection manager's tables that peers and the application grow; each
// evicts its oldest entry to make room for a new one. (The half-open table has its own
// bound, Config.MaxHalfOpen, and refuses rather than evicts; attempts still waiting for
// a reply are bounded by the QPs, one each.)
const (
	// maxRecent bounds the established incoming connections remembered for cmQuiet so that
	// a late copy of their request is dropped rather than offered to the listener again. An
	// entry evicted early only lets such a copy through: the listener may see it as a new
	// request, whose reply the requester, connected already, does not complete, so that
	// attempt expires.
	maxRecent = 1024
	// maxLingering bounds the outgoing attempts kept after they completed or were abandoned,
	// to answer a retransmitted reply (a lost ready-to-use is sent again; a refused reply is
	// refused again), for cmQuiet past the latest copy. An entry evicted early only leaves
	// the peer's half-open connection to be established by the first data packet (or a
	// keepalive probe) or to time out.
	maxLingering = 1024
)

// The connection manager's retransmission schedule (cmRetry) and how long it remembers.
const (
	// cmMaxInterval caps the interval between two copies of a CM message (it starts at
	// Config.CMTimeout and doubles): a peer that comes back after a long silence hears
	// from a waiting connect, accept or disconnect within half a second.
	cmMaxInterval = 500 * time.Millisecond
	// cmQuiet is how long the connection manager keeps an entry for copies of a peer's
	// message after the latest one (a request waiting for Accept or Reject, an attempt
	// lingering to answer a reply again) or after the connection was established (to drop
	// a late copy of its request): four intervals at their cap, past which a peer that
	// still retransmits would have sent a copy.
	cmQuiet = 4 * cmMaxInterval
)

// cmRetry is the schedule of a CM message sent until answered: sent again at nextAt, after
// intervals that start at Config.CMTimeout and double up to cmMaxInterval (or CMTimeout if
// that is longer), until deadline.
type cmRetry struct {
	nextAt, iv, deadline int64
}

// start begins the schedule at now (the first copy just went) for timeout.
func (r *cmRetry) start(now int64, first time.Duration, timeout time.Duration) {
	r.iv, r.deadline = int64(first), now+int64(timeout)
	r.nextAt = min(now+r.iv, r.deadline)
}

// poll reports at now whether the deadline has passed (expired), or else whether a copy is
// due (resend; the schedule then moves on).
func (r *cmRetry) poll(now int64) (resend, expired bool) {
	if now >= r.deadline {
		return false, true
	}
	if now < r.nextAt {
		return false, false
	}
	r.iv = min(2*r.iv, max(int64(cmMaxInterval), r.iv))
	r.nextAt = min(now+r.iv, r.deadline)
	return true, false
}

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

// input handles a connection-management message from from: each kind goes to its part of
// the state machine (cm_listen.go, cm_connect.go, cm_disconnect.go).
func (c *cmState) input(now int64, from netip.AddrPort, p *wire.Packet) {
	if !validSource(from) {
		c.e.ctr.cmDrops.Add(1) // nothing may answer it
		return
	}
	switch p.Opcode {
	case wire.OpConnRequest:
		c.onRequest(now, from, p)
	case wire.OpConnReply:
		c.onReply(now, from, p)
	case wire.OpReadyToUse:
		c.onReadyToUse(now, from, p)
	case wire.OpConnReject:
		c.onReject(now, from, p)
	case wire.OpDisconnectReq, wire.OpDisconnectRep:
		c.onDisconnect(from, p)
	}
}

// poll retransmits what waits for an answer and expires what waited too long. It returns
// the next time something is due, and whether it did anything (an expiry completes an
// operation its caller waits for).
func (c *cmState) poll(now int64) (next int64, busy bool) {
	due := func(t int64) { next = earlier(next, t) }
	for i := 0; i < len(c.conns); i++ {
		cn := c.conns[i]
		switch cn.state.Load() {
		case connSent:
			resend, expired := cn.retry.poll(now)
			if expired {
				busy = true
				if cn.state.CompareAndSwap(connSent, connFailed) { // else Cancel won
					cn.qp.leaveConnecting()
					cn.replied <- ErrConnectTimeout
				}
				c.removeConn(cn)
				i--
				continue
			}
			if resend {
				busy = true
				cn.resent = true
				c.sendRequest(cn)
			}
			due(cn.retry.nextAt)
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
		if r.replied {
			resend, expired := r.retry.poll(now)
			if expired {
				busy = true
				r.qp.abort(fmt.Errorf("no ready-to-use from the requester: %w", ErrConnectTimeout))
				c.dropHalfOpen(r, ErrConnectTimeout)
				i--
				continue
			}
			if resend {
				busy = true
				r.resent = true
				c.sendReply(r)
			}
			due(r.retry.nextAt)
			continue
		}
		if now >= r.expireAt {
			busy = true
			c.sendReject(r.Peer, r.connID, RejectTimeout, nil)
			r.answered.Store(true)
			c.dropHalfOpen(r, ErrConnectTimeout)
			i--
			continue
		}
		due(r.expireAt)
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
		resend, expired := d.retry.poll(now)
		if expired {
			busy = true
			c.finishDisconnect(d, ErrConnectTimeout)
			i--
			continue
		}
		if resend {
			busy = true
			c.sendDisconnect(d.q, wire.OpDisconnectReq)
		}
		due(d.retry.nextAt)
	}
	return next, busy
}

// forget abandons what the connection manager holds for q, which is being closed: an
// attempt waiting for its reply fails (ErrConnectCancelled), a reply or an accepted request
// not yet established is refused to the peer, a completed attempt lingering to resend its
// ready-to-use refuses copies of the reply instead, and a graceful disconnect in progress
// ends (ErrConnectCancelled). Engine goroutine.
func (c *cmState) forget(now int64, q *QP) {
	for i := 0; i < len(c.conns); i++ {
		cn := c.conns[i]
		if cn.qp != q {
			continue
		}
		st := cn.state.Load()
		for st != connFailed && !cn.state.CompareAndSwap(st, connFailed) {
			st = cn.state.Load() // the application moved it on meanwhile (Complete, Cancel)
		}
		switch st {
		case connSent:
			cn.replied <- ErrConnectCancelled
		case connReplied:
			c.sendReject(cn.peer, cn.connID, RejectByPeer, nil)
		}
		if cn.linger == 0 {
			c.lingerConn(now, cn) // refuse late replies; may evict an entry before i
			i = -1                // start over: the list may have changed
		}
	}
	for i := 0; i < len(c.halfOpen); i++ {
		if r := c.halfOpen[i]; r.qp == q {
			c.sendReject(r.Peer, r.connID, RejectByPeer, nil)
			c.dropHalfOpen(r, ErrConnectCancelled)
			i--
		}
	}
	for i := 0; i < len(c.discs); i++ {
		if d := c.discs[i]; d.q == q {
			c.finishDisconnect(d, fmt.Errorf("queue pair closed: %w", ErrConnectCancelled))
			i--
		}
	}
}

// validSource reports whether a is a unicast address with a non-zero port: where a
// connection-management message may come from and an answer may go (never a broadcast,
// multicast or unspecified address).
func validSource(a netip.AddrPort) bool {
	ip := a.Addr().Unmap()
	return a.Port() != 0 && ip.IsValid() && !ip.IsUnspecified() && !ip.IsMulticast() &&
		ip != netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

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

// CM message senders.

func (c *cmState) packet(op wire.Opcode, destQPN uint32, cookie uint64) *wire.Packet {
	p := &c.cmPkt
	*p = wire.Packet{}
	p.Header = wire.Header{Opcode: op, DestQPN: destQPN, Cookie: cookie, TS: uint32(c.e.now() / 1000)}
	return p
}

func (c *cmState) send(to netip.AddrPort, p *wire.Packet) {
	tx := &c.e.tx
	i := tx.slot()
	if i < 0 {
		return // the link is full: the retransmission timer sends it again
	}
	p.CM.PrivateLen = uint16(len(p.PrivateData))
	hl, err := wire.Encode(tx.hdr[i][:], p)
	if err != nil {
		panic("transport: encoding a connection-management message failed: " + err.Error())
	}
	tx.emit(i, to, 0, hl, nil, nil)
}

func (c *cmState) sendRequest(cn *Connector) {
	q := cn.qp
	p := c.packet(wire.OpConnRequest, 0, 0)
	p.CM = wire.CMExt{ServiceID: cn.service, ConnID: cn.connID, SrcQPN: q.qpn, InitialPSN: cn.ourPSN,
		MaxPayload: c.maxPayload(), IRD: uint8(q.cfg.IRD), ORD: uint8(q.cfg.ORD), DataPort: q.SourcePort()}
	p.PrivateData = cn.private
	c.send(cn.peer, p)
}

func (c *cmState) sendReply(r *ConnRequest) {
	q := r.qp
	ird, ord := q.readLimits()
	p := c.packet(wire.OpConnReply, r.peerQPN, q.cookie())
	p.CM = wire.CMExt{ServiceID: r.l.service, ConnID: r.connID, SrcQPN: q.qpn, InitialPSN: q.initialPSN(),
		Cookie: q.cookie(), MaxPayload: c.maxPayload(), IRD: uint8(ird), ORD: uint8(ord), DataPort: q.SourcePort()}
	p.PrivateData = r.private
	c.send(r.Peer, p)
}

// maxPayload is the MaxPayload this engine announces: its link's (NewEngine checked it is
// at least wire.MinMaxPayload), at most wire.MaxMaxPayload.
func (c *cmState) maxPayload() uint16 { return uint16(min(c.e.link.MaxPayload(), wire.MaxMaxPayload)) }

func (c *cmState) sendRTU(cn *Connector) {
	p := c.packet(wire.OpReadyToUse, cn.peerQPN, cn.cookie)
	p.CM = wire.CMExt{ConnID: cn.connID, SrcQPN: cn.qp.qpn, DataPort: cn.qp.SourcePort()}
	c.send(cn.peer, p)
}

func (c *cmState) sendReject(to netip.AddrPort, connID uint64, reason uint16, private []byte) {
	p := c.packet(wire.OpConnReject, 0, 0)
	p.CM = wire.CMExt{ConnID: connID, Reason: reason}
	p.PrivateData = private
	c.send(to, p)
}

func (c *cmState) sendDisconnect(q *QP, op wire.Opcode) {
	p := c.packet(op, q.peerQPN(), q.cookie())
	p.CM = wire.CMExt{SrcQPN: q.qpn, DataPort: q.SourcePort()}
	c.send(q.Peer(), p)
}
