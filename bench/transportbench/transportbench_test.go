package transportbench

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/memreg"

	"github.com/xdpndk/xdpndk/transport/link"
)

func TestParse(t *testing.T) {
	l, err := ParseLosses("0, 0.1,1%,5")
	if err != nil || !reflect.DeepEqual(l, []float64{0, 0.001, 0.01, 0.05}) {
		t.Errorf("ParseLosses = %v, %v", l, err)
	}
	if _, err := ParseLosses("x"); err == nil {
		t.Error("ParseLosses(x) did not fail")
	}
	s, err := ParseSeeds("3")
	if err != nil || !reflect.DeepEqual(s, []uint64{1, 2, 3}) {
		t.Errorf("ParseSeeds(3) = %v, %v", s, err)
	}
	s, err = ParseSeeds("7,11")
	if err != nil || !reflect.DeepEqual(s, []uint64{7, 11}) {
		t.Errorf("ParseSeeds(7,11) = %v, %v", s, err)
	}
	for _, bad := range []string{"0", "101", "a", "1,b"} {
		if _, err := ParseSeeds(bad); err == nil {
			t.Errorf("ParseSeeds(%q) did not fail", bad)
		}
	}
	if m := ParseModes("all"); !reflect.DeepEqual(m, AllModes) {
		t.Errorf("ParseModes(all) = %v", m)
	}
}

func TestOptionsValidation(t *testing.T) {
	for name, mod := range map[string]func(*Options){
		"duration":    func(o *Options) { o.Duration = 0 },
		"seeds":       func(o *Options) { o.Seeds = nil },
		"loss":        func(o *Options) { o.Losses = []float64{1} },
		"mode":        func(o *Options) { o.Modes = []string{"tcp"} },
		"bandwidth":   func(o *Options) { o.Bandwidth = 10 },
		"outstanding": func(o *Options) { o.Outstanding = 0 },
		"override":    func(o *Options) { o.FixedWindow = -1 },
	} {
		o := QuickOptions()
		mod(&o)
		if _, _, err := Run(context.Background(), o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: Run = %v, want ErrInvalidOptions", name, err)
		}
	}
	o := DefaultOptions()
	o.Losses = []float64{0.05, 0, 0.05}
	o.Modes = []string{ModeGoBackN, ModeSelective}
	n, err := o.normalize()
	if err != nil || !reflect.DeepEqual(n.Losses, []float64{0, 0.05}) || !reflect.DeepEqual(n.Modes, AllModes) {
		t.Errorf("normalize: %v %v %v", n.Losses, n.Modes, err)
	}
}

// tinyOptions is a run short enough for a unit test: 3 ms of virtual time.
func tinyOptions() Options {
	o := DefaultOptions()
	o.Duration = 3 * time.Millisecond
	o.Warmup = time.Millisecond
	o.Seeds = []uint64{1}
	o.Losses = []float64{0, 0.01}
	return o
}

// A run moves data, counts what it should, and is deterministic for a seed.
func TestRunCase(t *testing.T) {
	o := tinyOptions()
	c := Case{Loss: 0.01, Mode: ModeSelective, Seed: 5}
	r1 := RunCase(context.Background(), o, c)
	if r1.Err != nil {
		t.Fatal(r1.Err)
	}
	if r1.GoodputGbps <= 0 || r1.GoodputGbps > float64(o.Bandwidth)/1e9 || r1.Writes == 0 || r1.TxPackets == 0 {
		t.Fatalf("implausible result %+v", r1)
	}
	if r1.DataLost == 0 || r1.Retransmits == 0 {
		t.Errorf("1%% loss but %d lost, %d retransmitted", r1.DataLost, r1.Retransmits)
	}
	if r1.CwndMean <= 0 || r1.SRTTMean <= float64(2*o.Latency) || r1.WireUtil <= 0 || r1.WireUtil > 1.0001 {
		t.Errorf("means: cwnd %v srtt %v util %v", r1.CwndMean, r1.SRTTMean, r1.WireUtil)
	}
	r2 := RunCase(context.Background(), o, c)
	if r1.GoodputGbps != r2.GoodputGbps || r1.TxPackets != r2.TxPackets || r1.Retransmits != r2.Retransmits || r1.Steps != r2.Steps {
		t.Errorf("same seed, different runs:\n%+v\n%+v", r1, r2)
	}
	// The clean network: no loss, no retransmission.
	r0 := RunCase(context.Background(), o, Case{Mode: ModeSelective, Seed: 5})
	if r0.Err != nil || r0.Retransmits != 0 || r0.DataLost != 0 {
		t.Errorf("clean run: %+v", r0)
	}
	// A cancelled context stops a run.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if r := RunCase(ctx, o, c); !errors.Is(r.Err, context.Canceled) {
		t.Errorf("cancelled run: %v", r.Err)
	}
}

// Run and Collect produce every figure, the ratios and the goals, and the JSON survives a
// round trip.
func TestRunCollectJSON(t *testing.T) {
	o := tinyOptions()
	res, runs, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 4 {
		t.Fatalf("%d runs, want 4", len(runs))
	}
	for _, l := range []float64{0, 1} {
		for _, m := range AllModes {
			rec := res.Find(BenchGoodput, m, l, MetricGoodput)
			if rec == nil || len(rec.Runs) != 1 || rec.Value <= 0 || rec.Unit != UnitGbps || rec.Size != o.MsgSize {
				t.Errorf("goodput %s at %g%%: %+v", m, l, rec)
			}
		}
	}
	for _, name := range []string{RatioLossless, RatioGoBackN} {
		rec := res.Find(BenchRatio, name, 1, MetricRatio)
		if rec == nil || rec.Value <= 0 || len(rec.Runs) != 1 || !strings.Contains(rec.Note, "goal") {
			t.Errorf("ratio %s: %+v", name, rec)
		}
	}
	measured := 0
	for _, g := range res.Header.Goals {
		if g.Evaluated {
			measured++
		}
	}
	if len(res.Header.Goals) != len(Goals) || measured != 2 { // no 0.1% run: that goal is not measured
		t.Errorf("goals %+v", res.Header.Goals)
	}
	path := filepath.Join(t.TempDir(), "out", "transport.json")
	if err := res.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := res.Document(); !reflect.DeepEqual(back, want) {
		t.Errorf("the document changed in the JSON round trip:\n got %+v\nwant %+v", back, want)
	}
	if len(back.Records) != len(res.Records) || back.Records[0].Params[ParamLoss] != 0 || back.Header.Bed.Link != "simlink" || back.Header.Bed.MTU != o.MaxPayload+28 {
		t.Errorf("document: %d records (want %d), first %+v, bed %+v", len(back.Records), len(res.Records), back.Records[0], back.Header.Bed)
	}
	var b strings.Builder
	if err := res.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"selective", "gobackn", "Goals", RatioGoBackN, "not measured"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// Ratios are ratios of medians; per-seed ratios pair equal seeds; failed runs are marked.
func TestCollectRatios(t *testing.T) {
	o := DefaultOptions()
	o.Seeds = []uint64{1, 2, 3}
	o.Losses = []float64{0, 0.01}
	var runs []CaseResult
	for i, s := range o.Seeds {
		f := float64(i + 1)
		runs = append(runs,
			CaseResult{Case: Case{Loss: 0, Mode: ModeSelective, Seed: s}, GoodputGbps: 10 * f},
			CaseResult{Case: Case{Loss: 0, Mode: ModeGoBackN, Seed: s}, GoodputGbps: 10 * f},
			CaseResult{Case: Case{Loss: 0.01, Mode: ModeSelective, Seed: s}, GoodputGbps: 8 * f},
			CaseResult{Case: Case{Loss: 0.01, Mode: ModeGoBackN, Seed: s}, GoodputGbps: 2 * f},
		)
	}
	runs[3].Err = errors.New("boom")
	res := Collect(o, runs)
	ll := res.Find(BenchRatio, RatioLossless, 1, MetricRatio)
	gb := res.Find(BenchRatio, RatioGoBackN, 1, MetricRatio)
	if ll == nil || math.Abs(ll.Value-0.8) > 1e-12 || !reflect.DeepEqual(ll.Runs, []float64{0.8, 0.8, 0.8}) {
		t.Errorf("lossless ratio %+v", ll)
	}
	if gb == nil || math.Abs(gb.Value-4) > 1e-12 || !strings.Contains(gb.Note, "met") {
		t.Errorf("go-back-N ratio %+v", gb)
	}
	if f := res.Find(BenchGoodput, ModeGoBackN, 1, MetricFailed); f == nil || !reflect.DeepEqual(f.Runs, []float64{1, 0, 0}) {
		t.Errorf("failed record %+v", f)
	}
	if r := res.Find(BenchGoodput, ModeGoBackN, 1, MetricRetxPerPkt); r == nil || len(r.Runs) != 2 {
		t.Errorf("a failed run's other figures should be left out: %+v", r)
	}
	found := false
	for _, n := range res.Header.Notes {
		found = found || strings.Contains(n, "FAILED") && strings.Contains(n, "boom")
	}
	if !found {
		t.Errorf("no note names the failed run: %q", res.Header.Notes)
	}
	for _, g := range res.Header.Goals {
		if g.Loss == 1 && (!g.Evaluated || !g.Met) {
			t.Errorf("goal %+v should be met", g)
		}
	}
}

// The Pair's Wrap hook sees every datagram, and Region refuses what it does not hold.
func TestPairWrapAndRegion(t *testing.T) {
	var seen int
	p, err := NewPair(PairConfig{
		Seed: 1,
		Wrap: func(side int, l link.Link) link.Link {
			if side == 0 {
				return countingLink{Link: l, n: &seen}
			}
			return l
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if seen == 0 {
		t.Error("the wrapper saw no datagram of the connection set-up")
	}
	r := &Region{Buf: make([]byte, 100)}
	if b, err := r.Resolve(0, RegionToken, RegionBase+10, 90, memreg.AccessRemoteWrite); err != nil || b.Len() != 90 || &b.Buf[0] != &r.Buf[10] {
		t.Errorf("Resolve in bounds: %d bytes, %v", b.Len(), err)
	}
	for _, c := range []struct {
		pd, token uint32
		addr      uint64
		n         uint32
	}{{1, RegionToken, RegionBase, 1}, {0, 1, RegionBase, 1}, {0, RegionToken, RegionBase - 1, 1}, {0, RegionToken, RegionBase + 10, 91}} {
		if _, err := r.Resolve(c.pd, c.token, c.addr, c.n, memreg.AccessRemoteRead); !errors.Is(err, memreg.ErrAccess) {
			t.Errorf("Resolve(%+v) = %v, want ErrAccess", c, err)
		}
	}
}

type countingLink struct {
	link.Link
	n *int
}

func (c countingLink) Send(pkts []link.Packet) (int, error) {
	n, err := c.Link.Send(pkts)
	*c.n += n
	return n, err
}
