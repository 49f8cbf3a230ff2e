package faultlink

import (
	"errors"
	"fmt"
	"time"
)

// Impairments are the probabilities, each in [0, 1], of what the wrapper does to a datagram
// handed to Send. They are tried in the order of the fields, each with its own draw, and a
// datagram suffers at most one: Drop, else Reorder, else Corrupt, else Duplicate. The zero
// value passes everything through unchanged.
type Impairments struct {
	// Drop is the probability that a datagram is not sent at all.
	Drop float64
	// Reorder is the probability that a datagram is held back and sent after the next 1 to
	// Config.MaxHold datagrams (or after Config.HoldTime if fewer follow).
	Reorder float64
	// Corrupt is the probability that a copy with one byte changed is sent instead.
	Corrupt float64
	// Duplicate is the probability that a datagram is sent twice.
	Duplicate float64
}

// Validate reports the first probability outside [0, 1] (NaN included).
func (m Impairments) Validate() error {
	for _, p := range [...]struct {
		name string
		v    float64
	}{{"Drop", m.Drop}, {"Reorder", m.Reorder}, {"Corrupt", m.Corrupt}, {"Duplicate", m.Duplicate}} {
		if !(p.v >= 0 && p.v <= 1) {
			return fmt.Errorf("%w: %s %v is not a probability", ErrInvalid, p.name, p.v)
		}
	}
	return nil
}

// Config configures Wrap. The zero value wraps with no impairments and the defaults below.
type Config struct {
	// Seed seeds the decisions. Runs with the same seed, calls and inner-link answers make
	// the same decisions.
	Seed uint64
	// Impairments are the initial probabilities (SetImpairments changes them later).
	Impairments Impairments
	// MaxHold is the most datagrams a reordered one waits behind (each held datagram draws
	// 1 to MaxHold). 0 means DefaultMaxHold.
	MaxHold int
	// HoldTime is the longest a reordered datagram is held when not enough datagrams
	// follow it. 0 means DefaultHoldTime.
	HoldTime time.Duration
	// Buffers is how many datagram copies the wrapper can have at once (held, corrupted,
	// duplicated, or refused by the inner link and waiting to be sent). A fault that needs
	// a buffer when none is free is skipped (FaultStats.Skipped). 0 means DefaultBuffers.
	Buffers int
	// CookieQueue is how many FlagZeroCopy cookies of datagrams the wrapper dropped, held
	// or copied it keeps for TxDone; when it is full such faults are skipped. 0 means
	// DefaultCookieQueue.
	CookieQueue int
	// InjectBuffers is how many datagrams Inject can queue for Receive. 0 disables
	// injection (Inject fails with ErrInjectDisabled).
	InjectBuffers int
	// Now is the monotonic clock in nanoseconds used for HoldTime. Default: time since Wrap.
	Now func() int64
}

// Defaults of Config.
const (
	DefaultMaxHold     = 3
	DefaultHoldTime    = time.Millisecond
	DefaultBuffers     = 64
	DefaultCookieQueue = 4096
	// MaxBuffers bounds Config.Buffers and Config.InjectBuffers.
	MaxBuffers = 4096
	// MaxMaxHold bounds Config.MaxHold.
	MaxMaxHold = 64
)

var (
	// ErrInvalid is wrapped by the errors of Wrap and SetImpairments for a bad Config or
	// Impairments.
	ErrInvalid = errors.New("faultlink: invalid configuration")
	// ErrInjectDisabled is returned by Inject when Config.InjectBuffers is 0.
	ErrInjectDisabled = errors.New("faultlink: injection disabled (Config.InjectBuffers is 0)")
	// ErrInjectFull is returned by Inject while InjectBuffers datagrams wait for Receive.
	ErrInjectFull = errors.New("faultlink: injection queue full")
)

// withDefaults validates c and fills its zero fields.
func (c Config) withDefaults() (Config, error) {
	if err := c.Impairments.Validate(); err != nil {
		return c, err
	}
	if c.MaxHold == 0 {
		c.MaxHold = DefaultMaxHold
	}
	if c.HoldTime == 0 {
		c.HoldTime = DefaultHoldTime
	}
	if c.Buffers == 0 {
		c.Buffers = DefaultBuffers
	}
	if c.CookieQueue == 0 {
		c.CookieQueue = DefaultCookieQueue
	}
	switch {
	case c.MaxHold < 1 || c.MaxHold > MaxMaxHold:
		return c, fmt.Errorf("%w: MaxHold %d not in [1, %d]", ErrInvalid, c.MaxHold, MaxMaxHold)
	case c.HoldTime < 0:
		return c, fmt.Errorf("%w: negative HoldTime %v", ErrInvalid, c.HoldTime)
	case c.Buffers < 1 || c.Buffers > MaxBuffers:
		return c, fmt.Errorf("%w: Buffers %d not in [1, %d]", ErrInvalid, c.Buffers, MaxBuffers)
	case c.InjectBuffers < 0 || c.InjectBuffers > MaxBuffers:
		return c, fmt.Errorf("%w: InjectBuffers %d not in [0, %d]", ErrInvalid, c.InjectBuffers, MaxBuffers)
	case c.CookieQueue < 1 || c.CookieQueue > 1<<20:
		return c, fmt.Errorf("%w: CookieQueue %d not in [1, %d]", ErrInvalid, c.CookieQueue, 1<<20)
	}
	if c.Now == nil {
		start := time.Now()
		c.Now = func() int64 { return int64(time.Since(start)) }
	}
	return c, nil
}
