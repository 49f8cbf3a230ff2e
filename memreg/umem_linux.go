package memreg

import (
	"fmt"

	"golang.org/x/sys/unix"
)

const hugePageSize = 2 << 20

// NewUMEM maps, populates and pins (mlock) a UMEM as opts describe. With HugeAuto it tries
// hugetlb pages first, then transparent huge pages; Pages reports which it got. It needs
// RLIMIT_MEMLOCK room for the whole area (root, or CAP_IPC_LOCK).
func NewUMEM(opts UMEMOptions) (*UMEM, error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	size := opts.Frames*opts.FrameSize + (opts.HeapSize+opts.FrameSize-1)/opts.FrameSize*opts.FrameSize
	if size == 0 {
		return nil, fmt.Errorf("umem of zero bytes")
	}
	u := &UMEM{frameSize: opts.FrameSize, frames: opts.Frames}
	var err error
	if opts.HugePages != HugeOff {
		// hugetlb mappings must be a whole number of huge pages; the extra tail is
		// unused heap.
		hsize := (size + hugePageSize - 1) / hugePageSize * hugePageSize
		u.mem, err = unix.Mmap(-1, 0, hsize, unix.PROT_READ|unix.PROT_WRITE,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE|unix.MAP_HUGETLB)
		if err == nil {
			u.pages = PagesHugeTLB
		} else if opts.HugePages == HugeRequire {
			return nil, fmt.Errorf("map %d bytes of hugetlb pages for umem: %w", hsize, err)
		}
	}
	if u.mem == nil {
		u.mem, err = unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return nil, fmt.Errorf("map %d bytes for umem: %w", size, err)
		}
		u.pages = PagesNormal
		if opts.HugePages == HugeAuto && size >= hugePageSize {
			if unix.Madvise(u.mem, unix.MADV_HUGEPAGE) == nil {
				u.pages = PagesTransparentHuge
			}
		}
		// Populate after the advice so huge pages can be used for the first touch.
		if err := unix.Madvise(u.mem, unix.MADV_POPULATE_WRITE); err != nil {
			for i := 0; i < len(u.mem); i += 4096 {
				u.mem[i] = 0
			}
		}
	}
	if err := unix.Mlock(u.mem); err != nil {
		_ = unix.Munmap(u.mem)
		return nil, fmt.Errorf("pin %d bytes of umem (mlock; needs CAP_IPC_LOCK or RLIMIT_MEMLOCK room): %w", len(u.mem), err)
	}
	return u, nil
}

// Close unpins and unmaps the UMEM. Every socket registered with it must be closed first.
// It is idempotent.
func (u *UMEM) Close() error {
	if u.mem == nil {
		return nil
	}
	mem := u.mem
	u.mem = nil
	if err := unix.Munmap(mem); err != nil {
		return fmt.Errorf("unmap umem: %w", err)
	}
	return nil
}
