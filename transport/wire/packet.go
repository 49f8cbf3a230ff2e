package wire

import "strconv"

// MaxSegments is the most segments one received datagram may arrive in (an AF_XDP
// multi-buffer packet). It equals link.MaxSegments (package transport/link); wire does not import it, so
// the two constants are kept equal by hand.
const MaxSegments = 4

// Packet is one parsed packet, or one to encode. It embeds the fixed Header; of the
// extensions only the one that Header.Opcode selects is meaningful, the others are ignored by
// Encode and left untouched by Parse.
//
// After Parse, PrivateData and Payload are views into the caller's segments (no copies): they
// stay valid exactly as long as those bytes do. A Packet is a plain value owned by its caller;
// it is not safe for concurrent use while Parse writes it.
type Packet struct {
	Header
	Send     SendExt     // OpSend*
	RDMA     RDMAExt     // OpWrite, OpReadRequest
	ReadResp ReadRespExt // OpReadResponse
	Ack      AckExt      // OpAck
	CM       CMExt       // connection-management opcodes

	// PrivateData is the connection-management private data, len == CM.PrivateLen. Encode
	// writes it after the CMExt; Parse sets it to a view of the first segment (nil for
	// other opcodes).
	PrivateData []byte

	// Payload holds views of the payload (trailer excluded) in order, one per segment it
	// spans, empty pieces omitted; Payload[:NPayload] are used and the rest are nil. Set by
	// Parse; Encode ignores it (the caller appends the payload itself).
	Payload  [MaxSegments][]byte
	NPayload int // used entries of Payload
}

// PayloadLen returns the total length of p.Payload[:p.NPayload] in bytes.
func (p *Packet) PayloadLen() int {
	n := 0
	for _, b := range p.Payload[:min(max(p.NPayload, 0), MaxSegments)] {
		n += len(b)
	}
	return n
}

// kind groups opcodes that share an extension and its checks.
type kind uint8

const (
	kindNone kind = iota // unknown opcode
	kindSend
	kindWrite
	kindReadReq
	kindReadResp
	kindAck
	kindCM
	kindBundle
)

// opInfo is what the opcode table says about one opcode.
type opInfo struct {
	kind  kind
	ext   uint8 // extension length (CM: the fixed part)
	flags Flags // the flags the opcode may carry
	name  string
}

const (
	flagsData     = FlagAckReq | FlagRetransmit | FlagAck // every data packet
	flagsSendLast = flagsData | FlagSolicited             // packets that end a Send
	flagsLast     = flagsData | FlagLast                  // Write, ReadResponse
	flagsCM       = FlagRetransmit
	flagsAck      = FlagAckReq // a probe: acknowledge now
)

// opTable is indexed by opcode; kindNone marks the unknown ones.
var opTable = [256]opInfo{
	OpSendFirst:     {kindSend, SendExtLen, flagsData, "SendFirst"},
	OpSendMiddle:    {kindSend, SendExtLen, flagsData, "SendMiddle"},
	OpSendLast:      {kindSend, SendExtLen, flagsSendLast, "SendLast"},
	OpSendOnly:      {kindSend, SendExtLen, flagsSendLast, "SendOnly"},
	OpSendLastInv:   {kindSend, SendExtLen, flagsSendLast, "SendLastInv"},
	OpSendOnlyInv:   {kindSend, SendExtLen, flagsSendLast, "SendOnlyInv"},
	OpWrite:         {kindWrite, RDMAExtLen, flagsLast, "Write"},
	OpReadRequest:   {kindReadReq, RDMAExtLen, flagsData, "ReadRequest"},
	OpReadResponse:  {kindReadResp, ReadRespLen, flagsLast, "ReadResponse"},
	OpAck:           {kindAck, AckExtLen, flagsAck, "Ack"},
	OpConnRequest:   {kindCM, CMExtLen, flagsCM, "ConnRequest"},
	OpConnReply:     {kindCM, CMExtLen, flagsCM, "ConnReply"},
	OpReadyToUse:    {kindCM, CMExtLen, flagsCM, "ReadyToUse"},
	OpConnReject:    {kindCM, CMExtLen, flagsCM, "ConnReject"},
	OpDisconnectReq: {kindCM, CMExtLen, flagsCM, "DisconnectReq"},
	OpDisconnectRep: {kindCM, CMExtLen, flagsCM, "DisconnectRep"},
	OpBundle:        {kindBundle, 0, 0, "Bundle"},
	OpMultiBundle:   {kindBundle, 0, 0, "MultiBundle"},
}

// ExtLen returns the length in bytes of the extension that follows the header of a packet
// with opcode op, and false for an unknown opcode. For the connection-management opcodes it
// is CMExtLen, the fixed part; CM.PrivateLen bytes of private data follow it.
func ExtLen(op Opcode) (int, bool) {
	i := &opTable[op]
	return int(i.ext), i.kind != kindNone
}

// HasPayload reports whether packets with opcode op carry a payload: the Send opcodes,
// OpWrite, OpReadResponse, OpBundle and OpMultiBundle (whose payload is their entries). The others carry
// none (connection-management private data is not payload).
func HasPayload(op Opcode) bool {
	switch opTable[op].kind {
	case kindSend, kindWrite, kindReadResp, kindBundle:
		return true
	}
	return false
}

// IsCM reports whether op is a connection-management opcode (ConnRequest to
// DisconnectRep).
func IsCM(op Opcode) bool { return opTable[op].kind == kindCM }

// AllowedFlags returns the flags a packet with opcode op may carry (0 for unknown opcodes and
// for OpAck). Every data packet may carry FlagAckReq and FlagRetransmit; the Send opcodes that
// end a message (Last, Only and their Inv forms) also FlagSolicited; OpWrite and
// OpReadResponse also FlagLast; connection-management packets only FlagRetransmit.
func AllowedFlags(op Opcode) Flags { return opTable[op].flags }

// String returns the opcode's name without the Op prefix, or "Opcode(0x..)" for an unknown
// one.
func (op Opcode) String() string {
	if n := opTable[op].name; n != "" {
		return n
	}
	return "Opcode(0x" + strconv.FormatUint(uint64(op), 16) + ")"
}

var syndromeNames = [...]string{
	SynAck:           "Ack",
	SynNakSeq:        "NakSeq",
	SynNakRNR:        "NakRNR",
	SynNakAccess:     "NakAccess",
	SynNakInvalid:    "NakInvalid",
	SynNakRemoteOp:   "NakRemoteOp",
	SynNakInvalToken: "NakInvalToken",
}

// String returns the syndrome's name without the Syn prefix, or "Syndrome(n)" for an unknown
// one.
func (s Syndrome) String() string {
	if int(s) < len(syndromeNames) {
		return syndromeNames[s]
	}
	return "Syndrome(" + strconv.Itoa(int(s)) + ")"
}
