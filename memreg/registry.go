package memreg

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
)

// The registry of protection domains, memory regions (MRs), memory windows (MWs) and their
// tokens is the security boundary between remote peers and local memory. This file holds the
// Registry itself (PDs, the attached UMEM) and the design below; the rest is by concept:
// rights.go (Access, MRFlags, OpFlags), errors.go (refusals and control errors), slot.go
// (the lock-free table: slots, tokens, mappings and their reuse), access.go (the remote and
// local access checks: Resolve, Acquire, Invalidate, AcquireLocal), mr.go (regions:
// RegisterMR, DeregisterMR, holds), fastreg.go (fast-register MRs) and window.go (windows).
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
// InvalidateMR), so those verbs allocate nothing. Every lock-free reader of the remote path
// (Resolve, Acquire, Invalidate) counts itself in the slot's readers from before its Load
// until after its last read of the mapping, and the spare is reused only when that count is
// 0. AcquireLocal (a local token names a region's slot only) takes its hold on the slot's
// region (slot.mr) before its Load instead, and a region's spare is reused only when the
// region has no holds either: one locked operation per SGE instead of three.
// A removed mapping is unpublished first, so a reader arriving after the check can only
// load nil or a newer mapping; readers that loaded the spare before have all left. The same
// argument rules out ABA for the CompareAndSwaps: a pointer a reader compares against is
// not reused while it is inside its section. A Span keeps a fast-register mapping's page
// runs, which are reused only while the region has no holds.

// maxRegistryEntries bounds maxEntries so that a token keeps at least 11 tag bits.
const maxRegistryEntries = 1 << 20

// PD is a protection domain handle. A token resolves only for the PD its object was created
// in. The zero PD is never handed out.
type PD uint32

// Registry holds the protection domains, regions, windows and tokens of one adapter. It is
// safe for concurrent use: Resolve and Invalidate are lock-free and allocation-free; the
// other methods take a mutex.
type Registry struct {
	slots   []slot
	idxBits uint
	idxMask uint32
	tagMask uint32

	nextPD atomic.Uint32

	// live objects and pinned pages, written under mu, read lock-free by Stats
	nMRs, nFRMRs, nMWs, nPinned atomic.Int64

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

// RegistryStats is a snapshot of what a registry holds.
type RegistryStats struct {
	// Regions is the live normally registered MRs (RegisterMR).
	Regions int
	// FastRegisterRegions is the live fast-register MRs (NewFastRegisterMR), registered
	// or not.
	FastRegisterRegions int
	// Windows is the live memory windows (CreateMW), bound or not.
	Windows int
	// Capacity is the most MRs and MWs that may be live together (NewRegistry's
	// maxEntries, clamped).
	Capacity int
	// PinnedBytes is the memory outside the UMEM that regions pin with mlock (whole pages).
	PinnedBytes uint64
}

// Stats returns what the registry holds. It takes no lock (atomic loads): safe from any
// goroutine at any time, the counts of one snapshot consistent with each other only when
// no control operation runs meanwhile.
func (r *Registry) Stats() RegistryStats {
	return RegistryStats{Regions: int(r.nMRs.Load()), FastRegisterRegions: int(r.nFRMRs.Load()),
		Windows: int(r.nMWs.Load()), Capacity: len(r.slots), PinnedBytes: uint64(r.nPinned.Load()) * pageSize}
}

// counted updates the live count of mr's kind by d (±1) and the pinned pages. r.mu must
// be held.
func (r *Registry) counted(fast bool, d int64) {
	if fast {
		r.nFRMRs.Add(d)
	} else {
		r.nMRs.Add(d)
	}
	r.nPinned.Store(int64(r.pins.pinned()))
}

// NewPD creates a protection domain.
func (r *Registry) NewPD() PD { return PD(r.nextPD.Add(1)) }

func (r *Registry) validPD(pd PD) bool { return pd != 0 && uint32(pd) <= r.nextPD.Load() }

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

// bufVA returns the address of b[0]; b must not be empty.
func bufVA(b []byte) uint64 { return uint64(addrOf(b)) }

// VA returns the virtual address a region names b's first byte by (an MR's VA is the
// address of its first byte in this process), 0 for an empty b.
func VA(b []byte) uint64 {
	if len(b) == 0 {
		return 0
	}
	return bufVA(b)
}

// Close unpins every page the registry's regions still pin (memory registered outside the
// UMEM and never deregistered), for an adapter that closes while regions are registered.
// Call it once nothing will access the regions any more (the engine has stopped). The
// registry's objects stay as they are; deregistering them afterwards unpins nothing twice.
func (r *Registry) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pins.releaseAll()
	r.nPinned.Store(0)
}
