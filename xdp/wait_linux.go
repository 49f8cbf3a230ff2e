package xdp

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpndk/xdpndk/transport/link"
	"github.com/xdpndk/xdpndk/xdp/nexthop"
)

// Waiting: Wait sleeps in ppoll on the socket and the link's doorbell (an eventfd that
// Wake, Close and the next-hop worker ring), after sending what is due; Watch only polls.

// Wait implements link.Link.
func (l *Link) Wait(timeout time.Duration) error {
	if !l.enter() {
		return link.ErrClosed
	}
	defer l.exit()
	ready, limit := l.waitPrepare()
	if ready {
		return nil
	}
	if err := ppollUntil(l.pollfds[:], min(max(timeout, 0), limit), &l.timeout, &l.closed); err != nil {
		return err
	}
	return l.waitFinish(l.pollfds[1].Revents != 0)
}

// waitPrepare is the part of Wait before it sleeps: it sends held datagrams whose peers
// resolved and kicks what waits on the TX ring. It reports whether something is ready at
// once (datagrams to Receive, cookies for TxDone), and the longest the caller may sleep
// before it must look again (the kernel signals no TX completion; held datagrams are
// looked at again every nexthop.HoldRecheck). The caller is inside enter/exit.
func (l *Link) waitPrepare() (ready bool, limit time.Duration) {
	if l.hops.Held() > 0 && l.hops.Service() {
		l.finishTx()
	}
	if l.rx.owed > 0 {
		l.rx.repay()
	}
	// Whatever is still on the TX ring must move even if the engine sleeps.
	if l.sock.TxPending() > 0 {
		l.kickTx()
	}
	if l.rx.buffered() || l.sock.RxReady() {
		return true, 0
	}
	if l.zc.queue.headDone() || (l.zc.pending() && l.sock.CompletionsReady()) {
		return true, 0 // TxDone has cookies to report
	}
	limit = time.Duration(1<<63 - 1)
	if l.zc.pending() {
		limit = zcWaitPoll
	}
	if l.rx.owed > 0 {
		limit = min(limit, repayPoll)
	}
	if l.hops.Held() > 0 {
		// The worker rings when it finishes a resolution; lost requests are looked at
		// again every nexthop.HoldRecheck.
		limit = min(limit, nexthop.HoldRecheck)
	}
	return false, limit
}

// waitFinish is the part of Wait after the sleep: it drains the doorbell if it rang and
// services held datagrams. The caller is inside enter/exit.
func (l *Link) waitFinish(rang bool) error {
	if rang {
		readEventfd(l.eventfd, &l.eventBuf)
	}
	if l.closed.Load() {
		return link.ErrClosed
	}
	if l.hops.Held() > 0 && l.hops.Service() {
		l.finishTx()
	}
	return nil
}

// ppollUntil sleeps in ppoll on fds for timeout. A signal (EINTR) is not a wake-up: it
// polls again for what is left, so that an idle wait lasts its timeout and one ended by
// nothing does not look woken; it stops early once closed is set.
func ppollUntil(fds []unix.PollFd, timeout time.Duration, ts *unix.Timespec, closed *atomic.Bool) error {
	deadline := time.Now().Add(timeout)
	for {
		*ts = unix.NsecToTimespec(int64(max(time.Until(deadline), 0)))
		for i := range fds {
			fds[i].Revents = 0
		}
		_, err := ppoll(fds, ts)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("poll af_xdp socket: %w", err)
		}
		if closed.Load() || !time.Now().Before(deadline) {
			return nil
		}
	}
}

// Watch implements link.Watcher: a ppoll on the socket and the doorbell, which
// touches no ring.
func (l *Link) Watch(timeout time.Duration) error {
	if !l.enter() {
		return link.ErrClosed
	}
	defer l.exit()
	var fds [2]unix.PollFd
	fds[0], fds[1] = l.pollfds[0], l.pollfds[1]
	var ts unix.Timespec
	if err := ppollUntil(fds[:], max(timeout, 0), &ts, &l.closed); err != nil {
		return err
	}
	if fds[1].Revents != 0 {
		var buf [8]byte
		readEventfd(l.eventfd, &buf)
	}
	if l.closed.Load() {
		return link.ErrClosed
	}
	return nil
}

// Wake implements link.Link.
func (l *Link) Wake() {
	// The guard keeps Close from closing the eventfd (whose number the process may then
	// reuse) between the check and the write.
	if l.enter() {
		writeEventfd(l.eventfd)
		l.exit()
	}
}
