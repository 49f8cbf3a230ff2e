package xdp

import (
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpndk/xdpndk/transport/link"
)

// DeviceLink is several queues of a Device as one link.Link: every queue
// (Device.DeviceLink), so that one engine serves all the interface's RX queues
// (docs/DATAPATH.md, "Every queue served"): a NIC's RSS spreads the datagrams of our port
// over its queues by a hash of their addresses and ports, so a QP's datagrams (and a
// listener's connection requests) may arrive on any of them; or a share of them
// (Device.DeviceLinks), one for each of several engines.
//
// Receive takes datagrams from every queue's socket in turn, starting at a different queue
// each call so that none starves; Release gives each frame back to the socket it came from.
// Send transmits each datagram on the queue its flow (peer address and port, our port)
// hashes to, so that one QP's datagrams leave in order through one TX ring while different
// QPs spread over the queues. TxDone gathers every queue's cookies; Wait sleeps in one
// ppoll on every socket and doorbell.
//
// One engine goroutine owns it, as it owns a Link; Wake, Stats and Close are safe from any
// goroutine. It allocates nothing per datagram.
type DeviceLink struct {
	dev   *Device
	links []*Link

	// engine-owned state
	next    int          // the queue Receive starts at
	ranges  []rxRange    // what the last Receive took from each queue, in order
	lastRx  *link.Packet // the first packet of the last Receive's slice
	lastN   int
	pollfds []unix.PollFd // every socket, then every doorbell
	timeout unix.Timespec
	// Watch's own copy of the poll set (one watcher at a time: it runs beside the engine)
	watchfds []unix.PollFd
	watchts  unix.Timespec
	closed   atomic.Bool
}

// rxRange is a run of packets of one Receive call that came from one queue.
type rxRange struct{ link, from, to int }

// newDeviceLink composes links, queues of device d, into one.
func newDeviceLink(d *Device, links []*Link) *DeviceLink {
	dl := &DeviceLink{dev: d, links: links, ranges: make([]rxRange, 0, len(links))}
	for _, l := range links {
		dl.pollfds = append(dl.pollfds, unix.PollFd{Fd: int32(l.sock.FD()), Events: unix.POLLIN})
	}
	for _, l := range links {
		dl.pollfds = append(dl.pollfds, unix.PollFd{Fd: int32(l.eventfd), Events: unix.POLLIN})
	}
	dl.watchfds = append([]unix.PollFd(nil), dl.pollfds...)
	return dl
}

// DeviceLinks splits the device's queues into n disjoint DeviceLinks, one for each of n
// engines (docs/DATAPATH.md, "Several engines"): the k-th queue served (in Queues order)
// goes to link k mod n, so two hosts that serve the same number of queues with the same
// n give queue q to the engine of the same index. n is clamped to [1, len(Queues)]. Each
// link is owned by one engine goroutine as DeviceLink is; they share the device's UMEM,
// program and next-hop table, never a ring. Every call makes new links; closing one
// closes its queues' sockets (Device.Close closes them all anyway).
func (d *Device) DeviceLinks(n int) []*DeviceLink {
	n = max(1, min(n, len(d.links)))
	parts := make([][]*Link, n)
	for k, l := range d.links {
		parts[k%n] = append(parts[k%n], l)
	}
	out := make([]*DeviceLink, n)
	for i, p := range parts {
		out[i] = newDeviceLink(d, p)
	}
	return out
}

// Receive implements link.Link.
func (dl *DeviceLink) Receive(pkts []link.Packet) (int, error) {
	n := len(dl.links)
	got := 0
	dl.ranges = dl.ranges[:0]
	start := dl.next
	dl.next++
	if dl.next == n {
		dl.next = 0
	}
	for i := 0; i < n && got < len(pkts); i++ {
		k := start + i
		if k >= n {
			k -= n
		}
		m, err := dl.links[k].Receive(pkts[got:])
		if err != nil {
			dl.release(pkts[:got]) // a closed link: give back what the others handed out
			return 0, err
		}
		if m > 0 {
			dl.ranges = append(dl.ranges, rxRange{link: k, from: got, to: got + m})
			got += m
		}
	}
	dl.lastN = got
	if got > 0 {
		dl.lastRx = &pkts[0]
	}
	return got, nil
}

// Release implements link.Link: each packet goes back to the queue it came from. The
// engine releases the very slice Receive filled, which goes back by the runs Receive noted;
// any other slice is sorted out packet by packet by the frame each one lies in.
func (dl *DeviceLink) Release(pkts []link.Packet) {
	if len(pkts) > 0 && len(pkts) == dl.lastN && &pkts[0] == dl.lastRx {
		for _, r := range dl.ranges {
			dl.links[r.link].Release(pkts[r.from:r.to])
		}
		dl.lastN, dl.lastRx = 0, nil
		return
	}
	dl.release(pkts)
}

// release gives packets back one at a time, each to the queue whose frame pool holds it.
func (dl *DeviceLink) release(pkts []link.Packet) {
	for i := range pkts {
		l := dl.owner(&pkts[i])
		if l == nil {
			continue // not one of ours: nothing to give back
		}
		l.Release(pkts[i : i+1])
	}
}

// owner returns the link whose frame pool holds the packet's first segment.
func (dl *DeviceLink) owner(p *link.Packet) *Link {
	if p.NSegs == 0 {
		return nil
	}
	off, ok := offsetIn(dl.links[0].mem, p.Segs[0])
	if !ok {
		return nil
	}
	for _, l := range dl.links {
		if l.pool.Owns(off) {
			return l
		}
	}
	return nil
}

// Send implements link.Link: consecutive datagrams that go out on the same queue are
// handed to its link together.
func (dl *DeviceLink) Send(pkts []link.Packet) (int, error) {
	sent := 0
	for sent < len(pkts) {
		k := dl.txQueue(&pkts[sent])
		end := sent + 1
		for end < len(pkts) && dl.txQueue(&pkts[end]) == k {
			end++
		}
		m, err := dl.links[k].Send(pkts[sent:end])
		want := end - sent
		sent += m
		if err != nil || m < want {
			return sent, err // as Link.Send: the first m went; the error names the next
		}
	}
	return sent, nil
}

// txQueue picks the queue a datagram leaves on: a hash of its flow (the peer's address and
// port and our source port), the same for every datagram of a QP.
func (dl *DeviceLink) txQueue(p *link.Packet) int {
	n := len(dl.links)
	if n == 1 {
		return 0
	}
	return int(FlowHash(p.Remote, p.LocalPort) % uint32(n))
}

// FlowHash is the hash DeviceLink spreads datagrams over its queues by: of the peer's
// address and port and our source port (0 stands for the link's own port). It is exported
// for tests that need to know where a flow leaves.
func FlowHash(remote netip.AddrPort, localPort uint16) uint32 {
	a := remote.Addr().As16()
	h := uint32(2166136261) // FNV-1a
	for _, b := range a {
		h = (h ^ uint32(b)) * 16777619
	}
	for _, v := range [2]uint16{remote.Port(), localPort} {
		h = (h ^ uint32(v&0xff)) * 16777619
		h = (h ^ uint32(v>>8)) * 16777619
	}
	return h
}

// TxDone implements link.Link.
func (dl *DeviceLink) TxDone(dst []uint64) int {
	n := 0
	for _, l := range dl.links {
		if n == len(dst) {
			break
		}
		n += l.TxDone(dst[n:])
	}
	return n
}

// Wait implements link.Link: it returns at once when any queue has something ready,
// and otherwise sleeps in one ppoll on every queue's socket and doorbell.
func (dl *DeviceLink) Wait(timeout time.Duration) error {
	limit := max(timeout, 0)
	entered := 0
	defer func() {
		for _, l := range dl.links[:entered] {
			l.exit()
		}
	}()
	for _, l := range dl.links {
		if !l.enter() {
			return link.ErrClosed
		}
		entered++
		ready, lim := l.waitPrepare()
		if ready {
			return nil
		}
		limit = min(limit, lim)
	}
	if err := ppollUntil(dl.pollfds, limit, &dl.timeout, &dl.closed); err != nil {
		return err
	}
	nq := len(dl.links)
	var err error
	for i, l := range dl.links {
		err = errors.Join(err, l.waitFinish(dl.pollfds[nq+i].Revents != 0))
	}
	if errors.Is(err, link.ErrClosed) {
		return link.ErrClosed
	}
	return err
}

// Watch implements link.Watcher: one ppoll on every queue's socket and doorbell, which
// touches no ring. One goroutine at a time may watch.
func (dl *DeviceLink) Watch(timeout time.Duration) error {
	entered := 0
	defer func() {
		for _, l := range dl.links[:entered] {
			l.exit()
		}
	}()
	for _, l := range dl.links {
		if !l.enter() {
			return link.ErrClosed
		}
		entered++
	}
	fds := dl.watchfds
	if err := ppollUntil(fds, max(timeout, 0), &dl.watchts, &dl.closed); err != nil {
		return err
	}
	nq := len(dl.links)
	var buf [8]byte
	for i, l := range dl.links {
		if fds[nq+i].Revents != 0 {
			readEventfd(l.eventfd, &buf)
		}
		if l.closed.Load() {
			return link.ErrClosed
		}
	}
	return nil
}

// Wake implements link.Link.
func (dl *DeviceLink) Wake() { dl.links[0].Wake() }

// MaxPayload implements link.Link.
func (dl *DeviceLink) MaxPayload() int { return dl.links[0].maxPayload }

// LocalAddr implements link.Link.
func (dl *DeviceLink) LocalAddr() netip.AddrPort { return dl.links[0].local }

// ResolvePeer implements link.PeerResolver (the device's next-hop table).
func (dl *DeviceLink) ResolvePeer(ctx context.Context, peer netip.Addr) error {
	return dl.links[0].ResolvePeer(ctx, peer)
}

// Links returns the per-queue links, for their own counters (Link.Stats, Link.Queue).
func (dl *DeviceLink) Links() []*Link { return dl.links }

// Queues returns the interface queues the link serves, in Links order.
func (dl *DeviceLink) Queues() []int {
	qs := make([]int, len(dl.links))
	for i, l := range dl.links {
		qs[i] = l.queue
	}
	return qs
}

// Stats implements link.Link: the sum over the queues.
func (dl *DeviceLink) Stats() link.Stats {
	var s link.Stats
	for _, l := range dl.links {
		q := l.Stats()
		s.RxPackets += q.RxPackets
		s.RxBytes += q.RxBytes
		s.TxPackets += q.TxPackets
		s.TxBytes += q.TxBytes
		s.RxDropped += q.RxDropped
		s.TxDropped += q.TxDropped
		s.TxErrors += q.TxErrors
		s.TxZeroCopy += q.TxZeroCopy
		s.Kicks += q.Kicks
		s.TxHeld += q.TxHeld
		s.TxUnresolved += q.TxUnresolved
		s.TxHoldOverflow += q.TxHoldOverflow
		s.RxStamped += q.RxStamped
		s.RxWaitNanos += q.RxWaitNanos
	}
	return s
}

// Close implements link.Link: it closes every queue's link (the device itself, its
// program and UMEM, are closed by Device.Close).
func (dl *DeviceLink) Close() error {
	dl.closed.Store(true)
	var errs []error
	for _, l := range dl.links {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}

var (
	_ link.Link         = (*DeviceLink)(nil)
	_ link.PeerResolver = (*DeviceLink)(nil)
	_ link.Watcher      = (*DeviceLink)(nil)
)
