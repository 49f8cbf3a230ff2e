package transport_test

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/link"
	"github.com/xdpndk/xdpndk/transport/simlink"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// gfRec is the bytes of one forged datagram of FuzzGroupForward.
const gfRec = 64

// gfOps are the opcodes the fuzzer forges (every one the routing tells apart).
var gfOps = [...]wire.Opcode{wire.OpSendOnly, wire.OpSendFirst, wire.OpWrite, wire.OpReadRequest, wire.OpReadResponse,
	wire.OpAck, wire.OpConnRequest, wire.OpConnReply, wire.OpReadyToUse, wire.OpConnReject,
	wire.OpDisconnectReq, wire.OpDisconnectRep}

// FuzzGroupForward sends forged datagrams, well formed (they pass wire.Parse, so they reach
// the routing between engines) or not, from a host that takes no part to both engines of a
// group with connected QPs on both, naming live QPNs (or their neighbours, whose engine
// bits name an engine that may not exist), live ConnIDs, live cookies or anything. Nothing
// may panic or loop; every datagram forwarded is received by its engine or counted
// dropped; the connections are still up and carry a Send, Write and Read byte-exact.
func FuzzGroupForward(f *testing.F) {
	f.Add([]byte{})
	for i, op := range gfOps {
		rec := make([]byte, gfRec)
		rec[0], rec[1] = byte(i), byte(i*37)
		rec[2] = byte(op)
		f.Add(rec)
		if !wire.IsCM(op) && op != wire.OpAck { // the same as entries of a multi-QP Bundle
			rec = append([]byte(nil), rec...)
			rec[59], rec[30] = 2, byte(i+1)
			f.Add(rec)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		w := newGroupWorld(t, 1, 3, simlink.SteerFlowHash, func(c *transport.Config) {
			c.InboxSlots = 4
			c.MaxHalfOpen = 4
		})
		qas, qbs := w.pairs(3, transport.QPConfig{}, transport.QPConfig{})
		third, err := w.net.AddHost(netip.MustParseAddrPort("198.18.0.99:4793"))
		if err != nil {
			t.Fatal(err)
		}
		l, err := w.gb.Listen(7, 4)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		var qpns []uint32
		for _, q := range qbs {
			qpns = append(qpns, q.QPN())
		}
		var buf [512]byte
		for len(data) >= gfRec && len(qpns) > 0 {
			rec := data[:gfRec]
			data = data[gfRec:]
			n := gfForge(buf[:], rec, qpns)
			if n == 0 {
				continue
			}
			pk := []link.Packet{{Remote: w.addrB, LocalPort: binary.BigEndian.Uint16(rec[4:6]) | 1}}
			pk[0].SetData(buf[:n])
			if _, err := third.Send(pk); err != nil {
				t.Fatal(err)
			}
			for range 20 {
				if !w.step() {
					break
				}
			}
			// Answer requests the forgeries made, as an application would (refusing them).
			for {
				req := pollRequest(l)
				if req == nil {
					break
				}
				_ = req.Reject(nil)
			}
		}
		w.runUntil(10*time.Second, "settle", func() bool {
			s := w.gb.Stats()
			return s.ForwardReceived == s.Forwarded
		})
		for i := range qas {
			if qas[i].State() != transport.QPConnected || qbs[i].State() != transport.QPConnected {
				t.Fatalf("pair %d: %v, %v after forgeries from a stranger", i, qas[i].State(), qbs[i].State())
			}
		}
		w.exchange(qas, qbs, 3000)
	})
}

// gfForge writes into b the datagram record rec describes and returns its length (0: none).
// rec: [0] opcode, [1] what DestQPN, the cookie and the ConnID are (a live one, a live one's
// neighbour, or rec's bytes), [2:4] flags, [4:6] source port, [6:10] PSN, [10:18] cookie,
// [18:26] ConnID, [26:58] the other fields, [58] payload length, [59] raw (1: rec's bytes
// as they are, with a CRC; 2: a data packet as the entry of two groups of a multi-QP
// Bundle, gfMulti).
func gfForge(b []byte, rec []byte, qpns []uint32) int {
	sel := rec[1]
	pick := func(k byte) uint32 {
		q := qpns[int(k)%len(qpns)]
		switch (k >> 4) & 3 {
		case 1:
			return q + 1
		case 2:
			return q ^ 2
		case 3:
			return binary.BigEndian.Uint32(rec[26:30])
		}
		return q
	}
	if rec[59]&1 != 0 {
		n := copy(b, rec[:58])
		wire.PutTrailer(b[n:], wire.UpdateCRC(0, b[:n]))
		return n + wire.TrailerLen
	}
	var p wire.Packet
	p.Opcode = gfOps[int(rec[0])%len(gfOps)]
	p.Flags = wire.Flags(binary.BigEndian.Uint16(rec[2:4])) & wire.AllowedFlags(p.Opcode)
	p.Ack.Syndrome = wire.SynAck
	p.DestQPN = pick(sel)
	p.PSN = wire.PSN(binary.BigEndian.Uint32(rec[6:10]))
	p.Cookie = binary.BigEndian.Uint64(rec[10:18])
	if sel&0x40 != 0 {
		p.Cookie = 0
	}
	x := rec[26:58]
	switch p.Opcode {
	case wire.OpSendOnly, wire.OpSendFirst:
		p.Send = wire.SendExt{MSN: binary.BigEndian.Uint32(x), Total: uint32(rec[58]) + uint32(x[4])}
	case wire.OpWrite, wire.OpReadRequest:
		p.RDMA = wire.RDMAExt{Addr: binary.BigEndian.Uint64(x), Token: binary.BigEndian.Uint32(x[8:]), Length: uint32(rec[58]) + 1}
	case wire.OpReadResponse:
		p.ReadResp = wire.ReadRespExt{ReqPSN: wire.PSN(binary.BigEndian.Uint32(x))}
	case wire.OpAck:
		p.Flags &^= wire.FlagAck
		p.PSN = 0
		p.Ack = wire.AckExt{AckPSN: wire.PSN(binary.BigEndian.Uint32(x)), SACK: binary.BigEndian.Uint64(x[4:]),
			Credits: binary.BigEndian.Uint32(x[12:]), Syndrome: wire.Syndrome(x[16] % 7), NakPSN: wire.PSN(binary.BigEndian.Uint32(x[17:]))}
	default: // connection management
		p.CM = wire.CMExt{ServiceID: uint64(x[0] % 9), ConnID: binary.BigEndian.Uint64(rec[18:26]), SrcQPN: pick(x[1]),
			InitialPSN: wire.PSN(binary.BigEndian.Uint32(x[2:])), Cookie: binary.BigEndian.Uint64(x[6:]),
			MaxPayload: binary.BigEndian.Uint16(x[14:]), DataPort: binary.BigEndian.Uint16(x[16:]), Reason: uint16(x[18])}
		if sel&0x80 != 0 {
			p.CM.ConnID = uint64(pick(x[19])) // a live QPN's engine bits
		}
		if p.Opcode == wire.OpConnRequest && sel&0x40 != 0 {
			p.DestQPN = 0
		}
	}
	if rec[59]&2 != 0 && p.Opcode != wire.OpAck && !wire.IsCM(p.Opcode) {
		return gfMulti(b, rec, &p, pick)
	}
	hl, err := wire.Encode(b, &p)
	if err != nil {
		return 0
	}
	n := hl
	if wire.HasPayload(p.Opcode) {
		k := int(rec[58]) % 64
		for i := range k {
			b[n+i] = byte(i)
		}
		n += k
	}
	wire.PutTrailer(b[n:], wire.UpdateCRC(0, b[:n]))
	return n + wire.TrailerLen
}

// gfMulti writes into b a multi-QP Bundle of two groups, each with data packet p as its one
// entry: the first for p's DestQPN and cookie, the second for the QP rec[30] picks with the
// cookie of rec[18:26]; both from the source port of rec[4:6]. It returns its length (0:
// none).
func gfMulti(b []byte, rec []byte, p *wire.Packet, pick func(byte) uint32) int {
	if wire.EncodeHeader(b, &wire.Header{Opcode: wire.OpMultiBundle, TS: p.TS}) != nil {
		return 0
	}
	n := wire.HeaderLen
	k := 0
	if wire.HasPayload(p.Opcode) {
		k = int(rec[58]) % 64
	}
	port := binary.BigEndian.Uint16(rec[4:6]) | 1
	groups := [2]struct {
		qpn    uint32
		cookie uint64
	}{{p.DestQPN, p.Cookie}, {pick(rec[30]), binary.BigEndian.Uint64(rec[18:26])}}
	for _, g := range groups {
		if n+wire.GroupHeaderLen+64+k+wire.TrailerLen > len(b) || wire.EncodeGroup(b[n:], g.qpn, g.cookie, port, 1) != nil {
			return 0
		}
		n += wire.GroupHeaderLen
		w, err := wire.EncodeEntry(b[n:], p, k)
		if err != nil {
			return 0
		}
		n += w
		for i := range k {
			b[n+i] = byte(i)
		}
		n += k
	}
	wire.PutTrailer(b[n:], wire.UpdateCRC(0, b[:n]))
	return n + wire.TrailerLen
}
