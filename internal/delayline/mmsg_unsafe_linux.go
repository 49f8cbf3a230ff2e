package delayline

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsghdr is struct mmsghdr of recvmmsg(2) and sendmmsg(2).
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// mmsgBatch is the message array of one recvmmsg or sendmmsg call, one buffer per message,
// allocated once.
type mmsgBatch struct {
	hdrs []mmsghdr
	iovs []unix.Iovec
}

func newBatch(n int) *mmsgBatch {
	b := &mmsgBatch{hdrs: make([]mmsghdr, n), iovs: make([]unix.Iovec, n)}
	for i := range b.hdrs {
		b.hdrs[i].hdr.Iov = &b.iovs[i]
		b.hdrs[i].hdr.Iovlen = 1
	}
	return b
}

// set points message i at p (not empty).
func (b *mmsgBatch) set(i int, p []byte) {
	b.iovs[i].Base = &p[0]
	b.iovs[i].SetLen(len(p))
	b.hdrs[i].hdr.Flags = 0
	b.hdrs[i].n = 0
}

// recvmmsg reads up to n messages from fd without blocking.
func recvmmsg(fd int, b *mmsgBatch, n int) (int, error) {
	r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&b.hdrs[0])), uintptr(n),
		unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// sendmmsg sends the first n messages on fd without blocking.
func sendmmsg(fd int, b *mmsgBatch, n int) (int, error) {
	r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&b.hdrs[0])), uintptr(n),
		unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}
