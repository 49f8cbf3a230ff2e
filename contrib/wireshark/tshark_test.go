package wireshark

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/privileged"
	"github.com/xdpndk/xdpndk/transport/wire"
	"github.com/xdpndk/xdpndk/xdp/frame"
)

// What the tests share: a pcap writer, datagram encoders, tshark with the dissector loaded,
// its PDML output as a tree, and the comparison of a decoded datagram with what wire.Parse
// reads from the same bytes.

// script returns the absolute path of the dissector under test (this package's directory is
// the working directory of its tests).
func script(t testing.TB) string {
	t.Helper()
	p, err := filepath.Abs("xdpndk.lua")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// needTshark returns tshark's path, or skips t without it (fails under
// XDPNDK_REQUIRE_PRIVILEGED=1, as CI runs: a missing tool must not hide the tests there).
func needTshark(t testing.TB) string { return privileged.Tool(t, "tshark", "tshark") }

// pcapWriter builds a classic pcap file (microsecond timestamps, Ethernet link type).
type pcapWriter struct {
	buf bytes.Buffer
	n   int
}

func newPcap() *pcapWriter {
	w := &pcapWriter{}
	var h [24]byte
	binary.LittleEndian.PutUint32(h[0:4], 0xa1b2c3d4)
	binary.LittleEndian.PutUint16(h[4:6], 2)
	binary.LittleEndian.PutUint16(h[6:8], 4)
	binary.LittleEndian.PutUint32(h[16:20], 262144) // snap length
	binary.LittleEndian.PutUint32(h[20:24], 1)      // LINKTYPE_ETHERNET
	w.buf.Write(h[:])
	return w
}

// add appends a frame whose first capLen bytes were captured (capLen < 0: all of them).
func (w *pcapWriter) add(f []byte, capLen int) {
	if capLen < 0 || capLen > len(f) {
		capLen = len(f)
	}
	var h [16]byte
	binary.LittleEndian.PutUint32(h[0:4], uint32(1700000000+w.n/1000))
	binary.LittleEndian.PutUint32(h[4:8], uint32(w.n%1000)*1000)
	binary.LittleEndian.PutUint32(h[8:12], uint32(capLen))
	binary.LittleEndian.PutUint32(h[12:16], uint32(len(f)))
	w.buf.Write(h[:])
	w.buf.Write(f[:capLen])
	w.n++
}

func (w *pcapWriter) write(t testing.TB, path string) {
	t.Helper()
	if err := os.WriteFile(path, w.buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Addresses of the frames the unit tests write (198.18.0.0/15, the benchmarking range; the
// frames only ever exist in a file).
var (
	hostA   = netip.MustParseAddr("198.18.0.1")
	hostB   = netip.MustParseAddr("198.18.0.2")
	hostA6  = netip.MustParseAddr("2001:2::1") // RFC 5180's benchmarking prefix
	hostB6  = netip.MustParseAddr("2001:2::2")
	udpPort = uint16(4793) // xdp.DefaultPort, the dissector's default
)

// udpFrame returns an Ethernet frame carrying payload in a UDP datagram from src to dst,
// with correct IP and UDP checksums.
func udpFrame(t testing.TB, src, dst netip.AddrPort, payload []byte) []byte {
	t.Helper()
	e := frame.Encap{SrcMAC: [6]byte{0x02, 0, 0, 0, 0, 1}, DstMAC: [6]byte{0x02, 0, 0, 0, 0, 2},
		Src: src.Addr(), Dst: dst.Addr(), SrcPort: src.Port(), DstPort: dst.Port()}
	if err := e.Validate(); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, e.HeaderLen()+len(payload))
	var sum frame.Checksum
	sum.Add(payload)
	n, err := e.Put(b, len(payload), &sum, src.Port())
	if err != nil {
		t.Fatal(err)
	}
	copy(b[n:], payload)
	return b
}

// fixCRC stores the CRC32C of everything before the trailer in d's last 4 bytes.
func fixCRC(d []byte) {
	if len(d) >= wire.TrailerLen {
		wire.PutTrailer(d[len(d)-wire.TrailerLen:], wire.UpdateCRC(0, d[:len(d)-wire.TrailerLen]))
	}
}

// encode returns the datagram of p with payload after its extensions and a correct trailer.
func encode(t testing.TB, p *wire.Packet, payload []byte) []byte {
	t.Helper()
	b := make([]byte, 512)
	n, err := wire.Encode(b, p)
	if err != nil {
		t.Fatalf("encode %v: %v", p.Opcode, err)
	}
	d := append(append(b[:n:n], payload...), 0, 0, 0, 0)
	fixCRC(d)
	return d
}

// entry is one data packet of a Bundle.
type entry struct {
	p       wire.Packet
	payload []byte
}

// bundle returns the Bundle datagram of entries under header h (Opcode set to OpBundle).
func bundle(t testing.TB, h wire.Header, entries []entry) []byte {
	t.Helper()
	h.Opcode = wire.OpBundle
	d := make([]byte, wire.HeaderLen, 4096)
	if err := wire.EncodeHeader(d, &h); err != nil {
		t.Fatal(err)
	}
	for i := range entries {
		var b [128]byte
		n, err := wire.EncodeEntry(b[:], &entries[i].p, len(entries[i].payload))
		if err != nil {
			t.Fatalf("encode entry %d: %v", i, err)
		}
		d = append(append(d, b[:n]...), entries[i].payload...)
	}
	d = append(d, 0, 0, 0, 0)
	fixCRC(d)
	return d
}

// group is one group of a multi-QP Bundle: its connection and its entries.
type group struct {
	qpn     uint32
	cookie  uint64
	port    uint16
	entries []entry
}

// multiBundle returns the multi-QP Bundle datagram of groups gs, with timestamp ts.
func multiBundle(t testing.TB, ts uint32, gs []group) []byte {
	t.Helper()
	d := make([]byte, wire.HeaderLen, 4096)
	if err := wire.EncodeHeader(d, &wire.Header{Opcode: wire.OpMultiBundle, TS: ts}); err != nil {
		t.Fatal(err)
	}
	for _, g := range gs {
		var gh [wire.GroupHeaderLen]byte
		if err := wire.EncodeGroup(gh[:], g.qpn, g.cookie, g.port, len(g.entries)); err != nil {
			t.Fatal(err)
		}
		d = append(d, gh[:]...)
		for i := range g.entries {
			var b [128]byte
			n, err := wire.EncodeEntry(b[:], &g.entries[i].p, len(g.entries[i].payload))
			if err != nil {
				t.Fatalf("encode entry %d: %v", i, err)
			}
			d = append(append(d, b[:n]...), g.entries[i].payload...)
		}
	}
	d = append(d, 0, 0, 0, 0)
	fixCRC(d)
	return d
}

// pdmlNode is an element of tshark's PDML output: a proto or a field, with its children.
type pdmlNode struct {
	Name     string     `xml:"name,attr"`
	Showname string     `xml:"showname,attr"`
	Show     string     `xml:"show,attr"`
	Value    string     `xml:"value,attr"`
	Size     int        `xml:"size,attr"`
	Pos      int        `xml:"pos,attr"`
	Fields   []pdmlNode `xml:"field"`
	Protos   []pdmlNode `xml:"proto"`
}

// pdmlPacket is one packet of PDML: its protocols in order.
type pdmlPacket struct {
	Protos []pdmlNode `xml:"proto"`
}

// kids returns n's direct children named name ("" for all).
func (n *pdmlNode) kids(name string) []*pdmlNode {
	var out []*pdmlNode
	for _, list := range [][]pdmlNode{n.Fields, n.Protos} {
		for i := range list {
			if name == "" || list[i].Name == name {
				out = append(out, &list[i])
			}
		}
	}
	return out
}

// kid returns n's first direct child named name, or nil.
func (n *pdmlNode) kid(name string) *pdmlNode {
	if k := n.kids(name); len(k) > 0 {
		return k[0]
	}
	return nil
}

// all returns every descendant of n named name, depth first.
func (n *pdmlNode) all(name string) []*pdmlNode {
	var out []*pdmlNode
	var walk func(m *pdmlNode)
	walk = func(m *pdmlNode) {
		for _, k := range m.kids("") {
			if k.Name == name {
				out = append(out, k)
			}
			walk(k)
		}
	}
	walk(n)
	return out
}

// num returns the value of n's direct child name as a number, and false if it is missing or
// not a number.
func (n *pdmlNode) num(name string) (uint64, bool) {
	k := n.kid(name)
	if k == nil {
		return 0, false
	}
	v, err := strconv.ParseUint(k.Show, 0, 64)
	return v, err == nil
}

// proto returns the packet's protocol named name, or nil.
func (p *pdmlPacket) proto(name string) *pdmlNode {
	for i := range p.Protos {
		if p.Protos[i].Name == name {
			return &p.Protos[i]
		}
	}
	return nil
}

// whole is the packet as one node, for searches over all its protocols.
func (p *pdmlPacket) whole() *pdmlNode { return &pdmlNode{Protos: p.Protos} }

// experts returns the messages of the expert infos named name anywhere in the packet.
func (p *pdmlPacket) experts(name string) []string {
	var out []string
	for _, e := range p.whole().all(name) {
		out = append(out, e.Showname)
	}
	return out
}

// tshark runs tshark over the capture file with the dissector loaded and the extra
// arguments, in an empty home directory (no personal preferences or plugins), bounded to
// two minutes, and returns its standard output. A Lua error on loading or any output on
// standard error other than tshark's note about running as root fails t.
func tshark(t testing.TB, file string, extra ...string) []byte {
	t.Helper()
	bin := needTshark(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append([]string{"-n", "-X", "lua_script:" + script(t), "-r", file}, extra...)
	cmd := exec.CommandContext(ctx, bin, args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tshark %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if line != "" && !strings.HasPrefix(line, "Running as user") {
			t.Errorf("tshark %s wrote to standard error: %s", strings.Join(args, " "), line)
		}
	}
	return stdout.Bytes()
}

// decode runs tshark -T pdml over the file and returns its packets, failing t on any Lua
// error in any of them.
func decode(t testing.TB, file string, extra ...string) []pdmlPacket {
	t.Helper()
	out := tshark(t, file, append([]string{"-T", "pdml"}, extra...)...)
	var doc struct {
		Packets []pdmlPacket `xml:"packet"`
	}
	if err := xml.Unmarshal(out, &doc); err != nil {
		t.Fatalf("tshark's PDML: %v", err)
	}
	for i := range doc.Packets {
		if errs := doc.Packets[i].experts("_ws.lua.error"); len(errs) > 0 {
			t.Errorf("frame %d: Lua error in the dissector: %v", i+1, errs)
		}
	}
	return doc.Packets
}

// infoColumns runs tshark over the file and returns every frame's Info column.
func infoColumns(t testing.TB, file string, extra ...string) []string {
	t.Helper()
	out := tshark(t, file, append([]string{"-T", "fields", "-E", "occurrence=f", "-e", "_ws.col.Info"}, extra...)...)
	s := strings.TrimSuffix(string(out), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// udpPayload returns the UDP payload of a decoded packet, as the UDP dissector shows it.
func udpPayload(p *pdmlPacket) ([]byte, bool) {
	u := p.proto("udp")
	if u == nil {
		return nil, false
	}
	k := u.kid("udp.payload")
	if k == nil {
		return nil, false
	}
	b, err := hex.DecodeString(k.Value)
	return b, err == nil
}

// mismatch collects the differences between a decoded datagram and wire.Parse's reading.
type mismatch struct{ diffs []string }

func (m *mismatch) addf(format string, args ...any) {
	m.diffs = append(m.diffs, fmt.Sprintf(format, args...))
}

// field compares n's direct child name with want.
func (m *mismatch) field(where string, n *pdmlNode, name string, want uint64) {
	got, ok := n.num(name)
	switch {
	case !ok:
		m.addf("%s: no %s", where, name)
	case got != want:
		m.addf("%s: %s = %d (%#x), want %d (%#x)", where, name, got, got, want, want)
	}
}

// bytesField compares n's direct child name (a bytes field) with want; empty want means the
// field is absent.
func (m *mismatch) bytesField(where string, n *pdmlNode, name string, want []byte) {
	k := n.kid(name)
	if len(want) == 0 {
		if k != nil {
			m.addf("%s: %s present (%d bytes), want none", where, name, k.Size)
		}
		return
	}
	if k == nil {
		m.addf("%s: no %s, want %d bytes", where, name, len(want))
		return
	}
	got, err := hex.DecodeString(k.Value)
	if err != nil || !bytes.Equal(got, want) {
		m.addf("%s: %s differs (%d bytes shown, want %d)", where, name, len(got), len(want))
	}
}

// bitmapPSNs returns the PSNs a SACK bitmap names: bit i is base + step*i.
func bitmapPSNs(bits uint64, base wire.PSN, step int) []uint64 {
	var out []uint64
	for i := range 64 {
		if bits&(1<<i) != 0 {
			out = append(out, uint64(uint32(int64(base)+int64(step*i))))
		}
	}
	return out
}

// generated compares the values of the children named name of n with want, in order.
func (m *mismatch) generated(where string, n *pdmlNode, name string, want []uint64) {
	ks := n.kids(name)
	if len(ks) != len(want) {
		m.addf("%s: %d %s, want %d", where, len(ks), name, len(want))
		return
	}
	for i, k := range ks {
		if v, err := strconv.ParseUint(k.Show, 0, 64); err != nil || v != want[i] {
			m.addf("%s: %s[%d] = %q, want %d", where, name, i, k.Show, want[i])
		}
	}
}

// ackExt compares an AckExt subtree with a.
func (m *mismatch) ackExt(where string, n *pdmlNode, a *wire.AckExt) {
	if n == nil {
		m.addf("%s: no AckExt", where)
		return
	}
	m.field(where, n, "xdpndk.ack.psn", uint64(a.AckPSN))
	m.field(where, n, "xdpndk.ack.sack", a.SACK)
	m.field(where, n, "xdpndk.ack.credits", uint64(a.Credits))
	m.field(where, n, "xdpndk.ack.syndrome", uint64(a.Syndrome))
	m.field(where, n, "xdpndk.ack.reserved", 0)
	m.field(where, n, "xdpndk.ack.value", uint64(a.Value))
	m.field(where, n, "xdpndk.ack.nak_psn", uint64(a.NakPSN))
	m.field(where, n, "xdpndk.ack.echo_ts", uint64(a.EchoTS))
	m.field(where, n, "xdpndk.ack.delay", uint64(a.Delay))
	m.field(where, n, "xdpndk.ack.high_psn", uint64(a.HighPSN))
	m.field(where, n, "xdpndk.ack.high_sack", a.HighSACK)
	if s := n.kid("xdpndk.ack.sack"); s != nil {
		m.generated(where+" SACK", s, "xdpndk.ack.sack_psn", bitmapPSNs(a.SACK, a.AckPSN+1, 1))
	}
	if s := n.kid("xdpndk.ack.high_sack"); s != nil {
		m.generated(where+" HighSACK", s, "xdpndk.ack.high_sack_psn", bitmapPSNs(a.HighSACK, a.HighPSN-1, -1))
	}
	if a.Syndrome == wire.SynNakRNR {
		if v := n.kid("xdpndk.ack.value"); v == nil {
			m.addf("%s: no RNR value", where)
		} else {
			m.field(where, v, "xdpndk.ack.rnr_delay", uint64(a.Value)*16)
		}
	}
}

// payloadOf returns the bytes of p's payload views.
func payloadOf(p *wire.Packet) []byte {
	var b []byte
	for _, s := range p.Payload[:p.NPayload] {
		b = append(b, s...)
	}
	return b
}

// entry compares a Bundle entry's extension: an Ack's AckExt, a data packet's as data does.
func (m *mismatch) entry(where string, n *pdmlNode, p *wire.Packet) {
	if p.Opcode == wire.OpAck {
		m.ackExt(where, n.kid("xdpndk.ack"), &p.Ack)
		return
	}
	m.data(where, n, p)
}

// data compares the extension, piggybacked ack and payload of data packet p under n (the
// datagram's tree or an entry's).

func (m *mismatch) data(where string, n *pdmlNode, p *wire.Packet) {
	switch p.Opcode {
	case wire.OpSendFirst, wire.OpSendMiddle, wire.OpSendLast, wire.OpSendOnly, wire.OpSendLastInv, wire.OpSendOnlyInv:
		x := n.kid("xdpndk.send")
		if x == nil {
			m.addf("%s: no SendExt", where)
			break
		}
		m.field(where, x, "xdpndk.send.msn", uint64(p.Send.MSN))
		m.field(where, x, "xdpndk.send.offset", uint64(p.Send.Offset))
		m.field(where, x, "xdpndk.send.total", uint64(p.Send.Total))
		m.field(where, x, "xdpndk.send.inv_token", uint64(p.Send.InvToken))
	case wire.OpWrite, wire.OpReadRequest:
		x := n.kid("xdpndk.rdma")
		if x == nil {
			m.addf("%s: no RDMAExt", where)
			break
		}
		m.field(where, x, "xdpndk.rdma.addr", p.RDMA.Addr)
		m.field(where, x, "xdpndk.rdma.token", uint64(p.RDMA.Token))
		m.field(where, x, "xdpndk.rdma.length", uint64(p.RDMA.Length))
		m.field(where, x, "xdpndk.rdma.offset", uint64(p.RDMA.Offset))
	case wire.OpReadResponse:
		x := n.kid("xdpndk.readresp")
		if x == nil {
			m.addf("%s: no ReadRespExt", where)
			break
		}
		m.field(where, x, "xdpndk.readresp.req_psn", uint64(p.ReadResp.ReqPSN))
		m.field(where, x, "xdpndk.readresp.offset", uint64(p.ReadResp.Offset))
	}
	if p.Flags&wire.FlagAck != 0 {
		a := n.kid("xdpndk.ack")
		m.ackExt(where+" piggybacked", a, &p.Ack)
		if a != nil {
			m.field(where, a, "xdpndk.ack.piggybacked", 1)
		}
	} else if n.kid("xdpndk.ack") != nil {
		m.addf("%s: an AckExt without the Ack flag", where)
	}
	if p.Opcode != wire.OpReadRequest {
		pl := payloadOf(p)
		m.field(where, n, "xdpndk.payload_len", uint64(len(pl)))
		m.bytesField(where, n, "xdpndk.payload", pl)
	}
}

// header compares the fixed header fields under n with h.
func (m *mismatch) header(where string, n *pdmlNode, h *wire.Header) {
	m.field(where, n, "xdpndk.opcode", uint64(h.Opcode))
	m.field(where, n, "xdpndk.flags", uint64(h.Flags))
	m.field(where, n, "xdpndk.psn", uint64(h.PSN))
	m.field(where, n, "xdpndk.dest_qpn", uint64(h.DestQPN))
	m.field(where, n, "xdpndk.cookie", h.Cookie)
	m.field(where, n, "xdpndk.ts", uint64(h.TS))
	if f := n.kid("xdpndk.flags"); f != nil {
		for _, b := range []struct {
			name string
			bit  wire.Flags
		}{{"ackreq", wire.FlagAckReq}, {"solicited", wire.FlagSolicited}, {"last", wire.FlagLast},
			{"retransmit", wire.FlagRetransmit}, {"ack", wire.FlagAck}} {
			want := uint64(0)
			if h.Flags&b.bit != 0 {
				want = 1
			}
			m.field(where+" flags", f, "xdpndk.flags."+b.name, want)
		}
	}
}

// compare checks the dissector's tree x of datagram d (which wire.Parse must accept) field by
// field against what wire.Parse reads, and that the trailer was found correct and nothing
// flagged. It returns the differences.
func compare(x *pdmlNode, d []byte) []string {
	m := &mismatch{}
	var p wire.Packet
	if err := wire.Parse([][]byte{d}, &p); err != nil {
		m.addf("wire.Parse refuses the datagram: %v", err)
		return m.diffs
	}
	if x == nil {
		m.addf("not decoded as xdpndk")
		return m.diffs
	}
	m.field("datagram", x, "xdpndk.length", uint64(len(d)))
	h := x.kid("xdpndk.header")
	if h == nil {
		m.addf("no header")
		return m.diffs
	}
	m.field("header", h, "xdpndk.version", wire.Version)
	m.header("header", h, &p.Header)
	switch {
	case p.Opcode == wire.OpBundle:
		it := p.Entries()
		es := x.kids("xdpndk.entry")
		m.field("bundle", x, "xdpndk.bundle.entries", uint64(it.Count()))
		var e wire.Packet
		for i := 0; it.Next(&e); i++ {
			where := fmt.Sprintf("entry %d", i+1)
			if i >= len(es) {
				m.addf("%s missing", where)
				break
			}
			m.field(where, es[i], "xdpndk.entry.index", uint64(i+1))
			m.header(where, es[i], &e.Header)
			m.entry(where, es[i], &e)
		}
	case p.Opcode == wire.OpMultiBundle:
		it := p.Entries()
		gs := x.kids("xdpndk.group")
		m.field("multi-QP bundle", x, "xdpndk.bundle.entries", uint64(it.Count()))
		m.field("multi-QP bundle", x, "xdpndk.bundle.groups", uint64(len(gs)))
		var e wire.Packet
		g, k := -1, 0 // the group being read, the entry within it
		for i := 0; it.Next(&e); i++ {
			if it.GroupStart() {
				g, k = g+1, 0
				if g >= len(gs) {
					m.addf("group %d missing", g+1)
					break
				}
				where := fmt.Sprintf("group %d", g+1)
				m.field(where, gs[g], "xdpndk.group.index", uint64(g+1))
				m.field(where, gs[g], "xdpndk.dest_qpn", uint64(e.DestQPN))
				m.field(where, gs[g], "xdpndk.cookie", e.Cookie)
				m.field(where, gs[g], "xdpndk.group.source_port", uint64(it.SourcePort()))
				m.field(where, gs[g], "xdpndk.group.count", uint64(len(gs[g].kids("xdpndk.entry"))))
			}
			es := gs[g].kids("xdpndk.entry")
			where := fmt.Sprintf("group %d entry %d", g+1, k+1)
			if k >= len(es) {
				m.addf("%s missing", where)
				break
			}
			m.field(where, es[k], "xdpndk.entry.index", uint64(i+1))
			m.header(where, es[k], &e.Header)
			m.entry(where, es[k], &e)
			k++
		}
	case wire.IsCM(p.Opcode):
		c := x.kid("xdpndk.cm")
		if c == nil {
			m.addf("no CMExt")
			break
		}
		m.field("CMExt", c, "xdpndk.cm.service_id", p.CM.ServiceID)
		m.field("CMExt", c, "xdpndk.cm.conn_id", p.CM.ConnID)
		m.field("CMExt", c, "xdpndk.cm.src_qpn", uint64(p.CM.SrcQPN))
		m.field("CMExt", c, "xdpndk.cm.initial_psn", uint64(p.CM.InitialPSN))
		m.field("CMExt", c, "xdpndk.cm.cookie", p.CM.Cookie)
		m.field("CMExt", c, "xdpndk.cm.max_payload", uint64(p.CM.MaxPayload))
		m.field("CMExt", c, "xdpndk.cm.ird", uint64(p.CM.IRD))
		m.field("CMExt", c, "xdpndk.cm.ord", uint64(p.CM.ORD))
		m.field("CMExt", c, "xdpndk.cm.data_port", uint64(p.CM.DataPort))
		m.field("CMExt", c, "xdpndk.cm.reason", uint64(p.CM.Reason))
		m.field("CMExt", c, "xdpndk.cm.private_len", uint64(p.CM.PrivateLen))
		m.bytesField("datagram", x, "xdpndk.cm.private_data", p.PrivateData)
	case p.Opcode == wire.OpAck:
		m.ackExt("Ack", x.kid("xdpndk.ack"), &p.Ack)
	default:
		m.data("datagram", x, &p)
	}
	c := x.kid("xdpndk.crc")
	if c == nil {
		m.addf("no CRC32C")
	} else {
		m.field("CRC", x, "xdpndk.crc", uint64(binary.BigEndian.Uint32(d[len(d)-4:])))
		m.field("CRC", c, "xdpndk.crc.status", 1)
	}
	if e := (&pdmlPacket{Protos: []pdmlNode{*x}}).experts("xdpndk.malformed"); len(e) > 0 {
		m.addf("flagged malformed: %v", e)
	}
	return m.diffs
}
