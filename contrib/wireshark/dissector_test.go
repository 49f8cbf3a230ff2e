package wireshark

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xdpndk/xdpndk/transport/wire"
)

// The dissector over captures written here from datagrams transport/wire encodes: no
// privilege, no network; tshark is the only tool.

// sample is one datagram of the unit capture.
type sample struct {
	name string
	d    []byte
	info string // a part of the Info column it must show ("" to check nothing)
}

// workedExample is the Write of docs/PROTOCOL.md §8, byte for byte as the page draws it.
var workedExample = []byte{
	0x01, 0x10, 0x00, 0x05, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c,
	0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14,
	0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30,
	0x01, 0x02, 0x03, 0x04,
	0xaa, 0xbb,
	0xa6, 0x75, 0x3e, 0x0c,
}

func hdr(op wire.Opcode, fl wire.Flags, psn wire.PSN) wire.Header {
	return wire.Header{Opcode: op, Flags: fl, DestQPN: 7, PSN: psn, Cookie: 0x1122334455667788, TS: 123456}
}

// ackOf is an AckExt with every field set (a positive ack unless syn says otherwise).
func ackOf(syn wire.Syndrome) wire.AckExt {
	return wire.AckExt{AckPSN: 1235, SACK: 0x2d, Credits: 9, Syndrome: syn, NakPSN: 0, EchoTS: 99, Delay: 12,
		HighPSN: 1300, HighSACK: 0x8000000000000005}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// goodSamples are datagrams wire.Parse accepts: every opcode, flag and extension, and a
// Bundle of each kind of entry.
func goodSamples(t testing.TB) []sample {
	t.Helper()
	var ss []sample
	add := func(name, info string, p wire.Packet, payload []byte) {
		ss = append(ss, sample{name, encode(t, &p, payload), info})
	}
	ss = append(ss, sample{"worked example", workedExample, "Write PSN 84281096 len 2 off 16909060 of 758001456 addr 0x2122232425262728"})

	add("SendFirst", "SendFirst PSN 100 MSN 3 len 1000 off 0 of 2500", wire.Packet{Header: hdr(wire.OpSendFirst, 0, 100),
		Send: wire.SendExt{MSN: 3, Total: 2500}}, pattern(1000, 1))
	add("SendMiddle", "SendMiddle PSN 101", wire.Packet{Header: hdr(wire.OpSendMiddle, wire.FlagRetransmit, 101),
		Send: wire.SendExt{MSN: 3, Offset: 1000, Total: 2500}}, pattern(1000, 2))
	add("SendLast", "SendLast PSN 102 MSN 3 len 500 off 2000 of 2500 [AckReq,Solicited]", wire.Packet{Header: hdr(wire.OpSendLast, wire.FlagAckReq|wire.FlagSolicited, 102),
		Send: wire.SendExt{MSN: 3, Offset: 2000, Total: 2500}}, pattern(500, 3))
	add("SendOnly empty", "SendOnly PSN 103 MSN 4 len 0", wire.Packet{Header: hdr(wire.OpSendOnly, wire.FlagAckReq, 103),
		Send: wire.SendExt{MSN: 4}}, nil)
	add("SendOnly with ack", "SendOnly PSN 104 MSN 5 len 64 +Ack 1235 SACK 1236,1238-1239,1241 high 1300 credits 9", wire.Packet{
		Header: hdr(wire.OpSendOnly, wire.FlagAck|wire.FlagAckReq, 104), Send: wire.SendExt{MSN: 5, Total: 64}, Ack: ackOf(wire.SynAck)}, pattern(64, 4))
	add("SendLastInv", "inv 0xabcdef01", wire.Packet{Header: hdr(wire.OpSendLastInv, wire.FlagAckReq, 105),
		Send: wire.SendExt{MSN: 6, Offset: 10, Total: 20, InvToken: 0xabcdef01}}, pattern(10, 5))
	add("SendOnlyInv", "SendOnlyInv PSN 106 MSN 7 len 20 inv 0x00000042", wire.Packet{Header: hdr(wire.OpSendOnlyInv, wire.FlagSolicited, 106),
		Send: wire.SendExt{MSN: 7, Total: 20, InvToken: 0x42}}, pattern(20, 6))
	add("Write", "Write PSN 107 len 64 addr 0x00007f0000001000 token 0x0000beef", wire.Packet{Header: hdr(wire.OpWrite, wire.FlagAckReq|wire.FlagLast, 107),
		RDMA: wire.RDMAExt{Addr: 0x7f0000001000, Token: 0xbeef, Length: 64}}, pattern(64, 7))
	add("Write middle, retransmitted", "Write PSN 108 len 1400 off 1400 of 8192", wire.Packet{Header: hdr(wire.OpWrite, wire.FlagRetransmit, 108),
		RDMA: wire.RDMAExt{Addr: 0x7f0000002000, Token: 0xbeef, Length: 8192, Offset: 1400}}, pattern(1400, 8))
	add("Write with ack", "+Ack 1235", wire.Packet{Header: hdr(wire.OpWrite, wire.FlagLast|wire.FlagAck, 109),
		RDMA: wire.RDMAExt{Addr: 0x10, Token: 1, Length: 1}, Ack: ackOf(wire.SynAck)}, []byte{0xee})
	add("ReadRequest", "ReadRequest PSN 110 length 65536 addr 0x00007f0000003000 token 0x00001234 [AckReq]", wire.Packet{Header: hdr(wire.OpReadRequest, wire.FlagAckReq, 110),
		RDMA: wire.RDMAExt{Addr: 0x7f0000003000, Token: 0x1234, Length: 65536}}, nil)
	add("ReadResponse", "ReadResponse PSN 5000 req 110 off 1400 len 1400", wire.Packet{Header: hdr(wire.OpReadResponse, wire.FlagAck, 5000),
		ReadResp: wire.ReadRespExt{ReqPSN: 110, Offset: 1400}, Ack: ackOf(wire.SynAck)}, pattern(1400, 9))
	add("ReadResponse last, empty", "ReadResponse PSN 5001 req 111 off 0 len 0 [Last]", wire.Packet{Header: hdr(wire.OpReadResponse, wire.FlagLast, 5001),
		ReadResp: wire.ReadRespExt{ReqPSN: 111}}, nil)
	add("Ack", "Ack 1235 SACK 1236,1238-1239,1241 high 1300 credits 9", wire.Packet{Header: hdr(wire.OpAck, 0, 0), Ack: ackOf(wire.SynAck)}, nil)
	add("Ack probe", "Ack 1235 SACK 1236,1238-1239,1241 high 1300 credits 9 probe", wire.Packet{Header: hdr(wire.OpAck, wire.FlagAckReq, 0), Ack: ackOf(wire.SynAck)}, nil)
	wrap := wire.AckExt{AckPSN: 0xfffffffe, SACK: 0x7, HighPSN: 2, HighSACK: 0x3, Credits: 1}
	add("Ack across the wrap", "Ack 4294967294 SACK 4294967295-1 high 2 credits 1", wire.Packet{Header: hdr(wire.OpAck, 0, 0), Ack: wrap}, nil)
	rnr := ackOf(wire.SynNakRNR)
	rnr.Value, rnr.NakPSN = 10, 1235
	add("NakRNR", "NakRNR PSN 1235 (retry after 160 us) ack 1235", wire.Packet{Header: hdr(wire.OpAck, 0, 0), Ack: rnr}, nil)
	acc := ackOf(wire.SynNakAccess)
	acc.NakPSN = 77
	add("NakAccess", "NakAccess PSN 77", wire.Packet{Header: hdr(wire.OpAck, 0, 0), Ack: acc}, nil)
	for syn := wire.SynNakSeq; syn <= wire.SynNakInvalToken; syn++ {
		if syn != wire.SynNakRNR && syn != wire.SynNakAccess {
			a := ackOf(syn)
			a.NakPSN = 1235
			add(syn.String(), syn.String()+" PSN 1235", wire.Packet{Header: hdr(wire.OpAck, 0, 0), Ack: a}, nil)
		}
	}

	cm := wire.CMExt{ServiceID: 445, ConnID: 0xc0ffee0000000001, SrcQPN: 3, InitialPSN: 0x12345678, MaxPayload: 1472, IRD: 4, ORD: 8, DataPort: 50001}
	req := wire.Packet{Header: wire.Header{Opcode: wire.OpConnRequest, TS: 1}, CM: cm, PrivateData: []byte("hello, listener")}
	req.CM.PrivateLen = uint16(len(req.PrivateData))
	add("ConnRequest", "ConnRequest service 445 conn 0xc0ffee0000000001 QPN 3 PSN 305419896 MaxPayload 1472 IRD 4 ORD 8 port 50001 private 15", req, nil)
	rep := wire.Packet{Header: wire.Header{Opcode: wire.OpConnReply, Flags: wire.FlagRetransmit, DestQPN: 3, Cookie: 0xfeedface12345678, TS: 2}, CM: cm, PrivateData: []byte("welcome")}
	rep.CM.SrcQPN, rep.CM.Cookie, rep.CM.PrivateLen = 9, 0xfeedface12345678, 7
	add("ConnReply", "ConnReply service 445 conn 0xc0ffee0000000001 QPN 9", rep, nil)
	add("ReadyToUse", "ReadyToUse conn 0xc0ffee0000000001 QPN 3", wire.Packet{Header: wire.Header{Opcode: wire.OpReadyToUse, DestQPN: 9, Cookie: 0xfeedface12345678},
		CM: wire.CMExt{ConnID: cm.ConnID, SrcQPN: 3, DataPort: 50001}}, nil)
	rej := wire.Packet{Header: wire.Header{Opcode: wire.OpConnReject}, CM: wire.CMExt{ConnID: cm.ConnID, Reason: 1}, PrivateData: []byte("not today")}
	rej.CM.PrivateLen = 9
	add("ConnReject by the application", "ConnReject conn 0xc0ffee0000000001 reason 1 (rejected by the peer's application", rej, nil)
	add("ConnReject, no listener", "reason 2 (nothing listens on the service)", wire.Packet{Header: wire.Header{Opcode: wire.OpConnReject},
		CM: wire.CMExt{ConnID: 5, Reason: 2}}, nil)
	add("DisconnectReq", "DisconnectReq QPN 3", wire.Packet{Header: wire.Header{Opcode: wire.OpDisconnectReq, DestQPN: 9, Cookie: 0xfeedface12345678},
		CM: wire.CMExt{SrcQPN: 3, DataPort: 50001}}, nil)
	add("DisconnectRep", "DisconnectRep QPN 9", wire.Packet{Header: wire.Header{Opcode: wire.OpDisconnectRep, DestQPN: 3, Cookie: 0xfeedface12345678},
		CM: wire.CMExt{SrcQPN: 9, DataPort: 50002}}, nil)

	mixed := []entry{
		{wire.Packet{Header: hdr(wire.OpWrite, wire.FlagLast|wire.FlagAckReq, 200), RDMA: wire.RDMAExt{Addr: 0x1000, Token: 5, Length: 64}}, pattern(64, 10)},
		{wire.Packet{Header: hdr(wire.OpSendOnly, wire.FlagAck|wire.FlagSolicited, 201), Send: wire.SendExt{MSN: 2, Total: 9}, Ack: ackOf(wire.SynAck)}, pattern(9, 11)},
		{wire.Packet{Header: hdr(wire.OpReadRequest, 0, 202), RDMA: wire.RDMAExt{Addr: 0x2000, Token: 6, Length: 4096}}, nil},
		{wire.Packet{Header: hdr(wire.OpReadResponse, wire.FlagLast, 203), ReadResp: wire.ReadRespExt{ReqPSN: 17}}, pattern(3, 12)},
		{wire.Packet{Header: hdr(wire.OpSendFirst, 0, 204), Send: wire.SendExt{MSN: 3, Total: 10}}, pattern(4, 13)},
	}
	ss = append(ss, sample{"Bundle of each kind", bundle(t, hdr(0, 0, 0), mixed), "Bundle 5 entries: Write x1, SendOnly x1, ReadRequest x1, ReadResponse x1, SendFirst x1 PSN 200-204"})
	var writes []entry
	for i := range 12 {
		writes = append(writes, entry{wire.Packet{Header: hdr(wire.OpWrite, wire.FlagLast|wire.FlagAckReq, wire.PSN(300+i)),
			RDMA: wire.RDMAExt{Addr: uint64(0x4000 + 64*i), Token: 9, Length: 64}}, pattern(64, byte(i))})
	}
	ss = append(ss, sample{"Bundle of 12 Writes", bundle(t, hdr(0, 0, 0), writes), "Bundle 12 entries: Write x12 PSN 300-311"})
	ss = append(ss, sample{"Bundle of one", bundle(t, hdr(0, 0, 0), writes[:1]), "Bundle 1 entry: Write x1 PSN 300"})
	// Acks as entries: a probe first (its PSN 0 is no data PSN), a Write, a NAK.
	nak := ackOf(wire.SynNakSeq)
	nak.NakPSN = 1235
	acks := []entry{
		{wire.Packet{Header: hdr(wire.OpAck, wire.FlagAckReq, 0), Ack: ackOf(wire.SynAck)}, nil},
		writes[0],
		{wire.Packet{Header: hdr(wire.OpAck, 0, 0), Ack: nak}, nil},
	}
	ss = append(ss, sample{"Bundle with Acks", bundle(t, hdr(0, 0, 0), acks), "Bundle 3 entries: Ack x2, Write x1 PSN 300"})
	// Multi-QP Bundles: the entries of three connections, each with its own QPN, cookie and
	// source port; and one group alone.
	onQP := func(es []entry, qpn uint32, cookie uint64) []entry {
		out := append([]entry(nil), es...)
		for i := range out {
			out[i].p.DestQPN, out[i].p.Cookie = qpn, cookie
		}
		return out
	}
	groups := []group{
		{qpn: 0x10203, cookie: 0xaabbccddeeff0011, port: 49200, entries: onQP(mixed[:2], 0x10203, 0xaabbccddeeff0011)},
		{qpn: 7, cookie: 1, port: 65535, entries: onQP(writes[:3], 7, 1)},
		{qpn: 0xffffff, cookie: 0xfedcba9876543210, port: 50000, entries: onQP(mixed[2:], 0xffffff, 0xfedcba9876543210)},
	}
	ss = append(ss, sample{"MultiBundle of three QPs", multiBundle(t, 123456, groups),
		"MultiBundle 8 entries in 3 groups: Write x4, SendOnly x1, ReadRequest x1, ReadResponse x1, SendFirst x1 QPN 66051,7,16777215"})
	ss = append(ss, sample{"MultiBundle of one group", multiBundle(t, 123456, groups[1:2]), "MultiBundle 3 entries in 1 group: Write x3 QPN 7"})
	// The acknowledgements of three QPs in one datagram, as many QPs to one peer send them.
	var ackGroups []group
	for i, g := range groups {
		ackGroups = append(ackGroups, group{qpn: g.qpn, cookie: g.cookie, port: g.port, entries: onQP(acks[2*(i%2):2*(i%2)+1], g.qpn, g.cookie)})
	}
	ss = append(ss, sample{"MultiBundle of Acks", multiBundle(t, 123456, ackGroups), "MultiBundle 3 entries in 3 groups: Ack x3 QPN 66051,7,16777215"})
	return ss
}

// corrupt returns a copy of d with f applied and, unless keepCRC, the trailer fixed.
func corrupt(d []byte, keepCRC bool, f func(b []byte) []byte) []byte {
	b := f(append([]byte(nil), d...))
	if !keepCRC {
		fixCRC(b)
	}
	return b
}

// malformedSamples break every check of docs/PROTOCOL.md §9 once, each with a part of the
// message the dissector must flag it with.
func malformedSamples(t testing.TB) []sample {
	t.Helper()
	good := map[string][]byte{}
	for _, s := range goodSamples(t) {
		good[s.name] = s.d
	}
	put32 := func(off int, v uint32) func([]byte) []byte {
		return func(b []byte) []byte { binary.BigEndian.PutUint32(b[off:], v); return b }
	}
	put16 := func(off int, v uint16) func([]byte) []byte {
		return func(b []byte) []byte { binary.BigEndian.PutUint16(b[off:], v); return b }
	}
	put8 := func(off int, v byte) func([]byte) []byte {
		return func(b []byte) []byte { b[off] = v; return b }
	}
	cut := func(n int) func([]byte) []byte { return func(b []byte) []byte { return append(b[:n], 0, 0, 0, 0) } }
	grow := func(extra ...byte) func([]byte) []byte {
		return func(b []byte) []byte { return append(append(b[:len(b)-4:len(b)-4], extra...), 0, 0, 0, 0) }
	}
	type m struct {
		name, from string
		f          func([]byte) []byte
		msg        string
	}
	const e1 = wire.HeaderLen // the first entry of a Bundle
	const g1 = wire.HeaderLen // the first group of a multi-QP Bundle
	cases := []m{
		{"20 bytes", "Write", func(b []byte) []byte { return b[:20] }, "shorter than a header and a trailer"},
		{"version 2", "Write", put8(0, 2), "version 2, not 1"},
		{"version 0", "Ack", put8(0, 0), "version 0, not 1"},
		{"opcode 0x07", "SendOnly empty", put8(1, 0x07), "opcode 0x07 is not defined"},
		{"Write cut in its extension", "Write", cut(30), "too short for Write"},
		{"piggybacked ack cut", "SendOnly with ack", cut(50), "too short for SendOnly's header, extension, AckExt"},
		{"Write with Solicited", "Write", put16(2, uint16(wire.FlagSolicited)), "not allowed on Write"},
		{"reserved flag", "SendOnly empty", put16(2, 0x0020), "flags 0x0020 not allowed"},
		{"Ack with Last", "Ack", put16(2, uint16(wire.FlagLast)), "not allowed on Ack"},
		{"CM with AckReq", "ConnRequest", put16(2, uint16(wire.FlagAckReq)), "not allowed on ConnRequest"},
		{"Send Total over 2^31", "SendFirst", put32(32, 1<<31+1), "Total over 2^31"},
		{"SendOnlyInv with token 0", "SendOnlyInv", put32(36, 0), "with Invalidate Token 0"},
		{"SendOnly with a token", "SendOnly empty", put32(36, 5), "non-zero Invalidate Token"},
		{"SendOnly at an offset", "SendOnly with ack", put32(28, 1), "SendOnly with Offset not 0"},
		{"SendMiddle at offset 0", "SendMiddle", put32(28, 0), "SendMiddle with Offset 0"},
		{"SendOnly short of Total", "SendOnly with ack", put32(32, 65), "!= Total"},
		{"SendFirst reaching Total", "SendFirst", put32(32, 1000), "not below Total"},
		{"SendLast empty", "SendLast", cut(40), "SendLast with an empty payload"},
		{"Write past its Length", "Write", put32(36, 63), "over Length 63"},
		{"ReadRequest of 0 bytes", "ReadRequest", put32(36, 0), "ReadRequest of Length 0"},
		{"ReadRequest at an offset", "ReadRequest", put32(40, 4), "ReadRequest with Offset not 0"},
		{"ReadRequest with a payload", "ReadRequest", grow(1, 2, 3), "ReadRequest with 3 bytes after its extension"},
		{"ReadResponse past 2^32-1", "ReadResponse", put32(28, 0xffffffff), "Offset + payload over 2^32-1"},
		{"Ack with a PSN", "Ack", put32(8, 5), "Ack with PSN not 0"},
		{"syndrome 7", "Ack", put8(40, 7), "syndrome 7 is not defined"},
		{"Ack reserved byte", "Ack", put8(41, 1), "reserved byte is not 0"},
		{"Ack with trailing bytes", "Ack", grow(9), "Ack with 1 bytes after its extension"},
		{"piggybacked NAK", "Write with ack", put8(44+16, byte(wire.SynNakRNR)), "piggybacked AckExt must be a positive ack"},
		{"PrivateLen 197", "ConnRequest", put16(64, 197), "PrivateLen 197 over 196"},
		{"PrivateLen short", "ConnRequest", put16(64, 3), "PrivateLen 3 but 15 bytes"},
		{"ConnRequest with ConnID 0", "ConnRequest", func(b []byte) []byte { clear(b[32:40]); return b }, "ConnRequest with Connection ID 0"},
		{"ConnReject with ConnID 0", "ConnReject, no listener", func(b []byte) []byte { clear(b[32:40]); return b }, "ConnReject with Connection ID 0"},
		{"Bundle with a PSN", "Bundle of one", put32(8, 1), "Bundle with PSN not 0"},
		{"Bundle with a flag", "Bundle of one", put16(2, uint16(wire.FlagAckReq)), "not allowed on Bundle (allowed: none)"},
		{"Bundle without entries", "Bundle of one", func(b []byte) []byte { return append(b[:e1], 0, 0, 0, 0) }, "Bundle without entries"},
		{"Bundle entry a ConnReply", "Bundle of one", put8(e1+2, byte(wire.OpConnReply)), "opcode 0x41 (ConnReply) is neither a data opcode nor Ack"},
		{"Bundle entry unknown", "Bundle of one", put8(e1+2, 0x77), "opcode 0x77 (unknown) is neither a data opcode nor Ack"},
		{"Bundle Ack entry with a PSN", "Bundle with Acks", put32(e1+4, 5), "Ack with PSN not 0"},
		{"Bundle Ack entry with a payload", "Bundle of one", put8(e1+2, byte(wire.OpAck)), "bytes after its extension"},
		{"Bundle entry past the end", "Bundle of 12 Writes", put16(e1, 2000), "runs past the datagram"},
		{"Bundle entry short of its extension", "Bundle of one", func(b []byte) []byte {
			binary.BigEndian.PutUint16(b[e1:], 12)
			return append(b[:e1+8+12], 0, 0, 0, 0)
		}, "shorter than its extension (20)"},
		{"Bundle entry short of its AckExt", "Bundle of each kind", func(b []byte) []byte {
			// The second entry (a SendOnly with Ack) cut to its SendExt and half an AckExt.
			o := e1 + 8 + 20 + 64
			binary.BigEndian.PutUint16(b[o:], 16+20)
			return append(b[:o+8+16+20], 0, 0, 0, 0)
		}, "shorter than its extension and AckExt (60)"},
		{"Bundle with trailing bytes", "Bundle of one", grow(1, 2, 3), "3 bytes after the last entry"},
		{"Bundle entry with Solicited on a Write", "Bundle of one", put8(e1+3, byte(wire.FlagSolicited|wire.FlagLast)), "flags 0x0002 not allowed on Write"},
		{"Bundle entry with a bad Send", "Bundle of each kind", put32(e1+8+20+64+8+12, 1), "non-zero Invalidate Token"},
		{"Bundle entry Write past its Length", "Bundle of one", put32(e1+8+12, 10), "over Length 10"},
		{"MultiBundle with a PSN", "MultiBundle of one group", put32(8, 1), "MultiBundle with PSN not 0"},
		{"MultiBundle with a DestQPN", "MultiBundle of one group", put32(4, 9), "MultiBundle with DestQPN not 0"},
		{"MultiBundle with a Cookie", "MultiBundle of one group", put8(19, 1), "MultiBundle with Cookie not 0"},
		{"MultiBundle with a flag", "MultiBundle of one group", put16(2, uint16(wire.FlagAckReq)), "not allowed on MultiBundle (allowed: none)"},
		{"MultiBundle without groups", "MultiBundle of one group", func(b []byte) []byte { return append(b[:g1], 0, 0, 0, 0) }, "MultiBundle without groups"},
		{"MultiBundle group of no entry", "MultiBundle of one group", put16(g1+14, 0), "group of no entry"},
		{"MultiBundle group longer than the datagram", "MultiBundle of one group", put16(g1+14, 4), "group announces 4 entries, 3 follow"},
		{"MultiBundle with trailing bytes", "MultiBundle of one group", grow(1, 2, 3), "too few for a group header"},
		{"MultiBundle group short of an entry header", "MultiBundle of one group", func(b []byte) []byte {
			return append(append(b[:len(b)-4:len(b)-4], 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3), 0, 0, 0, 0)
		}, "too few for an entry header"},
		{"MultiBundle entry a ConnReply", "MultiBundle of three QPs", put8(g1+wire.GroupHeaderLen+2, byte(wire.OpConnReply)), "opcode 0x41 (ConnReply) is neither a data opcode nor Ack"},
		{"MultiBundle Ack entry with a PSN", "MultiBundle of Acks", put32(g1+wire.GroupHeaderLen+4, 5), "Ack with PSN not 0"},
		{"MultiBundle entry past the end", "MultiBundle of one group", put16(g1+wire.GroupHeaderLen, 2000), "runs past the datagram"},
		{"MultiBundle entry Write past its Length", "MultiBundle of one group", put32(g1+wire.GroupHeaderLen+8+12, 10), "over Length 10"},
	}
	var ss []sample
	for _, c := range cases {
		d, ok := good[c.from]
		if !ok {
			t.Fatalf("%s: no sample %q", c.name, c.from)
		}
		ss = append(ss, sample{c.name, corrupt(d, false, c.f), c.msg})
	}
	return ss
}

// TestDissectorDecodesEveryPacket: every good sample decodes with each field equal to what
// wire.Parse reads, the trailer correct, nothing flagged, and the Info column it should
// show; the worked example of docs/PROTOCOL.md §8 is what wire.Encode writes.
func TestDissectorDecodesEveryPacket(t *testing.T) {
	needTshark(t)
	p := wire.Packet{Header: wire.Header{Opcode: wire.OpWrite, Flags: wire.FlagAckReq | wire.FlagLast, DestQPN: 0x01020304,
		PSN: 0x05060708, Cookie: 0x090a0b0c0d0e0f10, TS: 0x11121314},
		RDMA: wire.RDMAExt{Addr: 0x2122232425262728, Token: 0x292a2b2c, Length: 0x2d2e2f30, Offset: 0x01020304}}
	if got := encode(t, &p, []byte{0xaa, 0xbb}); !bytes.Equal(got, workedExample) {
		t.Fatalf("the worked example as wire.Encode writes it:\n% x\nwant\n% x", got, workedExample)
	}

	ss := goodSamples(t)
	w := newPcap()
	for i, s := range ss {
		src, dst := netip.AddrPortFrom(hostA, 49152+uint16(i)), netip.AddrPortFrom(hostB, udpPort)
		if i%2 == 1 {
			src, dst = netip.AddrPortFrom(hostB, 60000), netip.AddrPortFrom(hostA, udpPort)
		}
		w.add(udpFrame(t, src, dst, s.d), -1)
	}
	// The same datagrams over IPv6.
	for _, s := range ss {
		w.add(udpFrame(t, netip.AddrPortFrom(hostA6, 50000), netip.AddrPortFrom(hostB6, udpPort), s.d), -1)
	}
	file := filepath.Join(t.TempDir(), "good.pcap")
	w.write(t, file)

	pkts := decode(t, file)
	infos := infoColumns(t, file)
	if len(pkts) != 2*len(ss) || len(infos) != 2*len(ss) {
		t.Fatalf("tshark read %d packets and %d Info columns, want %d", len(pkts), len(infos), 2*len(ss))
	}
	for i := range pkts {
		s := ss[i%len(ss)]
		if diffs := compare(pkts[i].proto("xdpndk"), s.d); len(diffs) > 0 {
			t.Errorf("frame %d (%s): %s", i+1, s.name, strings.Join(diffs, "; "))
		}
		if !strings.Contains(infos[i], s.info) {
			t.Errorf("frame %d (%s): Info %q, want it to contain %q", i+1, s.name, infos[i], s.info)
		}
		if strings.Contains(infos[i], "malformed") || strings.Contains(infos[i], "bad CRC") {
			t.Errorf("frame %d (%s): Info %q", i+1, s.name, infos[i])
		}
	}
	// The notes a reader looks for: a NAK and a reject are expert infos, a NAK also as a
	// Bundle's entry (the two samples of Acks carry one).
	for i, s := range ss {
		x := &pkts[i]
		nak := len(x.experts("xdpndk.nak")) > 0
		if want := strings.HasPrefix(s.name, "Nak") || strings.Contains(s.name, "Acks"); nak != want {
			t.Errorf("%s: NAK expert info %v, want %v", s.name, nak, want)
		}
		reject := len(x.experts("xdpndk.reject")) > 0
		if want := strings.HasPrefix(s.name, "ConnReject"); reject != want {
			t.Errorf("%s: reject expert info %v, want %v", s.name, reject, want)
		}
	}
	t.Logf("%d datagrams decoded over IPv4 and IPv6, each field equal to wire.Parse's", len(ss))
}

// TestDissectorFlagsMalformed: each datagram that breaks one check of §9 is refused by
// wire.Parse and flagged malformed by the dissector with the check it fails, its CRC
// found correct; a datagram whose only fault is its trailer is flagged as a bad CRC alone;
// the check value of 32 zero bytes (§8) is a correct trailer; a datagram cut by the
// capture's snap length is reported as such.
func TestDissectorFlagsMalformed(t *testing.T) {
	needTshark(t)
	ss := malformedSamples(t)
	w := newPcap()
	for _, s := range ss {
		var p wire.Packet
		if err := wire.Parse([][]byte{s.d}, &p); err == nil || errors.Is(err, wire.ErrCRC) {
			t.Errorf("%s: wire.Parse: %v, want a refusal other than the CRC", s.name, err)
		}
		w.add(udpFrame(t, netip.AddrPortFrom(hostA, 50000), netip.AddrPortFrom(hostB, udpPort), s.d), -1)
	}
	badCRC := corrupt(workedExample, true, func(b []byte) []byte { b[len(b)-1] ^= 0x01; return b })
	w.add(udpFrame(t, netip.AddrPortFrom(hostA, 50000), netip.AddrPortFrom(hostB, udpPort), badCRC), -1)
	badPayload := corrupt(workedExample, true, func(b []byte) []byte { b[44] ^= 0x80; return b })
	w.add(udpFrame(t, netip.AddrPortFrom(hostA, 50000), netip.AddrPortFrom(hostB, udpPort), badPayload), -1)
	zeros := append(make([]byte, 32), 0x8a, 0x91, 0x36, 0xaa)
	w.add(udpFrame(t, netip.AddrPortFrom(hostA, 50000), netip.AddrPortFrom(hostB, udpPort), zeros), -1)
	whole := udpFrame(t, netip.AddrPortFrom(hostA, 50000), netip.AddrPortFrom(hostB, udpPort), workedExample)
	w.add(whole, len(whole)-10)
	file := filepath.Join(t.TempDir(), "malformed.pcap")
	w.write(t, file)

	pkts := decode(t, file)
	infos := infoColumns(t, file)
	if len(pkts) != len(ss)+4 || len(infos) != len(pkts) {
		t.Fatalf("tshark read %d packets and %d Info columns, want %d", len(pkts), len(infos), len(ss)+4)
	}
	crcStatus := func(p *pdmlPacket) string {
		if c := p.whole().all("xdpndk.crc.status"); len(c) == 1 {
			return c[0].Show
		}
		return "none"
	}
	for i, s := range ss {
		p := &pkts[i]
		msgs := p.experts("xdpndk.malformed")
		found := false
		for _, m := range msgs {
			found = found || strings.Contains(m, s.info)
		}
		if !found {
			t.Errorf("%s: malformed expert infos %q, want one containing %q", s.name, msgs, s.info)
		}
		if !strings.Contains(infos[i], "[malformed: ") {
			t.Errorf("%s: Info %q does not say malformed", s.name, infos[i])
		}
		if len(s.d) >= 28 && crcStatus(p) != "1" {
			t.Errorf("%s: CRC status %s, want 1 (good)", s.name, crcStatus(p))
		}
		if len(p.experts("xdpndk.crc.bad")) > 0 {
			t.Errorf("%s: flagged as a bad CRC", s.name)
		}
	}
	for k, name := range []string{"bad trailer", "bad payload byte"} {
		p := &pkts[len(ss)+k]
		if len(p.experts("xdpndk.crc.bad")) != 1 || crcStatus(p) != "0" || !strings.Contains(infos[len(ss)+k], "[bad CRC]") {
			t.Errorf("%s: CRC expert infos %q, status %s, Info %q; want one, 0 (bad), [bad CRC]", name, p.experts("xdpndk.crc.bad"), crcStatus(p), infos[len(ss)+k])
		}
		if m := p.experts("xdpndk.malformed"); len(m) > 0 {
			t.Errorf("%s: flagged malformed too: %q", name, m)
		}
	}
	z := &pkts[len(ss)+2]
	if crcStatus(z) != "1" || len(z.experts("xdpndk.malformed")) == 0 {
		t.Errorf("32 zero bytes and their check value: CRC status %s, malformed %q; want 1 (good) and malformed (version 0)", crcStatus(z), z.experts("xdpndk.malformed"))
	}
	cutp := &pkts[len(ss)+3]
	if len(cutp.experts("xdpndk.truncated")) != 1 || crcStatus(cutp) != "none" || len(cutp.experts("xdpndk.malformed")) > 0 {
		t.Errorf("datagram cut by the snap length: truncated %q, CRC status %s, malformed %q; want one note, no CRC verdict, nothing malformed",
			cutp.experts("xdpndk.truncated"), crcStatus(cutp), cutp.experts("xdpndk.malformed"))
	}
}

// TestDissectorPort: the dissector takes UDP port 4793 by default and the port preference
// instead when set; the heuristic finds datagrams on any other port by their CRC, and its
// preference turns it off.
func TestDissectorPort(t *testing.T) {
	needTshark(t)
	w := newPcap()
	w.add(udpFrame(t, netip.AddrPortFrom(hostA, 50000), netip.AddrPortFrom(hostB, 4793), workedExample), -1)
	w.add(udpFrame(t, netip.AddrPortFrom(hostA, 50000), netip.AddrPortFrom(hostB, 5000), workedExample), -1)
	// A datagram on another port that is not ours: the heuristic must leave it alone.
	w.add(udpFrame(t, netip.AddrPortFrom(hostA, 50000), netip.AddrPortFrom(hostB, 5000), corrupt(workedExample, true,
		func(b []byte) []byte { b[len(b)-1] ^= 1; return b })), -1)
	file := filepath.Join(t.TempDir(), "ports.pcap")
	w.write(t, file)
	for _, c := range []struct {
		name string
		args []string
		want [3]bool
	}{
		{"defaults", nil, [3]bool{true, true, false}},
		{"heuristic off", []string{"-o", "xdpndk.heuristic:FALSE"}, [3]bool{true, false, false}},
		{"port 5000, heuristic off", []string{"-o", "xdpndk.heuristic:FALSE", "-o", "xdpndk.port:5000"}, [3]bool{false, true, true}},
	} {
		pkts := decode(t, file, c.args...)
		if len(pkts) != 3 {
			t.Fatalf("%s: %d packets", c.name, len(pkts))
		}
		for i := range pkts {
			if got := pkts[i].proto("xdpndk") != nil; got != c.want[i] {
				t.Errorf("%s: frame %d decoded as xdpndk: %v, want %v", c.name, i+1, got, c.want[i])
			}
		}
	}
}

// mutate returns a variant of d from the seeded rng: bytes changed, the datagram cut or
// extended, a length field or an entry length pushed to an edge, the trailer fixed most of
// the time so that the checks after it are reached.
func mutate(rng *rand.Rand, d []byte) []byte {
	b := append([]byte(nil), d...)
	for range 1 + rng.IntN(3) {
		switch rng.IntN(7) {
		case 0, 1: // one byte changed
			b[rng.IntN(len(b))] = byte(rng.UintN(256))
		case 2: // one bit flipped
			b[rng.IntN(len(b))] ^= 1 << rng.IntN(8)
		case 3: // cut
			b = b[:1+rng.IntN(len(b))]
		case 4: // extended
			for range 1 + rng.IntN(8) {
				b = append(b, byte(rng.UintN(256)))
			}
		case 5: // a 16-bit field at an edge (entry lengths, PrivateLen, flags)
			if len(b) >= 2 {
				o := rng.IntN(len(b) - 1)
				v := []uint16{0, 1, 0xffff, 0x8000, uint16(len(b)), uint16(len(b) - 28)}[rng.IntN(6)]
				binary.BigEndian.PutUint16(b[o:], v)
			}
		case 6: // a 32-bit field at an edge
			if len(b) >= 4 {
				o := rng.IntN(len(b) - 3)
				v := []uint32{0, 1, 0xffffffff, 1 << 31, 1<<31 + 1}[rng.IntN(5)]
				binary.BigEndian.PutUint32(b[o:], v)
			}
		}
		if len(b) == 0 {
			b = []byte{1}
		}
	}
	if rng.IntN(10) < 8 {
		fixCRC(b)
	}
	return b
}

// TestDissectorAgreesWithParse feeds the dissector a seeded corpus of mutated datagrams (a
// fuzz corpus run once through tshark) and requires, for every one, no Lua error, a
// malformed verdict exactly when wire.Parse refuses the datagram with its trailer fixed,
// and a bad-CRC verdict exactly when the trailer is wrong (for datagrams of at least 28
// bytes; shorter ones have no trailer to check).
func TestDissectorAgreesWithParse(t *testing.T) {
	needTshark(t)
	const perSample = 40
	rng := rand.New(rand.NewPCG(4793, 2))
	var corpus [][]byte
	for _, s := range append(goodSamples(t), malformedSamples(t)...) {
		corpus = append(corpus, s.d)
		for range perSample {
			corpus = append(corpus, mutate(rng, s.d))
		}
	}
	w := newPcap()
	for _, d := range corpus {
		w.add(udpFrame(t, netip.AddrPortFrom(hostA, 50000), netip.AddrPortFrom(hostB, udpPort), d), -1)
	}
	file := filepath.Join(t.TempDir(), "mutated.pcap")
	w.write(t, file)
	pkts := decode(t, file)
	if len(pkts) != len(corpus) {
		t.Fatalf("tshark read %d packets, want %d", len(pkts), len(corpus))
	}
	var accepted, refused, badCRC, failures int
	for i, d := range corpus {
		fixed := append([]byte(nil), d...)
		fixCRC(fixed)
		var p wire.Packet
		errFixed := wire.Parse([][]byte{fixed}, &p)
		wantMalformed := errFixed != nil
		wantBadCRC := len(d) >= 28 && !bytes.Equal(d[len(d)-4:], fixed[len(d)-4:])
		x := pkts[i].proto("xdpndk")
		if x == nil {
			t.Errorf("frame %d (% x): not decoded as xdpndk", i+1, d)
			failures++
			continue
		}
		gotMalformed := len(pkts[i].experts("xdpndk.malformed")) > 0
		gotBadCRC := len(pkts[i].experts("xdpndk.crc.bad")) > 0
		if gotMalformed != wantMalformed || gotBadCRC != wantBadCRC {
			failures++
			if failures <= 20 {
				t.Errorf("frame %d (% x): malformed %v (%q), bad CRC %v; wire.Parse (trailer fixed): %v, trailer wrong: %v",
					i+1, d, gotMalformed, pkts[i].experts("xdpndk.malformed"), gotBadCRC, errFixed, wantBadCRC)
			}
		}
		if errFixed == nil && !wantBadCRC {
			// Accepted by wire.Parse as it is: every field as Parse reads it.
			if diffs := compare(x, d); len(diffs) > 0 {
				failures++
				if failures <= 20 {
					t.Errorf("frame %d (% x): %s", i+1, d, strings.Join(diffs, "; "))
				}
			}
		}
		switch {
		case wantBadCRC:
			badCRC++
		case errFixed == nil:
			accepted++
		default:
			refused++
		}
	}
	t.Logf("%d datagrams: %d accepted by wire.Parse, %d refused, %d with a wrong trailer; %d disagreements",
		len(corpus), accepted, refused, badCRC, failures)
	if accepted == 0 || refused == 0 || badCRC == 0 {
		t.Errorf("the corpus does not cover every verdict: %d accepted, %d refused, %d bad CRC", accepted, refused, badCRC)
	}
}
