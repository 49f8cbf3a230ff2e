package simlink

import (
	"sync/atomic"
	"time"
)

// Clock is a network's sense of time: monotonic nanoseconds from an arbitrary origin. Now
// never decreases and is safe for concurrent use.
type Clock interface {
	Now() int64
}

// processStart is the origin of the zero RealClock.
var processStart = time.Now()

// RealClock is the monotonic system clock, in nanoseconds since its start. NewNetwork with
// a nil Config.Clock starts one, so that network time is time since the network's creation.
// A network on a *RealClock sleeps in Link.Wait until the next datagram is due.
//
// The zero value counts from the package's initialisation. It is safe for concurrent use.
type RealClock struct {
	start time.Time
}

// NewRealClock returns a RealClock whose time is 0 now.
func NewRealClock() *RealClock { return &RealClock{start: time.Now()} }

// Now returns the nanoseconds since the clock's start (monotonic, never negative).
func (c *RealClock) Now() int64 {
	start := c.start
	if start.IsZero() {
		start = processStart
	}
	return int64(time.Since(start))
}

// ManualClock is a clock that only moves when told: virtual time for deterministic tests.
// A test shares one ManualClock between the engine and the network and moves it forward
// (for instance to Network.NextDelivery). Link.Wait never blocks on a network with a
// ManualClock.
//
// The zero value reads 0. It is safe for concurrent use.
type ManualClock struct {
	t atomic.Int64
}

// NewManualClock returns a ManualClock that reads start.
func NewManualClock(start int64) *ManualClock {
	c := new(ManualClock)
	c.t.Store(start)
	return c
}

// Now returns the clock's time in nanoseconds.
func (c *ManualClock) Now() int64 { return c.t.Load() }

// Set moves the clock to t nanoseconds. A t earlier than the current time is ignored: the
// clock never goes backwards.
func (c *ManualClock) Set(t int64) {
	for {
		cur := c.t.Load()
		if t <= cur || c.t.CompareAndSwap(cur, t) {
			return
		}
	}
}

// Advance moves the clock forward by d (a negative d is ignored) and returns the new time.
// It saturates instead of overflowing.
func (c *ManualClock) Advance(d time.Duration) int64 {
	for {
		cur := c.t.Load()
		if d <= 0 {
			return cur
		}
		next := addSat(cur, int64(d))
		if c.t.CompareAndSwap(cur, next) {
			return next
		}
	}
}

// addSat returns a+b for b >= 0, saturating at the largest int64.
func addSat(a, b int64) int64 {
	if b > 0 && a > maxTime-b {
		return maxTime
	}
	return a + b
}

const maxTime = int64(^uint64(0) >> 1)
