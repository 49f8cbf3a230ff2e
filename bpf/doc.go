// Package bpf loads, attaches and drives the XDP program that steers xdpndk's UDP packets
// to AF_XDP sockets and leaves all other traffic to the kernel.
//
//	NIC RX queue q ──▶ steer (XDP, steer.c) ──┬─ ours, XSKMAP[q] set ──▶ XDP_REDIRECT ──▶ AF_XDP socket of queue q
//	                                          ├─ ours, fault injection ─▶ XDP_DROP
//	                                          └─ everything else ───────▶ XDP_PASS ─────▶ kernel stack
//
// "Ours" is a well-formed UDP datagram, over IPv4 or IPv6, untagged or under one or two
// VLAN tags (802.1Q 0x8100, 802.1ad 0x88a8), whose destination port is Options.Port.
// Source and destination addresses are not looked at, nor are checksums: the receiver
// checks those.
//
// A redirected datagram carries its arrival time in front of it, as XDP metadata: 16 bytes,
// the CLOCK_MONOTONIC time the program ran (bpf_ktime_get_ns) and that time XOR a check
// constant, both native-endian (steer.c, struct arrival; read by package xdp).
//
// # Verdicts
//
// The first matching row wins; malformed rows are checked in parse order (Ethernet, VLAN,
// IP, extension headers, UDP). Every packet increments exactly one counter.
//
//	condition                                                   action        counter
//	----------------------------------------------------------  ------------  ----------------------------
//	Ethernet header (14 bytes) not in the linear data           XDP_PASS      Malformed
//	VLAN tag announced but its 4 bytes missing                  XDP_PASS      Malformed
//	a third VLAN tag                                            XDP_PASS      Passed
//	EtherType neither IPv4 nor IPv6 (ARP, LLDP, ...)            XDP_PASS      Passed
//	IPv4 header < 20 bytes, version != 4, IHL < 5, total        XDP_PASS      Malformed
//	  length < IHL*4 or larger than the frame after L2
//	IPv4 fragment (MF set or fragment offset != 0)              XDP_PASS      Passed
//	IPv4 protocol not UDP                                       XDP_PASS      Passed
//	IPv6 header < 40 bytes, version != 6, 40 + payload          XDP_PASS      Malformed
//	  length larger than the frame after L2
//	IPv6 payload length 0 (jumbogram)                           XDP_PASS      Passed
//	IPv6 hop-by-hop/routing/destination-options header          XDP_PASS      Malformed
//	  truncated or extending past the payload
//	IPv6 more than 8 such headers or more than 2048 bytes       XDP_PASS      Passed
//	IPv6 fragment header, or next header not UDP                XDP_PASS      Passed
//	UDP header not in the linear data or not within the IP      XDP_PASS      Malformed
//	  payload; UDP length < 8 or larger than the IP payload
//	UDP destination port != Options.Port                        XDP_PASS      Passed
//	ours, no socket at XSKMAP[rx_queue_index]                   XDP_PASS      NoSocket
//	ours, fault injection fires                                 XDP_DROP      FaultDropped
//	ours, bpf_redirect_map fails (socket removed meanwhile)     XDP_PASS      NoSocket
//	ours                                                        XDP_REDIRECT  Redirected, RedirectedBytes
//
// Frame lengths include every fragment of a multi-buffer frame (the program is loaded from
// section "xdp.frags", so it attaches to interfaces whose MTU exceeds a page); headers
// must be in the first buffer, which is where drivers put them.
//
// # Maps
//
//	xsks          XSKMAP, Options.QueueCount slots, key = RX queue index, value = AF_XDP
//	              socket (Program.SetSocket / ClearSocket)
//	counters      per-CPU array, one element: the counters above (Program.Counters sums CPUs)
//	fault_config  array, one element: drop threshold, seed, generation (Program.SetFaultDrop)
//	prng          per-CPU array, one element: splitmix64 state and the seed/generation it
//	              was seeded from
//	.rodata       steer_port: Options.Port in host byte order, fixed at Load (a constant, so
//	              changing the port means loading a new Program)
//
// # Fault injection
//
// SetFaultDrop(probability, seed) stores threshold = round(probability * 2^32), the seed,
// and a generation bumped on every call. For each of our packets that has a socket (and so
// would be redirected), the program reseeds its per-CPU generator from the seed and the
// CPU number if the generation or seed it last saw differs, advances it once, and drops
// the packet with XDP_DROP when the top 32 bits of the output are below the threshold.
// So: probability 0 never drops and does not advance the generator, 1 always drops; the
// same SetFaultDrop call followed by the same sequence of our packets on one CPU gives the
// same drops (other traffic does not advance the generator); CPUs draw from different
// streams. bpf_get_prandom_u32 is not used because it cannot be seeded. A packet
// processed while the config is being rewritten may see a mix of old and new values;
// the next packet on that CPU sees the new ones.
//
// # Regenerating
//
// steer.c is compiled by bpf2go (go generate ./bpf/..., or make generate), which writes
// steer_bpfel.go and steer_bpfel.o; both are committed so a plain go build needs no
// clang. The directive in gen.go is
//
//	go tool bpf2go -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -tags linux steer steer.c
//
// steer.c includes no kernel headers (only libbpf's bpf_helpers.h and bpf_endian.h), and
// bpf2go maps the source directory out of the debug info and strips DWARF, so the object
// is byte-identical whatever the checkout path or host architecture, given the same clang
// (the committed one is from Debian clang 14). Set BPF2GO_CC to choose the compiler.
//
// The kernel side follows Documentation/networking/af_xdp.rst and
// Documentation/bpf/map_xskmap.rst: bpf_redirect_map(&xsks, rx_queue_index, XDP_PASS)
// falls back to XDP_PASS by itself when the slot is empty, but the program looks the slot
// up first so that it can count NoSocket and apply fault injection only to packets that
// would really be redirected.
//
// # Platforms
//
// The package builds everywhere; Load returns ErrNotSupported except on Linux on a
// little-endian architecture. Loading needs CAP_BPF and attaching CAP_NET_ADMIN (tests:
// root); native XDP with xdp.frags needs Linux 5.18 or later.
package bpf
