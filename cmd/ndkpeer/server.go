//go:build linux

package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/xdpndk/xdpndk/cmd/ndkpeer/internal/proto"
	"github.com/xdpndk/xdpndk/internal/plumb"
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
	metrics := fs.String("metrics", "", "serve Prometheus metrics on http://`ADDR`/metrics (a port alone, or :PORT: on 127.0.0.1; e.g. "+defaultMetricsPort+")")
	logLevel := fs.String("log-level", "info", "the log's least `LEVEL`: debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "the log's `FORMAT`: text (key=value) or json, a record a line")
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
	so := serveOptions{statsEvery: stats.d}
	if err == nil && *metrics != "" {
		so.metrics, err = metricsAddr(*metrics)
	}
	if err == nil {
		so.log, err = newServeLog(os.Stdout, *logLevel, *logFormat)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "ndkpeer serve: %v\n", err)
		return exitUsage
	}
	cfg.heap = int(heap.n)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	lim := serveLimits{maxSize: maxSize.n, maxConns: *maxConns, maxMem: maxMem.n, idleTimeout: *idle}
	return report("serve", serve(ctx, cfg, lim, so), false)
}

// serveOptions are how the server reports: its log, the counters' interval, the metrics'
// address.
type serveOptions struct {
	log        *slog.Logger  // the server's and the adapter's events
	statsEvery time.Duration // log the counters this often (0: never)
	metrics    string        // serve /metrics on this TCP address ("": no)
}

// server is ndkpeer serve: one adapter, one listener, and a polling loop that serves every
// connection.
type server struct {
	n       *node
	lim     serveLimits
	pd      *ndk.PD
	ln      *ndk.Listener
	log     *slog.Logger
	started time.Time
	// metricsURL is where the metrics are served ("" without --metrics).
	metricsURL string

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
	byKind                             [proto.MaxKind + 1]atomic.Uint64
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
	ctl      *ctlRun    // a control connection's window
	rev      *ctlRun    // -b: the window this test connection sends towards the client in
	revOut   int        // -b: operations of the server's direction outstanding
	revCap   int        // -b: the most the initiator queue takes for them
	revSGE   [1]ndk.SGE // -b: what they carry
	failure  string     // why the loop gives the connection up ("" while fine)
	lastRx   uint64     // the QP's RxPackets at the last idle check
	lastRxAt time.Time
	tourSent int
}

// Request contexts of the server's verbs (small integers box without allocating).
const (
	ctxRecv = 1
	ctxSend = 2
	ctxBind = 3
	ctxRev  = 4 // the server's direction of a bidirectional test (-b)
)

// serve runs the server until ctx ends, then disconnects every connection, closes the
// adapter and returns nil.
func serve(ctx context.Context, cfg adapterConfig, lim serveLimits, so serveOptions) error {
	cfg.log = so.log
	n, err := openNode(cfg)
	if err != nil {
		return err
	}
	defer n.close()
	s := &server{n: n, lim: lim, log: so.log, started: time.Now(), wake: make(chan struct{}, 1),
		incoming: make(chan *conn, lim.maxConns+1), live: map[*conn]struct{}{}, running: true}
	if s.pd, err = n.a.NewPD(); err != nil {
		return fmt.Errorf("create PD: %w", err)
	}
	if so.metrics != "" {
		stopMetrics, url, err := s.serveMetrics(so.metrics)
		if err != nil {
			return err
		}
		defer stopMetrics() // before the adapter closes
		s.metricsURL = url
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
	s.log.Info("ndkpeer serve listening; Ctrl-C stops", "address", n.a.LocalAddr().Addr(), "udp_port", cfg.port,
		"service", cfg.service, "interface", cfg.iface)
	s.log.Info("mode", "mode", modeLine(n.mode), "pages", n.pages)
	for _, note := range n.notes {
		s.log.Info("note", "note", note)
	}
	args := []any{"max_size", humanBytes(uint64(lim.maxSize)), "max_conns", lim.maxConns,
		"max_mem", humanBytes(uint64(lim.maxMem)), "stats", fmt.Sprintf("ndkpeer stats -i %s --port %d", cfg.iface, cfg.port)}
	if s.metricsURL != "" {
		args = append(args, "metrics", s.metricsURL)
	}
	s.log.Info("limits", args...)

	if so.statsEvery > 0 {
		t := time.NewTicker(so.statsEvery)
		defer t.Stop()
		go func() {
			for {
				select {
				case <-t.C:
					s.logStats(s.snapshot())
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
		go func() { defer s.work.Done(); s.closeConn(c, whyStopping) }()
	}
	s.work.Wait()
	s.log.Info("ndkpeer serve stopped; closing the adapter", "up", time.Since(s.started).Round(time.Millisecond),
		"served", s.ctr.accepted.Load(), "refused", s.ctr.rejected.Load())
	return nil
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
		k.leaveWindows()
		conns = append(conns[:i], conns[i+1:]...)
		s.work.Add(1)
		go func() { defer s.work.Done(); s.closeConn(k, why) }()
		return conns
	}
	quiet := 0 // rounds in a row that found nothing
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
		// -e: a client that waits on notifications has the loop sleep as soon as a round
		// finds nothing, rather than poll on (ProgressBusy's engine spins whatever it does).
		events := 0
		for _, k := range conns {
			if k.req.Flags&proto.FlagEvents != 0 {
				events++
			}
		}
		spin := spinIdle
		if events > 0 && spin > 0 {
			spin = 0
		}
		polls := spin != 0 || s.n.cfg.progress == ndk.ProgressBusy
		posted, nextPost := s.reverse(conns)
		work := posted
		for _, k := range conns {
			n := k.cq.GetResultsEx(res[:])
			for j := range res[:n] {
				s.handle(k, &res[j])
			}
			if n > 0 {
				work = true
			}
		}
		s.control(conns, polls)
		if work {
			quiet = 0
		} else {
			quiet++
		}
		if it&63 != 0 && (work || spin != 0 && quiet&15 != 1) {
			continue
		}
		// Housekeeping, every 64 rounds and on the first of every 16 rounds in a row that
		// find nothing (on every such round when the loop sleeps as soon as one finds
		// nothing, -e): a target of Writes finds nothing in most rounds, and the clock read
		// and channel checks here would cost it a tenth of each message.
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
				conns = give(i, whyPeerDisconnected)
			}
		}
		if work {
			lastWork = time.Now()
			continue
		}
		if spin < 0 || time.Since(lastWork) <= spin || s.ctlWaiting(conns) {
			if s.n.cfg.progress != ndk.ProgressInline {
				runtime.Gosched() // the engine goroutine needs this thread's turn
			}
			continue
		}
		d := 100 * time.Millisecond
		if nextPost > 0 { // a paced direction of -b: wake for its next post
			d = min(d, time.Duration(nextPost-clock()))
			if d <= 0 {
				continue
			}
		}
		s.sleep(conns, stop, d)
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

// ctlWaiting reports a control command that waits for something other than a completion
// (connections still on their way to the loop): the loop looks again without sleeping.
func (s *server) ctlWaiting(conns []*conn) bool {
	for _, k := range conns {
		if k.ctl != nil && k.ctl.pending && k.ctl.cmd.Op == proto.CtlStart {
			return true
		}
	}
	return false
}

// sleep waits until a CQ notification, a new connection, a disconnect or the stop, at most
// d.
func (s *server) sleep(conns []*conn, stop <-chan struct{}, d time.Duration) {
	for _, k := range conns {
		k.cq.Arm(ndk.NotifyAny)
	}
	t := time.NewTimer(d)
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
		rx := plumb.QP(k.qp).Stats().RxPackets
		if rx != k.lastRx {
			k.lastRx, k.lastRxAt = rx, now
			continue
		}
		if now.Sub(k.lastRxAt) > s.lim.idleTimeout {
			k.failure = fmt.Sprintf("idle for %v", s.lim.idleTimeout)
		}
	}
}
