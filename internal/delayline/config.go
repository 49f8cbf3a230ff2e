package delayline

import (
	"errors"
	"fmt"
	"time"
)

// Limits checked by [Config.Validate].
const (
	// MaxDelay is the longest one-way delay accepted.
	MaxDelay = time.Second
	// MinRate and MaxRate bound a non-zero Rate, in bits per second.
	MinRate = 100_000
	MaxRate = 100_000_000_000
	// MinQueueBytes is the smallest queue accepted: one frame of a 1500-byte MTU.
	MinQueueBytes = 1514
	// MaxStorageBytes bounds the byte ring of one direction: the queue plus what the
	// line holds in flight (Rate x Delay / 8) plus a few frames.
	MaxStorageBytes = 1 << 30
	// MaxFrame is the largest frame the forwarder reads (a 65,535-byte IP packet and its
	// Ethernet header); a larger one is cut by the socket and dropped.
	MaxFrame = 65535 + 14
	// unlimitedRate is the rate used to size the storage of a line without a rate limit.
	unlimitedRate = 10_000_000_000
	// lateAllowance is how late the forwarder may run (descheduled on a busy machine)
	// before frames that are due but not yet sent overflow the storage: the storage holds
	// what the rate brings in during Delay plus this.
	lateAllowance = 10 * time.Millisecond
)

// ErrInvalidConfig is wrapped by every error Validate returns.
var ErrInvalidConfig = errors.New("invalid delay line config")

// Config is one direction's path; a [Line] applies it to both directions.
type Config struct {
	// Delay is the one-way propagation delay added after serialization, at most MaxDelay.
	// The round trip through a Line is twice it (plus serialization and the hosts' own
	// latency).
	Delay time.Duration
	// Rate is the line rate in bits per second, in [MinRate, MaxRate]; 0 means no rate
	// limit (no serialization, no queue).
	Rate uint64
	// QueueBytes is the drop-tail queue: the bytes of frames (Ethernet header included)
	// that may wait for serialization. 0 means one bandwidth-delay product of the round
	// trip (Rate x 2 x Delay / 8), at least 64 KiB. At least MinQueueBytes.
	QueueBytes int
}

// withDefaults validates c and fills QueueBytes.
func (c Config) withDefaults() (Config, error) {
	if err := c.Validate(); err != nil {
		return c, err
	}
	if c.QueueBytes == 0 {
		c.QueueBytes = max(64<<10, int(bdpBytes(c.Rate, 2*c.Delay)))
	}
	return c, nil
}

// Validate reports whether c is within the limits.
func (c Config) Validate() error {
	switch {
	case c.Delay < 0 || c.Delay > MaxDelay:
		return fmt.Errorf("%w: delay %v not in [0, %v]", ErrInvalidConfig, c.Delay, MaxDelay)
	case c.Rate != 0 && (c.Rate < MinRate || c.Rate > MaxRate):
		return fmt.Errorf("%w: rate %d bit/s not 0 and not in [%d, %d]", ErrInvalidConfig, c.Rate, uint64(MinRate), uint64(MaxRate))
	case c.QueueBytes != 0 && (c.QueueBytes < MinQueueBytes || c.QueueBytes > MaxStorageBytes/2):
		return fmt.Errorf("%w: queue %d bytes not 0 and not in [%d, %d]", ErrInvalidConfig, c.QueueBytes, MinQueueBytes, MaxStorageBytes/2)
	}
	if s := c.storageBytes(); s > MaxStorageBytes {
		return fmt.Errorf("%w: queue and in-flight bytes (%d) above %d", ErrInvalidConfig, s, MaxStorageBytes)
	}
	return nil
}

// storageBytes is the byte ring one direction needs: its queue, what the line holds in
// flight during Delay plus lateAllowance (at Rate, or at 10 Gbit/s without a limit) and
// two largest frames (one being serialized, one wasted at the ring's end).
func (c Config) storageBytes() int64 {
	q := int64(c.QueueBytes)
	if q == 0 {
		q = max(64<<10, bdpBytes(c.Rate, 2*c.Delay))
	}
	r := c.Rate
	if r == 0 {
		r, q = unlimitedRate, 0
	}
	return q + bdpBytes(r, c.Delay+lateAllowance) + 2*MaxFrame
}

// bdpBytes is rate x d / 8, rounded up.
func bdpBytes(rate uint64, d time.Duration) int64 {
	bits := float64(rate) * d.Seconds()
	return int64(bits/8 + 1)
}

// String describes c for logs and reports ("delay 5ms, rate 1e+09 bit/s, queue 1250000 B").
func (c Config) String() string {
	rate := "unlimited"
	if c.Rate > 0 {
		rate = fmt.Sprintf("%g bit/s", float64(c.Rate))
	}
	return fmt.Sprintf("delay %v, rate %s, queue %d B", c.Delay, rate, c.QueueBytes)
}
