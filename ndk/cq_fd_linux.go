package ndk

import (
	"encoding/binary"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// FD returns a file descriptor that becomes readable when the CQ's armed notification
// fires (Arm: the same one-shot event that runs the NotifyFunc, which still runs if there is
// one) and when a connection event is queued (see ConnectionEnded), for epoll loops, as
// rdma-core's completion channel. It is an eventfd (EFD_NONBLOCK|EFD_CLOEXEC) made by the
// first call (later calls return the same one) and closed by Close; the caller must not
// close it. A CQ created without a NotifyFunc may use it alone: its notification counts as
// delivered when the FD is made readable (Arm's "since the last notification" rule).
//
// Use: Arm, wait for the FD to become readable, then drain the CQ with Poll (or Wait)
// until it returns nothing, then Arm again. Poll and Wait clear the FD (read the eventfd)
// before they look at the CQ, so an event after that look leaves it readable; reading 8
// bytes from it clears it too. It may be readable once with nothing new to take (an event
// whose results an earlier Poll took). GetResults does not clear it. Errors:
// STATUS_INVALID_DEVICE_STATE after Close, STATUS_INSUFFICIENT_RESOURCES when the kernel
// refuses an eventfd; STATUS_NOT_SUPPORTED on other operating systems than Linux.
func (cq *CQ) FD() (int, error) {
	if v := cq.fd.fd.Load(); v != 0 {
		return int(v - 1), nil
	}
	f := &cq.fd
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.shut.Load() || cq.closed.Load() {
		return -1, errCQClosed
	}
	if v := f.fd.Load(); v != 0 {
		return int(v - 1), nil
	}
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return -1, wrap(StatusInsufficientResources, err)
	}
	binary.NativeEndian.PutUint64(f.one[:], 1)
	f.fd.Store(int32(fd) + 1)
	if cq.nev.Load() > 0 { // an event queued before the FD existed
		f.kick()
	}
	return fd, nil
}

// cqFD is a CQ's eventfd. kick (any goroutine, the engine's included) and clear never
// block: Close waits for a kick or clear in progress (users) before it closes the
// descriptor, so that neither writes to or reads from a number the process reuses.
type cqFD struct {
	mu    sync.Mutex    // creation and close
	fd    atomic.Int32  // the eventfd + 1; 0: none
	users atomic.Int32  // kicks and clears in progress
	shut  atomic.Bool   // closing: no new kick or clear uses fd
	kicks atomic.Uint64 // kicks that have written (counted after their write)
	seen  uint64        // kicks when clear last read; consumer only
	one   [8]byte       // the 1 that a kick adds
	buf   [8]byte       // clear's read buffer
}

// kick makes the FD readable, if there is one.
func (f *cqFD) kick() {
	if f.fd.Load() == 0 {
		return
	}
	f.users.Add(1)
	if v := f.fd.Load(); v != 0 && !f.shut.Load() {
		_, _ = unix.Write(int(v-1), f.one[:]) // EAGAIN only if the count would overflow: readable anyway
		f.kicks.Add(1)                        // after the write: a clear that sees it reads it
	}
	f.users.Add(-1)
}

// clear reads the FD if a kick has written to it since the last clear (one system call;
// none when nothing was kicked). A kick whose write comes before a clear and whose count
// after it leaves the FD readable until the next clear: a wake with nothing new, which FD's
// doc allows. A reader of the FD itself (which FD's doc allows too) costs the next clear
// one read that finds nothing.
func (f *cqFD) clear() {
	k := f.kicks.Load()
	if k == f.seen {
		return
	}
	f.seen = k
	f.users.Add(1)
	if v := f.fd.Load(); v != 0 && !f.shut.Load() {
		_, _ = unix.Read(int(v-1), f.buf[:])
	}
	f.users.Add(-1)
}

// close closes the FD once no kick or clear uses it. CQ.Close.
func (f *cqFD) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.shut.Store(true)
	for f.users.Load() != 0 {
		runtime.Gosched() // a write or read of 8 bytes in progress
	}
	if v := f.fd.Swap(0); v != 0 {
		_ = unix.Close(int(v - 1))
	}
}
