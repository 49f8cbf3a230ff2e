package compare

import (
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/bench/linkbench"
	"github.com/xdpndk/xdpndk/bench/longpath"
	"github.com/xdpndk/xdpndk/bench/tools"
)

func TestOrder(t *testing.T) {
	n := len(AllSystems)
	if !slices.Equal(Order(AllSystems, 0), AllSystems) || !slices.Equal(Order(AllSystems, n), AllSystems) {
		t.Errorf("repetition 0 (and n) must keep the order: %v", Order(AllSystems, 0))
	}
	if got := Order([]string{"a", "b", "c"}, 1); !slices.Equal(got, []string{"b", "c", "a"}) {
		t.Errorf("rotation by 1: %v", got)
	}
	if got := Order([]string{"a", "b", "c"}, 5); !slices.Equal(got, []string{"c", "a", "b"}) {
		t.Errorf("rotation by 5: %v", got)
	}
	// Over n repetitions every system is measured once per repetition and once in every
	// position; consecutive repetitions never start with the same system.
	pos := map[string][]int{}
	for rep := range n {
		o := Order(AllSystems, rep)
		if len(o) != n || len(slices.Compact(slices.Sorted(slices.Values(o)))) != n {
			t.Fatalf("repetition %d: %v is not every system once", rep, o)
		}
		if rep > 0 && o[0] == Order(AllSystems, rep-1)[0] {
			t.Errorf("repetitions %d and %d start with the same system", rep-1, rep)
		}
		for i, s := range o {
			pos[s] = append(pos[s], i)
		}
	}
	for s, p := range pos {
		slices.Sort(p)
		for i := range p {
			if p[i] != i {
				t.Errorf("%s was measured at positions %v over %d repetitions", s, p, n)
				break
			}
		}
	}
	if Order(nil, 3) != nil {
		t.Error("no systems: no order")
	}
}

// rec fabricates a record of runs in repetitions reps.
func rec(ref Ref, runs []float64, reps []int) report.Record {
	r := report.Record{Bench: Tool, Scenario: ref.Scenario, System: ref.System, Operation: ref.Op, Size: ref.Size,
		Metric: ref.Metric, Runs: runs, Reps: reps, Value: report.Median(runs)}
	return r
}

func TestEvaluate(t *testing.T) {
	pp := func(sys, metric string) Ref { return Ref{ScenarioPingPong, sys, OpPingPong, 64, metric, ""} }
	num := pp(SystemXDPNDK, report.MetricRTTP50)
	den := pp(SystemSockperfUDP, report.MetricRTTP50)
	f1, f2 := pp(SystemFabricTCP, report.MetricRTTMean), pp(SystemFabricUDPRxd, report.MetricRTTMean)
	records := []report.Record{
		// xdpndk failed in repetition 1; sockperf in repetition 2: only 0 and 3 pair up.
		rec(num, []float64{10, 12, 9}, []int{0, 2, 3}),
		rec(den, []float64{50, 40, 30}, []int{0, 1, 3}),
		rec(pp(SystemXDPNDK, report.MetricRTTMean), []float64{20, 20}, []int{0, 1}),
		rec(f1, []float64{100, 30}, []int{0, 1}),
		rec(f2, []float64{80}, []int{1}),
		rec(pp(SystemQperfTCP, report.MetricRTTMean), []float64{0}, []int{0}),
	}
	goals := []Goal{
		{Name: "p50", Numerator: num, Denominator: []Ref{den}, Cmp: report.AtMost, Limit: 0.25, Required: true},
		{Name: "best", Numerator: pp(SystemXDPNDK, report.MetricRTTMean), Denominator: []Ref{f1, f2}, Best: "min", Cmp: report.AtMost, Limit: 0.5, Required: true},
		{Name: "best-max", Numerator: pp(SystemXDPNDK, report.MetricRTTMean), Denominator: []Ref{f1, f2}, Best: "max", Cmp: report.AtLeast, Limit: 0.2},
		{Name: "zero", Numerator: num, Denominator: []Ref{pp(SystemQperfTCP, report.MetricRTTMean)}, Cmp: report.AtMost, Limit: 1},
		{Name: "missing", Numerator: pp(SystemRawAsavie, report.MetricRTTP50), Denominator: []Ref{den}, Cmp: report.AtMost, Limit: 1, Reason: "why"},
	}
	got := Evaluate(goals, records)
	if len(got) != len(goals) {
		t.Fatalf("%d goals evaluated, want %d", len(got), len(goals))
	}
	// Repetitions 0 and 3: 10/50 = 0.2, 9/30 = 0.3; median 0.25, met (<=).
	if g := got[0]; !g.Evaluated || !slices.Equal(g.Runs, []float64{0.2, 0.3}) || math.Abs(g.Value-0.25) > 1e-12 || !g.Met || !g.Required ||
		g.Compared != "xdpndk pingpong ping-pong 64 B rtt_p50_us / sockperf-udp pingpong ping-pong 64 B rtt_p50_us" || g.Unit != report.UnitRatio {
		t.Errorf("p50 goal: %+v", g)
	}
	// The lowest provider of each repetition: 20/100 (tcp alone in 0), 20/30 (tcp beats rxd's 80 in 1); median 0.43.
	if g := got[1]; !g.Evaluated || !slices.Equal(g.Runs, []float64{0.2, 20.0 / 30}) || !g.Met || !strings.Contains(g.Compared, "min(fabric-tcp") {
		t.Errorf("best-provider goal: %+v", g)
	}
	if g := got[2]; !g.Evaluated || !slices.Equal(g.Runs, []float64{0.2, 0.25}) || !g.Met {
		t.Errorf("best-max goal: %+v", g)
	}
	if g := got[3]; g.Evaluated || g.Met || g.Value != 0 {
		t.Errorf("a zero denominator must leave the goal unevaluated: %+v", g)
	}
	if g := got[4]; g.Evaluated || g.Required || g.Reason != "why" || g.Verdict() != "not evaluated" {
		t.Errorf("missing figure: %+v", g)
	}
	// The shipped goals name figures the run records, and the required ones are the
	// issue's: four, with the reasons of the reported ones given.
	req := 0
	for _, g := range DefaultGoals() {
		if g.Required {
			req++
		} else if g.Reason == "" {
			t.Errorf("reported goal %q has no reason", g.Name)
		}
		if !slices.Contains(AllSystems, g.Numerator.System) {
			t.Errorf("goal %q: numerator of unknown system %q", g.Name, g.Numerator.System)
		}
	}
	if req != 4 {
		t.Errorf("%d required goals, want 4", req)
	}
}

func TestCollector(t *testing.T) {
	c := newCollector()
	p := loadParams(LoadSize)
	a := fig(ScenarioLoaded, SystemXDPNDK, OpPingPong, 64, p, report.MetricRTTP50, 10, "n")
	c.add(0, a)
	a.value = 30
	c.add(2, a)
	a.value = 20
	c.add(1, a)
	c.add(1, fig(ScenarioLoaded, SystemXDPNDK, OpPingPong, 64, p, report.MetricRTTP99, math.NaN(), ""))
	c.add(0, unsupported(ScenarioStream, SystemSockperfUDP, OpSend, 1<<20, "too big"))
	c.failed(fig(ScenarioStream, SystemQperfTCP, OpSend, 64, nil, report.MetricGbps, 0, ""))
	recs := c.records()
	if len(recs) != 4 {
		t.Fatalf("%d records: %+v", len(recs), recs)
	}
	r := recs[0]
	if r.Value != 20 || !slices.Equal(r.Runs, []float64{10, 30, 20}) || !slices.Equal(r.Reps, []int{0, 2, 1}) ||
		r.Params["load_bytes"] != LoadSize || r.Unit != report.UnitMicros || r.Note != "n" || r.Bench != Tool {
		t.Errorf("record %+v", r)
	}
	if r := recs[1]; len(r.Runs) != 0 || r.Metric != report.MetricRTTP99 {
		t.Errorf("a NaN is no run: %+v", r)
	}
	if r := recs[2]; r.Metric != report.MetricUnsup || len(r.Runs) != 0 || r.Note != "too big" {
		t.Errorf("unsupported: %+v", r)
	}
	if r := recs[3]; r.System != SystemQperfTCP || len(r.Runs) != 0 || r.Runs == nil || r.Unit != report.UnitGbps {
		t.Errorf("failed figure: %+v", r)
	}
	if findRecord(recs, Ref{ScenarioLoaded, SystemXDPNDK, OpPingPong, 64, report.MetricRTTP50, "load_bytes=65536"}) == nil {
		t.Error("findRecord by params")
	}
	if v, ok := valueAt(&recs[0], 2); !ok || v != 30 {
		t.Errorf("valueAt rep 2 = %v, %v", v, ok)
	}
}

// ndkpeerJSON is a fabricated client document of each kind compare reads.
const ndkpeerSendLat = `{"schema_version":2,"record":"result","command":"send-lat","op":"Send","latency_timed":"round_trip",
"completions":"polling","protocol":2,"local":{"xdp":"native","mtu":9000,"queues_served":1,"progress":"inline"},"server":{"xdp":"native"},
"params":{"load":""},"latency":[
 {"bytes":64,"iterations":1000,"p50_us":9.5,"p99_us":20,"mean_us":10,"perftest_factor":0.5,
  "cpu":{"measured":true,"messages":1000,"both_us_per_msg":40,"both_cores":2,"client_user_s":0.01,"client_sys_s":0.005,"server_user_s":0.02,"server_sys_s":0.005,"client_polls":true,"server_polls":true}},
 {"bytes":128,"iterations":900,"p50_us":10.5,"p99_us":21,"mean_us":11,"perftest_factor":0.5,"cpu":{"measured":true,"messages":900}}
],"intervals":[]}`

const ndkpeerWriteBW = `{"schema_version":2,"record":"result","command":"write-bw","op":"Write","latency_timed":"","completions":"events",
"bandwidth":[{"bytes":65536,"iterations":5000,"gbit_per_s":12.5,"msg_per_s":23841,
 "cpu":{"measured":true,"messages":5000,"both_us_per_msg":70,"both_cores":1.5,"client_user_s":0.2,"client_sys_s":0.05,"server_user_s":0.05,"server_sys_s":0.05,"client_polls":false,"server_polls":false}}]}`

const ndkpeerLoaded = `{"schema_version":2,"record":"result","command":"send-lat","op":"Send","latency_timed":"round_trip",
"params":{"load":"write:64K"},"latency":[{"bytes":64,"iterations":5000,"p50_us":30,"p99_us":300,"mean_us":50,"perftest_factor":0.5,
"load_op":"Write","load_bytes":65536,"load_outstanding":16,"load_iterations":20000,"load_gbit_per_s":10.5,"load_msg_per_s":20000}]}`

func TestNdkpeerFigures(t *testing.T) {
	d, err := parseNdkpeer([]byte(ndkpeerSendLat))
	if err != nil {
		t.Fatal(err)
	}
	figs, err := ndkpeerFigures(SystemXDPNDK, d, CPUSizes)
	if err != nil {
		t.Fatal(err)
	}
	want := map[Ref]float64{
		{ScenarioPingPong, SystemXDPNDK, OpPingPong, 64, report.MetricRTTP50, ""}:   9.5,
		{ScenarioPingPong, SystemXDPNDK, OpPingPong, 64, report.MetricRTTP99, ""}:   20,
		{ScenarioPingPong, SystemXDPNDK, OpPingPong, 64, report.MetricRTTMean, ""}:  10,
		{ScenarioPingPong, SystemXDPNDK, OpPingPong, 128, report.MetricRTTP50, ""}:  10.5,
		{ScenarioPingPong, SystemXDPNDK, OpPingPong, 64, report.MetricCPUMsg, ""}:   20, // 0.04 s over 2 x 1000 messages
		{ScenarioPingPong, SystemXDPNDK, OpPingPong, 64, report.MetricCores, ""}:    2,
		{ScenarioPingPong, SystemXDPNDK, OpPingPong, 128, report.MetricRTTMean, ""}: 11,
		{ScenarioPingPong, SystemXDPNDK, OpPingPong, 128, report.MetricRTTP99, ""}:  21,
	}
	checkFigures(t, "send-lat", figs, want)
	for _, f := range figs {
		if f.ref.Metric == report.MetricCPUMsg && !strings.Contains(f.note, notePolls) {
			t.Errorf("a polling system's CPU figure without %q: %q", notePolls, f.note)
		}
	}

	d, err = parseNdkpeer([]byte(ndkpeerWriteBW))
	if err != nil {
		t.Fatal(err)
	}
	figs, err = ndkpeerFigures(SystemXDPNDKEvents, d, CPUSizes)
	if err != nil {
		t.Fatal(err)
	}
	checkFigures(t, "write-bw", figs, map[Ref]float64{
		{ScenarioStream, SystemXDPNDKEvents, OpWrite, 65536, report.MetricMsgRate, ""}: 23841,
		{ScenarioStream, SystemXDPNDKEvents, OpWrite, 65536, report.MetricGbps, ""}:    12.5,
		{ScenarioStream, SystemXDPNDKEvents, OpWrite, 65536, report.MetricCPUMsg, ""}:  70, // 0.35 s over 5000
		{ScenarioStream, SystemXDPNDKEvents, OpWrite, 65536, report.MetricCores, ""}:   1.5,
	})
	for _, f := range figs {
		if strings.Contains(f.note, notePolls) {
			t.Errorf("event mode's figure says it polls: %q", f.note)
		}
	}
	// A CPU size without --cpu-util's figures is an error, not a zero.
	if _, err := ndkpeerFigures(SystemXDPNDK, d, []int{64, 65536, 128}); err != nil {
		t.Errorf("CPU sizes the run does not have: %v", err)
	}
	d.Bandwidth[0].CPU.Measured = false
	if _, err := ndkpeerFigures(SystemXDPNDK, d, CPUSizes); err == nil {
		t.Error("missing CPU figures accepted")
	}

	d, err = parseNdkpeer([]byte(ndkpeerLoaded))
	if err != nil {
		t.Fatal(err)
	}
	figs, err = ndkpeerLoadedFigures(SystemXDPNDK, d)
	if err != nil {
		t.Fatal(err)
	}
	lp := "load_bytes=65536"
	checkFigures(t, "loaded", figs, map[Ref]float64{
		{ScenarioLoaded, SystemXDPNDK, OpPingPong, 64, report.MetricRTTP50, lp}:  30,
		{ScenarioLoaded, SystemXDPNDK, OpPingPong, 64, report.MetricRTTP99, lp}:  300,
		{ScenarioLoaded, SystemXDPNDK, OpPingPong, 64, report.MetricRTTMean, lp}: 50,
		{ScenarioLoaded, SystemXDPNDK, OpWrite, 65536, report.MetricGbps, lp}:    10.5,
		{ScenarioLoaded, SystemXDPNDK, OpWrite, 65536, report.MetricMsgRate, lp}: 20000,
	})
	if _, err := ndkpeerLoadedFigures(SystemXDPNDK, mustParse(t, ndkpeerSendLat)); err == nil {
		t.Error("a run without --load gave loaded figures")
	}
}

func mustParse(t *testing.T, s string) *ndkpeerDoc {
	t.Helper()
	d, err := parseNdkpeer([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestParseNdkpeer(t *testing.T) {
	for name, in := range map[string]string{
		"error document": `{"command":"send-lat","error":"the server at 198.18.0.2 refused the test","exit_code":11}`,
		"schema 1":       `{"command":"send-lat","latency":[{"bytes":64}]}`,
		"interval":       `{"schema_version":2,"record":"interval"}`,
		"no result":      `{"schema_version":2,"record":"result","command":"send-lat"}`,
		"not JSON":       `ndkpeer: usage`,
	} {
		if _, err := parseNdkpeer([]byte(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	_, err := parseNdkpeer([]byte(`{"command":"send-lat","error":"refused","exit_code":11}`))
	if err == nil || !strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), "exit 11") {
		t.Errorf("error document: %v", err)
	}
	d := mustParse(t, ndkpeerSendLat)
	d.Command = "tour"
	if _, err := ndkpeerFigures(SystemXDPNDK, d, nil); err == nil {
		t.Error("a tour's document gave figures")
	}
}

// checkFigures checks that figs holds exactly want (values within 1e-9 relative).
func checkFigures(t *testing.T, what string, figs []figure, want map[Ref]float64) {
	t.Helper()
	got := map[Ref]float64{}
	for _, f := range figs {
		if _, dup := got[f.ref]; dup {
			t.Errorf("%s: %v twice", what, f.ref)
		}
		got[f.ref] = f.value
		if f.unit != unitOf(f.ref.Metric) || f.unit == "" {
			t.Errorf("%s: %v has unit %q", what, f.ref, f.unit)
		}
	}
	for ref, v := range want {
		g, ok := got[ref]
		if !ok {
			t.Errorf("%s: no %v", what, ref)
		} else if math.Abs(g-v) > 1e-9*math.Abs(v) {
			t.Errorf("%s: %v = %v, want %v", what, ref, g, v)
		}
	}
	for ref := range got {
		if _, ok := want[ref]; !ok {
			t.Errorf("%s: unexpected %v", what, ref)
		}
	}
}

// usage fabricates a tool run's CPU: client and server each 0.5 s over 1 s, msgs messages.
func usage(msgs int64) tools.Usage {
	half := tools.CPUTime{User: 300 * time.Millisecond, System: 200 * time.Millisecond}
	return tools.Usage{Client: half, Server: half, ClientWall: time.Second, ServerWall: time.Second, Messages: msgs}
}

func TestToolFigures(t *testing.T) {
	// qperf tcp_lat: the mean round trip, twice its latency; CPU over both processes' lives.
	lat := &tools.QperfLat{Test: "tcp_lat", Size: 64, LatencyUS: 20, RTTUS: 40, Run: tools.Run{Usage: usage(100000)}}
	checkFigures(t, "qperf tcp_lat", qperfLatFigures(lat, CPUSizes), map[Ref]float64{
		{ScenarioPingPong, SystemQperfTCP, OpPingPong, 64, report.MetricRTTMean, ""}: 40,
		{ScenarioPingPong, SystemQperfTCP, OpPingPong, 64, report.MetricCPUMsg, ""}:  10, // 1 s / 100000
		{ScenarioPingPong, SystemQperfTCP, OpPingPong, 64, report.MetricCores, ""}:   1,
	})
	lat.Size = 4096 // not a CPU size
	checkFigures(t, "qperf tcp_lat 4 KiB", qperfLatFigures(lat, CPUSizes), map[Ref]float64{
		{ScenarioPingPong, SystemQperfTCP, OpPingPong, 4096, report.MetricRTTMean, ""}: 40,
	})

	bw := &tools.QperfBW{Test: "tcp_bw", Size: 64, BW: 70e6, MsgRate: 1.09e6, Run: tools.Run{Usage: usage(1_000_000)}}
	checkFigures(t, "qperf tcp_bw", qperfBWFigures(bw, CPUSizes), map[Ref]float64{
		{ScenarioStream, SystemQperfTCP, OpSend, 64, report.MetricMsgRate, ""}: 1.09e6,
		{ScenarioStream, SystemQperfTCP, OpSend, 64, report.MetricGbps, ""}:    0.56,
		{ScenarioStream, SystemQperfTCP, OpSend, 64, report.MetricCPUMsg, ""}:  1,
		{ScenarioStream, SystemQperfTCP, OpSend, 64, report.MetricCores, ""}:   1,
	})

	ip := &tools.Iperf3{Size: 65536, ReceivedBytes: 2.5e9, ReceivedSeconds: 1, ReceivedBPS: 20e9, Run: tools.Run{Usage: usage(38147)}}
	checkFigures(t, "iperf3", iperf3Figures(ip, CPUSizes), map[Ref]float64{
		{ScenarioStream, SystemIperf3TCP, OpSend, 65536, report.MetricGbps, ""}:    20,
		{ScenarioStream, SystemIperf3TCP, OpSend, 65536, report.MetricMsgRate, ""}: 2.5e9 / 65536,
		{ScenarioStream, SystemIperf3TCP, OpSend, 65536, report.MetricCPUMsg, ""}:  1e6 / 38147.0,
		{ScenarioStream, SystemIperf3TCP, OpSend, 65536, report.MetricCores, ""}:   1,
	})

	// sockperf: the round trip is twice what it prints; the CPU is the test window's, and
	// 65507 B stands for 64 KiB.
	pp := &tools.SockperfPingPong{Size: tools.SockperfMaxSize, Polling: true,
		RTT: tools.SockperfLatency{Avg: 60, P50: 55, P99: 90}, Latency: tools.SockperfLatency{Avg: 30, P50: 27.5, P99: 45},
		Run: tools.Run{Usage: usage(10)}}
	pp.Usage.Window = &tools.Window{Wall: time.Second, Client: time.Second, Server: time.Second, Messages: 40000}
	figs := sockperfPingPongFigures(pp, CPUSizes)
	checkFigures(t, "sockperf ping-pong", figs, map[Ref]float64{
		{ScenarioPingPong, SystemSockperfUDPPoll, OpPingPong, 65507, report.MetricRTTP50, ""}:  55,
		{ScenarioPingPong, SystemSockperfUDPPoll, OpPingPong, 65507, report.MetricRTTP99, ""}:  90,
		{ScenarioPingPong, SystemSockperfUDPPoll, OpPingPong, 65507, report.MetricRTTMean, ""}: 60,
		{ScenarioPingPong, SystemSockperfUDPPoll, OpPingPong, 65507, report.MetricCPUMsg, ""}:  50,
		{ScenarioPingPong, SystemSockperfUDPPoll, OpPingPong, 65507, report.MetricCores, ""}:   2,
	})
	for _, f := range figs {
		if f.ref.Metric == report.MetricCPUMsg && (!strings.Contains(f.note, notePolls) || !strings.Contains(f.note, "test phase")) {
			t.Errorf("sockperf polling CPU note: %q", f.note)
		}
	}

	tp := &tools.SockperfThroughput{Size: 64, Received: 100000, SendSeconds: 1, Run: tools.Run{Usage: usage(100000)}}
	checkFigures(t, "sockperf throughput", sockperfThroughputFigures(tp, CPUSizes), map[Ref]float64{
		{ScenarioStream, SystemSockperfUDP, OpSend, 64, report.MetricMsgRate, ""}: 100000,
		{ScenarioStream, SystemSockperfUDP, OpSend, 64, report.MetricGbps, ""}:    0.0512,
		{ScenarioStream, SystemSockperfUDP, OpSend, 64, report.MetricCPUMsg, ""}:  10,
		{ScenarioStream, SystemSockperfUDP, OpSend, 64, report.MetricCores, ""}:   1,
	})

	fp := &tools.FabricPingPong{Fabric: tools.FabricUDPRxdRdm, Size: 64, Iterations: 5000, LatencyUS: 25, RTTUS: 50, Run: tools.Run{Usage: usage(10000)}}
	figs = fabricFigures(SystemFabricUDPRxd, fp, CPUSizes)
	checkFigures(t, "fi_pingpong", figs, map[Ref]float64{
		{ScenarioPingPong, SystemFabricUDPRxd, OpPingPong, 64, report.MetricRTTMean, ""}: 50,
		{ScenarioPingPong, SystemFabricUDPRxd, OpPingPong, 64, report.MetricCPUMsg, ""}:  100,
		{ScenarioPingPong, SystemFabricUDPRxd, OpPingPong, 64, report.MetricCores, ""}:   1,
	})
	if !strings.Contains(figs[1].note, notePolls) {
		t.Errorf("fi_pingpong polls: %q", figs[1].note)
	}

	ld := tcpLoadedFigures(&tools.QperfLat{Size: 64, RTTUS: 120}, &tools.Iperf3{Size: 65536, ReceivedBPS: 15e9})
	lp := "load_bytes=65536"
	checkFigures(t, "tcp loaded", ld, map[Ref]float64{
		{ScenarioLoaded, SystemQperfTCP, OpPingPong, 64, report.MetricRTTMean, lp}: 120,
		{ScenarioLoaded, SystemIperf3TCP, OpSend, 65536, report.MetricGbps, lp}:    15,
	})
}

func TestLinkFigures(t *testing.T) {
	f := func(bench, sys, op string, size int, metric string, runs ...float64) linkbench.Record {
		return linkbench.Record{Subject: report.Subject{Benchmark: bench, System: sys, Op: op, Size: size},
			Figure: report.NewFigure(metric, "", runs)}
	}
	res := &linkbench.Results{Records: []linkbench.Record{
		f(linkbench.BenchOneWay, SystemRawAsavie, linkbench.OpSend, 64, linkbench.MetricPPS, 2e5),
		f(linkbench.BenchOneWay, SystemRawAsavie, linkbench.OpSend, 64, linkbench.MetricGbps, 0.1),
		f(linkbench.BenchOneWay, SystemRawAsavie, linkbench.OpSend, 64, linkbench.MetricCPUMsg, 5),
		f(linkbench.BenchOneWay, SystemRawAsavie, linkbench.OpSend, 64, linkbench.MetricTxPPS, 3e5),
		f(linkbench.BenchOneWay, SystemRawAsavie, linkbench.OpSend, 64, linkbench.MetricAllocs, 3),
		{Subject: report.Subject{Benchmark: linkbench.BenchOneWay, System: SystemRawAsavie, Op: linkbench.OpSend, Size: 9000},
			Figure: report.Figure{Metric: linkbench.MetricUnsupported, Note: "no multi-buffer", Runs: []float64{}}},
		f(linkbench.BenchPingPong, SystemRawAsavie, linkbench.OpRTT, 64, linkbench.MetricRTTP50, 8),
		f(linkbench.BenchPingPong, SystemRawAsavie, linkbench.OpRTT, 64, linkbench.MetricRTTP99, 12),
		f(linkbench.BenchPingPong, SystemRawAsavie, linkbench.OpRTT, 64, linkbench.MetricRTTMean, 9),
		f(linkbench.BenchPingPong, SystemRawAsavie, linkbench.OpRTT, 64, linkbench.MetricCores, 2),
		f(linkbench.BenchPingPong, SystemRawXDPNDK, linkbench.OpRTT, 64, linkbench.MetricRTTP50, 6),
	}}
	figs, err := linkFigures(SystemRawAsavie, res)
	if err != nil {
		t.Fatal(err)
	}
	var unsup []figure
	figs = slices.DeleteFunc(figs, func(f figure) bool {
		if f.unsupported {
			unsup = append(unsup, f)
		}
		return f.unsupported
	})
	checkFigures(t, "link", figs, map[Ref]float64{
		{ScenarioStream, SystemRawAsavie, OpSend, 64, report.MetricMsgRate, ""}:       2e5,
		{ScenarioStream, SystemRawAsavie, OpSend, 64, report.MetricGbps, ""}:          0.1,
		{ScenarioStream, SystemRawAsavie, OpSend, 64, report.MetricCPUMsg, ""}:        5,
		{ScenarioPingPong, SystemRawAsavie, OpPingPong, 64, report.MetricRTTP50, ""}:  8,
		{ScenarioPingPong, SystemRawAsavie, OpPingPong, 64, report.MetricRTTP99, ""}:  12,
		{ScenarioPingPong, SystemRawAsavie, OpPingPong, 64, report.MetricRTTMean, ""}: 9,
		{ScenarioPingPong, SystemRawAsavie, OpPingPong, 64, report.MetricCores, ""}:   2,
	})
	if len(unsup) != 1 || unsup[0].ref != (Ref{ScenarioStream, SystemRawAsavie, OpSend, 9000, report.MetricUnsup, ""}) || unsup[0].note != "no multi-buffer" {
		t.Errorf("unsupported: %+v", unsup)
	}
	if _, err := linkFigures(SystemRawXDPNDK, &linkbench.Results{}); err == nil {
		t.Error("no figures accepted")
	}
}

func TestFabricIters(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name     string
		target   time.Duration
		size     int
		known    float64
		knownOK  bool
		prev     float64
		prevSize int
		want     int
	}{
		{"first size, nothing known: 300 us", 300 * time.Millisecond, 2, 0, false, 0, 0, 1000},
		{"known at this size", 300 * time.Millisecond, 64, 100, true, 50, 2, 3000},
		{"whole thousands", s, 64, 70, true, 0, 0, 14000},
		{"below a thousand exact", 300 * time.Millisecond, 64, 500, true, 0, 0, 600},
		{"grown from the previous size: 1 MiB after 64 KiB", 300 * time.Millisecond, 1 << 20, 0, false, 200, 64 << 10, 18},
		{"at least 10", 300 * time.Millisecond, 8 << 20, 1e6, true, 0, 0, fabricMinIters},
		{"at most 20000", 10 * s, 64, 1, true, 0, 0, fabricMaxIters},
	} {
		if got := fabricIters(tc.target, tc.size, tc.known, tc.knownOK, tc.prev, tc.prevSize); got != tc.want {
			t.Errorf("%s: %d iterations, want %d", tc.name, got, tc.want)
		}
	}
}

func TestConsecutive(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want [][]int
	}{
		{fullSizes(), [][]int{fullSizes()}},
		{QuickSizes, [][]int{{64}, {4096}, {65536}, {1 << 20}}},
		{[]int{64, 128, 256, 1024, 2048, 9000}, [][]int{{64, 128, 256}, {1024, 2048}, {9000}}},
		{[]int{3, 6, 12}, [][]int{{3}, {6}, {12}}},
		{nil, nil},
	} {
		if got := consecutive(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("consecutive(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
	if len(fullSizes()) != 23 || fullSizes()[0] != 2 || fullSizes()[22] != 8<<20 {
		t.Errorf("full sizes %v", fullSizes())
	}
}

func TestOptions(t *testing.T) {
	for name, o := range map[string]Options{"full": DefaultOptions(), "quick": QuickOptions()} {
		n, err := o.normalize()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Equal(n.Systems, AllSystems) || !slices.IsSorted(n.Sizes) {
			t.Errorf("%s: %+v", name, n)
		}
	}
	q := QuickOptions()
	if !slices.Equal(q.Sizes, QuickSizes) || !q.Quick || q.Runs < 1 {
		t.Errorf("quick: %+v", q)
	}
	for name, mod := range map[string]func(*Options){
		"no runs":         func(o *Options) { o.Runs = 0 },
		"unknown system":  func(o *Options) { o.Systems = []string{"rdma-core"} },
		"system twice":    func(o *Options) { o.Systems = []string{SystemXDPNDK, SystemXDPNDK} },
		"no system":       func(o *Options) { o.Systems = nil },
		"sockperf 1 MiB":  func(o *Options) { o.SockperfSizes = []int{1 << 20} },
		"size 0":          func(o *Options) { o.Sizes = []int{0, 64} },
		"short window":    func(o *Options) { o.NdkpeerWindow = time.Millisecond },
		"half a second":   func(o *Options) { o.ToolTime = 500 * time.Millisecond },
		"no fabric time":  func(o *Options) { o.FabricTarget = 0 },
		"few round trips": func(o *Options) { o.LinkPingPongN = 2 },
		"short load":      func(o *Options) { o.LoadTime = time.Millisecond },
	} {
		o := DefaultOptions()
		mod(&o)
		if _, err := o.normalize(); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: %v, want ErrInvalidOptions", name, err)
		}
	}
	o := DefaultOptions()
	o.Sizes = []int{4096, 64, 64}
	if n, err := o.normalize(); err != nil || !slices.Equal(n.Sizes, []int{64, 4096}) {
		t.Errorf("sizes sorted and deduplicated: %v, %v", n.Sizes, err)
	}
	got, err := ParseSizes("64, 4K,1m,65507")
	if err != nil || !slices.Equal(got, []int{64, 4096, 1 << 20, 65507}) {
		t.Errorf("ParseSizes: %v, %v", got, err)
	}
	for _, bad := range []string{"", "x", "4G", "-1", "1.5K", "64K0"} {
		if _, err := ParseSizes(bad); err == nil {
			t.Errorf("ParseSizes(%q) accepted", bad)
		}
	}
	if !slices.Equal(ParseSystems("all"), AllSystems) || !slices.Equal(ParseSystems("xdpndk,qperf-tcp"), []string{SystemXDPNDK, SystemQperfTCP}) {
		t.Error("ParseSystems")
	}
}

func TestResults(t *testing.T) {
	c := newCollector()
	pp := func(sys, metric string) Ref { return Ref{ScenarioPingPong, sys, OpPingPong, 64, metric, ""} }
	add := func(rep int, ref Ref, v float64) {
		c.add(rep, figure{ref: ref, unit: unitOf(ref.Metric), value: v})
	}
	// Measured in a rotated order: the records come out by system, then scenario.
	add(0, Ref{ScenarioStream, SystemQperfTCP, OpSend, 64, report.MetricMsgRate, ""}, 1e6)
	add(0, pp(SystemSockperfUDP, report.MetricRTTP50), 40)
	add(0, pp(SystemXDPNDK, report.MetricRTTP50), 8)
	add(1, pp(SystemSockperfUDP, report.MetricRTTP50), 44)
	add(1, pp(SystemXDPNDK, report.MetricRTTP50), 9)
	add(0, Ref{ScenarioStream, SystemXDPNDK, OpWrite, 64, report.MetricMsgRate, ""}, 5e5)
	o := DefaultOptions()
	o.Runs = 2
	res := newResults(o, time.Date(2026, 11, 28, 1, 0, 0, 0, time.UTC), 90*time.Second, 3,
		map[string]string{SystemXDPNDK: "ndkpeer"}, []string{report.FailedNote(errors.New("qperf-tcp tcp_lat 64 B, repetition 2: boom"))}, c.records())
	var order []string
	for _, r := range res.Records {
		order = append(order, r.Scenario+"/"+r.System)
	}
	if want := []string{"pingpong/xdpndk", "stream/xdpndk", "stream/qperf-tcp", "pingpong/sockperf-udp"}; !slices.Equal(order, want) {
		t.Errorf("record order %v, want %v", order, want)
	}
	if res.Header.Tool != Tool || res.Header.Bed.MTU != 9000 || res.Header.Bed.Queues != 3 || res.Header.Time != "2026-11-28T01:00:00Z" ||
		res.Header.Params["runs"] != 2.0 || res.Header.Params["elapsed_s"] != 90.0 {
		t.Errorf("header %+v", res.Header)
	}
	if !slices.ContainsFunc(res.Header.Notes, report.IsFailed) || len(res.Goals) != len(DefaultGoals()) {
		t.Errorf("notes %v, %d goals", res.Header.Notes, len(res.Goals))
	}
	if g := res.Goals[0]; !g.Evaluated || math.Abs(g.Value-report.Median([]float64{8.0 / 40, 9.0 / 44})) > 1e-12 {
		t.Errorf("first goal: %+v", g)
	}

	// The document round-trips through JSON.
	path := filepath.Join(t.TempDir(), "compare.json")
	if err := res.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, res.Document()) {
		t.Errorf("JSON round trip differs:\n%+v\n%+v", back, res.Document())
	}

	var b strings.Builder
	if err := res.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"64 B RTT p50 us", "xdpndk", "sockperf-udp", "500k", "8.50", "goal xdpndk 64 B RTT p50 / sockperf UDP"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	var md strings.Builder
	if err := report.WriteMarkdown(&md, res.Document(), report.MarkdownOptions{Metrics: report.HeadlineMetrics}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| scenario | operation | size | metric | xdpndk | qperf-tcp | sockperf-udp |") {
		t.Errorf("Markdown columns:\n%s", md.String())
	}
}

func TestLongPath(t *testing.T) {
	res := &longpath.Results{Options: longpath.OptionsDoc{RateBps: 1e9},
		Paths: []longpath.PathDoc{{RTTMS: 10, PingP50MS: 10.1, PingP99MS: 10.6, QueueBytes: 1250000, LineDropped: 3}},
		Figures: []longpath.Figure{
			{RTTMS: 10, Op: "write", Scenario: "alone", System: "tcp", Metric: "gbps", Median: 0.93, Runs: []float64{0.92, 0.93, 0.94}},
			{RTTMS: 10, Op: "write", Scenario: "alone", System: "ndk", Metric: "gbps", Median: 0.5, Runs: []float64{0.4, 0.5, 0.6}},
			{RTTMS: 10, Op: "write", Scenario: "alone", System: "ndk", Metric: "retransmits", Median: 2, Runs: []float64{0, 2, 4}},
			{RTTMS: 10, Op: "write", Scenario: "alone", System: "ndk", Metric: "ratio_to_tcp", Median: 0.53, Runs: []float64{0.43, 0.53, 0.64}},
			{RTTMS: 10, Op: "write", Scenario: "shared", System: "tcp", Metric: "gbps", Median: 0.8, Runs: []float64{0.8, 0.8, 0.9}},
			{RTTMS: 10, Op: "write", Scenario: "shared", System: "ndk", Metric: "gbps", Median: 0.1, Runs: []float64{0.1, 0.05, 0.2}},
			{RTTMS: 10, Op: "write", Scenario: "shared", System: "ndk", Metric: "own_gbps", Median: 0.1, Runs: []float64{0.1}},
			{RTTMS: 10, Op: "write", Scenario: "shared", System: "line", Metric: "gbps", Median: 0.9, Runs: []float64{0.9}},
		},
		Notes: []string{"gbps: definition", "failed: path 2ms: no ping answer"}}
	recs := longPathRecords(res)
	lp := "rate_gbit_per_s=1 rtt_us=10000"
	for ref, want := range map[Ref]float64{
		{ScenarioLongPath, SystemIperf3TCP, "write", 0, report.MetricGbps, lp}:       0.93,
		{ScenarioLongPath, SystemXDPNDK, "write", 0, report.MetricGbps, lp}:          0.5,
		{ScenarioLongPath, SystemXDPNDK, "write", 0, "retransmits", lp}:              2,
		{ScenarioLongPathShared, SystemIperf3TCP, "write", 0, report.MetricGbps, lp}: 0.8,
		{ScenarioLongPathShared, SystemXDPNDK, "write", 0, report.MetricGbps, lp}:    0.1,
	} {
		r := findRecord(recs, ref)
		if r == nil || r.Value != want || len(r.Runs) != len(r.Reps) || r.Bench != Tool || r.Note == "" {
			t.Errorf("%v: %+v, want %v", ref, r, want)
		}
	}
	if len(recs) != 5 {
		t.Errorf("%d records (own_gbps, the line's and ratio_to_tcp are longpath's own): %+v", len(recs), recs)
	}

	goals := longPathGoals(res, []time.Duration{2 * time.Millisecond, 10 * time.Millisecond}, []string{"write"})
	if len(goals) != 6 {
		t.Fatalf("%d goals, want 3 per path", len(goals))
	}
	for _, g := range goals[:3] { // 2 ms failed: not evaluated
		if g.Evaluated || !g.Required {
			t.Errorf("2 ms: %+v", g)
		}
	}
	alone, ndk, tcp := goals[3], goals[4], goals[5]
	if !alone.Evaluated || alone.Value != 0.53 || alone.Met || alone.Limit != longpath.GoalAlone || !slices.Equal(alone.Runs, []float64{0.43, 0.53, 0.64}) ||
		!strings.Contains(alone.Compared, "xdpndk longpath write 0 B gbit_per_s [rate_gbit_per_s=1 rtt_us=10000] / iperf3-tcp") {
		t.Errorf("alone: %+v", alone)
	}
	if !ndk.Evaluated || ndk.Met || math.Abs(ndk.Value-0.1) > 1e-12 || !tcp.Met || math.Abs(tcp.Value-0.8) > 1e-12 || tcp.Limit != longpath.GoalShared {
		t.Errorf("shared: %+v, %+v", ndk, tcp)
	}
	notes := longPathNotes(res)
	if len(notes) != 3 || !strings.Contains(notes[0], "ping p50 10.1 ms") || !report.IsFailed(notes[2]) || report.IsFailed(notes[1]) {
		t.Errorf("notes %q", notes)
	}
	if g := longPathGoals(nil, []time.Duration{10 * time.Millisecond}, []string{"write", "read"}); len(g) != 6 || g[0].Evaluated {
		t.Errorf("not run: %+v", g)
	}
}
