package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/xdpndk/xdpndk/ndk"
)

// region is a buffer registered in a PD: the only memory verbs may touch.
type region struct {
	a        *ndk.Adapter
	buf      []byte
	mr       *ndk.MR
	fromHeap bool // buf came from Adapter.Alloc and goes back with Adapter.Free
}

// newRegion allocates size bytes and registers them with flags. The memory comes from the
// adapter's UMEM heap (Adapter.Alloc: pinned already, and transmitted without a copy
// where the NIC can); an adapter without one (ndk.OpenLink on a link that has no UMEM, as
// in this program's in-process tests) gives STATUS_NOT_SUPPORTED, and Go memory is used
// instead, which RegisterMR pins.
func newRegion(a *ndk.Adapter, pd *ndk.PD, size int, flags ndk.MRFlags) (*region, error) {
	r := &region{a: a}
	buf, err := a.Alloc(size, 4096)
	switch {
	case err == nil:
		r.buf, r.fromHeap = buf, true
	case errors.Is(err, ndk.StatusNotSupported):
		r.buf = make([]byte, size)
	default:
		return nil, fmt.Errorf("allocate %d bytes: %w", size, err)
	}
	if r.mr, err = pd.RegisterMR(r.buf, flags); err != nil {
		r.free()
		return nil, fmt.Errorf("register %d bytes: %w", size, err)
	}
	return r, nil
}

// sge is the scatter/gather entry for buf[off:off+n].
func (r *region) sge(off, n int) ndk.SGE { return r.mr.SGE(r.buf[off : off+n]) }

// close deregisters the region and frees its memory. Deregister returns once no access
// in flight uses the memory (close the QPs that used it first, and it returns at once);
// if ctx ends before that, the memory is left alone rather than handed back while in use.
func (r *region) close(ctx context.Context) error {
	if r.mr != nil {
		if err := r.mr.Deregister(ctx); err != nil {
			return fmt.Errorf("deregister: %w", err)
		}
		r.mr = nil
	}
	r.free()
	return nil
}

func (r *region) free() {
	if r.fromHeap {
		_ = r.a.Free(r.buf)
	}
	r.buf = nil
}
