//go:build linux

package main

import (
	"fmt"
	"log/slog"

	"github.com/xdpndk/xdpndk/ndk"
	"github.com/xdpndk/xdpndk/xdp"
)

// openAdapter opens an adapter on the interface iface (ndk.Open: AF_XDP sockets on its
// queues, the XDP program that steers our UDP port to them) with a UMEM heap of heap bytes
// for Adapter.Alloc. The device's messages (the mode it got, fallbacks) and the adapter's
// (connections) go to log.
func openAdapter(iface string, heap int, log *slog.Logger) (*ndk.Adapter, error) {
	opts := ndk.DefaultOptions()
	opts.HeapSize = heap
	opts.Logger = log
	// DefaultConfig: UDP port xdp.DefaultPort (both hosts use the same) on every RX queue.
	a, err := ndk.Open(xdp.DefaultConfig(iface), opts)
	if err != nil {
		return nil, fmt.Errorf("open an adapter on %s: %w", iface, err)
	}
	return a, nil
}
