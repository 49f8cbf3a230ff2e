package transport

import (
	"net/netip"
	"testing"

	"github.com/xdpndk/xdpndk/transport/wire"
)

// TestPackBounds: the transmit batch packs the small packets of several QPs to one peer
// into groups, never past the smallest datagram size of the QPs in a bundle; two QPs that
// share a source port are two groups; a packet to another peer closes the bundle; each
// datagram leaves as the smallest form that holds it, from its first group's source port,
// and reads back as exactly the packets packed, in order.
func TestPackBounds(t *testing.T) {
	var ctr engineCounters
	tx := &txBatch{ctr: &ctr}
	for i := range tx.bounce {
		tx.bounce[i] = make([]byte, bounceLen(1500))
	}
	peer := netip.MustParseAddrPort("198.18.0.2:4793")
	other := netip.MustParseAddrPort("198.18.0.3:4793")
	type qp struct {
		qpn    uint32
		cookie uint64
		port   uint16
		limit  int
		to     netip.AddrPort
	}
	qps := []qp{
		{qpn: 11, cookie: 0x1111, port: 50001, limit: 1496, to: peer},
		{qpn: 12, cookie: 0x2222, port: 50001, limit: 1496, to: peer}, // the same source port as 11
		{qpn: 13, cookie: 0x3333, port: 50003, limit: 600, to: peer},  // a smaller datagram
		{qpn: 14, cookie: 0x4444, port: 50004, limit: 1496, to: other},
	}
	type sent struct {
		qpn  uint32
		psn  wire.PSN
		port uint16
	}
	var want []sent
	payload := make([]byte, 64)
	psn := wire.PSN(100)
	seq := []int{0, 0, 1, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 0, 3, 2}
	for _, i := range seq {
		q := qps[i]
		p := wire.Packet{Header: wire.Header{Opcode: wire.OpWrite, Flags: wire.FlagLast, DestQPN: q.qpn, PSN: psn, Cookie: q.cookie, TS: 5},
			RDMA: wire.RDMAExt{Addr: 0x1000, Token: 1, Length: 64}}
		if !tx.pack(q.to, q.port, &p, 64, payload, nil, q.limit) {
			t.Fatal("pack refused")
		}
		want = append(want, sent{q.qpn, psn, q.port})
		psn++
	}
	tx.closeBundle()
	limits := map[uint32]int{}
	for _, q := range qps {
		limits[q.qpn] = q.limit
	}
	var got []sent
	forms := map[wire.Opcode]int{}
	for i := range tx.pkts[:tx.n] {
		pk := &tx.pkts[i]
		var raw []byte
		for _, s := range pk.Segs[:pk.NSegs] {
			raw = append(raw, s...)
		}
		var p wire.Packet
		if err := wire.Parse([][]byte{raw}, &p); err != nil {
			t.Fatalf("datagram %d does not parse: %v", i, err)
		}
		forms[p.Opcode]++
		var ds []sent
		if p.Opcode == wire.OpWrite {
			ds = append(ds, sent{p.DestQPN, p.PSN, pk.LocalPort})
		} else {
			it := p.Entries()
			var e wire.Packet
			for it.Next(&e) {
				port := it.SourcePort()
				if p.Opcode == wire.OpBundle {
					port = pk.LocalPort
				}
				ds = append(ds, sent{e.DestQPN, e.PSN, port})
			}
		}
		if pk.LocalPort != ds[0].port {
			t.Errorf("datagram %d leaves from port %d, its first entry's QP sends from %d", i, pk.LocalPort, ds[0].port)
		}
		for _, d := range ds {
			if len(raw)-wire.TrailerLen > limits[d.qpn] {
				t.Errorf("datagram %d: %d bytes before the trailer, past QP %d's %d", i, len(raw)-wire.TrailerLen, d.qpn, limits[d.qpn])
			}
			if want := qps[0].to; d.qpn != 14 && pk.Remote != want || d.qpn == 14 && pk.Remote != other {
				t.Errorf("datagram %d to %v carries QP %d", i, pk.Remote, d.qpn)
			}
		}
		if p.Opcode == wire.OpBundle {
			for _, d := range ds {
				if d.qpn != p.DestQPN {
					t.Errorf("a Bundle for QP %d carries an entry of QP %d", p.DestQPN, d.qpn)
				}
			}
		}
		got = append(got, ds...)
	}
	if len(got) != len(want) {
		t.Fatalf("%d packets read back, %d packed", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("packet %d read back as %+v, packed %+v", i, got[i], want[i])
		}
	}
	if forms[wire.OpMultiBundle] == 0 || forms[wire.OpBundle] == 0 || forms[wire.OpWrite] == 0 {
		t.Fatalf("forms %v: want each of plain, Bundle, multi-QP Bundle", forms)
	}
	t.Logf("%d packets in %d datagrams: %v", len(want), tx.n, forms)
}
