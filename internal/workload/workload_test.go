package workload

import (
	"context"
	"testing"

	"github.com/xdpndk/xdpndk/internal/faultlink"
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
			if raceEnabled {
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
