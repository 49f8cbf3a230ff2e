package memreg

import "fmt"

// Fast-register MRs (NDKPI NdkCreateMr with FastRegister, NdkInitializeFastRegisterMr,
// NdkFastRegister, NdkInvalidate): created empty, then mapped onto UMEM pages by a work
// request, invalidated, and mapped again.

// FastRegisterPageSize is the PAGE_SIZE of fast registration: every page given to
// FastRegister is exactly this many bytes.
const FastRegisterPageSize = 4096

const (
	frPageShift = 12
	// maxFastRegisterPages bounds NewFastRegisterMR's page count (1 GiB of pages).
	maxFastRegisterPages = 1 << 18
)

// NewFastRegisterMR creates a fast-register MR in pd and initialises it for up to pageCount
// pages (NdkCreateMr(FastRegister=TRUE) + NdkInitializeFastRegisterMr). remoteAccess must be
// true if a later FastRegister grants remote access.
func (r *Registry) NewFastRegisterMR(pd PD, pageCount int, remoteAccess bool) (*MR, error) {
	if !r.validPD(pd) {
		return nil, fmt.Errorf("%w: unknown PD %d", ErrInvalidParameter, pd)
	}
	if pageCount < 1 || pageCount > maxFastRegisterPages {
		return nil, fmt.Errorf("%w: page count %d", ErrInvalidParameter, pageCount)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	i, err := r.allocSlot()
	if err != nil {
		return nil, err
	}
	mr := &MR{r: r, idx: i, pd: pd, fast: true, pageCount: pageCount, remoteAccess: remoteAccess}
	r.slots[i].mr.Store(mr)
	mr.local.Store(r.slots[i].local)
	mr.remote.Store(r.slots[i].remote)
	r.counted(true, 1)
	return mr, nil
}

// FastRegister maps pages (each exactly FastRegisterPageSize bytes; they need not be
// contiguous) into the fast-register MR mr (NDKPI NdkFastRegister): the region covers
// length bytes starting fbo bytes into the first page, at virtual address baseVA. Rules:
// 1 <= len(pages) <= the MR's page count; 0 <= fbo < FastRegisterPageSize;
// length <= len(pages)*FastRegisterPageSize - fbo; baseVA = fbo + n*FastRegisterPageSize
// and not 0 (zero-based addressing is not supported; NDKPI's "0 only when FBO = 0" is
// therefore never used); baseVA+length must not wrap. Violations give ErrInvalidParameter.
// Remote access (OpAllowRemoteRead or OpAllowRemoteWrite) on an MR not initialised for it
// gives ErrAccessViolation. An MR already registered gives ErrBusy (invalidate it first).
// The tokens are valid when FastRegister returns (read them with LocalToken/RemoteToken).
func (r *Registry) FastRegister(mr *MR, pages [][]byte, fbo int, length uint64, baseVA uint64, flags OpFlags) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkMR(mr); err != nil {
		return err
	}
	if !mr.fast {
		return fmt.Errorf("%w: FastRegister of a normally registered MR", ErrWrongKind)
	}
	if flags&^frFlagsValid != 0 || flags&OpAllowRemoteWrite == opRemoteWriteOnly {
		return fmt.Errorf("%w: flags %#x", ErrInvalidParameter, uint32(flags))
	}
	if len(pages) < 1 || len(pages) > mr.pageCount {
		return fmt.Errorf("%w: %d pages for an MR of %d", ErrInvalidParameter, len(pages), mr.pageCount)
	}
	for i, p := range pages {
		if len(p) != FastRegisterPageSize {
			return fmt.Errorf("%w: page %d is %d bytes", ErrInvalidParameter, i, len(p))
		}
		if r.umem != nil && !r.inUMEM(bufVA(p), FastRegisterPageSize) {
			return fmt.Errorf("%w: page %d is not in the adapter's UMEM", ErrInvalidParameter, i)
		}
	}
	if fbo < 0 || fbo >= FastRegisterPageSize {
		return fmt.Errorf("%w: FBO %d", ErrInvalidParameter, fbo)
	}
	if length > uint64(len(pages))*FastRegisterPageSize-uint64(fbo) {
		return fmt.Errorf("%w: length %d > pages*PAGE_SIZE-FBO", ErrInvalidParameter, length)
	}
	if baseVA == 0 {
		return fmt.Errorf("%w: zero-based virtual address", ErrInvalidParameter)
	}
	if baseVA&(FastRegisterPageSize-1) != uint64(fbo) {
		return fmt.Errorf("%w: base VA %#x is not FBO + n*PAGE_SIZE", ErrInvalidParameter, baseVA)
	}
	if baseVA+length < baseVA {
		return fmt.Errorf("%w: region wraps the address space", ErrInvalidParameter)
	}
	a := opAccess(flags)
	if a != 0 && !mr.remoteAccess {
		return fmt.Errorf("%w: remote access on an MR not initialised for it", ErrAccessViolation)
	}
	s := &r.slots[mr.idx]
	if s.cur.Load() != nil {
		return fmt.Errorf("%w: MR already registered", ErrBusy)
	}
	// runs[i] extends page i over the following pages while they are the next bytes of the
	// same backing array (within page i's capacity), so a range crossing a page boundary
	// resolves to one slice without unsafe slicing.
	m, runs := newMapping(s)
	if cap(runs) < len(pages) {
		runs = make([][]byte, len(pages))
	}
	runs = runs[:len(pages)]
	for i := len(pages) - 1; i >= 0; i-- {
		n := 1
		p := pages[i]
		if i+1 < len(pages) && cap(p) >= 2*FastRegisterPageSize &&
			&p[:2*FastRegisterPageSize][FastRegisterPageSize] == &pages[i+1][0] {
			n = 1 + min(len(runs[i+1])/FastRegisterPageSize, cap(p)/FastRegisterPageSize-1)
		}
		runs[i] = p[: n*FastRegisterPageSize : n*FastRegisterPageSize]
	}
	local, remote := r.takeTokens(mr.idx)
	mr.local.Store(local)
	mr.remote.Store(remote)
	*m = mapping{kind: kindFRMR, pd: mr.pd, localToken: local, remoteToken: remote,
		access: a, base: baseVA, length: length, runs: runs, fbo: uint64(fbo), owner: mr,
		localWrite: flags&OpAllowLocalWrite != 0}
	s.cur.Store(m)
	return nil
}

// InvalidateMR invalidates a fast-registered MR (NdkInvalidate): its tokens stop resolving
// before it returns. A normally registered MR gives ErrWrongKind (deregister it instead); an
// MR not currently registered gives ErrNotBound.
func (r *Registry) InvalidateMR(mr *MR) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkMR(mr); err != nil {
		return err
	}
	if !mr.fast {
		return fmt.Errorf("%w: InvalidateMR of a normally registered MR; use DeregisterMR", ErrWrongKind)
	}
	s := &r.slots[mr.idx]
	if !retire(s, s.cur.Load()) {
		return ErrNotBound
	}
	return nil
}
