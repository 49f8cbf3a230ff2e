package ndk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"

	"github.com/xdpndk/xdpndk/internal/plumb"
	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport"
)

// Options configure an Adapter. Start from DefaultOptions.
type Options struct {
	// Progress is who runs the engine (default ProgressInline, the zero value).
	Progress Progress
	// Spin is how long the adaptive engine, the inline fallback while it serves the engine,
	// and CQ.Wait poll after their last work before they sleep (default 50 µs).
	Spin time.Duration
	// InlineFallback is how long a ProgressInline adapter may go unpolled before its own
	// goroutine serves the engine (default 500 µs: shorter, and a polling thread that the
	// kernel deschedules for a moment has the fallback step in beside it, which measured
	// worse tail latency on two CPUs).
	InlineFallback time.Duration
	// MaxMemoryEntries bounds the live MRs and MWs together (default 4096, at most 1<<20).
	MaxMemoryEntries int
	// MaxQPs bounds the QPs (and so the memory they hold) that exist on the adapter at once
	// (default transport.DefaultMaxQPs, 1024; at most transport.MaxQPLimit). NewQP fails
	// with STATUS_INSUFFICIENT_RESOURCES beyond it; QueryAdapterInfo reports it.
	MaxQPs int
	// PeerPort is the UDP port peers' links receive on (default: the same as ours).
	PeerPort uint16
	// HeapSize is how much of the adapter's pinned UMEM Adapter.Alloc can hand out, in bytes
	// (Open only; default DefaultHeapSize, 16 MiB). The UMEM also holds the packet frames of
	// every queue, sized by xdp.Config.
	HeapSize int
	// ZeroCopyTx makes the engine hand payloads in the UMEM to the link by reference; a
	// request then completes only when the link has finished with its bytes. Open turns it
	// on by itself when the AF_XDP socket runs in zero-copy mode.
	ZeroCopyTx bool
	// PackLimit is the largest payload, in bytes, of a request's packet that leaves packed
	// with the QP's other small packets of the same moment in one datagram (their
	// payloads copied), so that small messages share what the path charges per datagram;
	// a lone one leaves on its own, as soon as ever. Default transport.DefaultPackLimit
	// (0); negative packs nothing (docs/TRANSPORT.md, "Packing small requests").
	PackLimit int
	// Engines is how many protocol engines the adapter runs (Open only; default
	// DefaultEngines, 1; at most the queues served): each serves its share of the
	// interface's queues and the QPs placed on it, on a goroutine of its own, sharing
	// nothing with the others per packet (docs/NDK.md, "Several engines"). A QP is placed
	// on an engine when it is created (the one with the fewest QPs; a QP on an SRQ on the
	// SRQ's) and an accepted one moves to the engine its connection request arrived at. A
	// CQ polls, with ProgressInline, the engines of its QPs. More than one pays only with
	// cores to spare for them (docs/DATAPATH.md, "Several engines", has the figures).
	Engines int

	// RetryTimeout is how long a packet may go unacknowledged (retransmitted with backoff,
	// at least once a second) before the connection fails and its requests complete
	// STATUS_IO_TIMEOUT: the longest stall of the peer, or of the path, a connection rides
	// out (default 10 s; docs/RELIABILITY.md, "Liveness budgets"). QPConfig.RetryTimeout
	// overrides it per QP.
	RetryTimeout time.Duration
	// RNRTimeout is how long the peer may leave a Send without a posted receive (answering
	// receiver-not-ready) before the Send completes STATUS_IO_TIMEOUT (default 10 s).
	// QPConfig.RNRTimeout overrides it per QP.
	RNRTimeout time.Duration
	// KeepAlive is how long a connection's peer may stay silent before the connection is
	// declared dead: outstanding requests and receives complete, the disconnect callback
	// runs. Nothing is sent on a connection that carries traffic; an idle one is probed
	// after a third of it. Default 30 s; negative turns keepalive off. QPConfig.KeepAlive
	// overrides it per QP.
	KeepAlive time.Duration
	// ConnectTimeout bounds Connect, Accept and CompleteConnect when their context has no
	// deadline (default 30 s). A context with a deadline is obeyed instead, longer or
	// shorter.
	ConnectTimeout time.Duration

	// Logger receives the adapter's events: the mode it opened in and every fallback with
	// its reason, connections established, refused and closed, QPs that failed and why. Nil
	// logs nothing, at no cost. Nothing is logged per packet or per request.
	// docs/OPERATIONS.md lists the events, their levels and attributes.
	Logger *slog.Logger

	// x is what the module's own tests and benchmarks add for an adapter on a link of their
	// own (internal/plumb.Extra).
	x plumb.Extra
}

// DefaultOptions returns the default Options.
func DefaultOptions() Options {
	return Options{Progress: ProgressInline, Spin: 50 * time.Microsecond, InlineFallback: 500 * time.Microsecond,
		MaxMemoryEntries: 4096, HeapSize: DefaultHeapSize, RetryTimeout: DefaultRetryTimeout,
		RNRTimeout: DefaultRNRTimeout, KeepAlive: DefaultKeepAlive, ConnectTimeout: DefaultConnectTimeout}
}

// Limits of this implementation, reported by QueryAdapterInfo.
const (
	maxQueueDepth   = transport.MaxQueueDepth
	maxCQDepth      = 1 << 20
	maxInline       = 4096
	maxReadLimit    = 64
	maxCQs          = 4096
	maxTransfer     = transport.MaxMessage
	maxRegistration = 1 << 46
	frmrPageCount   = 1 << 18
)

// Adapter is an open NDK adapter: a link, the protocol engines running on it (each on its
// share of the link's queues), and the registry of its memory. Its methods are safe for
// concurrent use.
type Adapter struct {
	link  link.Link // the whole interface: its address, limits, counters
	grp   *transport.Group
	engs  []*engine // one per engine of grp, in its order
	reg   *memreg.Registry
	opts  Options
	start time.Time
	now   func() int64

	cancel context.CancelFunc

	events chan func() // callbacks, run one at a time by the event goroutine
	cqs    chan *CQ    // CQs with a notification to deliver
	stopEv chan struct{}
	evDone chan struct{}
	ncq    atomic.Int32
	ports  atomic.Uint32 // next ephemeral port
	dev    io.Closer     // the AF_XDP device of an adapter from Open, closed with it
	umem   *memreg.UMEM  // the memory the link transmits from (nil: none)
	heap   *memreg.Heap  // umem's heap for Alloc (nil: Alloc is not supported)
	log    *slog.Logger  // nil: nothing is logged
	// closing: Close has begun, the API refuses new work (checkOpen); closed: the engine
	// is being stopped (its loops end); stopped: it no longer runs, nothing touches the
	// memory any more.
	closing, closed, stopped atomic.Bool
	once                     sync.Once

	objMu sync.Mutex // guards qps and srqs: what Close still has to close; and the QP totals
	qps   map[*QP]struct{}
	srqs  map[*SRQ]struct{}
	// QPs created and closed, and the counters of the closed ones (Stats)
	qpsCreated, qpsClosed uint64
	qpsRetired            QPCounters
}

// engine is one engine of an adapter and who runs it. Its poller writes pollMu and polled
// at every poll: the padding keeps them off the cache lines of the other engines' (the
// structs are allocated one after the other).
type engine struct {
	pollMu  sync.Mutex   // ProgressInline: one poller at a time
	polled  atomic.Int64 // ProgressInline: a.now() of the application's last poll of it (made or tried), to within Adapter.pollGrain
	_       [112]byte
	eng     *transport.Engine
	link    link.Link     // its share of the adapter's queues
	runDone chan struct{} // closed when its goroutine (fallback or Run) returns
	handoff chan struct{} // ProgressInline: the application waits: the fallback takes over
}

// OpenLink opens an adapter on any link.Link (an AF_XDP link, or a simlink in tests), with
// one engine (Options.Engines must be 0 or 1). The adapter owns the link from now on and
// closes it in Close. Errors: STATUS_INVALID_PARAMETER for a nil link or an option out of
// range.
func OpenLink(link link.Link, opts Options) (*Adapter, error) {
	if link == nil {
		return nil, errorf(StatusInvalidParameter, "nil link")
	}
	if err := opts.normalize(link); err != nil {
		return nil, err
	}
	links := opts.x.Links
	if len(links) == 0 {
		if opts.Engines > 1 {
			return nil, errorf(StatusInvalidParameter, "%d engines on one link: a link of its own for each is needed (Open splits an interface's queues)", opts.Engines)
		}
		links = linksOf(link)
	}
	a := &Adapter{link: link, opts: opts, start: time.Now(), log: opts.Logger,
		umem: opts.x.UMEM, heap: opts.x.Heap,
		reg:    memreg.NewRegistry(opts.MaxMemoryEntries),
		events: make(chan func(), 256), cqs: make(chan *CQ, maxCQs),
		stopEv: make(chan struct{}), evDone: make(chan struct{})}
	a.ports.Store(49152)
	a.now = func() int64 { return int64(time.Since(a.start)) }
	if a.umem != nil {
		if err := a.reg.AttachUMEM(a.umem); err != nil {
			return nil, memError(err)
		}
	}
	cfg := transport.DefaultConfig(link)
	cfg.Now = a.now
	cfg.Resolver = a.reg // a *memreg.Registry is a transport.MemoryResolver
	cfg.ZeroCopyTx = opts.ZeroCopyTx && a.umem != nil
	cfg.MaxQPs = opts.MaxQPs
	cfg.RetryTimeout, cfg.RNRTimeout, cfg.KeepAlive = opts.RetryTimeout, opts.RNRTimeout, opts.KeepAlive
	cfg.PackLimit = opts.PackLimit
	cfg.ConnectTimeout = opts.ConnectTimeout
	if opts.x.Engine != nil {
		opts.x.Engine(&cfg)
		a.now = cfg.Now
	}
	grp, err := transport.NewGroup(cfg, links)
	if err != nil {
		return nil, wrap(StatusInvalidParameter, err)
	}
	a.grp = grp
	for i, e := range grp.Engines() {
		a.engs = append(a.engs, &engine{eng: e, link: links[i], runDone: make(chan struct{}), handoff: make(chan struct{}, 1)})
	}
	a.logEvent(slog.LevelInfo, "adapter open", "max_payload", link.MaxPayload(), "progress", opts.Progress.String(),
		"zero_copy_tx", cfg.ZeroCopyTx, "max_qps", grp.MaxQPs(), "engines", len(a.engs))
	go a.runEvents()
	if opts.Progress == ProgressInline {
		for _, s := range a.engs {
			go a.fallback(s)
		}
	} else {
		spin := opts.Spin
		if opts.Progress == ProgressBusy {
			spin = -1
		}
		ctx, cancel := context.WithCancel(context.Background())
		a.cancel = cancel
		for _, s := range a.engs {
			go func() {
				defer close(s.runDone)
				_ = s.eng.Run(ctx, spin)
			}()
		}
	}
	return a, nil
}

// linksOf is the one link of an adapter of one engine.
func linksOf(l link.Link) []link.Link { return []link.Link{l} }

// normalize fills in the defaults of o for an adapter on link and checks what was given.
func (o *Options) normalize(link link.Link) error {
	def := DefaultOptions()
	if !o.Progress.valid() {
		return errorf(StatusInvalidParameter, "progress mode %d", o.Progress)
	}
	if o.Spin == 0 {
		o.Spin = def.Spin
	}
	if o.InlineFallback <= 0 {
		o.InlineFallback = def.InlineFallback
	}
	if o.MaxMemoryEntries == 0 {
		o.MaxMemoryEntries = def.MaxMemoryEntries
	}
	if o.PeerPort == 0 {
		o.PeerPort = link.LocalAddr().Port()
	}
	if o.HeapSize == 0 {
		o.HeapSize = def.HeapSize
	}
	for _, d := range []struct {
		v    *time.Duration
		def  time.Duration
		name string
	}{{&o.RetryTimeout, def.RetryTimeout, "RetryTimeout"}, {&o.RNRTimeout, def.RNRTimeout, "RNRTimeout"},
		{&o.ConnectTimeout, def.ConnectTimeout, "ConnectTimeout"}} {
		if *d.v == 0 {
			*d.v = d.def
		}
		if *d.v < 0 {
			return errorf(StatusInvalidParameter, "%s %v is negative", d.name, *d.v)
		}
	}
	if o.KeepAlive == 0 {
		o.KeepAlive = def.KeepAlive
	}
	if o.HeapSize < 0 || o.MaxMemoryEntries < 0 || o.MaxQPs < 0 {
		return errorf(StatusInvalidParameter, "negative size: heap %d, memory entries %d, QPs %d",
			o.HeapSize, o.MaxMemoryEntries, o.MaxQPs)
	}
	if o.PackLimit > transport.MaxPackLimit {
		return errorf(StatusInvalidParameter, "pack limit %d over %d", o.PackLimit, transport.MaxPackLimit)
	}
	if o.Engines < 0 || o.Engines > transport.MaxEngines {
		return errorf(StatusInvalidParameter, "%d engines (at most %d)", o.Engines, transport.MaxEngines)
	}
	return nil
}

// Defaults of Options (docs/RELIABILITY.md, "Liveness budgets", gives the reasons).
const (
	// DefaultRetryTimeout is Options.RetryTimeout's default: a peer (or path) that stalls for
	// less keeps its connections.
	DefaultRetryTimeout = 10 * time.Second
	// DefaultRNRTimeout is Options.RNRTimeout's default.
	DefaultRNRTimeout = 10 * time.Second
	// DefaultKeepAlive is Options.KeepAlive's default: a dead idle peer is noticed within it.
	DefaultKeepAlive = 30 * time.Second
	// DefaultConnectTimeout is Options.ConnectTimeout's default.
	DefaultConnectTimeout = 30 * time.Second
	// DefaultHeapSize is Options.HeapSize's default: the UMEM heap Open gives an adapter.
	DefaultHeapSize = 16 << 20
	// DefaultEngines is Options.Engines's default (docs/DATAPATH.md, "Several engines",
	// says why).
	DefaultEngines = 1
)

// LocalAddr returns the adapter's IP address and UDP port.
func (a *Adapter) LocalAddr() netip.AddrPort { return a.link.LocalAddr() }

// AdapterInfo is NDK_ADAPTER_INFO: the limits and features of the adapter.
type AdapterInfo struct {
	// Version is the NDK version implemented (major<<16 | minor).
	Version uint32
	// VendorID and DeviceID are 0: there is no RDMA hardware.
	VendorID, DeviceID uint32
	// MaxRegistrationSize and MaxWindowSize are the largest region and window in bytes.
	MaxRegistrationSize, MaxWindowSize uint64
	// FRMRPageCount is the most pages a fast-register MR may be initialised for.
	FRMRPageCount uint32
	// MaxInitiatorRequestSge, MaxReceiveRequestSge and MaxReadRequestSge bound SGEs per
	// request.
	MaxInitiatorRequestSge, MaxReceiveRequestSge, MaxReadRequestSge uint32
	// MaxTransferLength is the most bytes one Send, Receive, Read or Write moves.
	MaxTransferLength uint32
	// MaxInlineDataSize is the largest InlineDataSize a QP may have.
	MaxInlineDataSize uint32
	// MaxInboundReadLimit and MaxOutboundReadLimit bound IRD and ORD.
	MaxInboundReadLimit, MaxOutboundReadLimit uint32
	// MaxReceiveQueueDepth and MaxInitiatorQueueDepth bound a QP's queues.
	MaxReceiveQueueDepth, MaxInitiatorQueueDepth uint32
	// MaxSrqDepth bounds an SRQ (0: SRQs are not supported).
	MaxSrqDepth uint32
	// MaxCqDepth bounds a CQ.
	MaxCqDepth uint32
	// LargeRequestThreshold is the size above which Read/Write beat Send/Receive: one
	// packet's payload.
	LargeRequestThreshold uint32
	// MaxCallerData and MaxCalleeData bound the private data of connect and accept/reject.
	MaxCallerData, MaxCalleeData uint32
	// Flags are the NDK_ADAPTER_FLAG_* the adapter sets.
	Flags AdapterFlags
	// RdmaTechnology is NDK_RDMA_TECHNOLOGY: 0 (NdkUndefined), our own protocol over UDP.
	RdmaTechnology uint32
	// MaxQPs is the most QPs the adapter holds at once (Options.MaxQPs). Not a field of
	// NDK_ADAPTER_INFO, which bounds no object count; InfiniBand reports it as max_qp.
	MaxQPs uint32
}

// QueryAdapterInfo returns the adapter's limits (NdkQueryAdapterInfo). Every limit is one
// the implementation enforces.
func (a *Adapter) QueryAdapterInfo() AdapterInfo {
	return AdapterInfo{
		Version:                1<<16 | 2,
		MaxRegistrationSize:    maxRegistration,
		MaxWindowSize:          maxRegistration,
		FRMRPageCount:          frmrPageCount,
		MaxInitiatorRequestSge: transport.MaxSGE,
		MaxReceiveRequestSge:   transport.MaxSGE,
		MaxReadRequestSge:      transport.MaxSGE,
		MaxTransferLength:      uint32(maxTransfer),
		MaxInlineDataSize:      maxInline,
		MaxInboundReadLimit:    maxReadLimit,
		MaxOutboundReadLimit:   maxReadLimit,
		MaxReceiveQueueDepth:   maxQueueDepth,
		MaxInitiatorQueueDepth: maxQueueDepth,
		MaxSrqDepth:            maxSRQDepth,
		MaxCqDepth:             maxCQDepth,
		LargeRequestThreshold:  uint32(a.link.MaxPayload() - transport.PacketOverhead),
		MaxCallerData:          transport.MaxPrivateData,
		MaxCalleeData:          transport.MaxPrivateData,
		Flags:                  AdapterReadSinkNotRequired | AdapterCQInterruptModeration | AdapterRDMAReadLocalInvalidate,
		MaxQPs:                 uint32(a.grp.MaxQPs()),
	}
}

// Alloc returns size bytes of the adapter's pinned UMEM, aligned to align (a power of two),
// for registration: regions on it transmit zero-copy. It fails with
// STATUS_NOT_SUPPORTED when the adapter has no UMEM heap, STATUS_INSUFFICIENT_RESOURCES
// when the heap is exhausted, STATUS_INVALID_PARAMETER for a bad size or alignment.
func (a *Adapter) Alloc(size, align int) ([]byte, error) {
	if a.heap == nil {
		return nil, errorf(StatusNotSupported, "adapter has no UMEM heap")
	}
	b, err := a.heap.Alloc(size, align)
	return b, memError(err)
}

// Free returns a buffer from Alloc. The caller deregisters its regions first.
func (a *Adapter) Free(b []byte) error {
	if a.heap == nil {
		return errorf(StatusNotSupported, "adapter has no UMEM heap")
	}
	return memError(a.heap.Free(b))
}

// Close closes the adapter and everything of it still open. Connected QPs disconnect (the
// peer is told; Close waits for its answer at most closeDisconnectWait), then every QP and
// SRQ is closed as its own Close does (outstanding requests and receives complete
// STATUS_CANCELLED, and release the memory they held), the engine stops, memory pinned for
// regions is unpinned, no further callbacks are delivered once it returns, and the link is
// closed (and the AF_XDP device and XDP program, for an adapter from Open). Deregistering
// an MR afterwards returns at once. Objects of the adapter are unusable afterwards. It
// never fails; ctx bounds the waits (the disconnects, the engine's closing of the QPs, a
// callback in progress), each of which is bounded anyway.
func (a *Adapter) Close(ctx context.Context) error {
	a.once.Do(func() {
		a.closing.Store(true)
		a.closeObjects(ctx)
		a.stop(ctx)
		a.logEvent(slog.LevelInfo, "adapter closed", "up", time.Since(a.start).Round(time.Millisecond))
	})
	return nil
}

// stop stops the engine and the event goroutine and closes the link (and device), without
// a word to any peer. ctx bounds the wait for a callback in progress.
func (a *Adapter) stop(ctx context.Context) {
	a.closed.Store(true)
	if a.cancel != nil {
		a.cancel()
	}
	for _, s := range a.engs {
		s.link.Wake() // an engine goroutine (or an inline fallback) asleep in Wait returns
	}
	a.handOff(0) // an inline fallback asleep between its looks returns
	for _, s := range a.engs {
		<-s.runDone
		s.pollMu.Lock() // no inline poll in progress from now on
	}
	a.stopped.Store(true)
	a.reg.Close() // unpins what regions still pin: nothing touches their memory now
	close(a.stopEv)
	select {
	case <-a.evDone:
	case <-ctx.Done():
	}
	for _, s := range a.engs {
		if s.link != a.link {
			_ = s.link.Close()
		}
	}
	_ = a.link.Close()
	if a.dev != nil {
		_ = a.dev.Close()
	}
}

// Bounds of Adapter.Close's waits, whatever its context.
const (
	// closeDisconnectWait bounds the wait for peers to answer the disconnects of the QPs
	// still connected: they are told; a peer that does not answer in time notices through
	// its own keepalive or retransmission timeout.
	closeDisconnectWait = 200 * time.Millisecond
	// closeObjectsWait bounds the engine's closing of the QPs and SRQs (it flushes them in
	// its next round, plus what zero-copy transmits still need).
	closeObjectsWait = 2 * time.Second
)

// closeObjects disconnects the QPs still connected and closes every QP and SRQ of the
// adapter while the engine still runs.
func (a *Adapter) closeObjects(ctx context.Context) {
	a.objMu.Lock()
	qps := make([]*QP, 0, len(a.qps))
	for q := range a.qps {
		qps = append(qps, q)
	}
	srqs := make([]*SRQ, 0, len(a.srqs))
	for s := range a.srqs {
		srqs = append(srqs, s)
	}
	a.objMu.Unlock()

	dctx, cancel := context.WithTimeout(ctx, closeDisconnectWait)
	var discs []*transport.Disconnecting
	for _, q := range qps {
		if q.tq.State() == transport.QPConnected {
			if c := q.conn.Load(); c != nil {
				c.localDisc.Store(true) // ours: no disconnect event
			}
			discs = append(discs, q.tq.StartDisconnect(closeDisconnectWait))
		}
	}
	for _, d := range discs {
		_ = awaitDisc(dctx, a, d)
	}
	cancel()

	cctx, cancel := context.WithTimeout(ctx, closeObjectsWait)
	defer cancel()
	for _, q := range qps {
		_ = q.close(cctx)
	}
	for _, s := range srqs {
		_ = s.close(cctx)
	}
}

// runEvents runs callbacks (CQ notifications, connect and disconnect events) one at a
// time, off the engine goroutine, so a slow callback never stalls the protocol.
func (a *Adapter) runEvents() {
	defer close(a.evDone)
	for {
		select {
		case cq := <-a.cqs:
			cq.deliverNotification()
		case fn := <-a.events:
			fn()
		case <-a.stopEv:
			return
		}
	}
}

// event queues fn for the event goroutine; it never blocks the caller (a full queue runs
// it on a goroutine of its own).
func (a *Adapter) event(fn func()) {
	if a.closed.Load() {
		return
	}
	select {
	case a.events <- fn:
	default:
		go fn()
	}
}

// ephemeralPort returns a local port number for an outgoing connection's address
// (NDKPI: the provider picks from 49152-65535).
func (a *Adapter) ephemeralPort() uint16 {
	return uint16(49152 + (a.ports.Add(1)-49152)%16384)
}

var errClosed = errors.New("adapter closed")

// checkOpen returns STATUS_DEVICE_REMOVED after Close.
func (a *Adapter) checkOpen() error {
	if a.closing.Load() {
		return wrap(StatusDeviceRemoved, errClosed)
	}
	return nil
}

// String describes the adapter by its address.
func (a *Adapter) String() string { return fmt.Sprintf("ndk adapter on %v", a.link.LocalAddr()) }
