package transport

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/xdpndk/xdpndk/transport/wire"
)

// The active side of connection setup (Connect, the peer's reply, Complete or Reject,
// Cancel), and what both sides do once connected: give the QP its connection (connectQP).

// Connector is an outgoing connection attempt.
type Connector struct {
	qp      *QP
	peer    netip.AddrPort
	service uint64
	private []byte
	connID  uint64
	ourPSN  wire.PSN

	state   atomic.Int32 // connSent, connReplied, connCompleted, connFailed
	retry   cmRetry      // the request's retransmissions (connSent); engine goroutine
	linger  int64        // completed or abandoned: kept until then to answer copies of the reply
	refusal uint16       // the reason a late reply is refused with (0: RejectByPeer); engine goroutine
	replied chan error
	// The handshake's round trip, for the retransmission timer (sender.seedRTO): when the
	// request went, whether it went again (Karn: then nothing is measured), and the time
	// from it to the reply. Engine goroutine.
	sentAt    int64
	resent    bool
	handshake int64

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
//
// The request is sent again after Config.CMTimeout, then at doubling intervals up to
// 500 ms, until the peer answers or timeout has passed since the engine sent the first
// one (ErrConnectTimeout); 0 means Config.ConnectTimeout. A rejection (no listener, the
// peer's Reject) ends the attempt at once (ErrRejected).
func (e *Engine) Connect(qp *QP, peer netip.AddrPort, service uint64, private []byte, timeout time.Duration) (*Connector, error) {
	if len(private) > wire.MaxPrivateData {
		return nil, ErrPrivateData
	}
	if timeout < 0 {
		return nil, fmt.Errorf("connect timeout %v: %w", timeout, ErrInvalidRequest)
	}
	if timeout == 0 {
		timeout = e.cfg.ConnectTimeout
	}
	if qp.owner() != e {
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
		connID: e.g.newConnID(), ourPSN: wire.PSN(randUint64()), replied: make(chan error, 1)}
	e.command(func(now int64) {
		c.retry.start(now, e.cfg.CMTimeout, timeout)
		c.sentAt = now
		e.cm.conns = append(e.cm.conns, c)
		e.cm.sendRequest(c)
	})
	return c, nil
}

// Wait waits for the peer's reply (nil), a rejection (ErrRejected), Connect's timeout
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
		e.cm.connectQP(q, c.peer, c.peerPort, c.peerQPN, c.cookie, c.ourPSN, c.peerPSN, c.peerMax, ird, ord)
		q.established(now, c.handshake)
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

// connectQP gives a QP its connection: peer addresses, QPN, cookie, both streams' initial
// PSNs, the payload size and read limits. Engine goroutine.
func (c *cmState) connectQP(q *QP, peer netip.AddrPort, peerPort uint16, peerQPN uint32, cookie uint64, ourPSN, peerPSN wire.PSN, peerMax, ird, ord int) {
	e := c.e
	maxp := min(e.link.MaxPayload(), peerMax)
	q.setup(connection{peer: peer, peerPort: peerPort, peerQPN: peerQPN, cookie: cookie,
		ourPSN: ourPSN, peerPSN: peerPSN, maxPayload: maxp, ird: ird, ord: ord, window: e.cfg.Window,
		cc: e.cfg.NewController(mssOf(maxp))})
}

// lingerConn keeps an attempt that completed or was abandoned listed until cmQuiet from now
// (each copy of the peer's reply extends it: onReply), evicting the lingering attempt that
// ends first when more than maxLingering linger.
func (c *cmState) lingerConn(now int64, cn *Connector) {
	cn.linger = now + int64(cmQuiet)
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

// extendLinger keeps a lingering attempt cmQuiet past now: its peer still sends copies of
// its reply.
func (c *cmState) extendLinger(now int64, cn *Connector) {
	if cn.linger != 0 {
		cn.linger = max(cn.linger, now+int64(cmQuiet))
	}
}

func (c *cmState) removeConn(cn *Connector) {
	for i, x := range c.conns {
		if x == cn {
			c.conns = append(c.conns[:i], c.conns[i+1:]...)
			return
		}
	}
}

// onReply handles a ConnReply to one of our attempts: a valid reply is reported (Wait,
// Replied), an invalid one refused; a copy for an attempt that completed gets the
// ready-to-use again, for one abandoned or refused a ConnReject.
func (c *cmState) onReply(now int64, from netip.AddrPort, p *wire.Packet) {
	e := c.e
	m := &p.CM
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
			if !cn.resent {
				cn.handshake = now - cn.sentAt
			}
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
			c.extendLinger(now, cn)
		case connCompleted:
			c.sendRTU(cn) // our ready-to-use was lost
			c.extendLinger(now, cn)
		}
		return
	}
	e.ctr.cmDrops.Add(1)
}

// onReject handles a ConnReject: of our attempt waiting for its reply, or of a request we
// replied to (the peer refused our reply).
func (c *cmState) onReject(now int64, from netip.AddrPort, p *wire.Packet) {
	m := &p.CM
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
			r.qp.abort(fmt.Errorf("the requester refused the reply: %w", ErrRejected))
			c.dropHalfOpen(r, ErrRejected)
			return
		}
	}
	c.e.ctr.cmDrops.Add(1)
}
