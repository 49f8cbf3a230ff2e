//go:build !linux

package memreg

import "errors"

// mlock is not available here: memory outside a UMEM cannot be pinned.
func mlock(va, n uint64) error { return errors.ErrUnsupported }

func munlock(va, n uint64) {}
