package wire

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// group is one group of a multi-QP Bundle under test: its connection and its entries.
type group struct {
	qpn    uint32
	cookie uint64
	port   uint16
	ss     []sample
}

// multiBundleOf encodes groups gs as one multi-QP Bundle datagram.
func multiBundleOf(t testing.TB, gs []group) []byte {
	t.Helper()
	b := make([]byte, HeaderLen, 4096)
	h := Header{Opcode: OpMultiBundle, TS: 0x01020304}
	if err := EncodeHeader(b, &h); err != nil {
		t.Fatalf("encode header: %v", err)
	}
	for _, g := range gs {
		var gh [GroupHeaderLen]byte
		if err := EncodeGroup(gh[:], g.qpn, g.cookie, g.port, len(g.ss)); err != nil {
			t.Fatalf("encode group: %v", err)
		}
		b = append(b, gh[:]...)
		for i := range g.ss {
			var eb [maxEntryFixed]byte
			n, err := EncodeEntry(eb[:], &g.ss[i].p, len(g.ss[i].payload))
			if err != nil {
				t.Fatalf("encode entry %s: %v", g.ss[i].name, err)
			}
			b = append(append(b, eb[:n]...), g.ss[i].payload...)
		}
	}
	b = append(b, 0, 0, 0, 0)
	fixCRC(b)
	return b
}

// testGroups spreads the data samples over three groups of different connections.
func testGroups() []group {
	ds := entrySamples()
	return []group{
		{qpn: 0x10203, cookie: 0xaabbccddeeff0011, port: 49200, ss: ds[:2]},
		{qpn: 7, cookie: 1, port: 65535, ss: ds[2:3]},
		{qpn: 0xffffff, cookie: 0xfedcba9876543210, port: 50000, ss: ds[3:]},
	}
}

// checkGroups parses segs and checks every entry against gs: the packet it stands for with
// its group's DestQPN and Cookie, the group's SourcePort, where each group starts.
func checkGroups(t *testing.T, segs [][]byte, gs []group) {
	t.Helper()
	var p Packet
	if err := Parse(segs, &p); err != nil {
		t.Fatalf("parse: %v", err)
	}
	if p.Opcode != OpMultiBundle || p.DestQPN != 0 || p.Cookie != 0 {
		t.Fatalf("header %+v", p.Header)
	}
	it := p.Entries()
	var e Packet
	total := 0
	for _, g := range gs {
		total += len(g.ss)
		for i := range g.ss {
			if !it.Next(&e) {
				t.Fatalf("group %d entry %d missing", g.qpn, i)
			}
			w := g.ss[i].p
			w.DestQPN, w.Cookie, w.TS = g.qpn, g.cookie, p.TS
			if diff := samePacket(&e, &w); diff != "" && diff != "payload" {
				t.Fatalf("entry %s: %s differs: %+v, want %+v", g.ss[i].name, diff, e.Header, w.Header)
			}
			if !bytes.Equal(payloadBytes(&e), g.ss[i].payload) {
				t.Fatalf("entry %s: payload differs", g.ss[i].name)
			}
			if it.SourcePort() != g.port || it.GroupStart() != (i == 0) {
				t.Fatalf("entry %s: source port %d, group start %v", g.ss[i].name, it.SourcePort(), it.GroupStart())
			}
		}
	}
	if it.Next(&e) {
		t.Fatal("an entry past the last")
	}
	if c := p.Entries(); c.Count() != total {
		t.Fatalf("Count %d, want %d", c.Count(), total)
	}
}

// TestMultiBundleRoundTrip: groups of every data packet survive a multi-QP Bundle, whole
// and cut into segments anywhere; a single group too.
func TestMultiBundleRoundTrip(t *testing.T) {
	gs := testGroups()
	for _, l := range [][]group{gs, gs[:1], gs[1:2], {gs[2], gs[0]}} {
		d := multiBundleOf(t, l)
		checkGroups(t, [][]byte{d}, l)
		for c := 1; c < len(d); c += 5 {
			checkGroups(t, split(d, max(HeaderLen, c)), l)
			checkGroups(t, split(d, HeaderLen, max(HeaderLen, c), max(HeaderLen, min(c+9, len(d)))), l)
		}
	}
}

// TestMultiBundleRefused: a multi-QP Bundle with any fault, in its header, a group header
// or any entry of any group, is refused whole.
func TestMultiBundleRefused(t *testing.T) {
	gs := testGroups()
	good := multiBundleOf(t, gs[:2])
	g1 := HeaderLen                               // the first group's header
	e1 := g1 + GroupHeaderLen                     // its first entry
	g2 := len(good) - TrailerLen - GroupHeaderLen // the second group's header
	for _, s := range gs[1].ss {
		l, _ := EntryLen(s.p.Opcode, s.p.Flags, len(s.payload))
		g2 -= l
	}
	if c := binary.BigEndian.Uint16(good[g2+14:]); c != uint16(len(gs[1].ss)) {
		t.Fatalf("second group header not at %d (count %d)", g2, c)
	}
	e2 := g2 + GroupHeaderLen
	cases := []struct {
		name string
		mod  func([]byte) []byte
		want error
	}{
		{"no group", func(d []byte) []byte { return append(d[:HeaderLen:HeaderLen], 0, 0, 0, 0) }, ErrLength},
		{"flags on the datagram", func(d []byte) []byte { d[3] = byte(FlagAckReq); return d }, ErrFlags},
		{"a PSN on the datagram", func(d []byte) []byte { d[11] = 1; return d }, ErrField},
		{"a DestQPN on the datagram", func(d []byte) []byte { d[7] = 1; return d }, ErrField},
		{"a Cookie on the datagram", func(d []byte) []byte { d[19] = 1; return d }, ErrField},
		{"a group of no entry", func(d []byte) []byte { binary.BigEndian.PutUint16(d[g2+14:], 0); return d }, ErrField},
		{"a group announcing more entries than follow", func(d []byte) []byte {
			binary.BigEndian.PutUint16(d[g2+14:], uint16(len(gs[1].ss)+1))
			return d
		}, ErrLength},
		{"a first group announcing fewer entries (the rest no group header)", func(d []byte) []byte {
			binary.BigEndian.PutUint16(d[g1+14:], 1)
			return d
		}, nil}, // decided below: the bytes after are read as a group header
		{"trailing bytes shorter than a group header", func(d []byte) []byte {
			e := len(d) - TrailerLen
			return append(d[:e:e], 1, 2, 3, 0, 0, 0, 0)
		}, ErrLength},
		{"a bad entry in the second group", func(d []byte) []byte { d[e2+2] = byte(OpConnReply); return d }, ErrOpcode},
		{"a bundle as an entry", func(d []byte) []byte { d[e1+2] = byte(OpMultiBundle); return d }, ErrOpcode},
		{"an entry longer than the datagram", func(d []byte) []byte {
			binary.BigEndian.PutUint16(d[e1:], 0xffff)
			return d
		}, ErrLength},
		{"a flag the entry's opcode does not take", func(d []byte) []byte { d[e1+3] |= byte(FlagLast); return d }, ErrFlags},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := c.mod(bytes.Clone(good))
			fixCRC(d)
			var p Packet
			err := Parse([][]byte{d}, &p)
			if c.want == nil {
				// The first group of two entries says one: its second entry is read as a
				// group header, which is refused one way or another, never accepted.
				if err == nil {
					t.Fatal("accepted")
				}
				return
			}
			if err != c.want {
				t.Fatalf("Parse: %v, want %v", err, c.want)
			}
		})
	}
	var gh [GroupHeaderLen]byte
	if EncodeGroup(gh[:], 1, 1, 1, 0) != ErrField || EncodeGroup(gh[:], 1, 1, 1, 1<<16) != ErrField {
		t.Fatal("EncodeGroup took a count outside [1, 65535]")
	}
	if EncodeGroup(gh[:15], 1, 1, 1, 1) != ErrShortBuffer {
		t.Fatal("EncodeGroup wrote into 15 bytes")
	}
	if OpMultiBundle.String() != "MultiBundle" || !HasPayload(OpMultiBundle) || IsCM(OpMultiBundle) {
		t.Fatal("opcode table")
	}
}

// FuzzMultiBundle: arbitrary group and entry bytes behind a valid multi-QP Bundle header
// (the trailer fixed), cut into segments at fuzzer-chosen points. Parse must not panic and
// must agree with Parse of the whole; what it accepts must read as groups of entries that
// re-encode to the same bytes and fill the datagram exactly.
func FuzzMultiBundle(f *testing.F) {
	gs := testGroups()
	for i := range gs {
		d := multiBundleOf(f, gs[i:])
		f.Add(d[HeaderLen:len(d)-TrailerLen], uint16(30), uint16(70))
	}
	f.Fuzz(func(t *testing.T, body []byte, c1, c2 uint16) {
		d := make([]byte, HeaderLen, HeaderLen+len(body)+TrailerLen)
		if err := EncodeHeader(d, &Header{Opcode: OpMultiBundle, TS: 9}); err != nil {
			t.Fatal(err)
		}
		d = append(append(d, body...), 0, 0, 0, 0)
		fixCRC(d)
		a, b := min(int(c1), len(d)), min(int(c2), len(d))
		if a > b {
			a, b = b, a
		}
		var whole, parts Packet
		werr := Parse([][]byte{d}, &whole)
		perr := Parse(split(d, a, b), &parts)
		if perr == ErrSegments {
			return // the first segment does not hold the header
		}
		if perr != werr {
			t.Fatalf("split at %d, %d: %v, whole: %v", a, b, perr, werr)
		}
		if werr != nil {
			return
		}
		for _, p := range []*Packet{&whole, &parts} {
			it := p.Entries()
			var re []byte
			var e Packet
			var run []byte // the current group's entries
			var gqpn uint32
			var gcookie uint64
			var gport uint16
			count := 0
			endGroup := func() {
				if count == 0 {
					return
				}
				var gh [GroupHeaderLen]byte
				if err := EncodeGroup(gh[:], gqpn, gcookie, gport, count); err != nil {
					t.Fatal(err)
				}
				re = append(append(re, gh[:]...), run...)
				run, count = run[:0], 0
			}
			for it.Next(&e) {
				if it.GroupStart() {
					endGroup()
					gqpn, gcookie, gport = e.DestQPN, e.Cookie, it.SourcePort()
				} else if e.DestQPN != gqpn || e.Cookie != gcookie || it.SourcePort() != gport {
					t.Fatal("an entry's connection changed inside its group")
				}
				var eb [maxEntryFixed]byte
				n, err := EncodeEntry(eb[:], &e, e.PayloadLen())
				if err != nil {
					t.Fatalf("accepted entry %v does not re-encode: %v", e.Opcode, err)
				}
				run = append(append(run, eb[:n]...), payloadBytes(&e)...)
				count++
			}
			endGroup()
			if !bytes.Equal(re, body) {
				t.Fatalf("groups re-encode to %x, want %x", re, body)
			}
		}
	})
}
