package wire

// This file is the contract of the wire format: every field of every header, as Go values.
// encode.go writes them, parse.go reads them, docs/PROTOCOL.md draws them byte by byte.
//
// A datagram (the UDP payload) is:
//
//	Header (24 bytes) | extension (per opcode) | payload | CRC32C (4 bytes)
//
// All multi-byte fields are big-endian. The CRC32C (Castagnoli) covers everything before it.
// Each direction of a connection is one reliable stream of PSNs: the data packets a side
// sends (its own Send/Write/ReadRequest packets and the ReadResponse packets it returns) are
// numbered in its stream and acknowledged by the peer; Ack packets are not numbered.

// Version is the protocol version this package speaks, the first byte of every header.
const Version = 1

// Sizes in bytes.
const (
	HeaderLen   = 24 // the fixed header
	SendExtLen  = 16 // Send*: MSN, offset, total, invalidate token
	RDMAExtLen  = 20 // Write, ReadRequest: remote address, token, length, offset
	ReadRespLen = 8  // ReadResponse: request PSN, offset
	AckExtLen   = 44 // Ack: see AckExt
	TrailerLen  = 4  // CRC32C
	// MaxPrivateData is the most private data a connection-management message carries
	// (the same limit as InfiniBand's REQ).
	MaxPrivateData = 196
	// CMExtLen is the fixed part of a connection-management extension, before the private
	// data.
	CMExtLen = 42
)

// The range of CMExt.MaxPayload, the largest datagram (UDP payload) an endpoint accepts. A
// ConnRequest or ConnReply announcing a value outside it is refused (ValidConnFields).
const (
	// MinMaxPayload (266) is the smallest: a connection-management message with the most
	// private data must fit, so an engine refuses a link smaller than this, and every data
	// packet then has room for its header, the longest data extension, a piggybacked ack and
	// a payload of at least one byte.
	MinMaxPayload = HeaderLen + CMExtLen + MaxPrivateData + TrailerLen
	// MaxMaxPayload (65527) is the largest: the largest UDP payload of an IPv6 datagram
	// without jumbograms (65535 less the 8-byte UDP header). Over IPv4 the largest is 65507;
	// an endpoint never announces more than its own link carries, and each side sends at
	// most the smaller of the two values, so the IPv6 bound serves both families.
	MaxMaxPayload = 65535 - 8
)

// Opcode says what a packet is.
type Opcode uint8

// Opcodes. Send packets of a multi-packet message are First, Middle..., Last; a message of
// one packet is Only. The *Inv forms also carry a token for the receiver to invalidate.
const (
	OpSendFirst     Opcode = 0x01
	OpSendMiddle    Opcode = 0x02
	OpSendLast      Opcode = 0x03
	OpSendOnly      Opcode = 0x04
	OpSendLastInv   Opcode = 0x05
	OpSendOnlyInv   Opcode = 0x06
	OpWrite         Opcode = 0x10 // every packet of a Write; FlagLast marks the last
	OpReadRequest   Opcode = 0x20
	OpReadResponse  Opcode = 0x21 // FlagLast marks the last packet of a response
	OpAck           Opcode = 0x30 // positive and negative acknowledgements (Syndrome)
	OpConnRequest   Opcode = 0x40
	OpConnReply     Opcode = 0x41
	OpReadyToUse    Opcode = 0x42
	OpConnReject    Opcode = 0x43
	OpDisconnectReq Opcode = 0x44
	OpDisconnectRep Opcode = 0x45
)

// Flags modify a packet (the header's 16-bit flags field). Unknown bits must be zero.
type Flags uint16

const (
	// FlagAckReq asks the receiver to acknowledge at once instead of coalescing. On an Ack
	// it is a probe: the receiver answers with an acknowledgement of the sender's stream
	// (or a NAK if its QP failed), which tells the sender the peer is still there.
	FlagAckReq Flags = 1 << iota
	// FlagSolicited marks the last packet of a Send posted with SEND_AND_SOLICIT_EVENT.
	FlagSolicited
	// FlagLast marks the last packet of a Write or of a ReadResponse.
	FlagLast
	// FlagRetransmit marks a retransmitted packet (its timestamp is not used for RTT).
	FlagRetransmit
	// FlagAck marks a data packet that also acknowledges the receiver's own stream (a
	// piggybacked ack): an AckExt, positive only (Syndrome SynAck), follows the opcode's
	// extension and precedes the payload.
	FlagAck
)

// Header is the fixed header of every packet.
type Header struct {
	Opcode  Opcode
	Flags   Flags
	DestQPN uint32 // the receiving QP; 0 for a connection request to a listener
	PSN     PSN    // data packets: position in the sender's stream; Ack: 0
	Cookie  uint64 // the connection's random cookie; 0 in a connection request
	TS      uint32 // sender's clock in microseconds when the packet left (wraps)
}

// SendExt follows the header of every Send packet. Every packet says where its payload
// goes, so the receiver places it without reassembly.
type SendExt struct {
	MSN      uint32 // message sequence number: the receive this message consumes, in order
	Offset   uint32 // byte offset of this packet's payload in the message
	Total    uint32 // total length of the message in bytes
	InvToken uint32 // OpSend*Inv: the token the receiver invalidates; else 0
}

// RDMAExt follows the header of Write and ReadRequest packets. Every packet of a Write
// names the whole Write (start address and length), so the receiver checks the full range
// on each packet and a Write that is refused writes nothing, whatever order its packets
// arrive in.
type RDMAExt struct {
	Addr   uint64 // remote virtual address of the Write's (or the Read's) first byte
	Token  uint32 // remote token naming the region or window
	Length uint32 // Write: total length of the Write; ReadRequest: bytes to read
	Offset uint32 // Write: where this packet's payload goes, from Addr; ReadRequest: 0
}

// ReadRespExt follows the header of ReadResponse packets.
type ReadRespExt struct {
	ReqPSN PSN    // PSN of the ReadRequest this answers
	Offset uint32 // byte offset of this packet's payload in the response
}

// Syndrome says what an Ack reports.
type Syndrome uint8

const (
	SynAck           Syndrome = 0 // positive acknowledgement
	SynNakSeq        Syndrome = 1 // sequence error: PSNs from AckPSN are missing (SACK says which arrived)
	SynNakRNR        Syndrome = 2 // receiver not ready: no receive posted for the Send at NakPSN; retry after Value microseconds
	SynNakAccess     Syndrome = 3 // remote access error for the request at NakPSN (token, rights, bounds)
	SynNakInvalid    Syndrome = 4 // invalid request at NakPSN (malformed, too long for the receive, over the read limit)
	SynNakRemoteOp   Syndrome = 5 // remote operational error at NakPSN (the receiving QP failed)
	SynNakInvalToken Syndrome = 6 // SendAndInvalidate named a token the receiver cannot invalidate
)

// AckExt follows the header of an Ack. It acknowledges the peer's stream (cumulatively and
// selectively), returns receive credits, carries timing for RTT and, for a NAK, what failed.
type AckExt struct {
	AckPSN   PSN      // every PSN before AckPSN arrived
	SACK     uint64   // bit i set: PSN AckPSN+1+i arrived (AckPSN itself is missing when set bits exist)
	Credits  uint32   // MSN limit: Sends with MSN below it have a receive posted
	Syndrome Syndrome // SynAck, or what the NAK reports
	Value    uint16   // SynNakRNR: retry delay in microseconds/16 (0: the sender's default)
	NakPSN   PSN      // the PSN a NAK refers to
	EchoTS   uint32   // TS of the data packet that triggered this Ack
	Delay    uint32   // microseconds the receiver held that packet before acking (coalescing)
	// HighPSN and HighSACK describe the most recent arrivals, however far past AckPSN:
	// HighPSN is one past the highest PSN that arrived (AckPSN when nothing after AckPSN
	// did), and bit i of HighSACK says PSN HighPSN-1-i arrived. Parse takes any value; the
	// sender ignores a HighPSN outside (AckPSN, its NextPSN] and the bits naming PSNs
	// outside that range.
	HighPSN  PSN
	HighSACK uint64
}

// CMExt follows the header of the connection-management opcodes. Which fields matter
// depends on the opcode (docs/PROTOCOL.md has the table).
type CMExt struct {
	ServiceID  uint64 // the listener's service (port) the connection is for
	ConnID     uint64 // the initiator's id for this attempt (matches replies to requests); never 0 where used
	SrcQPN     uint32 // the sender's QPN
	InitialPSN PSN    // the first PSN of the sender's stream
	Cookie     uint64 // ConnReply: the cookie every later packet carries
	MaxPayload uint16 // the largest datagram payload the sender accepts (path MTU - IP/UDP), in [MinMaxPayload, MaxMaxPayload]
	IRD, ORD   uint8  // inbound / outbound read limits
	DataPort   uint16 // the UDP source port the sender's QP sends data from (per-QP flow entropy): the receiver accepts that QP's packets only from it
	Reason     uint16 // ConnReject: why
	PrivateLen uint16 // bytes of private data that follow, up to MaxPrivateData
}
