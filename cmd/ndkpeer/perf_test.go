//go:build linux

package main

import (
	"encoding/json"
	"io"
	"math"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/cmd/ndkpeer/internal/hist"
	"github.com/xdpndk/xdpndk/cmd/ndkpeer/internal/proto"
	"github.com/xdpndk/xdpndk/ndk"
)

func TestParsePerfFlags(t *testing.T) {
	o, _, code := parseClient("write-bw", proto.KindWriteBW, []string{"-i", "x", "h", "--cpu-util", "-e", "-b", "--rate", "2k"}, io.Discard)
	if code != -1 || !o.cpuUtil || !o.events || !o.bidir || o.rate != 2000 || o.infinite || !o.needsCtl() {
		t.Fatalf("write-bw --cpu-util -e -b --rate 2k: code %d, %+v", code, o)
	}
	o, _, code = parseClient("send-bw", proto.KindSendBW, []string{"-i", "x", "--bidirectional", "--events", "-t", "16", "h"}, io.Discard)
	if code != -1 || !o.bidir || !o.events || o.cpuUtil || o.revRecvs() != 32 {
		t.Fatalf("send-bw --bidirectional --events: code %d, %+v (receives %d)", code, o, o.revRecvs())
	}
	o, _, code = parseClient("send-lat", proto.KindSendLat, []string{"-i", "x", "-D", "0", "h"}, io.Discard)
	if code != -1 || !o.infinite || o.iters != 0 || o.duration != 0 {
		t.Fatalf("-D 0: code %d, %+v", code, o)
	}
	o, _, code = parseClient("read-lat", proto.KindReadLat, []string{"-i", "x", "--infinite", "--rate", "1.5M", "h"}, io.Discard)
	if code != -1 || !o.infinite || o.rate != 1_500_000 || o.needsCtl() {
		t.Fatalf("--infinite --rate 1.5M: code %d, %+v", code, o)
	}
	o, _, code = parseClient("read-lat", proto.KindReadLat, []string{"-i", "x", "-D", "3", "h"}, io.Discard)
	if code != -1 || o.infinite || o.duration != 3*time.Second {
		t.Fatalf("-D 3: code %d, %+v", code, o)
	}
	o, _, code = parseClient("send-lat", proto.KindSendLat, []string{"-i", "x", "h"}, io.Discard)
	if code != -1 || o.infinite || o.cpuUtil || o.events || o.bidir || o.rate != 0 || o.needsCtl() {
		t.Fatalf("defaults: code %d, %+v", code, o)
	}
	for _, args := range [][]string{
		{"-i", "x", "-b", "h"},                    // -b of a latency test
		{"-i", "x", "--rate", "-5", "h"},          // negative
		{"-i", "x", "--rate", "200M", "h"},        // over the limit
		{"-i", "x", "--rate", "0.1", "h"},         // under one a second
		{"-i", "x", "--rate", "fast", "h"},        // not a number
		{"-i", "x", "-D", "0", "-n", "5", "h"},    // -D 0 with -n
		{"-i", "x", "--infinite", "-n", "5", "h"}, // same
		{"-i", "x", "--infinite", "-D", "5", "h"}, // a duration and infinite
		{"-i", "x", "-D", "0", "-a", "h"},         // until Ctrl-C over every size
		{"-i", "x", "--cpu-util=maybe", "h"},      // not a boolean
	} {
		if _, _, code := parseClient("write-lat", proto.KindWriteLat, args, io.Discard); code != exitUsage {
			t.Errorf("parseClient(%q) = exit %d, want %d", args, code, exitUsage)
		}
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1": 1, "2000": 2000, "2k": 2000, "2K": 2000, "1.5M": 1_500_000, " 50k ": 50_000, "100M": 100_000_000} {
		if got, err := parseRate(in); err != nil || got != want {
			t.Errorf("parseRate(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "k", "-1", "1e9", "NaN", "0.4"} {
		if _, err := parseRate(in); err == nil {
			t.Errorf("parseRate(%q) accepted", in)
		}
	}
}

// TestPacerHoldsRate: a poster that posts whenever the pacer allows holds the rate
// exactly, whatever the rate's remainder; one that stalls catches up on up to the slack.
func TestPacerHoldsRate(t *testing.T) {
	for _, rate := range []int64{1, 3, 2000, 7919, 1_000_000, 3_000_000} {
		p := newPacer(rate, 0)
		var posts int64
		step := max(int64(1e9)/rate/7, 1)
		for now := int64(0); now < 2e9; now += step {
			for p.due(now) {
				p.took(now)
				posts++
			}
		}
		if want := 2 * rate; posts < want-1 || posts > want+1 {
			t.Errorf("rate %d: %d posts in 2 s, want %d", rate, posts, want)
		}
	}
	// A stall of 50 ms at 2000/s is caught up (100 posts at once); one of 3 s loses what
	// is past the second of slack.
	p := newPacer(2000, 0)
	p.took(0)
	n := 0
	for p.due(50e6 + 1) {
		p.took(50e6 + 1)
		n++
	}
	if n < 99 || n > 101 {
		t.Errorf("after a 50 ms stall: %d posts at once, want 100", n)
	}
	p = newPacer(2000, 0)
	p.took(0)
	n = 0
	for p.due(3e9) {
		p.took(3e9)
		n++
	}
	if n < 1999 || n > 2002 {
		t.Errorf("after a 3 s stall: %d posts at once, want about 2000 (the slack)", n)
	}
	if un := newPacer(0, 5); !un.due(0) || un.rate != 0 {
		t.Error("an unpaced pacer holds back")
	}
}

// jsonKeys returns the keys of a JSON object, nested objects as "outer.inner".
func jsonKeys(t *testing.T, v any) []string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal %T: %v", v, err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k, x := range m {
		if sub, ok := x.(map[string]any); ok {
			for kk := range sub {
				keys = append(keys, k+"."+kk)
			}
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestIntervalSchema: an interval in which nothing completed has every field, all 0 (the
// same keys as a full one), in the document and as a streamed line.
func TestIntervalSchema(t *testing.T) {
	empty := interval{Bytes: 64, StartS: 1, EndS: 2}
	empty.CPU = cpuFigures(cpuTimes{}, 0, cpuTimes{}, 0, 0, true, true) // no message, no time: no NaN
	full := interval{Bytes: 64, StartS: 0, EndS: 1, Iterations: 10, MsgPerS: 10, Gbps: 1, Mmsgs: 1e-5, P50US: 5, P99US: 9,
		MaxUS: 10, PerftestTypicalUS: 2.5, ReverseIterations: 9, ReverseGbps: 1, ReverseMmsgs: 1, SumGbps: 2, SumMmsgs: 2,
		CPU: cpuFigures(cpuTimes{1e6, 1e6}, 1e9, cpuTimes{1e6, 0}, 1e9, 19, false, true)}
	ek, fk := jsonKeys(t, empty), jsonKeys(t, full)
	if !slices.Equal(ek, fk) {
		t.Fatalf("an empty interval's fields differ from a full one's:\n%v\n%v", ek, fk)
	}
	want := []string{"bytes", "start_s", "end_s", "iterations", "msg_per_s", "gbit_per_s", "mmsg_per_s", "p50_us", "p99_us",
		"max_us", "perftest_t_typical_us", "reverse_iterations", "reverse_gbit_per_s", "reverse_mmsg_per_s", "sum_gbit_per_s",
		"sum_mmsg_per_s", "cpu.measured", "cpu.messages", "cpu.client_us_per_msg", "cpu.server_us_per_msg", "cpu.both_us_per_msg",
		"cpu.client_cores", "cpu.server_cores", "cpu.both_cores", "cpu.client_user_s", "cpu.client_sys_s", "cpu.server_user_s",
		"cpu.server_sys_s", "cpu.client_polls", "cpu.server_polls"}
	slices.Sort(want)
	if !slices.Equal(ek, want) {
		t.Errorf("interval fields\n got %v\nwant %v", ek, want)
	}
	b, _ := json.Marshal(empty)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	for k, v := range m {
		if f, ok := v.(float64); ok && f != 0 && k != "bytes" && k != "start_s" && k != "end_s" {
			t.Errorf("empty interval: %s = %v, want 0", k, v)
		}
	}
	// A streamed line is the interval's fields with schema_version and record.
	lk := jsonKeys(t, intervalRecord{SchemaVersion: schemaVersion, Record: "interval", interval: empty})
	if !slices.Equal(lk, slices.Sorted(slices.Values(append(slices.Clone(want), "schema_version", "record")))) {
		t.Errorf("streamed interval fields: %v", lk)
	}
	if !strings.Contains(string(mustJSON(t, intervalRecord{SchemaVersion: schemaVersion, Record: "interval", interval: empty})), `"schema_version":2`) {
		t.Error("no schema_version 2 in a streamed interval")
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDocumentSchema: a document without intervals says so with an empty list, carries
// schema_version, and its result lines carry the perftest and CPU figures.
func TestDocumentSchema(t *testing.T) {
	d := clientDoc{SchemaVersion: schemaVersion, Record: "result", Intervals: []interval{},
		Latency: []latResult{withPerftest(latResult{Bytes: 64, Iterations: 3, MinUS: 2, P50US: 4, P99US: 6, P999US: 6, MaxUS: 6, MeanUS: 4}, proto.KindSendLat)}}
	b := mustJSON(t, d)
	for _, want := range []string{`"schema_version":2`, `"intervals":[]`, `"intervals_streamed":false`, `"latency_timed":""`,
		`"perftest_factor":0.5`, `"perftest_t_typical_us":2`, `"perftest_t_avg_us":2`, `"cpu":{"measured":false`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("document lacks %s: %s", want, b)
		}
	}
	c := retxCounts{retransmits: 9, timeouts: 2, byTimer: 3, spurious: 1, probes: 4, needless: 1, byLoss: 2, byRNR: 0}
	bw := mustJSON(t, bwResult{Retransmits: c.retransmits, RetransmitCauses: c.json()})
	if want := `"retransmits":9,"retransmit_causes":{"loss":2,"timer":3,"timeouts":2,"spurious_timeouts":1,"tail_probes":4,"needless_probes":1,"rnr":0}`; !strings.Contains(string(bw), want) {
		t.Errorf("a bandwidth result lacks %s: %s", want, bw)
	}
	if l := withPerftest(latResult{P50US: 10, MeanUS: 12}, proto.KindReadLat); l.PerftestTypicalUS != 10 || l.PerftestAvgUS != 12 {
		t.Errorf("read-lat's perftest figures are the whole Read: %+v", l)
	}
	if l := withPerftest(latResult{P50US: 10}, proto.KindWriteLat); l.PerftestTypicalUS != 5 {
		t.Errorf("write-lat's perftest figures are half: %+v", l)
	}
	for k, want := range map[proto.Kind]string{proto.KindSendLat: "round_trip", proto.KindWriteLat: "post_to_completion",
		proto.KindReadLat: "post_to_completion", proto.KindWriteBW: ""} {
		if got := latencyTimed(k); got != want {
			t.Errorf("latencyTimed(%v) = %q, want %q", k, got, want)
		}
	}
}

func TestCPUFigures(t *testing.T) {
	c := cpuFigures(cpuTimes{user: 600e6, sys: 400e6}, 2e9, cpuTimes{user: 500e6}, 2e9, 1000, true, false)
	if c.ClientUSPerMsg != 1000 || c.ServerUSPerMsg != 500 || c.BothUSPerMsg != 1500 ||
		c.ClientCores != 0.5 || c.ServerCores != 0.25 || c.BothCores != 0.75 || !c.ClientPolls || c.ServerPolls || c.Messages != 1000 {
		t.Errorf("cpuFigures = %+v", c)
	}
	z := cpuFigures(cpuTimes{user: 5}, 0, cpuTimes{}, 0, 0, false, false)
	for _, f := range []float64{z.ClientUSPerMsg, z.ServerUSPerMsg, z.ClientCores, z.ServerCores, z.BothCores} {
		if f != 0 || math.IsNaN(f) {
			t.Errorf("no message, no time: %+v", z)
		}
	}
}

// TestSummarizeHist: a duration run's line from the histogram is within its bound of the
// exact one, with min, max and mean exact.
func TestSummarizeHist(t *testing.T) {
	h := new(hist.Histogram)
	samples := make([]int32, 0, 1000)
	for i := 1000; i >= 1; i-- {
		h.Record(int64(i * 1000))
		samples = append(samples, int32(i*1000))
	}
	got, want := summarizeHist(64, h), summarize(64, samples)
	if got.Iterations != want.Iterations || got.MinUS != want.MinUS || got.MaxUS != want.MaxUS || got.MeanUS != want.MeanUS {
		t.Errorf("summarizeHist = %+v, want %+v", got, want)
	}
	for _, p := range [][2]float64{{got.P50US, want.P50US}, {got.P99US, want.P99US}, {got.P999US, want.P999US}} {
		if math.Abs(p[0]-p[1]) > hist.RelativeError*p[1] {
			t.Errorf("percentile %v, exact %v: over the bound", p[0], p[1])
		}
	}
	if e := summarizeHist(8, new(hist.Histogram)); e.Iterations != 0 || e.MaxUS != 0 {
		t.Errorf("empty: %+v", e)
	}
}

// TestRecordingAllocatesNothing: what a duration run does per completion (both
// histograms) allocates nothing, so a run of any length stays in the memory it began with.
func TestRecordingAllocatesNothing(t *testing.T) {
	r := &runner{total: new(hist.Histogram), ivh: new(hist.Histogram)}
	d := int64(1000)
	if n := testing.AllocsPerRun(100_000, func() { r.total.Record(d); r.ivh.Record(d); d = d*3%1_000_003 + 1 }); n != 0 {
		t.Errorf("recording allocates %v times per completion", n)
	}
}

func TestVersionLine(t *testing.T) {
	v := readVersion()
	if !strings.HasPrefix(v.Go, "go") || v.Module == "" || v.Version == "" || v.Protocol != proto.Version {
		t.Errorf("readVersion = %+v", v)
	}
	line := v.String()
	for _, want := range []string{"ndkpeer ", v.Go, "protocol 2"} {
		if !strings.Contains(line, want) {
			t.Errorf("%q lacks %q", line, want)
		}
	}
	stamped := buildVersion{Module: "m", Version: "v1.2.3", Revision: "abc", Time: "2025-01-02T03:04:05Z", Modified: true, Go: "go1.26", Platform: "linux/amd64", Protocol: 2, MinProtocol: 1}
	if got := stamped.String(); !strings.Contains(got, "v1.2.3") || !strings.Contains(got, "revision abc with local changes") || !strings.Contains(got, "committed 2025-01-02T03:04:05Z") {
		t.Errorf("stamped version: %q", got)
	}
}

// TestRefusedByOlderServer: a server of protocol 1 refuses a version 2 request with
// RefuseVersion; the client names the options that need a newer server and exits 11.
func TestRefusedByOlderServer(t *testing.T) {
	dest := netip.MustParseAddrPort("198.18.0.2:4800")
	old := proto.Refusal{Version: 1, Code: proto.RefuseVersion, Reason: "ndkpeer protocol: other version: request of version 2 (this ndkpeer speaks 1)"}
	parsed, err := proto.ParseRefusal(old.Append(nil))
	if err != nil {
		t.Fatal(err)
	}
	e := refusedError(ndk.StatusConnectionRefused, parsed, dest)
	if exitCode(e) != exitRejected || !strings.Contains(e.Error(), "protocol 1") || !strings.Contains(e.Error(), "--cpu-util, -b and -e need a server of protocol 2") {
		t.Errorf("refused by a protocol 1 server: exit %d, %v", exitCode(e), e)
	}
	busy := refusedError(ndk.StatusConnectionRefused, proto.Refusal{Code: proto.RefuseBusy, Reason: "full"}, dest)
	if exitCode(busy) != exitRejected || !strings.Contains(busy.Error(), "refused the test: full") {
		t.Errorf("refused as busy: %v", busy)
	}
}
