package transport_test

import (
	"github.com/xdpndk/xdpndk/transport/link"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// Test taps that judge or alter the packets an engine sends one at a time (drop this Send,
// rewrite that field) see a Bundle as the packets it carries: unbundlePorts turns it into the
// plain datagrams that carry each entry alone (what the engine sends when it packs
// nothing), so that a test about one packet still is. Packing itself is tested on the
// wire in bundle_test.go.

// unbundlePorts returns the datagrams pk stands for: its own bytes, or, for a Bundle or
// multi-QP Bundle, one plain datagram per entry, in order; and the UDP source port each
// would leave from: pk's, or for an entry of a multi-QP Bundle its group's.
func unbundlePorts(pk *link.Packet) ([][]byte, []uint16) {
	var raw []byte
	for _, s := range pk.Segs[:min(int(pk.NSegs), link.MaxSegments)] {
		raw = append(raw, s...)
	}
	var p wire.Packet
	if wire.Parse([][]byte{raw}, &p) != nil || p.Opcode != wire.OpBundle && p.Opcode != wire.OpMultiBundle {
		return [][]byte{raw}, []uint16{pk.LocalPort}
	}
	var out [][]byte
	var ports []uint16
	it := p.Entries()
	var e wire.Packet
	for it.Next(&e) {
		b := make([]byte, wire.HeaderLen+wire.RDMAExtLen+wire.AckExtLen+e.PayloadLen()+wire.TrailerLen)
		n, err := wire.Encode(b, &e)
		if err != nil {
			panic("unbundle: an entry does not encode: " + err.Error())
		}
		for _, v := range e.Payload[:e.NPayload] {
			n += copy(b[n:], v)
		}
		wire.PutTrailer(b[n:], wire.UpdateCRC(0, b[:n]))
		out = append(out, b[:n+wire.TrailerLen])
		port := pk.LocalPort
		if p.Opcode == wire.OpMultiBundle {
			port = it.SourcePort()
		}
		ports = append(ports, port)
	}
	return out, ports
}

// unbundled returns pkts with every Bundle replaced by the plain datagrams of its entries,
// and for each packet returned the index of the packet of pkts it came from.
func unbundled(pkts []link.Packet) ([]link.Packet, []int) {
	var out []link.Packet
	var from []int
	for i := range pkts {
		ds, ports := unbundlePorts(&pkts[i])
		if len(ds) == 1 && pkts[i].NSegs > 0 {
			out = append(out, pkts[i])
			from = append(from, i)
			continue
		}
		for j, d := range ds {
			pk := link.Packet{Remote: pkts[i].Remote, LocalPort: ports[j]}
			pk.SetData(d)
			out = append(out, pk)
			from = append(from, i)
		}
	}
	return out, from
}
