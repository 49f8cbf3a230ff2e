package transport

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/xdpndk/xdpndk/transport/wire"
)

// Graceful disconnect: DisconnectReq, answered by DisconnectRep (NDKPI NdkDisconnect, the
// NetworkDirect Disconnect Scheme).

// disconnectState is a graceful disconnect in progress.
type disconnectState struct {
	q     *QP
	retry cmRetry // the request's retransmissions
	done  chan error
}

// Disconnect closes the connection gracefully: everything outstanding completes cancelled
// (the implicit flush of NDKPI NdkDisconnect), the peer is told, and the call returns when
// it answers (nil), the QP's RetryTimeout passes without an answer (ErrConnectTimeout), or
// ctx ends. The QP cannot be connected again.
func (q *QP) Disconnect(ctx context.Context) error { return q.StartDisconnect(0).Wait(ctx) }

// StartDisconnect begins Disconnect without waiting for it. The disconnect request is sent
// again after Config.CMTimeout, then at doubling intervals up to 500 ms, until the peer
// answers or timeout has passed since the engine sent the first one (ErrConnectTimeout); 0
// means the QP's RetryTimeout. A negative timeout is taken as 0.
func (q *QP) StartDisconnect(timeout time.Duration) *Disconnecting {
	d := &disconnectState{q: q, done: make(chan error, 1)}
	if timeout <= 0 {
		timeout = q.cfg.RetryTimeout
	}
	q.post(func(now int64) {
		e := q.e
		switch q.State() {
		case QPConnected, QPError:
		case QPDisconnected:
			// After the peer's own disconnect: the implicit flush of what it left posted.
			q.flush(StatusCancelled, -1, ErrDisconnected)
			d.done <- nil
			return
		default:
			d.done <- fmt.Errorf("disconnect a %v qp: %w", q.State(), ErrBadState)
			return
		}
		q.flush(StatusCancelled, -1, ErrDisconnected)
		q.state.Store(uint32(QPDisconnected))
		d.retry.start(now, e.cfg.CMTimeout, timeout)
		e.cm.discs = append(e.cm.discs, d)
		e.cm.sendDisconnect(q, wire.OpDisconnectReq)
	})
	return &Disconnecting{done: d.done}
}

// Disconnecting is a graceful disconnect in progress.
type Disconnecting struct{ done chan error }

// Wait waits until the peer answered (nil), the disconnect's timeout passed
// (ErrConnectTimeout), or ctx ends.
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

// disconnectMatches reports whether a disconnect message for a QP names the connection's
// peer QP and data port (the QP itself, its cookie and peer address are checked with the
// message). A message for no QP matches: it is dropped as such.
func (c *cmState) disconnectMatches(p *wire.Packet) bool {
	q := c.e.lookupQP(p.DestQPN)
	return q == nil || (p.CM.SrcQPN == q.peerQPN() && p.CM.DataPort == q.peerSource().Port())
}

// onDisconnect handles a DisconnectReq (answered, and the QP is disconnected without a
// flush) or a DisconnectRep (our disconnect is done), if it names the connection exactly.
func (c *cmState) onDisconnect(from netip.AddrPort, p *wire.Packet) {
	e := c.e
	if !c.disconnectMatches(p) {
		e.ctr.cmDrops.Add(1)
		return
	}
	q := e.lookupQP(p.DestQPN)
	if q == nil || q.cookie() == 0 || p.Cookie != q.cookie() || from != q.Peer() {
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
		q.setCause(ErrPeerDisconnected)
		q.state.Store(uint32(QPDisconnected))
		q.indicateDisconnect()
	}
}
