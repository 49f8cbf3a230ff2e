package wire

import "unsafe"

// within reports whether the non-empty view v lies inside s (shares its memory).
func within(v, s []byte) bool {
	if len(v) == 0 || len(s) == 0 {
		return false
	}
	vp := uintptr(unsafe.Pointer(unsafe.SliceData(v)))
	sp := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	return vp >= sp && vp+uintptr(len(v)) <= sp+uintptr(len(s))
}
