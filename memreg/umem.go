package memreg

import (
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"
)

// PageKind says which pages back a UMEM.
type PageKind int

const (
	// PagesNormal is ordinary 4 KiB pages.
	PagesNormal PageKind = iota
	// PagesTransparentHuge is ordinary pages with MADV_HUGEPAGE advice: the kernel may back
	// them with 2 MiB pages (transparent huge pages) but does not promise to.
	PagesTransparentHuge
	// PagesHugeTLB is explicit 2 MiB huge pages from the hugetlb pool (MAP_HUGETLB).
	PagesHugeTLB
)

// String names the page kind as reported in logs and benchmark headers.
func (k PageKind) String() string {
	switch k {
	case PagesNormal:
		return "normal"
	case PagesTransparentHuge:
		return "thp"
	case PagesHugeTLB:
		return "hugetlb"
	}
	return fmt.Sprintf("PageKind(%d)", int(k))
}

// HugePages selects whether a UMEM tries huge pages.
type HugePages int

const (
	// HugeAuto tries hugetlb pages, then transparent huge pages, then normal pages.
	HugeAuto HugePages = iota
	// HugeOff uses normal pages only.
	HugeOff
	// HugeRequire fails unless hugetlb pages can be had.
	HugeRequire
)

// UMEMOptions configures NewUMEM.
type UMEMOptions struct {
	// FrameSize is the size in bytes of one packet frame: 2048 or 4096 (the AF_XDP chunk
	// size). Default 4096.
	FrameSize int
	// Frames is the number of packet frames (RX fill and TX headers for every socket that
	// shares the UMEM). Default 8192.
	Frames int
	// HeapSize is the number of bytes after the frames left for registrable application
	// buffers (the heap that package memreg hands out). Rounded up to whole frames. Default 0.
	HeapSize int
	// HugePages selects the page kind. Default HugeAuto.
	HugePages HugePages
}

// DefaultUMEMOptions returns the defaults described on UMEMOptions.
func DefaultUMEMOptions() UMEMOptions {
	return UMEMOptions{FrameSize: 4096, Frames: 8192, HugePages: HugeAuto}
}

func (o *UMEMOptions) normalize() error {
	if o.FrameSize == 0 {
		o.FrameSize = 4096
	}
	if o.Frames == 0 {
		o.Frames = 8192
	}
	if o.FrameSize != 2048 && o.FrameSize != 4096 {
		return fmt.Errorf("umem frame size %d: must be 2048 or 4096", o.FrameSize)
	}
	if o.Frames < 0 || o.HeapSize < 0 {
		return errors.New("umem frames and heap size must not be negative")
	}
	const maxBytes = 1 << 40
	if int64(o.Frames)*int64(o.FrameSize)+int64(o.HeapSize) > maxBytes {
		return fmt.Errorf("umem of %d frames and %d heap bytes exceeds %d bytes", o.Frames, o.HeapSize, int64(maxBytes))
	}
	if o.HugePages < HugeAuto || o.HugePages > HugeRequire {
		return fmt.Errorf("umem huge page mode %d unknown", o.HugePages)
	}
	return nil
}

// UMEM is one pinned memory area shared by every AF_XDP socket of an adapter. It starts with
// Frames packet frames of FrameSize bytes (the frame area, handed out through FramePools), and
// continues with the heap for registrable buffers.
//
// Offsets into a UMEM ("addresses" in AF_XDP terms) are byte offsets from its first byte.
// The UMEM is safe for concurrent use; the memory itself is owned by whoever holds a frame or
// a heap buffer.
type UMEM struct {
	mem       []byte
	frameSize int
	frames    int
	pages     PageKind
	carved    carveState
	heapTaken atomic.Bool // NewHeap was called: one Heap per UMEM
}

// Bytes returns the whole UMEM. Callers must only touch memory they own.
func (u *UMEM) Bytes() []byte { return u.mem }

// Size is the UMEM's length in bytes.
func (u *UMEM) Size() int { return len(u.mem) }

// FrameSize is the size in bytes of one packet frame (the AF_XDP chunk size).
func (u *UMEM) FrameSize() int { return u.frameSize }

// Frames is the number of packet frames in the frame area.
func (u *UMEM) Frames() int { return u.frames }

// FrameAreaEnd is the offset of the first byte after the frame area, where the heap starts.
func (u *UMEM) FrameAreaEnd() uint64 { return uint64(u.frames) * uint64(u.frameSize) }

// Heap returns the part of the UMEM after the frame area.
func (u *UMEM) Heap() []byte { return u.mem[u.FrameAreaEnd():] }

// Pages reports which kind of pages back the UMEM.
func (u *UMEM) Pages() PageKind { return u.pages }

// InFrameArea reports whether offset addr lies in the frame area.
func (u *UMEM) InFrameArea(addr uint64) bool { return addr < u.FrameAreaEnd() }

// Frame returns the frame that contains offset addr, which must lie in the frame area.
func (u *UMEM) Frame(addr uint64) []byte {
	start := addr &^ uint64(u.frameSize-1)
	return u.mem[start : start+uint64(u.frameSize) : start+uint64(u.frameSize)]
}

// NewFramePool carves n frames out of the frame area for one owner (one AF_XDP socket) and
// returns them as a pool. Frames are never shared between pools, so each engine uses its pool
// without locks. It fails when fewer than n frames are left.
func (u *UMEM) NewFramePool(n int) (*FramePool, error) {
	first, err := u.carved.take(n, u.frames)
	if err != nil {
		return nil, err
	}
	p := &FramePool{free: make([]uint64, n), isFree: make([]uint64, (n+63)/64), frameSize: uint64(u.frameSize)}
	p.shift = uint(bits.TrailingZeros64(p.frameSize))
	for i := range n {
		// Hand out low addresses last so a fresh pool fills rings in address order.
		p.free[n-1-i] = uint64(first+i) * uint64(u.frameSize)
		p.isFree[i/64] |= 1 << (i % 64)
	}
	p.lo = uint64(first) * uint64(u.frameSize)
	p.hi = uint64(first+n) * uint64(u.frameSize)
	return p, nil
}

// FramePool is a stack of free packet frames (UMEM offsets of their first byte) owned by one
// engine. It knows which of its frames are free, so a frame returned again before it was
// taken again (a completion address reported twice, say) is refused and counted instead of
// being handed out to two users. It is not safe for concurrent use and never allocates
// after creation.
type FramePool struct {
	free      []uint64
	isFree    []uint64 // a bit per frame of [lo, hi): set while the frame is in free
	frameSize uint64
	shift     uint   // log2 of frameSize
	lo, hi    uint64 // the pool's frames are exactly [lo, hi)
	refused   uint64 // Puts refused: foreign offsets and frames already free
}

// Get takes a free frame. It returns false when none is left.
func (p *FramePool) Get() (uint64, bool) {
	n := len(p.free)
	if n == 0 {
		return 0, false
	}
	a := p.free[n-1]
	p.free = p.free[:n-1]
	i := (a - p.lo) >> p.shift
	p.isFree[i/64] &^= 1 << (i % 64)
	return a, true
}

// Put returns the frame containing offset addr. It reports false, counts a refusal and
// changes nothing for an offset that is not one of the pool's frames or a frame that is
// already free (a double free).
func (p *FramePool) Put(addr uint64) bool {
	if addr < p.lo || addr >= p.hi {
		p.refused++
		return false
	}
	i := (addr - p.lo) >> p.shift
	w, bit := i/64, uint64(1)<<(i%64)
	if p.isFree[w]&bit != 0 { // already free (a full pool has every bit set)
		p.refused++
		return false
	}
	p.isFree[w] |= bit
	p.free = append(p.free, addr&^(p.frameSize-1))
	return true
}

// Refused is how many Puts the pool has refused: offsets outside it and frames returned
// while already free. Anything but 0 means some owner handed a frame back twice or a wrong
// address.
func (p *FramePool) Refused() uint64 { return p.refused }

// Owns reports whether offset addr lies in one of the pool's frames.
func (p *FramePool) Owns(addr uint64) bool { return addr >= p.lo && addr < p.hi }

// Len is the number of free frames.
func (p *FramePool) Len() int { return len(p.free) }

// Cap is the number of frames the pool was created with.
func (p *FramePool) Cap() int { return cap(p.free) }
