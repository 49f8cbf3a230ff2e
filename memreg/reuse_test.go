package memreg

import (
	"sync"
	"sync/atomic"
	"testing"
)

// Retired mappings are reused by the slot's next mapping (newMapping) once no lock-free
// reader can see them. These tests check that reuse never lets a reader see a mix of an old
// and a new mapping, and that the control verbs it serves allocate nothing.

// TestReuseUnderChurn rebinds one window to a different range every round while readers
// acquire through the token they last saw published: a success must return exactly the
// range published with that token, never the range of a later bind.
func TestReuseUnderChurn(t *testing.T) {
	f := newRegFixture(t, MRAllowRemoteWrite|MRAllowRemoteRead)
	r, pd, mr := f.r, f.pd, f.mr
	mw, err := r.CreateMW(pd)
	if err != nil {
		t.Fatal(err)
	}
	var published atomic.Uint64 // token<<32 | offset of the bound range; 0 while unbound
	var c churn
	c.readers(3, func() {
		p := published.Load()
		if p == 0 {
			return
		}
		tok, off := uint32(p>>32), uint64(uint32(p))
		sp, err := r.Acquire(pd, tok, mr.VA()+off, 64, AccessRemoteRead)
		if err != nil {
			return // invalidated in the meantime: allowed
		}
		c.hits.Add(1)
		if sp.MR != mr || sp.Len() != 64 || &sp.Buf[0] != &f.buf[off] {
			c.failures.Add(1)
		}
		sp.MR.Release()
	})
	for round := range 20000 {
		off := uint64(round%61) * 256
		if err := r.Bind(1, mw, mr, mr.VA()+off, 64, OpAllowRemoteRead); err != nil {
			t.Fatal(err)
		}
		published.Store(uint64(mw.RemoteToken())<<32 | off)
		if err := r.InvalidateMW(mw); err != nil {
			t.Fatal(err)
		}
		published.Store(0)
	}
	c.end(t, mr, "returned another bind's range")
}

// churn is the readers of a churn test, which race a registry the test keeps changing.
type churn struct {
	stop           atomic.Bool
	failures, hits atomic.Int64 // reads that went wrong, reads that succeeded
	wg             sync.WaitGroup
}

// readers starts n goroutines that call read until end.
func (c *churn) readers(n int, read func()) {
	for range n {
		c.wg.Go(func() {
			for !c.stop.Load() {
				read()
			}
		})
	}
}

// end stops the readers, waits for them, and fails t if any read failed (what says how)
// or a hold on mr is left.
func (c *churn) end(t *testing.T, mr *MR, what string) {
	t.Helper()
	c.stop.Store(true)
	c.wg.Wait()
	if n := c.failures.Load(); n != 0 {
		t.Fatalf("%d acquires %s", n, what)
	}
	if mr.Refs() != 0 {
		t.Fatalf("%d holds left", mr.Refs())
	}
	t.Logf("%d successful acquires during churn", c.hits.Load())
}

// TestControlVerbsNoAllocs: once warm, Bind+InvalidateMW and FastRegister+InvalidateMR
// reuse their retired mappings and page runs.
func TestControlVerbsNoAllocs(t *testing.T) {
	f := newRegFixture(t, MRAllowRemoteWrite|MRAllowRemoteRead)
	r, pd, mr := f.r, f.pd, f.mr
	mw, _ := r.CreateMW(pd)
	bind := func() {
		if err := r.Bind(1, mw, mr, mr.VA()+4096, 4096, OpAllowRemoteRead|OpAllowRemoteWrite); err != nil {
			t.Fatal(err)
		}
		if err := r.InvalidateMW(mw); err != nil {
			t.Fatal(err)
		}
	}
	bind()
	if n := testing.AllocsPerRun(1000, bind); n != 0 {
		t.Errorf("Bind+InvalidateMW: %v allocations, want 0", n)
	}
	fr, err := r.NewFastRegisterMR(pd, 4, true)
	if err != nil {
		t.Fatal(err)
	}
	pages := pagesOf(f.buf[:4*FastRegisterPageSize])
	pages[0], pages[2] = pages[2], pages[0]
	reg := func() {
		if err := r.FastRegister(fr, pages, 16, 3*FastRegisterPageSize, 0x10000010, OpAllowRemoteRead); err != nil {
			t.Fatal(err)
		}
		if err := r.InvalidateMR(fr); err != nil {
			t.Fatal(err)
		}
	}
	reg()
	if n := testing.AllocsPerRun(1000, reg); n != 0 {
		t.Errorf("FastRegister+InvalidateMR: %v allocations, want 0", n)
	}
}

// TestRunsNotReusedWhileHeld: a Span over fast-registered pages keeps walking the pages it
// resolved after the region was invalidated and registered again over other pages.
func TestRunsNotReusedWhileHeld(t *testing.T) {
	f := newRegFixture(t, MRAllowRemoteWrite|MRAllowRemoteRead)
	r, pd := f.r, f.pd
	fr, _ := r.NewFastRegisterMR(pd, 2, true)
	a := pagesOf(f.buf[:2*FastRegisterPageSize])
	b := pagesOf(f.buf[4*FastRegisterPageSize : 6*FastRegisterPageSize])
	a[0], a[1] = a[1], a[0] // not contiguous: the span walks runs
	if err := r.FastRegister(fr, a, 0, 2*FastRegisterPageSize, 0x20000000, OpAllowRemoteRead); err != nil {
		t.Fatal(err)
	}
	sp, err := r.Acquire(pd, fr.RemoteToken(), 0x20000000, 2*FastRegisterPageSize, AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.InvalidateMR(fr); err != nil {
		t.Fatal(err)
	}
	if err := r.FastRegister(fr, b, 0, 2*FastRegisterPageSize, 0x20000000, OpAllowRemoteRead); err != nil {
		t.Fatal(err)
	}
	if p := sp.Piece(0); &p[0] != &a[0][0] {
		t.Fatal("the held span's first page changed under it")
	}
	if p := sp.Piece(FastRegisterPageSize); &p[0] != &a[1][0] {
		t.Fatal("the held span's second page changed under it")
	}
	sp.MR.Release()
}
