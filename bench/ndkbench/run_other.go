//go:build !linux

package ndkbench

import (
	"context"
	"errors"

	"github.com/xdpndk/xdpndk/bench/linkbench"
	"github.com/xdpndk/xdpndk/internal/testbed"
)

// ErrNotSupported is returned by Run and RunBed on systems other than Linux.
var ErrNotSupported = errors.New("ndkbench needs Linux (network namespaces, XDP, AF_XDP)")

// BedOptions returns the test bed the benchmark runs on (see the Linux version).
func BedOptions(name string) testbed.Options { return linkbench.BedOptions(name) }

// Run returns ErrNotSupported.
func Run(ctx context.Context, opts Options) (*Results, error) { return nil, ErrNotSupported }

// RunBed returns ErrNotSupported.
func RunBed(ctx context.Context, bed *testbed.Bed, opts Options) (*Results, error) {
	return nil, ErrNotSupported
}
