package xdp

import (
	"errors"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/xdpndk/xdpndk/xdp/xsk"
)

// The kicker (Config.AsyncKick): in copy mode every TX batch needs a sendto, and on veth
// that system call also runs the receiving side's XDP program and its copy into the
// peer's UMEM before it returns. The kicker makes that call on a goroutine locked to an OS
// thread of its own, so that the engine builds batch k+1 while the kernel sends batch k.
// The engine only counts a request and, if the kicker sleeps, wakes it; it never waits for
// it (a full TX ring makes Send return short, as without the kicker).

// kickSpin is how long the kicker polls for the next request after a kick before it
// sleeps: a batch that follows within it costs no wake-up.
const kickSpin = 50 * time.Microsecond

// kickerStopWait bounds Close's wait for the kicker to return (it makes only non-blocking
// system calls, so it returns within microseconds).
const kickerStopWait = time.Second

// errKickerStuck is returned by Close when the kicker did not stop within kickerStopWait.
var errKickerStuck = errors.New("xdp: tx kicker did not stop")

// kickSocket is what the kicker uses of its socket (an *xsk.Socket; tests fake it): the
// system call, the TX ring's fill read from its shared indices only, and the mode.
type kickSocket interface {
	Kick() error
	TxQueued() int
	Mode() xsk.SocketMode
}

// kicker is one socket's kicking goroutine. ask is for the engine goroutine; stop for
// Close; the counters are read anywhere.
type kicker struct {
	sock   kickSocket
	reqs   atomic.Uint64 // requests made (ask)
	parked atomic.Bool   // the goroutine sleeps on wake, or is about to
	wake   chan struct{} // capacity 1
	quit   atomic.Bool
	zc     bool          // zero-copy mode: one kick moves the whole ring
	done   chan struct{} // closed when the goroutine returns
	kicks  *atomic.Uint64
	errs   *atomic.Uint64
}

// startKicker starts the kicker of s, counting its system calls in kicks and its hard
// errors in errs.
func startKicker(s kickSocket, kicks, errs *atomic.Uint64) *kicker {
	k := &kicker{sock: s, wake: make(chan struct{}, 1), done: make(chan struct{}), kicks: kicks, errs: errs,
		zc: s.Mode().ZeroCopy}
	go k.run()
	return k
}

// ask makes the kicker kick the kernel once more (it drains the ring then). Engine
// goroutine; it does not wait, and allocates nothing.
func (k *kicker) ask() {
	k.reqs.Add(1)
	// Sequentially consistent atomics: the kicker stores parked before it loads reqs, we
	// store reqs before we load parked, so one of us sees the other (no lost wake-up).
	if k.parked.Load() {
		select {
		case k.wake <- struct{}{}:
		default:
		}
	}
}

// stop makes the goroutine return and waits for it, at most kickerStopWait.
func (k *kicker) stop() error {
	k.quit.Store(true)
	select {
	case k.wake <- struct{}{}:
	default:
	}
	t := time.NewTimer(kickerStopWait)
	defer t.Stop()
	select {
	case <-k.done:
		return nil
	case <-t.C:
		return errKickerStuck
	}
}

func (k *kicker) run() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(k.done)
	seen := uint64(0)
	for !k.quit.Load() {
		if r := k.reqs.Load(); r != seen {
			seen = r
			k.drain()
			continue
		}
		if k.poll(seen) {
			continue
		}
		k.parked.Store(true)
		if k.reqs.Load() == seen && !k.quit.Load() {
			<-k.wake
		}
		k.parked.Store(false)
	}
}

// poll waits up to kickSpin for a request after seen and reports whether one came.
func (k *kicker) poll(seen uint64) bool {
	end := time.Now().Add(kickSpin)
	for i := 0; ; i++ {
		if k.reqs.Load() != seen || k.quit.Load() {
			return true
		}
		if i&63 == 63 && time.Now().After(end) {
			return false
		}
	}
}

// drain kicks until the kernel has taken every descriptor on the TX ring (in copy mode one
// sendto moves at most the kernel's TX budget), bounded to 64 calls as Link.kickTx is.
func (k *kicker) drain() {
	n := uint64(0)
	for range 64 {
		n++
		if err := k.sock.Kick(); err != nil {
			k.errs.Add(1)
			break
		}
		if k.zc || k.sock.TxQueued() == 0 {
			break
		}
	}
	k.kicks.Add(n)
}
