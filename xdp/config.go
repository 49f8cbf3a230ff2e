package xdp

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

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
	// every RX queue of the interface.
	Queues []int
	// Addr is the local IP address to use; it must be configured on the interface. Default
	// the interface's first IPv4 address, else its first global IPv6 address.
	Addr netip.Addr
	// MTU is the IP MTU datagrams are sized for. Default the interface's MTU.
	MTU int

	// FrameSize is the UMEM frame size, 2048 or 4096 bytes. Default 4096.
	FrameSize int
	// Frames is the number of UMEM frames per queue (RX fill plus TX). Default 8192.
	Frames int
	// RingSize is the size of the fill, completion and RX rings; TX gets half. A power of
	// two. Default 4096.
	RingSize uint32
	// HeapSize is the size in bytes of the UMEM heap for registrable buffers. Default 0.
	HeapSize int
	// HugePages selects the UMEM's pages. Default memreg.HugeAuto.
	HugePages memreg.HugePages

	// Attach selects native or generic XDP. Default bpf.AttachAuto (native, then generic).
	Attach bpf.Mode
	// Bind selects zero-copy or copy mode. Default BindAuto (zero-copy, then copy).
	Bind BindMode
	// DisableNeedWakeup turns off XDP_USE_NEED_WAKEUP, so every TX batch makes a system call.
	DisableNeedWakeup bool
	// BusyPoll, when non-zero, asks for busy polling on the sockets (SO_BUSY_POLL).
	BusyPoll time.Duration

	// ResolveTimeout bounds the next-hop lookup for a new peer. Default 3 s.
	ResolveTimeout time.Duration
	// Logger receives what Open got from the kernel. Default slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns a Config for the named interface with every default filled in.
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
	if c.Frames == 0 {
		c.Frames = 8192
	}
	if c.RingSize == 0 {
		c.RingSize = 4096
	}
	if c.RingSize&(c.RingSize-1) != 0 || c.RingSize < 64 {
		return fmt.Errorf("xdp config: ring size %d must be a power of two >= 64", c.RingSize)
	}
	if uint64(c.Frames) < uint64(c.RingSize)+uint64(c.RingSize/2) {
		return fmt.Errorf("xdp config: %d frames per queue cannot fill a %d-entry fill ring and a %d-entry tx ring", c.Frames, c.RingSize, c.RingSize/2)
	}
	if c.MTU < 0 || c.MTU > 65535 {
		return fmt.Errorf("xdp config: mtu %d out of range", c.MTU)
	}
	for _, q := range c.Queues {
		if q < 0 || q > 4095 {
			return fmt.Errorf("xdp config: queue %d out of range", q)
		}
	}
	if c.ResolveTimeout == 0 {
		c.ResolveTimeout = 3 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}
