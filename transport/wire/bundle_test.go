package wire

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// bundleOf encodes the data samples ss as one Bundle datagram (the bundle's header from
// the first, its DestQPN, Cookie and TS standing for every entry).
func bundleOf(t testing.TB, ss []sample) []byte {
	t.Helper()
	h := hdr(OpBundle, 0, 0)
	b := make([]byte, 0, 4096)
	var hb [HeaderLen]byte
	if _, err := Encode(hb[:], &Packet{Header: h}); err != nil {
		t.Fatalf("encode bundle header: %v", err)
	}
	b = append(b, hb[:]...)
	for i := range ss {
		var eb [maxEntryFixed]byte
		n, err := EncodeEntry(eb[:], &ss[i].p, len(ss[i].payload))
		if err != nil {
			t.Fatalf("encode entry %s: %v", ss[i].name, err)
		}
		b = append(b, eb[:n]...)
		b = append(b, ss[i].payload...)
	}
	b = append(b, 0, 0, 0, 0)
	fixCRC(b)
	return b
}

// entrySamples are the samples a bundle may carry: the data packets and the Ack.
func entrySamples() []sample {
	var out []sample
	for _, s := range samples() {
		if entryKind(opTable[s.p.Opcode].kind) {
			out = append(out, s)
		}
	}
	return out
}

// readEntries parses d (cut at cuts) and returns its entries, checking each against the
// packet it stands for.
func checkEntries(t *testing.T, segs [][]byte, want []sample) {
	t.Helper()
	var p Packet
	if err := Parse(segs, &p); err != nil {
		t.Fatalf("parse: %v", err)
	}
	if p.Opcode != OpBundle {
		t.Fatalf("opcode %v", p.Opcode)
	}
	it := p.Entries()
	if n := it.Count(); n != len(want) {
		t.Fatalf("Count %d, want %d", n, len(want))
	}
	var e Packet
	for i := range want {
		if !it.Next(&e) {
			t.Fatalf("entry %d missing", i)
		}
		w := want[i].p
		w.DestQPN, w.Cookie, w.TS = p.DestQPN, p.Cookie, p.TS
		if diff := samePacket(&e, &w); diff != "" && diff != "payload" {
			t.Fatalf("entry %d (%s): %s differs: %+v, want %+v", i, want[i].name, diff, e.Header, w.Header)
		}
		if w.Flags&FlagAck != 0 && e.Ack != w.Ack {
			t.Fatalf("entry %d: piggybacked ack %+v, want %+v", i, e.Ack, w.Ack)
		}
		if !bytes.Equal(payloadBytes(&e), want[i].payload) {
			t.Fatalf("entry %d (%s): payload differs", i, want[i].name)
		}
	}
	if it.Next(&e) {
		t.Fatal("an entry past the last")
	}
}

// TestBundleRoundTrip: every data packet, alone and all together, with and without a
// piggybacked ack, survives a Bundle, whole and cut into segments anywhere.
func TestBundleRoundTrip(t *testing.T) {
	ds := entrySamples()
	lists := [][]sample{ds, ds[:1], {ds[len(ds)-1], ds[0]}}
	for _, l := range lists {
		d := bundleOf(t, l)
		checkEntries(t, [][]byte{d}, l)
		for c := 1; c < len(d); c += 7 {
			checkEntries(t, split(d, max(HeaderLen, c)), l)
			checkEntries(t, split(d, HeaderLen, max(HeaderLen, c), max(HeaderLen, min(c+11, len(d)))), l)
		}
	}
}

// TestBundleRefused: a bundle with any fault is refused whole, with the error a datagram
// carrying the faulty entry alone would get, or the bundle's own.
func TestBundleRefused(t *testing.T) {
	ds := entrySamples()
	good := bundleOf(t, ds[:3])
	first := HeaderLen // the first entry's header
	cases := []struct {
		name string
		mod  func([]byte) []byte
		want error
	}{
		{"no entry", func(d []byte) []byte { return append(d[:HeaderLen:HeaderLen], 0, 0, 0, 0) }, ErrLength},
		{"flags on the bundle", func(d []byte) []byte { d[3] = byte(FlagAckReq); return d }, ErrFlags},
		{"a PSN on the bundle", func(d []byte) []byte { d[11] = 1; return d }, ErrField},
		{"an entry longer than the bundle", func(d []byte) []byte {
			binary.BigEndian.PutUint16(d[first:], 0xffff)
			return d
		}, ErrLength},
		{"an entry shorter than its extension", func(d []byte) []byte {
			binary.BigEndian.PutUint16(d[first:], 3)
			return d
		}, ErrLength},
		{"trailing bytes after the last entry", func(d []byte) []byte {
			e := len(d) - TrailerLen
			return append(d[:e:e], 1, 2, 3, 0, 0, 0, 0)
		}, ErrLength},
		{"an Ack entry with a payload", func(d []byte) []byte { d[first+2] = byte(OpAck); return d }, ErrLength},
		{"an Ack entry with a PSN", func(d []byte) []byte {
			d[first+2] = byte(OpAck)
			binary.BigEndian.PutUint16(d[first:], AckExtLen)
			binary.BigEndian.PutUint32(d[first+4:], 9)
			// the Send entry's remaining bytes become entries: cut them off
			e := first + EntryHeaderLen + AckExtLen
			return append(d[:e:e], 0, 0, 0, 0)
		}, ErrField},
		{"an Ack entry with an unknown syndrome", func(d []byte) []byte {
			d[first+2] = byte(OpAck)
			binary.BigEndian.PutUint16(d[first:], AckExtLen)
			binary.BigEndian.PutUint32(d[first+4:], 0)
			d[first+EntryHeaderLen+16] = 0xee
			e := first + EntryHeaderLen + AckExtLen
			return append(d[:e:e], 0, 0, 0, 0)
		}, ErrField},
		{"a bundle as an entry", func(d []byte) []byte { d[first+2] = byte(OpBundle); return d }, ErrOpcode},
		{"a connection request as an entry", func(d []byte) []byte { d[first+2] = byte(OpConnRequest); return d }, ErrOpcode},
		{"a flag the entry's opcode does not take", func(d []byte) []byte { d[first+3] |= byte(FlagLast); return d }, ErrFlags},
		{"an entry breaking its opcode's rules", func(d []byte) []byte {
			binary.BigEndian.PutUint32(d[first+EntryHeaderLen+4:], 1) // SendFirst's Offset 1
			return d
		}, ErrField},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := c.mod(bytes.Clone(good))
			fixCRC(d)
			var p Packet
			if err := Parse([][]byte{d}, &p); err != c.want {
				t.Fatalf("Parse: %v, want %v", err, c.want)
			}
		})
	}
	// A piggybacked NAK cannot be encoded into an entry, nor an Ack with a payload, nor an
	// opcode that is neither data nor an Ack.
	nak := ds[0].p
	nak.Flags |= FlagAck
	nak.Ack.Syndrome = SynNakRNR
	var eb [maxEntryFixed]byte
	if _, err := EncodeEntry(eb[:], &nak, 0); err != ErrField {
		t.Fatalf("EncodeEntry of a piggybacked NAK: %v", err)
	}
	if _, err := EncodeEntry(eb[:], &Packet{Header: hdr(OpAck, 0, 0)}, 1); err != ErrLength {
		t.Fatalf("EncodeEntry of an Ack with a payload: %v", err)
	}
	if _, err := EncodeEntry(eb[:], &Packet{Header: hdr(OpConnRequest, 0, 0)}, 0); err != ErrOpcode {
		t.Fatalf("EncodeEntry of a connection request: %v", err)
	}
	if _, err := EncodeEntry(eb[:5], &ds[0].p, 0); err != ErrShortBuffer {
		t.Fatalf("EncodeEntry into 5 bytes: %v", err)
	}
	if _, ok := EntryLen(OpWrite, 0, 1<<16); ok {
		t.Fatal("EntryLen took a payload past the 16-bit Length")
	}
}

// TestEntriesAllocs: reading the entries of a Bundle and of a multi-QP Bundle allocates
// nothing.
func TestEntriesAllocs(t *testing.T) {
	for name, d := range map[string][]byte{"bundle": bundleOf(t, entrySamples()), "multi-QP bundle": multiBundleOf(t, testGroups())} {
		segs := split(d, 100, 300)
		var p, e Packet
		allocs := testing.AllocsPerRun(200, func() {
			if err := Parse(segs, &p); err != nil {
				t.Fatal(err)
			}
			it := p.Entries()
			for it.Next(&e) {
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per datagram", name, allocs)
		}
	}
}

// FuzzBundle: arbitrary entry bytes behind a valid bundle header (the trailer fixed, so the
// fuzzer reaches the entry checks), cut into segments at fuzzer-chosen points. Parse must
// not panic and must agree with Parse of the whole; what it accepts must read as entries
// that re-encode to the same bytes and fill the bundle exactly.
func FuzzBundle(f *testing.F) {
	ds := entrySamples()
	for i := range ds {
		d := bundleOf(f, ds[i:min(i+3, len(ds))])
		f.Add(d[HeaderLen:len(d)-TrailerLen], uint16(30), uint16(70))
	}
	f.Fuzz(func(t *testing.T, body []byte, c1, c2 uint16) {
		d := make([]byte, HeaderLen, HeaderLen+len(body)+TrailerLen)
		if _, err := Encode(d, &Packet{Header: hdr(OpBundle, 0, 0)}); err != nil {
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
			return // the first segment does not hold the bundle's header
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
			for it.Next(&e) {
				var eb [maxEntryFixed]byte
				n, err := EncodeEntry(eb[:], &e, e.PayloadLen())
				if err != nil {
					t.Fatalf("accepted entry %v does not re-encode: %v", e.Opcode, err)
				}
				re = append(append(re, eb[:n]...), payloadBytes(&e)...)
			}
			if !bytes.Equal(re, body) {
				t.Fatalf("entries re-encode to %x, want %x", re, body)
			}
		}
	})
}
