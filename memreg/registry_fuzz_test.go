package memreg

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
)

// fuzzReader hands out bytes of the fuzz input, then zeros.
type fuzzReader struct{ b []byte }

func (r *fuzzReader) u8() byte {
	if len(r.b) == 0 {
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *fuzzReader) u16() uint16 { return uint16(r.u8()) | uint16(r.u8())<<8 }

func (r *fuzzReader) u32() uint32 { return uint32(r.u16()) | uint32(r.u16())<<16 }

// Model of the registry: what each live token must resolve to.
type fzMap struct {
	pd     PD
	local  bool // a local token: never grants remote access
	access Access
	base   uint64
	length uint64
	fr     bool
	off    int   // normal MR / MW: offset of the first byte in mem
	fbo    int   // FR: first byte offset
	pages  []int // FR: page numbers in mem
	kind   kind
	owner  *fzMR // the region an Acquire of the token holds
}

type fzMR struct {
	mr          *MR
	pd          PD
	off, n      int
	flags       MRFlags
	fast, alive bool
	pageCount   int
	remote      bool
	windows     int
	tokens      []uint32 // live tokens
	registered  bool     // FR: currently fast-registered
}

type fzMW struct {
	mw           *MW
	pd           PD
	alive, bound bool
	mr           *fzMR
	token        uint32
}

const fzMemPages = 4

// FuzzResolve decodes the input into register/bind/fast-register/invalidate/deregister/
// resolve operations on a small registry, runs them, and compares every Resolve and
// Invalidate with a map model of the live tokens, and every control operation's success with
// the model's rules. It must never panic.
func FuzzResolve(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 16, 0, 7, 9, 0, 0, 0, 0, 0, 4, 0, 3})
	f.Add([]byte{0, 1, 0, 0, 0, 1, 5, 2, 0, 3, 0, 0, 0, 0, 0, 64, 0x38, 9, 1, 0, 8, 0, 16, 0, 1, 4, 0, 9, 1, 0, 8, 0, 16, 0, 1})
	f.Add([]byte{5, 0, 4, 1, 6, 0, 0, 1, 2, 3, 0, 0, 0, 1, 0x38, 9, 0, 0, 0xf0, 0x0f, 32, 0, 1, 8, 0, 0, 9, 0, 0, 0, 0, 1, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) { fuzzRegistry(t, data, false) })
}

// FuzzAcquire is FuzzResolve with two more operations: Acquire, checked like Resolve (except
// that non-contiguous pages are no error) and for its bytes (CopyOut, and CopyIn into the
// model's memory) and the region it holds; and Release of a hold, after checking that the
// held bytes are still the model's. After every operation each MR's Refs equals the model's
// outstanding holds on it, and holds outlive invalidation and deregistration.
func FuzzAcquire(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 16, 0, 7, 12, 0, 0, 0, 0, 0, 4, 0, 3, 1, 13, 0, 1})
	f.Add([]byte{5, 0, 4, 1, 6, 0, 4, 1, 3, 0, 2, 100, 0, 0, 0x30, 0, 1, 0, 0x38,
		12, 0, 1, 0, 0x9c, 0x0f, 0x10, 0x20, 0, 3, 1, 7, 0, 12, 0, 1, 0, 0, 0, 1, 0, 0, 1, 0, 13, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) { fuzzRegistry(t, data, true) })
}

// fzHold is a hold the model expects: an Acquire that succeeded and was not released.
type fzHold struct {
	sp    Span
	owner *fzMR
	m     *fzMap
	off   uint64 // offset of the span's first byte in the mapping
}

// fzMemOff is the offset into the fuzz memory of byte off of mapping m.
func fzMemOff(m *fzMap, off uint64) int {
	if !m.fr {
		return m.off + int(off)
	}
	p := uint64(m.fbo) + off
	return m.pages[p/FastRegisterPageSize]*FastRegisterPageSize + int(p%FastRegisterPageSize)
}

// fzCheckSpan compares n bytes of a span from off with the model's memory.
func fzCheckSpan(t *testing.T, sp *Span, mem []byte, m *fzMap, start, off uint64, n int) {
	t.Helper()
	got := make([]byte, n+3) // longer: the copy must stop at the span's end
	c := sp.CopyOut(off, got)
	want := 0
	if off < sp.N {
		want = int(min(uint64(n+3), sp.N-off))
	}
	if c != want {
		t.Fatalf("CopyOut(%d, %d bytes) of a %d-byte span copied %d, want %d", off, n+3, sp.N, c, want)
	}
	for i := range c {
		if got[i] != mem[fzMemOff(m, start+off+uint64(i))] {
			t.Fatalf("span byte %d (mapping offset %d) differs from the model", off+uint64(i), start+off+uint64(i))
		}
	}
}

// fzDecodeAccess reads a remote access: PD, token (often a live or issued one) and a range
// near the mapping the token names.
func fzDecodeAccess(in *fuzzReader, pds []PD, live map[uint32]*fzMap, pickTok func() uint32) (PD, uint32, *fzMap, uint64, uint32, Access) {
	pd := pds[in.u8()%2]
	tok := pickTok()
	mp := live[tok]
	sel := in.u8()
	delta := uint64(int64(int16(in.u16())))
	addr := delta
	switch {
	case sel&0x80 != 0:
		addr = binary.LittleEndian.Uint64([]byte{in.u8(), in.u8(), in.u8(), in.u8(), in.u8(), in.u8(), in.u8(), in.u8()})
	case mp != nil:
		addr = mp.base + delta
	}
	length := uint32(in.u16())
	if in.u8()&0x80 != 0 {
		length = in.u32()
	}
	access := Access(in.u8() & 3)
	return pd, tok, mp, addr, length, access
}

// fuzzRegistry runs the operations data decodes to (with Acquire and Release when acquire is
// true) against a registry and the model.
func fuzzRegistry(t *testing.T, data []byte, acquire bool) {
	in := &fuzzReader{b: data}
	r := NewRegistry(8)
	pds := []PD{r.NewPD(), r.NewPD()}
	mem := make([]byte, fzMemPages*FastRegisterPageSize)
	memVA := bufVA(mem)
	pages := pagesOf(mem)
	var mrs []*fzMR
	var mws []*fzMW
	live := map[uint32]*fzMap{}
	var issued []uint32
	slotsUsed := 0
	addTok := func(tok uint32, m *fzMap) {
		if tok == 0 {
			t.Fatal("token 0 handed out")
		}
		if _, dup := live[tok]; dup {
			t.Fatalf("token %#x handed out while live", tok)
		}
		live[tok] = m
		issued = append(issued, tok)
	}
	pickMR := func() *fzMR {
		if len(mrs) == 0 {
			return nil
		}
		return mrs[int(in.u8())%len(mrs)]
	}
	pickMW := func() *fzMW {
		if len(mws) == 0 {
			return nil
		}
		return mws[int(in.u8())%len(mws)]
	}
	pickTok := func() uint32 {
		s := in.u8()
		if s >= 0xf0 || len(issued) == 0 {
			return in.u32()
		}
		return issued[int(s)%len(issued)]
	}
	unmapMR := func(m *fzMR) {
		for _, tok := range m.tokens {
			delete(live, tok)
		}
		m.tokens = nil
		m.registered = false
	}
	unbind := func(w *fzMW) {
		delete(live, w.token)
		w.bound = false
		w.mr.windows--
	}
	for i := range mem {
		mem[i] = byte(i*131 + i/FastRegisterPageSize*17)
	}
	var holds []fzHold
	checkRefs := func(after string) {
		for _, m := range mrs {
			n := 0
			for _, h := range holds {
				if h.owner == m {
					n++
				}
			}
			if m.mr.Refs() != n {
				t.Fatalf("after %s: Refs %d, model holds %d", after, m.mr.Refs(), n)
			}
		}
	}
	nops := byte(12)
	if acquire {
		nops = 14
	}
	for steps := 0; len(in.b) > 0 && steps < 200; steps++ {
		switch op := in.u8() % nops; op {
		case 0: // RegisterMR
			pd := pds[in.u8()%2]
			off := int(in.u16()) % len(mem)
			n := int(in.u16()) % (len(mem) - off + 1)
			flags := MRFlags(in.u8() & 0x1f)
			mr, err := r.RegisterMR(pd, mem[off:off+n], flags)
			ok := n > 0 && flags&^mrFlagsValid == 0 && !(flags&4 != 0 && flags&1 == 0) && slotsUsed < 8
			if (err == nil) != ok {
				t.Fatalf("RegisterMR(off %d n %d flags %#x): %v, model ok %v", off, n, flags, err, ok)
			}
			if err != nil {
				continue
			}
			slotsUsed++
			m := &fzMR{mr: mr, pd: pd, off: off, n: n, flags: flags, alive: true}
			m.tokens = []uint32{mr.LocalToken(), mr.RemoteToken()}
			base := memVA + uint64(off)
			addTok(mr.LocalToken(), &fzMap{pd: pd, local: true, base: base, length: uint64(n), off: off, kind: kindMR, owner: m})
			addTok(mr.RemoteToken(), &fzMap{pd: pd, access: mrAccess(flags), base: base, length: uint64(n), off: off, kind: kindMR, owner: m})
			mrs = append(mrs, m)
		case 1: // DeregisterMR
			m := pickMR()
			if m == nil {
				continue
			}
			err := r.DeregisterMR(m.mr)
			ok := m.alive && m.windows == 0
			if (err == nil) != ok {
				t.Fatalf("DeregisterMR: %v, model ok %v", err, ok)
			}
			if err == nil {
				unmapMR(m)
				m.alive = false
				slotsUsed--
			}
		case 2: // CreateMW
			pd := pds[in.u8()%2]
			mw, err := r.CreateMW(pd)
			if (err == nil) != (slotsUsed < 8) {
				t.Fatalf("CreateMW: %v with %d slots used", err, slotsUsed)
			}
			if err == nil {
				slotsUsed++
				mws = append(mws, &fzMW{mw: mw, pd: pd, alive: true})
			}
		case 3: // Bind
			w, m := pickMW(), pickMR()
			delta := int64(int16(in.u16()))
			length := uint64(in.u16())
			flags := OpFlags(in.u8()) & 0x3f
			if w == nil || m == nil {
				continue
			}
			va := uint64(int64(memVA) + int64(m.off) + delta)
			err := r.Bind(uint32(in.u8()), w.mw, m.mr, va, length, flags)
			rel := delta // va relative to the MR's VA
			ok := w.alive && m.alive && !m.fast && flags&^bindFlagsValid == 0 &&
				flags&0x30 != 0x20 && flags&0x30 != 0x10 && w.pd == m.pd &&
				rel >= 0 && rel < int64(m.n) && length <= uint64(int64(m.n)-rel) &&
				!(flags&0x30 == 0x30 && m.flags&1 == 0) && !w.bound
			if (err == nil) != ok {
				t.Fatalf("Bind(delta %d len %d flags %#x): %v, model ok %v", delta, length, flags, err, ok)
			}
			if err == nil {
				w.bound, w.mr, w.token = true, m, w.mw.RemoteToken()
				m.windows++
				addTok(w.token, &fzMap{pd: w.pd, access: opAccess(flags), base: va, length: length,
					off: m.off + int(rel), kind: kindMW, owner: m})
			}
		case 4: // InvalidateMW or CloseMW
			w := pickMW()
			if w == nil {
				continue
			}
			if in.u8()%4 == 0 {
				err := r.CloseMW(w.mw)
				if (err == nil) != w.alive {
					t.Fatalf("CloseMW: %v, alive %v", err, w.alive)
				}
				if err == nil {
					if w.bound {
						unbind(w)
					}
					w.alive = false
					slotsUsed--
				}
				continue
			}
			err := r.InvalidateMW(w.mw)
			if (err == nil) != (w.alive && w.bound) {
				t.Fatalf("InvalidateMW: %v, model bound %v", err, w.bound)
			}
			if err == nil {
				unbind(w)
			}
		case 5: // NewFastRegisterMR
			pd := pds[in.u8()%2]
			pc := int(in.u8()%6) - 1
			remote := in.u8()&1 != 0
			mr, err := r.NewFastRegisterMR(pd, pc, remote)
			ok := pc >= 1 && slotsUsed < 8
			if (err == nil) != ok {
				t.Fatalf("NewFastRegisterMR(%d): %v, model ok %v", pc, err, ok)
			}
			if err == nil {
				slotsUsed++
				mrs = append(mrs, &fzMR{mr: mr, pd: pd, fast: true, alive: true, pageCount: pc, remote: remote})
			}
		case 6: // FastRegister
			m := pickMR()
			np := int(in.u8() % 6)
			pg := make([]int, np)
			ps := make([][]byte, np)
			for i := range pg {
				pg[i] = int(in.u8()) % fzMemPages
				ps[i] = pages[pg[i]]
			}
			fbo := int(in.u16()) % (FastRegisterPageSize + 2)
			length := uint64(in.u16())
			vsel := in.u8()
			baseVA := uint64(in.u16())<<12 + uint64(fbo)
			if vsel&0x80 != 0 {
				baseVA = uint64(in.u32()) // usually misaligned
			}
			flags := OpFlags(in.u8()) & 0xbf
			if m == nil {
				continue
			}
			err := r.FastRegister(m.mr, ps, fbo, length, baseVA, flags)
			a := opAccess(flags)
			ok := m.alive && m.fast && flags&^frFlagsValid == 0 && flags&0x30 != 0x20 &&
				np >= 1 && np <= m.pageCount && fbo < FastRegisterPageSize &&
				length <= uint64(np*FastRegisterPageSize-fbo) && baseVA != 0 &&
				baseVA%FastRegisterPageSize == uint64(fbo) && baseVA+length >= baseVA &&
				!(a != 0 && !m.remote) && !m.registered
			if (err == nil) != ok {
				t.Fatalf("FastRegister(np %d fbo %d len %d va %#x flags %#x): %v, model ok %v",
					np, fbo, length, baseVA, flags, err, ok)
			}
			if err == nil {
				m.registered = true
				m.tokens = []uint32{m.mr.LocalToken(), m.mr.RemoteToken()}
				addTok(m.tokens[0], &fzMap{pd: m.pd, local: true, base: baseVA, length: length, fr: true, fbo: fbo, pages: pg, kind: kindFRMR, owner: m})
				addTok(m.tokens[1], &fzMap{pd: m.pd, access: a, base: baseVA, length: length, fr: true, fbo: fbo, pages: pg, kind: kindFRMR, owner: m})
			}
		case 7: // InvalidateMR
			m := pickMR()
			if m == nil {
				continue
			}
			err := r.InvalidateMR(m.mr)
			ok := m.alive && m.fast && m.registered
			if (err == nil) != ok {
				t.Fatalf("InvalidateMR: %v, model ok %v", err, ok)
			}
			if err == nil {
				unmapMR(m)
			}
		case 8: // Invalidate (SendAndInvalidate)
			pd := pds[in.u8()%2]
			tok := pickTok()
			err := r.Invalidate(pd, tok)
			mp := live[tok]
			ok := mp != nil && !mp.local && mp.pd == pd && mp.kind != kindMR
			if (err == nil) != ok {
				t.Fatalf("Invalidate(%#x): %v, model ok %v", tok, err, ok)
			}
			if err == nil {
				for _, m := range mrs {
					if len(m.tokens) == 2 && m.tokens[1] == tok {
						unmapMR(m)
					}
				}
				for _, w := range mws {
					if w.bound && w.token == tok {
						unbind(w)
					}
				}
			}
		case 12: // Acquire
			pd, tok, mp, addr, length, access := fzDecodeAccess(in, pds, live, pickTok)
			write := in.u8()
			sp, err := r.Acquire(pd, tok, addr, length, access)
			if mp == nil {
				if !errors.Is(err, ErrBadToken) && !errors.Is(err, ErrStale) {
					t.Fatalf("Acquire of dead token %#x: %v", tok, err)
				}
			} else {
				_, want := fzResolve(mp, pd, addr, length, access)
				if want == ErrNotContiguous {
					want = nil
				}
				if err != want {
					t.Fatalf("Acquire(%#x, addr %#x, len %d, access %d): %v, model %v (map %+v)", tok, addr, length, access, err, want, *mp)
				}
			}
			if err != nil {
				if sp.MR != nil || sp.Buf != nil || sp.N != 0 || sp.runs != nil {
					t.Fatalf("refused Acquire returned %+v", sp)
				}
				checkRefs("refused Acquire")
				continue
			}
			if sp.MR != mp.owner.mr || sp.Len() != int(length) {
				t.Fatalf("Acquire holds the wrong MR or has length %d, want %d", sp.Len(), length)
			}
			h := fzHold{sp: sp, owner: mp.owner, m: mp, off: addr - mp.base}
			holds = append(holds, h)
			checkRefs("Acquire")
			fzCheckSpan(t, &h.sp, mem, mp, h.off, 0, int(length))
			if write&1 != 0 && length > 0 {
				// Write through the span; the model's bytes must change.
				off := uint64(write>>1) % uint64(length)
				src := make([]byte, int(write)%64+1)
				for i := range src {
					src[i] = write + byte(i)
				}
				c := h.sp.CopyIn(off, src)
				if c != int(min(uint64(len(src)), uint64(length)-off)) {
					t.Fatalf("CopyIn(%d, %d bytes) of %d: %d", off, len(src), length, c)
				}
				for i := range c {
					if mem[fzMemOff(mp, h.off+off+uint64(i))] != src[i] {
						// Pages registered twice alias: a later byte may overwrite.
						if !fzAliased(mp, h.off+off, c) {
							t.Fatalf("CopyIn byte %d did not land in the model's memory", i)
						}
					}
				}
			}
		case 13: // Release
			if len(holds) == 0 {
				continue
			}
			i := int(in.u8()) % len(holds)
			h := holds[i]
			// The hold still reads its bytes, whatever happened to the token since.
			off := uint64(in.u16())
			fzCheckSpan(t, &h.sp, mem, h.m, h.off, off%(h.sp.N+2), int(in.u8()))
			h.sp.MR.Release()
			holds = append(holds[:i], holds[i+1:]...)
			checkRefs("Release")
		default: // Resolve
			pd, tok, mp, addr, length, access := fzDecodeAccess(in, pds, live, pickTok)
			b, err := r.Resolve(pd, tok, addr, length, access)
			wantOff, want := fzResolve(mp, pd, addr, length, access)
			if mp == nil {
				if !errors.Is(err, ErrBadToken) && !errors.Is(err, ErrStale) {
					t.Fatalf("Resolve of dead token %#x: %v", tok, err)
				}
				continue
			}
			if err != want {
				t.Fatalf("Resolve(%#x, addr %#x, len %d, access %d): %v, model %v (map %+v)", tok, addr, length, access, err, want, *mp)
			}
			if err == nil && (len(b) != int(length) || cap(b) != len(b) || (length > 0 && &b[0] != &mem[wantOff])) {
				t.Fatalf("Resolve returned %d bytes (cap %d), want %d at mem offset %d", len(b), cap(b), length, wantOff)
			}
		}
		checkRefs("a control operation")
	}
	for _, h := range holds {
		h.sp.MR.Release()
	}
	holds = nil
	checkRefs("releasing every hold")
	for _, m := range mrs {
		if err := m.mr.WaitIdle(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// Tear down: every window closes, then every region deregisters (and unpins mem).
	for _, w := range mws {
		if err := r.CloseMW(w.mw); (err == nil) != w.alive {
			t.Fatalf("CloseMW at the end: %v, alive %v", err, w.alive)
		}
	}
	for _, m := range mrs {
		if err := r.DeregisterMR(m.mr); (err == nil) != m.alive {
			t.Fatalf("DeregisterMR at the end: %v, alive %v", err, m.alive)
		}
	}
	if n := r.pins.pinned(); n != 0 {
		t.Fatalf("%d pages still pinned after every region was deregistered", n)
	}
}

// fzAliased reports whether the n bytes of FR mapping m from off touch some memory page
// twice (a page registered at two positions), so that a later write can overwrite an earlier.
func fzAliased(m *fzMap, off uint64, n int) bool {
	if !m.fr || n == 0 {
		return false
	}
	first := (uint64(m.fbo) + off) / FastRegisterPageSize
	last := (uint64(m.fbo) + off + uint64(n) - 1) / FastRegisterPageSize
	seen := map[int]bool{}
	for k := first; k <= last; k++ {
		if seen[m.pages[k]] {
			return true
		}
		seen[m.pages[k]] = true
	}
	return false
}

// fzResolve is the model of Resolve for a live mapping: the error and the offset into the
// fuzz memory of the first byte.
func fzResolve(m *fzMap, pd PD, addr uint64, length uint32, access Access) (int, error) {
	if m == nil {
		return 0, ErrStale
	}
	if m.pd != pd {
		return 0, ErrWrongPD
	}
	if m.local || access&^m.access != 0 {
		return 0, ErrRights
	}
	// Bounds, with big-integer care: the model works in uint64 but compares separately.
	if addr < m.base || addr-m.base > m.length || uint64(length) > m.length-(addr-m.base) {
		return 0, ErrBounds
	}
	off := addr - m.base
	if !m.fr {
		return m.off + int(off), nil
	}
	if length == 0 {
		return 0, nil
	}
	p := uint64(m.fbo) + off
	first, last := int(p/FastRegisterPageSize), int((p+uint64(length)-1)/FastRegisterPageSize)
	for k := first; k < last; k++ {
		if m.pages[k+1] != m.pages[k]+1 {
			return 0, ErrNotContiguous
		}
	}
	return m.pages[first]*FastRegisterPageSize + int(p%FastRegisterPageSize), nil
}
