package xdp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/xdpndk/xdpndk/xdp/xsk"

	"github.com/xdpndk/xdpndk/bpf"
	"github.com/xdpndk/xdpndk/memreg"
)

// DefaultPort is the UDP port xdpndk uses when none is configured.
const DefaultPort = 4793

// Config configures Open. The zero value of every field but Interface means its default;
// DefaultConfig spells them out.
type Config struct {
	// Interface is the name of the network interface to take our port on. Required.
	Interface string
	// Port is our UDP port: the destination port the steering program redirects, and the
	// source port of datagrams sent without per-flow entropy. Default DefaultPort.
	Port uint16
	// Queues lists the interface queues to bind one socket (and one Link) each on. Default
	// every RX queue the interface uses. A subset needs Steering other than SteerServeAll.
	Queues []int
	// Steering says how our datagrams reach the queues served (see Steering). Default
	// SteerServeAll.
	Steering Steering
	// Addr is the local IP address to use; it must be configured on the interface. Default
	// the interface's first IPv4 address, else its first global IPv6 address.
	Addr netip.Addr
	// MTU is the IP MTU datagrams are sized for. Default the interface's MTU.
	MTU int

	// FrameSize is the UMEM frame size, 2048 or 4096 bytes. Default 4096.
	FrameSize int
	// Frames is the number of UMEM frames per queue (RX fill plus TX). Default: sized by the
	// number of queues served (DefaultQueueSizes), 8192 for up to 4 queues.
	Frames int
	// RingSize is the size of the fill, completion and RX rings; TX gets half. A power of
	// two. Default: half of Frames (DefaultQueueSizes), 4096 for up to 4 queues.
	RingSize uint32
	// HeapSize is the size in bytes of the UMEM heap for registrable buffers. Default 0 (no
	// heap). ndk.Open sets it from ndk.Options.HeapSize (16 MiB by default).
	HeapSize int
	// HugePages selects the UMEM's pages. Default memreg.HugeAuto.
	HugePages memreg.HugePages

	// Attach selects native or generic XDP. Default bpf.AttachAuto (native, then generic).
	Attach bpf.Mode
	// Bind selects zero-copy or copy mode. Default xsk.BindAuto (zero-copy, then copy).
	Bind xsk.BindMode
	// DisableNeedWakeup turns off XDP_USE_NEED_WAKEUP, so every TX batch makes a system call.
	DisableNeedWakeup bool
	// BusyPoll, when non-zero, asks for busy polling on the sockets (SO_BUSY_POLL).
	BusyPoll time.Duration
	// UDPChecksum says what goes in the UDP checksum of the datagrams sent. Default
	// ChecksumAuto: none over IPv4 (the transport's CRC32C covers the datagram), computed
	// over IPv6.
	UDPChecksum UDPChecksum

	// ResolveTimeout bounds the resolution of a peer's next hop (route lookup and ARP or
	// neighbour discovery), which runs on the device's resolution worker, never on the
	// goroutine calling Send: datagrams to the peer are held meanwhile. A peer not resolved
	// by then is cached as failed (see NegativeTTL). Default 3 s, the time the kernel's own
	// resolution takes to give up with the default sysctls (3 probes a second apart).
	ResolveTimeout time.Duration
	// NegativeTTL is how long a failed resolution is remembered: datagrams to the peer are
	// dropped at once (LinkStats.TxUnresolved) and ResolvePeer fails at once until it
	// expires; the next datagram after that asks again. Default 1 s: long enough that a
	// peer nobody answers for costs one resolution per second however fast datagrams to it
	// come (a spoofed connection request's retransmitted replies, say), short enough that a
	// host that comes back is reached again quickly.
	NegativeTTL time.Duration
	// NeighbourEntries bounds the device's next-hop table (one entry per peer IP address).
	// When it is full, a new peer evicts a failed entry first, else the least recently
	// used of a sample (see docs/DATAPATH.md). Default 4096; at least 16.
	NeighbourEntries int
	// NeighbourResolving bounds the peers being resolved at once. A datagram to a new peer
	// beyond it is held without a resolution request (counted in
	// nexthop.NeighbourStats.RequestsDropped); the next one asks again. ResolvePeer is not
	// bound by it (its callers wait). Default 256; at most NeighbourEntries/2.
	NeighbourResolving int
	// NeighbourRefresh is the age after which the next hop of a peer still in use is
	// re-validated in the background (route lookup and neighbour state; the old MAC stays
	// in use meanwhile). Kernel neighbour events update a changed MAC at once; this catches
	// route changes and lost events. An entry unused for twice this long is removed.
	// Default 30 s, the kernel's base_reachable_time.
	NeighbourRefresh time.Duration
	// Logger receives what Open got from the kernel. Default slog.Default().
	Logger *slog.Logger

	// resolve, when set (tests only), replaces the kernel as the source of next hops: the
	// worker calls it on a goroutine of its own per peer, with a context that ends at
	// ResolveTimeout.
	resolve func(ctx context.Context, peer netip.Addr) ([6]byte, error)
}

// DefaultConfig returns a Config for the named interface with every default filled in, but
// Frames and RingSize, which Open sizes by the number of queues it serves
// (DefaultQueueSizes).
func DefaultConfig(iface string) Config {
	c := Config{Interface: iface}
	_ = c.normalize()
	return c
}

func (c *Config) normalize() error {
	if c.Interface == "" {
		return errors.New("xdp config: interface name required")
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.FrameSize == 0 {
		c.FrameSize = 4096
	}
	if err := c.checkQueueSizes(); err != nil {
		return err
	}
	if c.MTU < 0 || c.MTU > 65535 {
		return fmt.Errorf("xdp config: mtu %d out of range", c.MTU)
	}
	for _, q := range c.Queues {
		if q < 0 || q > 4095 {
			return fmt.Errorf("xdp config: queue %d out of range", q)
		}
	}
	if c.Steering < SteerServeAll || c.Steering > SteerExternal {
		return fmt.Errorf("xdp config: steering %v unknown", c.Steering)
	}
	if c.UDPChecksum < ChecksumAuto || c.UDPChecksum > ChecksumSoftware {
		return fmt.Errorf("xdp config: UDP checksum mode %v unknown", c.UDPChecksum)
	}
	if c.ResolveTimeout == 0 {
		c.ResolveTimeout = 3 * time.Second
	}
	if c.NegativeTTL == 0 {
		c.NegativeTTL = time.Second
	}
	if c.NeighbourEntries == 0 {
		c.NeighbourEntries = 4096
	}
	if c.NeighbourResolving == 0 {
		c.NeighbourResolving = min(256, c.NeighbourEntries/2)
	}
	if c.NeighbourRefresh == 0 {
		c.NeighbourRefresh = 30 * time.Second
	}
	switch {
	case c.ResolveTimeout < 0 || c.ResolveTimeout > time.Minute:
		return fmt.Errorf("xdp config: resolve timeout %v not in (0, 1m]", c.ResolveTimeout)
	case c.NegativeTTL < 0 || c.NegativeTTL > time.Hour:
		return fmt.Errorf("xdp config: negative TTL %v not in (0, 1h]", c.NegativeTTL)
	case c.NeighbourEntries < 16 || c.NeighbourEntries > 1<<20:
		return fmt.Errorf("xdp config: %d neighbour entries not in [16, %d]", c.NeighbourEntries, 1<<20)
	case c.NeighbourResolving < 1 || c.NeighbourResolving > c.NeighbourEntries/2:
		return fmt.Errorf("xdp config: %d neighbours resolving at once not in [1, %d]", c.NeighbourResolving, c.NeighbourEntries/2)
	case c.NeighbourRefresh < 100*time.Millisecond || c.NeighbourRefresh > time.Hour:
		return fmt.Errorf("xdp config: neighbour refresh %v not in [100ms, 1h]", c.NeighbourRefresh)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Default sizes per queue (DefaultQueueSizes): a budget of frames for all queues, shared out,
// within a floor and a ceiling per queue.
const (
	frameBudget    = 32768 // 128 MiB of 4 KiB frames pinned for all queues
	maxQueueFrames = 8192  // one queue: 4096 fill/RX ring entries (a smaller fill ring dropped under load on veth)
	minQueueFrames = 1024
)

// DefaultQueueSizes returns the frames and ring size per queue Open uses for n queues when
// Config.Frames and RingSize are 0: the frame budget (32768 frames) shared out, a power of
// two between 1024 and 8192 frames per queue, with rings of half that. One to four queues
// get 8192 frames and rings of 4096 each; 64 queues get 1024 and 512 (256 MiB of 4 KiB
// frames in all), since traffic spread over many queues needs less room in each.
func DefaultQueueSizes(n int) (frames int, ring uint32) {
	frames = maxQueueFrames
	for frames > minQueueFrames && frames*max(n, 1) > frameBudget {
		frames /= 2
	}
	return frames, uint32(frames / 2)
}

// sizeQueues fills Frames and RingSize for n queues where they are 0.
func (c *Config) sizeQueues(n int) error {
	f, r := DefaultQueueSizes(n)
	switch {
	case c.Frames == 0 && c.RingSize == 0:
		c.Frames, c.RingSize = f, r
	case c.Frames == 0:
		c.Frames = int(c.RingSize) * 2
	case c.RingSize == 0:
		c.RingSize = 1
		for uint64(c.RingSize)*4 <= uint64(c.Frames) {
			c.RingSize *= 2 // the largest power of two with ring + ring/2 <= Frames
		}
	}
	return c.checkQueueSizes()
}

// checkQueueSizes validates Frames and RingSize where they are set.
func (c *Config) checkQueueSizes() error {
	if c.Frames < 0 {
		return fmt.Errorf("xdp config: %d frames per queue", c.Frames)
	}
	if c.RingSize != 0 && (c.RingSize&(c.RingSize-1) != 0 || c.RingSize < 64) {
		return fmt.Errorf("xdp config: ring size %d must be a power of two >= 64", c.RingSize)
	}
	if c.Frames != 0 && c.RingSize != 0 && uint64(c.Frames) < uint64(c.RingSize)+uint64(c.RingSize/2) {
		return fmt.Errorf("xdp config: %d frames per queue cannot fill a %d-entry fill ring and a %d-entry tx ring", c.Frames, c.RingSize, c.RingSize/2)
	}
	return nil
}
