package ndk

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"
)

// Progress says who runs the protocol engine of an Adapter.
type Progress int

const (
	// ProgressInline (the default, the zero value) lets the application drive the engine
	// from the calls it makes anyway: GetResults, Poll and Wait poll the engine when the CQ
	// is empty (so does Adapter.Poll), so a ping-pong crosses no goroutine and pays no
	// hand-off: the lowest latency while the application polls. Blocking calls poll while
	// they wait. When the application stops polling (it sleeps in Wait, arms a CQ, or has
	// not polled for InlineFallback), the adapter's own goroutine serves the engine: it
	// polls while there is work and for Spin after it, then sleeps until a datagram, a
	// post or a timer (an idle adapter costs no CPU), and steps aside as soon as the
	// application polls again. An application that sleeps without Wait or Arm leaves the
	// engine unserved for up to InlineFallback each time (docs/NDK.md, "Progress").
	ProgressInline Progress = iota
	// ProgressAdaptive runs the engine on its own goroutine, which spins for Options.Spin
	// after the last work and then sleeps until a packet, a post or a timer (an idle
	// adapter costs no CPU). Its cost is a goroutine hand-off per completion, and a
	// spinning engine beside the application's own polling thread needs a core of its own
	// (on two CPUs shared by two processes it measured twenty times slower than
	// ProgressInline: docs/NDK.md, "Progress").
	ProgressAdaptive
	// ProgressBusy runs the engine on its own goroutine that never sleeps: one core spent,
	// and it needs one to itself.
	ProgressBusy
)

// valid reports whether p is one of the modes.
func (p Progress) valid() bool { return p >= ProgressInline && p <= ProgressBusy }

// String names the mode: "inline", "adaptive", "busy".
func (p Progress) String() string {
	switch p {
	case ProgressInline:
		return "inline"
	case ProgressAdaptive:
		return "adaptive"
	case ProgressBusy:
		return "busy"
	}
	return fmt.Sprintf("Progress(%d)", int(p))
}

// Poll runs one round of each of the adapter's engines that nobody else is polling, if it
// uses ProgressInline, and reports whether it did any work. With the other progress modes
// it does nothing and returns false.
func (a *Adapter) Poll() bool { return a.pollEngines(0) }

// pollEngines is Poll of the engines in mask (bit i: engine i; 0: all of them). Each
// engine polled reads the clock once, in its round (Engine.PollNow), and that reading is
// the poll's time the fallback looks at (engine.polled); only an engine that another
// poller holds costs a reading of its own (once for all of them).
func (a *Adapter) pollEngines(mask uint64) bool {
	if a.opts.Progress != ProgressInline || a.closed.Load() {
		return false
	}
	busy := false
	var now int64
	read := false
	for i, s := range a.engs {
		if mask != 0 && mask&(1<<i) == 0 {
			continue
		}
		if !s.pollMu.TryLock() {
			if !read {
				now, read = a.now(), true
			}
			s.markPolled(now, a.pollGrain()) // tried: the fallback steps aside all the same
			continue
		}
		t, _, b := s.eng.PollNow()
		s.pollMu.Unlock()
		s.markPolled(t, a.pollGrain())
		busy = busy || b
	}
	return busy
}

// markPolled records t as the time of the application's last poll of the engine, if it is
// grain or more past the one recorded: a poller spinning through rounds then writes the
// word the fallback reads (an atomic exchange each time) once in many rounds, and the
// fallback sees the application idle at most grain early (Adapter.pollGrain). A
// hand-off's time (InlineFallback back) is always overwritten.
func (s *engine) markPolled(t, grain int64) {
	if t-s.polled.Load() >= grain {
		s.polled.Store(t)
	}
}

// pollGrain is how far past the recorded time of the application's last inline poll of
// an engine its next one must be to be recorded (markPolled): a sixteenth of
// InlineFallback.
func (a *Adapter) pollGrain() int64 { return int64(a.opts.InlineFallback) / 16 }

// fallbackMaxPause bounds how long an inline adapter's fallback sleeps while the
// application polls: how late, at worst, it takes over when the application stops.
const fallbackMaxPause = time.Millisecond

// fallbackWatch bounds one sleep of the fallback while it serves the engine after recent
// work, also when no timer is due: what the link finishes without a datagram or a doorbell
// (zero-copy transmissions, a TX ring that was full, frames owed to the fill ring) wakes
// nothing, and is looked at this often.
const fallbackWatch = time.Millisecond

// fallbackQuiet is how long after its last work the engine counts as idle: what the link
// finishes silently follows work by microseconds (a zero-copy completion, a TX ring
// draining), and any of it makes a poll busy.
const fallbackQuiet = 20 * time.Millisecond

// fallbackIdleWatch bounds one sleep of the fallback of an idle engine: it sleeps until the
// engine's next deadline (a timer of the protocol), a datagram or a post, and at most this
// long, so that an idle adapter wakes about ten times a second instead of a thousand.
const fallbackIdleWatch = 100 * time.Millisecond

// fallback serves engine s of an inline adapter (each engine has its own) when the
// application has not polled it for InlineFallback: it polls while there is work and for Options.Spin after it, and then
// sleeps in the link's Watch (until a datagram, a post or a timer; at most fallbackWatch
// while work is recent, fallbackIdleWatch once the engine is idle) without holding the
// engine, so the application's next Poll takes the engine back at once and the fallback
// steps aside. The spin matters for a stream that completes nothing here (Writes into
// this host): waking per packet delays every acknowledgement by a wake-up, which the
// peer's delay-based congestion control reads as a queue (docs/NDK.md, "Progress"). While
// the application polls, the fallback only looks now and then (the pause doubles up to
// fallbackMaxPause). Until Close. A link without Watch is polled every InlineFallback.
func (a *Adapter) fallback(s *engine) {
	defer close(s.runDone)
	d := int64(a.opts.InlineFallback)
	w, _ := s.link.(link.Watcher)
	pause := time.Duration(d)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	sleep := func(p time.Duration) {
		timer.Reset(p)
		select {
		case <-timer.C:
		case <-s.handoff:
			timer.Stop()
		}
	}
	spin := int64(a.opts.Spin)
	var lastBusy int64
	for !a.closed.Load() {
		if idle := a.now() - s.polled.Load(); idle < d {
			sleep(max(pause, time.Duration(d-idle)))
			pause = min(2*pause, fallbackMaxPause)
			continue
		}
		pause = time.Duration(d)
		if !s.pollMu.TryLock() {
			sleep(time.Duration(d))
			continue
		}
		now, next, busy := s.eng.PollNow()
		if busy {
			lastBusy = now
		}
		spinning := !busy && now-lastBusy < spin
		parked := !busy && !spinning && w != nil && s.eng.Park()
		s.pollMu.Unlock()
		switch {
		case busy:
		case spinning:
			runtime.Gosched() // as the adaptive engine: let the application's goroutines run
		case parked:
			wait := fallbackWatch
			if now-lastBusy >= int64(fallbackQuiet) {
				wait = fallbackIdleWatch
			}
			if next > 0 {
				wait = min(wait, time.Duration(max(next-now, 0)))
			}
			_ = w.Watch(wait)
			s.eng.Unpark()
		case w == nil:
			sleep(time.Duration(d)) // a link it cannot watch: poll now and then
		}
		// Otherwise work was posted since the poll: poll again at once.
	}
}

// handOff tells the fallbacks of an inline adapter's engines in mask (bit i: engine i; 0:
// all) that the application stops polling them now (it armed a CQ to wait for a
// notification, or sleeps in CQ.Wait): each fallback serves its engine from now on,
// without waiting out InlineFallback. The next poll takes the engine back.
func (a *Adapter) handOff(mask uint64) {
	if a.opts.Progress != ProgressInline {
		return
	}
	t := a.now() - int64(a.opts.InlineFallback)
	for i, s := range a.engs {
		if mask != 0 && mask&(1<<i) == 0 {
			continue
		}
		s.polled.Store(t)
		select {
		case s.handoff <- struct{}{}:
		default:
		}
	}
}

// await waits until done reports true or ctx ends, polling the engine meanwhile with
// ProgressInline.
func (a *Adapter) await(ctx context.Context, done func() bool) error {
	for i := 0; !done(); i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if a.closed.Load() {
			return errorf(StatusDeviceRemoved, "adapter closed")
		}
		if a.opts.Progress == ProgressInline {
			if !a.Poll() {
				runtime.Gosched()
			}
			continue
		}
		time.Sleep(min(time.Duration(i+1)*10*time.Microsecond, time.Millisecond))
	}
	return nil
}
