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

// ErrInvalidOptions is wrapped by every error [New] returns for options it rejects.
var ErrInvalidOptions = errors.New("invalid test bed options")

// Options configures a [Bed]. The zero value means a 1500-byte MTU, one queue per veth end
// and the subnet 198.18.0.0/24.
type Options struct {
	// MTU of both veth ends in bytes (IP packet size, without the Ethernet header).
	// 0 means DefaultMTU; 9000 (jumbo) is supported. Must lie in [MinMTU, MaxMTU].
	MTU int

	// Prefix is the IPv4 subnet of the link. Host A gets its first host address, host B the
	// second. The zero Prefix means 198.18.0.0/24. It must lie inside 198.18.0.0/15 (the
	// benchmarking range, RFC 2544) and leave room for two hosts (a /30 or larger); host
	// bits set in the address are ignored (198.18.3.7/24 means 198.18.3.0/24).
	Prefix netip.Prefix

	// Name is an optional tag put into the namespace names so that `ip netns list` shows
	// which test or program made them. Only lower-case letters and digits are kept, at most
	// 16 of them.
	Name string

	// Queues is the number of RX and TX queues of each veth end (AF_XDP sockets bind to one
	// queue each). 0 means DefaultQueues; at most MaxQueues.
	Queues int

	// StaticNeighbors installs permanent ARP entries on both hosts for each other's
	// address, so neighbour lookups succeed before any traffic has flowed. Off by default,
	// so that code resolving next hops is tested against the kernel's normal behaviour.
	StaticNeighbors bool

	// failAt makes New fail on purpose after the named setup stage ("namespaces",
	// "veth" or "links"), so tests can check that a failed New leaves nothing behind.
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
	}
	p, err := checkPrefix(o.Prefix)
	if err != nil {
		return o, err
	}
	o.Prefix = p
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
