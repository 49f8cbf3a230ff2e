package nexthop

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xdpndk/xdpndk/internal/testbed"
)

// resolverOn creates a Resolver inside h's namespace and closes it in t.Cleanup.
func resolverOn(t testing.TB, h *testbed.Host) *Resolver {
	t.Helper()
	var r *Resolver
	if err := h.Do(func() (err error) { r, err = NewResolver(); return err }); err != nil {
		t.Fatalf("NewResolver: %v", err)
	}
	t.Cleanup(r.Close)
	return r
}

// TestResolverNextHop resolves an on-link peer, a peer behind a gateway, and an address
// nobody answers, from host A of a test bed with an empty neighbour table.
func TestResolverNextHop(t *testing.T) {
	// The prefix is spelled out: the static and silent addresses below lie in it.
	bed := testbed.NewT(t, testbed.Options{Prefix: netip.MustParsePrefix("198.18.0.0/24")})
	a, b := bed.A, bed.B
	a.Run(t, "ip", "route", "add", "198.19.5.0/24", "via", b.Addr.String())
	a.Run(t, "ip", "neigh", "flush", "all")
	macA, macB := [6]byte(a.MAC), [6]byte(b.MAC)
	r := resolverOn(t, a)

	// Nothing has been sent yet: the table must not know B.
	if n, found, err := r.lookupNeigh(a.IfIndex, b.Addr); err != nil || found {
		t.Fatalf("neighbour table not empty before the test: %+v found=%v err=%v", n, found, err)
	}

	t.Run("on-link", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		nh, err := r.NextHop(ctx, b.Addr)
		if err != nil {
			t.Fatalf("NextHop: %v", err)
		}
		t.Logf("first resolution of an on-link peer took %v", time.Since(start))
		want := NextHop{IfIndex: a.IfIndex, Src: a.Addr, MAC: macB, LocalMAC: macA, MTU: 1500}
		if nh != want {
			t.Fatalf("NextHop = %+v\nwant      %+v", nh, want)
		}
		// Resolved now: a second call answers from the table.
		start = time.Now()
		if nh2, err := r.NextHop(ctx, b.Addr); err != nil || nh2 != want {
			t.Fatalf("second NextHop = %+v, %v", nh2, err)
		}
		t.Logf("lookup of a resolved peer took %v", time.Since(start))
	})

	t.Run("via gateway", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		a.Run(t, "ip", "neigh", "flush", "all")
		nh, err := r.NextHop(ctx, netip.MustParseAddr("198.19.5.7"))
		if err != nil {
			t.Fatalf("NextHop: %v", err)
		}
		want := NextHop{IfIndex: a.IfIndex, Src: a.Addr, MAC: macB, Gateway: b.Addr, LocalMAC: macA, MTU: 1500}
		if nh != want {
			t.Fatalf("NextHop = %+v\nwant      %+v", nh, want)
		}
	})

	t.Run("IPv4-mapped destination", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		nh, err := r.NextHop(ctx, netip.AddrFrom16(b.Addr.As16()))
		if err != nil || nh.MAC != macB {
			t.Fatalf("NextHop = %+v, %v; want MAC %x", nh, err, macB)
		}
	})

	t.Run("static entry", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		static := netip.MustParseAddr("198.18.0.77")
		a.Run(t, "ip", "neigh", "replace", static.String(), "lladdr", "02:00:5e:10:00:77",
			"nud", "permanent", "dev", a.Ifname)
		nh, err := r.NextHop(ctx, static)
		if err != nil || nh.MAC != [6]byte{2, 0, 0x5e, 0x10, 0, 0x77} {
			t.Fatalf("NextHop = %+v, %v; want the static MAC", nh, err)
		}
		n, found, err := r.lookupNeigh(a.IfIndex, static)
		if err != nil || !found || n.State != netlink.NUD_PERMANENT {
			t.Fatalf("static entry changed: %+v found=%v err=%v", n, found, err)
		}
	})

	t.Run("nobody answers", func(t *testing.T) {
		const deadline = 3 * time.Second
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		start := time.Now()
		nh, err := r.NextHop(ctx, netip.MustParseAddr("198.18.0.99"))
		took := time.Since(start)
		if err == nil {
			t.Fatalf("NextHop of a silent address = %+v, want an error", nh)
		}
		if !errors.Is(err, ErrNextHopUnresolved) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("NextHop error %v does not wrap ErrNextHopUnresolved and DeadlineExceeded", err)
		}
		// It must give up at the deadline, not hang; the slack covers one poll
		// interval and a slow machine.
		if took > deadline+2*time.Second {
			t.Fatalf("NextHop returned %v after the deadline", took-deadline)
		}
		t.Logf("silent address: %v after %v", err, took)
	})

	t.Run("local address", func(t *testing.T) {
		_, err := r.NextHop(context.Background(), a.Addr)
		if !errors.Is(err, ErrNoEthernetNextHop) {
			t.Fatalf("NextHop of our own address: %v, want ErrNoEthernetNextHop", err)
		}
		t.Logf("local address: %v", err)
	})

	t.Run("no route", func(t *testing.T) {
		// Only the bed's subnet and 198.19.5.0/24 are routed in A: there is no default route.
		_, err := r.NextHop(context.Background(), netip.MustParseAddr("198.19.200.1"))
		if err == nil {
			t.Fatal("NextHop without a route succeeded")
		}
		t.Logf("no route: %v", err)
	})

	t.Run("invalid", func(t *testing.T) {
		if _, err := r.NextHop(context.Background(), netip.Addr{}); err == nil {
			t.Fatal("NextHop of the zero Addr succeeded")
		}
	})
}

// TestResolverNoARPDevice checks that a route through a device without neighbour resolution
// is refused with ErrNoEthernetNextHop instead of returning some MAC.
func TestResolverNoARPDevice(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{Prefix: netip.MustParsePrefix("198.18.3.0/24")})
	bed.A.Run(t, "ip", "link", "set", "dev", bed.A.Ifname, "arp", "off")
	r := resolverOn(t, bed.A)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := r.NextHop(ctx, bed.B.Addr)
	if !errors.Is(err, ErrNoEthernetNextHop) {
		t.Fatalf("NextHop over a NOARP device: %v, want ErrNoEthernetNextHop", err)
	}
	_, err = r.NextHop(ctx, netip.MustParseAddr("127.0.0.1"))
	if !errors.Is(err, ErrNoEthernetNextHop) {
		t.Fatalf("NextHop of 127.0.0.1: %v, want ErrNoEthernetNextHop", err)
	}
	r.Close()
	if _, err := r.NextHop(ctx, bed.B.Addr); err == nil {
		t.Fatal("NextHop after Close succeeded")
	}
}
