// Package xdp is xdpndk's datapath: the Link that the transport engine runs on, and the
// Device that owns an interface's UDP port, composing AF_XDP sockets (package xdp/xsk), the
// Ethernet/IPv4/IPv6/UDP framing (package xdp/frame), the steering program (package bpf),
// next-hop resolution through the kernel's tables, and queue steering.
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
// Layers, bottom up:
//   - package xdp/xsk: Socket, the raw socket with its four rings, UMEM registration and the
//     system calls (batch calls, no framing, nothing of the transport or of netlink);
//   - package xdp/frame: Encap, ParseUDP, Datagram and Checksum, pure computation on bytes;
//   - package xdp/nexthop: next-hop resolution, never blocking the engine: the Table (the
//     bounded next-hop table and its netlink resolution worker) and each link's Hops (the
//     peers' table entries and the hold area);
//   - package xdp: Link adds framing, frame accounting, held datagrams and the link.Link
//     contract to one Socket, through parts it owns (rxState: the RX ring and fill
//     recycling; zcState: datagram layout, framing and zero-copy records; hops: its
//     nexthop.Hops); Device owns the UMEM, the steering program, the nexthop.Table, queue
//     steering (ethtool) and one Link per interface queue; DeviceLink serves them all as
//     one link.
//
// The lower packages' names have one spelling, in their own package: xsk.Socket,
// xsk.BindMode (the type of Config.Bind), frame.Encap, frame.ParseUDP and so on. Each Link
// is driven by one engine goroutine; Device and the Wake/Stats/Close methods are safe
// anywhere.
//
// Modes are chosen best first and reported, never silently: native XDP then generic,
// zero-copy then copy, multi-buffer when the MTU needs it, need_wakeup by default. On veth,
// zero-copy is refused (EOPNOTSUPP) and the copy-mode fallback shows in Device.Mode and in the
// log. docs/DATAPATH.md records the decisions behind this package.
//
// An interface someone else uses makes Open fail with a *BusyError (errors.Is ErrBusy): a
// queue bound by another AF_XDP socket (also EBUSY, whatever bind mode was being tried), or
// another XDP program attached (also the kernel's EBUSY or EEXIST). The message names the
// interface and queue, or the program (id, name, mode), and the processes holding the
// socket or the program's bpf_link (pid and command name), found at once in the kernel's
// AF_XDP socket diagnostics, the interface's XDP attributes and /proc; the search is best
// effort, runs in Open only and stops after 200 ms, and when it finds nobody the message
// says how to look (`ss --xdp -p`, `bpftool net`).
package xdp
