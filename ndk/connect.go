package ndk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"

	"github.com/xdpndk/xdpndk/transport"
)

// Addresses. An NDK address is an IP address and a port. Here the port names a service
// (a listener) multiplexed on the adapter's one UDP port: Connect(dest) reaches the
// listener of port dest.Port() on the adapter at dest.Addr(), whose link receives on
// Options.PeerPort.

// Connector is one connection, active (NewConnector, Connect) or passive (handed to a
// Listener's callback) (NDK_CONNECTOR). Its methods are safe for concurrent use, but a
// connection goes through its steps in order.
type Connector struct {
	a   *Adapter
	mu  sync.Mutex
	qp  *QP
	tc  *transport.Connector   // active side
	req *transport.ConnRequest // passive side

	local, peer netip.AddrPort
	ird, ord    int
	private     []byte // the peer's private data

	onDisconnect func()
	discFired    atomic.Bool
	localDisc    atomic.Bool
	answered     atomic.Bool
}

// NewConnector creates a connector for an outgoing connection (NdkCreateConnector).
func (a *Adapter) NewConnector() (*Connector, error) {
	if err := a.checkOpen(); err != nil {
		return nil, err
	}
	return &Connector{a: a}, nil
}

// connectError maps a connection failure to its NTSTATUS.
func connectError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, transport.ErrRejected):
		return wrap(StatusConnectionRefused, err)
	case errors.Is(err, transport.ErrConnectTimeout):
		return wrap(StatusIOTimeout, err)
	case errors.Is(err, transport.ErrConnectCancelled):
		return wrap(StatusCancelled, err)
	case errors.Is(err, transport.ErrPrivateData):
		return wrap(StatusInvalidBufferSize, err)
	case errors.Is(err, transport.ErrBadState):
		return wrap(StatusConnectionInvalid, err)
	case errors.Is(err, transport.ErrPeerInvalid):
		return wrap(StatusConnectionAborted, err) // the peer's reply was malformed: refused
	case errors.Is(err, transport.ErrPeerAddress):
		return wrap(StatusInvalidAddress, err)
	case errors.Is(err, context.DeadlineExceeded):
		return wrap(StatusIOTimeout, err)
	case errors.Is(err, context.Canceled):
		return wrap(StatusCancelled, err)
	}
	var se *statusError
	if errors.As(err, &se) {
		return err
	}
	return wrap(StatusUnsuccessful, err)
}

// timeoutOf returns how long the engine may keep trying on behalf of a call bounded by ctx:
// until ctx's deadline, or def when ctx has none (0: the engine's default, which the
// adapter set from Options.ConnectTimeout for connection setup and the QP's RetryTimeout
// for a disconnect).
func timeoutOf(ctx context.Context, def time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return max(time.Until(dl), time.Nanosecond)
	}
	return def
}

// deadlineError reports a wait that its context's deadline ended as the engine's own
// timeout would (the two race: the engine was given the same deadline).
func deadlineError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", transport.ErrConnectTimeout, err)
	}
	return err
}

// resolveError maps a failed peer resolution (link.PeerResolver) to its NTSTATUS: the
// caller's context ended, nobody answered for the address, or there is no way there.
func resolveError(err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return wrap(StatusCancelled, err)
	case errors.Is(err, syscall.EHOSTUNREACH):
		return wrap(StatusHostUnreachable, err)
	case errors.Is(err, syscall.ENETUNREACH):
		return wrap(StatusNetworkUnreachable, err)
	}
	return wrap(StatusUnsuccessful, err)
}

// checkLimits validates the arguments of Connect and Accept and returns the read limits
// capped at the adapter's (NDKPI NdkConnect: "if the value is greater than the adapter's
// maximum, the adapter's maximum is used"): negative ones are STATUS_INVALID_PARAMETER,
// too much private data STATUS_INVALID_BUFFER_SIZE.
func checkLimits(ird, ord int, private []byte) (int, int, error) {
	if ird < 0 || ord < 0 {
		return 0, 0, errorf(StatusInvalidParameter, "read limits %d/%d", ird, ord)
	}
	if len(private) > transport.MaxPrivateData {
		return 0, 0, errorf(StatusInvalidBufferSize, "%d bytes of private data (max %d)", len(private), transport.MaxPrivateData)
	}
	return min(ird, maxReadLimit), min(ord, maxReadLimit), nil
}

// Connect connects qp to the listener at dest (NdkConnect) with read limits ird (Reads the
// peer may have outstanding here) and ord (Reads qp may have outstanding there) and
// private data. It returns when the peer accepted: call CompleteConnect, or Reject after
// looking at GetConnectionData. Until then the request is sent again (backing off to twice
// a second) for as long as ctx allows: until its deadline, or Options.ConnectTimeout when
// it has none, so a client may start before its server. Errors: STATUS_HOST_UNREACHABLE
// (nobody answers ARP or neighbour discovery for the peer's address, or the next hop
// towards it) and STATUS_NETWORK_UNREACHABLE (no route, or no Ethernet next hop), before
// anything is sent and with qp left idle; STATUS_CONNECTION_REFUSED at once when the peer
// answers that nothing listens (or the listener is paused, closed or busy) or rejects;
// STATUS_IO_TIMEOUT (no answer before the deadline), STATUS_CONNECTION_ABORTED (the peer's
// reply had a field out of range: it is refused), STATUS_INVALID_ADDRESS (dest is not a
// unicast address), STATUS_CONNECTION_INVALID (qp not idle), STATUS_CANCELLED (ctx was
// cancelled). When it fails the attempt is abandoned, a reply that arrives later is
// refused, and qp is idle again, ready for another connector.
func (c *Connector) Connect(ctx context.Context, qp *QP, dest netip.AddrPort, ird, ord int, private []byte) error {
	a := c.a
	if err := a.checkOpen(); err != nil {
		return err
	}
	ird, ord, err := checkLimits(ird, ord, private)
	if err != nil {
		return err
	}
	if qp == nil || qp.a != a {
		return errorf(StatusInvalidParameter, "QP of another adapter")
	}
	if !dest.IsValid() || dest.Addr().IsUnspecified() {
		return errorf(StatusInvalidAddress, "destination %v", dest)
	}
	if r, ok := a.link.(link.PeerResolver); ok {
		// Learn how to reach the peer first (the AF_XDP link's next hop), so that an
		// unreachable host fails here, with the QP still idle.
		if err := r.ResolvePeer(ctx, dest.Addr()); err != nil {
			return resolveError(err)
		}
	}
	c.mu.Lock()
	if c.qp != nil {
		c.mu.Unlock()
		return errorf(StatusConnectionActive, "connector already used")
	}
	c.qp = qp
	c.mu.Unlock()
	if err := qp.tq.SetReadLimits(ird, ord); err != nil {
		return wrap(StatusConnectionInvalid, err)
	}
	tc, err := a.grp.Connect(qp.tq, netip.AddrPortFrom(dest.Addr(), a.opts.PeerPort), uint64(dest.Port()), private, timeoutOf(ctx, 0))
	if err != nil {
		return connectError(err)
	}
	c.mu.Lock()
	c.tc = tc
	c.mu.Unlock()
	if err := a.await(ctx, func() bool { done, _ := tc.Replied(); return done }); err != nil {
		c.abandon()
		return connectError(deadlineError(err))
	}
	if _, err := tc.Replied(); err != nil {
		// A rejection may carry private data (NdkReject's): GetConnectionData reports it.
		c.private = tc.PeerPrivateData()
		a.logEvent(slog.LevelWarn, "connection refused", "qpn", qp.tq.QPN(), "peer", dest, "err", err)
		return connectError(err)
	}
	// The address the peer sees this connection come from (its GetPeerAddress): the
	// adapter's, whose UDP port the connection's CM messages leave from.
	c.local = a.LocalAddr()
	c.peer = dest
	c.private = tc.PeerPrivateData()
	peerIRD, peerORD := tc.PeerReadLimits()
	c.ird, c.ord = min(ird, peerORD), min(ord, peerIRD)
	return nil
}

// abandon gives up an outgoing attempt that has not completed (Connect's ctx ended, or the
// connector closes): the transport stops it and refuses a late reply, and the QP is idle
// again once this returns (bounded by abandonWait).
func (c *Connector) abandon() {
	c.mu.Lock()
	tc, qp := c.tc, c.qp
	c.mu.Unlock()
	if tc == nil || !tc.Cancel() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), abandonWait)
	defer cancel()
	q := qp.tq
	_ = c.a.await(ctx, func() bool { return q.State() == transport.QPIdle })
}

// abandonWait bounds how long an abandoned attempt waits for the engine to take the QP
// back to idle (a command the engine runs in its next round).
const abandonWait = time.Second

// CompleteConnect finishes an accepted connection (NdkCompleteConnect): the QP is connected
// when it returns. onDisconnect, if not nil, is called once when the peer disconnects or
// the connection aborts (it runs on the adapter's event goroutine).
func (c *Connector) CompleteConnect(ctx context.Context, onDisconnect func()) error {
	if c.tc == nil {
		return errorf(StatusConnectionInvalid, "not connecting")
	}
	c.onDisconnect = onDisconnect
	c.qp.conn.Store(c)
	if err := c.tc.Complete(); err != nil {
		return connectError(err)
	}
	q := c.qp.tq
	if err := c.a.await(ctx, func() bool { return q.State() != transport.QPConnecting }); err != nil {
		return connectError(err)
	}
	c.a.logEvent(slog.LevelInfo, "connection established", "qpn", q.QPN(), "peer", c.peer, "ird", c.ird, "ord", c.ord)
	return nil
}

// Accept accepts a connection request with qp (NdkAccept). It returns when the peer has
// completed the connection (its CompleteConnect), waiting for as long as ctx allows: until
// its deadline, or Options.ConnectTimeout when it has none. Errors: STATUS_IO_TIMEOUT (the
// peer did not complete in time), STATUS_CONNECTION_ABORTED (the peer went away or
// refused), STATUS_CONNECTION_INVALID (qp not idle, or the request already answered),
// STATUS_CANCELLED (ctx was cancelled).
func (c *Connector) Accept(ctx context.Context, qp *QP, ird, ord int, private []byte, onDisconnect func()) error {
	if c.req == nil {
		return errorf(StatusConnectionInvalid, "not an incoming connection")
	}
	ird, ord, err := checkLimits(ird, ord, private)
	if err != nil {
		return err
	}
	if qp == nil || qp.a != c.a {
		return errorf(StatusInvalidParameter, "QP of another adapter")
	}
	if err := qp.tq.SetReadLimits(ird, ord); err != nil {
		return wrap(StatusConnectionInvalid, err)
	}
	c.mu.Lock()
	c.qp, c.onDisconnect = qp, onDisconnect
	c.mu.Unlock()
	qp.conn.Store(c)
	c.answered.Store(true)
	c.ird, c.ord = min(ird, c.req.ORD), min(ord, c.req.IRD)
	// The QP moves to the engine the request arrived at (one on an SRQ stays on the SRQ's
	// engine, which takes the request over): its CQs hear from that engine from now on.
	at := c.req.Engine().Index()
	if qp.cfg.SRQ != nil {
		at = qp.tq.Engine().Index()
	}
	if err := c.a.feedCQs(&qp.cfg, at); err != nil {
		return err
	}
	if err := c.req.Accept(qp.tq, private, timeoutOf(ctx, 0)); err != nil {
		return connectError(err)
	}
	req := c.req
	established := func() bool { done, _ := req.Established(); return done }
	if err := c.a.await(ctx, established); err != nil {
		// The caller stops waiting: the engine must stop too, or the requester's first
		// packet would still establish a connection reported as failed here.
		err = deadlineError(err)
		if errors.Is(err, context.Canceled) {
			err = fmt.Errorf("%w: %w", transport.ErrConnectCancelled, err)
		}
		req.Cancel(err)
		actx, cancel := context.WithTimeout(context.Background(), abandonWait)
		_ = c.a.await(actx, established)
		cancel()
		if done, werr := req.Established(); !done || werr != nil {
			return connectError(err)
		}
		// Established before the cancel ran: the connection exists.
	}
	if _, err := req.Established(); err != nil {
		c.a.logEvent(slog.LevelWarn, "accepted connection failed", "qpn", qp.tq.QPN(), "peer", req.Peer, "err", err)
		if errors.Is(err, transport.ErrConnectTimeout) {
			return wrap(StatusIOTimeout, err)
		}
		return wrap(StatusConnectionAborted, err)
	}
	c.a.logEvent(slog.LevelInfo, "connection established", "qpn", qp.tq.QPN(), "peer", req.Peer, "ird", c.ird, "ord", c.ord, "accepted", true)
	return nil
}

// Reject refuses the connection (NdkReject): an incoming request, or, on the active side,
// the peer's acceptance after Connect returned. The peer's Connect or CompleteConnect fails
// with STATUS_CONNECTION_REFUSED.
func (c *Connector) Reject(private []byte) error {
	if len(private) > transport.MaxPrivateData {
		return errorf(StatusInvalidBufferSize, "%d bytes of private data", len(private))
	}
	switch {
	case c.req != nil:
		c.answered.Store(true)
		return connectError(c.req.Reject(private))
	case c.tc != nil:
		return connectError(c.tc.Reject(private))
	}
	return errorf(StatusConnectionInvalid, "nothing to reject")
}

// GetConnectionData copies the peer's private data into buf (NdkGetConnectionData) and
// returns the effective read limits (inbound, outbound) and the private data's size. If
// buf is shorter than the size it copies what fits and returns STATUS_BUFFER_TOO_SMALL;
// a nil buf just asks for the size. Valid on an incoming connection and after Connect.
func (c *Connector) GetConnectionData(buf []byte) (ird, ord, size int, err error) {
	switch {
	case c.req != nil:
		ird, ord = min(maxReadLimit, c.req.ORD), min(maxReadLimit, c.req.IRD)
		if c.answered.Load() {
			ird, ord = c.ird, c.ord
		}
	case c.tc != nil:
		ird, ord = c.ird, c.ord
	default:
		return 0, 0, 0, errorf(StatusConnectionInvalid, "no connection data yet")
	}
	size = len(c.private)
	copy(buf, c.private)
	if buf != nil && len(buf) < size {
		return ird, ord, size, errorf(StatusBufferTooSmall, "%d bytes of private data, buffer %d", size, len(buf))
	}
	return ird, ord, size, nil
}

// LocalAddr returns the connection's local address (NdkGetLocalAddress).
func (c *Connector) LocalAddr() netip.AddrPort { return c.local }

// PeerAddr returns the peer's address (NdkGetPeerAddress).
func (c *Connector) PeerAddr() netip.AddrPort { return c.peer }

// Disconnect disconnects gracefully (NdkDisconnect): outstanding requests complete
// STATUS_CANCELLED (the implicit flush), the peer is told, and it returns when the peer
// acknowledged (nil) or STATUS_IO_TIMEOUT. The connection cannot be used again.
func (c *Connector) Disconnect(ctx context.Context) error {
	if c.qp == nil {
		return errorf(StatusConnectionInvalid, "not connected")
	}
	c.localDisc.Store(true)
	err := awaitDisc(ctx, c.a, c.qp.tq.StartDisconnect(timeoutOf(ctx, 0)))
	c.a.logEvent(slog.LevelInfo, "connection closed", "qpn", c.qp.tq.QPN(), "peer", c.qp.tq.Peer(), "err", err)
	return connectError(err)
}

func awaitDisc(ctx context.Context, a *Adapter, d *transport.Disconnecting) error {
	if err := a.await(ctx, func() bool { done, _ := d.Done(); return done }); err != nil {
		return err
	}
	_, err := d.Done()
	return err
}

// disconnected delivers the disconnect event once, unless this side disconnected first:
// the callback, and the connection event of the QP's CQs (CQ.Wait, CQ.Poll).
func (c *Connector) disconnected() {
	if c.localDisc.Load() || c.discFired.Swap(true) {
		return
	}
	if q := c.qp; q != nil {
		st := StatusConnectionAborted
		if q.tq.State() == transport.QPDisconnected {
			st = StatusRemoteDisconnect
		}
		cause := q.tq.Cause()
		q.cfg.ReceiveCQ.connectionEnded(q, st, cause)
		if q.cfg.InitiatorCQ != q.cfg.ReceiveCQ {
			q.cfg.InitiatorCQ.connectionEnded(q, st, cause)
		}
	}
	if fn := c.onDisconnect; fn != nil {
		c.a.event(fn)
	}
}

// Close closes the connector (NdkCloseObject): an unanswered incoming request is
// rejected; an outgoing attempt not completed is abandoned (a reply is refused); a
// connected QP is disconnected (ctx bounds the wait).
func (c *Connector) Close(ctx context.Context) error {
	if c.req != nil && !c.answered.Load() {
		_ = c.Reject(nil)
		return nil
	}
	c.abandon()
	if c.qp != nil {
		switch c.qp.tq.State() {
		case transport.QPConnected, transport.QPError:
			_ = c.Disconnect(ctx)
		}
	}
	return nil
}

// Listener accepts incoming connections on a port (NDK_LISTENER). Safe for concurrent use.
type Listener struct {
	a       *Adapter
	onConn  func(*Connector)
	tl      *transport.Listener
	addr    netip.AddrPort
	paused  atomic.Bool
	closed  atomic.Bool
	done    chan struct{} // closed by Close
	stopped chan struct{} // closed when serve returns
}

// NewListener creates a listener (NdkCreateListener). onConnect is called, on the adapter's
// event goroutine, with a new Connector for every incoming request; the callee answers it
// with Accept or Reject (now or later).
func (a *Adapter) NewListener(onConnect func(*Connector)) (*Listener, error) {
	if err := a.checkOpen(); err != nil {
		return nil, err
	}
	if onConnect == nil {
		return nil, errorf(StatusInvalidParameter, "nil connect callback")
	}
	return &Listener{a: a, onConn: onConnect, done: make(chan struct{}), stopped: make(chan struct{})}, nil
}

// Listen starts listening on addr (NdkListen): its address must be the adapter's or
// unspecified, its port the service (0 picks one). Errors: STATUS_INVALID_ADDRESS,
// STATUS_ADDRESS_ALREADY_EXISTS (the port has a listener).
func (l *Listener) Listen(addr netip.AddrPort) error {
	a := l.a
	if err := a.checkOpen(); err != nil {
		return err
	}
	ip := addr.Addr()
	if ip.IsValid() && !ip.IsUnspecified() && ip != a.LocalAddr().Addr() {
		return errorf(StatusInvalidAddress, "%v is not the adapter's address", ip)
	}
	if l.tl != nil {
		return errorf(StatusInvalidDeviceState, "already listening")
	}
	port := addr.Port()
	var tl *transport.Listener
	var err error
	for tries := 0; ; tries++ {
		p := port
		if p == 0 {
			p = a.ephemeralPort()
		}
		tl, err = a.grp.Listen(uint64(p), 64)
		if err == nil {
			port = p
			break
		}
		if port != 0 || tries > 16384 {
			if port == 0 {
				return wrap(StatusTooManyAddresses, err)
			}
			return wrap(StatusAddressAlreadyExists, err)
		}
	}
	l.tl = tl
	l.addr = netip.AddrPortFrom(a.LocalAddr().Addr(), port)
	go l.serve()
	return nil
}

// serve turns requests into connect events. Paused, it rejects them as if nobody listened.
func (l *Listener) serve() {
	defer close(l.stopped)
	for {
		select {
		case req := <-l.tl.Requests():
			if l.paused.Load() || l.closed.Load() {
				_ = req.Reject(nil)
				continue
			}
			c := &Connector{a: l.a, req: req, peer: req.Peer,
				local: l.addr, private: req.PrivateData}
			l.a.event(func() { l.onConn(c) })
		case <-l.a.stopEv:
			return
		case <-l.done:
			return
		}
	}
}

// Pause stops (true) or resumes (false) connect events (NdkControlConnectEvents). While
// paused, incoming requests are refused as if no listener existed.
func (l *Listener) Pause(pause bool) { l.paused.Store(pause) }

// LocalAddr returns the address the listener listens on (NdkGetListenerLocalAddress).
func (l *Listener) LocalAddr() netip.AddrPort { return l.addr }

// Close stops listening: new requests are refused at once (NDKPI Listeners, Connectors, and
// Endpoints); connectors already handed out stay usable.
func (l *Listener) Close(ctx context.Context) error {
	if l.closed.Swap(true) {
		return nil
	}
	close(l.done)
	if l.tl != nil {
		l.tl.Close()
		<-l.stopped
	}
	return nil
}
