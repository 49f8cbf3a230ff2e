//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package bpf

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// testXSK is the least AF_XDP socket the kernel lets into an XSKMAP: a small UMEM, fill,
// completion and RX rings (never mmap'd, never used) and a copy-mode bind to one queue.
type testXSK struct {
	fd   int
	umem []byte
}

const (
	testXSKFrames    = 16
	testXSKFrameSize = 4096
)

// newTestXSK creates the socket bound to (ifindex, queue) in the calling thread's network
// namespace.
func newTestXSK(ifindex int, queue uint32) (_ *testXSK, err error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket AF_XDP: %w", err)
	}
	x := &testXSK{fd: fd}
	defer func() {
		if err != nil {
			x.Close()
		}
	}()
	x.umem, err = unix.Mmap(-1, 0, testXSKFrames*testXSKFrameSize,
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("mmap umem: %w", err)
	}
	reg := unix.XDPUmemReg{
		Addr: uint64(uintptr(unsafe.Pointer(&x.umem[0]))),
		Len:  uint64(len(x.umem)),
		Size: testXSKFrameSize,
	}
	_, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_UMEM_REG,
		uintptr(unsafe.Pointer(&reg)), unsafe.Sizeof(reg), 0)
	if errno != 0 {
		return nil, fmt.Errorf("setsockopt XDP_UMEM_REG: %w", errno)
	}
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, opt, testXSKFrames); err != nil {
			return nil, fmt.Errorf("setsockopt ring %d: %w", opt, err)
		}
	}
	sa := &unix.SockaddrXDP{Flags: unix.XDP_COPY, Ifindex: uint32(ifindex), QueueID: queue}
	if err := unix.Bind(fd, sa); err != nil {
		return nil, fmt.Errorf("bind AF_XDP to ifindex %d queue %d: %w", ifindex, queue, err)
	}
	return x, nil
}

func (x *testXSK) Close() {
	if x.fd >= 0 {
		unix.Close(x.fd)
		x.fd = -1
	}
	if x.umem != nil {
		unix.Munmap(x.umem)
		x.umem = nil
	}
}
