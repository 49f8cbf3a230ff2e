package ndk

import (
	"context"
	"time"
)

// Several engines (Options.Engines; docs/NDK.md, "Several engines"). Each engine of an
// adapter runs on a goroutine of its own (the inline fallback, or Run) and is polled inline
// by the CQs whose QPs it holds; a CQ fed by one engine has one producer, as with one
// engine. A CQ that QPs of several engines complete into has several: from the moment a
// second engine's QP is attached to it, every completion it takes holds a lock (uncontended
// unless two engines complete into it at once). An application that gives each thread its
// own QPs and CQs keeps its engines apart.

// feedCQs records that the QP of cfg completes from engine i into its CQs.
func (a *Adapter) feedCQs(cfg *QPConfig, i int) error {
	if err := a.feed(cfg.ReceiveCQ, i); err != nil {
		return err
	}
	return a.feed(cfg.InitiatorCQ, i)
}

// feedWait bounds feed's wait for the engines already feeding a CQ.
const feedWait = 5 * time.Second

// feed records that QPs of engine i complete into cq, before any of them can: a CQ that
// another engine feeds already becomes shared (its pushes lock), and feed waits until that
// engine ran a round, so that no push of it without the lock is still in progress.
func (a *Adapter) feed(cq *CQ, i int) error {
	bit := uint64(1) << i
	cq.feedMu.Lock()
	defer cq.feedMu.Unlock()
	old := cq.engines.Load()
	if old&bit != 0 {
		return nil
	}
	if old != 0 && !cq.shared.Load() {
		cq.shared.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), feedWait)
		defer cancel()
		for j, s := range a.engs {
			if old&(1<<j) == 0 {
				continue
			}
			ch := s.eng.Sync()
			err := a.await(ctx, func() bool {
				select {
				case <-ch:
					return true
				default:
					return false
				}
			})
			if err != nil {
				if StatusOf(err) == StatusUnsuccessful {
					err = wrap(StatusIOTimeout, err) // the engine ran no round in feedWait
				}
				return err
			}
		}
	}
	cq.engines.Or(bit)
	return nil
}
