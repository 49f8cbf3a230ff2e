//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/xdpndk/xdpndk/cmd/ndkpeer/internal/proto"
	"github.com/xdpndk/xdpndk/ndk"
)

// serveLimits bound what one server gives its clients.
type serveLimits struct {
	maxSize     int64         // largest message (and test buffer) of one connection
	maxConns    int           // connections at once
	maxMem      int64         // test buffers of all connections together
	idleTimeout time.Duration // a connection whose peer sent nothing this long is closed
}

const serveUsage = "-i IFACE [--port N] [--stats[=INTERVAL]] [options]"

func serveCmd(args []string) int {
	fs := newFlagSet("serve", serveUsage, os.Stderr)
	var af adapterFlags
	af.define(fs, "inline")
	stats := optDuration{def: 10 * time.Second}
	fs.Var(&stats, "stats", "print the server's counters every `INTERVAL` (--stats alone: every 10s)")
	maxSize := sizeFlag{16 << 20}
	fs.Var(&maxSize, "max-size", "largest message a client may ask for (`SIZE`)")
	maxMem := sizeFlag{512 << 20}
	fs.Var(&maxMem, "max-mem", "memory for the test buffers of all connections together (`SIZE`)")
	heap := sizeFlag{64 << 20}
	fs.Var(&heap, "heap", "UMEM heap for test buffers (`SIZE`); beyond it they come from pinned Go memory")
	maxConns := fs.Int("max-conns", 64, "most connections (QPs) at once")
	idle := fs.Duration("idle-timeout", 2*time.Minute, "close a connection whose peer sent nothing this `DURATION`")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) > 0 {
		fmt.Fprintf(os.Stderr, "ndkpeer serve: unexpected argument %q\n", pos[0])
		return exitUsage
	}
	cfg, err := af.config()
	if err == nil {
		switch {
		case maxSize.n < 1 || maxSize.n > proto.MaxSize:
			err = fmt.Errorf("--max-size %s: not in [1, %s]", maxSize.String(), formatSize(proto.MaxSize))
		case *maxConns < 1 || *maxConns > 1024:
			err = fmt.Errorf("--max-conns %d: not in [1, 1024]", *maxConns)
		case maxMem.n < maxSize.n:
			err = fmt.Errorf("--max-mem %s is below --max-size %s", maxMem.String(), maxSize.String())
		case heap.n < 0 || heap.n > 16<<30:
			err = fmt.Errorf("--heap %s: not in [0, 16G]", heap.String())
		case *idle <= 0:
			err = fmt.Errorf("--idle-timeout %v: must be positive", *idle)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "ndkpeer serve: %v\n", err)
		return exitUsage
	}
	cfg.heap = int(heap.n)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	lim := serveLimits{maxSize: maxSize.n, maxConns: *maxConns, maxMem: maxMem.n, idleTimeout: *idle}
	return report("serve", serve(ctx, cfg, lim, stats.d, os.Stdout), false)
}

// server is ndkpeer serve: one adapter, one listener, and a polling loop that serves every
// connection.
type server struct {
	n       *node
	lim     serveLimits
	pd      *ndk.PD
	ln      *ndk.Listener
	out     io.Writer
	outMu   sync.Mutex
	started time.Time

	wake     chan struct{} // a CQ notification (adaptive progress) or a new connection
	loopMu   sync.Mutex    // guards incoming against the loop's exit
	running  bool          // the loop takes connections from incoming
	incoming chan *conn

	connMu sync.Mutex
	live   map[*conn]struct{} // connections accepted and not yet closed (for stats)

	conns    atomic.Int32 // connections being accepted or served
	memUsed  atomic.Int64
	stopping atomic.Bool
	nextID   atomic.Uint64
	work     sync.WaitGroup // accept and close goroutines

	ctr serverCounters
}

// serverCounters are the server's totals (the stats).
type serverCounters struct {
	accepted, rejected, closed, failed atomic.Uint64
	byKind                             [proto.KindTour + 1]atomic.Uint64
	// totals of closed connections' QPs (live ones are added when stats are taken)
	txBytes, rxBytes, txPackets, rxPackets, retransmits, timeouts atomic.Uint64
}

// conn is one accepted connection.
type conn struct {
	s     *server
	id    uint64
	c     *ndk.Connector
	req   proto.Request
	peer  netip.AddrPort
	since time.Time

	cq       *ndk.CQ
	qp       *ndk.QP
	buf      []byte
	fromUMEM bool
	mr       *ndk.MR
	mw       *ndk.MW // tour: the window it bound
	recvSGE  [1]ndk.SGE
	gone     atomic.Bool // the peer disconnected or the connection aborted (callback)

	// owned by the loop
	failure  string // why the loop gives the connection up ("" while fine)
	lastRx   uint64 // the QP's RxPackets at the last idle check
	lastRxAt time.Time
	tourSent int
}

// Request contexts of the server's verbs (small integers box without allocating).
const (
	ctxRecv = 1
	ctxSend = 2
	ctxBind = 3
)

// serve runs the server until ctx ends, then disconnects every connection, closes the
// adapter and returns nil.
func serve(ctx context.Context, cfg adapterConfig, lim serveLimits, statsEvery time.Duration, out io.Writer) error {
	n, err := openNode(cfg)
	if err != nil {
		return err
	}
	defer n.close()
	s := &server{n: n, lim: lim, out: out, started: time.Now(), wake: make(chan struct{}, 1),
		incoming: make(chan *conn, lim.maxConns+1), live: map[*conn]struct{}{}, running: true}
	if s.pd, err = n.a.NewPD(); err != nil {
		return fmt.Errorf("create PD: %w", err)
	}
	stopStats, err := s.serveStats()
	if err != nil {
		return err
	}
	defer stopStats()
	if s.ln, err = n.a.NewListener(s.onConnect); err != nil {
		return fmt.Errorf("create listener: %w", err)
	}
	if err := s.ln.Listen(netip.AddrPortFrom(netip.Addr{}, cfg.service)); err != nil {
		return fmt.Errorf("listen on service %d: %w", cfg.service, err)
	}
	s.printf("ndkpeer serve: listening on %v, UDP port %d, NDK service %d (interface %s); Ctrl-C stops\n",
		n.a.LocalAddr().Addr(), cfg.port, cfg.service, cfg.iface)
	s.printf("  mode: %s; UMEM pages %s\n", modeLine(n.mode), n.pages)
	for _, note := range n.notes {
		s.printf("  note: %s\n", note)
	}
	s.printf("  limits: messages up to %s, %d connections, %s of test buffers; counters: ndkpeer stats -i %s --port %d\n",
		humanBytes(uint64(lim.maxSize)), lim.maxConns, humanBytes(uint64(lim.maxMem)), cfg.iface, cfg.port)

	if statsEvery > 0 {
		t := time.NewTicker(statsEvery)
		defer t.Stop()
		go func() {
			for {
				select {
				case <-t.C:
					s.printf("%s\n", s.snapshot().line())
				case <-ctx.Done():
					return
				}
			}
		}()
	}

	loopDone := make(chan []*conn, 1)
	go s.loop(ctx, loopDone)
	left := <-loopDone

	// Shut down: refuse new connections, disconnect every one (in parallel, bounded).
	s.stopping.Store(true)
	lctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = s.ln.Close(lctx)
	cancel()
	s.loopMu.Lock()
	s.running = false
	for more := true; more; {
		select {
		case c := <-s.incoming:
			left = append(left, c)
		default:
			more = false
		}
	}
	s.loopMu.Unlock()
	for _, c := range left {
		s.work.Add(1)
		go func() { defer s.work.Done(); s.closeConn(c, "server stopping") }()
	}
	s.work.Wait()
	snap := s.snapshot()
	s.printf("ndkpeer serve: stopped after %v: %d connections served, %d refused; adapter closed\n",
		time.Since(s.started).Round(time.Millisecond), snap.Connections.Accepted, snap.Connections.Rejected)
	return nil
}

func (s *server) printf(format string, args ...any) {
	s.outMu.Lock()
	fmt.Fprintf(s.out, format, args...)
	s.outMu.Unlock()
}

// onConnect is the listener's callback (the adapter's event goroutine): it checks the
// request and either rejects it at once or accepts it on a goroutine of its own.
func (s *server) onConnect(c *ndk.Connector) {
	reject := func(code proto.RefuseCode, format string, args ...any) {
		s.ctr.rejected.Add(1)
		reason := fmt.Sprintf(format, args...)
		_ = c.Reject(proto.Refusal{Code: code, Reason: reason}.Append(nil))
		s.printf("refused %v: %s\n", c.PeerAddr(), reason)
	}
	if s.stopping.Load() {
		reject(proto.RefuseStopping, "the server is stopping")
		return
	}
	var pd [proto.MaxPrivateData]byte
	_, _, size, err := c.GetConnectionData(pd[:])
	if err != nil {
		reject(proto.RefuseBadRequest, "no connection data: %v", err)
		return
	}
	req, err := proto.ParseRequest(pd[:min(size, len(pd))])
	if err != nil {
		code := proto.RefuseBadRequest
		if isVersionError(err) {
			code = proto.RefuseVersion
		}
		reject(code, "%v", err)
		return
	}
	if int64(req.MaxSize) > s.lim.maxSize {
		reject(proto.RefuseLimit, "size %s over the server's limit %s (ndkpeer serve --max-size)", humanBytes(uint64(req.MaxSize)), humanBytes(uint64(s.lim.maxSize)))
		return
	}
	if int(s.conns.Add(1)) > s.lim.maxConns {
		s.conns.Add(-1)
		reject(proto.RefuseBusy, "the server has its most connections (%d; ndkpeer serve --max-conns)", s.lim.maxConns)
		return
	}
	size64 := bufferSize(req)
	if s.memUsed.Add(size64) > s.lim.maxMem {
		s.memUsed.Add(-size64)
		s.conns.Add(-1)
		reject(proto.RefuseMemory, "the server's test buffers would exceed %s (ndkpeer serve --max-mem)", humanBytes(uint64(s.lim.maxMem)))
		return
	}
	s.work.Add(1)
	go func() {
		defer s.work.Done()
		s.accept(c, req, size64)
	}()
}

// isVersionError reports a request of another protocol version.
func isVersionError(err error) bool { return errors.Is(err, proto.ErrVersion) }

// Tour layout of a connection's buffer: receive slots, reply slots, the window.
const (
	tourBufSize   = 64 << 10
	tourRecvSlots = 4
	tourReplyOff  = 1024
	tourWindowOff = 8192
	tourMaxWindow = 16 << 10
)

// bufferSize is the test buffer a request needs: its largest message, in whole pages.
func bufferSize(req proto.Request) int64 {
	if req.Kind == proto.KindTour {
		return tourBufSize
	}
	return (int64(req.MaxSize) + 4095) &^ 4095
}

// accept sets a connection up (buffer, CQ, QP, receives) and accepts it with the Reply.
func (s *server) accept(c *ndk.Connector, req proto.Request, size int64) {
	k := &conn{s: s, id: s.nextID.Add(1), c: c, req: req, peer: c.PeerAddr(), since: time.Now()}
	refuse := func(code proto.RefuseCode, what string, err error) {
		s.ctr.rejected.Add(1)
		_ = c.Reject(proto.Refusal{Code: code, Reason: fmt.Sprintf("%s: %v", what, err)}.Append(nil))
		s.printf("refused %v %v: %s: %v\n", k.peer, req.Kind, what, err)
		k.release()
	}
	if err := k.setup(size); err != nil {
		refuse(proto.RefuseMemory, "set up the connection", err)
		return
	}
	reply := proto.Reply{Kind: req.Kind, Server: s.n.mode}
	switch req.Kind {
	case proto.KindWriteLat, proto.KindWriteBW, proto.KindReadLat, proto.KindReadBW:
		reply.BufAddr, reply.BufLen, reply.Token = k.mr.VA(), uint64(len(k.buf)), k.mr.RemoteToken()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := c.Accept(ctx, k.qp, 64, 64, reply.Append(nil), func() { k.gone.Store(true); s.poke() })
	if err != nil {
		s.ctr.failed.Add(1)
		s.printf("accept %v %v failed: %v\n", k.peer, req.Kind, err)
		k.release()
		return
	}
	s.ctr.accepted.Add(1)
	s.ctr.byKind[req.Kind].Add(1)
	where := "UMEM"
	if !k.fromUMEM {
		where = "pinned Go memory"
	}
	s.printf("accepted %v %v (QP %d of %d, messages up to %s, session %08x): buffer %s in %s\n",
		k.peer, req.Kind, req.QPIndex+1, req.QPs, humanBytes(uint64(req.MaxSize)), uint32(req.Session), humanBytes(uint64(len(k.buf))), where)
	s.connMu.Lock()
	s.live[k] = struct{}{}
	s.connMu.Unlock()
	s.loopMu.Lock()
	if s.running {
		s.incoming <- k // never blocks: it holds maxConns+1 and conns bounds them
		s.loopMu.Unlock()
		s.poke()
		return
	}
	s.loopMu.Unlock()
	s.closeConn(k, "server stopping")
}

// poke wakes the loop if it waits.
func (s *server) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// setup allocates the connection's buffer, registers it and creates its CQ and QP with
// the receives its test needs.
func (k *conn) setup(size int64) error {
	s, a, req := k.s, k.s.n.a, k.req
	if b, err := a.Alloc(int(size), 4096); err == nil {
		k.buf, k.fromUMEM = b, true
	} else {
		k.buf = make([]byte, size)
	}
	flags := ndk.MRAllowLocalWrite
	switch req.Kind {
	case proto.KindWriteLat, proto.KindWriteBW, proto.KindReadLat, proto.KindReadBW:
		flags = ndk.MRAllowRemoteRead | ndk.MRAllowRemoteWrite
	}
	var err error
	if k.mr, err = s.pd.RegisterMR(k.buf, flags); err != nil {
		return fmt.Errorf("register %s: %w", humanBytes(uint64(size)), err)
	}
	recvs := int(req.RecvDepth)
	switch req.Kind {
	case proto.KindTour:
		recvs = tourRecvSlots
	case proto.KindSendLat, proto.KindSendBW:
		recvs = max(recvs, 1)
	default:
		recvs = 0
	}
	const initiator = 64
	var notify ndk.NotifyFunc
	if k.s.n.cfg.progress != ndk.ProgressBusy {
		notify = func(ndk.Status) { s.poke() } // the loop sleeps when idle (loop)
	}
	if k.cq, err = a.NewCQ(recvs+initiator+16, notify); err != nil {
		return fmt.Errorf("create CQ: %w", err)
	}
	qc := ndk.QPConfig{ReceiveCQ: k.cq, InitiatorCQ: k.cq, ReceiveQueueDepth: max(recvs, 1),
		InitiatorQueueDepth: initiator, InlineDataSize: int(req.InlineSize)}
	if k.qp, err = s.pd.NewQP(qc); err != nil {
		return fmt.Errorf("create QP: %w", err)
	}
	if req.Kind == proto.KindTour {
		for i := range tourRecvSlots {
			sge := []ndk.SGE{k.mr.SGE(k.buf[i*64 : i*64+proto.TourMsgLen])}
			if err := k.qp.Receive(i, sge); err != nil {
				return fmt.Errorf("post receive: %w", err)
			}
		}
		return nil
	}
	k.recvSGE[0] = k.mr.SGE(k.buf[:req.MaxSize])
	for range recvs {
		if err := k.qp.Receive(ctxRecv, k.recvSGE[:]); err != nil {
			return fmt.Errorf("post receive: %w", err)
		}
	}
	return nil
}

// release frees what setup made and what onConnect reserved, in reverse order.
func (k *conn) release() {
	s := k.s
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if k.qp != nil {
		st := k.qp.Transport().Stats()
		s.ctr.txBytes.Add(st.TxBytes)
		s.ctr.rxBytes.Add(st.RxBytes)
		s.ctr.txPackets.Add(st.TxPackets)
		s.ctr.rxPackets.Add(st.RxPackets)
		s.ctr.retransmits.Add(st.Retransmits)
		s.ctr.timeouts.Add(st.Timeouts)
		_ = k.qp.Close(ctx)
	}
	if k.cq != nil {
		_ = k.cq.Close(ctx)
	}
	if k.mw != nil {
		_ = k.mw.Close(ctx)
	}
	if k.mr != nil {
		_ = k.mr.Deregister(ctx)
	}
	if k.fromUMEM {
		_ = s.n.a.Free(k.buf)
	}
	s.memUsed.Add(-bufferSize(k.req))
	s.conns.Add(-1)
}

// closeConn disconnects a connection the loop gave up (or never took) and releases it.
func (s *server) closeConn(k *conn, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = k.c.Close(ctx) // NdkDisconnect if still connected
	st := k.qp.Transport().Stats()
	s.connMu.Lock()
	delete(s.live, k)
	s.connMu.Unlock()
	k.release()
	s.ctr.closed.Add(1)
	s.printf("closed %v %v after %v (%s): received %s, sent %s, %d retransmissions\n", k.peer, k.req.Kind,
		time.Since(k.since).Round(time.Millisecond), why, humanBytes(st.RxBytes), humanBytes(st.TxBytes), st.Retransmits)
}

// loop serves the connections until ctx ends; it returns those it still holds on done.
// It runs on a thread of its own and takes every connection's completions; with
// ProgressInline that is what runs the engine.
func (s *server) loop(ctx context.Context, done chan<- []*conn) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var conns []*conn
	var res [64]ndk.ResultEx
	idleCheck := time.NewTicker(time.Second)
	defer idleCheck.Stop()
	stop := ctx.Done()
	// When idle the loop sleeps until a CQ notification: after serverSpin with
	// ProgressInline (arming the CQs hands the engine to the adapter's own goroutine, which
	// serves it event-driven), after 50 µs with ProgressAdaptive; never with ProgressBusy.
	spinIdle := time.Duration(-1)
	switch s.n.cfg.progress {
	case ndk.ProgressInline:
		spinIdle = serverSpin
	case ndk.ProgressAdaptive:
		spinIdle = 50 * time.Microsecond
	}
	lastWork := time.Now()
	give := func(i int, why string) []*conn {
		k := conns[i]
		conns = append(conns[:i], conns[i+1:]...)
		s.work.Add(1)
		go func() { defer s.work.Done(); s.closeConn(k, why) }()
		return conns
	}
	for it := 0; ; it++ {
		if len(conns) == 0 {
			select {
			case k := <-s.incoming:
				conns = append(conns, s.take(k))
			case <-s.wake:
				continue
			case <-stop:
				done <- conns
				return
			}
		}
		work := false
		for _, k := range conns {
			n := k.cq.GetResultsEx(res[:])
			for j := range res[:n] {
				s.handle(k, &res[j])
			}
			if n > 0 {
				work = true
			}
		}
		if it&63 != 0 && work {
			continue
		}
		// Housekeeping, every 64 rounds and whenever a round found nothing.
		for more := true; more; {
			select {
			case k := <-s.incoming:
				conns = append(conns, s.take(k))
			case <-stop:
				done <- conns
				return
			case <-idleCheck.C:
				s.idleCheck(conns)
			default:
				more = false
			}
		}
		for i := len(conns) - 1; i >= 0; i-- {
			k := conns[i]
			switch {
			case k.failure != "":
				conns = give(i, k.failure)
			case k.gone.Load():
				conns = give(i, "peer disconnected")
			}
		}
		if work {
			lastWork = time.Now()
			continue
		}
		if spinIdle < 0 || time.Since(lastWork) <= spinIdle {
			if s.n.cfg.progress != ndk.ProgressInline {
				runtime.Gosched() // the engine goroutine needs this thread's turn
			}
			continue
		}
		s.sleep(conns, stop)
		lastWork = time.Now()
	}
}

// serverSpin is how long the server's loop keeps polling without work before it sleeps
// until a notification (ProgressInline): a latency test's next message comes within it, an
// idle connection costs no CPU after it.
const serverSpin = time.Millisecond

// take readies a new connection for the loop.
func (s *server) take(k *conn) *conn {
	k.lastRxAt = time.Now()
	return k
}

// sleep waits (adaptive progress) until a CQ notification, a new connection, a disconnect
// or the stop, at most 100 ms.
func (s *server) sleep(conns []*conn, stop <-chan struct{}) {
	for _, k := range conns {
		k.cq.Arm(ndk.NotifyAny)
	}
	t := time.NewTimer(100 * time.Millisecond)
	defer t.Stop()
	select {
	case <-s.wake:
	case <-stop:
	case <-t.C:
	}
}

// idleCheck marks connections whose peer sent nothing for the idle timeout.
func (s *server) idleCheck(conns []*conn) {
	now := time.Now()
	for _, k := range conns {
		rx := k.qp.Transport().Stats().RxPackets
		if rx != k.lastRx {
			k.lastRx, k.lastRxAt = rx, now
			continue
		}
		if now.Sub(k.lastRxAt) > s.lim.idleTimeout {
			k.failure = fmt.Sprintf("idle for %v", s.lim.idleTimeout)
		}
	}
}

// handle acts on one completion of a connection. Loop goroutine.
func (s *server) handle(k *conn, r *ndk.ResultEx) {
	if r.Status != ndk.StatusSuccess {
		switch {
		case k.failure != "":
		case k.gone.Load() || r.Status == ndk.StatusCancelled:
			// A flush: the peer disconnected, or the connection aborted.
			k.failure = "connection ended: its requests were flushed"
		default:
			k.failure = fmt.Sprintf("%v completed with %v", r.Type, r.Status.Name())
		}
		return
	}
	switch r.Type {
	case ndk.OpTypeReceive, ndk.OpTypeReceiveAndInvalidate:
	default:
		return // our Sends and Binds
	}
	switch k.req.Kind {
	case proto.KindSendLat:
		n := int(r.BytesTransferred)
		var sgl [1]ndk.SGE
		sgl[0] = k.mr.SGE(k.buf[:n])
		flags := ndk.OpFlags(0)
		if n <= int(k.req.InlineSize) {
			flags = ndk.OpInline
		}
		if err := k.qp.Send(ctxSend, sgl[:], flags); err != nil {
			k.failure = fmt.Sprintf("echo Send: %v", err)
			return
		}
		fallthrough
	case proto.KindSendBW:
		if err := k.qp.Receive(ctxRecv, k.recvSGE[:]); err != nil {
			k.failure = fmt.Sprintf("post receive: %v", err)
		}
	case proto.KindTour:
		s.tourMessage(k, r)
	}
}

// tourMessage answers one command of the tour.
func (s *server) tourMessage(k *conn, r *ndk.ResultEx) {
	slot, _ := r.RequestContext.(int)
	if slot < 0 || slot >= tourRecvSlots {
		k.failure = "tour receive of unknown slot"
		return
	}
	in := k.buf[slot*64 : slot*64+proto.TourMsgLen]
	m, err := proto.ParseTourMsg(in[:min(int(r.BytesTransferred), len(in))])
	var reply proto.TourMsg
	flags := ndk.OpFlags(0)
	switch {
	case err != nil:
		reply = proto.TourMsg{Op: proto.TourError, Token: uint32(ndk.StatusInvalidParameter)}
	case m.Op == proto.TourBind && k.mw == nil && m.Len >= 1 && m.Len <= tourMaxWindow:
		reply = s.tourBind(k, m.Len)
	case m.Op == proto.TourSolicit:
		reply, flags = proto.TourMsg{Op: proto.TourSolicited}, ndk.OpSendAndSolicitEvent
	case m.Op == proto.TourInvalidate:
		reply = proto.TourMsg{Op: proto.TourInvalidated}
		if r.Type == ndk.OpTypeReceiveAndInvalidate {
			reply.Token = uint32(r.TypeSpecific)
		}
	default:
		reply = proto.TourMsg{Op: proto.TourError, Token: uint32(ndk.StatusInvalidDeviceRequest)}
	}
	if err := k.qp.Receive(slot, []ndk.SGE{k.mr.SGE(in)}); err != nil {
		k.failure = fmt.Sprintf("post receive: %v", err)
		return
	}
	off := tourReplyOff + (k.tourSent%4)*64
	k.tourSent++
	out := reply.Append(k.buf[off:off])
	if err := k.qp.Send(ctxSend, []ndk.SGE{k.mr.SGE(out)}, flags); err != nil {
		k.failure = fmt.Sprintf("tour answer: %v", err)
	}
}

// tourBind creates a window and binds it over the window area of the connection's buffer
// with remote read and write.
func (s *server) tourBind(k *conn, n uint32) proto.TourMsg {
	mw, err := s.pd.NewMW()
	if err != nil {
		return proto.TourMsg{Op: proto.TourError, Token: uint32(ndk.StatusOf(err))}
	}
	clear(k.buf[tourWindowOff : tourWindowOff+int(n)])
	va := k.mr.VA() + tourWindowOff
	if err := k.qp.Bind(ctxBind, k.mr, mw, va, uint64(n), ndk.OpAllowRemoteRead|ndk.OpAllowRemoteWrite); err != nil {
		_ = mw.Close(context.Background())
		return proto.TourMsg{Op: proto.TourError, Token: uint32(ndk.StatusOf(err))}
	}
	k.mw = mw
	return proto.TourMsg{Op: proto.TourBound, Addr: va, Len: n, Token: mw.RemoteToken()}
}
