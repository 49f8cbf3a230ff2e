package ndk

import (
	"bytes"
	"errors"
	"testing"
)

// The encoding round-trips, and a decoder refuses what is not exactly one buffer.
func TestRemoteBufferEncoding(t *testing.T) {
	for _, b := range []RemoteBuffer{{}, {Addr: 1, Len: 2, Token: 3},
		{Addr: 0x7f00_1234_5678_9abc, Len: 1 << 31, Token: 0xdeadbeef}, {Addr: 0, Len: ^uint64(0), Token: 1}} {
		enc, err := b.MarshalBinary()
		if err != nil || len(enc) != RemoteBufferSize {
			t.Fatalf("%v: %d bytes, %v", b, len(enc), err)
		}
		app, _ := b.AppendBinary([]byte{0xee})
		if !bytes.Equal(app[1:], enc) || app[0] != 0xee {
			t.Fatalf("%v: AppendBinary %x, MarshalBinary %x", b, app, enc)
		}
		var got RemoteBuffer
		if err := got.UnmarshalBinary(enc); err != nil || got != b {
			t.Fatalf("%v: decoded %v, %v", b, got, err)
		}
	}
	enc, _ := RemoteBuffer{Addr: 0x1000, Len: 0x100, Token: 7}.MarshalBinary()
	keep := RemoteBuffer{Addr: 9, Len: 9, Token: 9}
	for _, bad := range [][]byte{nil, enc[:19], append(append([]byte{}, enc...), 0),
		func() []byte { b, _ := RemoteBuffer{Addr: ^uint64(0) - 10, Len: 11}.MarshalBinary(); return b }()} {
		got := keep
		if err := got.UnmarshalBinary(bad); !errors.Is(err, StatusInvalidParameter) || got != keep {
			t.Fatalf("decode %x: %v, %v (b must not change)", bad, got, err)
		}
	}
}

// Slice keeps to the buffer, whatever the arithmetic.
func TestRemoteBufferSlice(t *testing.T) {
	b := RemoteBuffer{Addr: 1000, Len: 100, Token: 5}
	for _, c := range []struct {
		off, n uint64
		ok     bool
	}{{0, 100, true}, {0, 0, true}, {100, 0, true}, {40, 60, true}, {40, 61, false}, {101, 0, false},
		{1, ^uint64(0), false}, {^uint64(0), 2, false}} {
		s, err := b.Slice(c.off, c.n)
		if (err == nil) != c.ok {
			t.Fatalf("Slice(%d, %d) = %v, %v", c.off, c.n, s, err)
		}
		if c.ok && (s.Addr != 1000+c.off || s.Len != c.n || s.Token != 5) {
			t.Fatalf("Slice(%d, %d) = %v", c.off, c.n, s)
		}
	}
}

// FuzzRemoteBuffer decodes any bytes without panicking; what decodes encodes back to the
// same bytes and never wraps around.
func FuzzRemoteBuffer(f *testing.F) {
	enc, _ := RemoteBuffer{Addr: 0x1000, Len: 4096, Token: 0x1234}.MarshalBinary()
	f.Add(enc)
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, RemoteBufferSize))
	f.Fuzz(func(t *testing.T, data []byte) {
		var b RemoteBuffer
		if err := b.UnmarshalBinary(data); err != nil {
			if b != (RemoteBuffer{}) {
				t.Fatalf("failed decode changed b: %v", b)
			}
			return
		}
		if b.Addr+b.Len < b.Addr {
			t.Fatalf("decoded a wrapping buffer %v", b)
		}
		back, _ := b.MarshalBinary()
		if !bytes.Equal(back, data) {
			t.Fatalf("%x decoded to %v, encodes to %x", data, b, back)
		}
		if _, err := b.Slice(b.Len/2, b.Len-b.Len/2); err != nil {
			t.Fatalf("%v: the second half: %v", b, err)
		}
	})
}

// The buffers an MR and a bound MW give name the memory a peer then writes into: the
// peer's Write at RemoteOf's address lands in the bytes RemoteOf was given, one through the
// window in the window's range.
func TestRemoteBufferFromMRAndMW(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		p := newPair(t, k, pairOpts{})
		mem, mr := p.B.region(t, 64<<10, MRAllowRemoteWrite|MRAllowRemoteRead)
		whole := mr.Remote()
		if whole.Addr != mr.VA() || whole.Len != uint64(len(mem)) || whole.Token != mr.RemoteToken() {
			t.Fatalf("MR.Remote %v; VA %#x len %d token %#x", whole, mr.VA(), len(mem), mr.RemoteToken())
		}
		part, err := mr.RemoteOf(mem[4096 : 4096+512])
		if err != nil || part.Addr != whole.Addr+4096 || part.Len != 512 {
			t.Fatalf("RemoteOf: %v, %v", part, err)
		}
		if _, err := mr.RemoteOf(make([]byte, 8)); !errors.Is(err, StatusInvalidParameter) {
			t.Fatalf("RemoteOf of other memory: %v", err)
		}
		mw, err := p.B.pd.NewMW()
		if err != nil {
			t.Fatal(err)
		}
		if got := mw.Remote(); got != (RemoteBuffer{}) {
			t.Fatalf("unbound window: %v", got)
		}
		if err := p.B.qp.Bind("bind", mr, mw, mr.VA()+8192, 1024, OpAllowRemoteWrite); err != nil {
			t.Fatal(err)
		}
		want(t, results(t, p.B.icq, 1)[0], StatusSuccess, OpTypeBind, "bind")
		win := mw.Remote()
		if win.Addr != mr.VA()+8192 || win.Len != 1024 || win.Token != mw.RemoteToken() {
			t.Fatalf("MW.Remote %v", win)
		}

		// A sends the encodings it would get in a message; B's memory is written where they say.
		src, smr := p.A.region(t, 2048, MRAllowLocalWrite)
		fill(src, 3)
		for i, enc := range [][]byte{mustEncode(t, part), mustEncode(t, win)} {
			var rb RemoteBuffer
			if err := rb.UnmarshalBinary(enc); err != nil {
				t.Fatal(err)
			}
			n := min(int(rb.Len), 256)
			if err := p.A.qp.Write(i, []SGE{smr.SGE(src[:n])}, rb.Addr, rb.Token, 0); err != nil {
				t.Fatal(err)
			}
			want(t, results(t, p.A.icq, 1)[0], StatusSuccess, OpTypeWrite, i)
		}
		if !bytes.Equal(mem[4096:4096+256], src[:256]) || !bytes.Equal(mem[8192:8192+256], src[:256]) {
			t.Fatal("the Writes did not land where the remote buffers said")
		}
	})
}

func mustEncode(t *testing.T, b RemoteBuffer) []byte {
	t.Helper()
	enc, err := b.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return enc
}
