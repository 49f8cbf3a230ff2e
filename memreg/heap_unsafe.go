package memreg

import "unsafe"

// addrOf returns the address of b's backing array (of b[0] when b is not empty): the
// package's only use of unsafe. The heap compares it with the UMEM's address range (the
// memory is mmap'd, so the garbage collector never moves it, and a foreign Go slice only
// ever compares as outside); a region's virtual address is it (bufVA).
func addrOf(b []byte) uintptr {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}
