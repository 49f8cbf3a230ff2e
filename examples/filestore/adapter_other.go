//go:build !linux

package main

import (
	"fmt"
	"log/slog"

	"github.com/xdpndk/xdpndk/ndk"
)

// openAdapter fails: ndk.Open needs AF_XDP, which only Linux has.
func openAdapter(iface string, _ int, _ *slog.Logger) (*ndk.Adapter, error) {
	return nil, fmt.Errorf("open an adapter on %s: %w: AF_XDP needs Linux", iface, ndk.StatusNotSupported)
}
