//go:build linux

package tcloss_test

import (
	"testing"

	"github.com/xdpndk/xdpndk/internal/tcloss"
	"github.com/xdpndk/xdpndk/internal/testbed"
)

// The program drops nothing at 0, everything at 1, and about the share asked in between;
// its counters agree with its verdicts.
func TestLossVerdicts(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	var l *tcloss.Loss
	if err := bed.A.Do(func() (err error) { l, err = tcloss.Attach(bed.A.IfIndex, true); return err }); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pkt := make([]byte, 64) // an Ethernet frame's worth: the program reads nothing of it
	count := func(n int) (dropped int) {
		for range n {
			v, err := l.Run(pkt)
			if err != nil {
				t.Fatal(err)
			}
			switch v {
			case 2: // TC_ACT_SHOT
				dropped++
			case 0: // TC_ACT_OK
			default:
				t.Fatalf("verdict %d", v)
			}
		}
		return dropped
	}
	if d := count(1000); d != 0 {
		t.Fatalf("nothing set: %d of 1000 dropped", d)
	}
	for _, c := range []struct {
		p      float64
		lo, hi int
	}{{1, 20000, 20000}, {0, 0, 0}, {0.5, 9000, 11000}, {0.01, 100, 320}} {
		if err := l.Set(c.p); err != nil {
			t.Fatal(err)
		}
		// The bounds hold but for a binomial tail far below 1e-9.
		if d := count(20000); d < c.lo || d > c.hi {
			t.Errorf("p=%v: %d of 20000 dropped, want %d..%d", c.p, d, c.lo, c.hi)
		}
	}
	passed, dropped, err := l.Counters()
	if err != nil || passed+dropped != 81000 || dropped < 29100 {
		t.Fatalf("counters passed %d dropped %d (%v), want 81000 in all", passed, dropped, err)
	}
	for _, bad := range []float64{-0.1, 1.1} {
		if err := l.Set(bad); err == nil {
			t.Errorf("probability %v accepted", bad)
		}
	}
	if tcloss.Threshold(1) != 1<<32 || tcloss.Threshold(0) != 0 {
		t.Fatalf("thresholds %d %d", tcloss.Threshold(1), tcloss.Threshold(0))
	}
}
