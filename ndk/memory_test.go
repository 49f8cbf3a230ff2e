package ndk

import (
	"errors"
	"strings"
	"testing"

	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport"
)

// The memory rules of NDKPI, one table each, with the NTSTATUS every violation produces
// (NDKPI's NdkCreateMr, NdkRegisterMr, NdkBind, NdkFastRegister and NdkInvalidate pages).
// Each row runs on a fresh registry fixture and checks the status; rows that must change
// nothing check that the state they could have touched still holds.

// memFixture is a registry with a PD, an MR over buf with local write and remote read, a
// window, and a fast-register MR of 4 pages.
type memFixture struct {
	reg    *memreg.Registry
	pd     memreg.PD
	buf    []byte
	mr     *memreg.MR // local write + remote read
	ro     *memreg.MR // remote read only, no local write
	mw     *memreg.MW
	fr     *memreg.MR // fast-register, remote access allowed
	frNo   *memreg.MR // fast-register, remote access not allowed
	pages  [][]byte
	heap   *memreg.Heap
	umem   *memreg.UMEM
	otherP memreg.PD
}

func newMemFixture(t *testing.T) *memFixture {
	t.Helper()
	u, err := memreg.NewUMEM(memreg.UMEMOptions{Frames: 16, HeapSize: 64 << 10, HugePages: memreg.HugeOff})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	f := &memFixture{reg: memreg.NewRegistry(32), umem: u}
	if err := f.reg.AttachUMEM(u); err != nil {
		t.Fatal(err)
	}
	f.heap, err = u.NewHeap()
	if err != nil {
		t.Fatal(err)
	}
	f.pd, f.otherP = f.reg.NewPD(), f.reg.NewPD()
	if f.buf, err = f.heap.Alloc(8192, 4096); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	f.mr, err = f.reg.RegisterMR(f.pd, f.buf, memreg.MRAllowLocalWrite|memreg.MRAllowRemoteRead)
	must(err)
	f.ro, err = f.reg.RegisterMR(f.pd, f.buf[:4096], memreg.MRAllowRemoteRead)
	must(err)
	f.mw, err = f.reg.CreateMW(f.pd)
	must(err)
	f.fr, err = f.reg.NewFastRegisterMR(f.pd, 4, true)
	must(err)
	f.frNo, err = f.reg.NewFastRegisterMR(f.pd, 4, false)
	must(err)
	pg, err := f.heap.Alloc(4*4096, 4096)
	must(err)
	// out of order on purpose: pages 2, 0, 3, 1 of the allocation
	f.pages = [][]byte{pg[8192:12288], pg[:4096], pg[12288:], pg[4096:8192]}
	return f
}

type memRule struct {
	name string
	op   func(f *memFixture) error
	want Status
}

func runMemRules(t *testing.T, rules []memRule) {
	t.Helper()
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			f := newMemFixture(t)
			err := memError(r.op(f))
			if got := StatusOf(err); got != r.want {
				t.Fatalf("status %v (%v), want %v", got, err, r.want)
			}
			if r.want != StatusSuccess && !errors.Is(err, r.want) {
				t.Fatalf("errors.Is(%v, %v) is false", err, r.want)
			}
		})
	}
}

func TestMemRulesHeap(t *testing.T) {
	runMemRules(t, []memRule{
		{"alloc", func(f *memFixture) error { _, err := f.heap.Alloc(100, 64); return err }, StatusSuccess},
		{"exhausted", func(f *memFixture) error { _, err := f.heap.Alloc(1<<20, 64); return err }, StatusInsufficientResources},
		{"alignment not a power of two", func(f *memFixture) error { _, err := f.heap.Alloc(100, 48); return err }, StatusInvalidParameter},
		{"zero size", func(f *memFixture) error { _, err := f.heap.Alloc(0, 64); return err }, StatusInvalidParameter},
	})
}

func TestMemRulesRegister(t *testing.T) {
	runMemRules(t, []memRule{
		{"register", func(f *memFixture) error {
			_, err := f.reg.RegisterMR(f.pd, f.buf, memreg.MRAllowRemoteWrite)
			return err
		}, StatusSuccess},
		{"unknown flag", func(f *memFixture) error {
			_, err := f.reg.RegisterMR(f.pd, f.buf, 0x40)
			return err
		}, StatusInvalidParameter},
		{"empty buffer", func(f *memFixture) error {
			_, err := f.reg.RegisterMR(f.pd, f.buf[:0], memreg.MRAllowLocalWrite)
			return err
		}, StatusInvalidParameter},
		{"unknown PD", func(f *memFixture) error {
			_, err := f.reg.RegisterMR(memreg.PD(99), f.buf, memreg.MRAllowLocalWrite)
			return err
		}, StatusInvalidParameter},
		{"table full", func(f *memFixture) error {
			for {
				if _, err := f.reg.RegisterMR(f.pd, f.buf, memreg.MRAllowLocalWrite); err != nil {
					return err
				}
			}
		}, StatusInsufficientResources},
		{"deregister twice", func(f *memFixture) error {
			if err := f.reg.DeregisterMR(f.ro); err != nil {
				return err
			}
			return f.reg.DeregisterMR(f.ro)
		}, StatusInvalidHandle},
		{"deregister with a bound window", func(f *memFixture) error {
			if err := f.reg.Bind(1, f.mw, f.mr, f.mr.VA(), 64, memreg.OpAllowRemoteRead); err != nil {
				return err
			}
			err := f.reg.DeregisterMR(f.mr)
			if _, rerr := f.reg.Resolve(f.pd, f.mr.RemoteToken(), f.mr.VA(), 1, memreg.AccessRemoteRead); rerr != nil {
				t.Errorf("the refused deregistration changed the region: %v", rerr)
			}
			return err
		}, StatusDeviceBusy},
	})
}

// remote resolves an access as the engine does, through the registry as the adapter's
// transport.MemoryResolver, and maps the refusal as the initiator's completion does
// (StatusAccessViolation).
func remote(f *memFixture, token uint32, addr uint64, n uint32, a memreg.Access) error {
	var r transport.MemoryResolver = f.reg
	s, err := r.Acquire(f.pd, token, addr, n, memreg.Access(a))
	if err != nil {
		if !errors.Is(err, memreg.ErrAccess) {
			return errors.New("refusal does not match memreg.ErrAccess")
		}
		return err
	}
	if s.Len() != int(n) {
		return errors.New("wrong length")
	}
	s.MR.Release()
	return nil
}

func TestMemRulesTokens(t *testing.T) {
	runMemRules(t, []memRule{
		{"remote token reads", func(f *memFixture) error {
			return remote(f, f.mr.RemoteToken(), f.mr.VA()+10, 100, memreg.AccessRemoteRead)
		}, StatusSuccess},
		{"local token refused remotely", func(f *memFixture) error {
			return remote(f, f.mr.LocalToken(), f.mr.VA(), 1, memreg.AccessRemoteRead)
		}, StatusAccessViolation},
		{"right not granted", func(f *memFixture) error {
			return remote(f, f.mr.RemoteToken(), f.mr.VA(), 1, memreg.AccessRemoteWrite)
		}, StatusAccessViolation},
		{"beyond the end", func(f *memFixture) error {
			return remote(f, f.mr.RemoteToken(), f.mr.VA()+8190, 3, memreg.AccessRemoteRead)
		}, StatusAccessViolation},
		{"before the start", func(f *memFixture) error {
			return remote(f, f.mr.RemoteToken(), f.mr.VA()-1, 1, memreg.AccessRemoteRead)
		}, StatusAccessViolation},
		{"wraps 2^64", func(f *memFixture) error {
			return remote(f, f.mr.RemoteToken(), ^uint64(0)-1, 16, memreg.AccessRemoteRead)
		}, StatusAccessViolation},
		{"stale after deregister", func(f *memFixture) error {
			tok := f.ro.RemoteToken()
			if err := f.reg.DeregisterMR(f.ro); err != nil {
				return err
			}
			return remote(f, tok, f.ro.VA(), 1, memreg.AccessRemoteRead)
		}, StatusAccessViolation},
		{"guessed token", func(f *memFixture) error {
			return remote(f, f.mr.RemoteToken()^0x8000_0000, f.mr.VA(), 1, memreg.AccessRemoteRead)
		}, StatusAccessViolation},
	})
}

func TestMemRulesPD(t *testing.T) {
	runMemRules(t, []memRule{
		{"token of another PD", func(f *memFixture) error {
			_, err := f.reg.Resolve(f.otherP, f.mr.RemoteToken(), f.mr.VA(), 1, memreg.AccessRemoteRead)
			return err
		}, StatusAccessViolation},
		{"bind a window of another PD", func(f *memFixture) error {
			mw, err := f.reg.CreateMW(f.otherP)
			if err != nil {
				return err
			}
			return f.reg.Bind(1, mw, f.mr, f.mr.VA(), 64, memreg.OpAllowRemoteRead)
		}, StatusAccessViolation},
		{"invalidate through another PD", func(f *memFixture) error {
			if err := f.reg.Bind(1, f.mw, f.mr, f.mr.VA(), 64, memreg.OpAllowRemoteRead); err != nil {
				return err
			}
			return f.reg.Invalidate(f.otherP, f.mw.RemoteToken())
		}, StatusAccessViolation},
	})
}

func TestMemRulesBind(t *testing.T) {
	bind := func(mr func(*memFixture) *memreg.MR, off, n uint64, flags memreg.OpFlags) func(f *memFixture) error {
		return func(f *memFixture) error {
			m := mr(f)
			return f.reg.Bind(1, f.mw, m, m.VA()+off, n, flags)
		}
	}
	rw := func(f *memFixture) *memreg.MR { return f.mr }
	ro := func(f *memFixture) *memreg.MR { return f.ro }
	runMemRules(t, []memRule{
		{"bind read", bind(rw, 0, 4096, memreg.OpAllowRemoteRead), StatusSuccess},
		{"bind write on a local-write MR", bind(rw, 100, 100, memreg.OpAllowRemoteWrite), StatusSuccess},
		{"bind write on an MR without local write", bind(ro, 0, 64, memreg.OpAllowRemoteWrite), StatusAccessViolation},
		{"address before the region", func(f *memFixture) error {
			return f.reg.Bind(1, f.mw, f.mr, f.mr.VA()-1, 16, memreg.OpAllowRemoteRead)
		}, StatusAccessViolation},
		{"address at the end of the region", bind(rw, 8192, 1, memreg.OpAllowRemoteRead), StatusAccessViolation},
		{"length past the end", bind(rw, 8000, 193, memreg.OpAllowRemoteRead), StatusAccessViolation},
		{"zero-based address", func(f *memFixture) error {
			return f.reg.Bind(1, f.mw, f.mr, 0, 16, memreg.OpAllowRemoteRead)
		}, StatusInvalidParameter},
		{"unknown flag", bind(rw, 0, 16, 0x4), StatusInvalidParameter},
		{"bound to a second QP", func(f *memFixture) error {
			if err := f.reg.Bind(1, f.mw, f.mr, f.mr.VA(), 16, memreg.OpAllowRemoteRead); err != nil {
				return err
			}
			return f.reg.Bind(2, f.mw, f.mr, f.mr.VA(), 16, memreg.OpAllowRemoteRead)
		}, StatusDeviceBusy},
		{"token usable when bind returns, within range and rights", func(f *memFixture) error {
			if err := f.reg.Bind(1, f.mw, f.mr, f.mr.VA()+64, 128, memreg.OpAllowRemoteRead); err != nil {
				return err
			}
			if err := remote(f, f.mw.RemoteToken(), f.mr.VA()+64, 128, memreg.AccessRemoteRead); err != nil {
				return err
			}
			if remote(f, f.mw.RemoteToken(), f.mr.VA()+63, 2, memreg.AccessRemoteRead) == nil ||
				remote(f, f.mw.RemoteToken(), f.mr.VA()+64, 1, memreg.AccessRemoteWrite) == nil {
				return errors.New("the window allowed access outside its range or rights")
			}
			return nil
		}, StatusSuccess},
		{"invalidated window refuses", func(f *memFixture) error {
			if err := f.reg.Bind(1, f.mw, f.mr, f.mr.VA(), 16, memreg.OpAllowRemoteRead); err != nil {
				return err
			}
			tok := f.mw.RemoteToken()
			if err := f.reg.InvalidateMW(f.mw); err != nil {
				return err
			}
			return remote(f, tok, f.mr.VA(), 1, memreg.AccessRemoteRead)
		}, StatusAccessViolation},
		{"invalidate an unbound window", func(f *memFixture) error { return f.reg.InvalidateMW(f.mw) }, StatusInvalidDeviceRequest},
	})
}

func TestMemRulesFastRegister(t *testing.T) {
	fr := func(pages func(*memFixture) [][]byte, fbo int, length, base uint64, flags memreg.OpFlags) func(f *memFixture) error {
		return func(f *memFixture) error { return f.reg.FastRegister(f.fr, pages(f), fbo, length, base, flags) }
	}
	all := func(f *memFixture) [][]byte { return f.pages }
	const base = 0x7000_0000_0000
	runMemRules(t, []memRule{
		{"register 4 pages", fr(all, 100, 4*4096-100, base+100, memreg.OpAllowRemoteWrite|memreg.OpAllowRemoteRead), StatusSuccess},
		{"FBO past a page", fr(all, 4096, 10, base, memreg.OpAllowRemoteRead), StatusInvalidParameter},
		{"length past pages*PAGE_SIZE-FBO", fr(all, 100, 4*4096-99, base+100, memreg.OpAllowRemoteRead), StatusInvalidParameter},
		{"base VA not FBO + n*PAGE_SIZE", fr(all, 100, 10, base, memreg.OpAllowRemoteRead), StatusInvalidParameter},
		{"zero-based", fr(all, 0, 10, 0, memreg.OpAllowRemoteRead), StatusInvalidParameter},
		{"more pages than initialised", fr(func(f *memFixture) [][]byte { return append(f.pages, f.pages[0]) }, 0, 10, base, memreg.OpAllowRemoteRead), StatusInvalidParameter},
		{"page not PAGE_SIZE", fr(func(f *memFixture) [][]byte { return [][]byte{f.pages[0][:100]} }, 0, 10, base, memreg.OpAllowRemoteRead), StatusInvalidParameter},
		{"page outside the UMEM", fr(func(f *memFixture) [][]byte { return [][]byte{make([]byte, 4096)} }, 0, 10, base, memreg.OpAllowRemoteRead), StatusInvalidParameter},
		{"remote access on an MR initialised without it", func(f *memFixture) error {
			return f.reg.FastRegister(f.frNo, f.pages, 0, 10, base, memreg.OpAllowRemoteRead)
		}, StatusAccessViolation},
		{"local-only on an MR initialised without remote access", func(f *memFixture) error {
			return f.reg.FastRegister(f.frNo, f.pages, 0, 10, base, memreg.OpAllowLocalWrite)
		}, StatusSuccess},
		{"fast register twice", func(f *memFixture) error {
			if err := f.reg.FastRegister(f.fr, f.pages, 0, 10, base, memreg.OpAllowRemoteRead); err != nil {
				return err
			}
			return f.reg.FastRegister(f.fr, f.pages, 0, 10, base, memreg.OpAllowRemoteRead)
		}, StatusDeviceBusy},
		{"fast register a normal MR", func(f *memFixture) error {
			return f.reg.FastRegister(f.mr, f.pages, 0, 10, base, memreg.OpAllowRemoteRead)
		}, StatusInvalidDeviceRequest},
		{"access across out-of-order pages", func(f *memFixture) error {
			if err := f.reg.FastRegister(f.fr, f.pages, 0, 4*4096, base, memreg.OpAllowRemoteRead|memreg.OpAllowRemoteWrite); err != nil {
				return err
			}
			for i, p := range f.pages {
				for j := range p {
					p[j] = byte(i + 1)
				}
			}
			s, err := f.reg.Acquire(f.pd, f.fr.RemoteToken(), base+4000, 8000, memreg.AccessRemoteRead)
			if err != nil {
				return err
			}
			defer s.MR.Release()
			got := make([]byte, 8000)
			if n := s.CopyOut(0, got); n != 8000 {
				return errors.New("short copy")
			}
			want := strings.Repeat("\x01", 96) + strings.Repeat("\x02", 4096) + strings.Repeat("\x03", 3808)
			if string(got) != want {
				return errors.New("bytes of the wrong pages")
			}
			return nil
		}, StatusSuccess},
	})
}

func TestMemRulesInvalidate(t *testing.T) {
	const base = 0x7000_0000_0000
	register := func(f *memFixture) error {
		return f.reg.FastRegister(f.fr, f.pages, 0, 4096, base, memreg.OpAllowRemoteRead)
	}
	runMemRules(t, []memRule{
		{"invalidate a fast-registered MR", func(f *memFixture) error {
			if err := register(f); err != nil {
				return err
			}
			tok := f.fr.RemoteToken()
			if err := f.reg.InvalidateMR(f.fr); err != nil {
				return err
			}
			if remote(f, tok, base, 1, memreg.AccessRemoteRead) == nil {
				return errors.New("access after invalidate")
			}
			return nil
		}, StatusSuccess},
		{"invalidate a normally registered MR", func(f *memFixture) error { return f.reg.InvalidateMR(f.mr) }, StatusInvalidDeviceRequest},
		{"invalidate an MR not registered", func(f *memFixture) error { return f.reg.InvalidateMR(f.fr) }, StatusInvalidDeviceRequest},
		{"remote invalidate (SendAndInvalidate) of a normal MR", func(f *memFixture) error {
			return f.reg.Invalidate(f.pd, f.mr.RemoteToken())
		}, StatusInvalidDeviceRequest},
		{"remote invalidate of a bound window", func(f *memFixture) error {
			if err := f.reg.Bind(1, f.mw, f.mr, f.mr.VA(), 16, memreg.OpAllowRemoteRead); err != nil {
				return err
			}
			tok := f.mw.RemoteToken()
			if err := f.reg.Invalidate(f.pd, tok); err != nil {
				return err
			}
			return remote(f, tok, f.mr.VA(), 1, memreg.AccessRemoteRead)
		}, StatusAccessViolation},
		{"remote invalidate of a stale token", func(f *memFixture) error {
			if err := register(f); err != nil {
				return err
			}
			tok := f.fr.RemoteToken()
			if err := f.reg.InvalidateMR(f.fr); err != nil {
				return err
			}
			return f.reg.Invalidate(f.pd, tok)
		}, StatusAccessViolation},
	})
}

// TestResolverRefusalsDoNotAllocate: the engine calls the resolver per packet; refusing is
// as allocation-free as resolving.
func TestResolverRefusalsDoNotAllocate(t *testing.T) {
	f := newMemFixture(t)
	var r transport.MemoryResolver = f.reg
	tok, va := f.mr.RemoteToken(), f.mr.VA()
	allocs := testing.AllocsPerRun(1000, func() {
		if s, err := r.Acquire(f.pd, tok, va, 64, memreg.AccessRemoteRead); err == nil {
			s.MR.Release()
		}
		_, _ = r.Acquire(f.pd, tok, va, 64, memreg.AccessRemoteWrite)
		_, _ = r.Acquire(f.otherP, tok, va, 64, memreg.AccessRemoteRead)
		_ = r.Invalidate(f.pd, tok)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per resolve/refuse round, want 0", allocs)
	}
	if f.mr.Refs() != 0 {
		t.Fatalf("holds left: %d", f.mr.Refs())
	}
}

func TestStatusNames(t *testing.T) {
	for _, c := range []struct {
		s    Status
		name string
		err  bool
	}{
		{StatusSuccess, "STATUS_SUCCESS", false},
		{StatusPending, "STATUS_PENDING", false},
		{StatusBufferOverflow, "STATUS_BUFFER_OVERFLOW", false},
		{StatusAccessViolation, "STATUS_ACCESS_VIOLATION", true},
		{StatusCancelled, "STATUS_CANCELLED", true},
		{StatusConnectionInvalid, "STATUS_CONNECTION_INVALID", true},
		{Status(0xC0001234), "NTSTATUS(0xC0001234)", true},
	} {
		if c.s.Name() != c.name || c.s.IsError() != c.err {
			t.Errorf("%#x: name %q error %v, want %q %v", uint32(c.s), c.s.Name(), c.s.IsError(), c.name, c.err)
		}
	}
	if got := StatusAccessViolation.String(); got != "STATUS_ACCESS_VIOLATION (0xC0000005)" {
		t.Errorf("String %q", got)
	}
	err := errorf(StatusDeviceBusy, "%d windows", 2)
	if !errors.Is(err, StatusDeviceBusy) || errors.Is(err, StatusCancelled) || StatusOf(err) != StatusDeviceBusy {
		t.Errorf("errorf: %v", err)
	}
	if StatusOf(nil) != StatusSuccess || StatusOf(errors.New("x")) != StatusUnsuccessful {
		t.Error("StatusOf of nil or a foreign error")
	}
	if w := wrap(StatusCancelled, memreg.ErrStale); !errors.Is(w, memreg.ErrStale) || !strings.Contains(w.Error(), "STATUS_CANCELLED") {
		t.Errorf("wrap: %v", w)
	}
}
