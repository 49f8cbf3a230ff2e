package xdp

// All of package xdp's own use of unsafe lives in this file: finding the UMEM offset of a
// slice, polling and ringing doorbells without allocating, and passing structs to the
// ethtool ioctl. The socket layer's (ring memory, socket options) is in package xsk's
// sys_unsafe_linux.go.

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

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

// readEventfd drains an eventfd without allocating.
func readEventfd(fd int, buf *[8]byte) {
	_, _, _ = unix.Syscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(buf)), 8)
}

// writeEventfd adds one to an eventfd without allocating.
func writeEventfd(fd int) {
	one := [8]byte{1}
	_, _, _ = unix.Syscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&one)), 8)
}

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

// ethtoolFlags reads ETHTOOL_GFLAGS (struct ethtool_value: the ETH_FLAG_* bits).
func ethtoolFlags(ifname string) (uint32, error) {
	v := struct{ cmd, data uint32 }{cmd: unix.ETHTOOL_GFLAGS}
	err := ethtoolIoctl(ifname, unsafe.Pointer(&v))
	return v.data, err
}

// ethtoolRxnfc runs the ETHTOOL_*RXCLS* command laid out in b (struct ethtool_rxnfc); the
// kernel writes its answer into b.
func ethtoolRxnfc(ifname string, b []byte) error {
	return ethtoolIoctl(ifname, unsafe.Pointer(unsafe.SliceData(b)))
}
