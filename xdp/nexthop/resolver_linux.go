package nexthop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Neighbour states (include/uapi/linux/neighbour.h) in which the kernel's entry holds a
// usable link-layer address. NUD_NOARP is among them because the route was checked first:
// on an ARP-capable Ethernet device the kernel itself gives NOARP only to broadcast and
// multicast entries, which a unicast route never targets, so a NOARP entry for a unicast
// next hop is a static one an administrator added (`ip neigh add ... nud noarp`).
const nudUsable = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY |
	netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP

// Polling schedule while the kernel resolves a neighbour: the first look comes soon after
// the request (on a LAN the answer takes tens to hundreds of microseconds), then the
// interval grows by half each time up to a cap, so a slow or absent peer costs about 20
// netlink dumps a second.
const (
	neighPollFirst = 50 * time.Microsecond
	neighPollMax   = 50 * time.Millisecond
)

// Resolver finds the Ethernet next hop for a peer IP address through the kernel's routing
// and neighbour tables (rtnetlink), in the network namespace it was created in.
//
// It owns one netlink socket. NextHop may be called from any goroutine, also concurrently;
// Close must not run concurrently with NextHop. It is a control-path tool: NextHop allocates
// and makes system calls, so call it when a peer is set up (and again when the peer stops
// answering), not per packet.
type Resolver struct {
	h *netlink.Handle
}

// NextHop is where datagrams to one peer go on the wire: the result of Resolver.NextHop.
// It is a snapshot; the kernel may change its mind later (see Resolver.NextHop).
type NextHop struct {
	// IfIndex is the index of the outgoing interface, in the resolver's namespace.
	IfIndex int
	// Src is the source address the kernel would use towards the peer (the route's
	// preferred source).
	Src netip.Addr
	// MAC is the Ethernet address of the next hop: the gateway for off-link peers, the peer
	// itself on-link. It goes into Encap.DstMAC.
	MAC [6]byte
	// Gateway is the router the datagrams go through, or the zero (invalid) Addr when the
	// peer is on-link.
	Gateway netip.Addr
	// LocalMAC is the outgoing interface's own Ethernet address. It goes into Encap.SrcMAC.
	LocalMAC [6]byte
	// MTU is the outgoing interface's MTU in bytes (the largest IP datagram it sends).
	MTU int
}

// NewResolver opens a resolver on the network namespace of the calling OS thread, which is
// the process's namespace unless the caller has locked its goroutine to a thread
// (runtime.LockOSThread) and moved that thread into another namespace (setns): the netlink
// socket is bound to the namespace at creation and stays there, whichever thread uses it
// later. Close releases it.
func NewResolver() (*Resolver, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("new resolver: open rtnetlink socket: %w", err)
	}
	return &Resolver{h: h}, nil
}

// Close closes the resolver's netlink socket. It is idempotent. It must not run
// concurrently with NextHop.
func (r *Resolver) Close() {
	if r.h != nil {
		r.h.Close()
		r.h = nil
	}
}

// NextHop returns the interface, the source address the kernel would use, and the Ethernet
// address of the next hop towards dst (the gateway for off-link peers, dst itself on-link).
// It asks the kernel for the route (RTM_GETROUTE, as `ip route get` does) and reads the
// neighbour table; dst may carry an IPv6 zone (interface name or index) for link-local
// peers, and an IPv4-mapped IPv6 dst is treated as IPv4.
//
// If the neighbour entry is missing or not valid (absent, NONE, INCOMPLETE, FAILED), NextHop
// asks the kernel to resolve it the way `ip neigh replace ... use` does (RTM_NEWNEIGH with
// NTF_USE: net/core/neighbour.c neigh_add creates the entry if needed and calls
// neigh_event_send, which sends an ARP request or neighbour solicitation right away), then
// polls the neighbour table until the entry is REACHABLE, STALE, DELAY, PROBE, PERMANENT or
// NOARP, re-asking if it turns FAILED, until ctx is done. Give ctx a deadline: with the
// default sysctls the kernel gives up on a silent address after 3 probes one second apart,
// and NextHop keeps trying for as long as ctx allows. On a LAN, resolution takes from a
// fraction of a millisecond to a few milliseconds; an entry already valid is returned at
// once. A STALE entry is returned at once too, and the kernel is asked (NTF_USE) to
// revalidate it in the background, since datagrams sent over AF_XDP never confirm the
// neighbour to the kernel.
//
// A PERMANENT or NOARP (static) entry is used as is and never touched. The MAC is never
// guessed: if the route goes through a loopback, NOARP or non-Ethernet device, the error
// wraps ErrNoEthernetNextHop; if ctx ends first, it wraps ErrNextHopUnresolved and
// ctx.Err().
func (r *Resolver) NextHop(ctx context.Context, dst netip.Addr) (NextHop, error) {
	var nh NextHop
	if r.h == nil {
		return nh, fmt.Errorf("next hop for %v: resolver is closed", dst)
	}
	if !dst.IsValid() {
		return nh, errors.New("next hop: invalid destination address")
	}
	zone := dst.Zone()
	dst = dst.Unmap().WithZone("")
	var opts *netlink.RouteGetOptions
	if zone != "" {
		idx, err := r.zoneIndex(zone)
		if err != nil {
			return nh, fmt.Errorf("next hop for %v%%%s: %w", dst, zone, err)
		}
		opts = &netlink.RouteGetOptions{OifIndex: idx}
	}
	routes, err := r.h.RouteGetWithOptions(net.IP(dst.AsSlice()), opts)
	if err != nil {
		return nh, fmt.Errorf("next hop for %v: route lookup: %w", dst, err)
	}
	if len(routes) == 0 {
		return nh, fmt.Errorf("next hop for %v: route lookup returned no route", dst)
	}
	rt := routes[0]
	switch rt.Type {
	case unix.RTN_UNICAST:
	case unix.RTN_LOCAL:
		return nh, fmt.Errorf("next hop for %v: it is a local address of this host, reached over loopback: %w",
			dst, ErrNoEthernetNextHop)
	default:
		return nh, fmt.Errorf("next hop for %v: route type %d is not unicast: %w",
			dst, rt.Type, ErrNoEthernetNextHop)
	}

	link, err := r.h.LinkByIndex(rt.LinkIndex)
	if err != nil {
		return nh, fmt.Errorf("next hop for %v: interface %d: %w", dst, rt.LinkIndex, err)
	}
	attrs := link.Attrs()
	switch {
	case attrs.Flags&net.FlagLoopback != 0:
		return nh, fmt.Errorf("next hop for %v: route leaves through loopback device %s: %w",
			dst, attrs.Name, ErrNoEthernetNextHop)
	case attrs.RawFlags&unix.IFF_NOARP != 0:
		return nh, fmt.Errorf("next hop for %v: device %s does not resolve neighbours (NOARP): %w",
			dst, attrs.Name, ErrNoEthernetNextHop)
	case attrs.EncapType != "ether" || len(attrs.HardwareAddr) != 6:
		return nh, fmt.Errorf("next hop for %v: device %s is not Ethernet (link type %s): %w",
			dst, attrs.Name, attrs.EncapType, ErrNoEthernetNextHop)
	}
	nh.IfIndex = rt.LinkIndex
	nh.LocalMAC = [6]byte(attrs.HardwareAddr)
	nh.MTU = attrs.MTU

	src, ok := netip.AddrFromSlice(rt.Src)
	if !ok {
		return nh, fmt.Errorf("next hop for %v: the kernel names no source address (no address on %s?)",
			dst, attrs.Name)
	}
	nh.Src = src.Unmap()

	target := dst
	if rt.Gw != nil {
		gw, _ := netip.AddrFromSlice(rt.Gw)
		nh.Gateway = gw.Unmap()
	} else if via, ok := rt.Via.(*netlink.Via); ok && via != nil {
		gw, _ := netip.AddrFromSlice(via.Addr) // an IPv6 router for an IPv4 route (RFC 5549)
		nh.Gateway = gw.Unmap()
	}
	if nh.Gateway.IsValid() {
		target = nh.Gateway
	}
	mac, err := r.resolve(ctx, rt.LinkIndex, target)
	if err != nil {
		if nh.Gateway.IsValid() {
			return NextHop{}, fmt.Errorf("next hop for %v via gateway %v on %s: %w", dst, target, attrs.Name, err)
		}
		return NextHop{}, fmt.Errorf("next hop for %v on %s: %w", dst, attrs.Name, err)
	}
	nh.MAC = mac
	return nh, nil
}

// zoneIndex turns an IPv6 zone (interface name or decimal index) into an interface index
// in the resolver's namespace.
func (r *Resolver) zoneIndex(zone string) (int, error) {
	if idx, err := strconv.Atoi(zone); err == nil && idx > 0 {
		return idx, nil
	}
	link, err := r.h.LinkByName(zone)
	if err != nil {
		return 0, fmt.Errorf("zone %q: %w", zone, err)
	}
	return link.Attrs().Index, nil
}

// resolve returns the MAC of neighbour ip on interface ifIndex, asking the kernel to
// resolve it and polling until it is valid or ctx is done.
func (r *Resolver) resolve(ctx context.Context, ifIndex int, ip netip.Addr) ([6]byte, error) {
	delay := neighPollFirst
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	asked := 0
	for {
		n, found, err := r.lookupNeigh(ifIndex, ip)
		if err != nil {
			return [6]byte{}, err
		}
		state := 0
		if found {
			state = n.State
		}
		if state&nudUsable != 0 && len(n.HardwareAddr) == 6 {
			if state&netlink.NUD_STALE != 0 && asked == 0 {
				// Best effort: a failure only means the entry is not refreshed now.
				_ = r.askResolve(ifIndex, ip)
			}
			return [6]byte(n.HardwareAddr), nil
		}
		// Absent, NONE or FAILED: (re)start resolution. INCOMPLETE means the kernel is at
		// it already; asking again would not speed it up.
		if state == netlink.NUD_NONE || state&netlink.NUD_FAILED != 0 {
			if err := r.askResolve(ifIndex, ip); err != nil {
				return [6]byte{}, err
			}
			asked++
		}
		if timer == nil {
			timer = time.NewTimer(delay)
		} else {
			timer.Reset(delay)
		}
		select {
		case <-ctx.Done():
			return [6]byte{}, fmt.Errorf("neighbour %v is %s after %d resolution requests: %w: %w",
				ip, neighStateString(state, found), asked, ErrNextHopUnresolved, ctx.Err())
		case <-timer.C:
		}
		delay = min(delay+delay/2, neighPollMax)
	}
}

// lookupNeigh finds the kernel's neighbour entry for ip on interface ifIndex.
func (r *Resolver) lookupNeigh(ifIndex int, ip netip.Addr) (netlink.Neigh, bool, error) {
	family := netlink.FAMILY_V4
	if ip.Is6() {
		family = netlink.FAMILY_V6
	}
	var list []netlink.Neigh
	var err error
	for range 3 { // a dump interrupted by a concurrent change is retried
		list, err = r.h.NeighList(ifIndex, family)
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return netlink.Neigh{}, false, fmt.Errorf("list neighbours on interface %d: %w", ifIndex, err)
	}
	for _, n := range list {
		if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == ip {
			return n, true, nil
		}
	}
	return netlink.Neigh{}, false, nil
}

// askResolve sends RTM_NEWNEIGH with NTF_USE for ip on interface ifIndex: the kernel creates
// the entry if it is missing (NLM_F_CREATE) and starts resolving it, exactly as if it had a
// packet to send there. The state and link-layer address of an existing entry are left as
// they are, so this is only used on entries that are not PERMANENT (the kernel would drop
// the permanent bit).
func (r *Resolver) askResolve(ifIndex int, ip netip.Addr) error {
	family := netlink.FAMILY_V4
	if ip.Is6() {
		family = netlink.FAMILY_V6
	}
	err := r.h.NeighSet(&netlink.Neigh{
		LinkIndex: ifIndex,
		Family:    family,
		IP:        net.IP(ip.AsSlice()),
		Flags:     netlink.NTF_USE,
	})
	if err != nil {
		return fmt.Errorf("ask kernel to resolve %v on interface %d: %w", ip, ifIndex, err)
	}
	return nil
}

// neighStateString names a neighbour state for error messages.
func neighStateString(state int, found bool) string {
	if !found {
		return "absent"
	}
	switch {
	case state == netlink.NUD_NONE:
		return "NONE"
	case state&netlink.NUD_INCOMPLETE != 0:
		return "INCOMPLETE"
	case state&netlink.NUD_FAILED != 0:
		return "FAILED"
	case state&nudUsable != 0:
		return "valid"
	}
	return fmt.Sprintf("state %#x", state)
}
