package xdp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpndk/xdpndk/bpf"
	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/xdp/nexthop"
	"github.com/xdpndk/xdpndk/xdp/xsk"
)

// Open takes over our UDP port on an interface: it maps and pins a UMEM, loads and attaches
// the steering program, and binds one AF_XDP socket per queue, each a Link. It must be called
// from a thread in the interface's network namespace (see internal/testbed's Host.Do); the
// Device and its Links may then be used from any goroutine.
//
// What it got (attach mode, zero-copy or copy, multi-buffer, need_wakeup, page kind) is in
// Mode and is logged; nothing falls back silently. A queue bound by another AF_XDP socket,
// or another XDP program on the interface, makes it fail with a *BusyError (ErrBusy) that
// names the holder where it can be found.
func Open(cfg Config) (d *Device, err error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	d = &Device{cfg: cfg, log: cfg.Logger}
	defer func() {
		if err != nil {
			d.Close()
			d = nil
		}
	}()
	nl, err := netlink.NewHandle()
	if err != nil {
		return d, fmt.Errorf("open netlink: %w", err)
	}
	defer nl.Close()
	link, err := nl.LinkByName(cfg.Interface)
	if err != nil {
		return d, fmt.Errorf("find interface %q: %w", cfg.Interface, err)
	}
	attrs := link.Attrs()
	d.ifindex = attrs.Index
	if len(attrs.HardwareAddr) != 6 {
		return d, fmt.Errorf("interface %q has no Ethernet address", cfg.Interface)
	}
	copy(d.mac[:], attrs.HardwareAddr)
	if d.addr, err = localAddr(nl, link, cfg.Addr); err != nil {
		return d, err
	}
	mtu := cfg.MTU
	if mtu == 0 {
		mtu = attrs.MTU
	}
	ipHdr := 20
	if d.addr.Is6() {
		ipHdr = 40
	}
	d.maxPayload = mtu - ipHdr - 8
	if d.maxPayload <= 0 {
		return d, fmt.Errorf("mtu %d too small", mtu)
	}
	// The queues the interface uses now (ethtool -l); the kernel's count of allocated queues
	// (NumRxQueues) is larger on some drivers, and binding past the used ones fails.
	rxQueues, qerr := RXQueues(cfg.Interface)
	if qerr != nil {
		rxQueues = max(attrs.NumRxQueues, 1)
	}
	queues, err := planQueues(cfg.Interface, rxQueues, cfg.Queues, cfg.Steering)
	if err != nil {
		return d, err
	}
	if err := cfg.sizeQueues(len(queues)); err != nil {
		return d, err
	}
	d.cfg = cfg
	d.rxQueues = rxQueues
	// A frame the kernel receives into has XDP_PACKET_HEADROOM before the data; anything
	// longer than the rest needs multi-buffer.
	frameRoom := cfg.FrameSize - xsk.PacketHeadroom
	needSG := 14+4+mtu > frameRoom
	sg := xsk.MultiBufferAuto
	if needSG {
		sg = xsk.MultiBufferRequire
	}
	perQueue := cfg.Frames
	d.umem, err = memreg.NewUMEM(memreg.UMEMOptions{
		FrameSize: cfg.FrameSize, Frames: perQueue * len(queues), HeapSize: cfg.HeapSize, HugePages: cfg.HugePages,
	})
	if err != nil {
		return d, err
	}
	d.prog, err = bpf.Load(bpf.Options{Port: cfg.Port, QueueCount: max(attrs.NumRxQueues, len(queues), queues[len(queues)-1]+1)})
	if err != nil {
		return d, err
	}
	if d.resolver, err = nexthop.NewResolver(); err != nil {
		return d, err
	}
	if err := d.openNeighbours(cfg, attrs); err != nil {
		return d, err
	}
	var first *xsk.Socket
	for _, q := range queues {
		sc := xsk.SocketConfig{
			IfIndex: d.ifindex, Queue: q,
			RxSize: cfg.RingSize, FillSize: cfg.RingSize, CompSize: cfg.RingSize, TxSize: cfg.RingSize / 2,
			Bind: cfg.Bind, MultiBuffer: sg, NeedWakeup: !cfg.DisableNeedWakeup, Unaligned: true,
			Shared: first, BusyPoll: cfg.BusyPoll, TxBudget: int(cfg.RingSize / 2),
		}
		s, err := xsk.NewSocket(d.umem, sc)
		if err != nil {
			var be *xsk.BindError
			if errors.As(err, &be) {
				for _, r := range be.Refused {
					d.log.Info("xdp bind refused", "queue", q, "refused", r)
				}
			}
			if errors.Is(err, xsk.ErrBusy) {
				return d, d.queueBusy(q, err)
			}
			return d, err
		}
		if first == nil {
			first = s
			if err := d.limitZeroCopy(s, frameRoom, 14+ipHdr+8); err != nil {
				s.Close()
				return d, err
			}
		}
		pool, err := d.umem.NewFramePool(perQueue)
		if err != nil {
			s.Close()
			return d, err
		}
		l, err := newLink(d, s, pool, q)
		if err != nil {
			s.Close()
			return d, err
		}
		d.links = append(d.links, l)
		if err := d.prog.SetSocket(q, s.FD()); err != nil {
			return d, err
		}
	}
	d.devLink = newDeviceLink(d, d.links)
	if cfg.Steering == SteerNtuple {
		loc, err := insertNtuple(cfg.Interface, d.addr, cfg.Port, queues[0])
		if err != nil {
			return d, fmt.Errorf("steer our port to queue %d: %w; enable it (ethtool -K %s ntuple on), or serve every queue (leave Config.Queues empty)",
				queues[0], err, cfg.Interface)
		}
		d.ntuple = append(d.ntuple, loc)
	}
	// Attach last: until now our packets kept going to the kernel.
	if d.attach, err = d.prog.Attach(d.ifindex, cfg.Attach); err != nil {
		if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST) {
			return d, d.hookBusy(err)
		}
		return d, err
	}
	d.hops.Start()
	m := d.Mode()
	d.log.Info("xdp device open", "interface", cfg.Interface, "addr", d.addr, "port", cfg.Port,
		"queues", queues, "mode", m.String(), "max_payload", d.maxPayload, "zc_max_segs", d.zcMaxSegs)
	for _, l := range d.links {
		for _, f := range l.sock.Fallbacks() {
			d.log.Info("xdp bind fallback", "queue", l.queue, "refused", f)
		}
	}
	return d, nil
}

// limitZeroCopy learns, for a zero-copy socket s, how many descriptors the driver takes
// per packet (QueryNetdev's ZCMaxSegs; assumedZeroCopySegs when the kernel does not say),
// and lowers the payload limit so that a full-size packet fits in that many frames of
// frameRoom bytes. Packets needing more descriptors would be refused by the kernel as
// invalid. Copy mode has no such limit.
func (d *Device) limitZeroCopy(s *xsk.Socket, frameRoom, l2l3 int) error {
	if !s.Mode().ZeroCopy {
		return nil
	}
	segs := uint32(assumedZeroCopySegs)
	if info, err := QueryNetdev(d.ifindex); err != nil || info.ZCMaxSegs == 0 {
		d.log.Info("xdp zero-copy segment limit not reported; assuming", "segs", segs, "err", err)
	} else {
		segs = info.ZCMaxSegs
	}
	d.zcMaxSegs = int(min(segs, maxCopyModeDescs))
	if lim := zeroCopyPayloadLimit(segs, frameRoom, l2l3); lim < d.maxPayload {
		if lim < minZeroCopyPayload {
			return fmt.Errorf("zero-copy socket takes %d descriptors per packet: payload limit %d bytes is too small (bind copy mode, or use larger frames)", segs, lim)
		}
		d.log.Info("xdp payload limited by the zero-copy segment limit", "segs", segs, "max_payload", lim, "mtu_payload", d.maxPayload)
		d.maxPayload = lim
	}
	return nil
}

// minZeroCopyPayload is the smallest payload limit a zero-copy socket may impose before
// Open gives up: what the transport needs for a useful packet.
const minZeroCopyPayload = 512

// Device is our UDP port on one interface: the steering program, the UMEM and one Link per
// queue. Close releases all of it. Its methods are safe for concurrent use.
type Device struct {
	cfg        Config
	log        *slog.Logger
	ifindex    int
	mac        [6]byte
	addr       netip.Addr
	maxPayload int
	umem       *memreg.UMEM
	zcMaxSegs  int // descriptors per packet on a zero-copy socket (0: copy mode)
	prog       *bpf.Program
	attach     bpf.Mode
	links      []*Link
	devLink    *DeviceLink
	rxQueues   int      // RX queues the interface uses (served or not)
	ntuple     []uint32 // locations of the n-tuple rules Open installed (SteerNtuple)

	resolver *nexthop.Resolver // the worker's netlink socket
	hops     *nexthop.Table    // next hops of the peers, read by the links, and their worker

	mu     sync.Mutex // guards closed
	closed bool
}

// Links returns one Link per bound queue, in the order of Config.Queues.
func (d *Device) Links() []*Link { return d.links }

// DeviceLink returns every queue of the device as one link.Link, for one engine to
// serve them all (what ndk.Open runs its engine on).
func (d *Device) DeviceLink() *DeviceLink { return d.devLink }

// Queues returns the interface queues the device serves (one socket each), in Links order.
func (d *Device) Queues() []int { return d.devLink.Queues() }

// InterfaceQueues returns how many RX queues the interface uses, served or not.
func (d *Device) InterfaceQueues() int { return d.rxQueues }

// Steering returns how datagrams reach the queues served (Config.Steering).
func (d *Device) Steering() Steering { return d.cfg.Steering }

// UMEM returns the device's pinned memory.
func (d *Device) UMEM() *memreg.UMEM { return d.umem }

// Program returns the attached steering program (for its counters and fault injection).
func (d *Device) Program() *bpf.Program { return d.prog }

// Addr returns the local IP address datagrams are sent from and received on.
func (d *Device) Addr() netip.Addr { return d.addr }

// Mode is what a Device got from the kernel.
type Mode struct {
	Attach bpf.Mode        // native (driver) or generic (SKB) XDP
	Socket xsk.SocketMode  // of the first queue's socket; all queues share it
	Pages  memreg.PageKind // what backs the UMEM
}

// String describes the mode for logs, e.g. "xdp=native af_xdp=copy+sg+need_wakeup pages=thp".
func (m Mode) String() string {
	return fmt.Sprintf("xdp=%v af_xdp=%v pages=%v", m.Attach, m.Socket, m.Pages)
}

// Mode reports the modes in effect.
func (d *Device) Mode() Mode {
	m := Mode{Attach: d.attach}
	if len(d.links) > 0 {
		m.Socket = d.links[0].sock.Mode()
	}
	if d.umem != nil {
		m.Pages = d.umem.Pages()
	}
	return m
}

// openNeighbours creates the next-hop table, its resolution worker (started by Open once
// the links exist) and the worker's backend, subscribed to the kernel's neighbour events.
// It runs in the interface's namespace.
func (d *Device) openNeighbours(cfg Config, attrs *netlink.LinkAttrs) error {
	nc := nexthop.Config{
		SrcMAC: d.mac, Src: d.addr, Port: cfg.Port, Entries: cfg.NeighbourEntries,
		MaxResolving: cfg.NeighbourResolving, ResolveTimeout: cfg.ResolveTimeout,
		NegativeTTL: cfg.NegativeTTL, Refresh: cfg.NeighbourRefresh, Wake: d.ringHolders,
		Resolve: cfg.resolve, Resolver: d.resolver, IfIndex: d.ifindex,
	}
	if cfg.resolve == nil {
		switch {
		case attrs.Flags&net.FlagLoopback != 0:
			nc.DevErr = fmt.Errorf("%s is a loopback device: %w", attrs.Name, nexthop.ErrNoEthernetNextHop)
		case attrs.RawFlags&unix.IFF_NOARP != 0:
			nc.DevErr = fmt.Errorf("device %s does not resolve neighbours (NOARP): %w", attrs.Name, nexthop.ErrNoEthernetNextHop)
		}
	}
	var err error
	d.hops, err = nexthop.NewTable(nc)
	return err
}

// ringHolders rings the doorbell of every link that holds datagrams (the worker calls it
// after a round that finished resolutions).
func (d *Device) ringHolders() {
	for _, l := range d.links {
		if l.holding.Load() {
			l.Wake()
		}
	}
}

// ResolvePeer makes sure the device knows the next hop towards peer: it returns nil once
// the peer is resolved, at once if it is already. Otherwise it has the device's worker
// resolve it and waits, up to Config.ResolveTimeout, for the result: an error wrapping
// nexthop.ErrNextHopUnresolved (nobody answered ARP or neighbour discovery),
// nexthop.ErrNoRoute (no route, or not through this device) or
// nexthop.ErrNoEthernetNextHop; a resolution that failed less than Config.NegativeTTL ago
// fails at once with its error. If ctx ends first it returns an
// error wrapping ctx.Err(), and the resolution goes on for the datagrams that follow.
// It blocks its caller only: call it when a peer is set up (ndk's Connect does), never
// from the goroutine that runs the links.
func (d *Device) ResolvePeer(ctx context.Context, peer netip.Addr) error {
	if err := nexthop.CheckPeer(peer, d.addr); err != nil {
		return err
	}
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed || d.hops == nil || !d.hops.Running() {
		return fmt.Errorf("resolve %v: xdp device closed", peer)
	}
	return d.hops.ResolvePeer(ctx, peer)
}

// Neighbour returns the device's next-hop table entry for peer, if it has one.
func (d *Device) Neighbour(peer netip.Addr) (nexthop.NeighbourInfo, bool) {
	return d.hops.Info(peer)
}

// NeighbourStats returns the counters of the device's next-hop table and worker.
func (d *Device) NeighbourStats() nexthop.NeighbourStats { return d.hops.Stats() }

// Close closes every link, detaches and unloads the program, and frees the UMEM. It is
// idempotent.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	if d.hops != nil {
		d.hops.Close()
	}
	var errs []error
	if d.prog != nil {
		// Detach first so no packet is redirected into a closing socket.
		errs = append(errs, d.prog.Close())
	}
	for _, loc := range d.ntuple {
		errs = append(errs, deleteNtuple(d.cfg.Interface, loc))
	}
	for _, l := range d.links {
		errs = append(errs, l.Close())
	}
	if d.resolver != nil {
		d.resolver.Close()
	}
	if d.umem != nil {
		errs = append(errs, d.umem.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close xdp device: %w", err)
	}
	return nil
}

// localAddr picks the address to use on link: want if given (it must be configured on the
// link), else the first IPv4 address, else the first global IPv6 address.
func localAddr(nl *netlink.Handle, link netlink.Link, want netip.Addr) (netip.Addr, error) {
	addrs, err := nl.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("list addresses of %s: %w", link.Attrs().Name, err)
	}
	var v6 netip.Addr
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		switch {
		case want.IsValid():
			if ip == want {
				return ip, nil
			}
		case ip.Is4():
			return ip, nil
		case !v6.IsValid() && ip.IsGlobalUnicast():
			v6 = ip
		}
	}
	if want.IsValid() {
		return netip.Addr{}, fmt.Errorf("address %v is not configured on %s", want, link.Attrs().Name)
	}
	if v6.IsValid() {
		return v6, nil
	}
	return netip.Addr{}, fmt.Errorf("interface %s has no usable IP address", link.Attrs().Name)
}
