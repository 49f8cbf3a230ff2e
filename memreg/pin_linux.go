package memreg

import "golang.org/x/sys/unix"

// mlock locks the pages of [va, va+n) in memory (mlock(2) rounds to whole pages). The
// address is passed as a number: no pointer is made from it.
func mlock(va, n uint64) error {
	if _, _, e := unix.Syscall(unix.SYS_MLOCK, uintptr(va), uintptr(n), 0); e != 0 {
		return e
	}
	return nil
}

// munlock unlocks the pages of [va, va+n). It cannot fail for memory this process locked.
func munlock(va, n uint64) {
	_, _, _ = unix.Syscall(unix.SYS_MUNLOCK, uintptr(va), uintptr(n), 0)
}
