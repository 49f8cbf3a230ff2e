package testbed

import (
	"errors"
	"fmt"
	"net/netip"
)

// Defaults applied by [New] to zero fields of [Options].
const (
	// DefaultMTU is the MTU of both veth ends when Options.MTU is 0.
	DefaultMTU = 1500
	// DefaultQueues is the number of RX and TX queues of each veth end when
	// Options.Queues is 0.
	DefaultQueues = 1
)

// Limits checked by [New] and [Bed.SetMTU].
const (
	// MinMTU is the smallest MTU accepted: the minimum an IPv4 link must carry (RFC 791).
	MinMTU = 68
	// MaxMTU is the largest MTU accepted: the largest a veth device allows.
	MaxMTU = 65535
	// MaxQueues is the largest number of queues per veth end accepted.
	MaxQueues = 64
	// maxTagLen is the longest Options.Name kept in namespace names, after sanitising.
	maxTagLen = 16
)

// allowedRange is the only address range a bed may use: 198.18.0.0/15, reserved for
// network benchmarking (RFC 2544, RFC 6890). Nothing outside it is ever assigned. It is
// unexported so that no caller can widen it.
var allowedRange = netip.MustParsePrefix("198.18.0.0/15")

// defaultPrefix is the subnet of a bed when Options.Prefix is the zero value: host A gets
// 198.18.0.1 and host B 198.18.0.2.
var defaultPrefix = netip.MustParsePrefix("198.18.0.0/24")

// Default subnets of a routed bed: host A and the router's A side share the first (A is
// 198.18.1.1, the router 198.18.1.2), the router's B side and host B the second (the
// router is 198.18.2.1, B 198.18.2.2).
var (
	defaultRoutedPrefix  = netip.MustParsePrefix("198.18.1.0/24")
	defaultRoutedPrefixB = netip.MustParsePrefix("198.18.2.0/24")
)

// ErrInvalidOptions is wrapped by every error [New] returns for options it rejects.
var ErrInvalidOptions = errors.New("invalid test bed options")

// Options configures a [Bed]. The zero value means a 1500-byte MTU, one queue per veth end
// and the subnet 198.18.0.0/24, without a router.
type Options struct {
	// MTU of every veth end in bytes (IP packet size, without the Ethernet header): both
	// ends of the plain bed, all four of a routed one. 0 means DefaultMTU; 9000 (jumbo) is
	// supported. Must lie in [MinMTU, MaxMTU].
	MTU int

	// Prefix is the IPv4 subnet of the link. Host A gets its first host address, host B the
	// second. The zero Prefix means 198.18.0.0/24. It must lie inside 198.18.0.0/15 (the
	// benchmarking range, RFC 2544) and leave room for two hosts (a /30 or larger); host
	// bits set in the address are ignored (198.18.3.7/24 means 198.18.3.0/24).
	//
	// In a routed bed Prefix is the subnet of the link between A and the router: A gets
	// its first host address, the router the second. The zero Prefix then means
	// 198.18.1.0/24.
	Prefix netip.Prefix

	// Routed puts a third namespace, a router, between A and B: A and the router share one
	// veth pair and subnet (Prefix), the router and B another (PrefixB), the router
	// forwards IPv4 between them, and A and B each have one route to the other's subnet
	// through it (docs/TESTBED.md, "The routed bed"). Bed.R describes the router.
	Routed bool

	// PrefixB is the subnet of the link between the router and B in a routed bed: the
	// router gets its first host address, B the second. The zero PrefixB means
	// 198.18.2.0/24. The same rules as for Prefix apply, and the two must not overlap. It
	// must be zero when Routed is false.
	PrefixB netip.Prefix

	// Path makes the router of a routed bed a delay line (package delayline): instead of
	// its kernel, which stops forwarding, a forwarder of this process in the router's
	// namespace carries IPv4 between A and B with the one-way delay, rate limit and
	// drop-tail queue of *Path, in both directions, and every veth end's GSO, TSO, GRO and
	// transmit checksum offload are turned off so that the links carry MTU-sized frames,
	// as a real path does (docs/TESTBED.md, "The delay line"). Bed.PathStats has its
	// counters; Bed.Router.Forwarded stays 0. It must be nil when Routed is false.
	Path *PathConfig

	// Name is an optional tag put into the namespace names so that `ip netns list` shows
	// which test or program made them. Only lower-case letters and digits are kept, at most
	// 16 of them.
	Name string

	// Queues is the number of RX and TX queues of each veth end (AF_XDP sockets bind to one
	// queue each). 0 means DefaultQueues; at most MaxQueues. In a routed bed the router's
	// ends get the same number as the ends they are paired with, so that the router's
	// transmit queue choice (a flow hash) spreads flows over B's receive queues as A's
	// does in the plain bed (a veth end delivers what its TX queue i sends to its peer's
	// RX queue i).
	Queues int

	// StaticNeighbors installs permanent ARP entries for each neighbour on every link (in
	// the plain bed A and B for each other; in a routed bed A and the router for each
	// other, and the router and B), so neighbour lookups succeed before any traffic has
	// flowed. Off by default, so that code resolving next hops is tested against the
	// kernel's normal behaviour.
	StaticNeighbors bool

	// failAt makes New fail on purpose after the named setup stage ("namespaces",
	// "veth", "links", or "routes" for a routed bed, "path" for one with a delay line),
	// so tests can check that a failed New leaves nothing behind.
	failAt string
}

// withDefaults validates o and returns it with zero fields replaced by their defaults and
// Prefix masked to its network address.
func (o Options) withDefaults() (Options, error) {
	if o.MTU == 0 {
		o.MTU = DefaultMTU
	}
	if err := checkMTU(o.MTU); err != nil {
		return o, err
	}
	if o.Queues == 0 {
		o.Queues = DefaultQueues
	}
	if o.Queues < 1 || o.Queues > MaxQueues {
		return o, fmt.Errorf("%w: queues %d outside [1, %d]", ErrInvalidOptions, o.Queues, MaxQueues)
	}
	if o.Prefix == (netip.Prefix{}) {
		o.Prefix = defaultPrefix
		if o.Routed {
			o.Prefix = defaultRoutedPrefix
		}
	}
	p, err := checkPrefix(o.Prefix)
	if err != nil {
		return o, err
	}
	o.Prefix = p
	if o.Routed {
		if o.PrefixB == (netip.Prefix{}) {
			o.PrefixB = defaultRoutedPrefixB
		}
		pb, err := checkPrefix(o.PrefixB)
		if err != nil {
			return o, fmt.Errorf("prefix B: %w", err)
		}
		if pb.Overlaps(o.Prefix) {
			return o, fmt.Errorf("%w: prefixes %v and %v overlap (the router needs two subnets)", ErrInvalidOptions, o.Prefix, pb)
		}
		o.PrefixB = pb
		if o.Path != nil {
			if err := o.Path.Validate(); err != nil {
				return o, fmt.Errorf("%w: path: %w", ErrInvalidOptions, err)
			}
		}
	} else if o.Path != nil {
		return o, fmt.Errorf("%w: a path (delay line) given for a bed without a router", ErrInvalidOptions)
	} else if o.PrefixB != (netip.Prefix{}) {
		return o, fmt.Errorf("%w: prefix B %v given for a bed without a router", ErrInvalidOptions, o.PrefixB)
	}
	o.Name = sanitizeTag(o.Name)
	return o, nil
}

// checkMTU reports whether mtu is within the accepted bounds.
func checkMTU(mtu int) error {
	if mtu < MinMTU || mtu > MaxMTU {
		return fmt.Errorf("%w: mtu %d outside [%d, %d]", ErrInvalidOptions, mtu, MinMTU, MaxMTU)
	}
	return nil
}

// checkPrefix validates p and returns it masked.
func checkPrefix(p netip.Prefix) (netip.Prefix, error) {
	if !p.IsValid() {
		return p, fmt.Errorf("%w: prefix %v is not a valid prefix", ErrInvalidOptions, p)
	}
	if !p.Addr().Is4() {
		return p, fmt.Errorf("%w: prefix %v is not IPv4 (the bed carries IPv4 only)", ErrInvalidOptions, p)
	}
	p = p.Masked()
	if p.Bits() < allowedRange.Bits() || !allowedRange.Contains(p.Addr()) {
		return p, fmt.Errorf("%w: prefix %v is not inside %v", ErrInvalidOptions, p, allowedRange)
	}
	if p.Bits() > 30 {
		return p, fmt.Errorf("%w: prefix %v has no room for two hosts (need /30 or larger)", ErrInvalidOptions, p)
	}
	return p, nil
}

// hostAddrs returns the first and second host addresses of the masked prefix p
// (network address + 1 and + 2).
func hostAddrs(p netip.Prefix) (a, b netip.Addr) {
	a = p.Addr().Next()
	return a, a.Next()
}

// sanitizeTag keeps the lower-cased letters and digits of s, at most maxTagLen of them.
func sanitizeTag(s string) string {
	out := make([]byte, 0, maxTagLen)
	for i := 0; i < len(s) && len(out) < maxTagLen; i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			out = append(out, c)
		case c >= 'A' && c <= 'Z':
			out = append(out, c+('a'-'A'))
		}
	}
	return string(out)
}
