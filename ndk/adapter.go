package ndk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

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
	// UMEM, if set, is the pinned memory the link transmits from: regions inside it leave
	// zero-copy, FastRegister takes its pages, and Adapter.Alloc carves buffers from Heap.
	// Open sets both from the AF_XDP device.
	UMEM *memreg.UMEM
	// Heap is UMEM's heap for Adapter.Alloc (nil: Alloc is not supported).
	Heap *memreg.Heap
	// ZeroCopyTx makes the engine hand payloads in the UMEM to the link by reference; a
	// request then completes only when the link has finished with its bytes. Open turns it
	// on by itself when the AF_XDP socket runs in zero-copy mode.
	ZeroCopyTx bool
	// Engine, if set, adjusts the transport engine's configuration (tests and benchmarks:
	// clocks, retry limits).
	Engine func(*transport.Config)
}

// DefaultOptions returns the default Options.
func DefaultOptions() Options {
	return Options{Progress: ProgressInline, Spin: 50 * time.Microsecond, InlineFallback: 500 * time.Microsecond,
		MaxMemoryEntries: 4096}
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

// Adapter is an open NDK adapter: a link, the protocol engine running on it, and the
// registry of its memory. Its methods are safe for concurrent use.
type Adapter struct {
	link  transport.Link
	eng   *transport.Engine
	reg   *memreg.Registry
	opts  Options
	start time.Time
	now   func() int64

	cancel  context.CancelFunc
	runDone chan struct{}
	pollMu  sync.Mutex    // ProgressInline: one poller at a time
	polled  atomic.Int64  // ProgressInline: a.now() of the application's last Poll (made or tried)
	handoff chan struct{} // ProgressInline: the application armed a CQ: the fallback takes over

	events chan func() // callbacks, run one at a time by the event goroutine
	cqs    chan *CQ    // CQs with a notification to deliver
	stopEv chan struct{}
	evDone chan struct{}
	ncq    atomic.Int32
	ports  atomic.Uint32 // next ephemeral port
	dev    io.Closer     // the AF_XDP device of an adapter from Open, closed with it
	closed atomic.Bool
	once   sync.Once
}

// OpenLink opens an adapter on any transport.Link (an AF_XDP link, or a simlink in tests).
// The adapter owns the link from now on and closes it in Close.
func OpenLink(link transport.Link, opts Options) (*Adapter, error) {
	if link == nil {
		return nil, errorf(StatusInvalidParameter, "nil link")
	}
	if opts.Spin == 0 {
		opts.Spin = DefaultOptions().Spin
	}
	if opts.InlineFallback <= 0 {
		opts.InlineFallback = DefaultOptions().InlineFallback
	}
	if opts.MaxMemoryEntries == 0 {
		opts.MaxMemoryEntries = DefaultOptions().MaxMemoryEntries
	}
	if !opts.Progress.valid() {
		return nil, errorf(StatusInvalidParameter, "progress mode %d", opts.Progress)
	}
	if opts.PeerPort == 0 {
		opts.PeerPort = link.LocalAddr().Port()
	}
	a := &Adapter{link: link, opts: opts, start: time.Now(),
		reg:    memreg.NewRegistry(opts.MaxMemoryEntries),
		events: make(chan func(), 256), cqs: make(chan *CQ, maxCQs),
		stopEv: make(chan struct{}), evDone: make(chan struct{})}
	a.ports.Store(49152)
	a.now = func() int64 { return int64(time.Since(a.start)) }
	if opts.UMEM != nil {
		if err := a.reg.AttachUMEM(opts.UMEM); err != nil {
			return nil, memError(err)
		}
	}
	cfg := transport.DefaultConfig(link)
	cfg.Now = a.now
	cfg.Resolver = a.reg // a *memreg.Registry is a transport.MemoryResolver
	cfg.ZeroCopyTx = opts.ZeroCopyTx && opts.UMEM != nil
	cfg.MaxQPs = opts.MaxQPs
	if opts.Engine != nil {
		opts.Engine(&cfg)
		a.now = cfg.Now
	}
	eng, err := transport.NewEngine(cfg)
	if err != nil {
		return nil, wrap(StatusInvalidParameter, err)
	}
	a.eng = eng
	go a.runEvents()
	if opts.Progress == ProgressInline {
		a.runDone = make(chan struct{})
		a.handoff = make(chan struct{}, 1)
		go a.fallback()
	} else {
		spin := opts.Spin
		if opts.Progress == ProgressBusy {
			spin = -1
		}
		ctx, cancel := context.WithCancel(context.Background())
		a.cancel, a.runDone = cancel, make(chan struct{})
		go func() {
			defer close(a.runDone)
			_ = eng.Run(ctx, spin)
		}()
	}
	return a, nil
}

// Engine returns the adapter's protocol engine (statistics, benchmarks).
func (a *Adapter) Engine() *transport.Engine { return a.eng }

// Link returns the adapter's link.
func (a *Adapter) Link() transport.Link { return a.link }

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
		MaxQPs:                 uint32(a.eng.MaxQPs()),
	}
}

// Alloc returns size bytes of the adapter's pinned UMEM, aligned to align (a power of two),
// for registration: regions on it transmit zero-copy. It fails with
// STATUS_NOT_SUPPORTED when the adapter has no UMEM heap, STATUS_INSUFFICIENT_RESOURCES
// when the heap is exhausted, STATUS_INVALID_PARAMETER for a bad size or alignment.
func (a *Adapter) Alloc(size, align int) ([]byte, error) {
	if a.opts.Heap == nil {
		return nil, errorf(StatusNotSupported, "adapter has no UMEM heap")
	}
	b, err := a.opts.Heap.Alloc(size, align)
	return b, memError(err)
}

// Free returns a buffer from Alloc. The caller deregisters its regions first.
func (a *Adapter) Free(b []byte) error {
	if a.opts.Heap == nil {
		return errorf(StatusNotSupported, "adapter has no UMEM heap")
	}
	return memError(a.opts.Heap.Free(b))
}

// Close stops the engine, delivers no further callbacks once it returns, and closes the
// link (and the AF_XDP device and XDP program, for an adapter from Open). Objects of the
// adapter are unusable afterwards. It never fails; ctx bounds only the wait for a callback
// in progress.
func (a *Adapter) Close(ctx context.Context) error {
	a.once.Do(func() {
		a.closed.Store(true)
		if a.cancel != nil {
			a.cancel()
		}
		a.link.Wake() // an engine goroutine (or an inline fallback) asleep in Wait returns
		a.handOff()   // an inline fallback asleep between its looks returns

		if a.runDone != nil {
			<-a.runDone
		}
		a.pollMu.Lock() // no inline poll in progress from now on
		close(a.stopEv)
		select {
		case <-a.evDone:
		case <-ctx.Done():
		}
		_ = a.link.Close()
		if a.dev != nil {
			_ = a.dev.Close()
		}
	})
	return nil
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
	if a.closed.Load() {
		return wrap(StatusDeviceRemoved, errClosed)
	}
	return nil
}

// String describes the adapter by its address.
func (a *Adapter) String() string { return fmt.Sprintf("ndk adapter on %v", a.link.LocalAddr()) }
