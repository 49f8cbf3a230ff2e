// Package wire encodes and parses the packets of the xdpndk transport protocol: the UDP
// payloads that carry NDK verbs between two hosts. It has no I/O and no state; the protocol
// engine in package transport decides what to send and what a packet means, wire only turns
// Packet values into bytes and back, and checks that received bytes are well formed.
//
// The datagram layout (all multi-byte fields big-endian; docs/PROTOCOL.md draws every field):
//
//	+----------------+----------------------+--------------------------+-------------+
//	| Header (24 B)  | extension (per       | payload (Send, Write,     | CRC32C (4 B)|
//	| version opcode | opcode: SendExt,     | ReadResponse) or private  | over all    |
//	| flags QPN PSN  | RDMAExt, ReadRespExt,| data (CM opcodes, in the  | bytes       |
//	| cookie TS      | AckExt or CMExt)     | first segment)            | before it   |
//	+----------------+----------------------+--------------------------+-------------+
//
// Sending (the caller owns the frame; nothing is copied but the header):
//
//	n, err := wire.Encode(frame, &pkt)          // header + extension (+ private data)
//	crc := wire.UpdateCRC(0, frame[:n])
//	crc = wire.UpdateCRC(crc, payload)          // payload in place, possibly in UMEM
//	wire.PutTrailer(trailerBytes, crc)          // after the payload
//
// Receiving (a datagram in up to MaxSegments pieces, as AF_XDP multi-buffer delivers it):
//
//	segs ──► wire.Parse(segs, &pkt) ──► pkt.Header, pkt.<extension>, pkt.Payload[:pkt.NPayload]
//	                    │                     (views into segs: place them, then recycle)
//	                    └─► ErrShort / ErrVersion / ErrCRC / ... (count and drop)
//
// Parse checks lengths before every read, the version, the opcode, the flags, the CRC32C
// trailer and each opcode's invariants, so the engine receives only packets whose fields are
// self-consistent; whether they match a live queue pair, its PSN window and its memory
// (cookie, tokens, bounds) is the engine's check, and so is whether a connection request or
// reply offers values a connection can be set up with (ValidConnFields, in [MinMaxPayload,
// MaxMaxPayload] for its MaxPayload): the engine answers those rather than dropping them.
// Encode, Parse and UpdateCRC do not allocate.
package wire
