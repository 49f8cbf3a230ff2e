//go:build !linux

package linkbench

import (
	"context"
	"errors"

	"github.com/xdpndk/xdpndk/internal/testbed"
)

// ErrNotSupported is returned by Run and RunBed on systems other than Linux.
var ErrNotSupported = errors.New("linkbench needs Linux (network namespaces, XDP, AF_XDP)")

// errAsavieUnavailable is nil here: the whole benchmark is unavailable (ErrNotSupported),
// not one system of it.
var errAsavieUnavailable error

// BedOptions returns the test bed options the benchmark runs on (see the Linux version).
func BedOptions(name string) testbed.Options {
	return testbed.Options{MTU: BedMTU, Queues: 2, Name: name, StaticNeighbors: true}
}

// Run returns ErrNotSupported.
func Run(ctx context.Context, opts Options) (*Results, error) { return nil, ErrNotSupported }

// RunBed returns ErrNotSupported.
func RunBed(ctx context.Context, bed *testbed.Bed, opts Options) (*Results, error) {
	return nil, ErrNotSupported
}
