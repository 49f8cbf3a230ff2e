package wire

import "encoding/binary"

// A Bundle (OpBundle) carries several data packets of one connection in one datagram, so
// that small requests share the cost a path charges per datagram (docs/PROTOCOL.md §5.1):
//
//	Header (24 B: OpBundle, Flags 0, DestQPN, PSN 0, Cookie, TS)
//	entry: Length (2) | Opcode (1) | Flags (1) | PSN (4) | extension | [AckExt] | payload
//	entry: ...
//	CRC32C (4 B) over everything before it
//
// Each entry is the packet whose header is the bundle's (its DestQPN, Cookie and TS) with
// the entry's Opcode, Flags and PSN, followed by Length bytes: that opcode's extension, the
// piggybacked AckExt if FlagAck is set, and the payload. Every flag defined fits the entry's
// 8 bits (the header's upper 8 flag bits are always zero). Entries are data packets (Send*,
// Write, ReadRequest, ReadResponse) and Acks (an Ack entry is its AckExt: a positive ack, a
// NAK or, with FlagAckReq, a probe; its PSN is 0, it has no payload), and keep every rule
// of a datagram carrying them alone; a receiver takes them in order, each as if it had
// arrived on its own.

// OpBundle is the opcode of a Bundle datagram.
const OpBundle Opcode = 0x50

// OpMultiBundle is the opcode of a multi-QP Bundle (docs/PROTOCOL.md §5.2): the data
// packets of several connections to one peer in one datagram, in groups, each group a
// connection's run of entries behind a group header naming it:
//
//	Header (24 B: OpMultiBundle, Flags 0, DestQPN 0, PSN 0, Cookie 0, TS)
//	group: DestQPN (4) | Cookie (8) | SourcePort (2) | Count (2), then Count entries (§5.1)
//	group: ...
//	CRC32C (4 B) over everything before it
//
// An entry of a group stands for the data packet whose header is the group's DestQPN and
// Cookie with the datagram's TS and the entry's Opcode, Flags and PSN; SourcePort is the UDP
// source port the sending QP's own datagrams leave from, which the receiver checks in place
// of the datagram's.
const OpMultiBundle Opcode = 0x51

// GroupHeaderLen is the length of a multi-QP Bundle's group header: DestQPN, Cookie,
// SourcePort, Count.
const GroupHeaderLen = 16

// EncodeGroup writes a multi-QP Bundle's group header into the start of b: count entries
// for QP destQPN under cookie, from a QP sending from UDP port srcPort. It fails, writing
// nothing, for a count outside [1, 65535] (ErrField) or a b too short (ErrShortBuffer).
func EncodeGroup(b []byte, destQPN uint32, cookie uint64, srcPort uint16, count int) error {
	if count < 1 || count > 0xffff {
		return ErrField
	}
	if len(b) < GroupHeaderLen {
		return ErrShortBuffer
	}
	binary.BigEndian.PutUint32(b[0:4], destQPN)
	binary.BigEndian.PutUint64(b[4:12], cookie)
	binary.BigEndian.PutUint16(b[12:14], srcPort)
	binary.BigEndian.PutUint16(b[14:16], uint16(count))
	return nil
}

// EntryHeaderLen is the length of a Bundle entry's header: Length, Opcode, Flags, PSN.
const EntryHeaderLen = 8

// maxEntryFixed is the most bytes of an entry before its payload: its header, the longest
// data extension and a piggybacked ack.
const maxEntryFixed = EntryHeaderLen + RDMAExtLen + AckExtLen

// EntryLen returns the bytes a data packet or Ack of opcode op with flags and payloadLen
// payload bytes takes as a Bundle entry (its header included), and false for an opcode or
// flags a Bundle cannot carry.
func EntryLen(op Opcode, flags Flags, payloadLen int) (int, bool) {
	info := &opTable[op]
	if !entryKind(info.kind) || flags&^info.flags != 0 || payloadLen < 0 {
		return 0, false
	}
	n := EntryHeaderLen + int(info.ext) + payloadLen
	if flags&FlagAck != 0 {
		n += AckExtLen
	}
	return n, n-EntryHeaderLen <= 0xffff
}

// entryKind reports whether packets of kind k may be a Bundle's entries: data packets and
// Acks.
func entryKind(k kind) bool {
	return entryKinds>>k&1 != 0
}

// entryKinds has bit k set for each kind k entryKind accepts.
const entryKinds = 1<<kindSend | 1<<kindWrite | 1<<kindReadReq | 1<<kindReadResp | 1<<kindAck

// EncodeEntry writes data packet or Ack p as a Bundle entry into the start of b: the entry
// header (its Length counting payloadLen payload bytes, which the caller appends), p's
// extension (an Ack's is its AckExt) and, with FlagAck, its piggybacked AckExt. It returns
// the bytes written, EntryHeaderLen + the extension (+ AckExtLen). p's DestQPN, Cookie and
// TS are the bundle's and are not written. It fails, writing nothing, for an opcode a
// Bundle cannot carry (ErrOpcode), flags the opcode does not allow (ErrFlags), a
// piggybacked NAK (ErrField), an Ack with payload or an entry longer than its 16-bit Length
// (ErrLength) or a b too short (ErrShortBuffer). Like Encode it writes other field values
// as given (an Ack's PSN, its Syndrome): Parse checks them. It does not allocate.
func EncodeEntry(b []byte, p *Packet, payloadLen int) (int, error) {
	info := &opTable[p.Opcode]
	if !entryKind(info.kind) {
		return 0, ErrOpcode
	}
	total, ok := EntryLen(p.Opcode, p.Flags, payloadLen)
	switch {
	case total == 0:
		return 0, ErrFlags
	case !ok:
		return 0, ErrLength
	case p.Flags&FlagAck != 0 && p.Ack.Syndrome != SynAck:
		return 0, ErrField
	case info.kind == kindAck && payloadLen != 0:
		return 0, ErrLength
	}
	n := total - payloadLen
	if len(b) < n {
		return 0, ErrShortBuffer
	}
	binary.BigEndian.PutUint16(b[0:2], uint16(total-EntryHeaderLen))
	b[2] = byte(p.Opcode)
	b[3] = byte(p.Flags)
	binary.BigEndian.PutUint32(b[4:8], uint32(p.PSN))
	e := b[EntryHeaderLen : EntryHeaderLen+int(info.ext)]
	switch info.kind {
	case kindSend:
		putSend(e, &p.Send)
	case kindWrite, kindReadReq:
		putRDMA(e, &p.RDMA)
	case kindReadResp:
		putReadResp(e, &p.ReadResp)
	case kindAck:
		putAck(e, &p.Ack)
	}
	if p.Flags&FlagAck != 0 {
		putAck(b[EntryHeaderLen+int(info.ext):n], &p.Ack)
	}
	return n, nil
}

// Entries reads the entries of a Bundle that Parse accepted, in order, each as the Packet
// it stands for. Parse checked every entry already, so Next never meets a malformed one.
// An Entries keeps views of the bundle's payload: it is valid as long as the segments
// Parse was given.
type Entries struct {
	hdr     Header
	multi   bool                // a multi-QP Bundle: entries in groups
	inGroup int                 // entries of the current group not read yet
	srcPort uint16              // the current group's SourcePort
	started bool                // the entry read last began a group
	read    bool                // an entry was read
	pieces  [MaxSegments][]byte // the bundle's bytes, in order (not changed while read)
	np, at  int                 // pieces used; the piece being read
	off     int                 // bytes of pieces[at] read
	left    int                 // bytes not read yet
	scratch [maxEntryFixed]byte // an entry's fixed part that straddles two pieces
}

// Entries returns the reader of p's entries; p is a Bundle or a multi-QP Bundle that Parse
// accepted (for any other packet the reader reads none).
func (p *Packet) Entries() Entries {
	var it Entries
	it.Reset(p)
	return it
}

// Reset makes it the reader of p's entries, as p.Entries() would return it, writing it in
// place: a caller that keeps its reader in a variable of its own spares the copy of the
// returned one.
func (it *Entries) Reset(p *Packet) {
	it.hdr.Opcode, it.hdr.Flags, it.hdr.DestQPN, it.hdr.PSN = p.Opcode, p.Flags, p.DestQPN, p.PSN
	it.hdr.Cookie, it.hdr.TS = p.Cookie, p.TS
	it.multi = p.Opcode == OpMultiBundle
	it.inGroup, it.srcPort, it.started, it.read = 0, 0, false, false
	it.np, it.at, it.off, it.left = 0, 0, 0, 0
	for i := range it.pieces {
		it.pieces[i] = nil
	}
	if p.Opcode != OpBundle && p.Opcode != OpMultiBundle {
		return
	}
	it.np = min(max(p.NPayload, 0), MaxSegments)
	for i, b := range p.Payload[:it.np] {
		it.pieces[i] = b
		it.left += len(b)
	}
}

// Next fills e with the next entry, its payload as views into the bundle, and reports
// false when none is left.
func (it *Entries) Next(e *Packet) bool {
	return it.left > 0 && it.next(e) == nil
}

// SourcePort returns the UDP source port that the QP sending the entry Next returned last
// sends from: its group's SourcePort in a multi-QP Bundle, 0 in a Bundle (whose entries
// are the datagram's own source's).
func (it *Entries) SourcePort() uint16 { return it.srcPort }

// GroupStart reports whether the entry Next returned last is the first of its group (of a
// multi-QP Bundle; in a Bundle, whether it is the first entry).
func (it *Entries) GroupStart() bool { return it.started }

// Count returns how many entries are left to read, without reading them.
func (it *Entries) Count() int {
	c := *it
	var e Packet
	n := 0
	for c.Next(&e) {
		n++
	}
	return n
}

// take returns the next n bytes (n <= len(it.scratch)) as one slice: a view when they lie
// in one piece, else a copy in the scratch buffer. The caller checked that n bytes are
// left.
func (it *Entries) take(n int) []byte {
	if p := it.piece(); len(p) >= n {
		it.off += n
		it.left -= n
		return p[:n:n]
	}
	b := it.scratch[:n]
	for w := 0; w < n; {
		c := copy(b[w:], it.piece())
		it.off += c
		w += c
	}
	it.left -= n
	return b
}

// piece returns the unread bytes of the piece being read, moving past the pieces read
// whole first. The caller checked that some byte is left. Reading moves off, an integer,
// rather than reslicing the piece: a slice stored into the reader costs a write barrier's
// check and three words.
func (it *Entries) piece() []byte {
	for it.off == len(it.pieces[it.at]) {
		it.at++
		it.off = 0
	}
	return it.pieces[it.at][it.off:]
}

// views sets e's payload to the next n bytes, as views of the pieces they lie in. The
// caller checked that n bytes are left.
func (it *Entries) views(e *Packet, n int) {
	np := 0
	it.left -= n
	for n > 0 {
		p := it.piece()
		c := min(len(p), n)
		e.Payload[np] = p[:c:c]
		np++
		it.off += c
		n -= c
	}
	for i := np; i < MaxSegments; i++ {
		e.Payload[i] = nil
	}
	e.NPayload = np
}

// next reads and checks one entry into e (at least one byte is left): the checks Parse
// makes of a datagram carrying that packet alone.
func (it *Entries) next(e *Packet) error {
	it.started = false
	if it.multi && it.inGroup == 0 {
		if it.left < GroupHeaderLen {
			return ErrLength // trailing bytes that are no group
		}
		g := it.take(GroupHeaderLen)
		it.hdr.DestQPN = binary.BigEndian.Uint32(g[0:4])
		it.hdr.Cookie = binary.BigEndian.Uint64(g[4:12])
		it.srcPort = binary.BigEndian.Uint16(g[12:14])
		it.inGroup = int(binary.BigEndian.Uint16(g[14:16]))
		if it.inGroup == 0 {
			return ErrField // a group of no entry
		}
		it.started = true
	} else if !it.multi && !it.read {
		it.started = true
	}
	it.read = true
	if it.multi {
		it.inGroup--
	}
	if it.left < EntryHeaderLen {
		return ErrLength // trailing bytes that are no entry
	}
	if p := it.piece(); len(p) >= EntryHeaderLen {
		if n := EntryHeaderLen + int(binary.BigEndian.Uint16(p[0:2])); n <= len(p) {
			// The common case, and every entry of a datagram in one segment: the entry
			// lies in one piece and is read in place.
			fixed, err := it.head(p, it.left-EntryHeaderLen)
			if err != nil {
				return err
			}
			x := p[EntryHeaderLen : EntryHeaderLen+fixed]
			if err := it.fill(e, p, x, n-EntryHeaderLen-fixed); err != nil {
				return err
			}
			it.off += n
			it.left -= n
			e.setPayload(p[EntryHeaderLen+fixed : n : n])
			return nil
		}
	}
	var h [EntryHeaderLen]byte // a copy: the fixed part may be taken into the same scratch
	copy(h[:], it.take(EntryHeaderLen))
	fixed, err := it.head(h[:], it.left)
	if err != nil {
		return err
	}
	plen := int(binary.BigEndian.Uint16(h[0:2])) - fixed
	if err := it.fill(e, h[:], it.take(fixed), plen); err != nil {
		return err
	}
	it.views(e, plen)
	return nil
}

// head checks an entry's header h (EntryHeaderLen bytes), with left bytes of the bundle
// after it, and returns the length of the entry's fixed part after the header: the
// opcode's extension and a piggybacked ack.
func (it *Entries) head(h []byte, left int) (int, error) {
	length := int(binary.BigEndian.Uint16(h[0:2]))
	info := &opTable[h[2]]
	flags := Flags(h[3])
	if !entryKind(info.kind) {
		return 0, ErrOpcode
	}
	if flags&^info.flags != 0 {
		return 0, ErrFlags
	}
	fixed := int(info.ext)
	if flags&FlagAck != 0 {
		fixed += AckExtLen
	}
	if length < fixed || length > left {
		return 0, ErrLength
	}
	return fixed, nil
}

// fill sets e's header fields from the entry header h that head accepted and from the
// bundle's, and its extension and piggybacked ack from the fixed part x, with the checks
// Parse makes of a datagram carrying that packet alone; plen is the payload's length.
func (it *Entries) fill(e *Packet, h, x []byte, plen int) error {
	op, flags := Opcode(h[2]), Flags(h[3])
	info := &opTable[op]
	// Field by field: a Header built whole would go on the stack with narrow stores and be
	// copied with wide loads that stall on them.
	e.Opcode, e.Flags, e.DestQPN, e.PSN = op, flags, it.hdr.DestQPN, PSN(binary.BigEndian.Uint32(h[4:8]))
	e.Cookie, e.TS = it.hdr.Cookie, it.hdr.TS
	e.PrivateData = nil
	if flags&FlagAck != 0 {
		if !decodeAck(x[info.ext:], &e.Ack) || e.Ack.Syndrome != SynAck {
			return ErrField
		}
	}
	ext := x[:info.ext]
	switch info.kind {
	case kindSend:
		return parseSend(ext, e, plen)
	case kindWrite:
		return parseWrite(ext, e, plen)
	case kindReadReq:
		return parseReadReq(ext, e, plen)
	case kindReadResp:
		return parseReadResp(ext, e, plen)
	default: // kindAck
		return parseAck(ext, e, plen)
	}
}

// setPayload makes v (which may be empty) e's whole payload, clearing the views e held
// beyond it (Payload past NPayload stays nil).
func (e *Packet) setPayload(v []byte) {
	np := 0
	if len(v) > 0 {
		e.Payload[0], np = v, 1
	}
	for i := np; i < min(max(e.NPayload, 0), MaxSegments); i++ {
		e.Payload[i] = nil
	}
	e.NPayload = np
}

// parseBundle checks a Bundle's or multi-QP Bundle's header fields and every one of its
// entries (at least one) and groups, so that a bundle with any fault is refused whole and
// none of its entries is used.
func parseBundle(p *Packet) error {
	if p.PSN != 0 || p.Opcode == OpMultiBundle && (p.DestQPN != 0 || p.Cookie != 0) {
		return ErrField
	}
	var it Entries
	it.Reset(p)
	if it.left == 0 {
		return ErrLength
	}
	var e Packet
	for it.left > 0 {
		if err := it.next(&e); err != nil {
			return err
		}
	}
	if it.inGroup != 0 {
		return ErrLength // a group announcing more entries than the datagram holds
	}
	return nil
}
