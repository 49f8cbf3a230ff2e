// Package frame is the Ethernet II / IPv4 or IPv6 / UDP encapsulation that carries
// xdpndk's datagrams on the wire: Encap builds the headers for one peer from a template
// computed once, ParseUDP reads them back from a received frame into a Datagram, and
// Checksum is the Internet checksum (RFC 1071) both use, summed over data in pieces.
//
// It is pure computation on byte slices: no sockets, no system calls, no allocation in Put,
// ParseUDP or Checksum, and no panic on any input. Package xdp frames and unwraps its
// datagrams with it; tests and tools use it to build and check frames of their own.
//
// Its errors keep the "xdp:" prefix of the datapath they belong to.
package frame
