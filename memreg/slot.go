package memreg

import (
	"crypto/rand"
	"encoding/binary"
	"sync/atomic"
)

// The registry's table (see the design comment in registry.go): one slot per live MR or
// MW, the tokens derived from its generation, the immutable mapping a live token names,
// and how a removed mapping is kept and reused without racing lock-free readers.

type kind uint8

const (
	kindMR   kind = iota + 1 // normally registered MR
	kindFRMR                 // fast-register MR
	kindMW                   // memory window
)

// mapping is what a live token names. It is immutable once published.
type mapping struct {
	kind        kind
	pd          PD
	localToken  uint32 // 0 for windows (they have none)
	remoteToken uint32
	access      Access
	base        uint64 // the VA of the first byte
	length      uint64
	buf         []byte   // MR and MW: exactly the mapped bytes
	runs        [][]byte // fast-register MR: runs[i] is page i and the contiguous pages after it
	fbo         uint64
	owner       *MR  // the region an access holds: the MR itself, or the one a window is bound to
	localWrite  bool // the local token allows writing (MR_FLAG_ALLOW_LOCAL_WRITE, FR ALLOW_LOCAL_WRITE)
}

// slot is one table entry. cur and mr are read lock-free; the rest only under Registry.mu.
type slot struct {
	cur     atomic.Pointer[mapping]
	readers atomic.Int32 // lock-free readers of cur between their Load and their last field read (not AcquireLocal)
	// mr is the region that owns the slot (nil for a window or a free slot), set before
	// its first mapping is published and cleared when the slot is freed: every mapping
	// published while it names a region is that region's (owner == mr). AcquireLocal
	// holds it before it loads cur instead of counting itself in readers.
	mr        atomic.Pointer[MR]
	spare     *mapping // the last mapping a control operation retired; reused when no reader is left
	gen       uint32
	salt, mul uint32
	seeded    bool
	fresh     bool // tokens were made for the current owner and not used by a mapping yet
	local     uint32
	remote    uint32
}

// allocSlot takes a free slot and gives it fresh tokens. r.mu must be held.
func (r *Registry) allocSlot() (uint32, error) {
	var i uint32
	switch {
	case len(r.free) > 0:
		i = r.free[0]
		r.free = r.free[1:]
	case int(r.next) < len(r.slots):
		i = r.next
		r.next++
	default:
		return 0, ErrFull
	}
	r.newTokens(i)
	return i, nil
}

// freeSlot clears slot i and queues it for reuse. r.mu must be held.
func (r *Registry) freeSlot(i uint32) {
	r.slots[i].cur.Store(nil)
	r.slots[i].mr.Store(nil)
	r.slots[i].fresh = false
	r.free = append(r.free, i)
}

// newTokens bumps slot i's generation and derives its local and remote tokens. r.mu must be
// held.
func (r *Registry) newTokens(i uint32) {
	s := &r.slots[i]
	s.gen++
	if !s.seeded || uint64(s.gen)*2+1 > uint64(r.tagMask) {
		var b [8]byte
		_, _ = rand.Read(b[:]) // never fails (crypto/rand crashes the program instead)
		s.salt = binary.LittleEndian.Uint32(b[:4])
		s.mul = binary.LittleEndian.Uint32(b[4:]) | 1
		s.seeded = true
		s.gen = 0
	}
	s.local = r.token(i, 2*s.gen)
	s.remote = r.token(i, 2*s.gen+1)
	s.fresh = true
}

func (r *Registry) token(i, g uint32) uint32 {
	s := &r.slots[i]
	return (i + 1) | ((g*s.mul+s.salt)&r.tagMask)<<r.idxBits
}

// takeTokens returns the tokens for a new mapping in slot i: the fresh ones if unused, else
// new ones. r.mu must be held.
func (r *Registry) takeTokens(i uint32) (local, remote uint32) {
	if !r.slots[i].fresh {
		r.newTokens(i)
	}
	r.slots[i].fresh = false
	return r.slots[i].local, r.slots[i].remote
}

// lookup returns the slot a token's index names, or nil.
func (r *Registry) lookup(token uint32) *slot {
	i := token & r.idxMask
	if i == 0 || i > uint32(len(r.slots)) {
		return nil
	}
	return &r.slots[i-1]
}

// hold takes a hold on the region of m, the mapping an access found in s, then checks
// that m is still current. If an invalidation removed it in between, the hold is given
// back and the access fails (false); if not, the invalidation's WaitIdle sees the hold
// (sequentially consistent atomics order this Add before its later Load).
func hold(s *slot, m *mapping) bool {
	m.owner.refs.Add(1)
	if s.cur.Load() != m {
		m.owner.refs.Add(-1)
		return false
	}
	return true
}

// unmap removes mapping m from slot s if it is still current. It is the only way a live
// mapping goes away besides freeSlot, and it keeps the window count of the parent MR.
func unmap(s *slot, m *mapping) bool {
	if m == nil || !s.cur.CompareAndSwap(m, nil) {
		return false
	}
	if m.kind == kindMW {
		m.owner.windows.Add(-1)
	}
	return true
}

// retire unmaps m from slot s like unmap and keeps it for reuse by the slot's next mapping.
// r.mu must be held.
func retire(s *slot, m *mapping) bool {
	if !unmap(s, m) {
		return false
	}
	s.spare = m
	return true
}

// newMapping returns a mapping for slot s to fill and publish: the slot's retired one when
// no lock-free reader can still be reading it (every reader that loaded it has left its
// section: readers is 0 and it is no longer published, so no new reader finds it; and, for
// a region's mapping, the region has no holds: AcquireLocal reads the mapping under a hold
// it took before loading it, not in readers), else a new one. With it come the retired page runs of a fast-register mapping when no Span can
// still reference them (its region has no holds). This makes Bind, FastRegister and their
// invalidation allocation-free in steady state. r.mu must be held.
func newMapping(s *slot) (*mapping, [][]byte) {
	m := s.spare
	if m == nil || s.readers.Load() != 0 || (m.kind != kindMW && m.owner.refs.Load() != 0) {
		return new(mapping), nil
	}
	s.spare = nil
	var runs [][]byte
	if m.runs != nil && m.owner != nil && m.owner.refs.Load() == 0 {
		runs = m.runs[:0]
	}
	return m, runs
}
