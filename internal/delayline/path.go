package delayline

import (
	"fmt"
	"math/bits"
)

// Path is one direction of a delay line in virtual time: a drop-tail queue, serialization
// at the rate and the propagation delay of a [Config], and the frames held until they are
// due. Every method that depends on time is given it (now, in nanoseconds from any fixed
// origin, never decreasing); a Path reads no clock. It is not safe for concurrent use.
//
// Frames are copied into a byte ring sized by the Config; a frame that does not fit (or
// finds the descriptor ring full) is dropped and counted in Overflow, which a well-sized
// ring never sees since the queue bounds what waits and the rate what is in flight.
type Path struct {
	cfg     Config
	delay   int64 // ns
	rate    uint64
	lastEnd int64 // when the serialization of the latest accepted frame ends

	buf   []byte
	descs []desc
	mask  int
	first int // index of the oldest held frame's descriptor
	count int // frames held
	held  int // bytes held
	head  int // offset of the oldest held frame in buf
	tail  int // offset after the newest held frame in buf

	// Counters since NewPath.
	Accepted uint64 // frames queued
	Dropped  uint64 // frames dropped by the drop-tail queue
	Overflow uint64 // frames dropped because the storage was full
	Released uint64 // frames taken out with Release
	// MaxBacklog is the largest backlog seen at an arrival, in bytes.
	MaxBacklog int
}

// desc is one held frame: where it is in the ring, its length and when it is due.
type desc struct {
	off, n int
	due    int64
}

// NewPath returns an empty path for cfg (QueueBytes 0 means its default).
func NewPath(cfg Config) (*Path, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	size := c.storageBytes()
	// Descriptors: one per 64 bytes of storage (frames are at least 34 bytes, but a line
	// that holds mostly acknowledgements holds them beside data), a power of two.
	nd := 1 << bits.Len64(uint64(size/64))
	nd = min(max(nd, 64), 1<<22)
	return &Path{cfg: c, delay: int64(c.Delay), rate: c.Rate, buf: make([]byte, size),
		descs: make([]desc, nd), mask: nd - 1}, nil
}

// Config returns the path's configuration, QueueBytes filled in.
func (p *Path) Config() Config { return p.cfg }

// serialize returns the nanoseconds n bytes occupy the line, rounded up.
func (p *Path) serialize(n int) int64 {
	if p.rate == 0 {
		return 0
	}
	return int64((uint64(n)*8_000_000_000 + p.rate - 1) / p.rate)
}

// Backlog returns the bytes waiting to be serialized at now (the unserialized part of the
// frame on the line included): the queue's occupancy.
func (p *Path) Backlog(now int64) int {
	if p.rate == 0 || p.lastEnd <= now {
		return 0
	}
	return int(uint64(p.lastEnd-now) * p.rate / 8_000_000_000)
}

// Push offers a frame that arrived at now. It is copied and held until its due time, or
// dropped (false): by the drop-tail queue when the backlog plus the frame would exceed
// QueueBytes, or when the storage is full.
func (p *Path) Push(now int64, frame []byte) bool {
	n := len(frame)
	if p.rate > 0 {
		b := p.Backlog(now)
		p.MaxBacklog = max(p.MaxBacklog, b)
		if b+n > p.cfg.QueueBytes {
			p.Dropped++
			return false
		}
	}
	off, ok := p.alloc(n)
	if !ok || p.count == len(p.descs) {
		p.Overflow++
		return false
	}
	copy(p.buf[off:off+n], frame)
	start := max(now, p.lastEnd)
	end := start + p.serialize(n)
	p.lastEnd = end
	p.descs[(p.first+p.count)&p.mask] = desc{off: off, n: n, due: end + p.delay}
	if p.count == 0 {
		p.head = off
	}
	p.count++
	p.held += n
	p.tail = off + n
	p.Accepted++
	return true
}

// alloc finds n contiguous bytes after the newest held frame, wrapping to the ring's
// start when the end has no room. The held frames occupy [head, tail) when tail > head,
// else [head, end) and [0, tail); tail never catches up with head.
func (p *Path) alloc(n int) (int, bool) {
	if p.count == 0 {
		p.head, p.tail = 0, 0
		return 0, n <= len(p.buf)
	}
	if p.tail > p.head {
		if len(p.buf)-p.tail >= n {
			return p.tail, true
		}
		return 0, n < p.head
	}
	return p.tail, p.head-p.tail > n
}

// Held returns the frames held and their bytes.
func (p *Path) Held() (frames, bytes int) { return p.count, p.held }

// Next returns when the oldest held frame is due; ok is false when none is held.
func (p *Path) Next() (due int64, ok bool) {
	if p.count == 0 {
		return 0, false
	}
	return p.descs[p.first].due, true
}

// At returns the i-th oldest held frame (0 is the oldest) and when it is due. The frame
// aliases the ring: it is valid until Release. i must be below Held's frames.
func (p *Path) At(i int) (frame []byte, due int64) {
	if i < 0 || i >= p.count {
		panic(fmt.Sprintf("delayline: At(%d) of %d held frames", i, p.count))
	}
	d := p.descs[(p.first+i)&p.mask]
	return p.buf[d.off : d.off+d.n : d.off+d.n], d.due
}

// Due returns how many of the oldest held frames are due at now, at most max.
func (p *Path) Due(now int64, max int) int {
	k := 0
	for k < p.count && k < max && p.descs[(p.first+k)&p.mask].due <= now {
		k++
	}
	return k
}

// Release takes the n oldest held frames out (sent, or given up).
func (p *Path) Release(n int) {
	if n < 0 || n > p.count {
		panic(fmt.Sprintf("delayline: Release(%d) of %d held frames", n, p.count))
	}
	for range n {
		p.held -= p.descs[p.first].n
		p.first = (p.first + 1) & p.mask
		p.count--
	}
	p.Released += uint64(n)
	if p.count > 0 {
		p.head = p.descs[p.first].off
	}
}
