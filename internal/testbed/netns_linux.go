package testbed

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// enterNetns switches the calling OS thread into the network namespace named by the file at
// path. The caller must have locked its goroutine to the thread and must never unlock it.
func enterNetns(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("setns %s: %w", path, err)
	}
	return nil
}

// killPid sends SIGKILL to pid. A process that is already gone is not an error.
func killPid(pid int) error {
	if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill pid %d: %w", pid, err)
	}
	return nil
}

// onMainThread reports whether the calling OS thread is the process's main thread (the
// thread whose id is the process id).
func onMainThread() bool { return unix.Gettid() == unix.Getpid() }
