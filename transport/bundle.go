package transport

import (
	"net/netip"

	"github.com/xdpndk/xdpndk/transport/wire"
)

// Packing small requests (docs/PROTOCOL.md §5.1 "Bundle", §5.2 "multi-QP Bundle"). A path
// charges per datagram (an AF_XDP descriptor, a kernel pass per frame, a NIC's per-packet
// work), so the small data packets that leave in one engine round for one peer leave
// together: each keeps its own PSN, opcode, flags, extension and payload, and so its
// ordering, completion and acknowledgement; one CRC covers them all. A packet whose payload
// is at most Config.PackLimit bytes, and every Ack of a QP that packs, is copied into the
// bundle being filled in the transmit batch, in a group of its QP's entries (a group begins
// when the packet is of another QP than the one before it). The bundle closes when a packet
// to another peer, a larger packet or a connection message is queued, when it is full (the
// smallest datagram size of the connections in it), and when the batch goes to the link at
// the end of the round. It leaves as the smallest form that holds it: one entry as the
// plain packet it is (a lone request pays nothing for packing and leaves as soon as
// before), one group as a Bundle (the header's DestQPN and cookie are the group's),
// several as a multi-QP Bundle (each group behind a group header naming its QP, cookie and
// source port).
//
// The bounce buffer of the slot the bundle will take holds it: the first group's header at
// HeaderLen and its first entry's header at bundleAt, so that one entry becomes a plain
// packet by writing the packet's own header just before its extension (at
// bundleAt+EntryHeaderLen-HeaderLen), one group a Bundle by writing the Bundle's header just
// before the entries (at GroupHeaderLen), and several groups a multi-QP Bundle by writing its
// header at 0 and the first group's after it. Later groups' headers lie between their
// entries, written when the group ends.
const bundleAt = wire.HeaderLen + wire.GroupHeaderLen

// bounceLen is the size of a transmit slot's bounce buffer on a link of maxPayload bytes:
// a datagram, and the room a bundle of one group leaves unused in front of it.
func bounceLen(maxPayload int) int { return maxPayload + wire.GroupHeaderLen }

// bundle is the bundle being filled in the transmit batch (its slot is txBatch.n, not yet
// counted). Engine goroutine only.
type bundle struct {
	open    bool
	to      netip.AddrPort // the peer: every group's connection goes there
	src     uint16         // the first group's source port: the datagram's
	first   wire.Header    // the first entry's packet header (the datagram's TS; its DestQPN, cookie as a Bundle's)
	entries int
	groups  int
	end     int // bytes of the slot's bounce buffer in use
	limit   int // the most bytes before the trailer: the smallest datagram size of its connections less the trailer

	// the group being filled: its connection, where its header goes, its entries
	qpn     uint32
	cookie  uint64
	port    uint16
	groupAt int
	count   int
}

// size is the bytes of the datagram the bundle leaves as, before its trailer, if it closes
// now (one group: a Bundle, without the first group's header).
func (bn *bundle) size() int {
	if bn.groups == 1 {
		return bn.end - wire.GroupHeaderLen
	}
	return bn.end
}

// pack queues data packet p (its header and extension filled in, of the QP sending from
// port to peer to) with the n payload bytes in a and b as an entry of the bundle being
// filled, opening one when none is open for that peer or the open one has no room; limit
// is the connection's largest datagram less its trailer. It reports false, queuing nothing,
// when the link takes nothing now.
func (t *txBatch) pack(to netip.AddrPort, port uint16, p *wire.Packet, n uint32, a, b []byte, limit int) bool {
	size, _ := wire.EntryLen(p.Opcode, p.Flags, int(n))
	bn := &t.bundle
	if bn.open {
		same := bn.qpn == p.DestQPN && bn.cookie == p.Cookie && bn.port == port
		switch {
		case bn.to != to:
			t.closeBundle()
		case same && bn.size()+size > min(bn.limit, limit):
			t.closeBundle()
		case !same && bn.end+wire.GroupHeaderLen+size > min(bn.limit, limit):
			t.closeBundle()
		case !same:
			t.endGroup()
			bn.groupAt = bn.end
			bn.end += wire.GroupHeaderLen
			bn.startGroup(p, port)
		}
	}
	if !bn.open {
		if t.slot() < 0 {
			return false
		}
		*bn = bundle{open: true, to: to, src: port, first: p.Header, end: bundleAt, limit: limit, groupAt: wire.HeaderLen}
		bn.startGroup(p, port)
	}
	bn.limit = min(bn.limit, limit)
	buf := t.bounce[t.n]
	w, err := wire.EncodeEntry(buf[bn.end:], p, int(n))
	if err != nil {
		panic("transport: encoding a valid bundle entry failed: " + err.Error())
	}
	w += bn.end
	w += copy(buf[w:], a)
	w += copy(buf[w:], b)
	bn.end = w
	bn.entries++
	bn.count++
	return true
}

// startGroup begins the bundle's group of the QP that sent p from port.
func (bn *bundle) startGroup(p *wire.Packet, port uint16) {
	bn.qpn, bn.cookie, bn.port, bn.count = p.DestQPN, p.Cookie, port, 0
	bn.groups++
}

// endGroup writes the header of the bundle's group being filled.
func (t *txBatch) endGroup() {
	bn := &t.bundle
	if wire.EncodeGroup(t.bounce[t.n][bn.groupAt:], bn.qpn, bn.cookie, bn.port, bn.count) != nil {
		panic("transport: encoding a bundle's group header failed")
	}
}

// closeBundle finishes the bundle being filled, if any, and counts it in the batch: one
// entry as its plain packet, one group as a Bundle, more as a multi-QP Bundle, with the
// CRC trailer over it. The datagram leaves from the first group's source port.
func (t *txBatch) closeBundle() {
	if t.bundle.open { // inlined: most calls find none open
		t.sealBundle()
	}
}

// sealBundle is closeBundle of the open bundle.
func (t *txBatch) sealBundle() {
	bn := &t.bundle
	bn.open = false
	buf := t.bounce[t.n]
	var dg []byte
	switch {
	case bn.entries == 1:
		start := bundleAt + wire.EntryHeaderLen - wire.HeaderLen
		if wire.EncodeHeader(buf[start:], &bn.first) != nil {
			panic("transport: encoding a valid packet header failed")
		}
		dg = buf[start:bn.end]
	case bn.groups == 1:
		h := wire.Header{Opcode: wire.OpBundle, DestQPN: bn.first.DestQPN, Cookie: bn.first.Cookie, TS: bn.first.TS}
		if wire.EncodeHeader(buf[wire.GroupHeaderLen:], &h) != nil {
			panic("transport: encoding a bundle header failed")
		}
		dg = buf[wire.GroupHeaderLen:bn.end]
	default:
		t.endGroup()
		h := wire.Header{Opcode: wire.OpMultiBundle, TS: bn.first.TS}
		if wire.EncodeHeader(buf, &h) != nil {
			panic("transport: encoding a bundle header failed")
		}
		dg = buf[:bn.end]
		t.ctr.multiSent.Add(1)
	}
	if bn.entries > 1 {
		t.ctr.bundlesSent.Add(1)
		t.ctr.bundledSent.Add(uint64(bn.entries))
	}
	wire.PutTrailer(t.trl[t.n][:], wire.UpdateCRC(0, dg))
	pk := t.packet(t.n, bn.to, bn.src)
	pk.Segs[0], pk.Segs[1] = dg, t.trl[t.n][:]
	pk.NSegs = 2
	t.n++
}

// inputBundle hands every entry of a Bundle or multi-QP Bundle (parsed: all of them are
// well formed) to its QP as the packet it stands for, in order. A Bundle is matched once:
// every entry has its DestQPN, cookie and source. An entry of a multi-QP Bundle is matched
// as the plain packet it stands for would be, from the datagram's source address and its
// group's source port: one that matches no live QP is dropped and counted, and the others
// go on. In a group of engines an entry that another engine owns is left to it (forward
// handed it the datagram too).
func (e *Engine) inputBundle(now int64, from netip.AddrPort, p *wire.Packet) {
	if p.Opcode == wire.OpMultiBundle {
		e.inputMulti(now, from, p)
		return
	}
	q := e.matchQP(from, p)
	if q == nil {
		return
	}
	// it is declared outside the loop and set in place: a loop variable whose address is
	// taken is one per iteration, and the reader (some 250 B) would be copied twice for
	// every entry.
	var it wire.Entries
	it.Reset(p)
	n := 0
	for ; it.Next(&e.entry); n++ {
		e.deliverTo(now, q, &e.entry)
	}
	e.ctr.bundlesRecv.Add(1)
	e.ctr.bundledRecv.Add(uint64(n))
}

// inputMulti is inputBundle of a multi-QP Bundle.
func (e *Engine) inputMulti(now int64, from netip.AddrPort, p *wire.Packet) {
	var it wire.Entries
	it.Reset(p)
	taken := 0
	var q *QP
	for it.Next(&e.entry) {
		if it.GroupStart() {
			// A group is matched once, as a Bundle is: a group for no live QP counts once
			// among the drops (EngineStats.NoQP, BadSource, BadCookie), whatever it holds.
			// One another engine owns is left to it (forward handed it the datagram too).
			q = nil
			if e.g.owns(e.entry.DestQPN) {
				q = e.matchQP(netip.AddrPortFrom(from.Addr(), it.SourcePort()), &e.entry)
			}
		}
		if q != nil {
			taken++
			e.deliverTo(now, q, &e.entry)
		}
	}
	if taken > 0 {
		e.ctr.bundlesRecv.Add(1)
		e.ctr.multiRecv.Add(1)
		e.ctr.bundledRecv.Add(uint64(taken))
	}
}
