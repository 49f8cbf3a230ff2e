//go:build linux

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/xdpndk/xdpndk/xdp/nexthop"

	"golang.org/x/sys/unix"

	"github.com/xdpndk/xdpndk/cmd/ndkpeer/internal/proto"
	"github.com/xdpndk/xdpndk/ndk"
)

// clientOptions are a test's parameters.
type clientOptions struct {
	kind       proto.Kind
	host       string
	sizes      []int
	iters      int  // per size (-n); 0 with a duration
	itersSet   bool // -n given: -a does not scale it down
	duration   time.Duration
	warmup     int
	warmupSet  bool
	qps        int
	txDepth    int
	txDepthSet bool // -t given: not lowered for large messages
	inline     bool
	inlineSize int
	jsonOut    bool
	timeout    time.Duration

	// perftest's options (perf_flags.go)
	cpuUtil  bool  // --cpu-util: both sides' CPU time
	events   bool  // -e: wait on notifications
	bidir    bool  // -b: the server runs the test towards us too
	rate     int64 // --rate: messages per second over all QPs; 0 unpaced
	infinite bool  // -D 0, --infinite: until SIGINT/SIGTERM

	// --load: a bandwidth test (KindWriteBW or KindReadBW) of loadSize-byte messages
	// streamed on one more QP while a latency test measures; loadKind 0 without.
	loadKind proto.Kind
	loadSize int
}

// Defaults of the tests.
const (
	defaultLatIters = 1000
	defaultBWIters  = 5000
	defaultTxDepth  = 128
	maxOutstanding  = 1 << 20 // bytes a bandwidth test keeps outstanding per QP without -t, before the path's RTT is known
	// The depth a bandwidth test sets from the path without -t (depthForPath): twice the
	// bandwidth-delay product, at most autoMaxBytes and autoMaxDepth operations per QP.
	autoMaxBytes = 64 << 20
	autoMaxDepth = 1024
	// defaultLineRate is the line rate assumed when the interface does not report its
	// speed, in bit/s.
	defaultLineRate = 10e9
	defaultInline   = 256
	allMinSize      = 2
	allMaxSize      = 8 << 20
	scaleAbove      = 64 << 10 // -a: sizes above this run fewer iterations unless -n is given
	maxClientSize   = 256 << 20
	sendLatRecvs    = 16
)

func clientUsage(name string) string {
	bidir, load := "", ""
	if k, _ := proto.KindOf(name); k.Bandwidth() {
		bidir = " [-b]"
	} else {
		load = " [--load OP:SIZE]"
	}
	return "-i IFACE [-s SIZE | -a] [-n ITERS | -D SECONDS | -D 0] [-q QPS] [--inline] [-e]" + bidir + " [--rate MSGS_PER_S]" + load + " [--cpu-util] [--json] [options] HOST"
}

// secondsFlag is a duration given in seconds ("2", "0.5") or as a Go duration ("1500ms").
type secondsFlag struct{ d time.Duration }

func (s *secondsFlag) String() string { return strconv.FormatFloat(s.d.Seconds(), 'g', -1, 64) }

func (s *secondsFlag) Set(v string) error {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		s.d = time.Duration(f * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("%q: seconds, such as 2 or 0.5", v)
	}
	s.d = d
	return nil
}

// clientCmd returns the command function of a test.
func clientCmd(name string) func(args []string) int {
	return func(args []string) int {
		kind, _ := proto.KindOf(name)
		o, cfg, code := parseClient(name, kind, args, os.Stderr)
		if code >= 0 {
			return code
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return report(name, runClient(ctx, cfg, o, os.Stdout), o.jsonOut)
	}
}

// parseClient parses a test's flags; code is -1 when the test should run, else the exit
// code to return at once.
func parseClient(name string, kind proto.Kind, args []string, errOut io.Writer) (clientOptions, adapterConfig, int) {
	fs := newFlagSet(name, clientUsage(name), errOut)
	var af adapterFlags
	af.define(fs, "inline")
	size := sizeFlag{64}
	if !kind.Latency() {
		size.n = 64 << 10
	}
	fs.Var(&size, "s", "message `SIZE` in bytes (K, M suffixes)")
	fs.Var(&size, "size", "same as -s (`SIZE`)")
	all := fs.Bool("a", false, "every size from --min-size to --max-size by powers of two (2 B to 8 MiB)")
	fs.BoolVar(all, "all", false, "same as -a")
	minSize, maxSize := sizeFlag{allMinSize}, sizeFlag{allMaxSize}
	fs.Var(&minSize, "min-size", "smallest `SIZE` of -a")
	fs.Var(&maxSize, "max-size", "largest `SIZE` of -a")
	defIters := defaultLatIters
	if !kind.Latency() {
		defIters = defaultBWIters
	}
	iters := fs.Int("n", defIters, "iterations per size, after the warm-up")
	fs.IntVar(iters, "iters", defIters, "same as -n")
	var dur secondsFlag
	fs.Var(&dur, "D", "run each size for this many `SECONDS` instead of -n iterations, with a line per second (0: until Ctrl-C)")
	fs.Var(&dur, "duration", "same as -D (`SECONDS`)")
	qps := fs.Int("q", 1, "QPs in parallel (one connection each)")
	fs.IntVar(qps, "qps", 1, "same as -q")
	txDepth := fs.Int("t", defaultTxDepth, "bandwidth tests: operations kept outstanding per QP (without -t: 128 and at most 1 MiB during the warm-up, then twice the path's bandwidth-delay product, at most 64 MiB and 1024)")
	fs.IntVar(txDepth, "tx-depth", defaultTxDepth, "same as -t")
	warm := fs.Int("w", 0, "warm-up operations per size, not counted (default n/10, 1 to 1000)")
	fs.IntVar(warm, "warmup", 0, "same as -w")
	inline := fs.Bool("inline", false, "post Sends and Writes up to --inline-size bytes as NDK inline data")
	inlineSize := fs.Int("inline-size", defaultInline, "the QPs' inline data size in bytes (with --inline)")
	jsonOut := fs.Bool("json", false, "print the result as one JSON document")
	timeout := fs.Duration("timeout", 5*time.Second, "bound on connecting and on each operation's completion (`DURATION`)")
	var pf perfFlags
	pf.define(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return clientOptions{}, adapterConfig{}, exitUsage
	}
	bad := func(format string, args ...any) (clientOptions, adapterConfig, int) {
		fmt.Fprintf(errOut, "ndkpeer %s: %s\n", name, fmt.Sprintf(format, args...))
		return clientOptions{}, adapterConfig{}, exitUsage
	}
	if len(pos) != 1 {
		return bad("one HOST expected, got %d arguments (usage: ndkpeer %s %s)", len(pos), name, clientUsage(name))
	}
	cfg, err := af.config()
	if err != nil {
		return bad("%v", err)
	}
	o := clientOptions{kind: kind, host: pos[0], iters: *iters, itersSet: isSetAny(fs, "n", "iters"),
		duration: dur.d, warmup: *warm, warmupSet: isSetAny(fs, "w", "warmup"), qps: *qps,
		txDepth: *txDepth, txDepthSet: isSetAny(fs, "t", "tx-depth"), inline: *inline, jsonOut: *jsonOut, timeout: *timeout}
	if *inline {
		o.inlineSize = *inlineSize
	}
	switch {
	case size.n < 1 || size.n > maxClientSize:
		return bad("-s %s: not in [1, %s]", size.String(), formatSize(maxClientSize))
	case *all && (minSize.n < 1 || maxSize.n > maxClientSize || minSize.n > maxSize.n):
		return bad("-a from %s to %s: sizes must grow, from 1 to %s", minSize.String(), maxSize.String(), formatSize(maxClientSize))
	case o.iters < 1 || o.iters > 100_000_000:
		return bad("-n %d: not in [1, 100000000]", o.iters)
	case o.duration < 0 || o.duration > time.Hour:
		return bad("-D %v: not in [0, 3600] seconds", o.duration)
	case o.duration > 0 && o.duration < 100*time.Millisecond:
		return bad("-D %v: at least 0.1 seconds", o.duration)
	case o.duration > 0 && o.itersSet:
		return bad("-n and -D exclude each other")
	case o.qps < 1 || o.qps > proto.MaxQPs:
		return bad("-q %d: not in [1, %d]", o.qps, proto.MaxQPs)
	case o.txDepth < 1 || o.txDepth > 2048:
		return bad("-t %d: not in [1, 2048]", o.txDepth)
	case o.warmupSet && (o.warmup < 0 || o.warmup > 10_000_000):
		return bad("-w %d: not in [0, 10000000]", o.warmup)
	case *inline && (*inlineSize < 1 || *inlineSize > proto.MaxInline):
		return bad("--inline-size %d: not in [1, %d]", *inlineSize, proto.MaxInline)
	case o.timeout < 10*time.Millisecond || o.timeout > 10*time.Minute:
		return bad("--timeout %v: not in [10ms, 10m]", o.timeout)
	}
	if *all {
		for s := minSize.n; s <= maxSize.n; s *= 2 {
			o.sizes = append(o.sizes, int(s))
		}
	} else {
		o.sizes = []int{int(size.n)}
	}
	if err := pf.apply(&o, isSetAny(fs, "D", "duration")); err != nil {
		return bad("%v", err)
	}
	if o.duration > 0 || o.infinite {
		o.iters = 0
	}
	maxMsg := o.sizes[len(o.sizes)-1] + o.loadSize
	cfg.heap = min(max((maxMsg+(64<<10)+4095)&^4095, ndk.DefaultHeapSize), 64<<20)
	return o, cfg, -1
}

// itersFor is the iterations of one size: -n, or with -a and no -n, fewer for sizes over
// 64 KiB (each moving about as many bytes as 64 KiB messages would).
func (o *clientOptions) itersFor(size int) int {
	if o.iters == 0 || o.itersSet || len(o.sizes) == 1 || size <= scaleAbove {
		return o.iters
	}
	floor := 16
	if !o.kind.Latency() {
		floor = 64
	}
	return max(floor, int(int64(o.iters)*scaleAbove/int64(size)))
}

// depthFor is the operations a bandwidth test keeps outstanding per QP at a size: -t, or
// without it 128, lowered so that at most 1 MiB is outstanding (at least 2): bench/ndkbench's
// 128 outstanding 64-byte Writes and 16 outstanding 64 KiB ones.
func (o *clientOptions) depthFor(size int) int {
	if o.kind.Latency() {
		return 1
	}
	if o.txDepthSet {
		return o.txDepth
	}
	return min(o.txDepth, max(2, maxOutstanding/size))
}

// loadDepth is the operations --load keeps outstanding: -t, or without it as a bandwidth
// test of its size would (depthFor).
func (o *clientOptions) loadDepth() int {
	if o.txDepthSet {
		return o.txDepth
	}
	return min(o.txDepth, max(2, maxOutstanding/max(o.loadSize, 1)))
}

// depthForPath is the depth of a bandwidth test without -t once the warm-up has shown the
// path's round trip: enough operations of size bytes to keep twice the bandwidth-delay
// product (rtt x rate in bit/s) outstanding, so that a long path is not limited by the
// 1 MiB of depthFor (1 MiB over a 10 ms round trip is 0.84 Gbit/s), at most autoMaxBytes
// and autoMaxDepth per QP, and never below depthFor. Twice: the round trip under load
// grows by the queue a delay-based controller keeps, and completions arrive in bursts.
func (o *clientOptions) depthForPath(size int, rtt time.Duration, rate float64) int {
	d := o.depthFor(size)
	if o.kind.Latency() || o.txDepthSet || rtt <= 0 || rate <= 0 {
		return d
	}
	bdp := 2 * rtt.Seconds() * rate / 8
	want := int(math.Ceil(min(bdp, autoMaxBytes) / float64(size)))
	return max(d, min(want, autoMaxDepth, max(1, autoMaxBytes/size)))
}

// warmupFor is the warm-up of a size: -w, or a tenth of its iterations (1 to 1000); in
// duration mode a tenth of the default iterations, scaled down above 64 KiB as -a scales
// iterations (so that a -D run's 8 MiB warm-up does not move 4 GiB).
func (o *clientOptions) warmupFor(size int) int {
	if o.warmupSet {
		return o.warmup
	}
	n := o.itersFor(size)
	if n == 0 { // duration mode: a tenth of the default iterations, fewer above 64 KiB
		n = defaultLatIters
		if !o.kind.Latency() {
			n = defaultBWIters
		}
		if size > scaleAbove { // each size's warm-up moves about as many bytes as at 64 KiB
			n = max(10, int(int64(n)*scaleAbove/int64(size)))
		}
	}
	return min(max(n/10, 1), 1000)
}

// session is one client run: the adapter, the memory, and the QPs connected to the server.
type session struct {
	o     clientOptions
	n     *node
	pd    *ndk.PD
	buf   []byte
	mr    *ndk.MR
	dest  netip.AddrPort // the server's NDK address (service as port)
	reply proto.Reply    // the first QP's (every QP's server mode is the same)
	qps   []*qpRun
	ctl   *ctlClient // the control connection (--cpu-util, -b), or nil
	// --load: its QP (a connection of its own session, so that the control connection's
	// window leaves it out), and the buffer its Writes read from or its Reads write into
	load    *qpRun
	loadBuf []byte
	loadMR  *ndk.MR
	out     io.Writer
	closed  bool
}

// reqFlags are the Request flags of the run's options.
func (s *session) reqFlags() proto.Flags {
	var f proto.Flags
	if s.o.events {
		f |= proto.FlagEvents
	}
	if s.o.bidir {
		f |= proto.FlagBidirectional
	}
	if s.o.cpuUtil {
		f |= proto.FlagCPU
	}
	return f
}

// maxDepth is the most operations the run keeps outstanding per QP at any of its sizes:
// what the server sizes its QPs for when it runs the test towards us (-b).
func (o *clientOptions) maxDepth() int {
	d := 1
	for _, size := range o.sizes {
		d = max(d, o.depthFor(size))
	}
	return d
}

// needsCtl reports whether the run opens a control connection.
func (o *clientOptions) needsCtl() bool { return o.cpuUtil || o.bidir }

// revRecvs is how many receives the client keeps posted per QP for the server's Sends of a
// bidirectional send-bw: as many as the server keeps for ours.
func (o *clientOptions) revRecvs() int {
	if o.kind == proto.KindSendBW && o.bidir {
		return min(2*o.txDepth, proto.MaxRecvDepth)
	}
	return 0
}

// refusedError explains the server's refusal of a connection; one for the protocol's
// version names the options that need a newer server.
func refusedError(err error, ref proto.Refusal, dest netip.AddrPort) error {
	if ref.Code == proto.RefuseVersion {
		return failWrap(exitRejected, err, "the server at %v speaks ndkpeer protocol %d and refused our %d: --cpu-util, -b and -e need a server of protocol 2 (run the same ndkpeer on both hosts; ndkpeer --version): %s",
			dest.Addr(), ref.Version, proto.Version, ref.Reason)
	}
	return failWrap(exitRejected, err, "the server at %v refused the test: %s", dest.Addr(), ref.Reason)
}

// qpRun is one QP of a run and its connection.
type qpRun struct {
	qp    *ndk.QP
	cq    *ndk.CQ
	conn  *ndk.Connector
	raddr uint64
	rlen  uint64
	rtok  uint32
	gone  atomic.Bool // the server disconnected or the connection aborted

	// measurement state, owned by the loop
	out   int   // operations outstanding
	sends int   // send-lat: Sends not yet completed
	t0    int64 // latency: when the outstanding operation was posted
}

// resolveHost returns the IPv4 (else IPv6) address of host, a literal or a name.
func resolveHost(ctx context.Context, host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), nil
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return netip.Addr{}, failWrap(exitUnreachable, err, "cannot resolve host %q: %v", host, err)
	}
	for _, a := range addrs {
		if a.Unmap().Is4() {
			return a.Unmap(), nil
		}
	}
	return addrs[0], nil
}

// resolvePeer makes sure the kernel can reach addr through the adapter's interface and
// knows its next hop's MAC address, so that the link finds it at once; it turns the
// failures into STATUS_NETWORK_UNREACHABLE / STATUS_HOST_UNREACHABLE errors.
func resolvePeer(ctx context.Context, addr netip.Addr, ifi *net.Interface) error {
	r, err := nexthop.NewResolver()
	if err != nil {
		return err
	}
	defer r.Close()
	nh, err := r.NextHop(ctx, addr)
	switch {
	case err == nil && nh.IfIndex != ifi.Index:
		name := strconv.Itoa(nh.IfIndex)
		if x, err := net.InterfaceByIndex(nh.IfIndex); err == nil {
			name = x.Name
		}
		return fail(exitUnreachable, "%v is routed through interface %s, not %s: run on that interface (-i %s)", addr, name, ifi.Name, name)
	case err == nil:
		return nil
	case errors.Is(err, nexthop.ErrNextHopUnresolved), errors.Is(err, unix.EHOSTUNREACH):
		return failWrap(exitUnreachable, ndk.StatusHostUnreachable, "%v is unreachable (STATUS_HOST_UNREACHABLE): no ARP answer for it (or its gateway) on %s: check the address and the link", addr, ifi.Name)
	case errors.Is(err, unix.ENETUNREACH):
		return failWrap(exitUnreachable, ndk.StatusNetworkUnreachable, "%v is unreachable (STATUS_NETWORK_UNREACHABLE): no route to it from this host: check the address and 'ip route'", addr)
	case errors.Is(err, nexthop.ErrNoEthernetNextHop):
		return failWrap(exitUnreachable, ndk.StatusNetworkUnreachable, "%v is not reachable over an Ethernet next hop (%v)", addr, err)
	}
	return fmt.Errorf("resolve the next hop to %v: %w", addr, err)
}

// openSession opens the adapter, registers the buffer and connects the QPs.
func openSession(ctx context.Context, cfg adapterConfig, o clientOptions, out io.Writer) (s *session, err error) {
	rctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	addr, err := resolveHost(rctx, o.host)
	if err != nil {
		return nil, err
	}
	n, err := openNode(cfg)
	if err != nil {
		return nil, err
	}
	s = &session{o: o, n: n, out: out, dest: netip.AddrPortFrom(addr, cfg.service)}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if err := resolvePeer(rctx, addr, n.ifi); err != nil {
		return s, err
	}
	if s.pd, err = n.a.NewPD(); err != nil {
		return s, fmt.Errorf("create PD: %w", err)
	}
	maxMsg := o.sizes[len(o.sizes)-1]
	size := (maxMsg + 4095) &^ 4095
	if s.buf, err = n.a.Alloc(size, 4096); err != nil {
		s.buf = make([]byte, size)
	}
	for i := range s.buf {
		s.buf[i] = byte(i)
	}
	mrFlags := ndk.MRAllowLocalWrite
	if o.bidir && (o.kind == proto.KindWriteBW || o.kind == proto.KindReadBW) {
		mrFlags |= ndk.MRAllowRemoteRead | ndk.MRAllowRemoteWrite // the server's Writes and Reads
	}
	if s.mr, err = s.pd.RegisterMR(s.buf, mrFlags); err != nil {
		return s, fmt.Errorf("register %s: %w", humanBytes(uint64(size)), err)
	}
	session := rand.Uint64()
	for i := range o.qps {
		q, err := s.connect(ctx, i, session, uint32(maxMsg))
		if q != nil {
			s.qps = append(s.qps, q)
		}
		if err != nil {
			return s, err
		}
	}
	if o.loadKind != 0 {
		if err := s.openLoad(ctx); err != nil {
			return s, err
		}
	}
	if o.needsCtl() {
		s.ctl, err = s.openCtl(ctx, session)
		if err != nil {
			return s, err
		}
	}
	return s, nil
}

// openLoad registers --load's buffer and connects its QP: a bandwidth test of its own
// session (one QP), which the server runs as it runs that test for any client.
func (s *session) openLoad(ctx context.Context) (err error) {
	size := (s.o.loadSize + 4095) &^ 4095
	if s.loadBuf, err = s.n.a.Alloc(size, 4096); err != nil {
		s.loadBuf = make([]byte, size)
	}
	for i := range s.loadBuf {
		s.loadBuf[i] = byte(i)
	}
	if s.loadMR, err = s.pd.RegisterMR(s.loadBuf, ndk.MRAllowLocalWrite); err != nil {
		return fmt.Errorf("register the load's %s: %w", humanBytes(uint64(size)), err)
	}
	q, err := s.connectQP(ctx, qpSpec{kind: s.o.loadKind, index: 0, count: 1, session: rand.Uint64(),
		maxMsg: uint32(s.o.loadSize), window: s.o.loadDepth(), flags: s.reqFlags() & proto.FlagEvents})
	if q != nil {
		s.load = q
	}
	if err != nil {
		return fmt.Errorf("--load: %w", err)
	}
	return nil
}

// qpSpec is what a QP of the run is for: the test's QPs, or --load's.
type qpSpec struct {
	kind         proto.Kind
	index, count int // the QP's index among count QPs of its session
	session      uint64
	maxMsg       uint32
	window       int // operations kept outstanding at most
	recvs        int // receives kept posted
	flags        proto.Flags
}

// connect creates the test's QP i and connects it to the server.
func (s *session) connect(ctx context.Context, i int, session uint64, maxMsg uint32) (*qpRun, error) {
	o := s.o
	recvs := o.revRecvs()
	if o.kind == proto.KindSendLat {
		recvs = sendLatRecvs
	}
	window := 1
	if !o.kind.Latency() {
		window = o.txDepth
		if !o.txDepthSet {
			window = max(window, autoMaxDepth) // room for depthForPath
		}
	}
	return s.connectQP(ctx, qpSpec{kind: o.kind, index: i, count: o.qps, session: session, maxMsg: maxMsg,
		window: window, recvs: recvs, flags: s.reqFlags()})
}

// connectQP creates a QP as sp says and connects it to the server.
func (s *session) connectQP(ctx context.Context, sp qpSpec) (*qpRun, error) {
	o := s.o
	maxMsg, recvs := sp.maxMsg, sp.recvs
	initiator := sp.window + 16
	cq, err := s.n.a.NewCQ(initiator+recvs+16, nil)
	if err != nil {
		return nil, fmt.Errorf("create CQ: %w", err)
	}
	qp, err := s.pd.NewQP(ndk.QPConfig{ReceiveCQ: cq, InitiatorCQ: cq, ReceiveQueueDepth: max(recvs, 1),
		InitiatorQueueDepth: initiator, InlineDataSize: o.inlineSize})
	if err != nil {
		_ = cq.Close(ctx)
		return nil, fmt.Errorf("create QP: %w", err)
	}
	q := &qpRun{qp: qp, cq: cq}
	if recvs > 0 {
		sge := []ndk.SGE{s.mr.SGE(s.buf[:maxMsg])}
		for range recvs {
			if err := qp.Receive(ctxRecv, sge); err != nil {
				return q, fmt.Errorf("post receive: %w", err)
			}
		}
	}
	if q.conn, err = s.n.a.NewConnector(); err != nil {
		return q, fmt.Errorf("create connector: %w", err)
	}
	req := proto.Request{Kind: sp.kind, MaxSize: maxMsg, InlineSize: uint16(o.inlineSize),
		QPIndex: uint16(sp.index), QPs: uint16(sp.count), Session: sp.session, Flags: sp.flags}
	if o.bidir && sp.kind == o.kind {
		req.Depth = uint16(min(o.maxDepth(), proto.MaxDepth))
		if o.kind != proto.KindSendBW {
			req.BufAddr, req.BufLen, req.Token = s.mr.VA(), uint64(len(s.buf)), s.mr.RemoteToken()
		}
	}
	if sp.kind == proto.KindSendBW {
		req.RecvDepth = uint16(min(2*o.txDepth, proto.MaxRecvDepth))
	} else if sp.kind == proto.KindSendLat {
		req.RecvDepth = sendLatRecvs
	}
	cctx, cancel := context.WithTimeout(ctx, s.o.timeout)
	defer cancel()
	if err := q.conn.Connect(cctx, qp, s.dest, 64, 64, req.Append(nil)); err != nil {
		if ref, ok := refusal(q.conn, err); ok {
			return q, refusedError(err, ref, s.dest)
		}
		return q, connectError(err, s.dest.String(), s.n.cfg.port)
	}
	var pd [proto.MaxPrivateData]byte
	_, _, size, err := q.conn.GetConnectionData(pd[:])
	if err != nil {
		return q, fmt.Errorf("read the server's answer: %w", err)
	}
	reply, err := proto.ParseReply(pd[:min(size, len(pd))], sp.kind)
	if err != nil {
		_ = q.conn.Reject(nil)
		return q, fmt.Errorf("the server's answer: %w (is it an ndkpeer of the same version?)", err)
	}
	switch sp.kind {
	case proto.KindWriteLat, proto.KindWriteBW, proto.KindReadLat, proto.KindReadBW:
		if reply.BufLen < uint64(maxMsg) || reply.BufAddr == 0 {
			_ = q.conn.Reject(nil)
			return q, fmt.Errorf("the server offered a buffer of %d bytes for messages of %d", reply.BufLen, maxMsg)
		}
	}
	q.raddr, q.rlen, q.rtok = reply.BufAddr, reply.BufLen, reply.Token
	if err := q.conn.CompleteConnect(cctx, func() { q.gone.Store(true) }); err != nil {
		return q, connectError(err, s.dest.String(), s.n.cfg.port)
	}
	if sp.kind == o.kind && sp.index == 0 {
		s.reply = reply
	}
	return q, nil
}

// refusal returns the server's Refusal after a Connect that failed with
// STATUS_CONNECTION_REFUSED, if the rejection carried one.
func refusal(c *ndk.Connector, err error) (proto.Refusal, bool) {
	if ndk.StatusOf(err) != ndk.StatusConnectionRefused {
		return proto.Refusal{}, false
	}
	var pd [proto.MaxPrivateData]byte
	_, _, size, gerr := c.GetConnectionData(pd[:])
	if gerr != nil || size == 0 {
		return proto.Refusal{}, false
	}
	r, perr := proto.ParseRefusal(pd[:min(size, len(pd))])
	return r, perr == nil
}

// close disconnects every QP and closes the adapter.
func (s *session) close() {
	if s.closed {
		return
	}
	s.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if s.ctl != nil {
		s.ctl.close(ctx, s.n.a)
	}
	qps := s.qps
	if s.load != nil {
		qps = append(slices.Clip(qps), s.load)
	}
	for _, q := range qps {
		if q.conn != nil {
			_ = q.conn.Close(ctx) // NdkDisconnect if connected
		}
		_ = q.qp.Close(ctx)
		_ = q.cq.Close(ctx)
	}
	if s.mr != nil {
		_ = s.mr.Deregister(ctx)
	}
	if s.loadMR != nil {
		_ = s.loadMR.Deregister(ctx)
	}
	s.n.close()
}

// runClient runs a test: it connects, prints the header, measures every size, prints the
// results and disconnects. A -D 0 run ends at SIGINT or SIGTERM with its summary and
// succeeds; any other run they interrupt fails with exitInterrupted.
func runClient(ctx context.Context, cfg adapterConfig, o clientOptions, out io.Writer) error {
	s, err := openSession(ctx, cfg, o, out)
	if err != nil {
		return err
	}
	defer s.close()
	doc := s.document()
	if !o.jsonOut {
		s.printHeader()
	}
	r, err := newRunner(s)
	if err != nil {
		return err
	}
	defer r.close()
	stop := context.AfterFunc(ctx, func() { r.stop.Store(true) })
	defer stop()
	// -D 0 with --json streams its intervals, one JSON object a line, so that a run of any
	// length holds none of them; the other runs put theirs in the document.
	stream := o.infinite && o.jsonOut
	interrupted := func() bool { return ctx.Err() != nil && !o.infinite }
	for _, size := range o.sizes {
		res, err := r.measure(size, o.itersFor(size), o.duration, o.warmupFor(size), func(iv interval) {
			switch {
			case stream:
				writeJSONLine(out, intervalRecord{SchemaVersion: schemaVersion, Record: "interval", interval: iv})
			case o.jsonOut:
				doc.Intervals = append(doc.Intervals, iv)
			default:
				s.printInterval(iv)
			}
		})
		if err != nil {
			if interrupted() {
				return failWrap(exitInterrupted, ctx.Err(), "interrupted")
			}
			return err
		}
		if interrupted() {
			return failWrap(exitInterrupted, ctx.Err(), "interrupted")
		}
		if o.kind.Latency() {
			doc.Latency = append(doc.Latency, res.lat)
		} else {
			doc.Bandwidth = append(doc.Bandwidth, res.bw)
		}
		if !o.jsonOut {
			s.printResult(res)
		}
	}
	switch {
	case stream:
		doc.IntervalsStreamed = true
		writeJSONLine(out, doc)
	case o.jsonOut:
		writeJSON(out, doc)
	}
	return nil
}

// isSetAny reports whether any of the named flags was given.
func isSetAny(fs *flag.FlagSet, names ...string) bool {
	for _, n := range names {
		if isSet(fs, n) {
			return true
		}
	}
	return false
}
