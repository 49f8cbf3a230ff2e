package xdp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpndk/xdpndk/internal/privileged"
)

// Test topology helpers for the framing and next-hop tests: network namespaces joined by a
// veth pair, addresses from 198.18.0.0/15 only, IPv6 disabled everywhere, all removed in
// t.Cleanup. Names carry the process id and a counter, so parallel test processes and
// leftovers of a crashed run cannot collide.

var nhTestSeq atomic.Uint32

// nhRun runs a command and fails the test with its output if it fails.
func nhRun(t testing.TB, args ...string) {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// nhNetns creates a network namespace with IPv6 disabled for every interface that will be
// created in it, and deletes it (with everything in it) in t.Cleanup.
func nhNetns(t testing.TB, tag string) string {
	t.Helper()
	name := fmt.Sprintf("xdpndk-%d-%d-%s", os.Getpid(), nhTestSeq.Add(1), tag)
	nhRun(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("cleanup: ip netns del %s: %v\n%s", name, err, out)
		}
	})
	nhRun(t, "ip", "netns", "exec", name, "sysctl", "-qw",
		"net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	return name
}

// nhVethPair creates a veth pair with end ifA in namespace nsA and end ifB in nsB, gives
// them the IPv4 prefixes addrA and addrB (198.18.0.0/15 only), disables IPv6 on both
// before bringing them up, and sets the MTU. Deleting the namespaces removes the pair.
func nhVethPair(t testing.TB, nsA, ifA, addrA, nsB, ifB, addrB string, mtu int) {
	t.Helper()
	bench := netip.MustParsePrefix("198.18.0.0/15")
	for _, a := range []string{addrA, addrB} {
		if p := netip.MustParsePrefix(a); !bench.Contains(p.Addr()) {
			t.Fatalf("test address %s is outside 198.18.0.0/15", a)
		}
	}
	nhRun(t, "ip", "link", "add", ifA, "netns", nsA, "mtu", fmt.Sprint(mtu),
		"type", "veth", "peer", "name", ifB, "netns", nsB, "mtu", fmt.Sprint(mtu))
	for _, end := range []struct{ ns, ifc, addr string }{{nsA, ifA, addrA}, {nsB, ifB, addrB}} {
		nhRun(t, "ip", "netns", "exec", end.ns, "sysctl", "-qw", "net.ipv6.conf."+end.ifc+".disable_ipv6=1")
		nhRun(t, "ip", "-n", end.ns, "addr", "add", end.addr, "dev", end.ifc)
		nhRun(t, "ip", "-n", end.ns, "link", "set", end.ifc, "up")
	}
}

// nhInNetns runs fn on a fresh OS thread that has joined namespace ns, and returns its
// error. Sockets fn opens stay in ns and may be used from any goroutine afterwards. The
// thread is never unlocked, so the Go runtime discards it when fn returns instead of
// reusing a thread in a foreign namespace.
func nhInNetns(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open("/run/netns/" + ns)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// nhLinkMAC reads the MAC address of interface ifc in namespace ns over netlink.
func nhLinkMAC(t testing.TB, ns, ifc string) (mac [6]byte, index int) {
	t.Helper()
	err := nhInNetns(ns, func() error {
		l, err := netlink.LinkByName(ifc)
		if err != nil {
			return err
		}
		if len(l.Attrs().HardwareAddr) != 6 {
			return fmt.Errorf("%s has MAC %v", ifc, l.Attrs().HardwareAddr)
		}
		mac, index = [6]byte(l.Attrs().HardwareAddr), l.Attrs().Index
		return nil
	})
	if err != nil {
		t.Fatalf("read MAC of %s in %s: %v", ifc, ns, err)
	}
	return mac, index
}

// nhResolverIn creates a Resolver inside namespace ns and closes it in t.Cleanup.
func nhResolverIn(t testing.TB, ns string) *Resolver {
	t.Helper()
	var r *Resolver
	if err := nhInNetns(ns, func() (err error) { r, err = NewResolver(); return err }); err != nil {
		t.Fatalf("NewResolver in %s: %v", ns, err)
	}
	t.Cleanup(r.Close)
	return r
}

// TestResolverNextHop resolves an on-link peer, a peer behind a gateway, and an address
// nobody answers, from namespace A of an A—B veth pair with an empty neighbour table.
func TestResolverNextHop(t *testing.T) {
	privileged.Require(t)
	nsA, nsB := nhNetns(t, "a"), nhNetns(t, "b")
	nhVethPair(t, nsA, "nh0", "198.18.0.1/24", nsB, "nh1", "198.18.0.2/24", 1500)
	nhRun(t, "ip", "-n", nsA, "route", "add", "198.19.5.0/24", "via", "198.18.0.2")
	nhRun(t, "ip", "-n", nsA, "neigh", "flush", "all")
	macA, idxA := nhLinkMAC(t, nsA, "nh0")
	macB, _ := nhLinkMAC(t, nsB, "nh1")
	r := nhResolverIn(t, nsA)

	// Nothing has been sent yet: the table must not know B.
	if n, found, err := r.lookupNeigh(idxA, netip.MustParseAddr("198.18.0.2")); err != nil || found {
		t.Fatalf("neighbour table not empty before the test: %+v found=%v err=%v", n, found, err)
	}

	t.Run("on-link", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		nh, err := r.NextHop(ctx, netip.MustParseAddr("198.18.0.2"))
		if err != nil {
			t.Fatalf("NextHop: %v", err)
		}
		t.Logf("first resolution of an on-link peer took %v", time.Since(start))
		want := NextHop{IfIndex: idxA, Src: netip.MustParseAddr("198.18.0.1"), MAC: macB, LocalMAC: macA, MTU: 1500}
		if nh != want {
			t.Fatalf("NextHop = %+v\nwant      %+v", nh, want)
		}
		// Resolved now: a second call answers from the table.
		start = time.Now()
		if nh2, err := r.NextHop(ctx, netip.MustParseAddr("198.18.0.2")); err != nil || nh2 != want {
			t.Fatalf("second NextHop = %+v, %v", nh2, err)
		}
		t.Logf("lookup of a resolved peer took %v", time.Since(start))
	})

	t.Run("via gateway", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		nhRun(t, "ip", "-n", nsA, "neigh", "flush", "all")
		nh, err := r.NextHop(ctx, netip.MustParseAddr("198.19.5.7"))
		if err != nil {
			t.Fatalf("NextHop: %v", err)
		}
		want := NextHop{IfIndex: idxA, Src: netip.MustParseAddr("198.18.0.1"), MAC: macB,
			Gateway: netip.MustParseAddr("198.18.0.2"), LocalMAC: macA, MTU: 1500}
		if nh != want {
			t.Fatalf("NextHop = %+v\nwant      %+v", nh, want)
		}
	})

	t.Run("IPv4-mapped destination", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		nh, err := r.NextHop(ctx, netip.MustParseAddr("::ffff:198.18.0.2"))
		if err != nil || nh.MAC != macB {
			t.Fatalf("NextHop = %+v, %v; want MAC %x", nh, err, macB)
		}
	})

	t.Run("static entry", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		nhRun(t, "ip", "-n", nsA, "neigh", "replace", "198.18.0.77", "lladdr", "02:00:5e:10:00:77",
			"nud", "permanent", "dev", "nh0")
		nh, err := r.NextHop(ctx, netip.MustParseAddr("198.18.0.77"))
		if err != nil || nh.MAC != [6]byte{2, 0, 0x5e, 0x10, 0, 0x77} {
			t.Fatalf("NextHop = %+v, %v; want the static MAC", nh, err)
		}
		n, found, err := r.lookupNeigh(idxA, netip.MustParseAddr("198.18.0.77"))
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
		_, err := r.NextHop(context.Background(), netip.MustParseAddr("198.18.0.1"))
		if !errors.Is(err, ErrNoEthernetNextHop) {
			t.Fatalf("NextHop of our own address: %v, want ErrNoEthernetNextHop", err)
		}
		t.Logf("local address: %v", err)
	})

	t.Run("no route", func(t *testing.T) {
		// Only the veth subnet and 198.19.5.0/24 are routed in A: there is no default route.
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
	privileged.Require(t)
	ns, peer := nhNetns(t, "noarp"), nhNetns(t, "noarp-peer")
	nhVethPair(t, ns, "nd0", "198.18.3.1/24", peer, "nd1", "198.18.3.2/24", 1500)
	nhRun(t, "ip", "-n", ns, "link", "set", "nd0", "arp", "off")
	nhRun(t, "ip", "-n", ns, "link", "set", "lo", "up")
	r := nhResolverIn(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := r.NextHop(ctx, netip.MustParseAddr("198.18.3.2"))
	if !errors.Is(err, ErrNoEthernetNextHop) {
		t.Fatalf("NextHop over a NOARP device: %v, want ErrNoEthernetNextHop", err)
	}
	_, err = r.NextHop(ctx, netip.MustParseAddr("127.0.0.1"))
	if !errors.Is(err, ErrNoEthernetNextHop) {
		t.Fatalf("NextHop of 127.0.0.1: %v, want ErrNoEthernetNextHop", err)
	}
	r.Close()
	if _, err := r.NextHop(ctx, netip.MustParseAddr("198.18.3.2")); err == nil {
		t.Fatal("NextHop after Close succeeded")
	}
}
