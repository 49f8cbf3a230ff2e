package pcapng

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// A file written with every kind of block reads back as written: the block types in
// order, lengths that are multiples of 4 and agree at both ends, timestamps in each
// interface's resolution, captured and original lengths, directions and statistics.
func TestRoundTrip(t *testing.T) {
	var f bytes.Buffer
	w, err := NewWriter(&f, "pcapng test")
	if err != nil {
		t.Fatal(err)
	}
	ns, err := w.AddInterface(Interface{LinkType: LinkTypeRaw, Name: "eth1 engine 0", Description: "xdpndk", TsResol: 9})
	if err != nil {
		t.Fatal(err)
	}
	us, err := w.AddInterface(Interface{LinkType: LinkTypeEthernet, SnapLen: 100})
	if err != nil {
		t.Fatal(err)
	}
	if ns != 0 || us != 1 {
		t.Fatalf("interface IDs %d, %d", ns, us)
	}
	const ts = int64(1_700_000_000_123_456_789)
	type pkt struct {
		ifc        uint32
		ts         int64
		orig       int
		dir        uint32
		head, tail []byte
	}
	seq := func(n int, b byte) []byte {
		s := make([]byte, n)
		for i := range s {
			s[i] = b + byte(i)
		}
		return s
	}
	pkts := []pkt{
		{ns, ts, 0, DirOutbound, seq(28, 1), seq(35, 100)}, // 63 bytes: padded
		{ns, ts + 1, 0, DirInbound, seq(1, 7), nil},
		{us, ts + 2500, 0, DirUnknown, nil, seq(64, 3)},
		{us, ts, 9000, DirInbound, seq(48, 9), seq(52, 0)}, // cut at 100 of 9000
		{ns, ts, 0, DirOutbound, nil, nil},                 // empty
	}
	for _, p := range pkts {
		if err := w.WritePacket(p.ifc, p.ts, p.orig, p.dir, p.head, p.tail); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteStats(ns, Stats{Start: ts, End: ts + 5_000_000_000, Received: 7, Dropped: 2}); err != nil {
		t.Fatal(err)
	}
	blocks, err := Read(f.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := []uint32{BlockSHB, BlockIDB, BlockIDB, BlockEPB, BlockEPB, BlockEPB, BlockEPB, BlockEPB, BlockISB}
	if len(blocks) != len(want) {
		t.Fatalf("%d blocks, want %d", len(blocks), len(want))
	}
	off := 0
	for i, b := range blocks {
		if b.Type != want[i] {
			t.Errorf("block %d of type %#x, want %#x", i, b.Type, want[i])
		}
		if b.Offset != off || b.Len%4 != 0 {
			t.Errorf("block %d at %d, %d bytes: not contiguous and aligned (want at %d)", i, b.Offset, b.Len, off)
		}
		off += b.Len
	}
	if off != f.Len() {
		t.Errorf("blocks cover %d bytes of %d", off, f.Len())
	}
	if v, ok := blocks[0].Find(optSHBUserAppl); !ok || string(v) != "pcapng test" {
		t.Errorf("shb_userappl %q", v)
	}
	if b := blocks[1]; b.LinkType != LinkTypeRaw || b.SnapLen != 0 || b.TsResol != 9 {
		t.Errorf("first interface: %+v", b)
	} else if v, _ := b.Find(optIfName); string(v) != "eth1 engine 0" {
		t.Errorf("if_name %q", v)
	}
	if b := blocks[2]; b.LinkType != LinkTypeEthernet || b.SnapLen != 100 || b.TsResol != 6 {
		t.Errorf("second interface: %+v", b)
	}
	for i, p := range pkts {
		b := blocks[3+i]
		data := append(append([]byte{}, p.head...), p.tail...)
		orig := max(p.orig, len(data))
		res := int64(1)
		if p.ifc == us {
			res = 1000
		}
		if b.Interface != p.ifc || !bytes.Equal(b.Data, data) || int(b.CapLen) != len(data) || int(b.OrigLen) != orig {
			t.Errorf("packet %d: interface %d, %d of %d bytes %x; want %d, %d of %d %x",
				i, b.Interface, b.CapLen, b.OrigLen, b.Data, p.ifc, len(data), orig, data)
		}
		if b.Timestamp != p.ts/res*res {
			t.Errorf("packet %d: timestamp %d, want %d", i, b.Timestamp, p.ts/res*res)
		}
		v, ok := b.Find(optEPBFlags)
		switch {
		case p.dir == DirUnknown && ok:
			t.Errorf("packet %d: epb_flags %x, want none", i, v)
		case p.dir != DirUnknown && (!ok || len(v) != 4 || binary.LittleEndian.Uint32(v) != p.dir):
			t.Errorf("packet %d: epb_flags %x, want direction %d", i, v, p.dir)
		}
	}
	isb := blocks[8]
	if isb.Interface != ns || isb.Timestamp != ts+5_000_000_000 {
		t.Errorf("statistics: %+v", isb)
	}
	for _, o := range []struct {
		code uint16
		v    uint64
	}{{optISBIfRecv, 7}, {optISBIfDrop, 2}} {
		if v, ok := isb.Find(o.code); !ok || len(v) != 8 || binary.LittleEndian.Uint64(v) != o.v {
			t.Errorf("statistics option %d: %x, want %d", o.code, v, o.v)
		}
	}
	if v, ok := isb.Find(optISBStart); !ok || len(v) != 8 ||
		int64(binary.LittleEndian.Uint32(v))<<32|int64(binary.LittleEndian.Uint32(v[4:])) != ts {
		t.Errorf("isb_starttime %x", v)
	}
}

// Bad arguments are refused, and the first write error sticks.
func TestWriterErrors(t *testing.T) {
	w, err := NewWriter(io.Discard, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WritePacket(0, 0, 0, DirInbound, []byte{1}, nil); !errors.Is(err, ErrInterface) {
		t.Errorf("packet before any interface: %v", err)
	}
	if _, err := w.AddInterface(Interface{TsResol: 10}); err == nil {
		t.Error("if_tsresol 10 accepted")
	}
	if _, err := w.AddInterface(Interface{LinkType: LinkTypeRaw}); err != nil {
		t.Fatal(err)
	}
	if err := w.WritePacket(0, 0, 0, DirInbound, make([]byte, MaxBlock), nil); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized packet: %v", err)
	}
	if err := w.WriteStats(3, Stats{}); !errors.Is(err, ErrInterface) {
		t.Errorf("statistics of interface 3: %v", err)
	}
	fw := &failWriter{after: 2}
	w, err = NewWriter(fw, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AddInterface(Interface{}); err != nil {
		t.Fatal(err)
	}
	e1 := w.WritePacket(0, 0, 0, DirInbound, []byte{1, 2}, []byte{3})
	if e1 == nil || w.Err() != e1 {
		t.Fatalf("write error %v, Err %v", e1, w.Err())
	}
	if err := w.WriteStats(0, Stats{}); err != e1 {
		t.Errorf("after an error: %v, want %v", err, e1)
	}
}

type failWriter struct{ after int }

func (f *failWriter) Write(b []byte) (int, error) {
	if f.after == 0 {
		return 0, errors.New("disk full")
	}
	f.after--
	return len(b), nil
}

// WritePacket allocates nothing.
func TestWritePacketAllocs(t *testing.T) {
	w, err := NewWriter(io.Discard, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AddInterface(Interface{LinkType: LinkTypeRaw, TsResol: 9}); err != nil {
		t.Fatal(err)
	}
	head, tail := make([]byte, 28), make([]byte, 1401)
	if n := testing.AllocsPerRun(1000, func() {
		_ = w.WritePacket(0, 1, 0, DirOutbound, head, tail)
	}); n != 0 {
		t.Errorf("%v allocations per packet", n)
	}
}

// Read refuses what is not a well-formed file, at the offset of the fault.
func TestReadRefuses(t *testing.T) {
	var f bytes.Buffer
	w, _ := NewWriter(&f, "x")
	_, _ = w.AddInterface(Interface{LinkType: LinkTypeRaw})
	_ = w.WritePacket(0, 5, 0, DirInbound, []byte{1, 2, 3}, nil)
	good := f.Bytes()
	if _, err := Read(good); err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	shbLen := int(le.Uint32(good[4:]))
	idbLen := int(le.Uint32(good[shbLen+4:]))
	epb := shbLen + idbLen
	for _, c := range []struct {
		name string
		edit func(b []byte) []byte
	}{
		{"empty", func(b []byte) []byte { return b[:0] }},
		{"cut", func(b []byte) []byte { return b[:len(b)-4] }},
		{"not a section first", func(b []byte) []byte { return b[shbLen:] }},
		{"big-endian magic", func(b []byte) []byte { le.PutUint32(b[8:], 0x4D3C2B1A); return b }},
		{"lengths differ", func(b []byte) []byte { le.PutUint32(b[len(b)-4:], 8); return b }},
		{"length not a multiple of 4", func(b []byte) []byte { le.PutUint32(b[epb+4:], 37); return b }},
		{"captured over original", func(b []byte) []byte { le.PutUint32(b[epb+24:], 2); return b }},
		{"captured over block", func(b []byte) []byte { le.PutUint32(b[epb+20:], 400); le.PutUint32(b[epb+24:], 400); return b }},
		{"unknown interface", func(b []byte) []byte { le.PutUint32(b[epb+8:], 1); return b }},
		{"option past its block", func(b []byte) []byte { le.PutUint16(b[epb+32+2:], 200); return b }},
	} {
		b := c.edit(bytes.Clone(good))
		if _, err := Read(b); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: %v, want ErrFormat", c.name, err)
		}
	}
}

// Read never panics, and what it accepts is consistent.
func FuzzRead(f *testing.F) {
	var b bytes.Buffer
	w, _ := NewWriter(&b, "seed")
	_, _ = w.AddInterface(Interface{LinkType: LinkTypeRaw, TsResol: 9})
	_ = w.WritePacket(0, 5, 10, DirInbound, []byte{1, 2, 3}, nil)
	_ = w.WriteStats(0, Stats{Received: 1})
	f.Add(b.Bytes())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		blocks, err := Read(data)
		if err != nil {
			return
		}
		end := 0
		for _, bl := range blocks {
			if bl.Offset != end || bl.Len%4 != 0 || uint32(len(bl.Data)) != bl.CapLen || bl.CapLen > bl.OrigLen {
				t.Fatalf("accepted an inconsistent block %+v", bl)
			}
			end += bl.Len
		}
		if end != len(data) {
			t.Fatalf("blocks cover %d of %d bytes", end, len(data))
		}
	})
}
