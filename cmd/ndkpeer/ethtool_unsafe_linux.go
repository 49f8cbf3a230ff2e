//go:build linux

package main

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The ethtool ioctls doctor uses (include/uapi/linux/ethtool.h). All unsafe code of ndkpeer
// is in this file: SIOCETHTOOL takes a struct ifreq whose data field points to the ethtool
// command's struct.

// ethFlagNtuple is ETH_FLAG_NTUPLE in ETHTOOL_GFLAGS's value: n-tuple filters (flow
// steering rules, ethtool -N) are on.
const ethFlagNtuple = 1 << 27

// ethtoolValue is struct ethtool_value.
type ethtoolValue struct {
	cmd, data uint32
}

// ifreqData is struct ifreq with the ifr_data member of the union (40 bytes on 64-bit).
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

// ethtool runs the ethtool command whose struct cmd points to on the interface.
func ethtool(ifname string, cmd unsafe.Pointer) error {
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
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(ifr)))
	runtime.KeepAlive(ifr)
	if errno != 0 {
		return errno
	}
	return nil
}

// ethtoolFlags returns ETHTOOL_GFLAGS's value (ETH_FLAG_*).
func ethtoolFlags(ifname string) (uint32, error) {
	v := &ethtoolValue{cmd: unix.ETHTOOL_GFLAGS}
	if err := ethtool(ifname, unsafe.Pointer(v)); err != nil {
		return 0, fmt.Errorf("ETHTOOL_GFLAGS on %s: %w", ifname, err)
	}
	return v.data, nil
}

// ethtoolDriver returns ETHTOOL_GDRVINFO's driver name, version and bus address.
func ethtoolDriver(ifname string) (driver, version, bus string, err error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", "", "", fmt.Errorf("socket for ethtool: %w", err)
	}
	defer unix.Close(fd)
	info, err := unix.IoctlGetEthtoolDrvinfo(fd, ifname)
	if err != nil {
		return "", "", "", fmt.Errorf("ETHTOOL_GDRVINFO on %s: %w", ifname, err)
	}
	return unix.ByteSliceToString(info.Driver[:]), unix.ByteSliceToString(info.Version[:]), unix.ByteSliceToString(info.Bus_info[:]), nil
}
