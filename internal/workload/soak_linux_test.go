package workload

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/faultlink"
	"github.com/xdpndk/xdpndk/internal/plumb"
	"github.com/xdpndk/xdpndk/internal/racebuild"
	"github.com/xdpndk/xdpndk/internal/testbed"
)

// EnvSoakDuration overrides TestSoak's duration (a time.ParseDuration string, e.g. "10m";
// `make soak` sets it).
const EnvSoakDuration = "XDPNDK_SOAK_DURATION"

// Flatness criteria of TestSoak, applied to the samples after the warm-up, split in thirds:
// the largest RSS of the last third may exceed the largest of the first third by at most
// soakRSSSlack bytes plus soakRSSSlackFrac of it; the goroutine count must be the same at
// every sample. Progress: completions must grow in every sampling interval.
const (
	soakRSSSlack     = 8 << 20
	soakRSSSlackFrac = 0.05
	soakInterval     = time.Second
)

// soakDuration is how long TestSoak runs: EnvSoakDuration, or 20 s (6 s under the race
// detector).
func soakDuration(t *testing.T) time.Duration {
	if s := os.Getenv(EnvSoakDuration); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 5*time.Second {
			t.Fatalf("%s=%q: want a duration of at least 5s", EnvSoakDuration, s)
		}
		return d
	}
	if racebuild.Enabled {
		return 6 * time.Second
	}
	return 20 * time.Second
}

// rss returns the process's resident set in bytes (/proc/self/statm).
func rss(t *testing.T) uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		t.Fatalf("statm: %q", b)
	}
	pages, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return pages * uint64(os.Getpagesize())
}

type soakSample struct {
	at         time.Duration
	rss        uint64
	goroutines int
	progress   uint64
}

// The verb mix over AF_XDP with faults (the XDP programs drop 1% both ways; the wrappers
// duplicate, reorder and corrupt 1% each) for soakDuration, sampling the RSS, the goroutine
// count and the completions every second. After a warm-up (a fifth of the run, at least 2
// samples) RSS and goroutines must be flat (see soakRSSSlack) and completions must grow in
// every interval; the run must end clean, byte-exact.
func TestSoak(t *testing.T) {
	dur := soakDuration(t)
	bed := testbed.NewT(t, testbed.Options{MTU: 9000})
	a := openXDP(t, bed.A, xdpConfig(), faultlink.Config{Seed: 31}, ndkOptions())
	b := openXDP(t, bed.B, xdpConfig(), faultlink.Config{Seed: 32}, ndkOptions())
	tg := serve(t, b.a, TargetConfig{})
	in := dial(t, a.a, b.a, Config{Seed: 33, QPs: 4, Outstanding: 8, MaxSize: 32 << 10})
	// Faults from now on: connection setup under faults is not what this test measures.
	wr := faultlink.Impairments{Reorder: 0.01, Corrupt: 0.01, Duplicate: 0.01}
	for i, s := range []xdpSide{a, b} {
		if err := s.dev.Program().SetFaultDrop(0.01, uint64(40+i)); err != nil {
			t.Fatal(err)
		}
		if err := s.fl.SetImpairments(wr); err != nil {
			t.Fatal(err)
		}
	}

	done := make(chan Report, 1)
	go func() { done <- in.Run(context.Background(), Limits{Duration: dur, Drain: 20 * time.Second}) }()
	start := time.Now()
	var samples []soakSample
	tick := time.NewTicker(soakInterval)
	defer tick.Stop()
	var r Report
wait:
	for {
		select {
		case r = <-done:
			break wait
		case <-tick.C:
			samples = append(samples, soakSample{at: time.Since(start), rss: rss(t),
				goroutines: runtime.NumGoroutine(), progress: in.Progress()})
		}
	}
	t.Logf("soak %v: %s", dur, r.String())
	if err := r.Err(); err != nil {
		for i, q := range in.QPs() {
			t.Logf("initiator QP %d: %+v", i, plumb.QP(q).Stats())
		}
		t.Logf("engines: A %+v, B %+v; target: %v", plumb.Engine(a.a).Stats(), plumb.Engine(b.a).Stats(), tg.Err())
		t.Fatal(err)
	}
	checkTarget(t, tg, r)

	// Samples taken while Run was starting requests (the last may fall in its drain).
	var run []soakSample
	for _, s := range samples {
		if s.at <= dur {
			run = append(run, s)
		}
	}
	warm := max(2, len(run)/5)
	if len(run)-warm < 3 {
		t.Fatalf("%d samples in %v, too few to judge", len(run), dur)
	}
	steady := run[warm:]
	third := len(steady) / 3
	first, last := steady[:third], steady[len(steady)-third:]
	maxRSS := func(ss []soakSample) uint64 {
		m := uint64(0)
		for _, s := range ss {
			m = max(m, s.rss)
		}
		return m
	}
	r1, r3 := maxRSS(first), maxRSS(last)
	t.Logf("RSS after warm-up: max %.1f MiB in the first third, %.1f MiB in the last; goroutines %d; %d samples",
		float64(r1)/(1<<20), float64(r3)/(1<<20), steady[0].goroutines, len(steady))
	if limit := r1 + soakRSSSlack + uint64(float64(r1)*soakRSSSlackFrac); r3 > limit {
		t.Errorf("RSS grew: max %d bytes in the last third, %d in the first (limit %d)", r3, r1, limit)
	}
	for _, s := range steady {
		if s.goroutines != steady[0].goroutines {
			t.Errorf("goroutines at %v: %d, at %v: %d", steady[0].at.Round(time.Second), steady[0].goroutines,
				s.at.Round(time.Second), s.goroutines)
			break
		}
	}
	for i := 1; i < len(run); i++ {
		if run[i].progress <= run[i-1].progress {
			t.Errorf("no completion between %v and %v", run[i-1].at.Round(time.Millisecond), run[i].at.Round(time.Millisecond))
		}
	}
}
