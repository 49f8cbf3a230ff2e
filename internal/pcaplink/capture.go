package pcaplink

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdpndk/xdpndk/internal/pcapng"
	"github.com/xdpndk/xdpndk/transport/link"
)

// Config configures a Capture. The zero value records whole datagrams with the defaults
// below.
type Config struct {
	// SnapLen is the most bytes recorded of each datagram, its IP and UDP headers
	// included, as tcpdump's -s (0: all of it). At least MinSnapLen.
	SnapLen int
	// Buffer is the size in bytes of each wrapped link's ring (0: DefaultBuffer), at least
	// MinBuffer; a datagram's copy longer than a quarter of it is cut to that.
	Buffer int
	// Interval is how often the writer drains the rings while they carry traffic (0:
	// DefaultInterval).
	Interval time.Duration
	// App names the writer in the file's section header (shb_userappl; "" for none).
	App string
}

// Defaults and limits of Config.
const (
	DefaultBuffer   = 4 << 20
	MinBuffer       = 64 << 10
	MaxBuffer       = 1 << 30
	DefaultInterval = 5 * time.Millisecond
	MinSnapLen      = 64 // an IPv6 and a UDP header, and our transport header
	MaxSnapLen      = 1 << 20
)

// Stats are a capture's counters.
type Stats struct {
	// Packets and Bytes are the datagrams written to the file and their lengths as sent
	// or received (not cut by the snap length).
	Packets, Bytes uint64
	// Dropped is how many datagrams were not recorded because a ring was full.
	Dropped uint64
}

// Capture writes the datagrams of the links it wraps into one pcapng file. Its methods
// are safe for concurrent use.
type Capture struct {
	cfg    Config
	bw     *bufio.Writer
	closer io.Closer // the file of Create (nil: the caller's writer)
	start  int64
	wake   chan struct{}
	stop   chan struct{}
	done   chan struct{}
	closed atomic.Bool
	once   sync.Once

	mu    sync.Mutex // guards w, taps, err, scratch: the writer goroutine, Wrap, Close
	w     *pcapng.Writer
	taps  []*tap
	err   error
	hdr   [ipv6Hdr + udpHdr]byte
	stats Stats
	final error // Close's result
}

// ErrClosed is returned by Wrap after Close.
var ErrClosed = errors.New("pcaplink: capture closed")

// Create creates (or truncates) the file at path and starts a capture into it; Close
// closes the file.
func Create(path string, cfg Config) (*Capture, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	c, err := New(f, cfg)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	c.closer = f
	return c, nil
}

// New starts a capture that writes a pcapng file to w: the section header at once, an
// interface description per Wrap, the packets as the writer goroutine drains them, and
// on Close the statistics of each interface.
func New(w io.Writer, cfg Config) (*Capture, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Buffer == 0 {
		cfg.Buffer = DefaultBuffer
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	c := &Capture{cfg: cfg, bw: bufio.NewWriterSize(w, 256<<10), start: time.Now().UnixNano(),
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	var err error
	if c.w, err = pcapng.NewWriter(c.bw, cfg.App); err != nil {
		return nil, err
	}
	if err := c.bw.Flush(); err != nil {
		return nil, err
	}
	go c.run()
	return c, nil
}

func (cfg *Config) check() error {
	if cfg.SnapLen != 0 && (cfg.SnapLen < MinSnapLen || cfg.SnapLen > MaxSnapLen) {
		return fmt.Errorf("pcaplink: snap length %d: 0 (whole datagrams) or in [%d, %d]", cfg.SnapLen, MinSnapLen, MaxSnapLen)
	}
	if cfg.Buffer != 0 && (cfg.Buffer < MinBuffer || cfg.Buffer > MaxBuffer) {
		return fmt.Errorf("pcaplink: buffer %d bytes: 0 (default) or in [%d, %d]", cfg.Buffer, MinBuffer, MaxBuffer)
	}
	if cfg.Interval < 0 || cfg.Interval > time.Second {
		return fmt.Errorf("pcaplink: interval %v: not in [0, 1s]", cfg.Interval)
	}
	return nil
}

// Wrap returns l with every datagram it sends and receives recorded, as interface name
// (if_name; "" for none) of the file. The wrapper has l's optional methods too
// (link.Watcher, link.PeerResolver) when l has them. Wrap l before an engine runs on it;
// closing the wrapper closes l, and the capture goes on recording the other links.
func (c *Capture) Wrap(l link.Link, name string) (link.Link, error) {
	if l == nil {
		return nil, errors.New("pcaplink: nil link")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return nil, ErrClosed
	}
	id, err := c.w.AddInterface(pcapng.Interface{LinkType: pcapng.LinkTypeRaw, SnapLen: uint32(c.cfg.SnapLen),
		Name: name, Description: "xdpndk link " + l.LocalAddr().String() + " (datagrams as the link carries them, IP and UDP headers made up)",
		TsResol: 9})
	if err != nil {
		return nil, err
	}
	t := newTap(c, id, l.LocalAddr(), c.cfg.SnapLen, c.cfg.Buffer)
	c.taps = append(c.taps, t)
	base := &Link{Link: l, t: t}
	w, isW := l.(link.Watcher)
	r, isR := l.(link.PeerResolver)
	switch {
	case isW && isR:
		return watchResolveLink{base, w, r}, nil
	case isW:
		return watchLink{base, w}, nil
	case isR:
		return resolveLink{base, r}, nil
	}
	return base, nil
}

// Stats returns the counters so far (the datagrams written are those drained so far).
func (c *Capture) Stats() Stats {
	c.mu.Lock()
	s := c.stats
	for _, t := range c.taps {
		s.Dropped += t.dropped.Load()
	}
	c.mu.Unlock()
	return s
}

// Close stops recording, writes what the rings still hold and every interface's
// statistics, flushes the file and (for Create) closes it. It returns the counters and
// the first error writing met. Datagrams the wrapped links carry after Close are not
// recorded. Call it after the links' engines stopped to have all of their datagrams.
// It is idempotent.
func (c *Capture) Close() (Stats, error) {
	c.once.Do(func() {
		c.mu.Lock()
		c.closed.Store(true)
		c.mu.Unlock()
		close(c.stop)
		<-c.done
		c.mu.Lock()
		defer c.mu.Unlock()
		end := time.Now().UnixNano()
		for _, t := range c.taps {
			d := t.dropped.Load()
			c.setErr(c.w.WriteStats(t.ifc, pcapng.Stats{Start: c.start, End: end, Received: t.written + d, Dropped: d}))
		}
		c.setErr(c.bw.Flush())
		if c.closer != nil {
			c.setErr(c.closer.Close())
		}
		c.final = c.err
	})
	return c.Stats(), c.final
}

func (c *Capture) setErr(err error) {
	if c.err == nil && err != nil {
		c.err = err
	}
}

// run is the writer goroutine: it drains the rings every Interval while they carry
// traffic, backing off to 8 Intervals while they are empty, at once when one passes half
// full, and a last time at Close.
func (c *Capture) run() {
	defer close(c.done)
	wait := c.cfg.Interval
	tm := time.NewTimer(wait)
	defer tm.Stop()
	for {
		select {
		case <-c.stop:
			c.drain()
			return
		case <-c.wake:
		case <-tm.C:
		}
		if c.drain() {
			wait = c.cfg.Interval
		} else {
			wait = min(2*wait, 8*c.cfg.Interval)
		}
		tm.Reset(wait)
	}
}

// drain writes every record the rings hold and flushes; it reports whether there were
// any.
func (c *Capture) drain() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	found := false
	for _, t := range c.taps {
		if t.drain(c) {
			found = true
		}
	}
	if found {
		c.setErr(c.bw.Flush())
	}
	return found
}

// Link is a wrapped link.Link (see Capture.Wrap): every method is the inner link's, and
// Receive and Send record the datagrams.
type Link struct {
	link.Link
	t *tap
}

// Receive implements link.Link: the inner link's datagrams, recorded.
func (l *Link) Receive(pkts []link.Packet) (int, error) {
	n, err := l.Link.Receive(pkts)
	l.t.recordBatch(pkts, n, pcapng.DirInbound)
	return n, err
}

// Send implements link.Link: the datagrams the inner link accepted are recorded.
func (l *Link) Send(pkts []link.Packet) (int, error) {
	n, err := l.Link.Send(pkts)
	l.t.recordBatch(pkts, n, pcapng.DirOutbound)
	return n, err
}

type watchLink struct {
	*Link
	w link.Watcher
}

func (l watchLink) Watch(timeout time.Duration) error { return l.w.Watch(timeout) }

type resolveLink struct {
	*Link
	r link.PeerResolver
}

func (l resolveLink) ResolvePeer(ctx context.Context, peer netip.Addr) error {
	return l.r.ResolvePeer(ctx, peer)
}

type watchResolveLink struct {
	*Link
	w link.Watcher
	r link.PeerResolver
}

func (l watchResolveLink) Watch(timeout time.Duration) error { return l.w.Watch(timeout) }

func (l watchResolveLink) ResolvePeer(ctx context.Context, peer netip.Addr) error {
	return l.r.ResolvePeer(ctx, peer)
}

var (
	_ link.Link         = (*Link)(nil)
	_ link.Watcher      = watchLink{}
	_ link.PeerResolver = resolveLink{}
	_ link.Watcher      = watchResolveLink{}
	_ link.PeerResolver = watchResolveLink{}
)
