package xdp

// All of package xdp's use of unsafe lives in this file: turning mmap'd ring memory into typed
// views, passing structs to setsockopt/getsockopt, and finding the UMEM offset of a slice.

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

// offsetIn returns the offset of b's first byte within mem, and whether b lies inside mem.
func offsetIn(mem, b []byte) (uint64, bool) {
	if len(mem) == 0 || cap(b) == 0 {
		return 0, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p < base || p >= base+uintptr(len(mem)) {
		return 0, false
	}
	return uint64(p - base), true
}

// ppoll waits on fds for at most ts (nil waits forever) without allocating.
func ppoll(fds []unix.PollFd, ts *unix.Timespec) (int, error) {
	n, _, e := unix.Syscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(unsafe.SliceData(fds))), uintptr(len(fds)),
		uintptr(unsafe.Pointer(ts)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
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

// readEventfd drains an eventfd without allocating.
func readEventfd(fd int, buf *[8]byte) {
	_, _, _ = unix.Syscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(buf)), 8)
}

// writeEventfd adds one to an eventfd without allocating.
func writeEventfd(fd int) {
	one := [8]byte{1}
	_, _, _ = unix.Syscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&one)), 8)
}

// uintptrOf returns the address of b's first byte (for XDP_UMEM_REG).
func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// ifreqData is struct ifreq with the ifr_data member of its union, for SIOCETHTOOL.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

// ethtoolIoctl runs the ethtool command whose struct cmd points to (its first field the
// command number) on interface ifname (include/uapi/linux/ethtool.h, SIOCETHTOOL).
func ethtoolIoctl(ifname string, cmd unsafe.Pointer) error {
	if len(ifname) >= unix.IFNAMSIZ {
		return fmt.Errorf("interface name %q too long", ifname)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket for ethtool: %w", err)
	}
	defer unix.Close(fd)
	ifr := &ifreqData{data: cmd}
	copy(ifr.name[:], ifname)
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(ifr)))
	if e != 0 {
		return e
	}
	return nil
}

// ethtoolChannels reads ETHTOOL_GCHANNELS.
func ethtoolChannels(ifname string) (ethChannels, error) {
	c := ethChannels{Cmd: unix.ETHTOOL_GCHANNELS}
	err := ethtoolIoctl(ifname, unsafe.Pointer(&c))
	return c, err
}

// ethtoolRxnfc runs the ETHTOOL_*RXCLS* command laid out in b (struct ethtool_rxnfc); the
// kernel writes its answer into b.
func ethtoolRxnfc(ifname string, b []byte) error {
	return ethtoolIoctl(ifname, unsafe.Pointer(unsafe.SliceData(b)))
}
