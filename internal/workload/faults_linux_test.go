package workload

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/bpf"
	"github.com/xdpndk/xdpndk/internal/faultlink"
	"github.com/xdpndk/xdpndk/internal/plumb"
	"github.com/xdpndk/xdpndk/internal/racebuild"
	"github.com/xdpndk/xdpndk/internal/testbed"
)

// faultCase is one row of TestFaultsAFXDP.
type faultCase struct {
	drop    float64               // the XDP program's drop probability, both directions
	wrapper faultlink.Impairments // the wrappers' impairments of both adapters' transmissions
}

// qpTotals sums the transport counters of an initiator's data QPs.
func qpTotals(in *Initiator) (retx, rto uint64) {
	for _, q := range in.QPs() {
		st := plumb.QP(q).Stats()
		retx += st.Retransmits
		rto += st.Timeouts
	}
	return retx, rto
}

func programCounters(t *testing.T, s xdpSide) bpf.Counters {
	t.Helper()
	c, err := s.dev.Program().Counters()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// settle waits until read returns the same values for 50 ms (at most 1 s).
func settle[T comparable](read func() T) {
	last, since := read(), time.Now()
	for end := time.Now().Add(time.Second); time.Now().Before(end) && time.Since(since) < 50*time.Millisecond; {
		time.Sleep(5 * time.Millisecond)
		if v := read(); v != last {
			last, since = v, time.Now()
		}
	}
}

// The verb mix over AF_XDP between two namespace hosts while the XDP programs drop 0.1%, 1%
// and 10% of our packets in both directions, each alone and with the faultlink wrappers
// also duplicating, reordering and corrupting a few percent of what each adapter
// transmits: every request completes successfully, every byte checks out at both ends, and
// every corrupted datagram that arrived was refused by the CRC. Each case is bounded in
// bytes and time; the numbers are logged.
func TestFaultsAFXDP(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	a := openXDP(t, bed.A, xdpConfig(), faultlink.Config{Seed: 101}, ndkOptions())
	b := openXDP(t, bed.B, xdpConfig(), faultlink.Config{Seed: 202}, ndkOptions())
	tg := serve(t, b.a, TargetConfig{})
	in := dial(t, a.a, b.a, Config{Seed: 7, QPs: 4, Outstanding: 8, MaxSize: 16 << 10})

	few := faultlink.Impairments{Reorder: 0.03, Corrupt: 0.02, Duplicate: 0.03}
	cases := []faultCase{{}} // a baseline without faults
	for _, p := range []float64{0.001, 0.01, 0.10} {
		cases = append(cases, faultCase{drop: p}, faultCase{drop: p, wrapper: few})
	}
	lim := Limits{Bytes: 24 << 20, Duration: 3 * time.Second, Drain: 20 * time.Second}
	if racebuild.Enabled {
		lim.Bytes, lim.Duration = 2<<20, 700*time.Millisecond
	}
	var reports []Report
	for i, c := range cases {
		name := "no-faults"
		if c.drop > 0 {
			name = fmt.Sprintf("xdp-drop=%g%%", c.drop*100)
		}
		if c.wrapper != (faultlink.Impairments{}) {
			name += fmt.Sprintf("+dup=%g%%+reorder=%g%%+corrupt=%g%%", c.wrapper.Duplicate*100, c.wrapper.Reorder*100, c.wrapper.Corrupt*100)
		}
		seed := uint64(1000 + i)
		for _, s := range []xdpSide{a, b} {
			if err := s.dev.Program().SetFaultDrop(c.drop, seed); err != nil {
				t.Fatal(err)
			}
			if err := s.fl.SetImpairments(c.wrapper); err != nil {
				t.Fatal(err)
			}
		}
		pa0, pb0 := programCounters(t, a), programCounters(t, b)
		fa0, fb0 := a.fl.FaultStats(), b.fl.FaultStats()
		ea0, eb0 := plumb.Engine(a.a).Stats(), plumb.Engine(b.a).Stats()
		retx0, rto0 := qpTotals(in)

		r := in.Run(context.Background(), lim)
		reports = append(reports, r)
		// A datagram corrupted at the end of the run may still be on its way when Run
		// returns (an acknowledgement, a late retransmission): let the counters settle, so
		// that it is counted in this case and not in the next one's.
		settle(func() [2]uint64 {
			return [2]uint64{plumb.Engine(a.a).Stats().Malformed, plumb.Engine(b.a).Stats().Malformed}
		})

		pa, pb := programCounters(t, a), programCounters(t, b)
		fa, fb := a.fl.FaultStats(), b.fl.FaultStats()
		ea, eb := plumb.Engine(a.a).Stats(), plumb.Engine(b.a).Stats()
		retx, rto := qpTotals(in)
		t.Logf("%s: %.1f MB in %v, %d ops, %d completions; initiator QPs: %d retransmits, %d RTOs; "+
			"XDP dropped A %d B %d; wrapper A/B: dup %d/%d reorder %d/%d corrupt %d/%d; CRC-refused at A %d B %d",
			name, float64(r.Bytes)/1e6, r.Elapsed.Round(time.Millisecond), r.Started, r.Completions, retx-retx0, rto-rto0,
			pa.FaultDropped-pa0.FaultDropped, pb.FaultDropped-pb0.FaultDropped,
			fa.Duplicated-fa0.Duplicated, fb.Duplicated-fb0.Duplicated, fa.Reordered-fa0.Reordered, fb.Reordered-fb0.Reordered,
			fa.Corrupted-fa0.Corrupted, fb.Corrupted-fb0.Corrupted, ea.Malformed-ea0.Malformed, eb.Malformed-eb0.Malformed)
		if err := r.Err(); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, r.String())
		}
		if r.Started == 0 || r.Bytes == 0 {
			t.Fatalf("%s: nothing ran", name)
		}
		// A corrupted datagram is refused by the receiving engine (its CRC32C fails), unless
		// the receiver's XDP program dropped it first; nothing else arrives malformed.
		checkCorrupt := func(side string, corrupted uint64, malformed uint64) {
			if malformed > corrupted || (corrupted >= 20 && malformed == 0) {
				t.Errorf("%s: %d datagrams corrupted towards %s, %d refused as malformed there", name, corrupted, side, malformed)
			}
		}
		checkCorrupt("B", fa.Corrupted-fa0.Corrupted, eb.Malformed-eb0.Malformed)
		checkCorrupt("A", fb.Corrupted-fb0.Corrupted, ea.Malformed-ea0.Malformed)
		if c.drop >= 0.01 && (pa.FaultDropped == pa0.FaultDropped || pb.FaultDropped == pb0.FaultDropped) {
			t.Errorf("%s: the XDP programs dropped nothing", name)
		}
	}
	for _, s := range []xdpSide{a, b} {
		_ = s.dev.Program().SetFaultDrop(0, 0)
		_ = s.fl.SetImpairments(faultlink.Impairments{})
	}
	checkTarget(t, tg, reports...)
}
