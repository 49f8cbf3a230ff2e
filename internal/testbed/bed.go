package testbed

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xdpndk/xdpndk/internal/delayline"
)

// linkUpTimeout bounds the wait for both veth ends to be operationally up (carrier, and
// the kernel's link watcher has activated them) after being set up.
const linkUpTimeout = 5 * time.Second

// killWait bounds the wait for killed processes to leave a namespace being removed.
const killWait = 3 * time.Second

// errInjected is the failure Options.failAt asks for.
var errInjected = errors.New("failure injected by test")

// Interface indexes of the veth ends in their (fresh) namespaces, where lo is 1. In a
// routed bed the router's ends are 3 (towards A) and 4 (towards B), and B's end is 5.
const (
	ifIndexA  = 2
	ifIndexB  = 3
	ifIndexRA = 3
	ifIndexRB = 4
	ifIndexBR = 5
)

// Bed is two hosts, A and B, in their own network namespaces, joined by a veth pair; or, in
// a routed bed (Options.Routed), joined through a third namespace, the router R, by two
// veth pairs.
//
// A Bed owns its namespaces and veth pairs; Close removes them. Its exported fields are
// set by [New] and must not be modified. Close, SetMTU and the bottleneck methods may be
// called from any goroutine; the hosts' methods are safe for concurrent use.
type Bed struct {
	// A is the first host; it holds the first address of Prefix.
	A *Host
	// B is the second host; it holds the second address of Prefix in the plain bed, the
	// second address of Options.PrefixB in a routed bed.
	B *Host
	// R is the router of a routed bed, nil in the plain bed.
	R *Router
	// Prefix is the IPv4 subnet of A's link, masked: the link between A and B in the plain
	// bed (198.18.0.0/24 by default), between A and R in a routed bed (198.18.1.0/24 by
	// default). B.Prefix is B's.
	Prefix netip.Prefix

	mu     sync.Mutex
	mtu    int
	nss    []string // the namespaces New creates, in creation order
	nsMade []bool   // which of nss New created and Close has not yet removed
	pairs  []vethPair
	closed bool
	losses [2]io.Closer    // the router's loss programs towards B and towards A (SetRouterLoss)
	line   *delayline.Line // the router's delay line (Options.Path), nil without
}

// vethPair is one veth pair of a bed: its two ends and the interface indexes they get.
type vethPair struct {
	x, y   *Host
	ix, iy int
}

// New creates a bed: it first removes stale beds of dead processes ([Sweep]), then creates
// the namespaces (two, or three with a router), creates each veth pair directly inside its
// two namespaces (it never appears in the caller's namespace), disables IPv6 in every
// namespace before any link exists there, brings lo and every veth end up, sets the MTU,
// assigns the addresses, waits (bounded) for carrier on every end, and turns IPv4
// forwarding off in A and B. A routed bed also gets its forwarding, reverse-path filter
// and routes (see Options.Routed).
//
// Options are validated before anything is touched; invalid ones return an error wrapping
// ErrInvalidOptions. On any later failure New removes everything it made. New needs root
// (CAP_SYS_ADMIN and CAP_NET_ADMIN) and is safe for concurrent use: every bed gets names
// unique on the machine.
func New(opts Options) (*Bed, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	n := bedCounter.Add(1)
	b := &Bed{Prefix: o.Prefix, mtu: o.MTU}
	if o.Routed {
		err = b.nameRouted(o, n)
	} else {
		err = b.namePlain(o, n)
	}
	if err != nil {
		return nil, fmt.Errorf("name veth: %w", err)
	}
	if err := Sweep(); err != nil {
		return nil, fmt.Errorf("sweep stale test beds: %w", err)
	}

	if err := b.setup(o); err != nil {
		if cerr := b.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("remove partial test bed: %w", cerr))
		}
		return nil, fmt.Errorf("create test bed %s: %w", strings.Join(b.nss, "/"), err)
	}
	return b, nil
}

// namePlain names the hosts, namespaces and the veth pair of plain bed n.
func (b *Bed) namePlain(o Options, n uint64) error {
	addrA, addrB := hostAddrs(o.Prefix)
	b.A = &Host{NS: nsName(selfID, n, o.Name, 'a'), Addr: addrA, Prefix: o.Prefix}
	b.B = &Host{NS: nsName(selfID, n, o.Name, 'b'), Addr: addrB, Prefix: o.Prefix}
	var err error
	if b.A.Ifname, err = vethName(selfID.pid, n, 'a'); err != nil {
		return err
	}
	if b.B.Ifname, err = vethName(selfID.pid, n, 'b'); err != nil {
		return err
	}
	b.nss = []string{b.A.NS, b.B.NS}
	b.nsMade = make([]bool, len(b.nss))
	b.pairs = []vethPair{{x: b.A, y: b.B, ix: ifIndexA, iy: ifIndexB}}
	return nil
}

// nameRouted names the hosts, the router, the namespaces and both veth pairs of routed bed
// n: A takes the first address of Prefix and the router the second; the router takes the
// first address of PrefixB and B the second.
func (b *Bed) nameRouted(o Options, n uint64) error {
	addrA, addrRA := hostAddrs(o.Prefix)
	addrRB, addrB := hostAddrs(o.PrefixB)
	rns := nsName(selfID, n, o.Name, 'r')
	b.A = &Host{NS: nsName(selfID, n, o.Name, 'a'), Addr: addrA, Prefix: o.Prefix}
	b.B = &Host{NS: nsName(selfID, n, o.Name, 'b'), Addr: addrB, Prefix: o.PrefixB}
	b.R = &Router{NS: rns,
		A: &Host{NS: rns, Addr: addrRA, Prefix: o.Prefix},
		B: &Host{NS: rns, Addr: addrRB, Prefix: o.PrefixB}}
	var err error
	if b.A.Ifname, err = vethName(selfID.pid, n, 'a'); err != nil {
		return err
	}
	if b.B.Ifname, err = vethName(selfID.pid, n, 'b'); err != nil {
		return err
	}
	if b.R.A.Ifname, err = routerVethName(selfID.pid, n, 'a'); err != nil {
		return err
	}
	if b.R.B.Ifname, err = routerVethName(selfID.pid, n, 'b'); err != nil {
		return err
	}
	b.A.Gateway, b.B.Gateway = addrRA, addrRB
	b.nss = []string{b.A.NS, b.R.NS, b.B.NS}
	b.nsMade = make([]bool, len(b.nss))
	b.pairs = []vethPair{
		{x: b.A, y: b.R.A, ix: ifIndexA, iy: ifIndexRA},
		{x: b.R.B, y: b.B, ix: ifIndexRB, iy: ifIndexBR},
	}
	return nil
}

// With creates a bed (New(opts)), runs fn on it and removes it, also when fn fails. It
// returns what fn returned, even with an error; a failed removal is joined to the error.
func With[T any](opts Options, fn func(*Bed) (T, error)) (res T, err error) {
	bed, err := New(opts)
	if err != nil {
		return res, fmt.Errorf("create test bed: %w", err)
	}
	defer func() {
		if cerr := bed.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("remove test bed: %w", cerr))
		}
	}()
	return fn(bed)
}

// ends returns every veth end of the bed, pair by pair.
func (b *Bed) ends() []*Host {
	ends := make([]*Host, 0, 2*len(b.pairs))
	for _, p := range b.pairs {
		ends = append(ends, p.x, p.y)
	}
	return ends
}

// setup does the work of New after naming; b.Close undoes whatever part of it succeeded.
func (b *Bed) setup(o Options) error {
	if err := b.addNamespaces(); err != nil {
		return err
	}
	if o.failAt == "namespaces" {
		return errInjected
	}
	for _, ns := range b.nss {
		if err := (&Host{NS: ns}).Do(disableIPv6All); err != nil {
			return fmt.Errorf("disable ipv6 in %s: %w", ns, err)
		}
	}

	// The two ends of a pair get different interface indexes (each namespace would
	// otherwise number its veth end 2). Besides telling the ends apart in captures and
	// logs, this makes the kernel treat a veth end's carrier change as urgent (its index
	// differs from its peer's), so its operational state turns UP at once instead of up
	// to a second later (net/core/link_watch.c).
	q := strconv.Itoa(o.Queues)
	for i, p := range b.pairs {
		if _, err := runIP("-n", p.x.NS, "link", "add", p.x.Ifname, "index", strconv.Itoa(p.ix),
			"numtxqueues", q, "numrxqueues", q, "type", "veth",
			"peer", "name", p.y.Ifname, "index", strconv.Itoa(p.iy),
			"numtxqueues", q, "numrxqueues", q, "netns", p.y.NS); err != nil {
			return fmt.Errorf("create veth pair: %w", err)
		}
		if i == 0 && o.failAt == "veth" {
			return errInjected
		}
	}

	for _, h := range b.ends() {
		if err := h.Do(func() error { return disableIPv6On(h.Ifname) }); err != nil {
			return fmt.Errorf("disable ipv6 on %s in %s: %w", h.Ifname, h.NS, err)
		}
		if _, err := runIP("-n", h.NS, "link", "set", "dev", h.Ifname, "mtu", strconv.Itoa(o.MTU)); err != nil {
			return fmt.Errorf("set mtu: %w", err)
		}
		if _, err := runIP("-n", h.NS, "link", "set", "dev", "lo", "up"); err != nil {
			return fmt.Errorf("set lo up: %w", err)
		}
		addr := netip.PrefixFrom(h.Addr, h.Prefix.Bits()).String()
		if _, err := runIP("-n", h.NS, "addr", "add", addr, "dev", h.Ifname); err != nil {
			return fmt.Errorf("add address: %w", err)
		}
		if _, err := runIP("-n", h.NS, "link", "set", "dev", h.Ifname, "up"); err != nil {
			return fmt.Errorf("set link up: %w", err)
		}
	}

	for _, h := range b.ends() {
		if err := h.Do(func() error { return h.readLink(linkUpTimeout) }); err != nil {
			return fmt.Errorf("read link %s in %s: %w", h.Ifname, h.NS, err)
		}
	}

	if o.failAt == "links" {
		return errInjected
	}

	// A new namespace copies its IPv4 settings from the initial one, so forwarding is on
	// in A and B if it is on in the machine's own namespace: the hosts never forward.
	for _, h := range []*Host{b.A, b.B} {
		if err := h.Do(func() error { return setForwarding(false, h.Ifname) }); err != nil {
			return fmt.Errorf("turn forwarding off in %s: %w", h.NS, err)
		}
	}
	if b.R != nil {
		if err := b.setupRouting(); err != nil {
			return err
		}
	}

	if o.StaticNeighbors {
		for _, p := range b.pairs {
			for _, e := range [][2]*Host{{p.x, p.y}, {p.y, p.x}} {
				h, peer := e[0], e[1]
				if _, err := runIP("-n", h.NS, "neigh", "replace", peer.Addr.String(),
					"lladdr", peer.MAC.String(), "dev", h.Ifname, "nud", "permanent"); err != nil {
					return fmt.Errorf("add static neighbour: %w", err)
				}
			}
		}
	}
	if b.R != nil && o.failAt == "routes" {
		return errInjected
	}
	if o.Path != nil {
		if err := b.startPath(*o.Path); err != nil {
			return err
		}
		if o.failAt == "path" {
			return errInjected
		}
	}
	return nil
}

// addNamespaces creates the namespaces. (ip(8) itself serialises the first-time setup of
// /run/netns as a shared mount point with flock(2) on that directory, so concurrent
// creations from several processes are safe.)
func (b *Bed) addNamespaces() error {
	for i, ns := range b.nss {
		if _, err := runIP("netns", "add", ns); err != nil {
			// ip normally removes a half-made entry itself; if one is left, Close removes it.
			if exists, serr := nsExists(ns); serr == nil && exists {
				b.mu.Lock()
				b.nsMade[i] = true
				b.mu.Unlock()
			}
			return fmt.Errorf("create namespace: %w", err)
		}
		b.mu.Lock()
		b.nsMade[i] = true
		b.mu.Unlock()
	}
	return nil
}

// made reports whether namespace ns was created by New and not yet removed. The caller
// holds b.mu.
func (b *Bed) made(ns string) bool {
	for i, n := range b.nss {
		if n == ns {
			return b.nsMade[i]
		}
	}
	return false
}

// MTU returns the current MTU of the veth ends in bytes.
func (b *Bed) MTU() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mtu
}

// SetMTU sets the MTU of every veth end (both of the plain bed, all four of a routed one)
// to mtu bytes (IP packet size). It fails if mtu is outside [MinMTU, MaxMTU], if the bed is
// closed, or if the kernel refuses (an XDP program without frags support attached to a
// veth end limits its MTU to about 3.5 KB). After a failure the ends may differ; the bed
// remains usable and may be closed.
func (b *Bed) SetMTU(mtu int) error {
	if err := checkMTU(mtu); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errors.New("set mtu: test bed is closed")
	}
	for _, h := range b.ends() {
		if _, err := runIP("-n", h.NS, "link", "set", "dev", h.Ifname, "mtu", strconv.Itoa(mtu)); err != nil {
			return fmt.Errorf("set mtu of %s in %s: %w", h.Ifname, h.NS, err)
		}
	}
	b.mtu = mtu
	return nil
}

// Close removes the bed: it kills any process still running inside its namespaces,
// deletes the veth pairs, deletes the namespaces and verifies that the veth ends and the
// namespace entries are gone. It is idempotent: after a successful Close, further calls
// return nil; after a failed one, a further call retries what is left.
//
// A namespace stays alive in the kernel, empty but for its loopback device, while this
// process still holds something created in it (a socket made inside Host.Do): close those
// first.
func (b *Bed) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	var errs []error
	if b.line != nil {
		// Its sockets hold the router's namespace: close them before removing it.
		if err := b.line.Close(); err != nil {
			errs = append(errs, fmt.Errorf("stop the delay line: %w", err))
		}
		b.line = nil
	}
	for i, l := range b.losses {
		if l == nil {
			continue
		}
		if err := l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("remove the router's loss program: %w", err))
		}
		b.losses[i] = nil
	}
	anyMade := false
	for i, ns := range b.nss {
		if b.nsMade[i] {
			anyMade = true
			if err := killAll(ns); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if anyMade {
		if err := b.deleteVeth(); err != nil {
			errs = append(errs, err)
		}
	}
	for i, ns := range b.nss {
		if !b.nsMade[i] {
			continue
		}
		if err := deleteNamespace(ns); err != nil {
			errs = append(errs, err)
			continue
		}
		b.nsMade[i] = false
	}
	if len(errs) > 0 {
		return fmt.Errorf("close test bed: %w", errors.Join(errs...))
	}
	b.closed = true
	return nil
}

// deleteVeth deletes every veth pair from whichever side still has it and checks that no
// namespace still holds an end. The caller holds b.mu.
func (b *Bed) deleteVeth() error {
	var errs []error
	for _, h := range b.ends() {
		if !b.made(h.NS) {
			continue
		}
		exists, err := nsExists(h.NS)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !exists {
			continue
		}
		has, err := hasLink(h.NS, h.Ifname)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if has {
			// Deleting one end deletes the pair.
			if _, err := runIP("-n", h.NS, "link", "del", "dev", h.Ifname); err != nil {
				errs = append(errs, fmt.Errorf("delete veth: %w", err))
				continue
			}
			if has, err = hasLink(h.NS, h.Ifname); err != nil {
				errs = append(errs, err)
			} else if has {
				errs = append(errs, fmt.Errorf("veth %s still present in %s after delete", h.Ifname, h.NS))
			}
		}
	}
	return errors.Join(errs...)
}

// killAll kills every process (other than this one) whose network namespace is ns and
// waits, bounded, until none is left.
func killAll(ns string) error {
	exists, err := nsExists(ns)
	if err != nil || !exists {
		return err
	}
	self := os.Getpid()
	deadline := time.Now().Add(killWait)
	for {
		pids, err := nsPids(ns)
		if err != nil {
			if exists, serr := nsExists(ns); serr == nil && !exists {
				return nil // removed meanwhile (by a concurrent Sweep)
			}
			return err
		}
		left := 0
		for _, pid := range pids {
			if pid == self {
				continue
			}
			left++
			if err := killPid(pid); err != nil {
				return fmt.Errorf("empty namespace %s: %w", ns, err)
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("empty namespace %s: %d processes still inside after %v", ns, left, killWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// deleteNamespace removes the named namespace ns if it exists and checks that its entry is
// gone.
func deleteNamespace(ns string) error {
	exists, err := nsExists(ns)
	if err != nil || !exists {
		return err
	}
	if _, err := runIP("netns", "del", ns); err != nil {
		// Another sweeper may have removed it in the meantime.
		if exists, serr := nsExists(ns); serr == nil && !exists {
			return nil
		}
		return fmt.Errorf("delete namespace: %w", err)
	}
	if exists, err := nsExists(ns); err != nil {
		return err
	} else if exists {
		return fmt.Errorf("namespace %s still listed after delete", ns)
	}
	return nil
}

// readLink fills h.IfIndex and h.MAC and waits up to timeout for the link to be running
// (administratively up with carrier). It runs inside h's namespace.
func (h *Host) readLink(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ifi, err := net.InterfaceByName(h.Ifname)
		if err != nil {
			return fmt.Errorf("look up interface: %w", err)
		}
		if ifi.Flags&net.FlagUp != 0 && ifi.Flags&net.FlagRunning != 0 {
			h.IfIndex = ifi.Index
			h.MAC = ifi.HardwareAddr
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("link not running after %v (flags %v)", timeout, ifi.Flags)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
