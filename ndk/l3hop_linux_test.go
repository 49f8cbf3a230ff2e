package ndk

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/xdp/nexthop"

	"golang.org/x/sys/unix"

	"github.com/xdpndk/xdpndk/internal/privileged"
	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/xdp"
)

// The NDK verbs across an L3 hop: A and B in two subnets, a router namespace R forwarding
// between them (testbed.Options.Routed). Each adapter's next hop towards the other is the
// router's MAC on its side; the router's kernel forwards every datagram, decrementing its
// TTL.

// hopKey is what a capture on one of the router's interfaces records of one of our
// datagrams (UDP to testPort): its direction there, addresses, TTL and Ethernet addresses.
type hopKey struct {
	out              bool // leaving the router (PACKET_OUTGOING), else arriving
	src, dst         netip.Addr
	ttl              uint8
	srcMAC, dstMAC   [6]byte
	srcPort, dstPort uint16
}

// hopCapture counts our datagrams on one of the router's interfaces with an AF_PACKET
// socket in the router's namespace (the router has no XDP program, so the kernel's taps
// see every frame it receives and every frame it sends).
type hopCapture struct {
	h    *testbed.Host
	fd   int
	stop atomic.Bool
	done chan struct{}
	mu   sync.Mutex
	seen map[hopKey]int
}

// startHopCapture opens the capture on h (one of the router's interfaces) and reads until
// the test ends or stop is called.
func startHopCapture(t *testing.T, h *testbed.Host) *hopCapture {
	t.Helper()
	c := &hopCapture{h: h, fd: -1, done: make(chan struct{}), seen: map[hopKey]int{}}
	err := h.Do(func() (err error) {
		c.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		if err := unix.Bind(c.fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: h.IfIndex}); err != nil {
			return fmt.Errorf("bind: %w", err)
		}
		if err := unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20); err != nil {
			return fmt.Errorf("SO_RCVBUFFORCE: %w", err)
		}
		tv := unix.NsecToTimeval(int64(20 * time.Millisecond))
		return unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	})
	if err != nil {
		if c.fd >= 0 {
			unix.Close(c.fd)
		}
		t.Fatalf("capture on %s in %s: %v", h.Ifname, h.NS, err)
	}
	go c.run()
	t.Cleanup(func() { c.finish() })
	return c
}

// run reads frames (their first 128 bytes: the headers) until stopped and then until the
// socket's queue is empty (bounded).
func (c *hopCapture) run() {
	defer close(c.done)
	buf := make([]byte, 128)
	var drainUntil time.Time
	for {
		if c.stop.Load() {
			if drainUntil.IsZero() {
				drainUntil = time.Now().Add(2 * time.Second)
			} else if time.Now().After(drainUntil) {
				return
			}
		}
		n, from, err := unix.Recvfrom(c.fd, buf, 0)
		if err != nil {
			if c.stop.Load() && errors.Is(err, unix.EAGAIN) {
				return // stopped and drained
			}
			continue // EAGAIN at the receive timeout, EINTR
		}
		ll, ok := from.(*unix.SockaddrLinklayer)
		if !ok {
			continue
		}
		if k, ok := parseHop(buf[:n], ll.Pkttype == unix.PACKET_OUTGOING); ok {
			c.mu.Lock()
			c.seen[k]++
			c.mu.Unlock()
		}
	}
}

// parseHop decodes an Ethernet frame carrying an IPv4 UDP datagram to testPort.
func parseHop(f []byte, out bool) (hopKey, bool) {
	if len(f) < 14+20 || binary.BigEndian.Uint16(f[12:14]) != unix.ETH_P_IP {
		return hopKey{}, false
	}
	ip := f[14:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[0]>>4 != 4 || ihl < 20 || ip[9] != unix.IPPROTO_UDP || len(ip) < ihl+8 {
		return hopKey{}, false
	}
	udp := ip[ihl:]
	k := hopKey{out: out, ttl: ip[8], src: netip.AddrFrom4([4]byte(ip[12:16])), dst: netip.AddrFrom4([4]byte(ip[16:20])),
		srcMAC: [6]byte(f[6:12]), dstMAC: [6]byte(f[0:6]),
		srcPort: binary.BigEndian.Uint16(udp[0:2]), dstPort: binary.BigEndian.Uint16(udp[2:4])}
	if k.dstPort != testPort {
		return hopKey{}, false
	}
	return k, true
}

// finish stops the capture, closes its socket and returns what it saw and how many
// frames the kernel dropped for want of room in the socket (PACKET_STATISTICS).
func (c *hopCapture) finish() (map[hopKey]int, uint32) {
	if c.stop.Swap(true) {
		<-c.done
		return c.seen, 0
	}
	<-c.done
	var drops uint32
	if st, err := unix.GetsockoptTpacketStats(c.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
		drops = st.Drops
	}
	unix.Close(c.fd)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen, drops
}

// checkHop checks the datagrams between src and dst seen by a capture in one direction:
// at least one, every one with TTL ttl and the given Ethernet addresses. It returns their
// count.
func checkHop(t *testing.T, where string, seen map[hopKey]int, out bool, src, dst netip.Addr, ttl uint8, srcMAC, dstMAC []byte) int {
	t.Helper()
	n := 0
	for k, c := range seen {
		if k.out != out || k.src != src || k.dst != dst {
			continue
		}
		if k.ttl != ttl || k.srcMAC != [6]byte(srcMAC) || k.dstMAC != [6]byte(dstMAC) {
			t.Errorf("%s: %d datagrams %v -> %v with TTL %d, %x -> %x; want TTL %d, %x -> %x",
				where, c, src, dst, k.ttl, k.srcMAC, k.dstMAC, ttl, srcMAC, dstMAC)
		}
		n += c
	}
	if n == 0 {
		t.Errorf("%s: no datagram %v -> %v seen", where, src, dst)
	}
	return n
}

// checkNextHop checks that dev's next hop towards peer is resolved, through gateway, at
// mac.
func checkNextHop(t *testing.T, who string, dev *xdp.Device, peer, gateway netip.Addr, mac []byte) {
	t.Helper()
	info, ok := dev.Neighbour(peer)
	if !ok || info.State != nexthop.NeighbourResolved || info.Gateway != gateway || info.MAC != [6]byte(mac) {
		t.Fatalf("%s's next hop towards %v: %+v (found %v); want resolved through %v at %x", who, peer, info, ok, gateway, mac)
	}
}

// TestL3HopVerbs connects a QP on A to one on B across the router and runs Send/Receive,
// Write and Read of several sizes, byte-exact, at MTU 1500 and 9000. It checks each side's
// next hop (the router's MAC on its side), that the datagrams leave A with TTL 64 and
// reach B with 63 (and back), rewritten to the router's MACs, as captured on the router's
// two interfaces, and that the router's kernel forwarded at least every datagram the two
// adapters received.
func TestL3HopVerbs(t *testing.T) {
	privileged.Require(t)
	for _, mtu := range []int{1500, 9000} {
		t.Run(fmt.Sprintf("mtu%d", mtu), func(t *testing.T) { l3HopVerbs(t, mtu) })
	}
}

func l3HopVerbs(t *testing.T, mtu int) {
	bed := testbed.NewT(t, testbed.Options{Routed: true, MTU: mtu})
	r := bed.R
	capA, capB := startHopCapture(t, r.A), startHopCapture(t, r.B)
	fw0, err := r.Forwarded()
	if err != nil {
		t.Fatal(err)
	}
	ra0, rb0 := linkCounters(t, r.A), linkCounters(t, r.B)

	cfg := xdp.Config{Port: testPort, RingSize: 1024, Frames: 4096, HeapSize: 24 << 20}
	p := newPair(t, xdpKind(bed, cfg), pairOpts{})
	if got := p.A.a.LocalAddr().Addr(); got != bed.A.Addr {
		t.Fatalf("A's adapter is at %v, want %v", got, bed.A.Addr)
	}
	if got := p.B.a.LocalAddr().Addr(); got != bed.B.Addr || bed.A.Prefix.Contains(got) {
		t.Fatalf("B's adapter is at %v, want %v outside A's subnet %v", got, bed.B.Addr, bed.A.Prefix)
	}
	checkNextHop(t, "A", p.A.a.Device(), bed.B.Addr, bed.A.Gateway, r.A.MAC)
	checkNextHop(t, "B", p.B.a.Device(), bed.A.Addr, bed.B.Gateway, r.B.MAC)
	linkA0, linkB0 := p.A.a.link.Stats(), p.B.a.link.Stats()

	// Sizes: one byte, one datagram, just over one, several, and a megabyte.
	sizes := []int{1, 1000, mtu, 5*mtu + 7, 64 << 10, 1 << 20}
	const maxSize = 1 << 20

	// Send/Receive.
	rbuf, rmr := p.B.region(t, maxSize, MRAllowLocalWrite)
	sbuf, smr := p.A.region(t, maxSize, 0)
	for i, n := range sizes {
		fill(sbuf[:n], byte(i+1))
		clear(rbuf)
		if err := p.B.qp.Receive("r", []SGE{rmr.SGE(rbuf)}); err != nil {
			t.Fatal(err)
		}
		if err := p.A.qp.Send("s", []SGE{smr.SGE(sbuf[:n])}, 0); err != nil {
			t.Fatal(err)
		}
		want(t, results(t, p.A.icq, 1)[0], StatusSuccess, OpTypeSend, "s")
		rr := results(t, p.B.rcq, 1)[0]
		want(t, rr, StatusSuccess, OpTypeReceive, "r")
		if int(rr.BytesTransferred) != n || !bytes.Equal(rbuf[:n], sbuf[:n]) || slices.ContainsFunc(rbuf[n:], func(b byte) bool { return b != 0 }) {
			t.Fatalf("Send of %d bytes: received %d bytes, equal %v", n, rr.BytesTransferred, bytes.Equal(rbuf[:n], sbuf[:n]))
		}
	}

	// Write into B's region, then Read it back into another of A's.
	tbuf, tmr := p.B.region(t, maxSize, MRAllowRemoteRead|MRAllowRemoteWrite|MRAllowLocalWrite)
	dbuf, dmr := p.A.region(t, maxSize, MRAllowLocalWrite)
	for i, n := range sizes {
		fill(sbuf[:n], byte(100+i))
		clear(tbuf)
		clear(dbuf)
		if err := p.A.qp.Write("w", []SGE{smr.SGE(sbuf[:n])}, tmr.VA(), tmr.RemoteToken(), 0); err != nil {
			t.Fatal(err)
		}
		want(t, results(t, p.A.icq, 1)[0], StatusSuccess, OpTypeWrite, "w")
		if !bytes.Equal(tbuf[:n], sbuf[:n]) || slices.ContainsFunc(tbuf[n:], func(b byte) bool { return b != 0 }) {
			t.Fatalf("Write of %d bytes: target differs", n)
		}
		if err := p.A.qp.Read("rd", []SGE{dmr.SGE(dbuf[:n])}, tmr.VA(), tmr.RemoteToken(), 0); err != nil {
			t.Fatal(err)
		}
		want(t, results(t, p.A.icq, 1)[0], StatusSuccess, OpTypeRead, "rd")
		if !bytes.Equal(dbuf[:n], sbuf[:n]) {
			t.Fatalf("Read of %d bytes: data differs", n)
		}
	}

	linkA, linkB := p.A.a.link.Stats(), p.B.a.link.Stats()
	seenA, dropsA := capA.finish()
	seenB, dropsB := capB.finish()
	fw1, err := r.Forwarded()
	if err != nil {
		t.Fatal(err)
	}
	ra1, rb1 := linkCounters(t, r.A), linkCounters(t, r.B)

	// A -> B: arrives at R from A with 64, leaves towards B with 63, MACs rewritten.
	inAB := checkHop(t, "R's A side, from A", seenA, false, bed.A.Addr, bed.B.Addr, 64, bed.A.MAC, r.A.MAC)
	outAB := checkHop(t, "R's B side, to B", seenB, true, bed.A.Addr, bed.B.Addr, 63, r.B.MAC, bed.B.MAC)
	// B -> A likewise.
	inBA := checkHop(t, "R's B side, from B", seenB, false, bed.B.Addr, bed.A.Addr, 64, bed.B.MAC, r.B.MAC)
	outBA := checkHop(t, "R's A side, to A", seenA, true, bed.B.Addr, bed.A.Addr, 63, r.A.MAC, bed.A.MAC)
	for _, seen := range []map[hopKey]int{seenA, seenB} {
		for k, c := range seen {
			if !(k.src == bed.A.Addr && k.dst == bed.B.Addr) && !(k.src == bed.B.Addr && k.dst == bed.A.Addr) {
				t.Errorf("%d datagrams to our port between %v and %v", c, k.src, k.dst)
			}
		}
	}

	// Every datagram an adapter received came through the router's kernel.
	rxA, rxB := linkA.RxPackets-linkA0.RxPackets, linkB.RxPackets-linkB0.RxPackets
	fw := fw1 - fw0
	t.Logf("MTU %d: A received %d datagrams, B %d; the router forwarded %d (R's A side rx %d tx %d, B side rx %d tx %d packets)",
		mtu, rxA, rxB, fw, ra1.RxPackets-ra0.RxPackets, ra1.TxPackets-ra0.TxPackets, rb1.RxPackets-rb0.RxPackets, rb1.TxPackets-rb0.TxPackets)
	t.Logf("captured on R: A->B %d in (TTL 64), %d out (TTL 63); B->A %d in, %d out; capture drops %d, %d",
		inAB, outAB, inBA, outBA, dropsA, dropsB)
	if rxB == 0 || rxA == 0 {
		t.Fatalf("adapters received %d and %d datagrams", rxA, rxB)
	}
	if fw < rxA+rxB {
		t.Errorf("the router forwarded %d datagrams, fewer than the %d the adapters received", fw, rxA+rxB)
	}
	if d := rb1.TxPackets - rb0.TxPackets; d < rxB {
		t.Errorf("R's B side sent %d packets, fewer than the %d datagrams B received", d, rxB)
	}
	if d := ra1.RxPackets - ra0.RxPackets; d < rxB {
		t.Errorf("R's A side received %d packets, fewer than the %d datagrams B received", d, rxB)
	}
	if d := ra1.TxPackets - ra0.TxPackets; d < rxA {
		t.Errorf("R's A side sent %d packets, fewer than the %d datagrams A received", d, rxA)
	}
	if d := rb1.RxPackets - rb0.RxPackets; d < rxA {
		t.Errorf("R's B side received %d packets, fewer than the %d datagrams A received", d, rxA)
	}
}

// linkCounters returns h's interface counters, failing t on error.
func linkCounters(t *testing.T, h *testbed.Host) testbed.LinkCounters {
	t.Helper()
	c, err := h.LinkCounters()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// routerNeighState returns the state of the router's neighbour entry for ip on its B side
// ("" when it has none).
func routerNeighState(t *testing.T, r *testbed.Router, ip netip.Addr) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := r.Command(ctx, "ip", "-j", "neigh", "show", "to", ip.String(), "dev", r.B.Ifname).Output()
	if err != nil {
		t.Fatalf("ip neigh in %s: %v", r.NS, err)
	}
	var ns []struct {
		State []string `json:"state"`
	}
	if err := json.Unmarshal(out, &ns); err != nil {
		t.Fatalf("ip neigh output %q: %v", out, err)
	}
	if len(ns) == 0 || len(ns[0].State) == 0 {
		return ""
	}
	return ns[0].State[0]
}

// TestL3HopConnectUnreachable checks what a Connect across the router does when nobody
// has the address, and when A has no route at all.
//
// To 198.18.2.77 (in B's subnet, nobody there): A's route goes through the router, whose
// MAC A resolves at once, so Connect's next-hop resolution succeeds and the connection
// request goes out, to the router. The router then ARPs for .77 on B's link, queueing the
// requests, and gets no answer. The connection manager gives up first (it retransmits the
// request from CMTimeout, 20 ms, doubling up to 500 ms, until the attempt's timeout, the
// caller's deadline or Config.ConnectTimeout): Connect fails STATUS_IO_TIMEOUT, not
// STATUS_HOST_UNREACHABLE (that one needs the local resolution to fail, on A's own link),
// and the QP is idle again. Seconds later the router's ARP fails and it answers the queued
// requests with ICMP host unreachable; A's XDP program passes ICMP to A's kernel, which
// counts them (Icmp InDestUnreachs) and has no socket to tell: nothing reaches the adapter.
//
// To 198.19.255.1 (inside 198.18.0.0/15, no route in A): STATUS_NETWORK_UNREACHABLE, at
// once, nothing sent.
//
// The QP then connects to B normally.
func TestL3HopConnectUnreachable(t *testing.T) {
	privileged.Require(t)
	bed := testbed.NewT(t, testbed.Options{Routed: true})
	cfg := xdp.Config{Port: testPort, RingSize: 1024, Frames: 4096, HeapSize: 8 << 20}
	a, b := idleSides(t, xdpKind(bed, cfg), DefaultOptions())
	dev := a.a.Device()
	nobody := netip.MustParseAddr("198.18.2.77")
	noRoute := netip.MustParseAddr("198.19.255.1")
	icmp0, err := bed.A.SNMPCounter("Icmp", "InDestUnreachs")
	if err != nil {
		t.Fatal(err)
	}
	fw0, err := bed.R.Forwarded()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := a.a.NewConnector()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cctx, ccancel := context.WithTimeout(ctx, time.Second) // the attempt's deadline
	connErr := c.Connect(cctx, a.qp, netip.AddrPortFrom(nobody, servicePort), 4, 4, nil)
	ccancel()
	took := time.Since(start)
	if StatusOf(connErr) != StatusIOTimeout || !errors.Is(connErr, transport.ErrConnectTimeout) {
		t.Fatalf("Connect to %v behind the router: %v, want STATUS_IO_TIMEOUT", nobody, connErr)
	}
	if st := a.qp.tq.State(); st != transport.QPIdle {
		t.Fatalf("QP after the timed-out Connect is %v, want idle", st)
	}
	// A resolved the router only.
	checkNextHop(t, "A", dev, nobody, bed.A.Gateway, bed.R.A.MAC)
	fw1, err := bed.R.Forwarded()
	if err != nil {
		t.Fatal(err)
	}
	if st := routerNeighState(t, bed.R, nobody); st != "INCOMPLETE" && st != "FAILED" {
		t.Fatalf("router's neighbour entry for %v is %q, want INCOMPLETE or FAILED (it must be trying)", nobody, st)
	}
	// The router gives up on its ARP and reports host unreachable to A's kernel.
	var icmp int64
	waitUntil(t, 15*time.Second, "the router's ICMP host unreachable at A", func() bool {
		icmp, err = bed.A.SNMPCounter("Icmp", "InDestUnreachs")
		return err == nil && icmp > icmp0
	})
	stFinal := routerNeighState(t, bed.R, nobody)
	t.Logf("Connect to %v: %v after %v; router forwarded %d datagrams meanwhile, then its entry went %s and A's kernel got %d ICMP destination unreachable",
		nobody, StatusOf(connErr), took.Round(time.Millisecond), fw1-fw0, stFinal, icmp-icmp0)

	// No route at all.
	c2, err := a.a.NewConnector()
	if err != nil {
		t.Fatal(err)
	}
	fw2, _ := bed.R.Forwarded()
	err = c2.Connect(ctx, a.qp, netip.AddrPortFrom(noRoute, servicePort), 4, 4, nil)
	if StatusOf(err) != StatusNetworkUnreachable || !errors.Is(err, nexthop.ErrNoRoute) {
		t.Fatalf("Connect to %v (no route): %v, want STATUS_NETWORK_UNREACHABLE", noRoute, err)
	}
	if st := a.qp.tq.State(); st != transport.QPIdle {
		t.Fatalf("QP after the unroutable Connect is %v, want idle", st)
	}
	if info, ok := dev.Neighbour(noRoute); ok && info.State != nexthop.NeighbourFailed {
		t.Fatalf("A's next-hop entry for %v: %+v", noRoute, info)
	}
	if fw3, _ := bed.R.Forwarded(); fw3 != fw2 {
		t.Errorf("the router forwarded %d datagrams during a Connect that has no route", fw3-fw2)
	}

	// The QP is usable: it connects to B across the router.
	onConnect, accepted := acceptor(b, 4, 4, nil, nil)
	b.listen(t, onConnect)
	c3, err := a.dial(t, b, servicePort, 4, 4, nil)
	if err != nil {
		t.Fatalf("Connect to B after the failures: %v", err)
	}
	complete(t, c3, nil, accepted)
}
