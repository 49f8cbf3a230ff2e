package memreg

import (
	"errors"
	"testing"
)

// Registry.Stats counts each kind of live object, and the pages pinned outside the UMEM,
// through registration, failures and release.
func TestRegistryStats(t *testing.T) {
	r := NewRegistry(8)
	pd := r.NewPD()
	want := func(what string, w RegistryStats) {
		t.Helper()
		w.Capacity = 8
		if got := r.Stats(); got != w {
			t.Fatalf("%s: stats %+v, want %+v", what, got, w)
		}
	}
	want("empty", RegistryStats{})

	buf := make([]byte, 3*int(pageSize))
	mr, err := r.RegisterMR(pd, buf[:pageSize], MRAllowLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	pages := uint64(r.pins.pinned())
	if pages < 1 || pages > 2 { // one page, or two if buf does not start on a page
		t.Fatalf("%d pages pinned for one page of memory", pages)
	}
	want("one region", RegistryStats{Regions: 1, PinnedBytes: pages * pageSize})
	// An overlapping region pins no page twice.
	mr2, err := r.RegisterMR(pd, buf[:pageSize], MRAllowLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	want("two overlapping regions", RegistryStats{Regions: 2, PinnedBytes: pages * pageSize})
	frmr, err := r.NewFastRegisterMR(pd, 4, true)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := r.CreateMW(pd)
	if err != nil {
		t.Fatal(err)
	}
	want("and a fast-register MR and a window", RegistryStats{Regions: 2, FastRegisterRegions: 1, Windows: 1, PinnedBytes: pages * pageSize})

	// Refused operations change nothing.
	if _, err := r.RegisterMR(pd, nil, 0); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("empty region: %v", err)
	}
	if err := r.Bind(1, mw, mr, mr.VA(), 16, OpAllowRemoteRead); err != nil {
		t.Fatal(err)
	}
	if err := r.DeregisterMR(mr); !errors.Is(err, ErrBusy) {
		t.Fatalf("deregister a region with a window bound: %v", err)
	}
	want("after refusals", RegistryStats{Regions: 2, FastRegisterRegions: 1, Windows: 1, PinnedBytes: pages * pageSize})

	for _, step := range []struct {
		what string
		do   func() error
		w    RegistryStats
	}{
		{"window closed", func() error { return r.CloseMW(mw) }, RegistryStats{Regions: 2, FastRegisterRegions: 1, PinnedBytes: pages * pageSize}},
		{"fast-register MR closed", func() error { return r.DeregisterMR(frmr) }, RegistryStats{Regions: 2, PinnedBytes: pages * pageSize}},
		{"one region left", func() error { return r.DeregisterMR(mr) }, RegistryStats{Regions: 1, PinnedBytes: pages * pageSize}},
		{"none left", func() error { return r.DeregisterMR(mr2) }, RegistryStats{}},
	} {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.what, err)
		}
		want(step.what, step.w)
	}
	if err := r.DeregisterMR(mr2); !errors.Is(err, ErrClosed) {
		t.Fatalf("second deregister: %v", err)
	}
	want("after a second deregister", RegistryStats{})

	// Close unpins what regions still pin.
	if _, err := r.RegisterMR(pd, buf, MRAllowLocalWrite); err != nil {
		t.Fatal(err)
	}
	if r.Stats().PinnedBytes < 3*pageSize {
		t.Fatalf("three pages registered, %d bytes pinned", r.Stats().PinnedBytes)
	}
	r.Close()
	if s := r.Stats(); s.PinnedBytes != 0 || s.Regions != 1 {
		t.Fatalf("after Close: %+v, want the region still counted and nothing pinned", s)
	}
}
