package memreg

// The access checks, lock-free and allocation-free: a peer's remote access (Resolve,
// Acquire), a received SendAndInvalidate (Invalidate), and a local SGE (AcquireLocal).

// find checks a remote access and returns the slot and live mapping token names and the
// offset of addr in it. The checks and their refusals are Resolve's.
// The caller holds a reader section of s (s.readers), so the mapping's fields stay
// untouched until it ends.
func find(s *slot, pd PD, token uint32, addr uint64, length uint32, access Access) (*mapping, uint64, error) {
	m := s.cur.Load()
	if m == nil {
		return nil, 0, ErrStale
	}
	local := m.localToken == token && m.localToken != 0
	if m.remoteToken != token && !local {
		return nil, 0, ErrStale
	}
	if m.pd != pd {
		return nil, 0, ErrWrongPD
	}
	if local || access&^m.access != 0 {
		return nil, 0, ErrRights
	}
	if addr < m.base {
		return nil, 0, ErrBounds
	}
	off := addr - m.base
	if off > m.length || uint64(length) > m.length-off {
		return nil, 0, ErrBounds
	}
	return m, off, nil
}

// Resolve returns the bytes [addr, addr+length) of the memory that token names, if a QP of
// protection domain pd may access them with access. It checks, in order: the token names a
// slot (ErrBadToken) and its live mapping (ErrStale), the PD (ErrWrongPD), the rights
// (ErrRights; a local token never grants remote access), the range (ErrBounds; overflow-safe)
// and, for fast-registered regions, that the range lies in contiguous memory
// (ErrNotContiguous); each of these errors matches ErrAccess. The slice's capacity equals
// its length. Resolve holds nothing: use Acquire when the bytes are used while a concurrent
// deregistration could give the memory back to the application. Resolve neither locks nor
// allocates, refusing included.
func (r *Registry) Resolve(pd PD, token uint32, addr uint64, length uint32, access Access) ([]byte, error) {
	s := r.lookup(token)
	if s == nil {
		return nil, ErrBadToken
	}
	s.readers.Add(1)
	defer s.readers.Add(-1)
	m, off, err := find(s, pd, token, addr, length, access)
	if err != nil {
		return nil, err
	}
	n := uint64(length)
	if m.runs == nil {
		return m.buf[off : off+n : off+n], nil
	}
	if n == 0 {
		return m.runs[0][:0:0], nil
	}
	sp := Span{N: n, runs: m.runs, pos: m.fbo + off}
	if p := sp.Piece(0); uint64(len(p)) == n {
		return p, nil
	}
	return nil, ErrNotContiguous
}

// Acquire is Resolve for an access that uses the bytes for a while: it returns them as a
// Span (contiguous, or walking the pages of a fast-registered region in their registered
// order) that holds the region behind them, the MR itself or a window's MR, until the
// caller calls Span.MR.Release. The checks and refusals are Resolve's, except that
// non-contiguous pages are no error. On refusal nothing is held. It has the method set
// package transport's MemoryResolver asks for, with Invalidate: a *Registry is the
// transport's resolver as it is.
//
// A hold does not keep the token valid: invalidation and deregistration still stop every
// later Acquire at once. It delays only the moment the memory is the application's again
// (MR.WaitIdle). An Acquire racing an invalidation either returns the complete old mapping,
// with a hold that a WaitIdle started after the invalidation returned waits for, or fails
// with ErrStale. Acquire neither locks nor allocates, refusing included.
func (r *Registry) Acquire(pd PD, token uint32, addr uint64, length uint32, access Access) (Span, error) {
	s := r.lookup(token)
	if s == nil {
		return Span{}, ErrBadToken
	}
	s.readers.Add(1)
	defer s.readers.Add(-1)
	m, off, err := find(s, pd, token, addr, length, access)
	if err != nil {
		return Span{}, err
	}
	if !hold(s, m) {
		return Span{}, ErrStale
	}
	n := uint64(length)
	sp := Span{N: n, MR: m.owner}
	if m.runs == nil {
		sp.Buf = m.buf[off : off+n : off+n]
		return sp, nil
	}
	sp.runs, sp.pos = m.runs, m.fbo+off
	sp.Buf = sp.Piece(0)
	return sp, nil
}

// Invalidate invalidates the remote token of a fast-registered MR or a bound MW of pd, as a
// received SendAndInvalidate asks. It refuses (and the connection is aborted) a token that is
// not live (ErrBadToken, ErrStale), of another PD (ErrWrongPD), or of a normally registered
// MR or a local token (an error matching ErrWrongKind); each of its errors matches ErrAccess.
// It neither locks nor allocates, refusing included.
func (r *Registry) Invalidate(pd PD, token uint32) error {
	s := r.lookup(token)
	if s == nil {
		return ErrBadToken
	}
	s.readers.Add(1)
	defer s.readers.Add(-1)
	m := s.cur.Load()
	if m == nil || m.remoteToken != token {
		if m != nil && m.localToken == token && m.pd == pd {
			return refusedWrongKind
		}
		return ErrStale
	}
	if m.pd != pd {
		return ErrWrongPD
	}
	if m.kind == kindMR {
		return refusedWrongKind
	}
	if !unmap(s, m) {
		return ErrStale // invalidated concurrently
	}
	return nil
}

// AcquireLocal checks a local access, an SGE of a work request or receive posted on a QP of
// pd, and holds the region until the caller calls Release on the returned MR. buf must lie
// inside the region that the local token token names (for a fast-register MR, inside one
// contiguous run of its registered range); write asks for local write access (receive
// buffers, Read sinks). Errors: ErrBadToken, ErrStale (not a live local token), ErrWrongPD,
// ErrRights (no local write), ErrBounds. Empty buffers need no token and hold nothing
// (nil, nil). AcquireLocal neither locks nor allocates.
func (r *Registry) AcquireLocal(pd PD, token uint32, buf []byte, write bool) (*MR, error) {
	if len(buf) == 0 {
		return nil, nil
	}
	s := r.lookup(token)
	if s == nil {
		return nil, ErrBadToken
	}
	// Only a region's slot has a local token. The hold on the region comes first, then the
	// mapping is loaded: a mapping loaded under the hold is not reused while it lasts
	// (newMapping), and one removed before the load is not found. The second look at
	// s.mr tells that the slot was not freed (and given to someone else) before cur was
	// loaded, so the mapping is mr's. One locked operation (the hold) instead of the
	// readers' two around it.
	mr := s.mr.Load()
	if mr == nil {
		return nil, ErrStale
	}
	mr.refs.Add(1)
	m := s.cur.Load()
	if s.mr.Load() != mr {
		mr.refs.Add(-1)
		return nil, ErrStale
	}
	if err := checkLocal(m, pd, token, buf, write); err != nil {
		mr.refs.Add(-1)
		return nil, err
	}
	return mr, nil
}

// checkLocal is AcquireLocal's check of mapping m (nil: none) for the local access.
func checkLocal(m *mapping, pd PD, token uint32, buf []byte, write bool) error {
	if m == nil || m.localToken != token || m.localToken == 0 {
		return ErrStale
	}
	if m.pd != pd {
		return ErrWrongPD
	}
	if write && !m.localWrite {
		return ErrRights
	}
	if !m.containsLocal(bufVA(buf), uint64(len(buf))) {
		return ErrBounds
	}
	return nil
}

// containsLocal reports whether the process memory [va, va+n) lies inside the mapping's
// bytes (for a fast-register MR: inside one page run, within the registered range).
func (m *mapping) containsLocal(va, n uint64) bool {
	if m.runs == nil {
		lo := bufVA(m.buf)
		return va >= lo && va-lo <= m.length && n <= m.length-(va-lo)
	}
	for i, run := range m.runs {
		lo := bufVA(run)
		if va < lo || va-lo > uint64(len(run)) || n > uint64(len(run))-(va-lo) {
			continue
		}
		// the offset of va in the registered range: page i starts at i*PAGE_SIZE - fbo
		start := uint64(i)*FastRegisterPageSize + (va - lo)
		if start < m.fbo {
			continue
		}
		start -= m.fbo
		if start <= m.length && n <= m.length-start {
			return true
		}
	}
	return false
}
