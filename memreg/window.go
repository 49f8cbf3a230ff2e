package memreg

import (
	"fmt"
	"sync/atomic"
)

// Memory windows (NDKPI NdkCreateMw, NdkBind, NdkInvalidate): a remote token onto part of
// a normally registered MR, bound through one QP at a time.

// MW is a memory window.
type MW struct {
	r      *Registry
	idx    uint32
	pd     PD
	remote atomic.Uint32
	qp     atomic.Uint32
	closed bool // under r.mu
}

// RemoteToken returns the window's remote token, valid as soon as Bind returns. It changes
// with every Bind after an invalidation.
func (mw *MW) RemoteToken() uint32 { return mw.remote.Load() }

// QP returns the id of the QP the window was last bound through.
func (mw *MW) QP() uint32 { return mw.qp.Load() }

// PD returns the protection domain of the window.
func (mw *MW) PD() PD { return mw.pd }

// CreateMW creates a memory window in pd (NdkCreateMw). Errors: ErrInvalidParameter for an
// unknown PD, ErrFull.
func (r *Registry) CreateMW(pd PD) (*MW, error) {
	if !r.validPD(pd) {
		return nil, fmt.Errorf("%w: unknown PD %d", ErrInvalidParameter, pd)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	i, err := r.allocSlot()
	if err != nil {
		return nil, err
	}
	mw := &MW{r: r, idx: i, pd: pd}
	mw.remote.Store(r.slots[i].remote)
	r.nMWs.Add(1)
	return mw, nil
}

func (r *Registry) checkMW(mw *MW) error {
	if mw == nil || mw.r != r {
		return fmt.Errorf("%w: MW of another registry or nil", ErrInvalidParameter)
	}
	if mw.closed {
		return ErrClosed
	}
	return nil
}

// CloseMW releases a window, invalidating it first if bound.
func (r *Registry) CloseMW(mw *MW) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkMW(mw); err != nil {
		return err
	}
	s := &r.slots[mw.idx]
	retire(s, s.cur.Load())
	r.freeSlot(mw.idx)
	mw.closed = true
	r.nMWs.Add(-1)
	return nil
}

// Bind binds mw through QP qp to [va, va+length) of the normally registered MR mr (NdkBind).
// Rules: mw and mr in the same PD (ErrWrongPD); va != 0 (zero-based addressing is not
// supported: ErrInvalidParameter); mr.VA() <= va < mr.VA()+mr.Len() and the whole range
// inside mr (ErrAccessViolation wrapping ErrBounds); flags among SILENT_SUCCESS, READ_FENCE,
// ALLOW_REMOTE_READ, ALLOW_REMOTE_WRITE, DEFER (ErrInvalidParameter); ALLOW_REMOTE_WRITE
// requires mr registered with MRAllowLocalWrite (ErrAccessViolation); a window is bound to
// one QP at a time (ErrBusy while bound: invalidate first). The remote token is valid as
// soon as Bind returns.
func (r *Registry) Bind(qp uint32, mw *MW, mr *MR, va uint64, length uint64, flags OpFlags) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkMW(mw); err != nil {
		return err
	}
	if err := r.checkMR(mr); err != nil {
		return err
	}
	if mr.fast {
		return fmt.Errorf("%w: Bind to a fast-register MR", ErrWrongKind)
	}
	if flags&^bindFlagsValid != 0 || flags&OpAllowRemoteWrite == opRemoteWriteOnly ||
		flags&OpAllowRemoteWrite == OpAllowLocalWrite {
		return fmt.Errorf("%w: bind flags %#x", ErrInvalidParameter, uint32(flags))
	}
	if mw.pd != mr.pd {
		return fmt.Errorf("%w: window in PD %d, region in PD %d", ErrWrongPD, mw.pd, mr.pd)
	}
	if va == 0 {
		return fmt.Errorf("%w: zero-based virtual address", ErrInvalidParameter)
	}
	if va < mr.va || va-mr.va >= mr.length || length > mr.length-(va-mr.va) {
		return fmt.Errorf("%w: %w: [%#x, +%d) not inside the MR [%#x, +%d)", ErrAccessViolation, ErrBounds,
			va, length, mr.va, mr.length)
	}
	a := opAccess(flags)
	if a&AccessRemoteWrite != 0 && mr.flags&MRAllowLocalWrite == 0 {
		return fmt.Errorf("%w: remote write window on an MR without local write", ErrAccessViolation)
	}
	s := &r.slots[mw.idx]
	if s.cur.Load() != nil {
		return fmt.Errorf("%w: window already bound to QP %d", ErrBusy, mw.qp.Load())
	}
	off := va - mr.va
	_, remote := r.takeTokens(mw.idx)
	mw.remote.Store(remote)
	mw.qp.Store(qp)
	mr.windows.Add(1)
	m, _ := newMapping(s)
	*m = mapping{kind: kindMW, pd: mw.pd, remoteToken: remote, access: a, base: va,
		length: length, buf: mr.buf[off : off+length : off+length], owner: mr}
	s.cur.Store(m)
	return nil
}

// InvalidateMW unbinds mw (NdkInvalidate): its token stops resolving before it returns. An
// unbound window gives ErrNotBound.
func (r *Registry) InvalidateMW(mw *MW) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkMW(mw); err != nil {
		return err
	}
	s := &r.slots[mw.idx]
	if !retire(s, s.cur.Load()) {
		return ErrNotBound
	}
	return nil
}
