package ndk

import (
	"github.com/xdpndk/xdpndk/xdp"
)

// Open opens an adapter on an interface through AF_XDP (xdp.Open with cfg): an AF_XDP
// socket on every RX queue of the interface (or on cfg.Queues), all served by the adapter's
// one engine through the device's DeviceLink, the XDP steering program attached, and the
// device's UMEM as the adapter's memory (Adapter.Alloc buffers leave zero-copy where the NIC
// allows). Close detaches the program and frees everything. Call it in the network namespace
// of the interface. Options.UMEM and Heap are set from the device; ZeroCopyTx is turned on
// when the sockets run in zero-copy mode. Errors: STATUS_DEVICE_NOT_READY when the device
// cannot open (the error says why and how to fix it), STATUS_INSUFFICIENT_RESOURCES when its
// UMEM has no room for a heap.
func Open(cfg xdp.Config, opts Options) (*Adapter, error) {
	if cfg.HeapSize == 0 {
		cfg.HeapSize = DefaultHeapSize
	}
	d, err := xdp.Open(cfg)
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
	opts.UMEM, opts.Heap = d.UMEM(), heap
	opts.ZeroCopyTx = opts.ZeroCopyTx || d.Mode().Socket.ZeroCopy
	a, err := OpenLink(d.DeviceLink(), opts)
	if err != nil {
		_ = d.Close()
		return nil, err
	}
	a.dev = d
	return a, nil
}

// DefaultHeapSize is the UMEM heap Open gives an adapter when cfg.HeapSize is 0.
const DefaultHeapSize = 16 << 20

// Device returns the AF_XDP device of an adapter from Open (nil otherwise).
func (a *Adapter) Device() *xdp.Device {
	d, _ := a.dev.(*xdp.Device)
	return d
}
