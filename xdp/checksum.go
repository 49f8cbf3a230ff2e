package xdp

import "fmt"

// UDPChecksum says what a Link puts in the UDP checksum of the datagrams it sends
// (Config.UDPChecksum). The transport's CRC32C trailer covers every datagram end to end
// (docs/PROTOCOL.md §8), so over IPv4, where RFC 768 lets a sender leave the checksum out
// (field 0), computing it is a pass over every payload byte that protects nothing the CRC
// does not; IPv6 requires it (RFC 8200 section 8.1), so it is always computed there.
// docs/DATAPATH.md has the measurements behind the default.
type UDPChecksum int

const (
	// ChecksumAuto (the default) picks the cheapest correct checksum: none over IPv4 (as
	// ChecksumOmitIPv4), computed in software over IPv6. (A device that can compute it,
	// through AF_XDP TX metadata in zero-copy mode, would be used here first; see
	// docs/DATAPATH.md: not built, since no device here has it.)
	ChecksumAuto UDPChecksum = iota
	// ChecksumOmitIPv4 sends IPv4 datagrams with a zero UDP checksum ("no checksum", RFC
	// 768), as RoCEv2 does over its ICRC; IPv6 datagrams get a computed one.
	ChecksumOmitIPv4
	// ChecksumSoftware computes the UDP checksum of every datagram in software, over IPv4
	// too: for paths with something that insists on one (a middlebox, a capture filter
	// that drops "checksum not present").
	ChecksumSoftware
)

// String names the mode ("auto", "omit-ipv4", "software").
func (c UDPChecksum) String() string {
	switch c {
	case ChecksumAuto:
		return "auto"
	case ChecksumOmitIPv4:
		return "omit-ipv4"
	case ChecksumSoftware:
		return "software"
	}
	return fmt.Sprintf("UDPChecksum(%d)", int(c))
}

// omitIPv4 reports whether the mode sends IPv4 datagrams without a UDP checksum.
func (c UDPChecksum) omitIPv4() bool { return c != ChecksumSoftware }
