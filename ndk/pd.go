package ndk

import (
	"context"
	"sync"

	"github.com/xdpndk/xdpndk/memreg"
)

// PD is a protection domain (NDK_PD): memory registered in it is accessible only through
// QPs of the same PD. Safe for concurrent use.
type PD struct {
	a  *Adapter
	id memreg.PD
}

// NewPD creates a protection domain (NdkCreatePd).
func (a *Adapter) NewPD() (*PD, error) {
	if err := a.checkOpen(); err != nil {
		return nil, err
	}
	return &PD{a: a, id: a.reg.NewPD()}, nil
}

// Close ends the PD's life as NdkCloseObject does. A PD owns no resources of its own here
// (it is a number its MRs, MWs, SRQs and QPs carry), so there is nothing to release and
// Close always succeeds; its objects stay valid until they are closed themselves.
func (pd *PD) Close(ctx context.Context) error { return nil }

// SGE is one scatter/gather entry (NDK_SGE): a buffer in registered memory and the local
// token of the region that holds it. With OpInline the token is ignored.
type SGE struct {
	Buf   []byte
	Token uint32
}

// MR is a memory region (NDK_MR): normally registered (RegisterMR) or fast-register
// (NewFastRegisterMR). Safe for concurrent use.
type MR struct {
	pd   *PD
	m    *memreg.MR
	fast bool // a fast-register MR

	mu        sync.Mutex
	fva, flen uint64 // a fast-register MR: what its last FastRegister mapped
}

// MemoryObject is an MR or an MW: what Invalidate takes.
type MemoryObject interface{ memoryObject() }

func (*MR) memoryObject() {}
func (*MW) memoryObject() {}

// RegisterMR registers buf with NDK_MR_FLAG_* flags (NdkCreateMr(FastRegister=FALSE) and
// NdkRegisterMr). The region's virtual address is the address of buf[0] in this process.
// Memory from Adapter.Alloc leaves zero-copy; other memory is pinned (mlock) and copied.
// Errors: STATUS_INVALID_PARAMETER (empty buffer, unknown flags, the remote-write bit
// without local write), STATUS_INSUFFICIENT_RESOURCES (the table is full, mlock refused).
func (pd *PD) RegisterMR(buf []byte, flags MRFlags) (*MR, error) {
	if err := pd.a.checkOpen(); err != nil {
		return nil, err
	}
	m, err := pd.a.reg.RegisterMR(pd.id, buf, flags)
	if err != nil {
		return nil, memError(err)
	}
	return &MR{pd: pd, m: m}, nil
}

// NewFastRegisterMR creates a fast-register MR initialised for up to pageCount adapter
// pages (NdkCreateMr(FastRegister=TRUE) and NdkInitializeFastRegisterMr). remoteAccess must
// be true if a FastRegister will grant remote access. Errors: STATUS_IMPLEMENTATION_LIMIT
// for a page count over FRMRPageCount, STATUS_INSUFFICIENT_RESOURCES.
func (pd *PD) NewFastRegisterMR(pageCount int, remoteAccess bool) (*MR, error) {
	if err := pd.a.checkOpen(); err != nil {
		return nil, err
	}
	if pageCount < 1 || pageCount > frmrPageCount {
		return nil, errorf(StatusImplementationLimit, "%d pages (1 to %d)", pageCount, frmrPageCount)
	}
	m, err := pd.a.reg.NewFastRegisterMR(pd.id, pageCount, remoteAccess)
	if err != nil {
		return nil, memError(err)
	}
	return &MR{pd: pd, m: m, fast: true}, nil
}

// fastRange returns what a fast-register MR's last FastRegister mapped; ok is false for a
// normally registered MR.
func (mr *MR) fastRange() (va, n uint64, ok bool) {
	if !mr.fast {
		return 0, 0, false
	}
	mr.mu.Lock()
	defer mr.mu.Unlock()
	return mr.fva, mr.flen, true
}

// LocalToken is the token SGEs use (NdkGetLocalTokenFromMr).
func (mr *MR) LocalToken() uint32 { return mr.m.LocalToken() }

// RemoteToken is the token a peer uses (NdkGetRemoteTokenFromMr). For a fast-register MR
// it is valid once FastRegister returns, and changes with each FastRegister.
func (mr *MR) RemoteToken() uint32 { return mr.m.RemoteToken() }

// VA is the region's virtual address: the address of its first byte (0 for a
// fast-register MR: its address is FastRegister's baseVA).
func (mr *MR) VA() uint64 { return mr.m.VA() }

// Len is the length of a normally registered region.
func (mr *MR) Len() uint64 { return mr.m.Len() }

// InUMEM reports whether the region transmits zero-copy (it lies in the adapter's UMEM).
func (mr *MR) InUMEM() bool { return mr.m.InUMEM() }

// SGE returns an SGE for b, which must lie inside the region.
func (mr *MR) SGE(b []byte) SGE { return SGE{Buf: b, Token: mr.m.LocalToken()} }

// Deregister deregisters the region (NdkDeregisterMr, or closes a fast-register MR): its
// tokens stop working at once; the call returns when no remote access in flight still
// uses its memory, which then is the application's again (ctx bounds the wait; the
// deregistration itself has happened). STATUS_DEVICE_BUSY while windows are bound to it.
// Requests hold their regions until they complete: after the QPs that used the region
// are closed (or flushed and their results taken), or the adapter is closed, it returns
// at once.
func (mr *MR) Deregister(ctx context.Context) error {
	if mr.pd.a.stopped.Load() {
		return nil // the adapter is closed: nothing uses the memory any more
	}
	if err := mr.pd.a.reg.DeregisterMR(mr.m); err != nil {
		return memError(err)
	}
	if err := mr.m.WaitIdle(ctx); err != nil {
		return wrap(StatusPending, err)
	}
	return nil
}

// Close is Deregister.
func (mr *MR) Close(ctx context.Context) error { return mr.Deregister(ctx) }

// MW is a memory window (NDK_MW). Safe for concurrent use.
type MW struct {
	pd *PD
	w  *memreg.MW

	mu         sync.Mutex
	va, length uint64 // what the last Bind granted (Remote)
}

// NewMW creates a memory window (NdkCreateMw).
func (pd *PD) NewMW() (*MW, error) {
	if err := pd.a.checkOpen(); err != nil {
		return nil, err
	}
	w, err := pd.a.reg.CreateMW(pd.id)
	if err != nil {
		return nil, memError(err)
	}
	return &MW{pd: pd, w: w}, nil
}

// RemoteToken is the window's token for peers (NdkGetRemoteTokenFromMw), valid as soon as
// Bind returns; it changes with every Bind.
func (mw *MW) RemoteToken() uint32 { return mw.w.RemoteToken() }

// Close releases the window, invalidating it if bound.
func (mw *MW) Close(ctx context.Context) error {
	if mw.pd.a.stopped.Load() {
		return nil // the adapter is closed
	}
	return memError(mw.pd.a.reg.CloseMW(mw.w))
}
