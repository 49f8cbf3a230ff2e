package faultlink

import "sync/atomic"

// FaultStats count what a Link did to the datagrams it was given, since Wrap. A datagram
// refused by the inner link (back-pressure or an error) is not counted: it is offered again
// or was never sent.
type FaultStats struct {
	Passed     uint64 // sent as given
	Dropped    uint64 // not sent
	Reordered  uint64 // held back to be sent later
	Released   uint64 // held datagrams sent since
	Corrupted  uint64 // replaced by a copy with one byte changed
	Duplicated uint64 // sent twice
	Skipped    uint64 // faults not made for want of a free buffer or cookie room (the datagram passed)
	CopyErrors uint64 // copies the inner link refused with an error (lost)
	Injected   uint64 // datagrams queued by Inject and returned by Receive
	Recorded   uint64 // datagrams copied by a Recorder
}

type counters struct {
	passed, dropped, reordered, released, corrupted, duplicated, skipped, copyErrors,
	injected, recorded atomic.Uint64
}

// FaultStats returns the wrapper's counters. Safe from any goroutine.
func (l *Link) FaultStats() FaultStats {
	c := &l.ctr
	return FaultStats{
		Passed: c.passed.Load(), Dropped: c.dropped.Load(), Reordered: c.reordered.Load(),
		Released: c.released.Load(), Corrupted: c.corrupted.Load(), Duplicated: c.duplicated.Load(),
		Skipped: c.skipped.Load(), CopyErrors: c.copyErrors.Load(), Injected: c.injected.Load(),
		Recorded: c.recorded.Load(),
	}
}
