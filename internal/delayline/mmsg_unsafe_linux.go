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
// allocated once; ctl holds a receive's control messages (the kernel's timestamp).
type mmsgBatch struct {
	hdrs []mmsghdr
	iovs []unix.Iovec
	ctl  [][ctlLen]byte
}

// ctlLen is the control buffer of one received message: room for one SCM_TIMESTAMPNS
// (CmsgSpace of a Timespec: 32 bytes on 64-bit systems).
const ctlLen = 64

func newBatch(n int) *mmsgBatch {
	b := &mmsgBatch{hdrs: make([]mmsghdr, n), iovs: make([]unix.Iovec, n), ctl: make([][ctlLen]byte, n)}
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

// armRecv prepares message i of a receive: its control buffer's length, which the kernel
// overwrites.
func (b *mmsgBatch) armRecv(i int) {
	b.hdrs[i].hdr.Control = &b.ctl[i][0]
	b.hdrs[i].hdr.SetControllen(ctlLen)
	b.hdrs[i].hdr.Flags = 0
	b.hdrs[i].n = 0
}

// stamp returns the kernel's receive timestamp of message i (CLOCK_REALTIME, ns) from
// its SCM_TIMESTAMPNS control message, or false without one.
func (b *mmsgBatch) stamp(i int) (int64, bool) {
	h := &b.hdrs[i].hdr
	if int(h.Controllen) < unix.CmsgLen(int(unsafe.Sizeof(unix.Timespec{}))) {
		return 0, false
	}
	c := (*unix.Cmsghdr)(unsafe.Pointer(&b.ctl[i][0]))
	if c.Level != unix.SOL_SOCKET || c.Type != unix.SCM_TIMESTAMPNS {
		return 0, false
	}
	ts := (*unix.Timespec)(unsafe.Pointer(&b.ctl[i][unix.CmsgLen(0)]))
	return ts.Nano(), true
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
