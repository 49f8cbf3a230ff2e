package testbed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/privileged"
)

// cmdTimeout bounds every command a test runs.
const cmdTimeout = 10 * time.Second

// runIn runs name args inside h's namespace and returns its combined output.
func runIn(t *testing.T, h *Host, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	out, err := h.Command(ctx, name, args...).CombinedOutput()
	return string(out), err
}

// ping sends one bounded echo request from h to dst; extra options go before the address.
func ping(t *testing.T, h *Host, dst netip.Addr, extra ...string) (string, error) {
	t.Helper()
	args := append([]string{"-n", "-c", "1", "-W", "2"}, extra...)
	return runIn(t, h, "ping", append(args, dst.String())...)
}

// ipJSON runs `ip -j -d ARGS` in h's namespace and decodes the result.
func ipJSON(t *testing.T, h *Host, v any, args ...string) {
	t.Helper()
	out, err := runIP(append([]string{"-j", "-d", "-n", h.NS}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("decode ip %v output: %v", args, err)
	}
}

// linkInfo is the part of `ip -j -d link show` the tests look at.
type linkInfo struct {
	Ifname      string   `json:"ifname"`
	Ifindex     int      `json:"ifindex"`
	Flags       []string `json:"flags"`
	Operstate   string   `json:"operstate"`
	MTU         int      `json:"mtu"`
	Address     string   `json:"address"`
	NumRxQueues int      `json:"num_rx_queues"`
	NumTxQueues int      `json:"num_tx_queues"`
	LinkNetnsid *int     `json:"link_netnsid"`
	AddrInfo    []struct {
		Family    string `json:"family"`
		Local     string `json:"local"`
		Prefixlen int    `json:"prefixlen"`
	} `json:"addr_info"`
}

// showLink returns `ip addr show dev ifname` in h's namespace.
func showLink(t *testing.T, h *Host, ifname string) linkInfo {
	t.Helper()
	var links []linkInfo
	ipJSON(t, h, &links, "addr", "show", "dev", ifname)
	if len(links) != 1 {
		t.Fatalf("ip addr show dev %s in %s: %d links", ifname, h.NS, len(links))
	}
	return links[0]
}

// nsInode returns the device and inode that identify the namespace file at path.
func nsInode(t *testing.T, path string) [2]uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return [2]uint64{uint64(st.Dev), st.Ino}
}

// TestBedHosts checks a default bed: names, addresses, links up with carrier, IPv6 off,
// and that host A reaches host B.
func TestBedHosts(t *testing.T) {
	privileged.Require(t)
	t.Parallel()
	b := NewT(t, Options{})

	if b.Prefix != defaultPrefix || b.MTU() != DefaultMTU {
		t.Fatalf("bed prefix %v mtu %d; want %v %d", b.Prefix, b.MTU(), defaultPrefix, DefaultMTU)
	}
	want := map[*Host]string{b.A: "198.18.0.1", b.B: "198.18.0.2"}
	for h, addr := range want {
		if h.Addr.String() != addr {
			t.Errorf("%s: Addr = %v, want %s", h.NS, h.Addr, addr)
		}
		if !strings.HasPrefix(h.NS, NSPrefix) || len(h.Ifname) > ifNameMax {
			t.Errorf("names %q %q do not follow the scheme", h.NS, h.Ifname)
		}
		l := showLink(t, h, h.Ifname)
		if l.Ifindex != h.IfIndex || l.Address != h.MAC.String() || h.IfIndex == 0 || len(h.MAC) != 6 {
			t.Errorf("%s: ip shows index %d MAC %s; Host has %d %v", h.NS, l.Ifindex, l.Address, h.IfIndex, h.MAC)
		}
		if l.Operstate != "UP" || !slices.Contains(l.Flags, "UP") || !slices.Contains(l.Flags, "LOWER_UP") {
			t.Errorf("%s: %s is not up: operstate %s flags %v", h.NS, h.Ifname, l.Operstate, l.Flags)
		}
		if l.MTU != DefaultMTU || l.NumRxQueues != 1 || l.NumTxQueues != 1 {
			t.Errorf("%s: mtu %d queues %d/%d; want %d, 1/1", h.NS, l.MTU, l.NumRxQueues, l.NumTxQueues, DefaultMTU)
		}
		if len(l.AddrInfo) != 1 || l.AddrInfo[0].Family != "inet" || l.AddrInfo[0].Local != addr || l.AddrInfo[0].Prefixlen != 24 {
			t.Errorf("%s: addresses %+v; want only %s/24 (no IPv6)", h.NS, l.AddrInfo, addr)
		}
		lo := showLink(t, h, "lo")
		if !slices.Contains(lo.Flags, "UP") {
			t.Errorf("%s: lo not up: %v", h.NS, lo.Flags)
		}
		if links, err := linkNames(h.NS); err != nil || len(links) != 2 {
			t.Errorf("%s: links %v (%v); want lo and the veth end only", h.NS, links, err)
		}
		// Checked through a separate process, independently of the code that set it.
		for _, name := range []string{"all", "default", "lo", h.Ifname} {
			out, err := runIn(t, h, "cat", filepath.Join(ipv6ConfDir, name, "disable_ipv6"))
			if err != nil || strings.TrimSpace(out) != "1" {
				t.Errorf("%s: disable_ipv6 of %s = %q (%v), want 1", h.NS, name, out, err)
			}
		}
		if out, err := runIn(t, h, "ip", "-6", "-o", "addr", "show"); err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("%s: IPv6 addresses present: %q (%v)", h.NS, out, err)
		}
	}
	if b.A.MAC.String() == b.B.MAC.String() {
		t.Errorf("both ends have MAC %v", b.A.MAC)
	}
	if out, err := ping(t, b.A, b.B.Addr); err != nil {
		t.Fatalf("ping A -> B: %v\n%s", err, out)
	}
	if out, err := ping(t, b.B, b.A.Addr); err != nil {
		t.Fatalf("ping B -> A: %v\n%s", err, out)
	}
}

// TestBedJumbo checks that a bed made with MTU 9000 carries a 9000-byte unfragmented
// packet (8972 bytes of ICMP payload + 8 ICMP + 20 IP).
func TestBedJumbo(t *testing.T) {
	privileged.Require(t)
	t.Parallel()
	b := NewT(t, Options{MTU: 9000})
	for _, h := range []*Host{b.A, b.B} {
		if l := showLink(t, h, h.Ifname); l.MTU != 9000 {
			t.Fatalf("%s: mtu %d, want 9000", h.NS, l.MTU)
		}
	}
	if out, err := ping(t, b.A, b.B.Addr, "-M", "do", "-s", "8972"); err != nil {
		t.Fatalf("jumbo ping: %v\n%s", err, out)
	}
	if out, err := ping(t, b.A, b.B.Addr, "-M", "do", "-s", "8973"); err == nil {
		t.Fatalf("9001-byte packet with DF passed an MTU of 9000:\n%s", out)
	}
}

// TestBedSetMTU checks changing the MTU of a running bed, and the bounds.
func TestBedSetMTU(t *testing.T) {
	privileged.Require(t)
	t.Parallel()
	b := NewT(t, Options{})
	if out, err := ping(t, b.A, b.B.Addr, "-M", "do", "-s", "8972"); err == nil {
		t.Fatalf("jumbo ping passed at MTU 1500:\n%s", out)
	}
	if err := b.SetMTU(9000); err != nil {
		t.Fatal(err)
	}
	if b.MTU() != 9000 {
		t.Fatalf("MTU() = %d after SetMTU(9000)", b.MTU())
	}
	if out, err := ping(t, b.A, b.B.Addr, "-M", "do", "-s", "8972"); err != nil {
		t.Fatalf("jumbo ping after SetMTU(9000): %v\n%s", err, out)
	}
	for _, bad := range []int{0, MinMTU - 1, MaxMTU + 1} {
		if err := b.SetMTU(bad); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("SetMTU(%d) = %v, want ErrInvalidOptions", bad, err)
		}
	}
	if b.MTU() != 9000 {
		t.Fatalf("MTU() = %d after rejected SetMTU calls", b.MTU())
	}
}

// TestBedOptions checks the queue count, a non-default prefix and static neighbours.
func TestBedOptions(t *testing.T) {
	privileged.Require(t)
	t.Parallel()
	b := NewT(t, Options{Queues: 4, Prefix: netip.MustParsePrefix("198.19.7.8/29"), StaticNeighbors: true})
	if b.A.Addr.String() != "198.19.7.9" || b.B.Addr.String() != "198.19.7.10" {
		t.Fatalf("addresses %v %v, want 198.19.7.9 198.19.7.10", b.A.Addr, b.B.Addr)
	}
	for _, p := range [][2]*Host{{b.A, b.B}, {b.B, b.A}} {
		h, peer := p[0], p[1]
		l := showLink(t, h, h.Ifname)
		if l.NumRxQueues != 4 || l.NumTxQueues != 4 {
			t.Errorf("%s: queues %d/%d, want 4/4", h.NS, l.NumRxQueues, l.NumTxQueues)
		}
		if len(l.AddrInfo) != 1 || l.AddrInfo[0].Prefixlen != 29 {
			t.Errorf("%s: addresses %+v, want one /29", h.NS, l.AddrInfo)
		}
		var neigh []struct {
			Dst    string   `json:"dst"`
			Lladdr string   `json:"lladdr"`
			State  []string `json:"state"`
		}
		ipJSON(t, h, &neigh, "neigh", "show", "dev", h.Ifname)
		if len(neigh) != 1 || neigh[0].Dst != peer.Addr.String() || neigh[0].Lladdr != peer.MAC.String() ||
			!slices.Contains(neigh[0].State, "PERMANENT") {
			t.Errorf("%s: neighbours %+v, want %v at %v, permanent", h.NS, neigh, peer.Addr, peer.MAC)
		}
	}
	if out, err := ping(t, b.A, b.B.Addr); err != nil {
		t.Fatalf("ping: %v\n%s", err, out)
	}
}

// TestDoEntersNamespace checks that fn runs on a thread inside the host's namespace, and
// that no thread of this process is left in a bed's namespace afterwards.
func TestDoEntersNamespace(t *testing.T) {
	privileged.Require(t)
	t.Parallel()
	b := NewT(t, Options{})
	self := nsInode(t, "/proc/self/ns/net")
	for _, h := range []*Host{b.A, b.B} {
		want := nsInode(t, nsPath(h.NS))
		if want == self {
			t.Fatalf("%s has the same inode as our own namespace", h.NS)
		}
		// Many calls at once, so that some land on threads that were idle, the main
		// thread included.
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for range cap(errs) {
			wg.Go(func() {
				var got [2]uint64
				err := h.Do(func() error {
					fi, err := os.Stat("/proc/thread-self/ns/net")
					if err != nil {
						return err
					}
					st := fi.Sys().(*syscall.Stat_t)
					got = [2]uint64{uint64(st.Dev), st.Ino}
					return nil
				})
				if err == nil && got != want {
					err = fmt.Errorf("Do ran in namespace %v, want %v (%s)", got, want, h.NS)
				}
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if now := nsInode(t, "/proc/self/ns/net"); now != self {
		t.Fatalf("the main thread moved to namespace %v", now)
	}
	// Threads that entered a namespace exit with their goroutine; that happens just after
	// Do returns, so wait for it (bounded).
	deadline := time.Now().Add(5 * time.Second)
	for {
		stray := threadsOutside(t, self, nsInode(t, nsPath(b.A.NS)), nsInode(t, nsPath(b.B.NS)))
		if len(stray) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("threads %v still in a bed namespace", stray)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// threadsOutside returns the ids of this process's threads whose network namespace is one
// of the given ones (threads that vanish while being looked at are ignored).
func threadsOutside(t *testing.T, self [2]uint64, bad ...[2]uint64) []string {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var stray []string
	for _, task := range tasks {
		fi, err := os.Stat(filepath.Join("/proc/self/task", task.Name(), "ns/net"))
		if err != nil {
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		ino := [2]uint64{uint64(st.Dev), st.Ino}
		if ino != self && slices.Contains(bad, ino) {
			stray = append(stray, task.Name())
		}
	}
	return stray
}

// TestDoSocketsStay checks that sockets made inside Do stay in the host's namespace: a UDP
// socket can bind the host's address (which exists nowhere else), and after Do returns one
// datagram sent from A's socket arrives on B's.
func TestDoSocketsStay(t *testing.T) {
	privileged.Require(t)
	t.Parallel()
	b := NewT(t, Options{})
	listen := func(h *Host) net.PacketConn {
		var c net.PacketConn
		err := h.Do(func() error {
			var err error
			c, err = net.ListenPacket("udp4", netip.AddrPortFrom(h.Addr, 0).String())
			return err
		})
		if err != nil {
			t.Fatalf("listen in %s: %v", h.NS, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ca, cb := listen(b.A), listen(b.B)

	msg := []byte("testbed datagram")
	if _, err := ca.WriteTo(msg, cb.LocalAddr()); err != nil {
		t.Fatalf("send A -> B: %v", err)
	}
	if err := cb.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, from, err := cb.ReadFrom(buf)
	if err != nil {
		t.Fatalf("receive on B: %v", err)
	}
	if !bytes.Equal(buf[:n], msg) || from.String() != ca.LocalAddr().String() {
		t.Fatalf("B got %q from %v, want %q from %v", buf[:n], from, msg, ca.LocalAddr())
	}
}

// TestDoResults checks how Do reports fn's error, a panic and runtime.Goexit, and that it
// fails for a namespace that no longer exists.
func TestDoResults(t *testing.T) {
	privileged.Require(t)
	t.Parallel()
	b := NewT(t, Options{})
	sentinel := errors.New("sentinel")
	if err := b.A.Do(func() error { return fmt.Errorf("wrapped: %w", sentinel) }); !errors.Is(err, sentinel) {
		t.Errorf("Do error = %v, want it to wrap the sentinel", err)
	}
	if err := b.A.Do(func() error { panic("boom") }); err == nil || !strings.Contains(err.Error(), "panic: boom") {
		t.Errorf("Do after panic = %v, want an error naming the panic", err)
	}
	if err := b.A.Do(func() error { runtime.Goexit(); return nil }); !errors.Is(err, ErrGoexit) {
		t.Errorf("Do after Goexit = %v, want ErrGoexit", err)
	}
	gone := &Host{NS: NSPrefix + "does-not-exist"}
	if err := gone.Do(func() error { return nil }); err == nil {
		t.Error("Do in a missing namespace succeeded")
	}
}

// TestCloseRemovesEverything checks that Close deletes both namespaces and the veth pair,
// kills processes left inside, leaves nothing in our own namespace, and is idempotent.
func TestCloseRemovesEverything(t *testing.T) {
	privileged.Require(t)
	t.Parallel()
	b, err := New(Options{Name: "closetest"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() }) // in case a check below fails first
	if names, err := linkNames(""); err != nil || slices.Contains(names, b.A.Ifname) || slices.Contains(names, b.B.Ifname) {
		t.Fatalf("veth visible in our own namespace: %v (%v)", names, err)
	}

	// A process left running inside must not keep the namespace alive.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sleeper := b.B.Command(ctx, "sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- sleeper.Wait() }()
	waitFor(t, func() bool { pids, _ := nsPids(b.B.NS); return len(pids) > 0 })

	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("process inside the bed survived Close")
	}

	list, err := runIP("netns", "list")
	if err != nil {
		t.Fatal(err)
	}
	root, err := runIP("-o", "link", "show")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []*Host{b.A, b.B} {
		if strings.Contains(string(list), h.NS) {
			t.Errorf("ip netns list still shows %s:\n%s", h.NS, list)
		}
		if _, err := os.Lstat(nsPath(h.NS)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists (%v)", nsPath(h.NS), err)
		}
		if strings.Contains(string(root), h.Ifname) {
			t.Errorf("ip link shows %s:\n%s", h.Ifname, root)
		}
		if err := h.Do(func() error { return nil }); err == nil {
			t.Errorf("Do in closed %s succeeded", h.NS)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := b.SetMTU(1500); err == nil {
		t.Fatal("SetMTU on a closed bed succeeded")
	}
}

// waitFor polls cond for up to 5 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTwoBedsAtOnce creates beds concurrently with the same prefix and checks that their
// names differ and that each works on its own.
func TestTwoBedsAtOnce(t *testing.T) {
	privileged.Require(t)
	t.Parallel()
	var beds [3]*Bed
	var wg sync.WaitGroup
	errs := make([]error, len(beds))
	for i := range beds {
		wg.Go(func() { beds[i], errs[i] = New(Options{Name: "twobeds" + strconv.Itoa(i)}) })
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
		for _, name := range []string{b.A.NS, b.B.NS, b.A.Ifname, b.B.Ifname} {
			if seen[name] {
				t.Fatalf("name %s used twice", name)
			}
			seen[name] = true
		}
		if out, err := ping(t, b.A, b.B.Addr); err != nil {
			t.Fatalf("ping in %s: %v\n%s", b.A.NS, err, out)
		}
	}
}

// TestSweep checks that Sweep removes a leftover bed of a dead process (veth and a
// process inside included) and one whose pid was reused, and keeps one of a live process.
func TestSweep(t *testing.T) {
	privileged.Require(t)
	t.Parallel()

	// A pid that is certainly dead: a child that has exited and been reaped.
	child := exec.Command("true")
	if err := child.Run(); err != nil {
		t.Fatal(err)
	}
	deadPid := child.Process.Pid
	initStart, _, err := procStart(1)
	if err != nil {
		t.Fatal(err)
	}
	n := bedCounter.Add(1)
	dead := nsName(procID{pid: deadPid, start: 12345}, n, "sweepdead", 'a')
	reused := nsName(procID{pid: 1, start: initStart + 1}, n, "sweepreused", 'a')
	live := nsName(procID{pid: 1, start: initStart}, n, "sweeplive", 'a')
	for _, ns := range []string{dead, reused, live} {
		if _, err := runIP("netns", "add", ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := removeStale(ns); err != nil {
				t.Error(err)
			}
		})
	}
	// Any concurrent New (other tests, other packages' test processes) sweeps too and may
	// remove the stale namespaces first, even before the link goes in, or SIGKILL this very
	// `ip -n dead` while it runs inside the dead namespace (a sweep kills what it finds
	// there before deleting it; seen in CI); either way the end state must hold.
	if _, err := runIP("-n", dead, "link", "add", "xnsweep0", "type", "veth", "peer", "name", "xnsweep1"); err != nil {
		var ee *exec.ExitError
		killed := errors.As(err, &ee) && ee.ProcessState != nil && !ee.Exited()
		if exists, _ := nsExists(dead); exists && !killed {
			t.Fatal(err)
		}
	}
	if err := Sweep(); err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	for ns, wantKept := range map[string]bool{dead: false, reused: false, live: true} {
		exists, err := nsExists(ns)
		if err != nil {
			t.Fatal(err)
		}
		if exists != wantKept {
			t.Errorf("after Sweep, %s exists = %v, want %v", ns, exists, wantKept)
		}
	}
}

// TestRemoveStaleKillsProcesses checks the removal step of Sweep on its own: processes left
// inside a namespace die before the namespace goes. The namespace is named for this live
// process, so no concurrent sweep touches it.
func TestRemoveStaleKillsProcesses(t *testing.T) {
	privileged.Require(t)
	t.Parallel()
	ns := nsName(selfID, bedCounter.Add(1), "removestale", 'a')
	if _, err := runIP("netns", "add", ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := removeStale(ns); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sleeper := (&Host{NS: ns}).Command(ctx, "sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- sleeper.Wait() }()
	waitFor(t, func() bool { pids, _ := nsPids(ns); return len(pids) > 0 })
	if err := removeStale(ns); err != nil {
		t.Fatalf("removeStale: %v", err)
	}
	if exists, err := nsExists(ns); err != nil || exists {
		t.Fatalf("namespace still exists (%v) after removeStale", err)
	}
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("process inside the namespace survived removeStale")
	}
}

// TestNewCleansUpOnFailure makes New fail after each stage and checks that nothing it made
// is left.
func TestNewCleansUpOnFailure(t *testing.T) {
	privileged.Require(t)
	t.Parallel()
	for _, stage := range []string{"namespaces", "veth", "links"} {
		tag := "newfail" + stage
		b, err := New(Options{Name: tag, failAt: stage})
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
	}
}
