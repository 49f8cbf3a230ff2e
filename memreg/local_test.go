package memreg

import (
	"errors"
	"sync/atomic"
	"testing"
)

// AcquireLocal holds the slot's region before it loads the mapping (instead of counting
// itself in the slot's readers): these tests check its refusals, that a region gone or a
// slot given to another object never resolves an old local token, and that a retired
// mapping is not reused under a reader.

func TestAcquireLocalRules(t *testing.T) {
	f := newRegFixture(t, MRAllowRemoteRead)
	r, pd, mr := f.r, f.pd, f.mr
	tok := mr.LocalToken()
	in := f.buf[100:200]
	if got, err := r.AcquireLocal(pd, tok, in, false); err != nil || got != mr {
		t.Fatalf("AcquireLocal = %v, %v; want the MR", got, err)
	}
	mr.Release()
	cases := []struct {
		name  string
		pd    PD
		tok   uint32
		buf   []byte
		write bool
		want  error
	}{
		{"bad index", pd, 0, in, false, ErrBadToken},
		{"remote token", pd, mr.RemoteToken(), in, false, ErrStale},
		{"wrong tag", pd, tok ^ 1<<31, in, false, ErrStale},
		{"wrong PD", r.NewPD(), tok, in, false, ErrWrongPD},
		{"no local write", pd, tok, in, true, ErrRights},
		{"outside", pd, tok, make([]byte, 8), false, ErrBounds},
	}
	for _, c := range cases {
		if got, err := r.AcquireLocal(c.pd, c.tok, c.buf, c.write); got != nil || !errors.Is(err, c.want) {
			t.Errorf("%s: AcquireLocal = %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	if mr.Refs() != 0 {
		t.Fatalf("refusals left %d holds", mr.Refs())
	}
	// The slot freed and given to a window: the old local token names nothing.
	if err := r.DeregisterMR(mr); err != nil {
		t.Fatal(err)
	}
	if _, err := r.AcquireLocal(pd, tok, in, false); !errors.Is(err, ErrStale) {
		t.Fatalf("after DeregisterMR: %v, want ErrStale", err)
	}
	mr2, err := r.RegisterMR(pd, f.buf, MRAllowLocalWrite|MRAllowRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := r.CreateMW(pd)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Bind(1, mw, mr2, mr2.VA(), 4096, OpAllowRemoteRead); err != nil {
		t.Fatal(err)
	}
	for _, tk := range []uint32{tok, mw.RemoteToken()} {
		if got, err := r.AcquireLocal(pd, tk, in, false); got != nil || !errors.Is(err, ErrStale) {
			t.Errorf("token %#x: AcquireLocal = %v, %v; want ErrStale", tk, got, err)
		}
	}
	if mr2.Refs() != 0 || mr.Refs() != 0 {
		t.Fatalf("holds left: %d, %d", mr.Refs(), mr2.Refs())
	}
}

// TestAcquireLocalUnderChurn re-registers a fast-register MR over alternating pages, with
// and without local write, while readers acquire with the token they last saw published:
// a success must name the MR and fit the registration published with that token, and a
// token invalidated before a call began never resolves. Run with -race: a reader must not
// see a retired mapping refilled.
func TestAcquireLocalUnderChurn(t *testing.T) {
	f := newRegFixture(t, MRAllowRemoteRead)
	r, pd := f.r, f.pd
	fr, err := r.NewFastRegisterMR(pd, 2, false)
	if err != nil {
		t.Fatal(err)
	}
	pages := pagesOf(f.buf[:4*ps])
	type pub struct {
		tok   uint32
		buf   []byte
		write bool
	}
	var cur atomic.Pointer[pub]
	var c churn
	c.readers(3, func() {
		p := cur.Load()
		if p == nil {
			return
		}
		got, err := r.AcquireLocal(pd, p.tok, p.buf, p.write)
		if err != nil {
			if !errors.Is(err, ErrStale) {
				c.failures.Add(1) // only invalidation may refuse a published access
			}
			return
		}
		c.hits.Add(1)
		if got != fr {
			c.failures.Add(1)
		}
		got.Release()
	})
	for round := range 20000 {
		half := round % 2
		flags := OpFlags(0)
		if half == 1 {
			flags = OpAllowLocalWrite
		}
		pg := pages[2*half : 2*half+2]
		if err := r.FastRegister(fr, pg, 0, 2*ps, 0x40000000, flags); err != nil {
			t.Fatal(err)
		}
		p := &pub{tok: fr.LocalToken(), buf: pg[1][8:64], write: half == 1}
		cur.Store(p)
		old := *p
		if err := r.InvalidateMR(fr); err != nil {
			t.Fatal(err)
		}
		cur.Store(nil)
		if got, err := r.AcquireLocal(pd, old.tok, old.buf, old.write); got != nil || !errors.Is(err, ErrStale) {
			t.Fatalf("round %d: a token invalidated before the call resolved: %v, %v", round, got, err)
		}
	}
	c.end(t, fr, "refused a live token or returned another MR")
}

func BenchmarkAcquireLocal(b *testing.B) {
	f := newRegFixture(b, MRAllowLocalWrite)
	r, pd, mr := f.r, f.pd, f.mr
	tok, buf := mr.LocalToken(), f.buf[64:128]
	b.ReportAllocs()
	for b.Loop() {
		got, err := r.AcquireLocal(pd, tok, buf, true)
		if err != nil {
			b.Fatal(err)
		}
		got.Release()
	}
}
