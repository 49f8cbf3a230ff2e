package memreg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const ps = FastRegisterPageSize

// patterned returns n bytes that differ from their neighbours and from the same offset of
// other pages, so a copy from the wrong place shows.
func patterned(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*131 + i/ps*17 + 1)
	}
	return b
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// refsOf snapshots the hold counts of mrs.
func refsOf(mrs []*MR) []int {
	n := make([]int, len(mrs))
	for i, mr := range mrs {
		n[i] = mr.Refs()
	}
	return n
}

// TestAcquireRules: every Resolve rule refuses Acquire with Resolve's error and holds
// nothing; a successful Acquire returns Resolve's bytes and holds exactly the region behind
// them: the MR itself, a window's MR, or the fast-register MR.
func TestAcquireRules(t *testing.T) {
	r := NewRegistry(32)
	pd, otherPD := r.NewPD(), r.NewPD()
	mem := patterned(8 * ps)
	mr, _ := r.RegisterMR(pd, mem[:4*ps], MRAllowRemoteRead|MRAllowLocalWrite)
	ro, _ := r.RegisterMR(pd, mem[:100], MRAllowLocalRead)
	dead, _ := r.RegisterMR(pd, mem[:100], MRAllowRemoteRead)
	deadTok := dead.RemoteToken()
	wantErr(t, "DeregisterMR", r.DeregisterMR(dead), nil)
	reused, _ := r.RegisterMR(pd, mem[100:200], MRAllowRemoteRead) // takes dead's slot (FIFO)

	mw, _ := r.CreateMW(pd)
	wantErr(t, "Bind", r.Bind(1, mw, mr, mr.VA()+ps, ps, OpAllowRemoteRead), nil)
	mwInv, _ := r.CreateMW(pd)
	wantErr(t, "Bind", r.Bind(1, mwInv, mr, mr.VA(), 10, OpAllowRemoteRead), nil)
	mwInvTok := mwInv.RemoteToken()
	wantErr(t, "InvalidateMW", r.InvalidateMW(mwInv), nil)
	mwRem, _ := r.CreateMW(pd)
	wantErr(t, "Bind", r.Bind(1, mwRem, mr, mr.VA(), 10, OpAllowRemoteRead), nil)
	mwRemTok := mwRem.RemoteToken()
	wantErr(t, "remote Invalidate", r.Invalidate(pd, mwRemTok), nil)
	mwClosed, _ := r.CreateMW(pd)
	wantErr(t, "Bind", r.Bind(1, mwClosed, mr, mr.VA(), 10, OpAllowRemoteRead), nil)
	mwClosedTok := mwClosed.RemoteToken()
	wantErr(t, "CloseMW", r.CloseMW(mwClosed), nil)

	p := pagesOf(mem)
	frBase := uint64(0x7f00_0000_0000) + 100
	fr, _ := r.NewFastRegisterMR(pd, 4, true)
	// Pages 5,6 contiguous, then 1 (a jump), then 2 (contiguous with 1).
	wantErr(t, "FastRegister", r.FastRegister(fr, [][]byte{p[5], p[6], p[1], p[2]}, 100, 4*ps-200, frBase,
		OpAllowRemoteRead|OpAllowRemoteWrite), nil)
	frUnreg, _ := r.NewFastRegisterMR(pd, 1, true)
	frInv, _ := r.NewFastRegisterMR(pd, 1, true)
	wantErr(t, "FastRegister", r.FastRegister(frInv, p[:1], 0, ps, 0x1000, OpAllowRemoteRead), nil)
	frInvTok := frInv.RemoteToken()
	wantErr(t, "InvalidateMR", r.InvalidateMR(frInv), nil)
	frRem, _ := r.NewFastRegisterMR(pd, 1, true)
	wantErr(t, "FastRegister", r.FastRegister(frRem, p[:1], 0, ps, 0x1000, OpAllowRemoteRead), nil)
	frRemTok := frRem.RemoteToken()
	wantErr(t, "remote Invalidate", r.Invalidate(pd, frRemTok), nil)
	frDead, _ := r.NewFastRegisterMR(pd, 1, true)
	wantErr(t, "FastRegister", r.FastRegister(frDead, p[:1], 0, ps, 0x1000, OpAllowRemoteRead), nil)
	frDeadTok := frDead.RemoteToken()
	wantErr(t, "DeregisterMR", r.DeregisterMR(frDead), nil)
	// Re-registered after invalidation: the first registration's token is dead.
	frRe, _ := r.NewFastRegisterMR(pd, 1, true)
	wantErr(t, "FastRegister", r.FastRegister(frRe, p[:1], 0, ps, 0x1000, OpAllowRemoteRead), nil)
	frReOld := frRe.RemoteToken()
	wantErr(t, "InvalidateMR", r.InvalidateMR(frRe), nil)
	wantErr(t, "FastRegister", r.FastRegister(frRe, p[1:2], 0, ps, 0x1000, OpAllowRemoteRead), nil)

	all := []*MR{mr, ro, dead, reused, fr, frUnreg, frInv, frRem, frDead, frRe}
	va, n := mr.VA(), mr.Len()
	tok := mr.RemoteToken()
	frTok := fr.RemoteToken()
	frEnd := frBase + 4*ps - 200
	const rd, wr = AccessRemoteRead, AccessRemoteWrite
	tests := []struct {
		name   string
		pd     PD
		token  uint32
		addr   uint64
		length uint32
		access Access
		want   error
		owner  *MR // the region a success holds
	}{
		{"MR whole", pd, tok, va, uint32(n), rd, nil, mr},
		{"MR tail byte", pd, tok, va + n - 1, 1, rd, nil, mr},
		{"MR zero length at base", pd, tok, va, 0, rd, nil, mr},
		{"MR zero length at end", pd, tok, va + n, 0, rd, nil, mr},
		{"MR no access bits", pd, tok, va, 5, 0, nil, mr},
		{"window", pd, mw.RemoteToken(), va + ps + 10, 100, rd, nil, mr},
		{"window whole", pd, mw.RemoteToken(), va + ps, ps, rd, nil, mr},
		{"FR whole (non-contiguous)", pd, frTok, frBase, 4*ps - 200, rd | wr, nil, fr},
		{"FR inside a page", pd, frTok, frBase + 5, 50, wr, nil, fr},
		{"FR across contiguous pages", pd, frTok, frBase + ps - 150, 100, rd, nil, fr},
		{"FR across a jump", pd, frTok, frBase + 2*ps - 150, 100, rd, nil, fr},
		{"FR zero length at end", pd, frTok, frEnd, 0, rd, nil, fr},
		{"re-registered FR", pd, frRe.RemoteToken(), 0x1000, 10, rd, nil, frRe},
		{"slot reused", pd, reused.RemoteToken(), reused.VA(), 100, rd, nil, reused},

		{"token 0", pd, 0, va, 1, rd, ErrBadToken, nil},
		{"index past the table", pd, tok | r.idxMask, va, 1, rd, ErrBadToken, nil},
		{"wrong tag", pd, tok ^ (1 << r.idxBits), va, 1, rd, ErrStale, nil},
		{"deregistered MR", pd, deadTok, dead.VA(), 1, rd, ErrStale, nil},
		{"deregistered MR, slot reused", pd, deadTok, reused.VA(), 1, rd, ErrStale, nil},
		{"invalidated window", pd, mwInvTok, va, 1, rd, ErrStale, nil},
		{"remotely invalidated window", pd, mwRemTok, va, 1, rd, ErrStale, nil},
		{"closed window", pd, mwClosedTok, va, 1, rd, ErrStale, nil},
		{"FR never registered", pd, frUnreg.RemoteToken(), 0x1000, 1, rd, ErrStale, nil},
		{"invalidated FR", pd, frInvTok, 0x1000, 1, rd, ErrStale, nil},
		{"remotely invalidated FR", pd, frRemTok, 0x1000, 1, rd, ErrStale, nil},
		{"deregistered FR", pd, frDeadTok, 0x1000, 1, rd, ErrStale, nil},
		{"FR token before re-registration", pd, frReOld, 0x1000, 1, rd, ErrStale, nil},
		{"wrong PD, MR", otherPD, tok, va, 1, rd, ErrWrongPD, nil},
		{"wrong PD, window", otherPD, mw.RemoteToken(), va + ps, 1, rd, ErrWrongPD, nil},
		{"wrong PD, FR", otherPD, frTok, frBase, 1, rd, ErrWrongPD, nil},
		{"write on read-only MR", pd, tok, va, 1, wr, ErrRights, nil},
		{"write on read window", pd, mw.RemoteToken(), va + ps, 1, wr, ErrRights, nil},
		{"read on local-only MR", pd, ro.RemoteToken(), ro.VA(), 1, rd, ErrRights, nil},
		{"unknown access bit", pd, tok, va, 1, 0x80, ErrRights, nil},
		{"local token of MR", pd, mr.LocalToken(), va, 1, rd, ErrRights, nil},
		{"local token of MR, no access", pd, mr.LocalToken(), va, 1, 0, ErrRights, nil},
		{"local token of FR", pd, fr.LocalToken(), frBase, 1, rd, ErrRights, nil},
		{"before base", pd, tok, va - 1, 1, rd, ErrBounds, nil},
		{"past end", pd, tok, va + n, 1, rd, ErrBounds, nil},
		{"straddles end", pd, tok, va + n - 1, 2, rd, ErrBounds, nil},
		{"zero length past end", pd, tok, va + n + 1, 0, rd, ErrBounds, nil},
		{"window before its start", pd, mw.RemoteToken(), va + ps - 1, 1, rd, ErrBounds, nil},
		{"window past its end", pd, mw.RemoteToken(), va + 2*ps, 1, rd, ErrBounds, nil},
		{"FR before base", pd, frTok, frBase - 1, 1, rd, ErrBounds, nil},
		{"FR straddles end", pd, frTok, frEnd - 1, 2, rd, ErrBounds, nil},
		{"FR length 2^32-1", pd, frTok, frBase, ^uint32(0), rd, ErrBounds, nil},
		{"addr+length wraps 2^64", pd, tok, ^uint64(0) - 1, 10, rd, ErrBounds, nil},
		{"FR addr+length wraps 2^64", pd, frTok, ^uint64(0) - 5, 10, rd, ErrBounds, nil},
		{"addr far past end", pd, tok, ^uint64(0), 0, rd, ErrBounds, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := refsOf(all)
			rb, rerr := r.Resolve(tc.pd, tc.token, tc.addr, tc.length, tc.access)
			sp, err := r.Acquire(tc.pd, tc.token, tc.addr, tc.length, tc.access)
			wantErr(t, "Acquire", err, tc.want)
			if rerr != nil && !errors.Is(rerr, ErrNotContiguous) && err != rerr {
				t.Fatalf("Acquire: %v, Resolve: %v", err, rerr)
			}
			if err != nil {
				if sp.MR != nil || sp.Buf != nil || sp.N != 0 {
					t.Fatalf("refused Acquire returned %+v", sp)
				}
				if got := refsOf(all); fmt.Sprint(got) != fmt.Sprint(before) {
					t.Fatalf("refused Acquire changed holds: %v -> %v", before, got)
				}
				return
			}
			if sp.MR != tc.owner {
				t.Fatalf("Acquire holds %p, want %p", sp.MR, tc.owner)
			}
			got := refsOf(all)
			for i, m := range all {
				want := before[i]
				if m == tc.owner {
					want++
				}
				if got[i] != want {
					t.Fatalf("holds of MR %d: %d, want %d", i, got[i], want)
				}
			}
			if sp.Len() != int(tc.length) {
				t.Fatalf("Len %d, want %d", sp.Len(), tc.length)
			}
			out := make([]byte, tc.length)
			if c := sp.CopyOut(0, out); c != int(tc.length) {
				t.Fatalf("CopyOut copied %d of %d", c, tc.length)
			}
			if rerr == nil {
				if !bytes.Equal(out, rb) {
					t.Fatal("Acquire's bytes differ from Resolve's")
				}
				if tc.length > 0 && &sp.Buf[0] != &rb[0] {
					t.Fatal("contiguous span is not Resolve's slice")
				}
			}
			sp.MR.Release()
			if got := refsOf(all); fmt.Sprint(got) != fmt.Sprint(before) {
				t.Fatalf("Release did not restore holds: %v -> %v", before, got)
			}
		})
	}
	for _, m := range all {
		if m.Refs() != 0 {
			t.Fatalf("holds left: %v", refsOf(all))
		}
	}
}

// TestAcquireHoldOutlivesInvalidation: a hold taken before an invalidation keeps its bytes
// and keeps WaitIdle waiting; the token is dead at once.
func TestAcquireHoldOutlivesInvalidation(t *testing.T) {
	f := newRegFixture(t, MRAllowRemoteWrite|MRAllowRemoteRead)
	r, pd, mr := f.r, f.pd, f.mr
	mw, _ := r.CreateMW(pd)
	wantErr(t, "Bind", r.Bind(1, mw, mr, mr.VA()+64, 64, OpAllowRemoteWrite), nil)
	sp, err := r.Acquire(pd, mw.RemoteToken(), mr.VA()+64, 64, AccessRemoteWrite)
	wantErr(t, "Acquire", err, nil)
	sp2, err := r.Acquire(pd, mr.RemoteToken(), mr.VA(), 8, AccessRemoteRead)
	wantErr(t, "Acquire", err, nil)
	if mr.Refs() != 2 {
		t.Fatalf("Refs %d, want 2", mr.Refs())
	}
	old := mw.RemoteToken()
	wantErr(t, "InvalidateMW", r.InvalidateMW(mw), nil)
	_, err = r.Acquire(pd, old, mr.VA()+64, 1, AccessRemoteWrite)
	wantErr(t, "Acquire after InvalidateMW", err, ErrStale)
	wantErr(t, "DeregisterMR with holds", r.DeregisterMR(mr), nil)
	_, err = r.Acquire(pd, mr.RemoteToken(), mr.VA(), 1, AccessRemoteRead)
	wantErr(t, "Acquire after DeregisterMR", err, ErrStale)
	if c := sp.CopyIn(0, []byte("held")); c != 4 || string(f.buf[64:68]) != "held" {
		t.Fatal("held span lost its bytes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	if err := mr.WaitIdle(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitIdle with holds: %v", err)
	}
	sp.MR.Release()
	sp2.MR.Release()
	if err := mr.WaitIdle(context.Background()); err != nil {
		t.Fatalf("WaitIdle: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Release without a hold did not panic")
		}
	}()
	mr.Release()
}

// spanModel is a fast-registered region: its pages (indices into mem) and FBO, and the
// span's bytes as the concatenation of the pages.
type spanModel struct {
	mem   []byte
	pages []int
	fbo   int
}

// memOff is the offset in mem of byte i of the region.
func (m *spanModel) memOff(i uint64) int {
	p := uint64(m.fbo) + i
	return m.pages[p/ps]*ps + int(p%ps)
}

// contiguousEnd is the region offset where the contiguous run containing byte i ends.
func (m *spanModel) contiguousEnd(i uint64) uint64 {
	k := (uint64(m.fbo) + i) / ps
	for k+1 < uint64(len(m.pages)) && m.pages[k+1] == m.pages[k]+1 {
		k++
	}
	return (k+1)*ps - uint64(m.fbo)
}

// TestSpanFastRegistered: Piece, CopyIn and CopyOut of spans over out-of-order, partly
// contiguous pages, at every page-boundary offset and length, against the concatenated
// pages. Copies past the end are short.
func TestSpanFastRegistered(t *testing.T) {
	const npages = 8
	mem := make([]byte, npages*ps)
	orig := patterned(len(mem))
	p := pagesOf(mem)
	layouts := [][]int{
		{3, 4, 5, 0, 7, 6, 1},    // runs 3-5, 0, 7, 6, 1
		{0, 1, 2, 3},             // one run
		{6, 4, 2, 0},             // no two contiguous
		{2, 2, 3},                // the same page twice
		{5},                      // one page
		{7, 0, 1, 2, 3, 4, 5, 6}, // wrap-around order
	}
	for _, layout := range layouts {
		for _, fbo := range []int{0, 1, 100, ps - 1} {
			for _, tail := range []int{0, 1, ps - 1 - fbo} {
				length := uint64(len(layout)*ps - fbo - tail)
				name := fmt.Sprintf("pages%v/fbo%d/len%d", layout, fbo, length)
				t.Run(name, func(t *testing.T) {
					checkSpanLayout(t, mem, orig, p, layout, fbo, length)
				})
			}
		}
	}
}

func checkSpanLayout(t *testing.T, mem, orig []byte, p [][]byte, layout []int, fbo int, length uint64) {
	r := NewRegistry(4)
	pd := r.NewPD()
	fr, _ := r.NewFastRegisterMR(pd, len(layout), true)
	pages := make([][]byte, len(layout))
	for i, k := range layout {
		pages[i] = p[k]
	}
	base := uint64(0x5_0000_0000) + uint64(fbo)
	if err := r.FastRegister(fr, pages, fbo, length, base, OpAllowRemoteRead|OpAllowRemoteWrite); err != nil {
		t.Fatal(err)
	}
	m := &spanModel{mem: mem, pages: layout, fbo: fbo}
	copy(mem, orig)
	model := make([]byte, length) // the region as the concatenated pages
	moff := make([]int, length)   // region offset -> mem offset
	for i := range model {
		moff[i] = m.memOff(uint64(i))
		model[i] = mem[moff[i]]
	}
	// Offsets at and around every page boundary of the region, its ends, and beyond.
	var offs []uint64
	add := func(o uint64) {
		if o <= length+2 {
			offs = append(offs, o)
		}
	}
	for k := 0; k <= len(layout); k++ {
		b := uint64(k*ps) - uint64(fbo)
		if k == 0 {
			b = 0
		}
		add(b)
		add(b + 1)
		if b > 0 {
			add(b - 1)
		}
	}
	add(length)
	add(length + 1)

	whole, err := r.Acquire(pd, fr.RemoteToken(), base, uint32(length), AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	defer whole.MR.Release()
	if whole.Len() != int(length) {
		t.Fatalf("Len %d, want %d", whole.Len(), length)
	}
	// Piece: the longest contiguous run from off, never past the end.
	var cat []byte
	for off := uint64(0); off < length; {
		pc := whole.Piece(off)
		want := min(m.contiguousEnd(off), length) - off
		if uint64(len(pc)) != want || cap(pc) != len(pc) || &pc[0] != &mem[m.memOff(off)] {
			t.Fatalf("Piece(%d): %d bytes (cap %d), want %d at mem %d", off, len(pc), cap(pc), want, m.memOff(off))
		}
		cat = append(cat, pc...)
		off += uint64(len(pc))
	}
	if !bytes.Equal(cat, model) {
		t.Fatal("pieces do not concatenate to the region")
	}
	if len(whole.Buf) == 0 && length > 0 || !bytes.Equal(whole.Buf, whole.Piece(0)) {
		t.Fatal("Buf is not the first piece")
	}
	for _, off := range offs {
		if off < length {
			pc := whole.Piece(off)
			if want := min(m.contiguousEnd(off), length) - off; uint64(len(pc)) != want {
				t.Fatalf("Piece(%d): %d bytes, want %d", off, len(pc), want)
			}
		} else if whole.Piece(off) != nil {
			t.Fatalf("Piece(%d) at or past the end is not nil", off)
		}
	}
	if whole.Piece(^uint64(0)) != nil {
		t.Fatal("Piece(2^64-1) is not nil")
	}

	src := make([]byte, length+ps)
	for i := range src {
		src[i] = byte(i*7 + 3)
	}
	dst := make([]byte, length+ps)
	exp := make([]byte, len(mem))
	for _, off := range offs {
		for _, end := range offs {
			if end < off {
				continue
			}
			n := end - off // request length; it may reach past the span's end
			want := uint64(0)
			if off < length {
				want = min(n, length-off)
			}
			// CopyOut from the whole span.
			clear(dst)
			if c := whole.CopyOut(off, dst[:n]); uint64(c) != want {
				t.Fatalf("CopyOut(%d, %d bytes): %d, want %d", off, n, c, want)
			}
			if !bytes.Equal(dst[:want], model[min(off, length):][:want]) || !allZero(dst[want:n]) {
				t.Fatalf("CopyOut(%d, %d bytes) copied the wrong bytes", off, n)
			}
			// CopyIn into the whole span: exactly the model's bytes change.
			copy(mem, orig)
			if c := whole.CopyIn(off, src[:n]); uint64(c) != want {
				t.Fatalf("CopyIn(%d, %d bytes): %d, want %d", off, n, c, want)
			}
			copy(exp, orig)
			for j := uint64(0); j < want; { // the model's writes, page by page
				k := min(want-j, ps-(uint64(fbo)+off+j)%ps)
				copy(exp[moff[off+j]:], src[j:j+k])
				j += k
			}
			if !bytes.Equal(mem, exp) {
				t.Fatalf("CopyIn(%d, %d bytes) wrote the wrong bytes", off, n)
			}
			copy(mem, orig)
			// A span acquired for exactly [off, off+want) reads the same bytes.
			if off <= length {
				sub, err := r.Acquire(pd, fr.RemoteToken(), base+off, uint32(want), AccessRemoteRead)
				if err != nil {
					t.Fatalf("Acquire(off %d, len %d): %v", off, want, err)
				}
				clear(dst)
				if c := sub.CopyOut(0, dst[:n]); uint64(c) != want || !bytes.Equal(dst[:want], model[off:off+want]) {
					t.Fatalf("sub-span (off %d, len %d): CopyOut %d bytes, wrong or short", off, want, c)
				}
				if sub.CopyIn(want, src[:1]) != 0 || sub.CopyOut(want, dst[:1]) != 0 {
					t.Fatal("copy at a sub-span's end is not empty")
				}
				sub.MR.Release()
			}
		}
	}
	if whole.CopyIn(^uint64(0), src[:10]) != 0 || whole.CopyOut(^uint64(0)-3, dst[:10]) != 0 {
		t.Fatal("copy at offset near 2^64 is not empty")
	}
}

// TestSpanContiguous: Piece and copies of spans over a normal MR, a window, and the zero
// Span; short at the end, never a panic.
func TestSpanContiguous(t *testing.T) {
	f := newRegFixture(t, MRAllowRemoteWrite|MRAllowRemoteRead)
	r, pd, mr := f.r, f.pd, f.mr
	mw, _ := r.CreateMW(pd)
	wantErr(t, "Bind", r.Bind(1, mw, mr, mr.VA()+1000, 300, OpAllowRemoteWrite|OpAllowRemoteRead), nil)
	for _, tc := range []struct {
		name string
		tok  uint32
		off  int // of the span's first byte in f.buf
		n    int
	}{
		{"MR", mr.RemoteToken(), 10, 200},
		{"window", mw.RemoteToken(), 1100, 200},
		{"window to its end", mw.RemoteToken(), 1000, 300},
		{"empty", mr.RemoteToken(), 5, 0},
	} {
		sp, err := r.Acquire(pd, tc.tok, mr.VA()+uint64(tc.off), uint32(tc.n), AccessRemoteRead|AccessRemoteWrite)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		orig := bytes.Clone(f.buf)
		for off := 0; off <= tc.n+1; off++ {
			for _, n := range []int{0, 1, tc.n - off - 1, tc.n - off, tc.n - off + 1, tc.n + 5} {
				if n < 0 {
					continue
				}
				want := max(0, min(n, tc.n-off))
				pc := sp.Piece(uint64(off))
				if off < tc.n && (len(pc) != tc.n-off || &pc[0] != &f.buf[tc.off+off] || cap(pc) != len(pc)) {
					t.Fatalf("%s: Piece(%d) wrong", tc.name, off)
				}
				if off >= tc.n && pc != nil {
					t.Fatalf("%s: Piece(%d) past the end", tc.name, off)
				}
				dst := make([]byte, n)
				if c := sp.CopyOut(uint64(off), dst); c != want || !bytes.Equal(dst[:c], orig[tc.off+off:][:c]) {
					t.Fatalf("%s: CopyOut(%d, %d) = %d, want %d", tc.name, off, n, c, want)
				}
				src := bytes.Repeat([]byte{0xA5}, n)
				if c := sp.CopyIn(uint64(off), src); c != want {
					t.Fatalf("%s: CopyIn(%d, %d) = %d, want %d", tc.name, off, n, c, want)
				}
				exp := bytes.Clone(orig)
				copy(exp[tc.off+off:], src[:want])
				if !bytes.Equal(f.buf, exp) {
					t.Fatalf("%s: CopyIn(%d, %d) wrote outside its range", tc.name, off, n)
				}
				copy(f.buf, orig)
			}
		}
		sp.MR.Release()
	}
	var zero Span
	if zero.Len() != 0 || zero.Piece(0) != nil || zero.CopyIn(0, []byte{1}) != 0 || zero.CopyOut(0, make([]byte, 1)) != 0 {
		t.Fatal("zero Span is not empty")
	}
}

// TestAcquireInvalidateRace: engines Acquire a token, write a marker into the span and
// Release, in a loop, while the application invalidates or deregisters and then WaitIdles.
// Once the invalidation has returned no Acquire succeeds, and once WaitIdle has returned no
// engine writes the memory any more (the race detector sees a write after it too).
func TestAcquireInvalidateRace(t *testing.T) {
	type setup struct {
		tok    uint32
		va     uint64
		owner  *MR
		kill   func() error
		region []byte // the bytes the engines write
	}
	modes := []struct {
		name string
		make func(r *Registry, pd PD, buf []byte) (setup, error)
	}{
		{"DeregisterMR", func(r *Registry, pd PD, buf []byte) (setup, error) {
			mr, err := r.RegisterMR(pd, buf, MRAllowRemoteWrite)
			if err != nil {
				return setup{}, err
			}
			return setup{mr.RemoteToken(), mr.VA(), mr, func() error { return r.DeregisterMR(mr) }, buf}, nil
		}},
		{"InvalidateMW", func(r *Registry, pd PD, buf []byte) (setup, error) {
			mr, err := r.RegisterMR(pd, buf, MRAllowRemoteWrite)
			if err != nil {
				return setup{}, err
			}
			mw, _ := r.CreateMW(pd)
			if err := r.Bind(1, mw, mr, mr.VA()+ps, ps, OpAllowRemoteWrite); err != nil {
				return setup{}, err
			}
			return setup{mw.RemoteToken(), mr.VA() + ps, mr, func() error { return r.InvalidateMW(mw) }, buf[ps : 2*ps]}, nil
		}},
		{"remote Invalidate of MW", func(r *Registry, pd PD, buf []byte) (setup, error) {
			mr, err := r.RegisterMR(pd, buf, MRAllowRemoteWrite)
			if err != nil {
				return setup{}, err
			}
			mw, _ := r.CreateMW(pd)
			if err := r.Bind(1, mw, mr, mr.VA(), ps, OpAllowRemoteWrite); err != nil {
				return setup{}, err
			}
			tok := mw.RemoteToken()
			return setup{tok, mr.VA(), mr, func() error { return r.Invalidate(pd, tok) }, buf[:ps]}, nil
		}},
		{"InvalidateMR", func(r *Registry, pd PD, buf []byte) (setup, error) {
			fr, _ := r.NewFastRegisterMR(pd, 2, true)
			p := pagesOf(buf)
			if err := r.FastRegister(fr, [][]byte{p[1], p[0]}, 0, 2*ps, 0x3000, OpAllowRemoteWrite); err != nil {
				return setup{}, err
			}
			return setup{fr.RemoteToken(), 0x3000, fr, func() error { return r.InvalidateMR(fr) }, buf[:2*ps]}, nil
		}},
		{"remote Invalidate of FR", func(r *Registry, pd PD, buf []byte) (setup, error) {
			fr, _ := r.NewFastRegisterMR(pd, 2, true)
			p := pagesOf(buf)
			if err := r.FastRegister(fr, [][]byte{p[1], p[0]}, 0, 2*ps, 0x3000, OpAllowRemoteWrite); err != nil {
				return setup{}, err
			}
			tok := fr.RemoteToken()
			return setup{tok, 0x3000, fr, func() error { return r.Invalidate(pd, tok) }, buf[:2*ps]}, nil
		}},
	}
	const (
		engines = 4
		rounds  = 40
		marker  = 0x5A
		clean   = 0xEE
	)
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			for range rounds {
				r := NewRegistry(8)
				pd := r.NewPD()
				buf := make([]byte, 2*ps)
				s, err := mode.make(r, pd, buf)
				if err != nil {
					t.Fatal(err)
				}
				var killed, stop atomic.Bool
				var late, wrongErr atomic.Int64
				var attempts [engines]atomic.Int64
				var started sync.WaitGroup
				var wg sync.WaitGroup
				started.Add(engines)
				for e := range engines {
					wg.Go(func() {
						first := true
						for n := uint64(0); !stop.Load(); n++ {
							after := killed.Load() // loaded before Acquire starts
							// Each engine writes its own stripe: engines do not race each other.
							stripe := uint64(len(s.region) / engines)
							off := uint64(e)*stripe + (n*16)%(stripe-15)
							sp, err := r.Acquire(pd, s.tok, s.va+off, 16, AccessRemoteWrite)
							attempts[e].Add(1)
							if err != nil {
								if !errors.Is(err, ErrStale) {
									wrongErr.Add(1)
								}
								runtime.Gosched()
								if first && !after && n > 100000 {
									first = false // never succeeds: let the test fail, not hang
									started.Done()
								}
								continue
							}
							if after {
								late.Add(1)
							}
							var mark [16]byte
							for i := range mark {
								mark[i] = marker
							}
							// Hold the region across a reschedule, as a packet being
							// placed would be held.
							sp.CopyIn(0, mark[:8])
							runtime.Gosched()
							sp.CopyIn(8, mark[8:])
							sp.MR.Release()
							runtime.Gosched() // let the application goroutine run on a small machine
							if first {
								first = false
								started.Done()
							}
						}
						if first {
							started.Done()
						}
					})
				}
				halt := func() {
					stop.Store(true)
					wg.Wait()
				}
				started.Wait() // every engine has written at least once (or stopped)
				if err := s.kill(); err != nil {
					halt()
					t.Fatal(err)
				}
				killed.Store(true)
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				err = s.owner.WaitIdle(ctx)
				cancel()
				if err != nil {
					halt()
					t.Fatalf("WaitIdle: %v", err)
				}
				// The memory is the application's again.
				for i := range s.region {
					s.region[i] = clean
				}
				// Let every engine try a while longer.
				var base [engines]int64
				for e := range engines {
					base[e] = attempts[e].Load()
				}
				for e := 0; e < engines; {
					if attempts[e].Load() < base[e]+200 {
						runtime.Gosched()
						continue
					}
					e++
				}
				halt()
				if n := late.Load(); n != 0 {
					t.Fatalf("%d Acquires succeeded after the invalidation returned", n)
				}
				if n := wrongErr.Load(); n != 0 {
					t.Fatalf("%d Acquires failed with an error other than ErrStale", n)
				}
				for i, c := range s.region {
					if c != clean {
						t.Fatalf("byte %d written after WaitIdle returned", i)
					}
				}
				if s.owner.Refs() != 0 {
					t.Fatalf("Refs %d after the engines stopped", s.owner.Refs())
				}
			}
		})
	}
}

// TestAcquireNoAllocs: Acquire+Release (of a region, a window, fast-registered pages, and a
// refusal) and Span copies across pages allocate nothing.
func TestAcquireNoAllocs(t *testing.T) {
	f := newRegFixture(t, MRAllowRemoteWrite|MRAllowRemoteRead)
	r, pd, mr := f.r, f.pd, f.mr
	mw, _ := r.CreateMW(pd)
	wantErr(t, "Bind", r.Bind(1, mw, mr, mr.VA()+ps, 2*ps, OpAllowRemoteWrite|OpAllowRemoteRead), nil)
	fr, _ := r.NewFastRegisterMR(pd, 4, true)
	p := pagesOf(f.buf)
	wantErr(t, "FastRegister", r.FastRegister(fr, [][]byte{p[3], p[4], p[0], p[9]}, 10, 4*ps-10, 0x1000+10,
		OpAllowRemoteRead|OpAllowRemoteWrite), nil)
	frSpan, err := r.Acquire(pd, fr.RemoteToken(), 0x1000+100, 3*ps, AccessRemoteRead)
	wantErr(t, "Acquire", err, nil)
	defer frSpan.MR.Release()
	buf := make([]byte, 3*ps)
	acquireRelease := func(tok uint32, addr uint64, n uint32, want error) func() {
		return func() {
			sp, err := r.Acquire(pd, tok, addr, n, AccessRemoteRead)
			if err != want {
				panic(fmt.Sprintf("Acquire: %v, want %v", err, want))
			}
			if err == nil {
				sp.MR.Release()
			}
		}
	}
	for _, tc := range []struct {
		name string
		run  func()
	}{
		{"MR", acquireRelease(mr.RemoteToken(), mr.VA()+10, 100, nil)},
		{"window", acquireRelease(mw.RemoteToken(), mr.VA()+ps+5, 100, nil)},
		{"FR across pages", acquireRelease(fr.RemoteToken(), 0x1000+100, 3*ps, nil)},
		{"refused", acquireRelease(fr.RemoteToken(), 0, 1, ErrBounds)},
		{"CopyIn across pages", func() {
			if frSpan.CopyIn(1, buf[:3*ps-1]) != 3*ps-1 {
				panic("short CopyIn")
			}
		}},
		{"CopyOut across pages", func() {
			if frSpan.CopyOut(0, buf) != 3*ps {
				panic("short CopyOut")
			}
		}},
	} {
		if allocs := testing.AllocsPerRun(1000, tc.run); allocs != 0 {
			t.Errorf("%s: %v allocations per run", tc.name, allocs)
		}
	}
	if mr.Refs() != 0 || fr.Refs() != 1 {
		t.Fatalf("holds leaked: MR %d, FR %d (want 0 and 1)", mr.Refs(), fr.Refs())
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	f := newRegFixture(b, MRAllowRemoteWrite|MRAllowRemoteRead)
	r, pd, mr := f.r, f.pd, f.mr
	b.Run("MR", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sp, err := r.Acquire(pd, mr.RemoteToken(), mr.VA()+100, 1024, AccessRemoteWrite)
			if err != nil {
				b.Fatal(err)
			}
			sp.MR.Release()
		}
	})
	b.Run("FR-pages", func(b *testing.B) {
		fr, _ := r.NewFastRegisterMR(pd, 4, true)
		p := pagesOf(f.buf)
		if err := r.FastRegister(fr, [][]byte{p[3], p[0], p[7], p[1]}, 0, 4*ps, 0x1000, OpAllowRemoteWrite); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			sp, err := r.Acquire(pd, fr.RemoteToken(), 0x1000+ps-100, 2*ps+200, AccessRemoteWrite)
			if err != nil {
				b.Fatal(err)
			}
			sp.MR.Release()
		}
	})
}
