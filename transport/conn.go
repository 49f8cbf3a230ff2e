package transport

import (
	"net/netip"

	"github.com/xdpndk/xdpndk/transport/wire"
)

// conn is a QP's connection as its packets need it: where they go and come from, what
// every one of them carries (the peer's QPN, the cookie), how much payload fits, and the
// way out (the engine's transmit batch). The requester and the responder send their data
// packets through it, and the receiver's acknowledgement rides on them (piggyback) or
// leaves on its own (sendAck). The connection manager fills it before the QP connects.
// Engine goroutine only.
type conn struct {
	tx       *txBatch
	rcv      *receiver // the acknowledgement data packets carry
	ctr      *qpCounters
	zeroCopy bool   // Config.ZeroCopyTx
	qpn      uint32 // this QP's (zero-copy cookies name it)

	peer    netip.AddrPort // where the peer receives: its IP and its link's port
	peerSrc netip.AddrPort // where the peer's data comes from: its IP and its QP's source port
	peerQPN uint32
	cookie  uint64
	srcPort uint16 // UDP source port: per-QP flow entropy
	mss     int    // payload bytes per data packet
}

// maxDataExt is the longest opcode extension of a data packet; a QP's MSS leaves room for it.
const maxDataExt = max(wire.SendExtLen, wire.RDMAExtLen, wire.ReadRespLen)

// canTransmit reports whether a packet can be queued now.
func (c *conn) canTransmit() bool { return c.tx.ok() }

// begin starts a data packet: the batch's packet being encoded, cleared, with the
// connection's header, and the bounce buffer of the slot it will take. The caller checked
// canTransmit; it fills the opcode's fields, then calls finish.
func (c *conn) begin(now int64, op wire.Opcode, psn wire.PSN, retx bool) (*wire.Packet, []byte) {
	p := &c.tx.wire
	*p = wire.Packet{}
	p.Header = wire.Header{Opcode: op, DestQPN: c.peerQPN, PSN: psn, Cookie: c.cookie, TS: uint32(now / 1000)}
	if retx {
		p.Flags |= wire.FlagRetransmit
	}
	return p, c.tx.bounce[c.tx.slot()]
}

// finish encodes the data packet begin started, with n payload bytes in at most two
// pieces a and b (or a copy in the bounce buffer), lets it carry the pending
// acknowledgement of the peer's stream if that fits, and queues it. With Config.ZeroCopyTx
// a payload that is the caller's memory is sent by reference under the cookie of tag
// (zcCookie); finish then reports true: one more packet the link must report done.
func (c *conn) finish(now int64, p *wire.Packet, n uint32, a, b []byte, tag uint64) (zc bool) {
	i := c.tx.slot()
	c.rcv.piggyback(now, p, int(n), c.mss+maxDataExt)
	hl, err := wire.Encode(c.tx.hdr[i][:], p)
	if err != nil {
		panic("transport: encoding a valid data packet failed: " + err.Error())
	}
	c.tx.emit(i, c.peer, c.srcPort, hl, a, b)
	if n > 0 && c.zeroCopy && !sameBuffer(a, c.tx.bounce[i]) { // a bounced copy is ours
		c.tx.markZeroCopy(zcCookie(c.qpn, tag))
		zc = true
	}
	c.ctr.txPackets.Add(1)
	c.ctr.txBytes.Add(uint64(n))
	return zc
}

// sendAck queues an Ack of the peer's stream (or the pending NAK), with flags (FlagAckReq
// makes it a probe). The caller checked canTransmit.
func (c *conn) sendAck(now int64, flags wire.Flags) {
	i := c.tx.slot()
	p := &c.tx.wire
	*p = wire.Packet{}
	p.Header = wire.Header{Opcode: wire.OpAck, Flags: flags, DestQPN: c.peerQPN, Cookie: c.cookie, TS: uint32(now / 1000)}
	c.rcv.writeAck(now, p)
	hl, err := wire.Encode(c.tx.hdr[i][:], p)
	if err != nil {
		panic("transport: encoding an ack failed: " + err.Error())
	}
	c.tx.emit(i, c.peer, c.srcPort, hl)
}
