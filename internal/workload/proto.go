package workload

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The two sides agree on everything through NDK itself, so the target may be another
// process: the initiator's connect private data (hello) says what it will do, the target's
// accept private data (layout) where its memory is, and fixed-size control messages on a
// dedicated connection carry window tokens, releases and receipts. Every field read from
// the peer is checked before use.

const (
	magic   = 0x584e574c // "XNWL"
	version = 1

	roleControl = 0
	roleData    = 1

	helloLen  = 40
	layoutLen = 64
	msgLen    = 72
)

// hello is the initiator's connect private data.
type hello struct {
	role        uint8
	conn        uint16 // data connection index
	session     uint64
	seed        uint64
	maxSize     uint32
	outstanding uint16
	windows     uint16
	readLen     uint32
	qps         uint16 // data connections in the session
}

func (h *hello) encode() []byte {
	b := make([]byte, helloLen)
	binary.LittleEndian.PutUint32(b[0:], magic)
	b[4] = version
	b[5] = h.role
	binary.LittleEndian.PutUint16(b[6:], h.conn)
	binary.LittleEndian.PutUint64(b[8:], h.session)
	binary.LittleEndian.PutUint64(b[16:], h.seed)
	binary.LittleEndian.PutUint32(b[24:], h.maxSize)
	binary.LittleEndian.PutUint16(b[28:], h.outstanding)
	binary.LittleEndian.PutUint16(b[30:], h.windows)
	binary.LittleEndian.PutUint32(b[32:], h.readLen)
	binary.LittleEndian.PutUint16(b[36:], h.qps)
	return b
}

var errProto = errors.New("workload: protocol violation")

// decodeHello parses and bounds a hello against what the target allows.
func decodeHello(b []byte, lim TargetConfig) (hello, error) {
	var h hello
	if len(b) < helloLen || binary.LittleEndian.Uint32(b) != magic || b[4] != version {
		return h, fmt.Errorf("%w: not a workload hello (%d bytes)", errProto, len(b))
	}
	h.role = b[5]
	h.conn = binary.LittleEndian.Uint16(b[6:])
	h.session = binary.LittleEndian.Uint64(b[8:])
	h.seed = binary.LittleEndian.Uint64(b[16:])
	h.maxSize = binary.LittleEndian.Uint32(b[24:])
	h.outstanding = binary.LittleEndian.Uint16(b[28:])
	h.windows = binary.LittleEndian.Uint16(b[30:])
	h.readLen = binary.LittleEndian.Uint32(b[32:])
	h.qps = binary.LittleEndian.Uint16(b[36:])
	switch {
	case h.role != roleControl && h.role != roleData:
		return h, fmt.Errorf("%w: role %d", errProto, h.role)
	case h.qps < 1 || int(h.qps) > MaxQPs || h.conn >= h.qps:
		return h, fmt.Errorf("%w: connection %d of %d", errProto, h.conn, h.qps)
	case h.maxSize < 1 || int(h.maxSize) > lim.MaxSize:
		return h, fmt.Errorf("%w: max size %d (target allows %d)", errProto, h.maxSize, lim.MaxSize)
	case h.outstanding < 1 || int(h.outstanding) > lim.MaxOutstanding:
		return h, fmt.Errorf("%w: %d outstanding (target allows %d)", errProto, h.outstanding, lim.MaxOutstanding)
	case int(h.windows) > MaxWindows:
		return h, fmt.Errorf("%w: %d windows (max %d)", errProto, h.windows, MaxWindows)
	case h.readLen < 1 || int(h.readLen) > lim.MaxSize*MaxReadAreaSizes:
		return h, fmt.Errorf("%w: read area %d bytes", errProto, h.readLen)
	}
	return h, nil
}

// layout is the target's accept private data for a data connection: one region, remote
// read and write, holding a write slot per outstanding request, the windows' ranges and the
// read area.
type layout struct {
	va       uint64 // the region's address
	length   uint64
	token    uint32 // its remote token
	slots    uint16 // write slots of maxSize bytes from va
	slotSize uint32
	winOff   uint64 // windows' ranges: winOff + w*slotSize
	windows  uint16
	readOff  uint64
	readLen  uint32
	recvs    uint16 // receives the target posts for data messages before any credit message
}

func (l *layout) encode() []byte {
	b := make([]byte, layoutLen)
	binary.LittleEndian.PutUint32(b[0:], magic)
	b[4] = version
	binary.LittleEndian.PutUint16(b[6:], l.slots)
	binary.LittleEndian.PutUint64(b[8:], l.va)
	binary.LittleEndian.PutUint64(b[16:], l.length)
	binary.LittleEndian.PutUint32(b[24:], l.token)
	binary.LittleEndian.PutUint32(b[28:], l.slotSize)
	binary.LittleEndian.PutUint64(b[32:], l.winOff)
	binary.LittleEndian.PutUint16(b[40:], l.windows)
	binary.LittleEndian.PutUint64(b[44:], l.readOff)
	binary.LittleEndian.PutUint32(b[52:], l.readLen)
	binary.LittleEndian.PutUint16(b[56:], l.recvs)
	return b
}

// decodeLayout parses a layout and checks it against what the initiator asked for: every
// range it will touch lies inside the region.
func decodeLayout(b []byte, h *hello) (layout, error) {
	var l layout
	if len(b) < layoutLen || binary.LittleEndian.Uint32(b) != magic || b[4] != version {
		return l, fmt.Errorf("%w: not a workload layout (%d bytes)", errProto, len(b))
	}
	l.slots = binary.LittleEndian.Uint16(b[6:])
	l.va = binary.LittleEndian.Uint64(b[8:])
	l.length = binary.LittleEndian.Uint64(b[16:])
	l.token = binary.LittleEndian.Uint32(b[24:])
	l.slotSize = binary.LittleEndian.Uint32(b[28:])
	l.winOff = binary.LittleEndian.Uint64(b[32:])
	l.windows = binary.LittleEndian.Uint16(b[40:])
	l.readOff = binary.LittleEndian.Uint64(b[44:])
	l.readLen = binary.LittleEndian.Uint32(b[52:])
	l.recvs = binary.LittleEndian.Uint16(b[56:])
	inside := func(off, n uint64) bool { return off <= l.length && n <= l.length-off }
	switch {
	case l.recvs == 0:
		return l, fmt.Errorf("%w: layout with no receives", errProto)
	case l.va == 0 || l.va+l.length < l.va:
		return l, fmt.Errorf("%w: region [%#x, +%d)", errProto, l.va, l.length)
	case l.slotSize != h.maxSize || l.slots < h.outstanding || l.windows != h.windows || l.readLen != h.readLen:
		return l, fmt.Errorf("%w: layout %d slots of %d, %d windows, read area %d; asked %d of %d, %d, %d",
			errProto, l.slots, l.slotSize, l.windows, l.readLen, h.outstanding, h.maxSize, h.windows, h.readLen)
	case !inside(0, uint64(l.slots)*uint64(l.slotSize)),
		!inside(l.winOff, uint64(l.windows)*uint64(l.slotSize)),
		!inside(l.readOff, uint64(l.readLen)):
		return l, fmt.Errorf("%w: layout ranges outside the %d-byte region", errProto, l.length)
	}
	return l, nil
}

// Control message types.
const (
	msgWindow  = 1 // target → initiator: window w of connection conn is bound: addr, length, token
	msgRelease = 2 // initiator → target: done with window w; invalidate and rebind it
	msgReport  = 3 // initiator → target: send the receipt of conn once count data messages arrived
	msgReceipt = 4 // target → initiator: what conn's data messages were
	msgCredit  = 5 // target → initiator: count receives have been posted for conn's data messages in all
)

// msg is one control message (msgLen bytes on the wire).
type msg struct {
	typ    uint8
	conn   uint16
	window uint16
	addr   uint64 // msgWindow
	length uint32 // msgWindow
	token  uint32 // msgWindow
	count  uint64 // msgReport: data messages expected; msgReceipt: received; msgCredit: receives posted
	bytes  uint64 // msgReceipt
	bad    uint64 // msgReceipt: mismatched messages
	inv    uint64 // msgReceipt: remote invalidations
	badSeq uint64 // msgReceipt: the first mismatched message, +1 (0: none)
	badOff uint32 // msgReceipt: the offset of its first wrong byte
}

func (m *msg) encode(b []byte) {
	clear(b[:msgLen])
	binary.LittleEndian.PutUint32(b[0:], magic)
	b[4] = m.typ
	binary.LittleEndian.PutUint16(b[6:], m.conn)
	binary.LittleEndian.PutUint16(b[8:], m.window)
	binary.LittleEndian.PutUint32(b[10:], m.length)
	binary.LittleEndian.PutUint32(b[14:], m.token)
	binary.LittleEndian.PutUint32(b[18:], m.badOff)
	binary.LittleEndian.PutUint64(b[22:], m.addr)
	binary.LittleEndian.PutUint64(b[30:], m.count)
	binary.LittleEndian.PutUint64(b[38:], m.bytes)
	binary.LittleEndian.PutUint64(b[46:], m.bad)
	binary.LittleEndian.PutUint64(b[54:], m.inv)
	binary.LittleEndian.PutUint64(b[62:], m.badSeq)
}

// decodeMsg parses a control message of the given length, checking its type and that
// conn and window are below the session's bounds.
func decodeMsg(b []byte, qps, windows int) (msg, error) {
	var m msg
	if len(b) != msgLen || binary.LittleEndian.Uint32(b) != magic {
		return m, fmt.Errorf("%w: control message of %d bytes", errProto, len(b))
	}
	m.typ = b[4]
	m.conn = binary.LittleEndian.Uint16(b[6:])
	m.window = binary.LittleEndian.Uint16(b[8:])
	m.length = binary.LittleEndian.Uint32(b[10:])
	m.token = binary.LittleEndian.Uint32(b[14:])
	m.badOff = binary.LittleEndian.Uint32(b[18:])
	m.addr = binary.LittleEndian.Uint64(b[22:])
	m.count = binary.LittleEndian.Uint64(b[30:])
	m.bytes = binary.LittleEndian.Uint64(b[38:])
	m.bad = binary.LittleEndian.Uint64(b[46:])
	m.inv = binary.LittleEndian.Uint64(b[54:])
	m.badSeq = binary.LittleEndian.Uint64(b[62:])
	switch {
	case m.typ < msgWindow || m.typ > msgCredit:
		return m, fmt.Errorf("%w: control message type %d", errProto, m.typ)
	case int(m.conn) >= qps:
		return m, fmt.Errorf("%w: control message for connection %d of %d", errProto, m.conn, qps)
	case (m.typ == msgWindow || m.typ == msgRelease) && int(m.window) >= windows:
		return m, fmt.Errorf("%w: window %d of %d", errProto, m.window, windows)
	}
	return m, nil
}
