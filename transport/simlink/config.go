package simlink

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Defaults for the zero fields of Config.
const (
	// DefaultMaxPayload is the largest datagram of a 1500-byte IPv4 MTU: 1500 less the
	// 20-byte IPv4 and 8-byte UDP headers.
	DefaultMaxPayload = 1472
	// MaxMaxPayload is the largest MaxPayload a network accepts: the largest UDP payload
	// over IPv4.
	MaxMaxPayload = 65507
	// DefaultRxQueue is the default limit on datagrams queued towards one host.
	DefaultRxQueue = 16384
	// DefaultBuffers is the default number of datagram buffers a network preallocates.
	DefaultBuffers = 256
	// DefaultTxDoneQueue is the default number of FlagZeroCopy cookies a link holds for
	// TxDone.
	DefaultTxDoneQueue = 1024
	// MaxPrealloc bounds what Config.Buffers preallocates: Buffers*MaxPayload bytes.
	MaxPrealloc = 64 << 20
	// MaxTxDoneQueue is the largest Config.TxDoneQueue.
	MaxTxDoneQueue = 1 << 20
)

// SplitRandom, as Config.SplitRx, makes every received datagram of two bytes or more arrive
// as two non-empty segments split at a point drawn from the path's seeded generator.
const SplitRandom = -1

// Config configures a Network. The zero value is a working network: a RealClock, seed 0,
// 1472-byte datagrams, no impairments. DefaultConfig spells the defaults out.
//
// NewNetwork never fails: it clamps what is out of range (see Validate for the ranges), so
// a test that wants to reject a bad configuration calls Validate first.
type Config struct {
	// Seed seeds every path's generator. Seed 0 is a seed like any other: runs are
	// reproducible unless the caller passes a different seed.
	Seed uint64
	// Clock tells the network's time. Nil means a RealClock started by NewNetwork. With a
	// *RealClock, Link.Wait sleeps in real time; with any other clock (a *ManualClock in
	// virtual-time tests) Wait never blocks and the caller moves time forward.
	Clock Clock
	// MaxPayload is the largest datagram, in bytes, that Send accepts (larger ones are
	// refused with link.ErrTooLarge) and the size of every buffer. 0 means
	// DefaultMaxPayload; at most MaxMaxPayload.
	MaxPayload int
	// Default is what every path without its own impairments (Network.SetPath) does.
	Default Impairments
	// SplitRx makes Receive return a datagram in two segments, as AF_XDP multi-buffer
	// does, so that engines are exercised with multi-segment packets: with SplitRx > 0 a
	// datagram longer than SplitRx bytes arrives as its first SplitRx bytes and the rest;
	// with SplitRandom every datagram of 2 bytes or more is split at a seeded random point.
	// 0 means one segment per datagram.
	SplitRx int
	// RxQueue bounds the datagrams queued towards one host (in flight or waiting for
	// Receive); more are dropped (PathStats.DroppedRxFull, the receiver's RxDropped). It
	// bounds the memory a receiver that never calls Receive can pin. 0 means
	// DefaultRxQueue.
	RxQueue int
	// Buffers is how many datagram buffers NewNetwork preallocates. The pool grows when it
	// runs dry (doubling), so this only moves allocation from the first sends to setup.
	// 0 means DefaultBuffers; at most MaxPrealloc/MaxPayload.
	Buffers int
	// TxDoneQueue is how many FlagZeroCopy cookies a link keeps for TxDone; Send stops
	// (returns fewer packets, nil error) at a zero-copy packet while it is full. 0 means
	// DefaultTxDoneQueue; at most MaxTxDoneQueue.
	TxDoneQueue int
}

// DefaultConfig returns the zero Config with every default filled in (Clock stays nil:
// NewNetwork starts a RealClock).
func DefaultConfig() Config {
	var c Config
	c.normalize()
	return c
}

// Validate reports the first field of c that is out of range. NewNetwork clamps such
// fields instead of failing.
func (c *Config) Validate() error {
	payload := c.MaxPayload
	if payload <= 0 || payload > MaxMaxPayload {
		payload = DefaultMaxPayload
	}
	switch {
	case c.MaxPayload < 0 || c.MaxPayload > MaxMaxPayload:
		return fmt.Errorf("simlink config: MaxPayload %d not in [0, %d]", c.MaxPayload, MaxMaxPayload)
	case c.SplitRx < SplitRandom:
		return fmt.Errorf("simlink config: SplitRx %d: want >= 0 or SplitRandom", c.SplitRx)
	case c.RxQueue < 0:
		return fmt.Errorf("simlink config: negative RxQueue %d", c.RxQueue)
	case c.Buffers < 0 || c.Buffers > MaxPrealloc/payload:
		return fmt.Errorf("simlink config: Buffers %d not in [0, %d]", c.Buffers, MaxPrealloc/payload)
	case c.TxDoneQueue < 0 || c.TxDoneQueue > MaxTxDoneQueue:
		return fmt.Errorf("simlink config: TxDoneQueue %d not in [0, %d]", c.TxDoneQueue, MaxTxDoneQueue)
	}
	if err := c.Default.Validate(); err != nil {
		return fmt.Errorf("simlink config: default impairments: %w", err)
	}
	return nil
}

// normalize fills defaults and clamps out-of-range values.
func (c *Config) normalize() {
	if c.MaxPayload <= 0 {
		c.MaxPayload = DefaultMaxPayload
	}
	c.MaxPayload = min(c.MaxPayload, MaxMaxPayload)
	if c.SplitRx < SplitRandom {
		c.SplitRx = 0
	}
	if c.RxQueue <= 0 {
		c.RxQueue = DefaultRxQueue
	}
	if c.Buffers <= 0 {
		c.Buffers = DefaultBuffers
	}
	c.Buffers = min(c.Buffers, MaxPrealloc/c.MaxPayload)
	if c.TxDoneQueue <= 0 {
		c.TxDoneQueue = DefaultTxDoneQueue
	}
	c.TxDoneQueue = min(c.TxDoneQueue, MaxTxDoneQueue)
	c.Default.normalize()
}

// Impairments is what a path (one direction between two hosts) does to the datagrams sent
// on it. The zero value is a perfect path: no loss, no delay, unlimited bandwidth.
//
// A datagram's fate is decided at Send, in this order: path MTU, partition (see
// Network.Partition), the bandwidth queue (tail drop), serialization, random loss, burst
// loss, duplication, corruption, then each copy's delivery time (the end of its
// serialization, plus Latency, plus its own Jitter). A datagram lost on the wire has used
// its share of the bandwidth. Probabilities are in [0, 1].
type Impairments struct {
	// Latency is the one-way delay added to every datagram.
	Latency time.Duration
	// Jitter is the most extra delay a datagram gets: each copy draws a delay uniform in
	// [0, Jitter] (nanosecond granularity). Datagrams sent less than Jitter apart can
	// overtake each other, which is how this package reorders.
	Jitter time.Duration
	// Loss is the probability that a datagram is lost, independently of the others.
	Loss float64
	// Burst is correlated loss (the Gilbert–Elliott model).
	Burst Burst
	// Duplicate is the probability that a datagram arrives twice. The copy is made after
	// the bottleneck (it costs no bandwidth), draws its own jitter and its own corruption.
	Duplicate float64
	// Corrupt is the probability that a copy of a datagram arrives with 1 to 3 distinct
	// bits of its payload flipped (the length and addresses are never changed), so the
	// receiver's integrity check must catch it.
	Corrupt float64
	// Bandwidth is the path's rate in bits per second; 0 means unlimited. A path that
	// feeds a Bottleneck uses the bottleneck's bandwidth and queue instead of Bandwidth and
	// QueueBytes. Each datagram is
	// serialized after the ones before it (payload bytes only: the simulated wire has no
	// headers), so a sender faster than the path sees queueing delay.
	Bandwidth int64
	// QueueBytes bounds the bytes waiting to be serialized when Bandwidth is set: a
	// datagram that would make the backlog exceed it is tail-dropped. The backlog counts
	// the unserialized rest of the datagram on the wire too. 0 means unbounded.
	QueueBytes int
	// MTU is the path's limit on datagram length, in bytes, below the network's
	// MaxPayload: longer datagrams are silently dropped (a path-MTU black hole; Send still
	// accepts them because they fit MaxPayload). 0 means no limit beyond MaxPayload.
	MTU int
}

// Burst parameterizes the Gilbert–Elliott loss model: a two-state Markov chain stepped once
// for every datagram sent on the path. In the good state nothing is lost by this model; in
// the bad state a datagram is lost with probability BadLoss. The mean time in the bad state
// is 1/BadToGood datagrams, the long-run loss rate
// GoodToBad/(GoodToBad+BadToGood)*BadLoss.
//
// The model is off while GoodToBad is 0; turning it off puts the chain back in the good
// state.
type Burst struct {
	// GoodToBad is the probability of moving from the good to the bad state (p).
	GoodToBad float64
	// BadToGood is the probability of moving from the bad to the good state (r).
	BadToGood float64
	// BadLoss is the loss probability in the bad state (1 for Gilbert's original model).
	BadLoss float64
}

// ErrInvalid is wrapped by the errors of Validate and of the Network setters that reject
// impairments out of range.
var ErrInvalid = errors.New("invalid impairments")

// Validate reports the first field of m that is out of range: a probability outside
// [0, 1] (or NaN), or a negative duration, rate or size.
func (m *Impairments) Validate() error {
	probs := [...]struct {
		name string
		v    float64
	}{
		{"Loss", m.Loss}, {"Duplicate", m.Duplicate}, {"Corrupt", m.Corrupt},
		{"Burst.GoodToBad", m.Burst.GoodToBad}, {"Burst.BadToGood", m.Burst.BadToGood},
		{"Burst.BadLoss", m.Burst.BadLoss},
	}
	for _, p := range probs {
		if !(p.v >= 0 && p.v <= 1) {
			return fmt.Errorf("%s %v not a probability: %w", p.name, p.v, ErrInvalid)
		}
	}
	switch {
	case m.Latency < 0:
		return fmt.Errorf("negative Latency %v: %w", m.Latency, ErrInvalid)
	case m.Jitter < 0:
		return fmt.Errorf("negative Jitter %v: %w", m.Jitter, ErrInvalid)
	case m.Bandwidth < 0:
		return fmt.Errorf("negative Bandwidth %d: %w", m.Bandwidth, ErrInvalid)
	case m.QueueBytes < 0:
		return fmt.Errorf("negative QueueBytes %d: %w", m.QueueBytes, ErrInvalid)
	case m.MTU < 0:
		return fmt.Errorf("negative MTU %d: %w", m.MTU, ErrInvalid)
	}
	return nil
}

// normalize clamps every field into its range (NaN probabilities become 0).
func (m *Impairments) normalize() {
	for _, p := range [...]*float64{&m.Loss, &m.Duplicate, &m.Corrupt,
		&m.Burst.GoodToBad, &m.Burst.BadToGood, &m.Burst.BadLoss} {
		switch {
		case math.IsNaN(*p) || *p < 0:
			*p = 0
		case *p > 1:
			*p = 1
		}
	}
	m.Latency = max(m.Latency, 0)
	m.Jitter = max(m.Jitter, 0)
	m.Bandwidth = max(m.Bandwidth, 0)
	m.QueueBytes = max(m.QueueBytes, 0)
	m.MTU = max(m.MTU, 0)
}
