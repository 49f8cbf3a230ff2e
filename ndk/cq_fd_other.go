//go:build !linux

package ndk

// FD is supported on Linux only (an eventfd); here it fails with STATUS_NOT_SUPPORTED.
func (cq *CQ) FD() (int, error) {
	return -1, errorf(StatusNotSupported, "CQ file descriptors need Linux (eventfd)")
}

// cqFD is empty without eventfd.
type cqFD struct{}

func (*cqFD) kick()  {}
func (*cqFD) clear() {}
func (*cqFD) close() {}
