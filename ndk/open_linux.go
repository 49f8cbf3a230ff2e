package ndk

import (
	"errors"
	"log/slog"

	"github.com/xdpndk/xdpndk/xdp"
)

// Open opens an adapter on an interface through AF_XDP (xdp.Open with cfg): an AF_XDP
// socket on every RX queue of the interface (or on cfg.Queues), served by the adapter's
// Options.Engines engines (by default one; never more than the queues), the XDP steering
// program attached, and the device's UMEM as the adapter's
// memory (Adapter.Alloc buffers leave zero-copy where the NIC allows), with a heap of
// Options.HeapSize bytes (cfg.HeapSize is replaced by it). Close detaches the program and
// frees everything. Call it in the network namespace of the interface. The device logs
// the mode it got, and every fallback with its reason, where the adapter logs its events:
// to Options.Logger; when that is nil, to cfg.Logger (xdp.DefaultConfig's is
// slog.Default()); nothing if neither is set. ZeroCopyTx is turned on when the sockets run
// in zero-copy mode. Errors: STATUS_DEVICE_BUSY when another AF_XDP socket or XDP program
// holds the interface (the error names the process), STATUS_DEVICE_NOT_READY when the device
// cannot open for another reason (the error says why and how to fix it),
// STATUS_INSUFFICIENT_RESOURCES when its UMEM has no room for the heap,
// STATUS_INVALID_PARAMETER for an option out of range.
func Open(cfg xdp.Config, opts Options) (*Adapter, error) {
	if opts.HeapSize < 0 {
		return nil, errorf(StatusInvalidParameter, "heap size %d", opts.HeapSize)
	}
	if opts.HeapSize == 0 {
		opts.HeapSize = DefaultHeapSize
	}
	cfg.HeapSize = opts.HeapSize
	if opts.Logger != nil {
		cfg.Logger = opts.Logger // not DefaultConfig's slog.Default: the caller chose this one
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	d, err := xdp.Open(cfg)
	if errors.Is(err, xdp.ErrBusy) {
		return nil, wrap(StatusDeviceBusy, err) // the message names who holds the interface
	}
	if err != nil {
		return nil, wrap(StatusDeviceNotReady, err)
	}
	heap, err := d.UMEM().NewHeap()
	if err != nil {
		_ = d.Close()
		return nil, wrap(StatusInsufficientResources, err)
	}
	// Payloads leave by reference when the socket is truly zero-copy (a NIC driver with
	// AF_XDP zero-copy). In copy mode (veth, generic XDP) the kernel copies every
	// descriptor anyway and referencing measured slower than copying (docs/NDK.md), unless
	// the caller asks for it with Options.ZeroCopyTx.
	opts.x.UMEM, opts.x.Heap = d.UMEM(), heap
	opts.ZeroCopyTx = opts.ZeroCopyTx || d.Mode().Socket.ZeroCopy
	if opts.Engines == 0 {
		opts.Engines = DefaultEngines
	}
	if n := min(opts.Engines, len(d.Queues())); n > 1 {
		// Each engine serves a share of the queues (queue k of those served goes to engine
		// k mod n), so a peer with as many engines and queues has the engine of the same
		// index at the other end of every queue (veth; docs/DATAPATH.md).
		for _, l := range d.DeviceLinks(n) {
			opts.x.Links = append(opts.x.Links, l)
		}
	}
	if wrap := opts.x.WrapLink; wrap != nil && (len(opts.x.Links) > 0 || opts.Engines <= 1) {
		links := opts.x.Links
		if len(links) == 0 { // one engine on the device's link
			links = linksOf(d.DeviceLink())
		}
		for i, l := range links {
			w, err := wrap(l, i)
			if err != nil {
				_ = d.Close()
				return nil, errorf(StatusInvalidParameter, "wrap the link of engine %d: %v", i, err)
			}
			links[i] = w
		}
		opts.x.Links = links
	}
	a, err := OpenLink(d.DeviceLink(), opts)
	if err != nil {
		_ = d.Close()
		return nil, err
	}
	a.dev = d
	return a, nil
}

// Device returns the AF_XDP device of an adapter from Open (nil otherwise): its mode, its
// sockets' and XDP program's counters.
func (a *Adapter) Device() *xdp.Device {
	d, _ := a.dev.(*xdp.Device)
	return d
}
