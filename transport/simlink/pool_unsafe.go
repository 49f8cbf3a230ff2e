package simlink

import "unsafe"

// This file holds the package's only use of unsafe.

// addrOf returns the address of b's first element (of its backing array when len(b) is 0),
// for finding which pooled buffer a received segment is a view of. The address is only
// compared, never turned back into a pointer; the pool's slabs stay referenced, and Go's
// heap does not move objects, so the comparison stays valid.
func addrOf(b []byte) uintptr {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}
