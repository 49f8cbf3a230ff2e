package xdp

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/xdp/xsk"
)

// fakeKickSocket counts kicks; each kick empties its "ring". block, when set, makes Kick
// wait for it to be closed (a system call that does not return).
type fakeKickSocket struct {
	kicks  atomic.Uint64
	queued atomic.Int64
	block  chan struct{}
	fail   bool
}

func (f *fakeKickSocket) Kick() error {
	if f.block != nil {
		<-f.block
	}
	f.kicks.Add(1)
	f.queued.Store(0)
	if f.fail {
		return errors.New("interface down")
	}
	return nil
}

func (f *fakeKickSocket) TxQueued() int        { return int(f.queued.Load()) }
func (f *fakeKickSocket) Mode() xsk.SocketMode { return xsk.SocketMode{} }

// waitFor polls cond for at most 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// TestKickerKicksEveryRequest checks that every ask is followed by a kick, whether the
// kicker was spinning or parked: after each burst of asks the kicker kicks at least once
// more, and it parks when nothing comes (no kick without a request).
func TestKickerKicksEveryRequest(t *testing.T) {
	f := &fakeKickSocket{}
	var kicks, errs atomic.Uint64
	k := startKicker(f, &kicks, &errs)
	defer func() {
		if err := k.stop(); err != nil {
			t.Fatal(err)
		}
	}()
	for round := range 200 {
		before := f.kicks.Load()
		f.queued.Store(1)
		for range 1 + round%3 {
			k.ask()
		}
		waitFor(t, "a kick after a request", func() bool { return f.kicks.Load() > before })
		if round%50 == 0 {
			// Let it park, then check that a request still reaches it.
			waitFor(t, "the kicker to park", func() bool { return k.parked.Load() })
		}
	}
	if kicks.Load() != f.kicks.Load() || errs.Load() != 0 {
		t.Fatalf("counted %d kicks and %d errors, made %d kicks", kicks.Load(), errs.Load(), f.kicks.Load())
	}
	waitFor(t, "the kicker to park", func() bool { return k.parked.Load() })
	idle := f.kicks.Load()
	time.Sleep(20 * time.Millisecond)
	if f.kicks.Load() != idle {
		t.Fatalf("the kicker kicked %d times with no request", f.kicks.Load()-idle)
	}
}

// TestKickerCountsErrors checks that a failing kick is counted and the kicker goes on.
func TestKickerCountsErrors(t *testing.T) {
	f := &fakeKickSocket{fail: true}
	var kicks, errs atomic.Uint64
	k := startKicker(f, &kicks, &errs)
	k.ask()
	waitFor(t, "an error counted", func() bool { return errs.Load() == 1 })
	k.ask()
	waitFor(t, "a second error counted", func() bool { return errs.Load() == 2 })
	if err := k.stop(); err != nil {
		t.Fatal(err)
	}
}

// TestKickerStop checks the kicker's shutdown: stop returns once the goroutine has
// returned, whether it was parked, spinning after a kick or asked a moment before; and a
// kicker stuck in a system call makes stop give up after kickerStopWait with
// errKickerStuck instead of waiting for ever.
func TestKickerStop(t *testing.T) {
	for _, state := range []string{"parked", "spinning", "asked"} {
		t.Run(state, func(t *testing.T) {
			f := &fakeKickSocket{}
			var kicks, errs atomic.Uint64
			k := startKicker(f, &kicks, &errs)
			switch state {
			case "parked":
				waitFor(t, "the kicker to park", func() bool { return k.parked.Load() })
			case "spinning":
				k.ask()
				waitFor(t, "a kick", func() bool { return f.kicks.Load() == 1 })
			case "asked":
				k.ask()
			}
			start := time.Now()
			if err := k.stop(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-k.done:
			default:
				t.Fatal("stop returned before the goroutine did")
			}
			if d := time.Since(start); d > kickerStopWait/2 {
				t.Fatalf("stop took %v", d)
			}
		})
	}
	t.Run("stuck", func(t *testing.T) {
		f := &fakeKickSocket{block: make(chan struct{})}
		var kicks, errs atomic.Uint64
		k := startKicker(f, &kicks, &errs)
		k.ask()
		waitFor(t, "the kicker to take the request", func() bool { return !k.parked.Load() })
		time.Sleep(time.Millisecond)
		start := time.Now()
		if err := k.stop(); !errors.Is(err, errKickerStuck) {
			t.Fatalf("stop of a stuck kicker: %v, want errKickerStuck", err)
		}
		if d := time.Since(start); d < kickerStopWait || d > 3*kickerStopWait {
			t.Fatalf("stop gave up after %v, want about %v", d, kickerStopWait)
		}
		close(f.block) // the system call returns: the goroutine ends
		select {
		case <-k.done:
		case <-time.After(5 * time.Second):
			t.Fatal("the kicker did not return once unblocked")
		}
	})
}

// TestKickerAskNoAllocs checks that the engine's side allocates nothing.
func TestKickerAskNoAllocs(t *testing.T) {
	f := &fakeKickSocket{}
	var kicks, errs atomic.Uint64
	k := startKicker(f, &kicks, &errs)
	defer k.stop()
	if n := testing.AllocsPerRun(1000, k.ask); n != 0 {
		t.Fatalf("ask allocates %v times", n)
	}
}
