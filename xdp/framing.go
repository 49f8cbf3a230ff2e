package xdp

import "github.com/xdpndk/xdpndk/xdp/frame"

// The Ethernet/IP/UDP framing and the Internet checksum live in package xdp/frame; these
// names keep working here, the errors as the very same values.

// MaxHeaderLen is the largest HeaderLen an Encap can have: a VLAN-tagged Ethernet header,
// an IPv6 header and a UDP header (66 bytes).
const MaxHeaderLen = frame.MaxHeaderLen

// Encap is the Ethernet/IP/UDP header template for datagrams from one local endpoint to one
// peer: frame.Encap.
type Encap = frame.Encap

// Datagram describes a parsed Ethernet/IP/UDP frame: frame.Datagram.
type Datagram = frame.Datagram

// Checksum accumulates the Internet checksum (RFC 1071) over data that arrives in pieces:
// frame.Checksum.
type Checksum = frame.Checksum

// ParseUDP parses the Ethernet, IP and UDP headers at the start of frame into d:
// frame.ParseUDP, which documents it. It does not allocate.
func ParseUDP(b []byte, totalLen int, d *Datagram) error { return frame.ParseUDP(b, totalLen, d) }

// VerifyUDPChecksum checks the UDP checksum of a datagram that ParseUDP accepted:
// frame.VerifyUDPChecksum, which documents it.
func VerifyUDPChecksum(d *Datagram, first []byte, rest ...[]byte) error {
	return frame.VerifyUDPChecksum(d, first, rest...)
}

// Errors returned by ParseUDP, VerifyUDPChecksum and Encap: the values of package frame
// (frame.ErrTruncated is ErrTruncated), unwrapped; compare with errors.Is.
var (
	// ErrTruncated means the frame ends before a header does.
	ErrTruncated = frame.ErrTruncated
	// ErrNotIP means the EtherType, after at most two VLAN tags, is neither IPv4 nor IPv6.
	ErrNotIP = frame.ErrNotIP
	// ErrBadHeader means the IP header is malformed.
	ErrBadHeader = frame.ErrBadHeader
	// ErrBadChecksum means the IPv4 header checksum (ParseUDP) or the UDP checksum
	// (VerifyUDPChecksum) is wrong.
	ErrBadChecksum = frame.ErrBadChecksum
	// ErrFragment means the datagram is an IP fragment.
	ErrFragment = frame.ErrFragment
	// ErrNotUDP means the IP datagram carries another protocol than UDP.
	ErrNotUDP = frame.ErrNotUDP
	// ErrBadLength means length fields disagree.
	ErrBadLength = frame.ErrBadLength

	// ErrInvalidEncap is wrapped by the errors of Encap.Validate.
	ErrInvalidEncap = frame.ErrInvalidEncap
	// ErrEncapNotValidated is returned by Encap.Put when Validate has not succeeded on it.
	ErrEncapNotValidated = frame.ErrEncapNotValidated
	// ErrNoHeadroom is returned by Encap.Put when the buffer is shorter than HeaderLen.
	ErrNoHeadroom = frame.ErrNoHeadroom
	// ErrPayloadTooLarge is returned by Encap.Put when the payload does not fit in one IP
	// datagram, or is negative.
	ErrPayloadTooLarge = frame.ErrPayloadTooLarge
)
