//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpndk/xdpndk/ndk"
)

// eventWaiter is -e's wait: it arms every CQ of the run (NdkArmCq: one notification of the
// next completion) and sleeps in epoll on their FDs (each an eventfd the notification makes
// readable, ndk.CQ.FD) and a timerfd for the next paced post, interval or deadline, as
// perftest's event mode sleeps in ibv_get_cq_event. With ProgressInline, Arm hands the
// engine to the adapter's own goroutine while the loop sleeps; the next poll takes it back.
// The loop polls with CQ.Poll, which clears a CQ's FD before it looks.
//
// The epoll set itself waits in Go's network poller (an epoll descriptor is readable while
// it has events ready): the goroutine parks and its processor goes at once to whoever
// needs it, the adapter's goroutine that serves the engine included. Blocking in
// epoll_wait instead would hold the processor until the runtime's monitor took it back,
// which is up to milliseconds away on a machine with few CPUs.
type eventWaiter struct {
	epfd, tfd int
	file      *os.File        // epfd, in the runtime's poller
	raw       syscall.RawConn // file's
	cqs       []*ndk.CQ
	fds       []int // the CQs' FDs
	evs       [16]unix.EpollEvent
	buf       [8]byte
	sleeps    int64 // waits that slept (for the summary)
}

// newEventWaiter makes the epoll set of cqs.
func newEventWaiter(cqs []*ndk.CQ) (w *eventWaiter, err error) {
	w = &eventWaiter{epfd: -1, tfd: -1}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	if w.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	if err := unix.SetNonblock(w.epfd, true); err != nil {
		return nil, fmt.Errorf("epoll set non-blocking: %w", err)
	}
	w.file = os.NewFile(uintptr(w.epfd), "ndkpeer-cq-events")
	if w.raw, err = w.file.SyscallConn(); err != nil {
		return nil, fmt.Errorf("epoll set in the poller: %w", err)
	}
	if w.tfd, err = unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC); err != nil {
		return nil, fmt.Errorf("timerfd_create: %w", err)
	}
	if err := w.watch(w.tfd); err != nil {
		return nil, err
	}
	for _, cq := range cqs {
		if err := w.add(cq); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// add puts cq in the set.
func (w *eventWaiter) add(cq *ndk.CQ) error {
	fd, err := cq.FD()
	if err != nil {
		return fmt.Errorf("the CQ's notification FD: %w", err)
	}
	if err := w.watch(fd); err != nil {
		return err
	}
	w.cqs, w.fds = append(w.cqs, cq), append(w.fds, fd)
	return nil
}

func (w *eventWaiter) watch(fd int) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("epoll_ctl: %w", err)
	}
	return nil
}

// wait arms every CQ and sleeps until one's notification fires, or d passes (d > 0;
// the caller bounds it). Completions queued before the Arm fire it at once.
func (w *eventWaiter) wait(d time.Duration) error {
	for _, cq := range w.cqs {
		cq.Arm(ndk.NotifyAny)
	}
	d = max(d, time.Microsecond)
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(w.tfd, 0, &spec, nil); err != nil {
		return fmt.Errorf("timerfd_settime: %w", err)
	}
	w.sleeps++
	var werr error
	err := w.raw.Read(func(fd uintptr) bool { // the timer bounds the wait
		n, err := unix.EpollWait(int(fd), w.evs[:], 0)
		switch {
		case errors.Is(err, unix.EINTR):
			return false
		case err != nil:
			werr = err
			return true
		}
		return n > 0
	})
	if err == nil {
		err = werr
	}
	if err != nil {
		return fmt.Errorf("epoll_wait: %w", err)
	}
	_, _ = unix.Read(w.tfd, w.buf[:]) // clear an expiry (EAGAIN if the timer did not fire)
	// Clear the CQs' FDs too (reading 8 bytes does, ndk.CQ.FD): the loop's Poll clears an
	// FD only after a kick it has seen the end of, and one it raced with can stay readable
	// with nothing to take, which would wake every wait at once until the next
	// notification (measured: dozens of wake-ups per operation). A notification after
	// this read makes the FD readable again; one before it left its results in the CQ,
	// which the loop polls next.
	for _, fd := range w.fds {
		_, _ = unix.Read(fd, w.buf[:])
	}
	return nil
}

// close releases the epoll set and the timer (the CQs' FDs are theirs).
func (w *eventWaiter) close() {
	if w.file != nil {
		_ = w.file.Close() // closes epfd
		w.file, w.epfd = nil, -1
	} else if w.epfd >= 0 {
		_ = unix.Close(w.epfd)
		w.epfd = -1
	}
	if w.tfd >= 0 {
		_ = unix.Close(w.tfd)
		w.tfd = -1
	}
}
