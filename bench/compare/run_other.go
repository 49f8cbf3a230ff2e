//go:build !linux

package compare

import (
	"context"
	"errors"

	"github.com/xdpndk/xdpndk/internal/testbed"
)

// ErrNotSupported is returned by Run on systems other than Linux.
var ErrNotSupported = errors.New("compare needs Linux (network namespaces, XDP, AF_XDP)")

// BedOptions returns the bed of a run of runs repetitions (see the Linux version).
func BedOptions(runs int) testbed.Options {
	return testbed.Options{MTU: 9000, Queues: max(2, 1+runs), Name: "compare", StaticNeighbors: true}
}

// Run returns ErrNotSupported.
func Run(ctx context.Context, opts Options) (*Results, error) { return nil, ErrNotSupported }

// RunBed returns ErrNotSupported.
func RunBed(ctx context.Context, bed *testbed.Bed, opts Options) (*Results, error) {
	return nil, ErrNotSupported
}
