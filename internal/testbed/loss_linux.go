package testbed

import (
	"errors"
	"fmt"

	"github.com/xdpndk/xdpndk/internal/tcloss"
)

// SetRouterLoss makes the router of a routed bed drop, at random, a fraction toB of the
// packets it sends towards B and toA of those towards A (0 to 1 each; 0 drops nothing): a
// tc BPF classifier on the egress of its interface on each side (package tcloss, which
// stands in for netem's loss, which this kernel lacks). The loss comes before a bottleneck's
// queue (SetBottleneck). Close removes the programs. It fails for the plain bed, a closed
// bed, or a probability out of range.
func (b *Bed) SetRouterLoss(toB, toA float64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.routedOpen("set router loss"); err != nil {
		return err
	}
	for i, p := range [2]float64{toB, toA} {
		if p < 0 || p > 1 || p != p {
			return fmt.Errorf("%w: loss %v not in [0, 1]", ErrInvalidOptions, p)
		}
		h := [2]*Host{b.R.B, b.R.A}[i]
		if b.losses[i] == nil {
			if p == 0 {
				continue
			}
			var l *tcloss.Loss
			err := h.Do(func() (err error) { l, err = tcloss.Attach(h.IfIndex, true); return err })
			if err != nil {
				return fmt.Errorf("set router loss on %s/%s: %w", h.NS, h.Ifname, err)
			}
			b.losses[i] = l
		}
		if err := b.losses[i].(*tcloss.Loss).Set(p); err != nil {
			return fmt.Errorf("set router loss on %s/%s: %w", h.NS, h.Ifname, err)
		}
	}
	return nil
}

// RouterLoss returns what the router's loss programs (SetRouterLoss) passed and dropped,
// towards B and towards A (zero where none is set).
func (b *Bed) RouterLoss() (toB, toA LossStats, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.routedOpen("router loss"); err != nil {
		return toB, toA, err
	}
	var out [2]LossStats
	var errs []error
	for i, l := range b.losses {
		if l == nil {
			continue
		}
		p, d, err := l.(*tcloss.Loss).Counters()
		errs = append(errs, err)
		out[i] = LossStats{Passed: p, Dropped: d}
	}
	return out[0], out[1], errors.Join(errs...)
}
