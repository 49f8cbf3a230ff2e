package ndk

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/racebuild"
)

// cpuTime returns the user+system CPU time the process has used.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// idleCeiling is the CPU share (of one core) the idle test allows the whole process: a
// margin over the goal of 1% (bench/ndkbench checks and reports that one) that still proves
// nothing spins, on a shared 2-CPU machine.
const idleCeiling = 0.05

// A goroutine blocked in Wait for 10 s (2 s with -short or -race) with nothing arriving, beside an
// idle peer (one connected QP each, nobody polling), costs the process no CPU to speak of:
// neither Wait nor the inline fallback that serves the engine meanwhile spins.
func TestWaitIdleCPU(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		p := newPair(t, k, pairOpts{})
		idle := 10 * time.Second
		if testing.Short() || racebuild.Enabled {
			idle = 2 * time.Second
		}
		time.Sleep(50 * time.Millisecond) // the connection's last packets and timers
		ctx, cancel := context.WithTimeout(bg, idle)
		defer cancel()
		var r [4]Result
		c0, t0 := cpuTime(t), time.Now()
		n, err := p.B.rcq.Wait(ctx, r[:])
		cpu, wall := cpuTime(t)-c0, time.Since(t0)
		if n != 0 || StatusOf(err) != StatusTimeout {
			t.Fatalf("idle Wait: %d, %v", n, err)
		}
		share := cpu.Seconds() / wall.Seconds()
		t.Logf("%v blocked in Wait: process CPU %v, %.3f%% of a core", wall.Round(time.Millisecond), cpu, 100*share)
		if share > idleCeiling {
			t.Errorf("an idle waiter used %.2f%% of a core, want < %.0f%%", 100*share, 100*idleCeiling)
		}
	})
}
