package memreg

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// Memory regions: MR, its holds (Release, WaitIdle), normal registration (RegisterMR) and
// DeregisterMR.

// MR is a memory region: normally registered (RegisterMR) or fast-register
// (NewFastRegisterMR).
type MR struct {
	r            *Registry
	idx          uint32
	pd           PD
	fast         bool
	flags        MRFlags // normal MR
	pageCount    int     // fast-register MR
	remoteAccess bool    // fast-register MR
	va, length   uint64  // normal MR
	buf          []byte  // normal MR
	local        atomic.Uint32
	remote       atomic.Uint32
	windows      atomic.Int32 // bound windows
	refs         atomic.Int32 // holds of accesses in flight (Acquire)
	pinned       bool         // normal MR outside the UMEM: its pages are mlock'd
	closed       bool         // under r.mu
}

// Release gives back one hold that Acquire took on the region. Releasing more holds than
// were taken is a broken invariant of the caller and panics.
func (mr *MR) Release() {
	if mr.refs.Add(-1) < 0 {
		panic("memreg: MR released more often than acquired")
	}
}

// Refs returns the number of holds on the region: accesses that resolved it and still use
// its bytes.
func (mr *MR) Refs() int { return int(mr.refs.Load()) }

// WaitIdle waits until no access holds the region any longer, or ctx ends (its error is
// returned then). Once DeregisterMR or InvalidateMR has returned and then WaitIdle returns
// nil, no remote access reads or writes the region's memory again: the application may
// reuse it.
func (mr *MR) WaitIdle(ctx context.Context) error {
	d := 10 * time.Microsecond
	for mr.refs.Load() > 0 {
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		d = min(2*d, time.Millisecond)
	}
	return nil
}

// InUMEM reports whether the region's memory is the adapter's UMEM, so that its bytes can
// leave by descriptor (zero-copy transmit): a normally registered region inside it, or a
// fast-register MR of a registry with a UMEM attached (FastRegister takes only UMEM pages
// then).
func (mr *MR) InUMEM() bool {
	if mr.fast {
		return mr.r.umem != nil
	}
	return !mr.pinned
}

// LocalToken returns the region's local token (for SGEs). For a fast-register MR it is valid
// after NewFastRegisterMR until the first InvalidateMR/Invalidate; after each re-registration
// read it again once FastRegister returns.
func (mr *MR) LocalToken() uint32 { return mr.local.Load() }

// RemoteToken returns the region's remote token. For a fast-register MR it is valid for remote
// access once FastRegister returns; it changes with every FastRegister after an
// invalidation.
func (mr *MR) RemoteToken() uint32 { return mr.remote.Load() }

// PD returns the protection domain of the region.
func (mr *MR) PD() PD { return mr.pd }

// VA returns the virtual address of a normally registered region: the address of the first
// byte of its buffer in this process. It is 0 for a fast-register MR (see FastRegister's
// baseVA).
func (mr *MR) VA() uint64 { return mr.va }

// Len returns the length of a normally registered region (0 for a fast-register MR).
func (mr *MR) Len() uint64 { return mr.length }

// RegisterMR registers buf in pd with NDK_MR_FLAG_* flags (NdkRegisterMr). The region's VA
// is the address of buf[0] (zero-based addressing is not supported). buf must stay valid and
// must not move: memory from the UMEM heap, or Go memory kept alive by the caller (the
// registry keeps a reference). Memory outside the attached UMEM (all memory when none is
// attached) is pinned with mlock until DeregisterMR; it is transmitted by copy. Errors:
// ErrInvalidParameter (unknown PD, empty buf, undefined flag bits, the remote-write bit
// without local write), ErrPin, ErrFull.
func (r *Registry) RegisterMR(pd PD, buf []byte, flags MRFlags) (*MR, error) {
	if !r.validPD(pd) {
		return nil, fmt.Errorf("%w: unknown PD %d", ErrInvalidParameter, pd)
	}
	if len(buf) == 0 {
		return nil, fmt.Errorf("%w: empty buffer", ErrInvalidParameter)
	}
	if flags&^mrFlagsValid != 0 || (flags&0x4 != 0 && flags&MRAllowLocalWrite == 0) {
		return nil, fmt.Errorf("%w: MR flags %#x", ErrInvalidParameter, uint32(flags))
	}
	va, n := bufVA(buf), uint64(len(buf))
	if va+n < va {
		return nil, fmt.Errorf("%w: region wraps the address space", ErrInvalidParameter)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.free) == 0 && int(r.next) >= len(r.slots) {
		return nil, ErrFull
	}
	pin := !r.inUMEM(va, n)
	if pin {
		if err := r.pins.pin(va, n); err != nil {
			return nil, err
		}
	}
	i, err := r.allocSlot()
	if err != nil {
		return nil, err // not reached: checked above
	}
	mr := &MR{r: r, idx: i, pd: pd, flags: flags, va: va, length: n, buf: buf[:n:n], pinned: pin}
	r.slots[i].mr.Store(mr)
	local, remote := r.takeTokens(i)
	mr.local.Store(local)
	mr.remote.Store(remote)
	m, _ := newMapping(&r.slots[i])
	*m = mapping{kind: kindMR, pd: pd, localToken: local, remoteToken: remote,
		access: mrAccess(flags), base: va, length: n, buf: mr.buf, owner: mr, localWrite: flags&MRAllowLocalWrite != 0}
	r.slots[i].cur.Store(m)
	r.counted(false, 1)
	return mr, nil
}

// checkMR validates mr for a control operation. r.mu must be held.
func (r *Registry) checkMR(mr *MR) error {
	if mr == nil || mr.r != r {
		return fmt.Errorf("%w: MR of another registry or nil", ErrInvalidParameter)
	}
	if mr.closed {
		return ErrClosed
	}
	return nil
}

// DeregisterMR releases mr (NdkDeregisterMr, or NdkCloseMr of a fast-register MR): both its
// tokens stop resolving before it returns. Accesses already in flight may still hold the
// region: the memory is the application's again once mr.WaitIdle returns (pages pinned for
// the region are unpinned now; that does not stop an access in flight). It fails with
// ErrBusy while windows are bound to mr (as NDSPI's ND_DEVICE_BUSY), ErrClosed if already
// released.
func (r *Registry) DeregisterMR(mr *MR) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkMR(mr); err != nil {
		return err
	}
	if mr.windows.Load() > 0 {
		return fmt.Errorf("%w: %d windows bound", ErrBusy, mr.windows.Load())
	}
	retire(&r.slots[mr.idx], r.slots[mr.idx].cur.Load())
	r.freeSlot(mr.idx)
	mr.closed = true
	if mr.pinned {
		r.pins.unpin(mr.va, mr.length)
	}
	r.counted(mr.fast, -1)
	return nil
}
