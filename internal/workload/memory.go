package workload

import (
	"context"
	"errors"

	"github.com/xdpndk/xdpndk/ndk"
)

// buffer is memory registered in a PD: from the adapter's pinned UMEM (Adapter.Alloc) or
// from Go's heap.
type buffer struct {
	a    *ndk.Adapter
	b    []byte
	umem bool
	mr   *ndk.MR
}

// newBuffer allocates n bytes (UMEM if umem and the adapter has a heap) and registers them
// with flags.
func newBuffer(a *ndk.Adapter, pd *ndk.PD, n int, umem bool, flags ndk.MRFlags) (*buffer, error) {
	m := &buffer{a: a}
	if umem {
		b, err := a.Alloc(n, 64)
		switch {
		case err == nil:
			m.b, m.umem = b, true
		case ndk.StatusOf(err) == ndk.StatusNotSupported: // no UMEM heap: Go memory
		default:
			return nil, err
		}
	}
	if m.b == nil {
		m.b = make([]byte, n)
	}
	mr, err := pd.RegisterMR(m.b, flags)
	if err != nil {
		m.free()
		return nil, err
	}
	m.mr = mr
	return m, nil
}

// sge returns an SGE for b[off:off+n].
func (m *buffer) sge(off, n int) ndk.SGE { return m.mr.SGE(m.b[off : off+n]) }

// close deregisters and frees the buffer.
func (m *buffer) close(ctx context.Context) error {
	var err error
	if m.mr != nil {
		err = m.mr.Deregister(ctx)
		m.mr = nil
	}
	return errors.Join(err, m.free())
}

func (m *buffer) free() error {
	var err error
	if m.umem && m.b != nil {
		err = m.a.Free(m.b)
	}
	m.b = nil
	return err
}

// useUMEM says whether connection conn's buffers come from the UMEM, for the initiator
// (initiator true) or the target.
func useUMEM(k MemoryKind, conn int, initiator bool) bool {
	switch k {
	case MemoryUMEM:
		return true
	case MemoryGo:
		return false
	}
	return (conn%2 == 0) == initiator
}
