// Package pcaplink records what a link.Link sends and receives into a pcapng file
// (internal/pcapng), for Wireshark and tshark with contrib/wireshark/xdpndk.lua. The XDP
// program redirects our datagrams into AF_XDP sockets before the kernel's packet taps, and
// the sockets transmit past them, so tcpdump on the host sees none of them; this is where
// the process itself sees every one (docs/CAPTURE.md).
//
//	engine ── Send ────► pcaplink ── Send ───► inner Link (xdp.DeviceLink, simlink, ...)
//	engine ◄─ Receive ── pcaplink ◄─ Receive ─ inner Link
//	                        │ after the inner call returns: a copy of each datagram the
//	                        │ inner link accepted or returned, with its addresses and a
//	                        │ timestamp, into the link's ring (full: dropped and counted)
//	                        ▼
//	              Capture's writer goroutine ── pcapng blocks ──► file
//
// A Capture is one file; Wrap wraps one link, the link of one engine, and describes it in
// an Interface Description Block of its own, so an adapter with several engines (each
// serving its share of the interface's queues) records every queue into the one file.
//
// # What a record holds
//
// A link.Link carries UDP payloads (our header, the data, the CRC32C trailer) with the
// peer's address and our port, never the Ethernet, IP and UDP headers around them, which
// package xdp builds and strips. So each record is the datagram as IP would carry it,
// its IPv4 or IPv6 and UDP headers made up from the link's address, the peer's and the two
// ports, in a file of link type LINKTYPE_RAW (packets that start with their IP header):
// Wireshark decodes the UDP ports and the dissector applies. No Ethernet header is made
// up: the link does not know the MAC addresses (the next hop is xdp's business) and
// invented ones would mislead. IPv4 headers carry TTL 64, DF, ID 0 and a correct header
// checksum, and the UDP checksum 0 ("none"), as the link sends by default; IPv6 ones hop
// limit 64 and the UDP checksum computed (it is mandatory there), also for a record cut
// by the snap length. A datagram is recorded when the inner link accepted it (Send) or
// returned it (Receive): one held while its peer is resolved, or discarded later by the
// link or the kernel, is in the file; one the link dropped on receive (malformed, not
// ours, no buffer) is not.
//
// # Cost on the engine goroutine
//
// Nothing blocks and nothing allocates per datagram: the wrapper reads the clock once per
// batch and copies each datagram (up to the snap length) into a byte ring of its own,
// single producer (the engine), single consumer (the writer goroutine), that Wrap
// allocates. When the ring is full the datagram is dropped and counted (Stats.Dropped;
// the file's Interface Statistics Blocks say it too, isb_ifdrop). The writer drains the
// rings on a timer (Config.Interval, backing off to 8 times it while there is nothing)
// and when a ring passes half full.
package pcaplink
