package simlink

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"time"
)

// BottleneckConfig configures a Bottleneck: one wire and its queue that several paths feed.
type BottleneckConfig struct {
	// Bandwidth is the wire's rate in bits per second; it must be positive.
	Bandwidth int64
	// QueueBytes bounds the bytes waiting to be serialized (the unserialized rest of the
	// datagram on the wire included): a datagram that would make the backlog exceed it is
	// tail-dropped. 0 means unbounded.
	QueueBytes int
}

// Validate reports a field out of range, with an error wrapping ErrInvalid.
func (c *BottleneckConfig) Validate() error {
	switch {
	case c.Bandwidth <= 0:
		return fmt.Errorf("bottleneck Bandwidth %d not positive: %w", c.Bandwidth, ErrInvalid)
	case c.QueueBytes < 0:
		return fmt.Errorf("negative bottleneck QueueBytes %d: %w", c.QueueBytes, ErrInvalid)
	}
	return nil
}

// Bottleneck is a wire with a bounded FIFO queue shared by every path that feeds it
// (Network.SetBottleneck): a switch's egress port towards a receiver, where several
// senders' flows meet. A datagram on a path that feeds a bottleneck is queued and
// serialized there, after every datagram any feeding path gave it before, instead of on
// the path's own Impairments.Bandwidth and QueueBytes (which it then ignores); the path's
// other impairments still apply (MTU and partition before the queue, loss and the rest
// after it, latency after the serialization).
//
// The queue sees each datagram at the time it is sent: the propagation delay (Latency)
// comes after it. For feeding paths with equal latency this is the same as a queue at the
// far end; with unequal latencies it is a queue at the senders' side.
//
// For every datagram it accepts, the bottleneck records its queueing delay (the time from
// its arrival until its first bit goes on the wire) in a histogram, so that tests and
// benchmarks can read its percentiles; and it counts what it accepts and what it drops.
// Like the rest of the network it is deterministic and allocates nothing per datagram.
// Its methods are safe for concurrent use.
type Bottleneck struct {
	net  *Network
	name string

	// Guarded by net.mu.
	cfg       BottleneckConfig
	busyUntil int64  // when the wire finishes what it was given
	busyRem   uint64 // bit·ns of serialization not yet counted in busyUntil (< Bandwidth)
	stats     BottleneckStats
}

// BottleneckStats are a bottleneck's cumulative counters.
type BottleneckStats struct {
	// Packets and Bytes count the datagrams the queue accepted (they were then
	// serialized, whatever happened to them after).
	Packets, Bytes uint64
	// Dropped and DroppedBytes count tail drops (also counted in the feeding path's
	// PathStats.DroppedQueue).
	Dropped, DroppedBytes uint64
	// MaxBacklog is the largest backlog, in bytes, a datagram found on arrival.
	MaxBacklog uint64
	// Delay is the histogram of the accepted datagrams' queueing delays.
	Delay DelayHistogram
}

// ErrNoBottleneck is returned by SetBottleneck for a bottleneck of another network.
var ErrNoBottleneck = errors.New("bottleneck of another network")

// NewBottleneck creates a bottleneck on n; no path feeds it until SetBottleneck. The name
// is for the caller's reports. It refuses an invalid cfg (an error wrapping ErrInvalid).
func (n *Network) NewBottleneck(name string, cfg BottleneckConfig) (*Bottleneck, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("simlink: new bottleneck %q: %w", name, err)
	}
	return &Bottleneck{net: n, name: name, cfg: cfg}, nil
}

// SetBottleneck makes the path from one host address to another feed b, from the next
// Send on (nil: the path uses its own bandwidth again). The hosts need not exist yet.
func (n *Network) SetBottleneck(from, to netip.AddrPort, b *Bottleneck) error {
	if b != nil && b.net != n {
		return fmt.Errorf("simlink: set bottleneck %v -> %v: %w", from, to, ErrNoBottleneck)
	}
	n.mu.Lock()
	n.pathFor(canon(from), canon(to)).bn = b
	n.mu.Unlock()
	return nil
}

// Name returns the name the bottleneck was created with.
func (b *Bottleneck) Name() string { return b.name }

// Config returns the bottleneck's configuration.
func (b *Bottleneck) Config() BottleneckConfig {
	b.net.mu.Lock()
	defer b.net.mu.Unlock()
	return b.cfg
}

// SetConfig changes the bandwidth and queue limit from the next datagram on (what is
// queued keeps its schedule). It refuses an invalid cfg and then changes nothing.
func (b *Bottleneck) SetConfig(cfg BottleneckConfig) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("simlink: bottleneck %q: %w", b.name, err)
	}
	b.net.mu.Lock()
	b.cfg = cfg
	b.net.mu.Unlock()
	return nil
}

// Stats returns a copy of the bottleneck's counters and delay histogram.
func (b *Bottleneck) Stats() BottleneckStats {
	b.net.mu.Lock()
	defer b.net.mu.Unlock()
	return b.stats
}

// admit queues an n-byte datagram that arrives at now: it returns false (and counts a
// drop) if the queue has no room, else the time its serialization ends. Called with
// net.mu held.
func (b *Bottleneck) admit(n int, now int64) (int64, bool) {
	bw := b.cfg.Bandwidth
	if now > b.busyUntil {
		b.busyUntil, b.busyRem = now, 0 // the wire was idle
	}
	wait := b.busyUntil - now
	backlog := uint64(float64(wait) * float64(bw) / 8e9) // bytes not yet on the wire
	if b.cfg.QueueBytes > 0 && backlog+uint64(n) > uint64(b.cfg.QueueBytes) {
		b.stats.Dropped++
		b.stats.DroppedBytes += uint64(n)
		return 0, false
	}
	b.stats.Packets++
	b.stats.Bytes += uint64(n)
	b.stats.MaxBacklog = max(b.stats.MaxBacklog, backlog)
	b.stats.Delay.Record(time.Duration(wait))
	work := uint64(n)*8e9 + b.busyRem
	b.busyUntil = addSat(b.busyUntil, int64(work/uint64(bw)))
	b.busyRem = work % uint64(bw)
	return b.busyUntil, true
}

// Histogram geometry: values below 2*histSub ns have a bucket each; above, each power of
// two is split in histSub buckets, so a bucket's width is at most 1/histSub of its lower
// bound (3.1 %).
const (
	histSubBits = 5
	histSub     = 1 << histSubBits
	histBuckets = 2*histSub + (63-histSubBits)*histSub
)

// DelayHistogram counts durations in logarithmic buckets with a relative width of at most
// 1/32: a fixed-size value (no allocation to record, copied by assignment). Negative
// durations count as 0.
type DelayHistogram struct {
	counts [histBuckets]uint64
	n      uint64
	sum    uint64 // ns, saturating
	max    int64
}

// histIndex returns the bucket of v >= 0.
func histIndex(v uint64) int {
	if v < 2*histSub {
		return int(v)
	}
	shift := bits.Len64(v) - histSubBits - 1 // >= 1
	return 2*histSub + (shift-1)*histSub + int(v>>shift) - histSub
}

// histUpper returns the largest value of bucket i.
func histUpper(i int) uint64 {
	if i < 2*histSub {
		return uint64(i)
	}
	k := i - 2*histSub
	shift := k/histSub + 1
	m := uint64(k%histSub + histSub)
	return (m+1)<<shift - 1
}

// Record counts one duration.
func (h *DelayHistogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[histIndex(v)]++
	h.n++
	if s := h.sum + v; s >= h.sum {
		h.sum = s
	} else {
		h.sum = ^uint64(0)
	}
	h.max = max(h.max, int64(v))
}

// Count returns how many durations were recorded.
func (h *DelayHistogram) Count() uint64 { return h.n }

// Max returns the largest duration recorded (0 for none).
func (h *DelayHistogram) Max() time.Duration { return time.Duration(h.max) }

// Mean returns the mean duration (0 for none).
func (h *DelayHistogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / h.n)
}

// Quantile returns an upper bound of the q-quantile (0 <= q <= 1): the largest value of
// the bucket that holds the ceil(q*Count)-th smallest duration, at most Max. It is at most
// 1/32 above the true value. It returns 0 for an empty histogram.
func (h *DelayHistogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := uint64(q * float64(h.n))
	if float64(rank) < q*float64(h.n) || rank == 0 {
		rank++
	}
	rank = min(rank, h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(histUpper(i), uint64(h.max)))
		}
	}
	return time.Duration(h.max)
}

// Sub returns the durations recorded in h but not in earlier, a snapshot of the same
// histogram taken before: the histogram of an interval. Max is then h's (an upper bound of
// the interval's); counts of earlier above h's (not a snapshot of h) are taken as 0.
func (h *DelayHistogram) Sub(earlier *DelayHistogram) DelayHistogram {
	out := *h
	for i := range out.counts {
		out.counts[i] -= min(earlier.counts[i], out.counts[i])
	}
	out.n -= min(earlier.n, out.n)
	out.sum -= min(earlier.sum, out.sum)
	return out
}
