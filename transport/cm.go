package transport

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

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
	tx.emit(i, to, 0, hl)
}

func (c *cmState) sendRequest(cn *Connector) {
	q := cn.qp
	p := c.packet(wire.OpConnRequest, 0, 0)
	p.CM = wire.CMExt{ServiceID: cn.service, ConnID: cn.connID, SrcQPN: q.qpn, InitialPSN: cn.ourPSN,
		MaxPayload: c.maxPayload(), IRD: uint8(q.cfg.IRD), ORD: uint8(q.cfg.ORD), DataPort: q.conn.srcPort}
	p.PrivateData = cn.private
	c.send(cn.peer, p)
}

func (c *cmState) sendReply(r *ConnRequest) {
	q := r.qp
	p := c.packet(wire.OpConnReply, r.peerQPN, q.conn.cookie)
	p.CM = wire.CMExt{ServiceID: r.l.service, ConnID: r.connID, SrcQPN: q.qpn, InitialPSN: q.snd.NextPSN(),
		Cookie: q.conn.cookie, MaxPayload: c.maxPayload(), IRD: uint8(q.resp.ird), ORD: uint8(q.req.ord), DataPort: q.conn.srcPort}
	p.PrivateData = r.private
	c.send(r.Peer, p)
}

// maxPayload is the MaxPayload this engine announces: its link's (NewEngine checked it is
// at least wire.MinMaxPayload), at most wire.MaxMaxPayload.
func (c *cmState) maxPayload() uint16 { return uint16(min(c.e.link.MaxPayload(), wire.MaxMaxPayload)) }

func (c *cmState) sendRTU(cn *Connector) {
	p := c.packet(wire.OpReadyToUse, cn.peerQPN, cn.cookie)
	p.CM = wire.CMExt{ConnID: cn.connID, SrcQPN: cn.qp.qpn, DataPort: cn.qp.conn.srcPort}
	c.send(cn.peer, p)
}

func (c *cmState) sendReject(to netip.AddrPort, connID uint64, reason uint16, private []byte) {
	p := c.packet(wire.OpConnReject, 0, 0)
	p.CM = wire.CMExt{ConnID: connID, Reason: reason}
	p.PrivateData = private
	c.send(to, p)
}

func (c *cmState) sendDisconnect(q *QP, op wire.Opcode) {
	p := c.packet(op, q.conn.peerQPN, q.conn.cookie)
	p.CM = wire.CMExt{SrcQPN: q.qpn, DataPort: q.conn.srcPort}
	c.send(q.conn.peer, p)
}
