package wire

import "errors"

// Parse and Encode return exactly one of these sentinel errors, unwrapped, so callers compare
// with == or errors.Is and count drops per reason. Parse checks in a fixed order (documented
// on Parse), so a datagram with several faults always reports the same one.
var (
	// ErrShort: the datagram (all segments together) is shorter than the header, the
	// opcode's extension and the trailer.
	ErrShort = errors.New("wire: datagram too short")
	// ErrSegments: more than MaxSegments segments, or the first segment does not hold the
	// whole header, the opcode's extension and (connection management) the private data,
	// although the datagram as a whole is long enough. The sender did nothing wrong; the
	// receive path split the datagram where Parse cannot take it.
	ErrSegments = errors.New("wire: datagram split unsupportedly across segments")
	// ErrVersion: the first byte is not Version.
	ErrVersion = errors.New("wire: unknown protocol version")
	// ErrOpcode: the opcode is not one this package defines.
	ErrOpcode = errors.New("wire: unknown opcode")
	// ErrFlags: the flags field has a bit set that is unknown, or known but not allowed for
	// the opcode (see AllowedFlags).
	ErrFlags = errors.New("wire: flags not allowed")
	// ErrCRC: the CRC32C trailer does not match the datagram.
	ErrCRC = errors.New("wire: CRC32C mismatch")
	// ErrLength: the payload length disagrees with the headers: a payload on an opcode that
	// carries none, a Send payload outside [0, Total) or not where its opcode puts it, a Write
	// payload longer than the Write, a ReadResponse past 2^32-1 bytes, or connection
	// management private data whose length is not PrivateLen.
	ErrLength = errors.New("wire: payload length inconsistent with header")
	// ErrField: a header or extension field has a value the protocol forbids (a Send Total
	// over 2^31, a Send Offset contradicting its opcode, a missing or unexpected invalidate
	// token, an empty ReadRequest or one with an Offset, an unknown Syndrome, a non-zero
	// reserved byte, a non-zero PSN on an Ack, a ConnID of 0 on a message that names the
	// attempt by it).
	ErrField = errors.New("wire: invalid field value")
	// ErrPrivateData: connection-management private data longer than MaxPrivateData, or (on
	// Encode) len(Packet.PrivateData) differs from CM.PrivateLen.
	ErrPrivateData = errors.New("wire: invalid private data length")
	// ErrShortBuffer: Encode's buffer cannot hold the header, the extension and the private
	// data.
	ErrShortBuffer = errors.New("wire: buffer too short")
)
