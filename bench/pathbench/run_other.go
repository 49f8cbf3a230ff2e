//go:build !linux

package pathbench

import (
	"context"
	"errors"
)

// ErrNotSupported is returned by Run on systems other than Linux.
var ErrNotSupported = errors.New("pathbench needs Linux (network namespaces, XDP, AF_XDP, tc)")

// Run returns ErrNotSupported.
func Run(ctx context.Context, opts Options) (*Results, error) { return nil, ErrNotSupported }
