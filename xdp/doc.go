// Package xdp is xdpndk's datapath: AF_XDP sockets over golang.org/x/sys/unix, the
// Ethernet/IPv4/IPv6/UDP framing, next-hop resolution through the kernel's tables, and the
// Link that the transport engine runs on.
//
// Flow of one datagram (following the kernel's Documentation/networking/af_xdp.rst):
//
//	engine ──Send──▶ Link: headers (Encap.Put) + payload copied into UMEM frames, or with
//	                   │  FlagZeroCopy: header frame → descriptors pointing into the UMEM
//	                   │  heap → trailer frame (zero-copy transmit, zerocopy_linux.go)
//	                   │  TX ring (descriptors; multi-buffer chains with XDP_PKT_CONTD)
//	                   ▼  kick (sendto) only when the kernel sets need_wakeup
//	                 NIC / veth ════ wire ════ NIC / veth of the peer
//	                   │  steering program (package bpf): our UDP port → XSKMAP[queue]
//	                   ▼  RX ring (kernel wrote the frame into a buffer from the fill ring)
//	engine ◀─Receive─ Link: ParseUDP, views of the payload in place (no copy)
//	engine ──Release─▶ Link: frames straight back onto the fill ring
//	                   completion ring: transmitted frames back to the frame pool;
//	                   FlagZeroCopy cookies to TxDone once all their descriptors completed
//
// Layers: Socket is the raw socket with its four rings (batch calls, no framing); Link adds
// framing, frame accounting and the transport.Link contract; Device owns the UMEM, the
// steering program and one Link per interface queue. Each Link is driven by one engine
// goroutine; Device and the Wake/Stats/Close methods are safe anywhere.
//
// Modes are chosen best first and reported, never silently: native XDP then generic,
// zero-copy then copy, multi-buffer when the MTU needs it, need_wakeup by default. On veth,
// zero-copy is refused (EOPNOTSUPP) and the copy-mode fallback shows in Device.Mode and in the
// log. docs/DATAPATH.md records the decisions behind this package.
package xdp
