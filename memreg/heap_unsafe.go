package memreg

import "unsafe"

// addrOf returns the address of b's backing array (of b[0] when b is not empty). The heap
// compares it with the UMEM's address range; the memory is mmap'd, so the garbage collector
// never moves it, and a foreign Go slice only ever compares as outside.
func addrOf(b []byte) uintptr {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}
