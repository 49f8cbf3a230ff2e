package transport

import (
	"net/netip"

	"github.com/xdpndk/xdpndk/transport/link"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// Packing small requests (docs/PROTOCOL.md §5.1, "Bundle"). A path charges per datagram
// (an AF_XDP descriptor, a kernel pass per frame, a NIC's per-packet work), so when a QP
// sends several small data packets in one engine round they leave as one Bundle datagram:
// each keeps its own PSN, opcode, flags, extension and payload, and so its ordering,
// completion and acknowledgement; only the header's DestQPN, cookie and timestamp are
// shared, and one CRC covers them all. A packet whose payload is at most Config.PackLimit
// bytes is copied into the bundle being filled in the transmit batch; the bundle closes
// when a packet of another QP, a larger packet, an Ack or a connection message is queued,
// when it is full, and when the batch goes to the link at the end of the round. A bundle
// that closes with one entry leaves as the plain packet it is, so a lone request pays
// nothing for packing and leaves as soon as before.
//
// The bounce buffer of the slot the bundle will take holds it: the first entry's header at
// bundleAt, so that one entry becomes a plain packet by writing the packet's own header just
// before its extension (at bundleAt+EntryHeaderLen-HeaderLen) and two or more a Bundle by
// writing the bundle's header in front (at 0).
const bundleAt = wire.HeaderLen

// bundle is the Bundle being filled in the transmit batch (its slot is txBatch.n, not yet
// counted). Engine goroutine only.
type bundle struct {
	open    bool
	to      netip.AddrPort // the peer, and our QP's source port: one connection
	port    uint16
	first   wire.Header // the first entry's packet header (its DestQPN, cookie, TS are the bundle's)
	entries int
	end     int // bytes of the slot's bounce buffer in use
	limit   int // the most bytes before the trailer: the connection's datagram size less the trailer
}

// pack queues data packet p (its header and extension filled in) with the n payload bytes
// in a and b as an entry of the bundle being filled, opening one when none is open for
// this connection or the open one has no room; limit is the connection's largest datagram
// less its trailer. It reports false, queuing nothing, when the link takes nothing now.
func (t *txBatch) pack(to netip.AddrPort, port uint16, p *wire.Packet, n uint32, a, b []byte, limit int) bool {
	size, _ := wire.EntryLen(p.Opcode, p.Flags, int(n))
	bn := &t.bundle
	if bn.open && (bn.to != to || bn.port != port || bn.end+size > bn.limit) {
		t.closeBundle()
	}
	if !bn.open {
		if t.slot() < 0 {
			return false
		}
		*bn = bundle{open: true, to: to, port: port, first: p.Header, end: bundleAt, limit: limit}
	}
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
	return true
}

// closeBundle finishes the bundle being filled, if any, and counts it in the batch: one
// entry as its plain packet, more as a Bundle, with the CRC trailer over it.
func (t *txBatch) closeBundle() {
	bn := &t.bundle
	if !bn.open {
		return
	}
	bn.open = false
	buf := t.bounce[t.n]
	var dg []byte
	if bn.entries == 1 {
		start := bundleAt + wire.EntryHeaderLen - wire.HeaderLen
		if wire.EncodeHeader(buf[start:], &bn.first) != nil {
			panic("transport: encoding a valid packet header failed")
		}
		dg = buf[start:bn.end]
	} else {
		h := wire.Header{Opcode: wire.OpBundle, DestQPN: bn.first.DestQPN, Cookie: bn.first.Cookie, TS: bn.first.TS}
		if wire.EncodeHeader(buf, &h) != nil {
			panic("transport: encoding a bundle header failed")
		}
		dg = buf[:bn.end]
		t.ctr.bundlesSent.Add(1)
		t.ctr.bundledSent.Add(uint64(bn.entries))
	}
	wire.PutTrailer(t.trl[t.n][:], wire.UpdateCRC(0, dg))
	pk := &t.pkts[t.n]
	*pk = link.Packet{Remote: bn.to, LocalPort: bn.port}
	pk.Segs[0], pk.Segs[1] = dg, t.trl[t.n][:]
	pk.NSegs = 2
	t.n++
}

// inputBundle hands every entry of a Bundle (parsed: all of them are well formed) to its QP
// as the packet it stands for, in order. The bundle is matched once: every entry has its
// DestQPN, cookie and source.
func (e *Engine) inputBundle(now int64, from netip.AddrPort, p *wire.Packet) {
	q := e.matchQP(from, p)
	if q == nil {
		return
	}
	if q.State() == QPConnecting {
		e.sched.cmDirty = true // the first entry may establish it (an implicit ready-to-use)
	}
	e.ctr.bundlesRecv.Add(1)
	it := p.Entries()
	for it.Next(&e.entry) {
		e.ctr.bundledRecv.Add(1)
		q.input(now, &e.entry)
	}
	e.sched.mark(q)
}
