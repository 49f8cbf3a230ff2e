package proto

import (
	"encoding/binary"
	"fmt"
)

// TourOp is the command or answer of a tour message.
type TourOp uint8

// The tour messages. The client sends the commands (TourBind, TourSolicit, TourInvalidate);
// the server answers each with one message.
const (
	// TourBind asks the server to create a memory window and bind it, with remote read and
	// write, over Len bytes of its buffer (NdkCreateMw, NdkBind).
	TourBind TourOp = 1
	// TourBound answers TourBind: the window's address (Addr), length (Len) and remote
	// token (Token).
	TourBound TourOp = 2
	// TourSolicit asks the server to answer with a Send that carries
	// NDK_OP_FLAG_SEND_AND_SOLICIT_EVENT.
	TourSolicit TourOp = 3
	// TourSolicited is that answer.
	TourSolicited TourOp = 4
	// TourInvalidate travels in the client's SendAndInvalidate of the window's token.
	TourInvalidate TourOp = 5
	// TourInvalidated answers it: Token is the token the server's receive reported
	// invalidated (NdkOperationTypeReceiveAndInvalidate), 0 if the receive was a plain one.
	TourInvalidated TourOp = 6
	// TourError answers a command the server could not carry out; Token holds the
	// NTSTATUS.
	TourError TourOp = 7
)

// TourMsg is one tour message.
type TourMsg struct {
	Op    TourOp
	Addr  uint64
	Len   uint32
	Token uint32
}

// TourMsgLen is the encoded length of a TourMsg: the size of the receives both sides post.
const TourMsgLen = 24

// Append appends m's encoding to b. Tour messages are the same in every version and are
// encoded as version 1, which every ndkpeer reads.
func (m TourMsg) Append(b []byte) []byte {
	b = append(b, Magic[:]...)
	b = append(b, MinVersion, byte(m.Op), 0, 0)
	b = binary.LittleEndian.AppendUint64(b, m.Addr)
	b = binary.LittleEndian.AppendUint32(b, m.Len)
	return binary.LittleEndian.AppendUint32(b, m.Token)
}

// ParseTourMsg decodes a tour message.
func ParseTourMsg(b []byte) (TourMsg, error) {
	if _, err := header(b, TourMsgLen, TourMsgLen, "tour message"); err != nil {
		return TourMsg{}, err
	}
	m := TourMsg{
		Op:    TourOp(b[5]),
		Addr:  binary.LittleEndian.Uint64(b[8:]),
		Len:   binary.LittleEndian.Uint32(b[16:]),
		Token: binary.LittleEndian.Uint32(b[20:]),
	}
	if m.Op < TourBind || m.Op > TourError {
		return TourMsg{}, fmt.Errorf("%w: tour op %d", ErrMalformed, m.Op)
	}
	return m, nil
}
