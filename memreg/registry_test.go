package memreg

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

// regFixture is a registry with one PD and one 64 KiB region registered with all rights.
type regFixture struct {
	r   *Registry
	pd  PD
	buf []byte
	mr  *MR
}

func newRegFixture(t testing.TB, flags MRFlags) *regFixture {
	t.Helper()
	r := NewRegistry(64)
	pd := r.NewPD()
	buf := make([]byte, 1<<16)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	mr, err := r.RegisterMR(pd, buf, flags)
	if err != nil {
		t.Fatalf("RegisterMR: %v", err)
	}
	return &regFixture{r: r, pd: pd, buf: buf, mr: mr}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("%s: %v, want success", what, err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("%s: %v, want %v", what, err, want)
	}
}

func TestTokenFormat(t *testing.T) {
	r := NewRegistry(1000) // 10 index bits
	pd := r.NewPD()
	seen := map[uint32]bool{}
	buf := make([]byte, 16)
	for range 50 {
		mr, err := r.RegisterMR(pd, buf, MRAllowRemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range []uint32{mr.LocalToken(), mr.RemoteToken()} {
			if tok == 0 {
				t.Fatal("token 0 handed out")
			}
			if seen[tok] {
				t.Fatalf("token %#x handed out twice", tok)
			}
			seen[tok] = true
			if idx := tok & r.idxMask; idx != mr.idx+1 {
				t.Fatalf("token %#x has index %d, want %d", tok, idx, mr.idx+1)
			}
		}
		if err := r.DeregisterMR(mr); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Resolve(pd, mr.RemoteToken(), mr.VA(), 1, AccessRemoteRead); !errors.Is(err, ErrStale) {
			t.Fatalf("deregistered token resolves: %v", err)
		}
	}
	// Two registries number slots alike but salt them independently: the same index gets
	// different tags (with overwhelming probability over several slots).
	r2 := NewRegistry(1000)
	pd2 := r2.NewPD()
	same := 0
	for range 8 {
		a, _ := r.RegisterMR(pd, buf, 0)
		b, _ := r2.RegisterMR(pd2, buf, 0)
		if a.RemoteToken() == b.RemoteToken() {
			same++
		}
	}
	if same == 8 {
		t.Fatal("tokens are predictable across registries")
	}
}

// TestGenerationWrap drives one slot through more generations than its tag space; tokens
// stay non-zero and a stale token stays dead while the generation has not wrapped.
func TestGenerationWrap(t *testing.T) {
	r := NewRegistry(1 << 20) // 21 index bits, 11 tag bits: wrap after 1024 generations
	pd := r.NewPD()
	mr, err := r.RegisterMR(pd, make([]byte, 8192), MRAllowRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	mw, _ := r.CreateMW(pd)
	var first uint32
	for i := range 3000 {
		if err := r.Bind(1, mw, mr, mr.VA(), 4096, OpAllowRemoteRead); err != nil {
			t.Fatal(err)
		}
		tok := mw.RemoteToken()
		if tok == 0 {
			t.Fatal("token 0")
		}
		if i == 0 {
			first = tok
		} else if i < 1000 && tok == first {
			t.Fatalf("token reused after %d generations", i)
		}
		if err := r.InvalidateMW(mw); err != nil {
			t.Fatal(err)
		}
	}
}

// TestResolveRules: one row per Resolve rule with the sentinel it produces. Every refusal
// is STATUS_ACCESS_VIOLATION on the initiator (as NetworkDirect providers report it).
func TestResolveRules(t *testing.T) {
	f := newRegFixture(t, MRAllowRemoteRead|MRAllowLocalWrite)
	r, pd, mr := f.r, f.pd, f.mr
	otherPD := r.NewPD()
	ro, _ := r.RegisterMR(pd, make([]byte, 100), MRAllowLocalRead) // no remote rights
	dead, _ := r.RegisterMR(pd, make([]byte, 100), MRAllowRemoteRead)
	_ = r.DeregisterMR(dead)
	va, n := mr.VA(), mr.Len()
	tok := mr.RemoteToken()
	neighbour := (tok &^ r.idxMask) | ((tok + 1) & r.idxMask) // same tag, next index

	tests := []struct {
		name   string
		pd     PD
		token  uint32
		addr   uint64
		length uint32
		access Access
		want   error
	}{
		{"whole region", pd, tok, va, uint32(n), AccessRemoteRead, nil},
		{"tail byte", pd, tok, va + n - 1, 1, AccessRemoteRead, nil},
		{"empty at end", pd, tok, va + n, 0, AccessRemoteRead, nil},
		{"token 0", pd, 0, va, 1, AccessRemoteRead, ErrBadToken},
		{"index past the table", pd, tok | r.idxMask, va, 1, AccessRemoteRead, ErrBadToken},
		{"wrong tag (stale generation or guess)", pd, tok ^ (1 << r.idxBits), va, 1, AccessRemoteRead, ErrStale},
		{"deregistered", pd, dead.RemoteToken(), dead.VA(), 1, AccessRemoteRead, ErrStale},
		{"neighbour slot guessed", pd, neighbour, va, 1, AccessRemoteRead, ErrStale},
		{"wrong PD", otherPD, tok, va, 1, AccessRemoteRead, ErrWrongPD},
		{"write on read-only MR", pd, tok, va, 1, AccessRemoteWrite, ErrRights},
		{"read on local-only MR", pd, ro.RemoteToken(), ro.VA(), 1, AccessRemoteRead, ErrRights},
		{"local token used remotely", pd, mr.LocalToken(), va, 1, AccessRemoteRead, ErrRights},
		{"unknown access bit", pd, tok, va, 1, 0x80, ErrRights},
		{"before base", pd, tok, va - 1, 1, AccessRemoteRead, ErrBounds},
		{"past end", pd, tok, va + n, 1, AccessRemoteRead, ErrBounds},
		{"straddles end", pd, tok, va + n - 1, 2, AccessRemoteRead, ErrBounds},
		{"addr+length wraps 2^64", pd, tok, ^uint64(0) - 1, 10, AccessRemoteRead, ErrBounds},
		{"addr far past end", pd, tok, ^uint64(0), 0, AccessRemoteRead, ErrBounds},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := r.Resolve(tc.pd, tc.token, tc.addr, tc.length, tc.access)
			wantErr(t, "Resolve", err, tc.want)
			if tc.want != nil {
				if b != nil {
					t.Fatal("refused Resolve returned bytes")
				}
				return
			}
			if len(b) != int(tc.length) || cap(b) != len(b) {
				t.Fatalf("len %d cap %d, want %d", len(b), cap(b), tc.length)
			}
			if tc.length > 0 && &b[0] != &f.buf[tc.addr-va] {
				t.Fatal("Resolve returned the wrong bytes")
			}
		})
	}
}

// TestRegisterMRRules: NdkRegisterMr argument checks (STATUS_INVALID_PARAMETER) and exhaustion
// (STATUS_INSUFFICIENT_RESOURCES).
func TestRegisterMRRules(t *testing.T) {
	r := NewRegistry(2)
	pd := r.NewPD()
	b := make([]byte, 10)
	tests := []struct {
		name  string
		pd    PD
		buf   []byte
		flags MRFlags
		want  error
	}{
		{"unknown PD", 77, b, 0, ErrInvalidParameter},
		{"zero PD", 0, b, 0, ErrInvalidParameter},
		{"empty buffer", pd, nil, 0, ErrInvalidParameter},
		{"undefined flag bit", pd, b, 0x10, ErrInvalidParameter},
		{"remote-write bit without local write", pd, b, 0x4, ErrInvalidParameter},
		{"all flags", pd, b, MRAllowRemoteWrite | MRAllowRemoteRead | MRRDMAReadSink, nil},
		{"local read only", pd, b, MRAllowLocalRead, nil},
		{"table full", pd, b, 0, ErrFull},
	}
	for _, tc := range tests {
		_, err := r.RegisterMR(tc.pd, tc.buf, tc.flags)
		wantErr(t, tc.name, err, tc.want)
	}
	f := newRegFixture(t, MRAllowRemoteWrite)
	if f.mr.VA() != bufVA(f.buf) || f.mr.Len() != uint64(len(f.buf)) || f.mr.PD() != f.pd {
		t.Fatal("MR VA/Len/PD wrong")
	}
	if _, err := f.r.Resolve(f.pd, f.mr.RemoteToken(), f.mr.VA(), 4, AccessRemoteWrite|AccessRemoteRead); !errors.Is(err, ErrRights) {
		t.Fatalf("REMOTE_WRITE without REMOTE_READ allowed a read: %v", err)
	}
	if _, err := f.r.Resolve(f.pd, f.mr.RemoteToken(), f.mr.VA(), 4, AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
}

// TestDeregisterMRRules: deregistration kills both tokens; NDSPI refuses it while windows are
// bound (ND_DEVICE_BUSY); a second deregistration fails.
func TestDeregisterMRRules(t *testing.T) {
	f := newRegFixture(t, MRAllowRemoteWrite|MRAllowRemoteRead)
	r, pd, mr := f.r, f.pd, f.mr
	mw, _ := r.CreateMW(pd)
	wantErr(t, "Bind", r.Bind(1, mw, mr, mr.VA(), 10, OpAllowRemoteRead), nil)
	wantErr(t, "Deregister with a window bound", r.DeregisterMR(mr), ErrBusy)
	wantErr(t, "InvalidateMW", r.InvalidateMW(mw), nil)
	wantErr(t, "Deregister", r.DeregisterMR(mr), nil)
	wantErr(t, "Deregister twice", r.DeregisterMR(mr), ErrClosed)
	wantErr(t, "Deregister nil", r.DeregisterMR(nil), ErrInvalidParameter)
	other := NewRegistry(4)
	omr, _ := other.RegisterMR(other.NewPD(), make([]byte, 4), 0)
	wantErr(t, "Deregister foreign", r.DeregisterMR(omr), ErrInvalidParameter)
	_, err := r.Resolve(pd, mr.RemoteToken(), mr.VA(), 1, AccessRemoteRead)
	wantErr(t, "Resolve after deregister", err, ErrStale)
	wantErr(t, "Bind to deregistered MR", r.Bind(1, mw, mr, mr.VA(), 10, 0), ErrClosed)
	wantErr(t, "InvalidateMR of a normal MR", r.InvalidateMR(newRegFixture(t, 0).mr), ErrInvalidParameter)
	mr2, _ := r.RegisterMR(pd, f.buf, 0)
	wantErr(t, "InvalidateMR of a normal MR", r.InvalidateMR(mr2), ErrWrongKind)
	wantErr(t, "Invalidate of a normal MR's token", r.Invalidate(pd, mr2.RemoteToken()), ErrWrongKind)
}

// TestBindRules: NdkBind. ACCESS_VIOLATION for a remote-write window on an MR without local
// write and for a range outside the MR; INVALID_PARAMETER for bad arguments;
// INVALID_DEVICE_REQUEST for a window already bound.
func TestBindRules(t *testing.T) {
	r := NewRegistry(16)
	pd, pd2 := r.NewPD(), r.NewPD()
	buf := make([]byte, 8192)
	rw, _ := r.RegisterMR(pd, buf, MRAllowLocalWrite)
	ro, _ := r.RegisterMR(pd, buf, MRAllowRemoteRead)
	fr, _ := r.NewFastRegisterMR(pd, 2, true)
	va, n := rw.VA(), rw.Len()
	tests := []struct {
		name   string
		mwPD   PD
		mr     *MR
		va     uint64
		length uint64
		flags  OpFlags
		want   error
	}{
		{"read window over all", pd, rw, va, n, OpAllowRemoteRead, nil},
		{"write window", pd, rw, va + 1, 10, OpAllowRemoteWrite | OpSilentSuccess | OpReadFence | OpDefer, nil},
		{"zero-length window at the last byte", pd, rw, va + n - 1, 0, OpAllowRemoteRead, nil},
		{"remote write on MR without local write", pd, ro, ro.VA(), 10, OpAllowRemoteWrite, ErrAccessViolation},
		{"remote read only on that MR", pd, ro, ro.VA(), 10, OpAllowRemoteRead, nil},
		{"va below MR", pd, rw, va - 1, 1, OpAllowRemoteRead, ErrAccessViolation},
		{"va at MR end", pd, rw, va + n, 0, OpAllowRemoteRead, ErrBounds},
		{"range past MR end", pd, rw, va + 10, n - 9, OpAllowRemoteRead, ErrBounds},
		{"length wraps", pd, rw, va + 10, ^uint64(0), OpAllowRemoteRead, ErrBounds},
		{"zero-based VA", pd, rw, 0, 1, OpAllowRemoteRead, ErrInvalidParameter},
		{"undefined flag", pd, rw, va, 1, 0x4, ErrInvalidParameter},
		{"local write flag alone", pd, rw, va, 1, OpAllowLocalWrite, ErrInvalidParameter},
		{"half of remote write", pd, rw, va, 1, 0x20, ErrInvalidParameter},
		{"window of another PD", pd2, rw, va, 1, OpAllowRemoteRead, ErrWrongPD},
		{"fast-register MR", pd, fr, 4096, 1, OpAllowRemoteRead, ErrWrongKind},
		{"nil MR", pd, nil, va, 1, 0, ErrInvalidParameter},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mw, err := r.CreateMW(tc.mwPD)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = r.CloseMW(mw) }()
			err = r.Bind(7, mw, tc.mr, tc.va, tc.length, tc.flags)
			wantErr(t, "Bind", err, tc.want)
			if err != nil {
				return
			}
			if mw.QP() != 7 || mw.PD() != tc.mwPD {
				t.Fatal("QP or PD not recorded")
			}
			// The token is valid as soon as Bind returns.
			b, err := r.Resolve(pd, mw.RemoteToken(), tc.va, uint32(tc.length), opAccess(tc.flags))
			if err != nil || len(b) != int(tc.length) {
				t.Fatalf("Resolve after Bind: %d bytes, %v", len(b), err)
			}
			if tc.length > 0 && &b[0] != &buf[tc.va-tc.mr.VA()] {
				t.Fatal("window resolves to the wrong bytes")
			}
			_, err = r.Resolve(pd, mw.RemoteToken(), tc.va+tc.length, 1, opAccess(tc.flags))
			wantErr(t, "Resolve past the window", err, ErrBounds)
			wantErr(t, "Bind while bound", r.Bind(8, mw, tc.mr, tc.va, tc.length, tc.flags), ErrBusy)
			old := mw.RemoteToken()
			wantErr(t, "InvalidateMW", r.InvalidateMW(mw), nil)
			_, err = r.Resolve(pd, old, tc.va, 0, 0)
			wantErr(t, "Resolve after InvalidateMW", err, ErrStale)
			wantErr(t, "InvalidateMW unbound", r.InvalidateMW(mw), ErrNotBound)
			wantErr(t, "rebind", r.Bind(8, mw, tc.mr, tc.va, tc.length, tc.flags), nil)
			if mw.RemoteToken() == old {
				t.Fatal("rebinding reused the token")
			}
			_, err = r.Resolve(pd, old, tc.va, 0, 0)
			wantErr(t, "old token after rebind", err, ErrStale)
		})
	}
	mw, _ := r.CreateMW(pd)
	wantErr(t, "CloseMW", r.CloseMW(mw), nil)
	wantErr(t, "CloseMW twice", r.CloseMW(mw), ErrClosed)
	wantErr(t, "Bind closed MW", r.Bind(1, mw, rw, va, 1, 0), ErrClosed)
	wantErr(t, "InvalidateMW closed", r.InvalidateMW(mw), ErrClosed)
	wantErr(t, "InvalidateMW nil", r.InvalidateMW(nil), ErrInvalidParameter)
	_, err := r.CreateMW(99)
	wantErr(t, "CreateMW unknown PD", err, ErrInvalidParameter)
}

// pagesOf cuts b into FastRegisterPageSize pages (each with the capacity to the end of b, so
// FastRegister sees them as contiguous).
func pagesOf(b []byte) [][]byte {
	var p [][]byte
	for len(b) >= FastRegisterPageSize {
		p = append(p, b[:FastRegisterPageSize])
		b = b[FastRegisterPageSize:]
	}
	return p
}

// TestFastRegisterRules: NDKPI NdkFastRegister. INVALID_PARAMETER for bad geometry;
// ACCESS_VIOLATION for remote access on an MR not initialised for it.
func TestFastRegisterRules(t *testing.T) {
	r := NewRegistry(16)
	pd := r.NewPD()
	const ps = FastRegisterPageSize
	mem := make([]byte, 4*ps)
	pages := pagesOf(mem)
	frR, _ := r.NewFastRegisterMR(pd, 4, true)
	frL, _ := r.NewFastRegisterMR(pd, 4, false)
	normal, _ := r.RegisterMR(pd, mem, MRAllowLocalWrite)
	base := uint64(0x7000_0000_0000)
	tests := []struct {
		name   string
		mr     *MR
		pages  [][]byte
		fbo    int
		length uint64
		va     uint64
		flags  OpFlags
		want   error
	}{
		{"all pages", frR, pages, 0, 4 * ps, base, OpAllowRemoteRead | OpAllowRemoteWrite, nil},
		{"with FBO", frR, pages, 100, 4*ps - 100, base + 100, OpAllowRemoteRead, nil},
		{"local only on a local MR", frL, pages, 0, ps, base, OpAllowLocalWrite | OpRDMAReadSink, nil},
		{"remote read on a local MR", frL, pages, 0, ps, base, OpAllowRemoteRead, ErrAccessViolation},
		{"remote write on a local MR", frL, pages, 0, ps, base, OpAllowRemoteWrite, ErrAccessViolation},
		{"length > pages*PS - FBO", frR, pages, 100, 4*ps - 99, base + 100, 0, ErrInvalidParameter},
		{"VA not FBO + n*PS", frR, pages, 100, 10, base, 0, ErrInvalidParameter},
		{"zero-based VA", frR, pages, 0, 10, 0, 0, ErrInvalidParameter},
		{"FBO negative", frR, pages, -1, 10, base, 0, ErrInvalidParameter},
		{"FBO >= PS", frR, pages, ps, 10, base, 0, ErrInvalidParameter},
		{"too many pages", frR, append(pagesOf(mem), pages[0]), 0, 10, base, 0, ErrInvalidParameter},
		{"no pages", frR, nil, 0, 0, base, 0, ErrInvalidParameter},
		{"short page", frR, [][]byte{mem[:100]}, 0, 10, base, 0, ErrInvalidParameter},
		{"VA+length wraps", frR, pages, 0, ps, ^uint64(0) &^ (ps - 1), 0, ErrInvalidParameter},
		{"undefined flag", frR, pages, 0, ps, base, 0x4, ErrInvalidParameter},
		{"normal MR", normal, pages, 0, ps, base, 0, ErrWrongKind},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := r.FastRegister(tc.mr, tc.pages, tc.fbo, tc.length, tc.va, tc.flags)
			wantErr(t, "FastRegister", err, tc.want)
			if err != nil {
				return
			}
			a := opAccess(tc.flags)
			b, err := r.Resolve(pd, tc.mr.RemoteToken(), tc.va, uint32(tc.length), a)
			if err != nil || len(b) != int(tc.length) || &b[0] != &mem[tc.fbo] {
				t.Fatalf("Resolve of all: %d bytes, %v", len(b), err)
			}
			_, err = r.Resolve(pd, tc.mr.RemoteToken(), tc.va+tc.length, 1, a)
			wantErr(t, "Resolve past end", err, ErrBounds)
			wantErr(t, "FastRegister while registered", r.FastRegister(tc.mr, tc.pages, tc.fbo, tc.length, tc.va, tc.flags), ErrBusy)
			old := tc.mr.RemoteToken()
			wantErr(t, "InvalidateMR", r.InvalidateMR(tc.mr), nil)
			_, err = r.Resolve(pd, old, tc.va, 1, 0)
			wantErr(t, "Resolve after InvalidateMR", err, ErrStale)
			wantErr(t, "InvalidateMR twice", r.InvalidateMR(tc.mr), ErrNotBound)
		})
	}
	// Tokens exist after initialisation; the first FastRegister keeps them.
	fr, _ := r.NewFastRegisterMR(pd, 1, true)
	l, rt := fr.LocalToken(), fr.RemoteToken()
	if l == 0 || rt == 0 || l == rt {
		t.Fatal("bad tokens after init")
	}
	_, err := r.Resolve(pd, rt, base, 1, 0)
	wantErr(t, "Resolve before FastRegister", err, ErrStale)
	wantErr(t, "FastRegister", r.FastRegister(fr, pages[:1], 0, ps, base, OpAllowRemoteRead), nil)
	if fr.LocalToken() != l || fr.RemoteToken() != rt {
		t.Fatal("first FastRegister changed the tokens")
	}
	wantErr(t, "remote Invalidate", r.Invalidate(pd, rt), nil)
	wantErr(t, "remote Invalidate twice", r.Invalidate(pd, rt), ErrStale)
	wantErr(t, "FastRegister again", r.FastRegister(fr, pages[:1], 0, ps, base, OpAllowRemoteRead), nil)
	if fr.RemoteToken() == rt || fr.LocalToken() == l {
		t.Fatal("re-registration reused tokens")
	}
	_, err = r.NewFastRegisterMR(pd, 0, true)
	wantErr(t, "zero pages", err, ErrInvalidParameter)
	_, err = r.NewFastRegisterMR(0, 1, true)
	wantErr(t, "bad PD", err, ErrInvalidParameter)
	wantErr(t, "Deregister FR MR", r.DeregisterMR(fr), nil)
	wantErr(t, "FastRegister closed", r.FastRegister(fr, pages[:1], 0, ps, base, 0), ErrClosed)
}

// TestFastRegisterContiguity: a range crossing a page boundary resolves to one slice when the
// two pages are consecutive in one backing array, else ErrNotContiguous.
func TestFastRegisterContiguity(t *testing.T) {
	r := NewRegistry(4)
	pd := r.NewPD()
	const ps = FastRegisterPageSize
	mem := make([]byte, 4*ps)
	for i := range mem {
		mem[i] = byte(i / ps)
	}
	p := pagesOf(mem)
	// Pages 0,1 contiguous; then 3 (a jump back to the end); then 2 (separate).
	pages := [][]byte{p[0], p[1], p[3], p[2]}
	fr, _ := r.NewFastRegisterMR(pd, 4, true)
	base := uint64(0x10000)
	wantErr(t, "FastRegister", r.FastRegister(fr, pages, 0, 4*ps, base, OpAllowRemoteRead), nil)
	tok := fr.RemoteToken()
	tests := []struct {
		name   string
		addr   uint64
		length uint32
		first  byte
		want   error
	}{
		{"within page 0", base + 10, 100, 0, nil},
		{"crossing 0->1 (contiguous)", base + ps - 5, 10, 0, nil},
		{"crossing 1->3 (not contiguous)", base + 2*ps - 5, 10, 1, ErrNotContiguous},
		{"within the third page (mem page 3)", base + 2*ps, ps, 3, nil},
		{"crossing 3->2 (backwards)", base + 3*ps - 1, 2, 3, ErrNotContiguous},
		{"last byte", base + 4*ps - 1, 1, 2, nil},
		{"empty at end", base + 4*ps, 0, 0, nil},
	}
	for _, tc := range tests {
		b, err := r.Resolve(pd, tok, tc.addr, tc.length, AccessRemoteRead)
		wantErr(t, tc.name, err, tc.want)
		if err == nil && tc.length > 0 && (len(b) != int(tc.length) || b[0] != tc.first || cap(b) != len(b)) {
			t.Fatalf("%s: got %d bytes starting %d", tc.name, len(b), b[0])
		}
	}
	// Capacity limits contiguity: a page sliced with a 3-index slice does not reach its
	// neighbour.
	fr2, _ := r.NewFastRegisterMR(pd, 2, true)
	wantErr(t, "FastRegister", r.FastRegister(fr2, [][]byte{mem[:ps:ps], mem[ps : 2*ps]}, 0, 2*ps, base, OpAllowRemoteRead), nil)
	_, err := r.Resolve(pd, fr2.RemoteToken(), base+ps-1, 2, AccessRemoteRead)
	wantErr(t, "capped page", err, ErrNotContiguous)
}

// TestInvalidateRules: remote invalidation (SendAndInvalidate). Any error aborts the
// connection.
func TestInvalidateRules(t *testing.T) {
	f := newRegFixture(t, MRAllowRemoteWrite)
	r, pd, mr := f.r, f.pd, f.mr
	pd2 := r.NewPD()
	mw, _ := r.CreateMW(pd)
	wantErr(t, "Bind", r.Bind(3, mw, mr, mr.VA()+8, 8, OpAllowRemoteWrite), nil)
	wantErr(t, "token 0", r.Invalidate(pd, 0), ErrBadToken)
	wantErr(t, "wrong PD", r.Invalidate(pd2, mw.RemoteToken()), ErrWrongPD)
	wantErr(t, "normal MR", r.Invalidate(pd, mr.RemoteToken()), ErrWrongKind)
	wantErr(t, "local token", r.Invalidate(pd, mr.LocalToken()), ErrWrongKind)
	wantErr(t, "guessed tag", r.Invalidate(pd, mw.RemoteToken()^(1<<r.idxBits)), ErrStale)
	wantErr(t, "window", r.Invalidate(pd, mw.RemoteToken()), nil)
	wantErr(t, "window twice", r.Invalidate(pd, mw.RemoteToken()), ErrStale)
	wantErr(t, "local InvalidateMW after remote", r.InvalidateMW(mw), ErrNotBound)
	if mr.windows.Load() != 0 {
		t.Fatal("window count leaked")
	}
	wantErr(t, "Deregister after remote invalidate", r.DeregisterMR(mr), nil)
}

// TestSlotReuse: a freed slot reused by another PD's object gives a new token; the old one
// stays dead.
func TestSlotReuse(t *testing.T) {
	r := NewRegistry(1)
	pd1, pd2 := r.NewPD(), r.NewPD()
	b := make([]byte, 64)
	a, _ := r.RegisterMR(pd1, b, MRAllowRemoteRead)
	old := a.RemoteToken()
	wantErr(t, "Deregister", r.DeregisterMR(a), nil)
	c, err := r.RegisterMR(pd2, b, MRAllowRemoteRead)
	wantErr(t, "RegisterMR", err, nil)
	if c.RemoteToken() == old {
		t.Fatal("reused slot kept the token")
	}
	for _, pd := range []PD{pd1, pd2} {
		if _, err := r.Resolve(pd, old, a.VA(), 1, AccessRemoteRead); err == nil {
			t.Fatal("old token resolves after slot reuse")
		}
	}
}

func TestResolveNoAllocs(t *testing.T) {
	f := newRegFixture(t, MRAllowRemoteWrite|MRAllowRemoteRead)
	r, pd, mr := f.r, f.pd, f.mr
	fr, _ := r.NewFastRegisterMR(pd, 4, true)
	_ = r.FastRegister(fr, pagesOf(f.buf[:4*FastRegisterPageSize]), 0, 4*FastRegisterPageSize, 0x1000, OpAllowRemoteRead)
	var sink int
	allocs := testing.AllocsPerRun(1000, func() {
		b, _ := r.Resolve(pd, mr.RemoteToken(), mr.VA()+10, 100, AccessRemoteWrite)
		sink += len(b)
		b, _ = r.Resolve(pd, fr.RemoteToken(), 0x1000+4000, 200, AccessRemoteRead)
		sink += len(b)
		_, err := r.Resolve(pd, mr.RemoteToken(), mr.VA()-1, 100, AccessRemoteWrite)
		if err == nil {
			sink++
		}
		_ = r.Invalidate(pd, 12345)
	})
	if allocs != 0 {
		t.Fatalf("Resolve allocates %v times", allocs)
	}
	if sink%300 != 0 || sink == 0 {
		t.Fatalf("sink %d", sink)
	}
}

// TestConcurrentResolveInvalidate: engines resolve a window's token while the application
// binds and invalidates it. After InvalidateMW (or a remote Invalidate) returns, a Resolve
// started afterwards fails; a successful Resolve always returns exactly the bound bytes.
func TestConcurrentResolveInvalidate(t *testing.T) {
	f := newRegFixture(t, MRAllowRemoteWrite|MRAllowRemoteRead)
	r, pd, mr := f.r, f.pd, f.mr
	const windows = 4
	mws := make([]*MW, windows)
	for i := range mws {
		mws[i], _ = r.CreateMW(pd)
	}
	// published[i] is the token of window i that the application last made available, or 0
	// while it is invalidated: an engine loads it, resolves, and checks.
	var published [windows]atomic.Uint32
	var dead [windows]atomic.Uint32 // a token whose invalidation has returned
	var stop atomic.Bool
	var wg sync.WaitGroup
	var failures atomic.Int64
	var hits atomic.Int64
	for e := range 4 {
		wg.Go(func() {
			for n := 0; !stop.Load(); n++ {
				i := (n + e) % windows
				// Load the dead token first: its invalidation returned before this Resolve
				// starts, so it must fail.
				if d := dead[i].Load(); d != 0 {
					if _, err := r.Resolve(pd, d, mr.VA()+uint64(i)*64, 1, AccessRemoteRead); err == nil {
						failures.Add(1)
					}
				}
				tok := published[i].Load()
				if tok == 0 {
					continue
				}
				b, err := r.Resolve(pd, tok, mr.VA()+uint64(i)*64, 64, AccessRemoteRead)
				if err == nil {
					hits.Add(1)
					if len(b) != 64 || &b[0] != &f.buf[i*64] {
						failures.Add(1)
					}
				} else if !errors.Is(err, ErrStale) {
					failures.Add(1)
				}
			}
		})
	}
	for round := range 20000 {
		i := round % windows
		mw := mws[i]
		if err := r.Bind(1, mw, mr, mr.VA()+uint64(i)*64, 64, OpAllowRemoteRead); err != nil {
			t.Fatal(err)
		}
		tok := mw.RemoteToken()
		published[i].Store(tok)
		var err error
		if round%2 == 0 {
			err = r.InvalidateMW(mw)
		} else {
			err = r.Invalidate(pd, tok)
		}
		if err != nil {
			t.Fatal(err)
		}
		dead[i].Store(tok)
		published[i].Store(0)
	}
	stop.Store(true)
	wg.Wait()
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d resolves broke the guarantee", n)
	}
	t.Logf("%d successful resolves during churn", hits.Load())
}

func BenchmarkResolve(b *testing.B) {
	f := newRegFixture(b, MRAllowRemoteWrite|MRAllowRemoteRead)
	r, pd, tok, va := f.r, f.pd, f.mr.RemoteToken(), f.mr.VA()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Resolve(pd, tok, va+100, 1024, AccessRemoteWrite); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkResolveParallel(b *testing.B) {
	f := newRegFixture(b, MRAllowRemoteWrite|MRAllowRemoteRead)
	r, pd, tok, va := f.r, f.pd, f.mr.RemoteToken(), f.mr.VA()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := r.Resolve(pd, tok, va+100, 1024, AccessRemoteWrite); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkRegisterDeregisterMR(b *testing.B) {
	r := NewRegistry(16)
	pd := r.NewPD()
	buf := make([]byte, 4096)
	b.ReportAllocs()
	for b.Loop() {
		mr, err := r.RegisterMR(pd, buf, MRAllowRemoteWrite)
		if err != nil {
			b.Fatal(err)
		}
		if err := r.DeregisterMR(mr); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBindInvalidateMW(b *testing.B) {
	f := newRegFixture(b, MRAllowRemoteWrite|MRAllowRemoteRead)
	mw, _ := f.r.CreateMW(f.pd)
	b.ReportAllocs()
	for b.Loop() {
		if err := f.r.Bind(1, mw, f.mr, f.mr.VA(), 4096, OpAllowRemoteWrite); err != nil {
			b.Fatal(err)
		}
		if err := f.r.InvalidateMW(mw); err != nil {
			b.Fatal(err)
		}
	}
}
