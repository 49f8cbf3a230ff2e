package transport

import (
	"net/netip"

	"github.com/xdpndk/xdpndk/transport/wire"
)

// conn is a QP's connection as its packets need it: where they go and come from, what
// every one of them carries (the peer's QPN, the cookie), how much payload fits, and the
// way out (the engine's transmit batch). The requester and the responder send their data
// packets through it; an acknowledgement of the peer's stream that the QP offers rides on
// the first of them with room for it (piggyback), or leaves on its own (sendAck). The
// connection manager fills it, through the QP, before the QP connects. Engine goroutine
// only.
type conn struct {
	tx       *txBatch
	ctr      *qpCounters
	zeroCopy bool   // Config.ZeroCopyTx
	pack     int    // packets with at most this payload are packed (bundle.go; Config.PackLimit, at most packRoom); -1: none
	qpn      uint32 // this QP's (zero-copy cookies name it)

	peer    netip.AddrPort // where the peer receives: its IP and its link's port
	peerSrc netip.AddrPort // where the peer's data comes from: its IP and its QP's source port
	peerQPN uint32
	cookie  uint64
	srcPort uint16 // UDP source port: per-QP flow entropy
	mss     int    // payload bytes per data packet

	// the acknowledgement offered to the data packets leaving now (offer), and whether one
	// carried it
	ack            wire.AckExt
	offered, taken bool
}

// offer makes a the acknowledgement that the next data packet with room for it carries,
// until withdraw.
func (c *conn) offer(a wire.AckExt) { c.ack, c.offered, c.taken = a, true, false }

// withdraw ends the offer; it reports whether a data packet carried the acknowledgement.
func (c *conn) withdraw() bool {
	taken := c.taken
	c.offered, c.taken = false, false
	return taken
}

// maxDataExt is the longest opcode extension of a data packet; a QP's MSS leaves room for it.
const maxDataExt = max(wire.SendExtLen, wire.RDMAExtLen, wire.ReadRespLen)

// ackFits reports whether a data packet of opcode op with n payload bytes has room for a
// piggybacked acknowledgement in a datagram whose extension and payload may take room
// bytes: a full-size packet has none, and the ack then goes on its own.
func ackFits(op wire.Opcode, n, room int) bool {
	ext, _ := wire.ExtLen(op)
	return ext+wire.AckExtLen+n <= room
}

// packRoom is the most payload a QP packs with payload bytes per packet (mss): an entry's
// header and a piggybacked ack must fit beside it in a datagram a plain packet fills.
func packRoom(mss int) int { return mss - wire.EntryHeaderLen - wire.AckExtLen }

// mssOf is the payload bytes of a data packet in a datagram of maxPayload bytes.
func mssOf(maxPayload int) int { return maxPayload - wire.HeaderLen - maxDataExt - wire.TrailerLen }

// canTransmit reports whether a packet can be queued now.
func (c *conn) canTransmit() bool { return c.tx.ok() }

// begin starts a data packet of n payload bytes: the batch's packet being encoded, with
// the connection's header, and the buffer to gather its payload into if it lies in more
// than two pieces (the bounce buffer of the slot it will take, or, for a packet that will
// be packed, the batch's scratch). The caller checked canTransmit; it sets the opcode's
// extension whole (the packet is not cleared: Encode reads the header, the opcode's
// extension and, under FlagAck, the Ack finish sets), then calls finish.
func (c *conn) begin(now int64, op wire.Opcode, psn wire.PSN, retx bool, n uint32) (*wire.Packet, []byte) {
	p := &c.tx.wire
	p.Header = wire.Header{Opcode: op, DestQPN: c.peerQPN, PSN: psn, Cookie: c.cookie, TS: uint32(now / 1000)}
	if retx {
		p.Flags |= wire.FlagRetransmit
	}
	if c.packs(n) {
		return p, c.tx.small
	}
	return p, c.tx.bounce[c.tx.slot()]
}

// packs reports whether a data packet of n payload bytes is packed (bundle.go).
func (c *conn) packs(n uint32) bool { return int64(n) <= int64(c.pack) }

// finish encodes the data packet begin started, with n payload bytes in at most two
// pieces a and b (or a copy in the bounce buffer), lets it carry the offered
// acknowledgement of the peer's stream if one is offered and fits, and queues it. With
// Config.ZeroCopyTx a payload that is the caller's memory is sent by reference under the
// cookie of its owner o (owner.cookie); finish then reports true: one more packet the link
// must report done.
func (c *conn) finish(p *wire.Packet, n uint32, a, b []byte, o owner) (zc bool) {
	if c.offered && !c.taken && ackFits(p.Opcode, int(n), c.mss+maxDataExt) {
		p.Flags |= wire.FlagAck
		p.Ack = c.ack
		c.taken = true
	}
	c.ctr.txPackets.Add(1)
	c.ctr.txBytes.Add(uint64(n))
	if c.packs(n) {
		c.packed(p, n, a, b)
		return false
	}
	i := c.tx.slot()
	hl, err := wire.Encode(c.tx.hdr[i][:], p)
	if err != nil {
		panic("transport: encoding a valid data packet failed: " + err.Error())
	}
	c.tx.emit(i, c.peer, c.srcPort, hl, a, b)
	if n > 0 && c.zeroCopy && !sameBuffer(a, c.tx.bounce[i]) { // a bounced copy is ours
		c.tx.markZeroCopy(o.cookie(c.qpn))
		zc = true
	}
	return zc
}

// packed queues packet p (a data packet or an Ack), with the n payload bytes in a and b,
// into the bundle being filled (bundle.go), whose datagram it bounds by the connection's
// largest datagram less its trailer. The caller checked canTransmit: the bundle has a
// slot, or one is free.
func (c *conn) packed(p *wire.Packet, n uint32, a, b []byte) {
	c.tx.pack(c.peer, c.srcPort, p, n, a, b, wire.HeaderLen+c.mss+maxDataExt)
}

// sendAck queues an Ack packet carrying a (an acknowledgement of the peer's stream, or a
// NAK), with flags (FlagAckReq makes it a probe). Where the QP packs, the Ack is an entry of
// the bundle being filled (bundle.go): the acks of many QPs to one peer in a round leave in
// one datagram, and a lone one as the plain Ack it is. The caller checked canTransmit.
func (c *conn) sendAck(now int64, flags wire.Flags, a wire.AckExt) {
	p := &c.tx.wire // not cleared: Encode reads the header and the Ack, both set here
	p.Header = wire.Header{Opcode: wire.OpAck, Flags: flags, DestQPN: c.peerQPN, Cookie: c.cookie, TS: uint32(now / 1000)}
	p.Ack = a
	if c.packs(0) {
		c.packed(p, 0, nil, nil)
		return
	}
	i := c.tx.slot()
	hl, err := wire.Encode(c.tx.hdr[i][:], p)
	if err != nil {
		panic("transport: encoding an ack failed: " + err.Error())
	}
	c.tx.emit(i, c.peer, c.srcPort, hl, nil, nil)
}
