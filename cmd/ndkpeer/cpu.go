//go:build linux

package main

import "golang.org/x/sys/unix"

// cpuTimes is a process's CPU time in ns: in user mode and in the kernel.
type cpuTimes struct{ user, sys int64 }

// processCPU reads this process's CPU time (getrusage RUSAGE_SELF: every thread, the
// measurement loop and the adapter's goroutines alike).
func processCPU() cpuTimes {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return cpuTimes{}
	}
	return cpuTimes{user: ru.Utime.Nano(), sys: ru.Stime.Nano()}
}

// sub returns c - o.
func (c cpuTimes) sub(o cpuTimes) cpuTimes { return cpuTimes{c.user - o.user, c.sys - o.sys} }

// total is user + sys.
func (c cpuTimes) total() int64 { return c.user + c.sys }
