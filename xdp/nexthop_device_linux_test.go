package xdp

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/xdp/nexthop"

	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/transport/link"
)

// TestDeviceResolvePeer resolves through the kernel from host A of a bed with an empty
// neighbour table: an on-link peer, a peer behind a gateway, a silent address (failed,
// then answered from the negative entry), no route, and our own address.
func TestDeviceResolvePeer(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{Prefix: netip.MustParsePrefix("198.18.0.0/24")})
	a, b := bed.A, bed.B
	a.Run(t, "ip", "route", "add", "198.19.5.0/24", "via", b.Addr.String())
	a.Run(t, "ip", "neigh", "flush", "all")
	d := openOn(t, a, Config{RingSize: 256, Frames: 512, ResolveTimeout: 500 * time.Millisecond, NegativeTTL: time.Minute})
	ctx := context.Background()

	if err := d.ResolvePeer(ctx, b.Addr); err != nil {
		t.Fatalf("on-link peer: %v", err)
	}
	if info, ok := d.Neighbour(b.Addr); !ok || info.State != nexthop.NeighbourResolved || info.MAC != [6]byte(b.MAC) || info.Gateway.IsValid() {
		t.Fatalf("on-link entry %+v", info)
	}
	behind := netip.MustParseAddr("198.19.5.7")
	if err := d.ResolvePeer(ctx, behind); err != nil {
		t.Fatalf("peer behind a gateway: %v", err)
	}
	if info, _ := d.Neighbour(behind); info.MAC != [6]byte(b.MAC) || info.Gateway != b.Addr {
		t.Fatalf("gateway entry %+v, want B's MAC through %v", info, b.Addr)
	}

	silent := netip.MustParseAddr("198.18.0.99")
	err := d.ResolvePeer(ctx, silent)
	if !errors.Is(err, nexthop.ErrNextHopUnresolved) || !errors.Is(err, syscall.EHOSTUNREACH) {
		t.Fatalf("silent address: %v, want ErrNextHopUnresolved", err)
	}
	st := d.NeighbourStats()
	if err2 := d.ResolvePeer(ctx, silent); !errors.Is(err2, nexthop.ErrNextHopUnresolved) {
		t.Fatalf("silent address again: %v", err2)
	}
	if st2 := d.NeighbourStats(); st2.Requests != st.Requests || st2.Failures != 1 {
		t.Fatalf("the negative entry did not answer: %+v then %+v", st, st2)
	}
	t.Logf("silent address: %v", err)

	err = d.ResolvePeer(ctx, netip.MustParseAddr("198.19.200.1"))
	if !errors.Is(err, nexthop.ErrNoRoute) || !errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EHOSTUNREACH) {
		t.Fatalf("no route: %v, want ErrNoRoute (ENETUNREACH only)", err)
	}
	err = d.ResolvePeer(ctx, a.Addr)
	if !errors.Is(err, nexthop.ErrNoEthernetNextHop) {
		t.Fatalf("own address: %v, want ErrNoEthernetNextHop", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := d.ResolvePeer(cctx, netip.MustParseAddr("198.18.0.98")); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}
	if st := d.NeighbourStats(); st.Entries > 6 || st.Resolved != 2 {
		t.Fatalf("table %+v", st)
	}
}

// TestFirstContactHeld sends to a peer the kernel has never resolved, without resolving it
// first: the datagram is held while the worker has the kernel resolve it, and leaves at
// the link's next call after that.
func TestFirstContactHeld(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	bed.A.Run(t, "ip", "neigh", "flush", "all")
	la := openOn(t, bed.A, Config{RingSize: 256, Frames: 512}).Links()[0]
	lb := openOn(t, bed.B, Config{RingSize: 256, Frames: 512}).Links()[0]
	p := []link.Packet{{Remote: lb.LocalAddr()}}
	p[0].SetData([]byte("hello B"))
	if n, err := la.Send(p); n != 1 || err != nil {
		t.Fatalf("first Send: n=%d err=%v", n, err)
	}
	if st := la.Stats(); st.TxHeld != 1 {
		t.Fatalf("first datagram to an unknown peer not held: %+v", st)
	}
	serviceUntil(t, la, "held datagram sent", func() bool { return la.Stats().TxPackets == 1 })
	if got, _ := receiveOne(t, lb); string(got) != "hello B" {
		t.Fatalf("B got %q", got)
	}
}

// TestRouteChangeRevalidated moves the gateway of a route while a peer behind it is in
// use: the periodic re-validation picks the new gateway up.
func TestRouteChangeRevalidated(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{Prefix: netip.MustParsePrefix("198.18.0.0/24")})
	a, b := bed.A, bed.B
	gw2 := netip.MustParseAddr("198.18.0.3")
	b.Run(t, "ip", "addr", "add", gw2.String()+"/24", "dev", b.Ifname)
	a.Run(t, "ip", "route", "add", "198.19.5.0/24", "via", b.Addr.String())
	d := openOn(t, a, Config{RingSize: 256, Frames: 512, NeighbourRefresh: 200 * time.Millisecond})
	behind := netip.MustParseAddr("198.19.5.7")
	ctx := context.Background()
	if err := d.ResolvePeer(ctx, behind); err != nil {
		t.Fatal(err)
	}
	a.Run(t, "ip", "route", "replace", "198.19.5.0/24", "via", gw2.String())
	end := time.Now().Add(10 * time.Second)
	for {
		// ResolvePeer marks the entry used, as traffic to the peer would.
		if err := d.ResolvePeer(ctx, behind); err != nil {
			t.Fatal(err)
		}
		info, _ := d.Neighbour(behind)
		if info.Gateway == gw2 {
			if info.State != nexthop.NeighbourResolved || info.MAC != [6]byte(b.MAC) {
				t.Fatalf("after the route change: %+v", info)
			}
			break
		}
		if time.Now().After(end) {
			t.Fatalf("gateway still %v after the route moved to %v (%+v)", info.Gateway, gw2, d.NeighbourStats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := d.NeighbourStats(); st.Changes == 0 || st.Refreshes == 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestNeighbourEventNewMAC changes B's MAC while A's device has B resolved: B announces it
// (net.ipv4.conf.*.arp_notify, as a failover would), A's kernel updates its neighbour entry,
// and the event updates A's table at once, without waiting for a re-validation.
func TestNeighbourEventNewMAC(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	a, b := bed.A, bed.B
	d := openOn(t, a, Config{RingSize: 256, Frames: 512, NeighbourRefresh: time.Hour})
	if err := d.ResolvePeer(context.Background(), b.Addr); err != nil {
		t.Fatal(err)
	}
	b.Run(t, "sysctl", "-qw", "net.ipv4.conf."+b.Ifname+".arp_notify=1")
	newMAC := net.HardwareAddr{0x02, 0x5e, 0x10, 0x00, 0x00, 0x42}
	b.Run(t, "ip", "link", "set", "dev", b.Ifname, "address", newMAC.String())
	testbed.WaitFor(t, "A's table to take B's new MAC", func() bool {
		info, _ := d.Neighbour(b.Addr)
		return info.MAC == [6]byte(newMAC)
	})
	if st := d.NeighbourStats(); st.Changes != 1 || st.Refreshes != 0 {
		t.Fatalf("stats %+v, want one change and no re-validation", st)
	}
}
