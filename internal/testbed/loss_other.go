//go:build !linux

package testbed

// SetRouterLoss returns ErrNotSupported off Linux.
func (b *Bed) SetRouterLoss(toB, toA float64) error { return ErrNotSupported }

// RouterLoss returns ErrNotSupported off Linux.
func (b *Bed) RouterLoss() (toB, toA LossStats, err error) { return toB, toA, ErrNotSupported }
