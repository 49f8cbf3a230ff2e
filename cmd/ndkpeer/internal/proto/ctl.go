package proto

import (
	"encoding/binary"
	"fmt"
)

// CtlOp is the command or answer of a control message.
type CtlOp uint8

// The control messages (version 2). The client sends the commands (CtlStart, CtlSample,
// CtlStop), one at a time; the server answers each with one CtlCounters, or CtlError.
const (
	// CtlStart opens the measured window: the server notes its CPU time and, with
	// CtlReverse, starts the same test towards the client on every connection of the
	// run's session: Size bytes, Depth outstanding per QP, paced at Rate messages per
	// second over all of them (0: as fast as the depth allows). Its answer comes once the
	// server's direction has started.
	CtlStart CtlOp = 1
	// CtlSample asks for the counters so far (an interval of a -D run).
	CtlSample CtlOp = 2
	// CtlStop closes the window: the counters are taken at its arrival, then the server's
	// direction stops posting and the answer waits until its operations have completed.
	CtlStop CtlOp = 3
	// CtlCounters answers the commands: since CtlStart, ElapsedNs of wall time, UserNs and
	// SysNs of the server process's CPU time (getrusage RUSAGE_SELF), Ops operations of
	// the server's direction completed, the last at LastNs; CtlPolls if the server's loop
	// polls (spins while traffic comes) rather than sleeping on notifications.
	CtlCounters CtlOp = 4
	// CtlError answers a command the server could not carry out: Status holds the
	// NTSTATUS.
	CtlError CtlOp = 5
)

// CtlFlags qualify a control message.
type CtlFlags uint8

// The control flags.
const (
	// CtlReverse (CtlStart): run the test towards the client too (-b).
	CtlReverse CtlFlags = 1 << iota
	// CtlPolls (CtlCounters): the server's loop polls.
	CtlPolls

	ctlFlagsKnown = CtlReverse | CtlPolls
)

// CtlMsg is one control message; the fields a message does not use are zero.
type CtlMsg struct {
	Op    CtlOp
	Flags CtlFlags
	// CtlStart: the test of the server's direction.
	Kind  Kind
	Size  uint32
	Depth uint16
	Rate  uint64 // messages per second over all QPs; 0 unpaced
	// CtlCounters: since CtlStart.
	Ops       uint64 // operations of the server's direction completed
	ElapsedNs uint64 // wall time
	LastNs    uint64 // when the last of Ops completed
	UserNs    uint64 // CPU time of the server process in user mode
	SysNs     uint64 // and in the kernel
	// CtlError: the NTSTATUS.
	Status uint32
}

// CtlMsgLen is the encoded length of a CtlMsg: the size of the receives both sides post.
const CtlMsgLen = 72

// Append appends m's encoding to b (version 2).
func (m CtlMsg) Append(b []byte) []byte {
	b = append(b, Magic[:]...)
	b = append(b, 2, byte(m.Op), byte(m.Flags), byte(m.Kind))
	b = binary.LittleEndian.AppendUint32(b, m.Size)
	b = binary.LittleEndian.AppendUint16(b, m.Depth)
	b = append(b, 0, 0)
	b = binary.LittleEndian.AppendUint64(b, m.Rate)
	b = binary.LittleEndian.AppendUint64(b, m.Ops)
	b = binary.LittleEndian.AppendUint64(b, m.ElapsedNs)
	b = binary.LittleEndian.AppendUint64(b, m.LastNs)
	b = binary.LittleEndian.AppendUint64(b, m.UserNs)
	b = binary.LittleEndian.AppendUint64(b, m.SysNs)
	b = binary.LittleEndian.AppendUint32(b, m.Status)
	return append(b, 0, 0, 0, 0)
}

// ParseCtlMsg decodes a control message; it must be of version 2 or later.
func ParseCtlMsg(b []byte) (CtlMsg, error) {
	v, err := header(b, CtlMsgLen, CtlMsgLen, "control message")
	if err != nil {
		return CtlMsg{}, err
	}
	if v < 2 {
		return CtlMsg{}, fmt.Errorf("%w: control message of version %d (control needs 2)", ErrVersion, v)
	}
	m := CtlMsg{
		Op:        CtlOp(b[5]),
		Flags:     CtlFlags(b[6]),
		Kind:      Kind(b[7]),
		Size:      binary.LittleEndian.Uint32(b[8:]),
		Depth:     binary.LittleEndian.Uint16(b[12:]),
		Rate:      binary.LittleEndian.Uint64(b[16:]),
		Ops:       binary.LittleEndian.Uint64(b[24:]),
		ElapsedNs: binary.LittleEndian.Uint64(b[32:]),
		LastNs:    binary.LittleEndian.Uint64(b[40:]),
		UserNs:    binary.LittleEndian.Uint64(b[48:]),
		SysNs:     binary.LittleEndian.Uint64(b[56:]),
		Status:    binary.LittleEndian.Uint32(b[64:]),
	}
	switch {
	case m.Op < CtlStart || m.Op > CtlError:
		return CtlMsg{}, fmt.Errorf("%w: control op %d", ErrMalformed, m.Op)
	case m.Flags&^ctlFlagsKnown != 0:
		return CtlMsg{}, fmt.Errorf("%w: control flags %#x", ErrMalformed, uint8(m.Flags))
	case m.Depth > MaxDepth:
		return CtlMsg{}, fmt.Errorf("%w: depth %d over %d", ErrMalformed, m.Depth, MaxDepth)
	case m.Kind != 0 && !m.Kind.Valid():
		return CtlMsg{}, fmt.Errorf("%w: control message of kind %d", ErrMalformed, m.Kind)
	case m.Op == CtlStart && m.Flags&CtlReverse != 0 && (!m.Kind.Bandwidth() || m.Size < 1 || m.Size > MaxSize || m.Depth < 1):
		return CtlMsg{}, fmt.Errorf("%w: reverse direction of %v, %d bytes, depth %d", ErrMalformed, m.Kind, m.Size, m.Depth)
	}
	return m, nil
}
