package linkbench

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/xdpndk/xdpndk/bench/internal/report"
)

func TestCollector(t *testing.T) {
	c := newCollector()
	for _, v := range []float64{3, 1, 2} {
		c.add(BenchOneWay, SystemXDPNDK, OpSend, 64, MetricPPS, UnitPPS, v)
	}
	c.add(BenchOneWay, SystemXDPNDK, OpSend, 64, MetricLoss, UnitPercent, math.NaN()) // not recorded at all
	c.unsupported(BenchOneWay, SystemAsavie, OpSend, 9000, "no multi-buffer")
	c.add(BenchPingPong, SystemKernelUDP, OpRTT, PingSize, MetricRTTP50, UnitMicros, 20)
	c.add(BenchPingPong, SystemKernelUDP, OpRTT, PingSize, MetricRTTP50, UnitMicros, 30)

	got := c.records()
	want := []Record{
		{Subject: report.Subject{Benchmark: BenchOneWay, System: SystemXDPNDK, Op: OpSend, Size: 64}, Figure: report.Figure{Metric: MetricPPS, Value: 2, Unit: UnitPPS, Runs: []float64{3, 1, 2}}},
		{Subject: report.Subject{Benchmark: BenchOneWay, System: SystemAsavie, Op: OpSend, Size: 9000}, Figure: report.Figure{Metric: MetricUnsupported, Runs: []float64{}, Note: "no multi-buffer"}},
		{Subject: report.Subject{Benchmark: BenchPingPong, System: SystemKernelUDP, Op: OpRTT, Size: PingSize}, Figure: report.Figure{Metric: MetricRTTP50, Value: 25, Unit: UnitMicros, Runs: []float64{20, 30}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("records:\n got %+v\nwant %+v", got, want)
	}
}

// sampleResults is a small but complete document.
func sampleResults() *Results {
	c := newCollector()
	for _, sys := range []string{SystemXDPNDK, SystemAsavie, SystemKernelUDP} {
		for run, f := range []float64{1, 1.2, 0.9} {
			base := map[string]float64{SystemXDPNDK: 1e6, SystemAsavie: 5e5, SystemKernelUDP: 1e5}[sys] * f
			c.add(BenchOneWay, sys, OpSend, 64, MetricPPS, UnitPPS, base)
			c.add(BenchOneWay, sys, OpSend, 64, MetricGbps, UnitGbps, base*64*8/1e9)
			c.add(BenchOneWay, sys, OpSend, 64, MetricTxPPS, UnitPPS, base)
			c.add(BenchOneWay, sys, OpSend, 64, MetricLoss, UnitPercent, float64(run))
			c.add(BenchPingPong, sys, OpRTT, PingSize, MetricRTTP50, UnitMicros, 10*f)
			c.add(BenchPingPong, sys, OpRTT, PingSize, MetricRTTP99, UnitMicros, 20*f)
		}
	}
	c.unsupported(BenchOneWay, SystemAsavie, OpSend, 9000, "no multi-buffer")
	h := machineHeader()
	h.MTU = BedMTU
	h.Modes[SystemXDPNDK] = "xdp=native af_xdp=copy+sg+need_wakeup pages=thp"
	h.Config = Config{Runs: 3, Sizes: []int{64, 9000}, Systems: []string{SystemXDPNDK, SystemAsavie, SystemKernelUDP}}
	h.Notes = append(h.Notes, "a note")
	return &Results{Header: h, Records: c.records()}
}

func TestJSONRoundTrip(t *testing.T) {
	r := sampleResults()
	path := filepath.Join(t.TempDir(), "out", "results.json")
	if err := r.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := r.Document(); !reflect.DeepEqual(want, back) {
		t.Errorf("round trip changed the document:\n got %+v\nwant %+v", back, want)
	}
	if len(back.Records) != len(r.Records) || back.Header.Tool != Tool || back.SchemaVersion != report.SchemaVersion {
		t.Errorf("document: tool %q, schema %d, %d records; want %q, %d, %d", back.Header.Tool, back.SchemaVersion, len(back.Records), Tool, report.SchemaVersion, len(r.Records))
	}
	rec := back.Find(report.Key{Bench: Tool, Scenario: BenchOneWay, System: SystemXDPNDK, Operation: OpSend, Size: 64, Metric: MetricPPS})
	if rec == nil || rec.Value != 1e6 || len(rec.Runs) != 3 || rec.Unit != UnitPPS {
		t.Errorf("Find(xdpndk pps) = %+v", rec)
	}
	if u := back.Find(report.Key{Bench: Tool, Scenario: BenchOneWay, System: SystemAsavie, Operation: OpSend, Size: 9000, Metric: MetricUnsupported}); u == nil || u.Note == "" || u.Runs == nil || len(u.Runs) != 0 {
		t.Errorf("unsupported record = %+v, want a note and empty runs", u)
	}
	h := back.Header
	if h.Kernel == "" || h.Go == "" || h.CPUs < 1 || h.Time == "" || h.Bed.MTU != BedMTU || h.Bed.Link != "veth" || h.Params["runs"] != 3.0 {
		t.Errorf("header incomplete: %+v", h)
	}
}

func TestWriteTable(t *testing.T) {
	var b strings.Builder
	if err := sampleResults().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	flat := strings.Join(strings.Fields(out), " ") // compare without column padding
	for _, want := range []string{
		"One-way", "Ping-pong", "xdpndk / asavie",
		"raw-xdpndk 64 1.000 0.51 1.000 1.00 -",
		"raw-asavie 9000 unsupported: no multi-buffer",
		"kernel-udp 10.00 - 20.00 - -",
		"one-way 64 B rx pkt/s (higher is better) 2.00",
		"ping-pong p50 (lower is better) 1.00",
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestOptions(t *testing.T) {
	o, err := DefaultOptions().normalize()
	if err != nil {
		t.Fatal(err)
	}
	if o.MaxPackets == 0 || o.Logger == nil || !reflect.DeepEqual(o.Systems, AllSystems) || o.AsavieQueue != 1 {
		t.Errorf("defaults not filled: %+v", o)
	}
	q := QuickOptions()
	q.Systems = []string{SystemKernelUDP, SystemXDPNDK}
	if q, err = q.normalize(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(q.Systems, []string{SystemXDPNDK, SystemKernelUDP}) {
		t.Errorf("systems not put in canonical order: %v", q.Systems)
	}
	for name, mod := range map[string]func(*Options){
		"size too small":   func(o *Options) { o.Sizes = []int{20} },
		"size above mtu":   func(o *Options) { o.Sizes = []int{9001} },
		"unknown system":   func(o *Options) { o.Systems = []string{"dpdk"} },
		"duplicate system": func(o *Options) { o.Systems = []string{SystemKernelUDP, SystemKernelUDP} },
		"no system":        func(o *Options) { o.Systems = nil },
		"zero runs":        func(o *Options) { o.Runs = 0 },
		"zero duration":    func(o *Options) { o.Duration = 0 },
		"huge batch":       func(o *Options) { o.Batch = 5000 },
		"asavie on ours":   func(o *Options) { o.AsavieQueue = -1 },
		"asavie queue 64":  func(o *Options) { o.AsavieQueue = 64 },
	} {
		o := DefaultOptions()
		mod(&o)
		if _, err := o.normalize(); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: err = %v, want ErrInvalidOptions", name, err)
		}
	}
}

func TestParse(t *testing.T) {
	s, err := ParseSizes(" 64, 1500,,9000 ")
	if err != nil || !reflect.DeepEqual(s, []int{64, 1500, 9000}) {
		t.Errorf("ParseSizes = %v, %v", s, err)
	}
	if _, err := ParseSizes("64,big"); err == nil {
		t.Error("ParseSizes accepted a non-number")
	}
	if s, err := ParseSizes(""); err != nil || len(s) != 0 {
		t.Errorf("ParseSizes(\"\") = %v, %v", s, err)
	}
	if got := ParseSystems("all"); !reflect.DeepEqual(got, AllSystems) {
		t.Errorf("ParseSystems(all) = %v", got)
	}
	if got := ParseSystems("asavie, kernel-udp,raw-xdpndk"); !reflect.DeepEqual(got, []string{SystemAsavie, SystemKernelUDP, SystemXDPNDK}) {
		t.Errorf("ParseSystems = %v", got)
	}
}

func TestFillPattern(t *testing.T) {
	a, b := make([]byte, 100), make([]byte, 100)
	fillPattern(a, 7)
	fillPattern(b, 8)
	if seqOf(a) != 7 || seqOf(b) != 8 || string(a[8:]) == string(b[8:]) {
		t.Errorf("patterns of 7 and 8 not distinct or seq not readable")
	}
	putSeq(a, 9)
	if seqOf(a) != 9 {
		t.Errorf("putSeq/seqOf disagree")
	}
	if seqOf(a[:7]) != 0 {
		t.Errorf("seqOf of a short payload is not 0")
	}
}

// TestAsavieAvailability: where github.com/asavie/xdp builds, asavie is one of AllSystems
// and may be chosen; where it does not (linux/386: `GOARCH=386 go test ./bench/linkbench`
// runs that half), AllSystems leaves it out and Options naming it are refused with the
// reason.
func TestAsavieAvailability(t *testing.T) {
	o := QuickOptions()
	o.Systems = []string{SystemAsavie}
	_, err := o.normalize()
	if errAsavieUnavailable == nil {
		if !slices.Contains(AllSystems, SystemAsavie) {
			t.Errorf("AllSystems = %v lacks %s, which builds here", AllSystems, SystemAsavie)
		}
		if err != nil {
			t.Errorf("choosing %s: %v", SystemAsavie, err)
		}
		return
	}
	if slices.Contains(AllSystems, SystemAsavie) {
		t.Errorf("AllSystems = %v has %s, which is unavailable: %v", AllSystems, SystemAsavie, errAsavieUnavailable)
	}
	if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(fmt.Sprint(err), "not available on") {
		t.Errorf("choosing %s: err = %v, want ErrInvalidOptions saying it is not available", SystemAsavie, err)
	}
}
