package faultlink

import "unsafe"

// This file holds the package's only use of unsafe.

// addrOf returns the address of b's first element (of its backing array when len(b) is 0),
// to tell whether a received segment is a view of the injection buffers. The address is
// only compared, never turned back into a pointer; the buffers stay referenced by the Link
// and Go's heap does not move objects, so the comparison stays valid.
func addrOf(b []byte) uintptr {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}
