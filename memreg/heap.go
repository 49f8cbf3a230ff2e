package memreg

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
)

// Heap allocation parameters.
const (
	// HeapGranule is the heap's allocation granularity: sizes are rounded up to it, and every
	// buffer starts on a HeapGranule-aligned address (one cache line).
	HeapGranule = 64
	// HeapMaxAlign is the largest alignment Alloc accepts (one 2 MiB huge page).
	HeapMaxAlign = 1 << 21
)

var (
	// ErrHeapExhausted means the heap has no free run large enough for the request. Alloc
	// wraps it with the requested size and alignment and the free space left.
	ErrHeapExhausted = errors.New("memreg: heap exhausted")
	// ErrInvalid means bad arguments: a size or alignment Alloc cannot honour, or a slice
	// given to Free that is not exactly a live buffer of the heap.
	ErrInvalid = errors.New("memreg: invalid argument")
)

// Heap hands out buffers from a UMEM's heap region (the bytes after the frame area), for
// application data that should be registrable and sent without copying. It is safe for
// concurrent use; a mutex guards it, since allocation is a control-path operation and not a
// per-packet one.
//
// Design: an address-ordered free list (a slice of free runs sorted by offset) with
// address-ordered first fit, and immediate coalescing of a freed run with its free
// neighbours. Address-ordered first fit keeps long-lived buffers packed at the low end and
// leaves the high end as one large run; with coalescing the free list never holds two
// adjacent runs, so it has at most one more run than there are live buffers, and freeing
// everything always yields the whole heap again as one run: fragmentation is bounded by the
// live allocation pattern and cannot accumulate. Alloc and Free cost O(number of free runs),
// which is fine at control-path rates. All bookkeeping lives outside the UMEM (the free list
// and a map from offset to size of live buffers), so the heap's memory holds only
// application data and a stray write cannot corrupt the allocator.
//
// A Heap must not be used after its UMEM is closed.
type Heap struct {
	u    *UMEM
	mem  []byte  // the heap region, u.Heap()
	base uintptr // address of mem[0]
	umem uint64  // UMEM offset of mem[0]

	mu    sync.Mutex
	free  []heapSpan  // free runs, sorted by off, never adjacent nor overlapping
	live  map[int]int // heap-relative offset of a live buffer -> its requested length
	inUse int         // bytes of live buffers, each rounded up to HeapGranule
}

// heapSpan is a run of heap bytes [off, off+size), offsets relative to the heap start.
type heapSpan struct{ off, size int }

// HeapStats is a snapshot of a heap's usage, in bytes unless said otherwise.
type HeapStats struct {
	// Size is the whole heap region.
	Size int
	// InUse is the bytes of live buffers, each rounded up to HeapGranule.
	InUse int
	// Free is Size - InUse: every byte not in a live buffer, alignment gaps included.
	Free int
	// LargestFree is the longest run of free bytes; an Alloc with alignment HeapGranule
	// of at most this many bytes succeeds.
	LargestFree int
	// Allocs is the number of live buffers.
	Allocs int
}

// NewHeap returns the allocator of the UMEM's heap region (the bytes past the frame area,
// UMEMOptions.HeapSize): the memory applications allocate registrable buffers from, so
// that their regions can be transmitted zero-copy. A UMEM has at most one heap. Errors wrap
// ErrInvalid: a nil or closed UMEM, one without a heap region, a second heap.
func (u *UMEM) NewHeap() (*Heap, error) {
	if u == nil || u.mem == nil {
		return nil, fmt.Errorf("heap of a nil or closed umem: %w", ErrInvalid)
	}
	if uint64(len(u.mem)) <= u.FrameAreaEnd() {
		return nil, fmt.Errorf("heap: umem has no heap region (size %d, frame area %d bytes; set UMEMOptions.HeapSize): %w",
			len(u.mem), u.FrameAreaEnd(), ErrInvalid)
	}
	mem := u.Heap()
	base := addrOf(mem)
	if base%HeapGranule != 0 {
		// Cannot happen: mmap returns page-aligned memory and the frame area is whole frames.
		return nil, fmt.Errorf("heap region at %#x is not %d-byte aligned: %w", base, HeapGranule, ErrInvalid)
	}
	size := len(mem) &^ (HeapGranule - 1)
	if !u.heapTaken.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("umem already has a heap: %w", ErrInvalid)
	}
	return &Heap{
		u:    u,
		mem:  mem[:size:size],
		base: base,
		umem: u.FrameAreaEnd(),
		free: []heapSpan{{0, size}},
		live: make(map[int]int),
	}, nil
}

// Alloc returns a buffer of exactly size bytes (len and cap) inside the UMEM's heap, whose
// address is a multiple of align. align must be a power of two no larger than HeapMaxAlign
// (0 means HeapGranule; alignments below HeapGranule get HeapGranule anyway). The buffer's
// contents are whatever its previous owner left. Alloc returns an error wrapping ErrInvalid
// for a size below 1 or a bad alignment, and one wrapping ErrHeapExhausted when no free run
// can hold the buffer.
func (h *Heap) Alloc(size, align int) ([]byte, error) {
	if size <= 0 {
		return nil, fmt.Errorf("heap alloc of %d bytes: size must be positive: %w", size, ErrInvalid)
	}
	if align == 0 {
		align = HeapGranule
	}
	if align < 0 || align > HeapMaxAlign || align&(align-1) != 0 {
		return nil, fmt.Errorf("heap alloc alignment %d: must be a power of two up to %d: %w", align, HeapMaxAlign, ErrInvalid)
	}
	align = max(align, HeapGranule)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.u.mem == nil {
		return nil, fmt.Errorf("heap alloc of %d bytes: umem is closed: %w", size, ErrInvalid)
	}
	if size <= len(h.mem) {
		need := roundGranule(size)
		for i, s := range h.free {
			// Offsets are heap-relative; alignment is of the address.
			start := int(alignUp(h.base+uintptr(s.off), uintptr(align)) - h.base)
			end := s.off + s.size
			if start > end || need > end-start {
				continue
			}
			h.take(i, start, need)
			h.live[start] = size
			h.inUse += need
			return h.mem[start : start+size : start+size], nil
		}
	}
	return nil, fmt.Errorf("heap alloc of %d bytes aligned to %d: %d of %d bytes free, largest free run %d: %w",
		size, align, len(h.mem)-h.inUse, len(h.mem), h.largestFree(), ErrHeapExhausted)
}

// take removes [start, start+n) from free run i, which contains it, leaving the parts before
// and after it (if any) as free runs.
func (h *Heap) take(i, start, n int) {
	s := h.free[i]
	var rest [2]heapSpan
	k := 0
	if start > s.off {
		rest[k] = heapSpan{s.off, start - s.off}
		k++
	}
	if end := start + n; end < s.off+s.size {
		rest[k] = heapSpan{end, s.off + s.size - end}
		k++
	}
	h.free = slices.Replace(h.free, i, i+1, rest[:k]...)
}

// Free returns a buffer to the heap. b must be exactly a live buffer returned by Alloc: the
// same first byte and the same length. For anything else (an empty or foreign slice, a
// sub-slice, a buffer already freed) it returns an error wrapping ErrInvalid and changes
// nothing. The freed bytes merge with free neighbours into one run.
func (h *Heap) Free(b []byte) error {
	if len(b) == 0 {
		return fmt.Errorf("heap free of an empty slice: %w", ErrInvalid)
	}
	off, ok := h.relOffset(b)
	if !ok {
		return fmt.Errorf("heap free of a %d-byte slice outside the heap: %w", len(b), ErrInvalid)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	size, ok := h.live[off]
	if !ok {
		return fmt.Errorf("heap free at offset %d: not a live buffer (double free or not from Alloc): %w", off, ErrInvalid)
	}
	if len(b) != size {
		return fmt.Errorf("heap free at offset %d of %d bytes: the buffer is %d bytes: %w", off, len(b), size, ErrInvalid)
	}
	n := roundGranule(size)
	delete(h.live, off)
	h.inUse -= n
	h.insertFree(heapSpan{off, n})
	return nil
}

// insertFree adds run s, which overlaps no free run, to the free list and merges it with the
// runs right before and after it when they touch it.
func (h *Heap) insertFree(s heapSpan) {
	i := sort.Search(len(h.free), func(j int) bool { return h.free[j].off > s.off })
	mergeLeft := i > 0 && h.free[i-1].off+h.free[i-1].size == s.off
	mergeRight := i < len(h.free) && s.off+s.size == h.free[i].off
	switch {
	case mergeLeft && mergeRight:
		h.free[i-1].size += s.size + h.free[i].size
		h.free = slices.Delete(h.free, i, i+1)
	case mergeLeft:
		h.free[i-1].size += s.size
	case mergeRight:
		h.free[i].off = s.off
		h.free[i].size += s.size
	default:
		h.free = slices.Insert(h.free, i, s)
	}
}

// Stats returns a snapshot of the heap's usage.
func (h *Heap) Stats() HeapStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return HeapStats{
		Size:        len(h.mem),
		InUse:       h.inUse,
		Free:        len(h.mem) - h.inUse,
		LargestFree: h.largestFree(),
		Allocs:      len(h.live),
	}
}

func (h *Heap) largestFree() int {
	n := 0
	for _, s := range h.free {
		n = max(n, s.size)
	}
	return n
}

// Contains reports whether every byte of b lies inside the heap region (live buffer or not).
// It is false for an empty b.
func (h *Heap) Contains(b []byte) bool {
	_, ok := h.relOffset(b)
	return ok
}

// Offset returns the UMEM offset of b's first byte (the address an AF_XDP descriptor carries),
// and false when b is empty or does not lie wholly inside the heap region.
func (h *Heap) Offset(b []byte) (uint64, bool) {
	off, ok := h.relOffset(b)
	if !ok {
		return 0, false
	}
	return h.umem + uint64(off), true
}

// relOffset returns the heap-relative offset of b, which must be non-empty and lie wholly in
// the heap region.
func (h *Heap) relOffset(b []byte) (int, bool) {
	if len(b) == 0 {
		return 0, false
	}
	a := addrOf(b)
	if a < h.base {
		return 0, false
	}
	off := a - h.base
	if off >= uintptr(len(h.mem)) || uintptr(len(b)) > uintptr(len(h.mem))-off {
		return 0, false
	}
	return int(off), true
}

func roundGranule(n int) int { return (n + HeapGranule - 1) &^ (HeapGranule - 1) }

func alignUp(a, align uintptr) uintptr { return (a + align - 1) &^ (align - 1) }
