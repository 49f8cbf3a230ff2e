package memreg

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// This file is the registry of protection domains, memory regions (MRs), memory windows
// (MWs) and their tokens: the security boundary between remote peers and local memory.
//
// # Tokens
//
// A token is 32 bits: the low idxBits bits are a slot index plus one (so a token is never 0),
// the high tagBits bits (tagBits = 32 - idxBits, idxBits = bits.Len(maxEntries)) are a tag:
//
//	tag = (g*mul + salt) mod 2^tagBits,  g = 2*gen (local token) or 2*gen+1 (remote token)
//
// salt and mul (odd) are drawn from crypto/rand when the slot is first used, and again when
// gen wraps. gen is bumped every time the slot takes a new mapping after a previous one was
// invalidated or deregistered (and when the slot is reused by another object), so a token
// never names two mappings. Since mul is odd, g -> tag is a bijection: within one slot's
// 2^(tagBits-1) generations every token differs; across a wrap a stale token matches with
// probability 2^-tagBits. A peer guessing the token of a neighbouring slot must guess its
// independent random salt: probability 2^-tagBits per try, and the transport aborts the
// connection at the first refused access.
//
// # Concurrency
//
// Resolve and Invalidate run on engine goroutines; everything else on application
// goroutines. Each slot holds an atomic.Pointer to an immutable mapping (the token values,
// PD, rights, range and the memory). Control operations are serialised by Registry.mu, build
// a complete new mapping and publish it with an atomic store (or CompareAndSwap), and remove
// it by CompareAndSwap to nil. Resolve takes no lock: one atomic load of the pointer, then it
// reads only fields of the immutable mapping it loaded.
//
// Memory ordering: Go's sync/atomic operations are sequentially consistent, and an atomic
// store that is observed by an atomic load happens before that load returns (Go memory
// model). So:
//   - A Resolve that loads a mapping sees all fields as written before the publishing store:
//     it sees the mapping entirely. A Resolve that loaded the old mapping before an
//     invalidation decides on that old, complete mapping (an in-flight access, like DMA
//     already under way in hardware).
//   - An invalidation (InvalidateMW, InvalidateMR, DeregisterMR, Invalidate) completes its
//     CompareAndSwap/Swap to nil before it returns. A Resolve started after that return
//     loads a later value in the total order of the slot's atomic operations: nil, or a newer
//     mapping whose tokens carry a later generation, which does not match the old token. It
//     fails.
//   - A newer mapping's token differs from every earlier token of the slot because the
//     generation is bumped under Registry.mu before the mapping is built, and mutations of
//     gen/salt/mul happen only under that mutex.
//
// Invalidate (for SendAndInvalidate) is a CompareAndSwap on the engine goroutine without the
// mutex: it only ever moves a slot from a mapping to nil, which every control operation
// tolerates (they re-check under the mutex or use CompareAndSwap themselves).
//
// Reuse: a mapping that a control operation removes is kept as the slot's spare and filled
// again by the slot's next mapping (Bind after InvalidateMW, FastRegister after
// InvalidateMR), so those verbs allocate nothing. Every lock-free reader (Resolve, Acquire,
// AcquireLocal, Invalidate) counts itself in the slot's readers from before its Load until
// after its last read of the mapping, and the spare is reused only when that count is 0.
// A removed mapping is unpublished first, so a reader arriving after the check can only
// load nil or a newer mapping; readers that loaded the spare before have all left. The same
// argument rules out ABA for the CompareAndSwaps: a pointer a reader compares against is
// not reused while it is inside its section. A Span keeps a fast-register mapping's page
// runs, which are reused only while the region has no holds.

// FastRegisterPageSize is the PAGE_SIZE of fast registration: every page given to
// FastRegister is exactly this many bytes.
const FastRegisterPageSize = 4096

const (
	frPageShift = 12
	// maxRegistryEntries bounds maxEntries so that a token keeps at least 11 tag bits.
	maxRegistryEntries = 1 << 20
	// maxFastRegisterPages bounds NewFastRegisterMR's page count (1 GiB of pages).
	maxFastRegisterPages = 1 << 18
)

// Access is a set of remote rights checked by Resolve. The bits have the meaning and the
// values of transport.Access (memreg does not import transport; package ndk adapts the
// Registry to transport.MemoryResolver): remote read (RDMA Read by the peer) and remote
// write (RDMA Write).
type Access uint8

const (
	// AccessRemoteRead lets the peer read the memory (RDMA Read).
	AccessRemoteRead Access = 1 << iota
	// AccessRemoteWrite lets the peer write the memory (RDMA Write).
	AccessRemoteWrite
)

// MRFlags are the NDK_MR_FLAG_* values of NDKPI NdkRegisterMr.
type MRFlags uint32

const (
	// MRAllowLocalRead is NDK_MR_FLAG_ALLOW_LOCAL_READ (always granted; the value is 0).
	MRAllowLocalRead MRFlags = 0x0
	// MRAllowLocalWrite is NDK_MR_FLAG_ALLOW_LOCAL_WRITE.
	MRAllowLocalWrite MRFlags = 0x1
	// MRAllowRemoteRead is NDK_MR_FLAG_ALLOW_REMOTE_READ.
	MRAllowRemoteRead MRFlags = 0x2
	// MRAllowRemoteWrite is NDK_MR_FLAG_ALLOW_REMOTE_WRITE; it includes the local write bit.
	MRAllowRemoteWrite MRFlags = 0x5
	// MRRDMAReadSink is NDK_MR_FLAG_RDMA_READ_SINK. It is accepted and has no further effect:
	// every locally writable region may be an RDMA Read sink here.
	MRRDMAReadSink MRFlags = 0x8

	mrFlagsValid = MRAllowLocalWrite | MRAllowRemoteRead | MRAllowRemoteWrite | MRRDMAReadSink
)

// OpFlags are the NDK_OP_FLAG_* values of work requests (ndkpi.h) that Bind and
// FastRegister accept.
type OpFlags uint32

const (
	// OpSilentSuccess is NDK_OP_FLAG_SILENT_SUCCESS (accepted; completion policy is not the
	// registry's business).
	OpSilentSuccess OpFlags = 0x1
	// OpReadFence is NDK_OP_FLAG_READ_FENCE (accepted, ignored here).
	OpReadFence OpFlags = 0x2
	// OpAllowRemoteRead is NDK_OP_FLAG_ALLOW_REMOTE_READ.
	OpAllowRemoteRead OpFlags = 0x8
	// OpAllowLocalWrite is NDK_OP_FLAG_ALLOW_LOCAL_WRITE (FastRegister only).
	OpAllowLocalWrite OpFlags = 0x10
	// OpAllowRemoteWrite is NDK_OP_FLAG_ALLOW_REMOTE_WRITE; it includes the local write bit.
	OpAllowRemoteWrite OpFlags = 0x30
	// OpRDMAReadSink is NDK_OP_FLAG_RDMA_READ_SINK (FastRegister only; accepted).
	OpRDMAReadSink OpFlags = 0x80
	// OpDefer is NDK_OP_FLAG_DEFER (accepted, ignored here).
	OpDefer OpFlags = 0x200

	opRemoteWriteOnly = OpAllowRemoteWrite &^ OpAllowLocalWrite
	bindFlagsValid    = OpSilentSuccess | OpReadFence | OpAllowRemoteRead | OpAllowRemoteWrite | OpDefer
	frFlagsValid      = bindFlagsValid | OpAllowLocalWrite | OpRDMAReadSink
)

// Errors of Resolve and Invalidate. Each refuses a remote access; the NDK status of the
// failing initiator request is STATUS_ACCESS_VIOLATION (0xC0000005) for all of them
// (as NetworkDirect providers report it), and the connection is torn down.
var (
	// ErrBadToken: the token's index names no slot of the registry (or is 0).
	ErrBadToken = errors.New("memreg: bad token")
	// ErrStale: the token names a slot but not its current mapping: invalidated,
	// deregistered, not yet bound, or guessed.
	ErrStale = errors.New("memreg: stale token")
	// ErrWrongPD: the token is live but belongs to another protection domain.
	ErrWrongPD = errors.New("memreg: token of another protection domain")
	// ErrRights: the mapping does not grant the requested access (or the token is a local
	// token, which never grants remote access).
	ErrRights = errors.New("memreg: access not granted")
	// ErrBounds: [addr, addr+length) is not inside the mapping.
	ErrBounds = errors.New("memreg: range outside the mapping")
	// ErrNotContiguous: the range is inside a fast-registered region but crosses a boundary
	// between pages that are not contiguous in memory, so it cannot be one slice. A later
	// step returns an iovec instead.
	ErrNotContiguous = errors.New("memreg: range spans non-contiguous pages")
)

// Errors of the control operations, with the NDK status each maps to.
var (
	// ErrAccessViolation: Bind with remote write on an MR without local write, FastRegister
	// with remote access on an MR not initialised for it, or a Bind range outside the MR.
	// STATUS_ACCESS_VIOLATION (0xC0000005).
	ErrAccessViolation = errors.New("memreg: access violation")
	// ErrInvalidParameter: a malformed argument. STATUS_INVALID_PARAMETER (0xC000000D).
	ErrInvalidParameter = errors.New("memreg: invalid parameter")
	// ErrBusy: a window or fast-register MR is already bound, or an MR still has windows
	// bound. NDSPI ND_DEVICE_BUSY (0x80000011); for Bind/FastRegister
	// STATUS_INVALID_DEVICE_REQUEST (0xC0000010).
	ErrBusy = errors.New("memreg: busy")
	// ErrNotBound: invalidation of an unbound window or unregistered fast-register MR.
	// STATUS_INVALID_DEVICE_REQUEST (0xC0000010).
	ErrNotBound = errors.New("memreg: not bound")
	// ErrWrongKind: the operation does not apply to this kind of object, e.g. InvalidateMR
	// of a normally registered MR (use DeregisterMR). STATUS_INVALID_DEVICE_REQUEST.
	ErrWrongKind = errors.New("memreg: wrong kind of object")
	// ErrClosed: the MR was deregistered or the MW closed. STATUS_INVALID_DEVICE_REQUEST.
	ErrClosed = errors.New("memreg: object closed")
	// ErrFull: the registry has no free slot. STATUS_INSUFFICIENT_RESOURCES (0xC000009A).
	ErrFull = errors.New("memreg: registry full")
	// ErrPin: memory outside the UMEM could not be pinned (mlock refused, usually
	// RLIMIT_MEMLOCK). STATUS_INSUFFICIENT_RESOURCES (0xC000009A).
	ErrPin = errors.New("memreg: cannot pin memory")
)

// PD is a protection domain handle. A token resolves only for the PD its object was created
// in. The zero PD is never handed out.
type PD uint32

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

// slot is one table entry. cur is read lock-free; the rest only under Registry.mu.
type slot struct {
	cur       atomic.Pointer[mapping]
	readers   atomic.Int32 // lock-free readers of cur between their Load and their last field read
	spare     *mapping     // the last mapping a control operation retired; reused when no reader is left
	gen       uint32
	salt, mul uint32
	seeded    bool
	fresh     bool // tokens were made for the current owner and not used by a mapping yet
	local     uint32
	remote    uint32
}

// Registry holds the protection domains, regions, windows and tokens of one adapter. It is
// safe for concurrent use: Resolve and Invalidate are lock-free and allocation-free; the
// other methods take a mutex.
type Registry struct {
	slots   []slot
	idxBits uint
	idxMask uint32
	tagMask uint32

	nextPD atomic.Uint32

	mu   sync.Mutex
	free []uint32 // freed slot indices, reused first in, first out
	next uint32   // slots[next:] were never used
	umem *UMEM    // the adapter's UMEM (AttachUMEM), or nil
	pins pinTable // mlock counts of pages outside the UMEM
}

// NewRegistry returns a registry with room for maxEntries live MRs and MWs together
// (1 <= maxEntries <= 1<<20; out-of-range values are clamped). The fewer entries, the more
// tag bits each token has.
func NewRegistry(maxEntries int) *Registry {
	maxEntries = min(max(maxEntries, 1), maxRegistryEntries)
	ib := uint(bits.Len32(uint32(maxEntries)))
	return &Registry{
		slots:   make([]slot, maxEntries),
		idxBits: ib,
		idxMask: 1<<ib - 1,
		tagMask: 1<<(32-ib) - 1,
	}
}

// NewPD creates a protection domain.
func (r *Registry) NewPD() PD { return PD(r.nextPD.Add(1)) }

func (r *Registry) validPD(pd PD) bool { return pd != 0 && uint32(pd) <= r.nextPD.Load() }

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
// section: readers is 0 and it is no longer published, so no new reader finds it), else a
// new one. With it come the retired page runs of a fast-register mapping when no Span can
// still reference them (its region has no holds). This makes Bind, FastRegister and their
// invalidation allocation-free in steady state. r.mu must be held.
func newMapping(s *slot) (*mapping, [][]byte) {
	m := s.spare
	if m == nil || s.readers.Load() != 0 {
		return new(mapping), nil
	}
	s.spare = nil
	var runs [][]byte
	if m.runs != nil && m.owner != nil && m.owner.refs.Load() == 0 {
		runs = m.runs[:0]
	}
	return m, runs
}

// find checks a remote access and returns the slot and live mapping token names and the
// offset of addr in it. The checks and their errors are Resolve's.
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
// (ErrNotContiguous). The slice's capacity equals its length. Resolve holds nothing: use
// Acquire when the bytes are used while a concurrent deregistration could give the memory
// back to the application. Resolve neither locks nor allocates.
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
// caller calls Span.MR.Release. The checks and errors are Resolve's, except that
// non-contiguous pages are no error. On error nothing is held.
//
// A hold does not keep the token valid: invalidation and deregistration still stop every
// later Acquire at once. It delays only the moment the memory is the application's again
// (MR.WaitIdle). An Acquire racing an invalidation either returns the complete old mapping,
// with a hold that a WaitIdle started after the invalidation returned waits for, or fails
// with ErrStale. Acquire neither locks nor allocates.
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
// MR or a local token (ErrWrongKind). It neither locks nor allocates.
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
			return ErrWrongKind
		}
		return ErrStale
	}
	if m.pd != pd {
		return ErrWrongPD
	}
	if m.kind == kindMR {
		return ErrWrongKind
	}
	if !unmap(s, m) {
		return ErrStale // invalidated concurrently
	}
	return nil
}

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

func mrAccess(f MRFlags) Access {
	var a Access
	if f&MRAllowRemoteRead != 0 {
		a |= AccessRemoteRead
	}
	if f&MRAllowRemoteWrite == MRAllowRemoteWrite {
		a |= AccessRemoteWrite
	}
	return a
}

func opAccess(f OpFlags) Access {
	var a Access
	if f&OpAllowRemoteRead != 0 {
		a |= AccessRemoteRead
	}
	if f&OpAllowRemoteWrite == OpAllowRemoteWrite {
		a |= AccessRemoteWrite
	}
	return a
}

// bufVA returns the address of b[0]; b must not be empty.
func bufVA(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

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
	local, remote := r.takeTokens(i)
	mr.local.Store(local)
	mr.remote.Store(remote)
	m, _ := newMapping(&r.slots[i])
	*m = mapping{kind: kindMR, pd: pd, localToken: local, remoteToken: remote,
		access: mrAccess(flags), base: va, length: n, buf: mr.buf, owner: mr, localWrite: flags&MRAllowLocalWrite != 0}
	r.slots[i].cur.Store(m)
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
	return nil
}

// AttachUMEM tells the registry which memory is the adapter's UMEM: regions inside it are
// not pinned again (the UMEM is pinned already) and can be transmitted zero-copy, and
// FastRegister accepts only pages inside it (NDK's adapter pages). Call it once, before
// registering memory. Errors: ErrInvalidParameter for a nil or closed UMEM or a second
// attach.
func (r *Registry) AttachUMEM(u *UMEM) error {
	if u == nil || len(u.mem) == 0 {
		return fmt.Errorf("%w: nil or closed UMEM", ErrInvalidParameter)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.umem != nil {
		return fmt.Errorf("%w: a UMEM is attached already", ErrInvalidParameter)
	}
	r.umem = u
	return nil
}

// inUMEM reports whether [va, va+n) lies inside the attached UMEM.
func (r *Registry) inUMEM(va, n uint64) bool {
	if r.umem == nil || len(r.umem.mem) == 0 {
		return false
	}
	lo := bufVA(r.umem.mem)
	hi := lo + uint64(len(r.umem.mem))
	return va >= lo && va <= hi && n <= hi-va
}

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
	mr.local.Store(r.slots[i].local)
	mr.remote.Store(r.slots[i].remote)
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
	s.readers.Add(1)
	defer s.readers.Add(-1)
	m := s.cur.Load()
	if m == nil || m.localToken != token || m.localToken == 0 {
		return nil, ErrStale
	}
	if m.pd != pd {
		return nil, ErrWrongPD
	}
	if write && !m.localWrite {
		return nil, ErrRights
	}
	va, n := bufVA(buf), uint64(len(buf))
	if !m.containsLocal(va, n) {
		return nil, ErrBounds
	}
	if !hold(s, m) {
		return nil, ErrStale
	}
	return m.owner, nil
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
