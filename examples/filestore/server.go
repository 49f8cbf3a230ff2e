package main

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/xdpndk/xdpndk/ndk"
)

const (
	// defaultPort is the listener's port (NDK's port, multiplexed on the adapter's one UDP
	// port, xdp.DefaultPort) when -addr or SERVER gives none.
	defaultPort = 4810
	// readsInFlight is how many Reads a client may have outstanding at the server (the
	// inbound read limit the server accepts with) and how many chunks a client keeps in
	// flight, Writes or Reads.
	readsInFlight = 8
	// acceptTimeout bounds Accept: the client's CompleteConnect must come within it.
	acceptTimeout = 10 * time.Second
	// closeTimeout bounds each wait of a connection's cleanup and of the server's stop.
	closeTimeout = 2 * time.Second
	// sessionDepth is a server QP's initiator queue: a reply Send, a Bind and an
	// Invalidate are the most it has outstanding, with room to spare.
	sessionDepth = 8
)

// verb is the request context of the control verbs, client's and server's: what
// completed. (A small integer in an interface costs no allocation.)
type verb uint8

const (
	verbReceive    verb = iota + 1 // a control message arrived
	verbSend                       // a control message left (request or reply)
	verbBind                       // a window was bound
	verbInvalidate                 // a window was invalidated
)

// String names the verb.
func (v verb) String() string {
	switch v {
	case verbReceive:
		return "Receive"
	case verbSend:
		return "Send"
	case verbBind:
		return "Bind"
	case verbInvalidate:
		return "Invalidate"
	}
	return fmt.Sprintf("verb %d", uint8(v))
}

// serverConfig is what a server is given.
type serverConfig struct {
	listen    netip.AddrPort // the listener's address (the adapter's, or unspecified) and port
	storeSize int            // bytes of the store region
	maxConns  int            // connections at once; more are rejected
	maxFiles  int            // extents at once (files, and PUTs in progress)
}

// server is `filestore serve`: one adapter, one PD, the store (one registered region), a
// listener, and a goroutine per connection.
type server struct {
	a     *ndk.Adapter
	pd    *ndk.PD
	cfg   serverConfig
	log   *slog.Logger
	mem   *region // the store's memory, registered for local access only: peers reach it through windows
	store *store
	ln    *ndk.Listener

	mu       sync.Mutex
	ctx      context.Context // the connections' context (start's)
	stopping bool
	sessions int
	wg       sync.WaitGroup // the connections' goroutines
}

// newServer creates the PD and the store region on a.
func newServer(a *ndk.Adapter, cfg serverConfig, log *slog.Logger) (*server, error) {
	pd, err := a.NewPD()
	if err != nil {
		return nil, fmt.Errorf("create PD: %w", err)
	}
	// The region's own token grants no remote access (MRAllowLocalWrite only): a client
	// reaches the store only through a window bound over one file, for one transfer.
	mem, err := newRegion(a, pd, cfg.storeSize, ndk.MRAllowLocalWrite)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return &server{a: a, pd: pd, cfg: cfg, log: log, mem: mem, store: newStore(mem.buf, cfg.maxFiles)}, nil
}

// start listens; connections are served until ctx ends.
func (s *server) start(ctx context.Context) error {
	s.mu.Lock()
	s.ctx = ctx
	s.mu.Unlock()
	ln, err := s.a.NewListener(s.onConnect)
	if err != nil {
		return fmt.Errorf("create listener: %w", err)
	}
	if err := ln.Listen(s.cfg.listen); err != nil {
		return fmt.Errorf("listen on %v: %w", s.cfg.listen, err)
	}
	s.ln = ln
	return nil
}

// stop, once start's ctx has ended, refuses new connections, waits for every connection
// to clean up (each saw ctx end in its CQ.Wait) and frees the store region. The caller then
// closes the adapter.
func (s *server) stop() {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if s.ln != nil {
		_ = s.ln.Close(ctx)
	}
	s.wg.Wait()
	if err := s.mem.close(ctx); err != nil {
		s.log.Warn("store region", "err", err)
	}
}

// onConnect is the listener's callback, on the adapter's event goroutine: it must not
// block, so it only decides, and serves an accepted connection on a goroutine of its own.
func (s *server) onConnect(c *ndk.Connector) {
	s.mu.Lock()
	reason := ""
	switch {
	case s.stopping:
		reason = "the server is stopping"
	case s.sessions >= s.cfg.maxConns:
		reason = fmt.Sprintf("the server has its most clients (%d)", s.cfg.maxConns)
	}
	if reason != "" {
		s.mu.Unlock()
		s.log.Warn("refused", "peer", c.PeerAddr(), "reason", reason)
		_ = c.Reject([]byte(reason)) // the client's Connect fails STATUS_CONNECTION_REFUSED, with this as private data
		return
	}
	s.sessions++
	s.wg.Add(1)
	ctx := s.ctx
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		s.serveConn(ctx, c)
		s.mu.Lock()
		s.sessions--
		s.mu.Unlock()
	}()
}

// serveConn sets a connection up, accepts it, serves it until it ends (the client
// disconnects, the connection fails, or ctx ends) and cleans it up.
func (s *server) serveConn(ctx context.Context, c *ndk.Connector) {
	peer := c.PeerAddr()
	ss, err := s.newSession(c)
	if err != nil {
		s.log.Warn("refused", "peer", peer, "err", err)
		_ = c.Reject([]byte("server error"))
		ss.close()
		return
	}
	defer ss.close()
	actx, cancel := context.WithTimeout(ctx, acceptTimeout)
	err = c.Accept(actx, ss.qp, readsInFlight, 0, nil, nil)
	cancel()
	if err != nil {
		s.log.Warn("accept failed", "peer", peer, "err", err)
		return
	}
	s.log.Info("connected", "peer", peer)
	err = ss.serve(ctx)
	var ended *ndk.ConnectionEnded
	switch {
	case errors.As(err, &ended) && ended.Status == ndk.StatusRemoteDisconnect:
		s.log.Info("disconnected", "peer", peer)
	case errors.As(err, &ended):
		s.log.Warn("connection aborted", "peer", peer, "err", err)
	case ctx.Err() != nil:
		s.log.Info("closing: the server stops", "peer", peer)
	default:
		s.log.Warn("closing", "peer", peer, "err", err)
	}
}

// session is one connection: its QP and CQ, its control buffers, the window it binds for
// its transfers, and the transfer in progress.
type session struct {
	s    *server
	c    *ndk.Connector
	peer netip.AddrPort
	cq   *ndk.CQ
	qp   *ndk.QP
	ctl  *region // [0, msgSize): the receive buffer; [msgSize, 2*msgSize): the reply
	mw   *ndk.MW

	xfer    *transfer // the PUT or GET in progress: one at a time
	sending bool      // a reply Send is outstanding: its buffer is in use
	queued  *message  // the reply waiting for that Send to complete
	res     [8]ndk.Result
}

// transfer is a PUT (from its reply to its COMMIT) or a GET (from its reply to DONE).
type transfer struct {
	typ   msgType // typePut or typeGet
	name  string
	ext   *extent // PUT: the space reserved; GET: the file, with a reference held
	bound bool    // the session's window is bound over ext
	start time.Time
}

// newSession creates a connection's CQ, QP, control buffers and window, and posts the
// receive for its first request (receives may be posted before the QP connects). On
// failure it returns what it made, for close.
func (s *server) newSession(c *ndk.Connector) (*session, error) {
	ss := &session{s: s, c: c, peer: c.PeerAddr()}
	var err error
	if ss.cq, err = s.a.NewCQ(2*sessionDepth, nil); err != nil {
		return ss, fmt.Errorf("create CQ: %w", err)
	}
	qc := ndk.QPConfig{ReceiveCQ: ss.cq, InitiatorCQ: ss.cq, ReceiveQueueDepth: 1, InitiatorQueueDepth: sessionDepth}
	if ss.qp, err = s.pd.NewQP(qc); err != nil {
		return ss, fmt.Errorf("create QP: %w", err)
	}
	if ss.ctl, err = newRegion(s.a, s.pd, 2*msgSize, ndk.MRAllowLocalWrite); err != nil {
		return ss, fmt.Errorf("control buffers: %w", err)
	}
	if ss.mw, err = s.pd.NewMW(); err != nil {
		return ss, fmt.Errorf("create window: %w", err)
	}
	if err := ss.postReceive(); err != nil {
		return ss, err
	}
	return ss, nil
}

func (ss *session) postReceive() error {
	if err := ss.qp.Receive(verbReceive, []ndk.SGE{ss.ctl.sge(0, msgSize)}); err != nil {
		return fmt.Errorf("post receive: %w", err)
	}
	return nil
}

// close releases the connection: the client is told (Connector.Close disconnects a
// connection still up), the QP's outstanding requests complete and release their memory
// (QP.Close), the window is invalidated (MW.Close) before the space it opened is released,
// and the control buffers and CQ go.
func (ss *session) close() {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = ss.c.Close(ctx)
	if ss.qp != nil {
		_ = ss.qp.Close(ctx)
	}
	if ss.mw != nil {
		_ = ss.mw.Close(ctx)
	}
	if x := ss.xfer; x != nil {
		ss.s.store.release(x.ext) // an unfinished PUT's space, or a GET's reference
		ss.s.log.Warn("transfer abandoned", "peer", ss.peer, "op", x.typ, "name", x.name)
		ss.xfer = nil
	}
	if ss.ctl != nil {
		if err := ss.ctl.close(ctx); err != nil {
			ss.s.log.Warn("control buffers", "peer", ss.peer, "err", err)
		}
	}
	if ss.cq != nil {
		_ = ss.cq.Close(ctx)
	}
}

// serve takes the connection's completions with CQ.Wait until the connection ends: the
// client's disconnect is Wait's *ndk.ConnectionEnded, the server's stop is ctx's end.
func (ss *session) serve(ctx context.Context) error {
	for {
		n, err := ss.cq.Wait(ctx, ss.res[:])
		if err != nil {
			return err
		}
		for _, r := range ss.res[:n] {
			if err := ss.completed(r); err != nil {
				return err
			}
		}
	}
}

// completed handles one completion. A failed one ends the connection: on a reliable
// connection a verb fails only when the connection does.
func (ss *session) completed(r ndk.Result) error {
	v, _ := r.RequestContext.(verb)
	if r.Status != ndk.StatusSuccess {
		return fmt.Errorf("%v completed with %w", v, r.Status)
	}
	switch v {
	case verbReceive:
		if r.BytesTransferred > msgSize { // the receive holds msgSize: a longer Send fails it
			return fmt.Errorf("a receive of %d bytes into %d", r.BytesTransferred, msgSize)
		}
		return ss.received(ss.ctl.buf[:r.BytesTransferred])
	case verbSend:
		ss.sending = false
		if q := ss.queued; q != nil {
			ss.queued = nil
			return ss.reply(*q)
		}
	}
	// Bind and Invalidate took effect when they were posted: their completions only
	// confirm it.
	return nil
}

// received handles a request: it parses it (a copy: the buffer is reposted at once) and
// answers it.
func (ss *session) received(b []byte) error {
	m, perr := parseMessage(b)
	rt, isRequest := requestType(b)
	if err := ss.postReceive(); err != nil {
		return err
	}
	if perr != nil {
		if !isRequest {
			return fmt.Errorf("the client sent what is not a request: %w", perr)
		}
		ss.s.log.Warn("malformed request", "peer", ss.peer, "err", perr)
		return ss.reply(message{typ: rt | typeReply, code: codeBadRequest})
	}
	var rep message
	var err error
	switch m.typ {
	case typePut:
		rep = ss.put(m)
	case typeCommit:
		rep, err = ss.commit(m)
	case typeGet:
		rep = ss.get(m)
	case typeDone:
		rep, err = ss.done(m)
	default:
		return fmt.Errorf("the client sent a %v", m.typ)
	}
	if err != nil {
		return err
	}
	return ss.reply(rep)
}

// requestType returns the type of what claims to be a filestore request (its magic,
// version and type byte), so that a malformed one can be answered.
func requestType(b []byte) (msgType, bool) {
	if len(b) < offType+1 || b[offMagic] != magic[0] || b[offMagic+1] != magic[1] || b[offVersion] != msgVersion {
		return 0, false
	}
	switch t := msgType(b[offType]); t {
	case typePut, typeCommit, typeGet, typeDone:
		return t, true
	}
	return 0, false
}

// reply sends m, or queues it while the previous reply's Send is outstanding (its buffer
// is in use until it completes). A well-behaved client has one request outstanding, so at
// most one reply waits.
func (ss *session) reply(m message) error {
	if ss.sending {
		if ss.queued != nil {
			return errors.New("the client sent a request before it took the reply to its previous one")
		}
		ss.queued = &m
		return nil
	}
	if _, err := m.encode(ss.ctl.buf[msgSize:]); err != nil {
		return fmt.Errorf("encode %v: %w", m.typ, err)
	}
	if err := ss.qp.Send(verbSend, []ndk.SGE{ss.ctl.sge(msgSize, msgSize)}, 0); err != nil {
		return fmt.Errorf("post reply: %w", err)
	}
	ss.sending = true
	return nil
}

// put reserves the file's space and binds the window over it for remote write.
func (ss *session) put(m message) message {
	rep := message{typ: typePut | typeReply}
	if ss.xfer != nil {
		rep.code = codeBadState
		return rep
	}
	e, err := ss.s.store.reserve(m.size)
	switch {
	case errors.Is(err, errTooLarge):
		rep.code = codeTooLarge
	case errors.Is(err, errNoSpace):
		rep.code = codeNoSpace
	case errors.Is(err, errTooMany):
		rep.code = codeTooMany
	}
	if err != nil {
		ss.s.log.Warn("PUT refused", "peer", ss.peer, "name", m.name, "size", m.size, "err", err)
		return rep
	}
	x := &transfer{typ: typePut, name: m.name, ext: e, start: time.Now()}
	if m.size > 0 { // an empty file has no bytes to open a window over
		if err := ss.bind(x, ndk.OpAllowRemoteWrite); err != nil {
			ss.s.store.release(e)
			ss.s.log.Warn("PUT: bind failed", "peer", ss.peer, "name", m.name, "err", err)
			rep.code = codeServer
			return rep
		}
		rep.buf = ss.mw.Remote() // the window's address, length and token: valid since Bind returned
	}
	ss.xfer = x
	rep.size = m.size
	return rep
}

// commit closes a PUT: the client's Writes are in the store (its COMMIT Send was posted
// after them on the same QP, so its receive completes only after their data has landed).
// The window is invalidated first, so no Write can change the bytes afterwards; then the
// CRC is checked, and the file stored or the space released.
func (ss *session) commit(m message) (message, error) {
	rep := message{typ: typeCommit | typeReply}
	x := ss.xfer
	if x == nil || x.typ != typePut || x.name != m.name || x.ext.size != m.size {
		rep.code = codeBadState
		return rep, nil
	}
	if err := ss.unbind(x); err != nil {
		return rep, err
	}
	ss.xfer = nil
	crc := crc32.ChecksumIEEE(ss.s.store.bytes(x.ext))
	if crc != m.crc {
		ss.s.store.release(x.ext)
		ss.s.log.Warn("PUT: CRC mismatch, nothing stored", "peer", ss.peer, "name", m.name,
			"client", fmt.Sprintf("%08x", m.crc), "received", fmt.Sprintf("%08x", crc))
		rep.code = codeBadCRC
		return rep, nil
	}
	ss.s.store.commit(m.name, x.ext, crc)
	ss.s.log.Info("stored", "peer", ss.peer, "name", m.name, "size", m.size,
		"crc32", fmt.Sprintf("%08x", crc), "took", time.Since(x.start).Round(time.Microsecond))
	return rep, nil
}

// get binds the window over the file for remote read and answers with it, the size and
// the CRC.
func (ss *session) get(m message) message {
	rep := message{typ: typeGet | typeReply}
	if ss.xfer != nil {
		rep.code = codeBadState
		return rep
	}
	e, ok := ss.s.store.open(m.name)
	if !ok {
		ss.s.log.Info("GET: no such file", "peer", ss.peer, "name", m.name)
		rep.code = codeNotFound
		return rep
	}
	x := &transfer{typ: typeGet, name: m.name, ext: e, start: time.Now()}
	if e.size > 0 {
		if err := ss.bind(x, ndk.OpAllowRemoteRead); err != nil {
			ss.s.store.release(e)
			ss.s.log.Warn("GET: bind failed", "peer", ss.peer, "name", m.name, "err", err)
			rep.code = codeServer
			return rep
		}
		rep.buf = ss.mw.Remote()
	}
	ss.xfer = x
	rep.size, rep.crc = e.size, e.crc
	return rep
}

// done closes a GET: the client's Reads are complete; the window is invalidated and the
// file's reference dropped.
func (ss *session) done(m message) (message, error) {
	rep := message{typ: typeDone | typeReply}
	x := ss.xfer
	if x == nil || x.typ != typeGet || x.name != m.name {
		rep.code = codeBadState
		return rep, nil
	}
	if err := ss.unbind(x); err != nil {
		return rep, err
	}
	ss.xfer = nil
	ss.s.store.release(x.ext)
	ss.s.log.Info("sent", "peer", ss.peer, "name", m.name, "size", x.ext.size,
		"took", time.Since(x.start).Round(time.Microsecond))
	return rep, nil
}

// bind binds the session's window over x's extent with the access flags (remote write
// for a PUT, remote read for a GET). The window's token works as soon as Bind returns.
func (ss *session) bind(x *transfer, access ndk.OpFlags) error {
	mr := ss.s.mem.mr
	if err := ss.qp.Bind(verbBind, mr, ss.mw, mr.VA()+x.ext.off, x.ext.size, access); err != nil {
		return err
	}
	x.bound = true
	return nil
}

// unbind invalidates the window over x's extent: no remote access through it succeeds
// once Invalidate returns. A failure means the QP failed: the connection ends.
func (ss *session) unbind(x *transfer) error {
	if !x.bound {
		return nil
	}
	if err := ss.qp.Invalidate(verbInvalidate, ss.mw, 0); err != nil {
		return fmt.Errorf("invalidate the window: %w", err)
	}
	x.bound = false
	return nil
}
