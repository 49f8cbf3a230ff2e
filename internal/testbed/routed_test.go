package testbed

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/privileged"
)

// routeInfo is the part of `ip -j route show` the tests look at.
type routeInfo struct {
	Dst      string `json:"dst"`
	Gateway  string `json:"gateway"`
	Dev      string `json:"dev"`
	Prefsrc  string `json:"prefsrc"`
	Protocol string `json:"protocol"`
}

// routes returns the main routing table of h's namespace.
func routes(t *testing.T, h *Host) []routeInfo {
	t.Helper()
	var rs []routeInfo
	ipJSON(t, h, &rs, "route", "show")
	return rs
}

// readIn reads a file through a separate process in h's namespace (independently of the
// code that wrote it) and returns it trimmed.
func readIn(t *testing.T, h *Host, path string) string {
	t.Helper()
	out, err := runIn(t, h, "cat", path)
	if err != nil {
		t.Fatalf("cat %s in %s: %v\n%s", path, h.NS, err, out)
	}
	return strings.TrimSpace(out)
}

// pingTTL pings dst once from h and returns the TTL the reply arrived with.
func pingTTL(t *testing.T, h *Host, dst netip.Addr, extra ...string) int {
	t.Helper()
	out, err := ping(t, h, dst, extra...)
	if err != nil {
		t.Fatalf("ping %s -> %v: %v\n%s", h.NS, dst, err, out)
	}
	_, rest, ok := strings.Cut(out, " ttl=")
	if !ok {
		t.Fatalf("ping %s -> %v: no ttl in\n%s", h.NS, dst, out)
	}
	ttl, err := strconv.Atoi(strings.Fields(rest)[0])
	if err != nil {
		t.Fatalf("ping %s -> %v: ttl %q: %v", h.NS, dst, rest, err)
	}
	return ttl
}

// linkCount returns how many interfaces namespace ns holds.
func linkCount(t *testing.T, ns string) []string {
	t.Helper()
	names, err := linkNames(ns)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestRoutedBed checks a default routed bed: names, the address plan, links, IPv6 off,
// forwarding on in the router only, strict rp_filter, exactly the routes promised and no
// other, and that a ping from A reaches B across the router with its TTL decremented.
func TestRoutedBed(t *testing.T) {
	privileged.Require(t)
	t.Parallel()
	b := NewT(t, Options{Routed: true})
	if b.R == nil {
		t.Fatal("routed bed without a router")
	}
	r := b.R
	if b.Prefix.String() != "198.18.1.0/24" || b.MTU() != DefaultMTU {
		t.Fatalf("bed prefix %v mtu %d; want 198.18.1.0/24 %d", b.Prefix, b.MTU(), DefaultMTU)
	}
	type end struct {
		h          *Host
		addr, pfx  string
		ns         string
		peer       *Host
		wantIndex  int
		nsLinks    int
		forwarding string
	}
	ends := []end{
		{b.A, "198.18.1.1", "198.18.1.0/24", b.A.NS, r.A, ifIndexA, 2, "0"},
		{r.A, "198.18.1.2", "198.18.1.0/24", r.NS, b.A, ifIndexRA, 3, "1"},
		{r.B, "198.18.2.1", "198.18.2.0/24", r.NS, b.B, ifIndexRB, 3, "1"},
		{b.B, "198.18.2.2", "198.18.2.0/24", b.B.NS, r.B, ifIndexBR, 2, "0"},
	}
	seen := map[string]bool{}
	for _, e := range ends {
		h := e.h
		if h.NS != e.ns || h.Addr.String() != e.addr || h.Prefix.String() != e.pfx {
			t.Errorf("%s/%s: ns %s addr %v prefix %v; want %s %s %s", h.NS, h.Ifname, h.NS, h.Addr, h.Prefix, e.ns, e.addr, e.pfx)
		}
		if !strings.HasPrefix(h.NS, NSPrefix) || len(h.Ifname) > ifNameMax || seen[h.Ifname] {
			t.Errorf("names %q %q do not follow the scheme (or repeat)", h.NS, h.Ifname)
		}
		seen[h.Ifname] = true
		l := showLink(t, h, h.Ifname)
		if l.Ifindex != h.IfIndex || h.IfIndex != e.wantIndex || l.Address != h.MAC.String() || len(h.MAC) != 6 {
			t.Errorf("%s: ip shows index %d MAC %s; Host has %d %v (want index %d)", h.Ifname, l.Ifindex, l.Address, h.IfIndex, h.MAC, e.wantIndex)
		}
		if l.Operstate != "UP" || !slices.Contains(l.Flags, "LOWER_UP") {
			t.Errorf("%s: not up: %s %v", h.Ifname, l.Operstate, l.Flags)
		}
		if l.MTU != DefaultMTU || l.NumRxQueues != 1 || l.NumTxQueues != 1 {
			t.Errorf("%s: mtu %d queues %d/%d; want %d, 1/1", h.Ifname, l.MTU, l.NumRxQueues, l.NumTxQueues, DefaultMTU)
		}
		if len(l.AddrInfo) != 1 || l.AddrInfo[0].Family != "inet" || l.AddrInfo[0].Local != e.addr || l.AddrInfo[0].Prefixlen != 24 {
			t.Errorf("%s: addresses %+v; want only %s/24 (no IPv6)", h.Ifname, l.AddrInfo, e.addr)
		}
		if n := linkCount(t, h.NS); len(n) != e.nsLinks {
			t.Errorf("%s: links %v; want lo and %d veth end(s)", h.NS, n, e.nsLinks-1)
		}
		for _, name := range []string{"all", "default", "lo", h.Ifname} {
			if v := readIn(t, h, filepath.Join(ipv6ConfDir, name, "disable_ipv6")); v != "1" {
				t.Errorf("%s: disable_ipv6 of %s = %q, want 1", h.NS, name, v)
			}
		}
		if v := readIn(t, h, filepath.Join(ipv4ConfDir, h.Ifname, "forwarding")); v != e.forwarding {
			t.Errorf("%s: forwarding on %s = %s, want %s", h.NS, h.Ifname, v, e.forwarding)
		}
		for _, name := range []string{"all", h.Ifname} {
			if v := readIn(t, h, filepath.Join(ipv4ConfDir, name, "rp_filter")); v != "1" {
				t.Errorf("%s: rp_filter of %s = %s, want 1 (strict)", h.NS, name, v)
			}
		}
	}
	for h, want := range map[*Host]string{b.A: "0", r.A: "1", b.B: "0"} {
		if v := readIn(t, h, ipv4IPForward); v != want {
			t.Errorf("%s: ip_forward = %s, want %s", h.NS, v, want)
		}
	}
	if b.A.Gateway != r.A.Addr || b.B.Gateway != r.B.Addr ||
		b.A.GatewayMAC.String() != r.A.MAC.String() || b.B.GatewayMAC.String() != r.B.MAC.String() ||
		r.A.Gateway.IsValid() || r.B.GatewayMAC != nil {
		t.Errorf("gateways: A %v %v, B %v %v, router %v %v; want the router's side addresses and MACs",
			b.A.Gateway, b.A.GatewayMAC, b.B.Gateway, b.B.GatewayMAC, r.A.Gateway, r.B.GatewayMAC)
	}

	// Exactly one connected route and one route to the other subnet through R in each
	// host, no default route anywhere.
	for _, c := range []struct {
		h    *Host
		want []routeInfo
	}{
		{b.A, []routeInfo{{Dst: "198.18.1.0/24", Dev: b.A.Ifname, Prefsrc: "198.18.1.1"}, {Dst: "198.18.2.0/24", Gateway: "198.18.1.2", Dev: b.A.Ifname}}},
		{b.B, []routeInfo{{Dst: "198.18.1.0/24", Gateway: "198.18.2.1", Dev: b.B.Ifname}, {Dst: "198.18.2.0/24", Dev: b.B.Ifname, Prefsrc: "198.18.2.2"}}},
		{r.A, []routeInfo{{Dst: "198.18.1.0/24", Dev: r.A.Ifname, Prefsrc: "198.18.1.2"}, {Dst: "198.18.2.0/24", Dev: r.B.Ifname, Prefsrc: "198.18.2.1"}}},
	} {
		got := routes(t, c.h)
		for i := range got {
			got[i].Protocol = ""
		}
		slices.SortFunc(got, func(x, y routeInfo) int { return strings.Compare(x.Dst, y.Dst) })
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: routes %+v, want %+v", c.h.NS, got, c.want)
		}
	}

	// Across the router: A's echo request leaves with TTL 64 and reaches B with 63; B's
	// reply, also sent with 64, comes back with 63. The router itself answers with 64.
	fw0, err := r.Forwarded()
	if err != nil {
		t.Fatal(err)
	}
	if ttl := pingTTL(t, b.A, b.B.Addr); ttl != 63 {
		t.Errorf("ping A -> B: reply TTL %d, want 63 (one hop)", ttl)
	}
	if ttl := pingTTL(t, b.B, b.A.Addr); ttl != 63 {
		t.Errorf("ping B -> A: reply TTL %d, want 63 (one hop)", ttl)
	}
	if ttl := pingTTL(t, b.A, r.A.Addr); ttl != 64 {
		t.Errorf("ping A -> router: reply TTL %d, want 64 (no hop)", ttl)
	}
	fw1, err := r.Forwarded()
	if err != nil {
		t.Fatal(err)
	}
	if fw1-fw0 < 4 {
		t.Errorf("router forwarded %d datagrams for two pings across it, want at least 4", fw1-fw0)
	}
	// A reached B through R's MAC: A has a neighbour entry for the router and none for B.
	var neigh []struct {
		Dst    string `json:"dst"`
		Lladdr string `json:"lladdr"`
	}
	ipJSON(t, b.A, &neigh, "neigh", "show", "dev", b.A.Ifname)
	if len(neigh) != 1 || neigh[0].Dst != r.A.Addr.String() || neigh[0].Lladdr != r.A.MAC.String() {
		t.Errorf("A's neighbours %+v, want only the router %v at %v", neigh, r.A.Addr, r.A.MAC)
	}
	// Nothing else is reachable: no route, so nothing leaves A for another address.
	if out, err := ping(t, b.A, netip.MustParseAddr("198.19.255.1")); err == nil || !strings.Contains(out, "unreachable") {
		t.Errorf("ping to an address without a route: %v\n%s", err, out)
	}
	t.Logf("router forwarded %d datagrams for the pings", fw1-fw0)
}

// TestRoutedMTU checks a jumbo routed bed end to end and SetMTU on all four ends.
func TestRoutedMTU(t *testing.T) {
	privileged.Require(t)
	t.Parallel()
	b := NewT(t, Options{Routed: true, MTU: 9000})
	all := []*Host{b.A, b.R.A, b.R.B, b.B}
	mtus := func(want int) {
		t.Helper()
		for _, h := range all {
			if l := showLink(t, h, h.Ifname); l.MTU != want {
				t.Fatalf("%s: mtu %d, want %d", h.Ifname, l.MTU, want)
			}
		}
	}
	mtus(9000)
	if out, err := ping(t, b.A, b.B.Addr, "-M", "do", "-s", "8972"); err != nil {
		t.Fatalf("jumbo ping across the router: %v\n%s", err, out)
	}
	if out, err := ping(t, b.A, b.B.Addr, "-M", "do", "-s", "8973"); err == nil {
		t.Fatalf("9001-byte packet with DF passed an MTU of 9000:\n%s", out)
	}
	if err := b.SetMTU(1500); err != nil {
		t.Fatal(err)
	}
	mtus(1500)
	if b.MTU() != 1500 {
		t.Fatalf("MTU() = %d after SetMTU(1500)", b.MTU())
	}
	if out, err := ping(t, b.A, b.B.Addr, "-M", "do", "-s", "1472"); err != nil {
		t.Fatalf("full-size ping at MTU 1500: %v\n%s", err, out)
	}
	if out, err := ping(t, b.A, b.B.Addr, "-M", "do", "-s", "8972"); err == nil {
		t.Fatalf("jumbo ping passed after SetMTU(1500):\n%s", out)
	}
}

// TestRoutedOptions checks queues on all four ends, custom prefixes and static neighbours
// on both links.
func TestRoutedOptions(t *testing.T) {
	privileged.Require(t)
	t.Parallel()
	b := NewT(t, Options{Routed: true, Queues: 4, StaticNeighbors: true,
		Prefix: netip.MustParsePrefix("198.19.7.8/29"), PrefixB: netip.MustParsePrefix("198.19.9.4/30")})
	r := b.R
	for h, want := range map[*Host]string{b.A: "198.19.7.9", r.A: "198.19.7.10", r.B: "198.19.9.5", b.B: "198.19.9.6"} {
		if h.Addr.String() != want {
			t.Errorf("%s: Addr %v, want %s", h.Ifname, h.Addr, want)
		}
		l := showLink(t, h, h.Ifname)
		if l.NumRxQueues != 4 || l.NumTxQueues != 4 {
			t.Errorf("%s: queues %d/%d, want 4/4", h.Ifname, l.NumRxQueues, l.NumTxQueues)
		}
	}
	for _, p := range [][2]*Host{{b.A, r.A}, {r.A, b.A}, {r.B, b.B}, {b.B, r.B}} {
		h, peer := p[0], p[1]
		var neigh []struct {
			Dst    string   `json:"dst"`
			Lladdr string   `json:"lladdr"`
			State  []string `json:"state"`
		}
		ipJSON(t, h, &neigh, "neigh", "show", "dev", h.Ifname)
		if len(neigh) != 1 || neigh[0].Dst != peer.Addr.String() || neigh[0].Lladdr != peer.MAC.String() ||
			!slices.Contains(neigh[0].State, "PERMANENT") {
			t.Errorf("%s on %s: neighbours %+v, want %v at %v, permanent", h.NS, h.Ifname, neigh, peer.Addr, peer.MAC)
		}
	}
	if ttl := pingTTL(t, b.A, b.B.Addr); ttl != 63 {
		t.Errorf("ping A -> B: TTL %d, want 63", ttl)
	}
}

// TestRoutedCloseRemovesEverything checks that Close removes all three namespaces and both
// veth pairs, kills a process left in the router, and is idempotent.
func TestRoutedCloseRemovesEverything(t *testing.T) {
	privileged.Require(t)
	t.Parallel()
	b, err := New(Options{Routed: true, Name: "routedclose"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() }) // in case a check below fails first
	ifnames := []string{b.A.Ifname, b.R.A.Ifname, b.R.B.Ifname, b.B.Ifname}
	if names, err := linkNames(""); err != nil || slices.ContainsFunc(names, func(n string) bool { return slices.Contains(ifnames, n) }) {
		t.Fatalf("veth visible in our own namespace: %v (%v)", names, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sleeper := b.R.Command(ctx, "sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- sleeper.Wait() }()
	waitFor(t, func() bool { pids, _ := nsPids(b.R.NS); return len(pids) > 0 })

	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("process inside the router survived Close")
	}
	checkGone(t, []string{b.A.NS, b.R.NS, b.B.NS}, ifnames)
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := b.SetMTU(1500); err == nil {
		t.Fatal("SetMTU on a closed bed succeeded")
	}
	if err := b.SetBottleneck(Bottleneck{Rate: 1e6, Burst: 4000, Limit: 4000}); err == nil {
		t.Fatal("SetBottleneck on a closed bed succeeded")
	}
}

// checkGone checks that none of the namespaces is listed and none of the interfaces is in
// our own namespace.
func checkGone(t *testing.T, nss, ifnames []string) {
	t.Helper()
	list, err := runIP("netns", "list")
	if err != nil {
		t.Fatal(err)
	}
	root, err := runIP("-o", "link", "show")
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range nss {
		if strings.Contains(string(list), ns) {
			t.Errorf("ip netns list still shows %s:\n%s", ns, list)
		}
		if _, err := os.Lstat(nsPath(ns)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists (%v)", nsPath(ns), err)
		}
	}
	for _, name := range ifnames {
		if strings.Contains(string(root), name) {
			t.Errorf("ip link shows %s:\n%s", name, root)
		}
	}
}

// TestRoutedNewCleansUpOnFailure makes New of a routed bed fail after each stage (one
// veth pair made and the other not, for "veth") and checks that nothing is left.
func TestRoutedNewCleansUpOnFailure(t *testing.T) {
	privileged.Require(t)
	t.Parallel()
	for _, stage := range []string{"namespaces", "veth", "links", "routes", "path"} {
		tag := "routedfail" + stage
		o := Options{Routed: true, Name: tag, failAt: stage}
		if stage == "path" {
			// The delay line's sockets hold the router's namespace: Close must stop it.
			o.Path = &PathConfig{Delay: time.Millisecond, Rate: 1e9}
		}
		b, err := New(o)
		if err == nil {
			b.Close()
			t.Fatalf("failAt %s: New succeeded", stage)
		}
		if !errors.Is(err, errInjected) {
			t.Fatalf("failAt %s: New error %v does not wrap the injected failure", stage, err)
		}
		names, err := listNamespaces()
		if err != nil {
			t.Fatal(err)
		}
		for _, ns := range names {
			if id, ok := parseNSName(ns); ok && id == selfID && strings.Contains(ns, "-"+sanitizeTag(tag)+"-") {
				t.Errorf("failAt %s: namespace %s left behind", stage, ns)
			}
		}
		root, err := linkNames("")
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range root {
			if strings.HasPrefix(n, "xn"+strconv.FormatInt(int64(selfID.pid), 36)+"-") {
				t.Errorf("failAt %s: interface %s in our own namespace", stage, n)
			}
		}
	}
}

// crashChildEnv makes the test binary, instead of running tests, create a routed bed,
// print its names and wait to be killed (TestRoutedSweepAfterCrash).
const crashChildEnv = "XDPNDK_TESTBED_CRASH_CHILD"

// crashNames is what the crash child prints.
type crashNames struct {
	NS      []string
	Ifnames []string
}

// crashChild creates a routed bed, prints its names as one JSON line and sleeps (bounded)
// without ever closing it. It returns the exit status.
func crashChild() int {
	b, err := New(Options{Routed: true, Name: "crashchild"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	names := crashNames{NS: []string{b.A.NS, b.R.NS, b.B.NS},
		Ifnames: []string{b.A.Ifname, b.R.A.Ifname, b.R.B.Ifname, b.B.Ifname}}
	if err := json.NewEncoder(os.Stdout).Encode(names); err != nil {
		return 1
	}
	time.Sleep(60 * time.Second) // killed long before; if not, the next Sweep removes the bed
	return 0
}

// TestRoutedSweepAfterCrash runs a process that creates a routed bed and is killed with
// SIGKILL (so no cleanup runs in it), and checks that Sweep then removes all three
// namespaces and with them both veth pairs.
func TestRoutedSweepAfterCrash(t *testing.T) {
	privileged.Require(t)
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	child := exec.CommandContext(ctx, exe, "-test.run=^$")
	child.Env = append(os.Environ(), crashChildEnv+"=1")
	child.Stderr = os.Stderr
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var names crashNames
	select {
	case s := <-line:
		if err := json.Unmarshal([]byte(s), &names); err != nil || len(names.NS) != 3 {
			t.Fatalf("child printed %q (%v)", s, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the child did not create its bed within 30 s")
	}
	// Sweep must remove them afterwards however they are cleaned up; make sure they exist
	// first (the child is alive: nobody sweeps them yet).
	for _, ns := range names.NS {
		if exists, err := nsExists(ns); err != nil || !exists {
			t.Fatalf("the child's namespace %s does not exist (%v)", ns, err)
		}
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	if err := Sweep(); err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	checkGone(t, names.NS, names.Ifnames)
}

// TestRoutedNames checks the router's veth names: within IFNAMSIZ, distinct from the hosts'
// and from other beds', and parsed back by Sweep's parser for the router's namespace; and
// that several routed beds created at once get distinct names and each works.
func TestRoutedNames(t *testing.T) {
	const maxPid = 1 << 22
	for _, n := range []uint64{1, 36, 36*36*36*36*36 - 1} {
		for _, side := range []byte{'a', 'b'} {
			name, err := routerVethName(maxPid, n, side)
			if err != nil || len(name) > ifNameMax {
				t.Fatalf("routerVethName(%d, %d, %c) = %q, %v", maxPid, n, side, name, err)
			}
		}
	}
	if _, err := routerVethName(maxPid, 36*36*36*36*36, 'a'); err == nil {
		t.Fatal("routerVethName accepted a name longer than 15 bytes")
	}
	x, _ := vethName(1234, 7, 'a')
	ra, _ := routerVethName(1234, 7, 'a')
	rb, _ := routerVethName(1234, 7, 'b')
	if x == ra || ra == rb || ra != "xnya-7ra" {
		t.Fatalf("names %q %q %q", x, ra, rb)
	}
	id := procID{pid: 4321, start: 987654}
	if got, ok := parseNSName(nsName(id, 5, "tag", 'r')); !ok || got != id {
		t.Fatalf("the router's namespace name does not parse back: %+v %v", got, ok)
	}

	privileged.Require(t)
	t.Parallel()
	var beds [3]*Bed
	errs := make([]error, len(beds))
	var wg sync.WaitGroup
	for i := range beds {
		wg.Go(func() { beds[i], errs[i] = New(Options{Routed: true, Name: "routednames" + strconv.Itoa(i)}) })
	}
	wg.Wait()
	for i, b := range beds {
		if b != nil {
			t.Cleanup(func() {
				if err := b.Close(); err != nil {
					t.Error(err)
				}
			})
		}
		if errs[i] != nil {
			t.Fatalf("bed %d: %v", i, errs[i])
		}
	}
	seen := map[string]bool{}
	for _, b := range beds {
		for _, name := range []string{b.A.NS, b.R.NS, b.B.NS, b.A.Ifname, b.R.A.Ifname, b.R.B.Ifname, b.B.Ifname} {
			if seen[name] {
				t.Fatalf("name %s used twice", name)
			}
			seen[name] = true
		}
		if ttl := pingTTL(t, b.A, b.B.Addr); ttl != 63 {
			t.Fatalf("ping in %s: TTL %d", b.A.NS, ttl)
		}
	}
}

// TestRoutedOptionsValidation checks the routed defaults and what New refuses.
func TestRoutedOptionsValidation(t *testing.T) {
	o, err := Options{Routed: true}.withDefaults()
	if err != nil || o.Prefix.String() != "198.18.1.0/24" || o.PrefixB.String() != "198.18.2.0/24" {
		t.Fatalf("routed defaults %v %v (%v)", o.Prefix, o.PrefixB, err)
	}
	o, err = Options{Routed: true, Prefix: netip.MustParsePrefix("198.19.3.7/24")}.withDefaults()
	if err != nil || o.Prefix.String() != "198.19.3.0/24" || o.PrefixB.String() != "198.18.2.0/24" {
		t.Fatalf("routed with Prefix: %v %v (%v)", o.Prefix, o.PrefixB, err)
	}
	for _, c := range []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"prefix b without router", Options{PrefixB: netip.MustParsePrefix("198.18.2.0/24")}, "without a router"},
		{"overlap", Options{Routed: true, Prefix: netip.MustParsePrefix("198.18.0.0/16"), PrefixB: netip.MustParsePrefix("198.18.2.0/24")}, "overlap"},
		{"same", Options{Routed: true, Prefix: netip.MustParsePrefix("198.18.2.0/24")}, "overlap"},
		{"prefix b outside", Options{Routed: true, PrefixB: netip.MustParsePrefix("10.0.0.0/24")}, "not inside"},
		{"prefix b ipv6", Options{Routed: true, PrefixB: netip.MustParsePrefix("2001:db8::/64")}, "not IPv4"},
		{"prefix b too small", Options{Routed: true, PrefixB: netip.MustParsePrefix("198.18.2.0/31")}, "no room"},
		{"prefix outside", Options{Routed: true, Prefix: netip.MustParsePrefix("192.168.0.0/24")}, "not inside"},
	} {
		_, err := c.opts.withDefaults()
		if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: %v, want ErrInvalidOptions containing %q", c.name, err, c.wantErr)
		}
		if b, err := New(c.opts); err == nil {
			b.Close()
			t.Errorf("%s: New accepted it", c.name)
		}
	}
}

// TestSNMPField checks the /proc/net/snmp parser on a sample.
func TestSNMPField(t *testing.T) {
	data := []byte("Ip: Forwarding DefaultTTL InReceives ForwDatagrams\nIp: 1 64 17 12\n" +
		"Icmp: InMsgs InDestUnreachs\nIcmp: 3 2\nTcp: RtoAlgorithm MaxConn\nTcp: 1 -1\n")
	for _, c := range []struct {
		group, field string
		want         int64
	}{{"Ip", "ForwDatagrams", 12}, {"Ip", "Forwarding", 1}, {"Icmp", "InDestUnreachs", 2}, {"Tcp", "MaxConn", -1}} {
		if v, err := snmpField(data, c.group, c.field); err != nil || v != c.want {
			t.Errorf("%s %s = %d, %v; want %d", c.group, c.field, v, err, c.want)
		}
	}
	for _, bad := range [][2]string{{"Ip", "Nope"}, {"Udp", "InDatagrams"}} {
		if _, err := snmpField(data, bad[0], bad[1]); err == nil {
			t.Errorf("%s %s: no error", bad[0], bad[1])
		}
	}
	if _, err := snmpField([]byte("Ip: A B\nIp: 1\n"), "Ip", "A"); err == nil {
		t.Error("short value line accepted")
	}
}

// TestParseQdisc checks the tc output parser on samples.
func TestParseQdisc(t *testing.T) {
	q, err := parseQdisc([]byte(`[{"kind":"tbf","handle":"8001:","root":true,"refcnt":2,"options":{"rate":2500000,"burst":16000,"lat":11200},` +
		`"bytes":12345,"packets":9,"drops":1,"overlimits":7,"requeues":0,"backlog":3028,"qlen":2}]`))
	want := QdiscStats{Kind: "tbf", Bytes: 12345, Packets: 9, Drops: 1, Overlimits: 7, Backlog: 3028, Qlen: 2}
	if err != nil || q != want {
		t.Fatalf("parseQdisc = %+v, %v; want %+v", q, err, want)
	}
	for _, bad := range []string{`[]`, `[{"kind":"tbf","root":false}]`, `{`, `[{"kind":"a","root":true},{"kind":"b","root":true}]`} {
		if _, err := parseQdisc([]byte(bad)); err == nil {
			t.Errorf("parseQdisc(%s): no error", bad)
		}
	}
}

// TestBottleneck sets a bottleneck on the router's egress towards B, checks that tc shows
// it, runs a bounded kernel TCP transfer from A to B through it and checks that the
// discipline carried it and held packets back (its counters moved), then removes it. The
// measured rate goes to the log only (timing is not a pass/fail criterion).
func TestBottleneck(t *testing.T) {
	privileged.Require(t)
	t.Parallel()
	b := NewT(t, Options{Routed: true})
	if st, err := b.BottleneckStats(); err != nil || st.Kind != "noqueue" {
		t.Fatalf("before: %+v, %v; want the veth default noqueue", st, err)
	}
	for _, bad := range []Bottleneck{
		{Rate: 0, Burst: 16000, Limit: 64000},
		{Rate: 1e6, Burst: 1513, Limit: 64000},
		{Rate: 1e6, Burst: 16000, Limit: 1000},
		{Rate: 1e6, Burst: 16000, Limit: maxBottleneckBytes + 1},
	} {
		if err := b.SetBottleneck(bad); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("SetBottleneck(%+v) = %v, want ErrInvalidOptions", bad, err)
		}
	}
	if err := b.ClearBottleneck(); err != nil {
		t.Fatalf("ClearBottleneck without a bottleneck: %v", err)
	}

	const rate = 20_000_000 // bits/s
	if err := b.SetBottleneck(Bottleneck{Rate: rate, Burst: 16000, Limit: 64000}); err != nil {
		t.Fatal(err)
	}
	// B is untouched: only the router's B side has the discipline.
	show, err := runIn(t, b.B, "tc", "qdisc", "show", "dev", b.B.Ifname)
	if err != nil || strings.Contains(show, "tbf") {
		t.Errorf("B's own interface has a tbf: %q (%v)", show, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	outb, err := b.R.Command(ctx, "tc", "qdisc", "show", "dev", b.R.B.Ifname).CombinedOutput()
	if err != nil || !strings.Contains(string(outb), "qdisc tbf") || !strings.Contains(string(outb), "rate 20Mbit") {
		t.Fatalf("tc qdisc show on the router: %q (%v), want a tbf at 20Mbit", outb, err)
	}
	before, err := b.BottleneckStats()
	if err != nil || before.Kind != "tbf" {
		t.Fatalf("stats %+v, %v", before, err)
	}

	const size = 2 << 20 // 0.84 s at 20 Mbit/s
	elapsed, err := tcpTransfer(b.A, b.B, size, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	after, err := b.BottleneckStats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d bytes A -> B over TCP through a %d bit/s bottleneck in %v: %.1f Mbit/s; tbf sent %d bytes in %d packets, %d overlimits, %d drops",
		size, rate, elapsed.Round(time.Millisecond), float64(size)*8/elapsed.Seconds()/1e6,
		after.Bytes-before.Bytes, after.Packets-before.Packets, after.Overlimits-before.Overlimits, after.Drops-before.Drops)
	if after.Bytes-before.Bytes < size {
		t.Errorf("the discipline sent %d bytes for a %d-byte transfer: the transfer did not go through it", after.Bytes-before.Bytes, size)
	}
	if after.Overlimits == before.Overlimits {
		t.Errorf("no overlimits during a transfer faster than the rate: the discipline did not hold anything back (%+v -> %+v)", before, after)
	}

	if err := b.ClearBottleneck(); err != nil {
		t.Fatal(err)
	}
	if st, err := b.BottleneckStats(); err != nil || st.Kind != "noqueue" {
		t.Fatalf("after ClearBottleneck: %+v, %v; want noqueue", st, err)
	}
	if err := b.ClearBottleneck(); err != nil {
		t.Fatalf("second ClearBottleneck: %v", err)
	}
}

// TestBottleneckPlainBed: the bottleneck methods need a router.
func TestBottleneckPlainBed(t *testing.T) {
	privileged.Require(t)
	t.Parallel()
	b := NewT(t, Options{})
	if b.R != nil || b.A.Gateway.IsValid() || b.A.GatewayMAC != nil || b.A.Prefix != b.Prefix || b.B.Prefix != b.Prefix {
		t.Fatalf("plain bed: R %v, A gateway %v %v, prefixes %v %v", b.R, b.A.Gateway, b.A.GatewayMAC, b.A.Prefix, b.B.Prefix)
	}
	if err := b.SetBottleneck(Bottleneck{Rate: 1e6, Burst: 16000, Limit: 64000}); err == nil {
		t.Error("SetBottleneck on a plain bed succeeded")
	}
	if _, err := b.BottleneckStats(); err == nil {
		t.Error("BottleneckStats on a plain bed succeeded")
	}
	if err := b.ClearBottleneck(); err == nil {
		t.Error("ClearBottleneck on a plain bed succeeded")
	}
	for h, want := range map[*Host]string{b.A: "0", b.B: "0"} {
		if v := readIn(t, h, ipv4IPForward); v != want {
			t.Errorf("%s: ip_forward = %s, want %s", h.NS, v, want)
		}
	}
}

// tcpTransfer sends size bytes over one TCP connection from a socket in from to a
// listener in to, and returns the time from the connection's start until the receiver has
// read every byte. Everything is bounded by limit.
func tcpTransfer(from, to *Host, size int, limit time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(limit)
	var ln net.Listener
	if err := to.Do(func() (err error) {
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(to.Addr, 0).String())
		return err
	}); err != nil {
		return 0, fmt.Errorf("listen in %s: %w", to.NS, err)
	}
	defer ln.Close()
	got := make(chan error, 1)
	go func() {
		got <- func() error {
			if err := ln.(*net.TCPListener).SetDeadline(deadline); err != nil {
				return err
			}
			c, err := ln.Accept()
			if err != nil {
				return err
			}
			defer c.Close()
			if err := c.SetDeadline(deadline); err != nil {
				return err
			}
			n, err := io.Copy(io.Discard, c)
			if err != nil {
				return err
			}
			if n != int64(size) {
				return fmt.Errorf("received %d bytes, want %d", n, size)
			}
			return nil
		}()
	}()
	var c net.Conn
	d := net.Dialer{Deadline: deadline}
	start := time.Now()
	if err := from.Do(func() (err error) { c, err = d.Dial("tcp4", ln.Addr().String()); return err }); err != nil {
		return 0, fmt.Errorf("dial from %s: %w", from.NS, err)
	}
	defer c.Close()
	if err := c.SetDeadline(deadline); err != nil {
		return 0, err
	}
	if _, err := c.Write(make([]byte, size)); err != nil {
		return 0, fmt.Errorf("send: %w", err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return 0, err
	}
	if err := <-got; err != nil {
		return 0, fmt.Errorf("receive: %w", err)
	}
	return time.Since(start), nil
}

// The router's random loss: everything towards B dropped at 1, nothing at 0, the programs
// counted; refused on the plain bed and for a probability out of range; gone with Close.
func TestRouterLoss(t *testing.T) {
	b := NewT(t, Options{Routed: true})
	ping := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return b.A.Command(ctx, "ping", "-c", "3", "-i", "0.05", "-W", "1", b.B.Addr.String()).Run()
	}
	if err := b.SetRouterLoss(1, 0); err != nil {
		t.Fatal(err)
	}
	if err := ping(); err == nil {
		t.Fatal("ping crossed a router dropping everything towards B")
	}
	toB, toA, err := b.RouterLoss()
	// The echoes, and the router's own ARP requests for B, are dropped: nothing passes.
	if err != nil || toB.Dropped == 0 || toB.Passed != 0 || toA != (LossStats{}) {
		t.Fatalf("counters towards B %+v, towards A %+v (%v)", toB, toA, err)
	}
	if err := b.SetRouterLoss(0, 0); err != nil {
		t.Fatal(err)
	}
	if err := ping(); err != nil {
		t.Fatalf("ping with no loss: %v", err)
	}
	if toB, _, _ := b.RouterLoss(); toB.Passed < 3 {
		t.Fatalf("counters after a clean ping %+v", toB)
	}
	if err := b.SetRouterLoss(1.5, 0); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("loss 1.5: %v", err)
	}
	plain := NewT(t, Options{})
	if err := plain.SetRouterLoss(0.1, 0); err == nil {
		t.Fatal("router loss on the plain bed")
	}
}
