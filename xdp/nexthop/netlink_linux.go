package nexthop

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// netlinkBackend resolves next hops through the kernel's routing and neighbour tables, in
// the device's network namespace, for many peers at once: a route lookup per peer when its
// job starts; then, per neighbour (the peer on-link, its gateway off-link), one request to
// resolve (RTM_NEWNEIGH with NTF_USE, as Resolver.resolve does) when the kernel has no
// usable entry; then one dump of the neighbour table per poll for every neighbour waited
// for, at growing intervals (nlPollFirst, nlPollMax). Kernel neighbour events (RTNLGRP_NEIGH) finish waits early and
// update resolved entries whose neighbour changed its MAC.
type netlinkBackend struct {
	h       *netlink.Handle // the device's resolver socket
	ifindex int
	devErr  error // the device cannot resolve neighbours (IFF_NOARP, loopback): every job fails

	waiting  map[netip.Addr][]*neighJob // jobs by the neighbour they wait for
	seen     map[netip.Addr]netlink.Neigh
	interval time.Duration // until the next poll while jobs wait
	gap      int64         // no dump sooner than this after the previous one ended
	lastEnd  int64         // table clock when the previous dump ended

	ns      netns.NsHandle // the device's namespace, for (re)subscribing from the worker
	subDone chan struct{}  // closes the current subscription
	resubAt int64          // when to try subscribing again (0: subscribed)
}

// Polling schedule of the neighbours waited for, after the first look (a dump at once when
// a job starts) and the request to resolve: the first poll 1 ms later, then at doubling
// intervals up to 100 ms. Kernel neighbour events normally finish a wait first (a LAN peer
// answers ARP in well under a millisecond, and the event follows at once), so polling is
// the fallback for lost events and costs a pending peer about ten dumps a second; polling
// faster would only take the CPU from the engines on a small machine.
const (
	nlPollFirst = time.Millisecond
	nlPollMax   = 100 * time.Millisecond
)

// nlDumpShare is the largest share of its time the worker spends dumping the neighbour
// table: after a dump that took d, the next waits at least (nlDumpShare-1)·d. A table
// swollen by a flood of unresolvable addresses makes dumps slow; this keeps polling from
// taking a core on a small machine while events still finish resolutions at once.
const nlDumpShare = 5

// nlResubscribe is the pause before subscribing again to neighbour events after the
// stream failed (typically ENOBUFS: the kernel overran the socket during a flood).
const nlResubscribe = time.Second

// newNetlinkBackend creates the backend for device ifindex, on resolver r's socket, and
// subscribes to the kernel's neighbour events. It must run on a thread in the device's
// namespace (Open does).
func newNetlinkBackend(r *Resolver, ifindex int, devErr error) (*netlinkBackend, error) {
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("get network namespace: %w", err)
	}
	return &netlinkBackend{
		h: r.h, ifindex: ifindex, devErr: devErr,
		waiting: make(map[netip.Addr][]*neighJob),
		seen:    make(map[netip.Addr]netlink.Neigh),
		ns:      ns,
	}, nil
}

// subscribe starts the neighbour event subscription feeding w. From any goroutine: the
// socket is opened in the device's namespace.
func (b *netlinkBackend) subscribe(w *neighWorker) error {
	ch := make(chan netlink.NeighUpdate, neighNotesLen)
	done := make(chan struct{})
	err := netlink.NeighSubscribeWithOptions(ch, done, netlink.NeighSubscribeOptions{
		Namespace: &b.ns,
		// Room for a burst of events (the kernel caps it at net.core.rmem_max).
		ReceiveBufferSize: 1 << 20,
	})
	if err != nil {
		return fmt.Errorf("subscribe to neighbour events: %w", err)
	}
	b.subDone, b.resubAt = done, 0
	go b.forward(w, ch)
	return nil
}

// forward passes the events about the device's neighbours to the worker, then reports the
// end of the stream. After the worker stopped it drains ch until the subscription closes.
func (b *netlinkBackend) forward(w *neighWorker, ch <-chan netlink.NeighUpdate) {
	for u := range ch {
		n, ok := b.translate(u)
		if !ok {
			continue
		}
		select {
		case w.notes <- n:
		case <-w.done:
			for range ch {
			}
			return
		}
	}
	select {
	case w.notes <- neighNote{lost: true}:
	case <-w.done:
	}
}

// translate turns a kernel event into a note: a neighbour of the device with a usable MAC,
// or one that failed. Anything else (other devices, incomplete entries, deletions, bridge
// entries) is not needed.
func (b *netlinkBackend) translate(u netlink.NeighUpdate) (neighNote, bool) {
	n := &u.Neigh
	if u.Type != unix.RTM_NEWNEIGH || n.LinkIndex != b.ifindex {
		return neighNote{}, false
	}
	ip, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return neighNote{}, false
	}
	note := neighNote{target: ip.Unmap()}
	switch {
	case n.State&nudUsable != 0 && len(n.HardwareAddr) == 6:
		note.usable, note.mac = true, [6]byte(n.HardwareAddr)
	case n.State&netlink.NUD_FAILED != 0:
		note.failed = true
	default:
		return neighNote{}, false
	}
	return note, true
}

// start looks up the route to the job's peer and queues the job for its neighbour.
func (b *netlinkBackend) start(w *neighWorker, j *neighJob) {
	ip := j.e.ip
	if b.devErr != nil {
		w.finish(j, [6]byte{}, netip.Addr{}, fmt.Errorf("next hop for %v: %w", ip, b.devErr))
		return
	}
	gw, err := b.route(ip)
	if err != nil {
		w.finish(j, [6]byte{}, netip.Addr{}, fmt.Errorf("next hop for %v: %w", ip, err))
		return
	}
	j.gateway, j.target = gw, ip.WithZone("")
	if gw.IsValid() {
		j.target = gw
	}
	b.waiting[j.target] = append(b.waiting[j.target], j)
	b.interval = nlPollFirst
	w.wantPoll(w.t.clock.Load())
}

// route asks the kernel for the route to ip (RTM_GETROUTE) and returns its gateway (the
// zero Addr on-link). The route must be a unicast route through the device.
func (b *netlinkBackend) route(ip netip.Addr) (netip.Addr, error) {
	var opts *netlink.RouteGetOptions
	if ip.Is6() && ip.IsLinkLocalUnicast() {
		opts = &netlink.RouteGetOptions{OifIndex: b.ifindex} // a link-local peer is on our link
	}
	routes, err := b.h.RouteGetWithOptions(net.IP(ip.WithZone("").AsSlice()), opts)
	if err != nil {
		switch {
		case errors.Is(err, unix.ENETUNREACH), errors.Is(err, unix.EHOSTUNREACH),
			errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM), errors.Is(err, unix.EINVAL):
			return netip.Addr{}, fmt.Errorf("route lookup: %v: %w", err, ErrNoRoute)
		}
		return netip.Addr{}, fmt.Errorf("route lookup: %w", err)
	}
	if len(routes) == 0 {
		return netip.Addr{}, fmt.Errorf("route lookup returned no route: %w", ErrNoRoute)
	}
	rt := routes[0]
	switch rt.Type {
	case unix.RTN_UNICAST:
	case unix.RTN_LOCAL:
		return netip.Addr{}, fmt.Errorf("it is a local address of this host, reached over loopback: %w", ErrNoEthernetNextHop)
	case unix.RTN_UNREACHABLE, unix.RTN_BLACKHOLE, unix.RTN_PROHIBIT, unix.RTN_THROW:
		return netip.Addr{}, fmt.Errorf("route type %d: %w", rt.Type, ErrNoRoute)
	default:
		return netip.Addr{}, fmt.Errorf("route type %d is not unicast: %w", rt.Type, ErrNoEthernetNextHop)
	}
	if rt.LinkIndex != b.ifindex {
		return netip.Addr{}, fmt.Errorf("the route leaves through interface %d, not the device's %d: %w",
			rt.LinkIndex, b.ifindex, ErrNoRoute)
	}
	var gw netip.Addr
	if rt.Gw != nil {
		gw, _ = netip.AddrFromSlice(rt.Gw)
	} else if via, ok := rt.Via.(*netlink.Via); ok && via != nil {
		gw, _ = netip.AddrFromSlice(via.Addr) // an IPv6 router for an IPv4 route (RFC 5549)
	}
	return gw.Unmap(), nil
}

// poll dumps the neighbour table once for every neighbour waited for: usable ones finish
// their jobs; absent, NONE or FAILED ones are asked for (again); INCOMPLETE ones wait.
func (b *netlinkBackend) poll(w *neighWorker, now int64) {
	if len(b.waiting) == 0 {
		return
	}
	if earliest := b.lastEnd + b.gap; now < earliest {
		w.wantPoll(earliest)
		return
	}
	t0 := time.Now()
	clear(b.seen)
	var v4, v6 bool
	for target := range b.waiting {
		v4, v6 = v4 || target.Is4(), v6 || target.Is6()
	}
	var failed4, failed6 bool
	if v4 {
		failed4 = b.dump(netlink.FAMILY_V4) != nil
	}
	if v6 {
		failed6 = b.dump(netlink.FAMILY_V6) != nil
	}
	for target, jobs := range b.waiting {
		n, found := b.seen[target]
		state := 0
		if found {
			state = n.State
		}
		switch {
		case state&nudUsable != 0 && len(n.HardwareAddr) == 6:
			if state&netlink.NUD_STALE != 0 {
				// Datagrams over AF_XDP never confirm the neighbour to the kernel: ask it
				// to revalidate (best effort; the next re-validation looks again).
				_ = b.ask(target)
			}
			delete(b.waiting, target)
			mac := [6]byte(n.HardwareAddr)
			for _, j := range jobs {
				w.finish(j, mac, j.gateway, nil)
			}
		case (target.Is4() && failed4) || (target.Is6() && failed6):
			// No answer from the dump: look again at the next poll.
		case !found || state == netlink.NUD_NONE || state&netlink.NUD_FAILED != 0:
			if err := b.ask(target); err != nil {
				delete(b.waiting, target)
				for _, j := range jobs {
					w.finish(j, [6]byte{}, netip.Addr{}, fmt.Errorf("next hop for %v: %w", j.e.ip, err))
				}
				continue
			}
			for _, j := range jobs {
				j.asked++
			}
		}
	}
	d := time.Since(t0)
	b.lastEnd = now + int64(d)
	b.gap = (nlDumpShare - 1) * int64(d)
	if len(b.waiting) > 0 {
		w.wantPoll(max(now+int64(b.interval), b.lastEnd+b.gap))
		b.interval = min(2*b.interval, nlPollMax)
	}
}

// dump lists the device's neighbours of family into b.seen, keeping those waited for.
func (b *netlinkBackend) dump(family int) error {
	var list []netlink.Neigh
	var err error
	for range 3 { // a dump interrupted by a concurrent change is retried
		list, err = b.h.NeighList(b.ifindex, family)
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return err
	}
	for _, n := range list {
		a, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		if _, want := b.waiting[a.Unmap()]; want {
			b.seen[a.Unmap()] = n
		}
	}
	return nil
}

// ask has the kernel resolve neighbour ip of the device (see Resolver.askResolve).
func (b *netlinkBackend) ask(ip netip.Addr) error {
	family := netlink.FAMILY_V4
	if ip.Is6() {
		family = netlink.FAMILY_V6
	}
	err := b.h.NeighSet(&netlink.Neigh{
		LinkIndex: b.ifindex, Family: family, IP: net.IP(ip.AsSlice()), Flags: netlink.NTF_USE,
	})
	if err != nil {
		return fmt.Errorf("ask kernel to resolve %v on interface %d: %w", ip, b.ifindex, err)
	}
	return nil
}

// note applies a kernel event, or the loss of the event stream.
func (b *netlinkBackend) note(w *neighWorker, n neighNote) {
	switch {
	case n.lost:
		w.t.stats.eventsLost.Add(1)
		if b.subDone != nil {
			close(b.subDone)
			b.subDone = nil
		}
		b.resubAt = w.t.clock.Load() + int64(nlResubscribe)
		// Changes may have gone unseen: re-validate every resolved entry in use.
		w.staleAll()
	case n.usable:
		if jobs, ok := b.waiting[n.target]; ok {
			delete(b.waiting, n.target)
			for _, j := range jobs {
				w.finish(j, n.mac, j.gateway, nil)
			}
		}
		w.neighbourChanged(n.target, n.mac)
	case n.failed:
		w.neighbourFailed(n.target)
	}
}

// forget drops j from the neighbour it waits for.
func (b *netlinkBackend) forget(j *neighJob) {
	jobs := b.waiting[j.target]
	for i, x := range jobs {
		if x == j {
			jobs = append(jobs[:i], jobs[i+1:]...)
			break
		}
	}
	if len(jobs) == 0 {
		delete(b.waiting, j.target)
	} else {
		b.waiting[j.target] = jobs
	}
}

// tick subscribes again to neighbour events after the stream was lost.
func (b *netlinkBackend) tick(w *neighWorker, now int64) {
	if b.subDone != nil || b.resubAt == 0 || now < b.resubAt {
		return
	}
	if err := b.subscribe(w); err != nil {
		b.resubAt = now + int64(nlResubscribe)
	}
}

// close ends the subscription and releases the namespace handle.
func (b *netlinkBackend) close() {
	if b.subDone != nil {
		close(b.subDone)
		b.subDone = nil
	}
	_ = b.ns.Close()
}
