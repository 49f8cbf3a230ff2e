package workload

import (
	"context"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/faultlink"
	"github.com/xdpndk/xdpndk/internal/racebuild"
	"github.com/xdpndk/xdpndk/transport/simlink"
)

// checkReport fails the test unless the run was clean and exercised every operation.
func checkReport(t *testing.T, r *Report) {
	t.Helper()
	t.Log(r.String())
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if r.Sends == 0 || r.SendInvalidates == 0 || r.Writes == 0 || r.WindowWrites == 0 || r.Reads == 0 || r.Releases == 0 {
		t.Fatalf("an operation never ran: %s", r.String())
	}
}

// checkTarget fails the test if the target saw an error, or its counters disagree with
// the initiator's reports.
func checkTarget(t *testing.T, tg *Target, reports ...Report) {
	t.Helper()
	if err := tg.Err(); err != nil {
		t.Fatalf("target: %v", err)
	}
	var sendInv, releases uint64
	for _, r := range reports {
		sendInv += r.SendInvalidates
		releases += r.Releases
	}
	st := tg.Stats()
	// A release's invalidation may still be in progress when the receipt leaves.
	if st.Mismatches != 0 || st.Errors != 0 || st.RemoteInv != sendInv || st.Releases != releases || st.Invalidates > releases {
		t.Fatalf("target stats %+v; initiator: %d send-invalidates, %d releases", st, sendInv, releases)
	}
}

func TestMixOverSimlink(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  simlink.Config
		m    faultlink.Impairments
	}{
		{"clean", simlink.Config{Seed: 1}, faultlink.Impairments{}},
		// Multi-buffer receive as AF_XDP does it: connection management in the first
		// segment (wire.Parse requires it), data split.
		{"jumbo-split", simlink.Config{Seed: 2, MaxPayload: 8972, SplitRx: 1024}, faultlink.Impairments{}},
		{"faults", simlink.Config{Seed: 3, Default: simlink.Impairments{Loss: 0.01}},
			faultlink.Impairments{Drop: 0.01, Reorder: 0.02, Corrupt: 0.02, Duplicate: 0.02}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, _, _ := openSim(t, tc.cfg, tc.m, 7)
			tg := serve(t, b, TargetConfig{})
			in := dial(t, a, b, Config{Seed: 42, QPs: 3, Outstanding: 6, MaxSize: 12000})
			n := uint64(1500)
			if racebuild.Enabled {
				n = 300
			}
			r1 := in.Run(context.Background(), Limits{Requests: n})
			checkReport(t, &r1)
			// Run again on the same connections: receipts count from the connection's start.
			r2 := in.Run(context.Background(), Limits{Requests: n / 5})
			checkReport(t, &r2)
			checkTarget(t, tg, r1, r2)
		})
	}
}

// The checks are real: an initiator that changes its seed after connecting sends messages
// the target finds wrong, and reads a read area that no longer matches.
func TestMismatchesDetected(t *testing.T) {
	a, b, _, _ := openSim(t, simlink.Config{Seed: 4}, faultlink.Impairments{}, 7)
	tg := serve(t, b, TargetConfig{})
	in := dial(t, a, b, Config{Seed: 42, QPs: 2, Outstanding: 4, MaxSize: 4000})
	in.cfg.Seed = 43
	r := in.Run(context.Background(), Limits{Requests: 200})
	t.Log(r.String())
	if r.Mismatches == 0 || r.Reads == 0 {
		t.Fatalf("initiator found no mismatch: %s", r.String())
	}
	bad := uint64(0)
	for _, rc := range r.Receipts {
		if rc == nil {
			t.Fatal("no receipt")
		}
		bad += rc.Mismatches
	}
	if bad == 0 || bad != r.Sends+r.SendInvalidates || tg.Stats().Mismatches != bad {
		t.Fatalf("target found %d bad messages of %d (stats %+v)", bad, r.Sends+r.SendInvalidates, tg.Stats())
	}
	if err := r.Err(); err == nil {
		t.Fatal("Err() is nil for a run with mismatches")
	}
}

// Report's times: a path cut for 400 ms mid-run shows as the longest completion gap (ending
// after the path is back), every data completion moves LastDataCompletion, and a clean run
// has no FirstFailureAt.
func TestReportTimes(t *testing.T) {
	la, lb := simlink.Pair(simlink.Config{Seed: 5})
	a, b := openOn(t, la), openOn(t, lb)
	serve(t, b, TargetConfig{})
	in := dial(t, a, b, Config{Seed: 43, QPs: 2, Outstanding: 4, MaxSize: 4000})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan Report, 1)
	start := time.Now()
	go func() { done <- in.Run(ctx, Limits{Duration: 20 * time.Second, Requests: 1 << 20}) }()
	waitProgress := func(n uint64) {
		p := in.Progress()
		deadline := time.Now().Add(10 * time.Second)
		for in.Progress() < p+n {
			if time.Now().After(deadline) {
				cancel()
				<-done
				t.Fatalf("fewer than %d completions in 10 s", n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitProgress(200)
	net := la.Network()
	net.Partition(la.LocalAddr(), lb.LocalAddr())
	cut := 400 * time.Millisecond
	time.Sleep(cut)
	net.Heal(la.LocalAddr(), lb.LocalAddr())
	healed := time.Now()
	waitProgress(200)
	cancel()
	r := <-done
	end := time.Now()
	checkReport(t, &r)
	// What was in flight at the cut may complete just after it, hence the slack.
	if r.LongestGap < cut-50*time.Millisecond || r.GapEnd.Before(healed) {
		t.Errorf("longest gap %v ending %v after the heal, want at least %v ending after it", r.LongestGap,
			r.GapEnd.Sub(healed), cut-50*time.Millisecond)
	}
	if r.LastDataCompletion.Before(healed) || r.LastDataCompletion.After(end) || !r.FirstFailureAt.IsZero() {
		t.Errorf("last data completion %v, first failure %v; run from %v to %v", r.LastDataCompletion, r.FirstFailureAt, start, end)
	}
}
