//go:build !linux

package memreg

import "errors"

// ErrNotSupported is returned where the platform has no AF_XDP UMEM.
var ErrNotSupported = errors.New("umem: not supported on this platform")

// NewUMEM returns ErrNotSupported: UMEMs exist only on Linux.
func NewUMEM(opts UMEMOptions) (*UMEM, error) { return nil, ErrNotSupported }

// Close does nothing on this platform.
func (u *UMEM) Close() error { return nil }
