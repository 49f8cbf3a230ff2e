package delayline

import "sync/atomic"

// dirCounters are a direction's published counters: written by its goroutine, read by
// Stats.
type dirCounters struct {
	received, ignored, queued, dropped, overflow  atomic.Uint64
	forwarded, forwardedBytes, sendErrors         atomic.Uint64
	forwardedTCP, forwardedUDP                    atomic.Uint64
	held, heldBytes, backlog, maxBacklog, lateSum atomic.Uint64
	lateMax                                       atomic.Uint64
	realtime                                      atomic.Bool
	badStamps                                     atomic.Uint64
	late                                          [LateBuckets]atomic.Uint64
}

func (c *dirCounters) snapshot() DirStats {
	s := DirStats{Received: c.received.Load(), Ignored: c.ignored.Load(), Queued: c.queued.Load(),
		Dropped: c.dropped.Load(), Overflow: c.overflow.Load(), Forwarded: c.forwarded.Load(),
		ForwardedBytes: c.forwardedBytes.Load(), SendErrors: c.sendErrors.Load(),
		ForwardedTCP: c.forwardedTCP.Load(), ForwardedUDP: c.forwardedUDP.Load(), Held: c.held.Load(),
		HeldBytes: c.heldBytes.Load(), Backlog: c.backlog.Load(), MaxBacklog: c.maxBacklog.Load(),
		LateSum: c.lateSum.Load(), LateMax: c.lateMax.Load(), Realtime: c.realtime.Load(), BadStamps: c.badStamps.Load()}
	for i := range c.late {
		s.Late[i] = c.late[i].Load()
	}
	return s
}
