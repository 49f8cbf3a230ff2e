package xsk

// All of package xsk's use of unsafe lives in this file: turning mmap'd ring memory into typed
// views, passing structs to setsockopt/getsockopt, the transmit kick, and the address of the
// UMEM for its registration.

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// setsockoptUmemReg registers the UMEM with the socket (XDP_UMEM_REG).
func setsockoptUmemReg(fd int, reg *unix.XDPUmemReg) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_UMEM_REG,
		uintptr(unsafe.Pointer(reg)), unsafe.Sizeof(*reg), 0)
	if e != 0 {
		return e
	}
	return nil
}

// getsockoptMmapOffsets reads where the four rings' fields are in their mmap areas.
func getsockoptMmapOffsets(fd int) (unix.XDPMmapOffsets, error) {
	var off unix.XDPMmapOffsets
	l := uint32(unsafe.Sizeof(off))
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS,
		uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return off, e
	}
	if l != uint32(unsafe.Sizeof(off)) {
		return off, fmt.Errorf("xdp mmap offsets: kernel returned %d bytes, want %d (kernel too old?)", l, unsafe.Sizeof(off))
	}
	return off, nil
}

// getsockoptStatistics reads the socket's XDP_STATISTICS.
func getsockoptStatistics(fd int) (unix.XDPStatistics, error) {
	var st unix.XDPStatistics
	l := uint32(unsafe.Sizeof(st))
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_STATISTICS,
		uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return st, e
	}
	return st, nil
}

// mapRing builds the ring view for one mmap'd ring area. entry is the size of one entry.
func mapRing(mem []byte, off unix.XDPRingOffset, size uint32, entry uintptr) (r ring, entries unsafe.Pointer, err error) {
	need := off.Desc + uint64(size)*uint64(entry)
	if uint64(len(mem)) < need || off.Producer+4 > uint64(len(mem)) || off.Consumer+4 > uint64(len(mem)) || off.Flags+4 > uint64(len(mem)) {
		return r, nil, fmt.Errorf("ring mapping of %d bytes too short for %d entries", len(mem), size)
	}
	base := unsafe.Pointer(unsafe.SliceData(mem))
	r.producer = (*uint32)(unsafe.Add(base, off.Producer))
	r.consumer = (*uint32)(unsafe.Add(base, off.Consumer))
	r.flags = (*uint32)(unsafe.Add(base, off.Flags))
	r.size = size
	r.mask = size - 1
	return r, unsafe.Add(base, off.Desc), nil
}

// addrEntries views a fill or completion ring's entries.
func addrEntries(p unsafe.Pointer, size uint32) []uint64 { return unsafe.Slice((*uint64)(p), size) }

// descEntries views an RX or TX ring's entries.
func descEntries(p unsafe.Pointer, size uint32) []unix.XDPDesc {
	return unsafe.Slice((*unix.XDPDesc)(p), size)
}

// kick makes the kernel process the TX ring (and, in copy mode, transmit): an empty sendto.
//
// It is a raw system call: with MSG_DONTWAIT it never blocks, but in copy mode on veth it
// runs the receiver's kernel work inline (about 150 µs for 64 descriptors), long enough for
// the Go runtime to hand the engine's P to another thread on every kick if it were told.
// The engine goroutine owns its thread for the duration instead.
func kick(fd int) error {
	_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// recvNonblock makes a non-blocking recvfrom with no buffer on fd: on an AF_XDP socket it
// has the kernel look at the fill ring and, with busy polling, run the device's NAPI once
// from this thread. Raw, as kick: nothing to allocate, nothing that sleeps.
func recvNonblock(fd int) {
	_, _, _ = unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
}

// uintptrOf returns the address of b's first byte (for XDP_UMEM_REG).
func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// retireMapping replaces the mapping m (of a ring) by private anonymous memory at the same
// address, atomically for other threads (mmap with MAP_FIXED), which drops the mapping's
// reference to the socket. It reports false, leaving m as it was, if the kernel refused.
func retireMapping(m []byte) bool {
	if len(m) == 0 {
		return false
	}
	_, err := unix.MmapPtr(-1, 0, unsafe.Pointer(unsafe.SliceData(m)), uintptr(len(m)),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED)
	return err == nil
}
