package compare

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/bench/linkbench"
	"github.com/xdpndk/xdpndk/bench/tools"
)

// This file turns what each tool reported (its own output, parsed) into figures: one
// function per result type, so that the mapping is tested with fabricated results.

// notePolls is the note of every CPU figure of a system whose sides spin.
const notePolls = "polls: a whole core per side whatever the rate"

// cpuNote is the note of a CPU figure (both processes' CPU per message each way, as the
// header's notes define it): how it was measured, and for a polling system that it polls.
func cpuNote(how string, polls bool) string {
	if polls {
		return how + "; " + notePolls
	}
	return how
}

// ndkpeerDoc is the part of an ndkpeer client's --json document (schema 2, `go doc
// ./cmd/ndkpeer`, "JSON") compare reads. A failed run's document has Error and ExitCode.
type ndkpeerDoc struct {
	SchemaVersion  int        `json:"schema_version"`
	Record         string     `json:"record"`
	Command        string     `json:"command"`
	Op             string     `json:"op"`
	LatencyTimed   string     `json:"latency_timed"`
	Completions    string     `json:"completions"`
	NdkpeerVersion string     `json:"ndkpeer_version"`
	Protocol       int        `json:"protocol"`
	Local          ndkpeerEnd `json:"local"`
	Server         ndkpeerEnd `json:"server"`
	Params         struct {
		Load string `json:"load"`
	} `json:"params"`
	Latency   []ndkpeerLat `json:"latency"`
	Bandwidth []ndkpeerBW  `json:"bandwidth"`
	Error     string       `json:"error"`
	ExitCode  int          `json:"exit_code"`
}

// ndkpeerEnd is one side's mode in an ndkpeer document.
type ndkpeerEnd struct {
	XDP         string `json:"xdp"`
	ZeroCopy    bool   `json:"zero_copy"`
	MultiBuffer bool   `json:"multi_buffer"`
	NeedWakeup  bool   `json:"need_wakeup"`
	MTU         int    `json:"mtu"`
	Queues      int    `json:"queues_served"`
	Progress    string `json:"progress"`
}

// String describes the mode in a few words.
func (e ndkpeerEnd) String() string {
	bind := "copy"
	if e.ZeroCopy {
		bind = "zero-copy"
	}
	return fmt.Sprintf("xdp=%s af_xdp=%s multi_buffer=%v need_wakeup=%v mtu=%d queues_served=%d progress=%s",
		e.XDP, bind, e.MultiBuffer, e.NeedWakeup, e.MTU, e.Queues, e.Progress)
}

// ndkpeerLat is one size of a latency test.
type ndkpeerLat struct {
	Bytes          int        `json:"bytes"`
	Iterations     int64      `json:"iterations"`
	P50US          float64    `json:"p50_us"`
	P99US          float64    `json:"p99_us"`
	MeanUS         float64    `json:"mean_us"`
	PerftestFactor float64    `json:"perftest_factor"`
	CPU            ndkpeerCPU `json:"cpu"`
	LoadOp         string     `json:"load_op"`
	LoadBytes      int        `json:"load_bytes"`
	LoadIterations int64      `json:"load_iterations"`
	LoadGbps       float64    `json:"load_gbit_per_s"`
	LoadMsgPerS    float64    `json:"load_msg_per_s"`
}

// ndkpeerBW is one size of a bandwidth test.
type ndkpeerBW struct {
	Bytes      int        `json:"bytes"`
	Iterations int64      `json:"iterations"`
	Gbps       float64    `json:"gbit_per_s"`
	MsgPerS    float64    `json:"msg_per_s"`
	CPU        ndkpeerCPU `json:"cpu"`
}

// ndkpeerCPU is --cpu-util's figures of one size.
type ndkpeerCPU struct {
	Measured     bool    `json:"measured"`
	Messages     int64   `json:"messages"`
	BothUSPerMsg float64 `json:"both_us_per_msg"`
	BothCores    float64 `json:"both_cores"`
	ClientUserS  float64 `json:"client_user_s"`
	ClientSysS   float64 `json:"client_sys_s"`
	ServerUserS  float64 `json:"server_user_s"`
	ServerSysS   float64 `json:"server_sys_s"`
	ClientPolls  bool    `json:"client_polls"`
	ServerPolls  bool    `json:"server_polls"`
}

// parseNdkpeer parses a client's --json output: a result document of schema 2, or the
// error document of a failed run (returned as an error).
func parseNdkpeer(out []byte) (*ndkpeerDoc, error) {
	var d ndkpeerDoc
	if err := json.Unmarshal(out, &d); err != nil {
		return nil, fmt.Errorf("ndkpeer's JSON: %w", err)
	}
	switch {
	case d.Error != "":
		return nil, fmt.Errorf("ndkpeer %s failed (exit %d): %s", d.Command, d.ExitCode, d.Error)
	case d.SchemaVersion != 2:
		return nil, fmt.Errorf("ndkpeer's JSON is of schema %d, compare reads 2", d.SchemaVersion)
	case d.Record != "result":
		return nil, fmt.Errorf("ndkpeer's JSON is a %q record, not a result", d.Record)
	case len(d.Latency) == 0 && len(d.Bandwidth) == 0:
		return nil, errors.New("ndkpeer's JSON has no result line")
	}
	return &d, nil
}

// ndkpeerTests are ndkpeer's tests compare runs, and what each is in the records.
var ndkpeerTests = []struct {
	command, scenario, op string
}{
	{"send-lat", ScenarioPingPong, OpPingPong},
	{"write-lat", ScenarioLatency, OpWrite},
	{"read-lat", ScenarioLatency, OpRead},
	{"send-bw", ScenarioStream, OpSend},
	{"write-bw", ScenarioStream, OpWrite},
	{"read-bw", ScenarioStream, OpRead},
}

// ndkpeerWhere returns the scenario and operation of an ndkpeer test's records.
func ndkpeerWhere(command string) (scenario, op string, ok bool) {
	for _, t := range ndkpeerTests {
		if t.command == command {
			return t.scenario, t.op, true
		}
	}
	return "", "", false
}

// ndkpeerFigures returns the figures of an ndkpeer run of system: per size, the round trip
// (send-lat) or post-to-completion time (write-lat, read-lat) p50, p99 and mean, or the
// message rate and Gbit/s of payload (the bandwidth tests); both sides' CPU at the sizes
// of cpuSizes, for send-lat (the ping-pong every system has; a round trip's CPU is shared
// by its two messages) and the bandwidth tests: the CPU of write-lat and read-lat, which
// ndkpeer measures too, is left out of the records.
func ndkpeerFigures(system string, d *ndkpeerDoc, cpuSizes []int) ([]figure, error) {
	scenario, op, ok := ndkpeerWhere(d.Command)
	if !ok {
		return nil, fmt.Errorf("ndkpeer test %q: not one compare runs", d.Command)
	}
	var out []figure
	cpu := func(size int, c ndkpeerCPU, perMsgDiv float64) error {
		if !slices.Contains(cpuSizes, size) || scenario == ScenarioLatency {
			return nil
		}
		if !c.Measured || c.Messages <= 0 {
			return fmt.Errorf("ndkpeer %s %d B: no CPU figures (--cpu-util)", d.Command, size)
		}
		total := c.ClientUserS + c.ClientSysS + c.ServerUserS + c.ServerSysS
		how := "ndkpeer --cpu-util (getrusage of each process over the measured window)"
		if perMsgDiv != 1 {
			how += ", a round trip's CPU over its two messages"
		}
		polls := c.ClientPolls && c.ServerPolls
		if !polls && (c.ClientPolls || c.ServerPolls) {
			how += "; one side polls"
		}
		out = append(out,
			fig(scenario, system, op, size, nil, report.MetricCPUMsg, total*1e6/(perMsgDiv*float64(c.Messages)), cpuNote(how, polls)),
			fig(scenario, system, op, size, nil, report.MetricCores, c.BothCores, cpuNote(how, polls)))
		return nil
	}
	for _, l := range d.Latency {
		if l.Iterations <= 0 {
			return nil, fmt.Errorf("ndkpeer %s %d B: no iteration completed", d.Command, l.Bytes)
		}
		note := "post to completion (ndkpeer's measure; perftest's would be x" + fmt.Sprint(l.PerftestFactor) + ")"
		div := 1.0
		if d.LatencyTimed == "round_trip" {
			note, div = "round trip (ndkpeer's measure; perftest's ib_send_lat reports half)", 2
		}
		out = append(out,
			fig(scenario, system, op, l.Bytes, nil, report.MetricRTTP50, l.P50US, note),
			fig(scenario, system, op, l.Bytes, nil, report.MetricRTTP99, l.P99US, note),
			fig(scenario, system, op, l.Bytes, nil, report.MetricRTTMean, l.MeanUS, note))
		if err := cpu(l.Bytes, l.CPU, div); err != nil {
			return nil, err
		}
	}
	for _, b := range d.Bandwidth {
		if b.Iterations <= 0 {
			return nil, fmt.Errorf("ndkpeer %s %d B: no iteration completed", d.Command, b.Bytes)
		}
		out = append(out,
			fig(scenario, system, op, b.Bytes, nil, report.MetricMsgRate, b.MsgPerS, ""),
			fig(scenario, system, op, b.Bytes, nil, report.MetricGbps, b.Gbps, "payload bytes"))
		if err := cpu(b.Bytes, b.CPU, 1); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// loadParams are the params of the loaded scenario's records.
func loadParams(size int) map[string]float64 { return map[string]float64{"load_bytes": float64(size)} }

// ndkpeerLoadedFigures returns the figures of a send-lat --load run: the ping-pong's round
// trip under the load, and the load stream's rate over the same window.
func ndkpeerLoadedFigures(system string, d *ndkpeerDoc) ([]figure, error) {
	if d.Command != "send-lat" || len(d.Latency) != 1 {
		return nil, fmt.Errorf("ndkpeer %s: not a one-size send-lat", d.Command)
	}
	l := d.Latency[0]
	if l.LoadOp == "" || l.LoadBytes <= 0 {
		return nil, errors.New("ndkpeer's result has no load (an ndkpeer without --load?)")
	}
	if l.Iterations <= 0 || l.LoadIterations <= 0 {
		return nil, fmt.Errorf("ndkpeer send-lat --load: %d round trips and %d load operations completed", l.Iterations, l.LoadIterations)
	}
	p := loadParams(l.LoadBytes)
	note := fmt.Sprintf("round trip of %d B Sends while %d B %ss stream on another QP of the same adapters (ndkpeer send-lat --load)", l.Bytes, l.LoadBytes, l.LoadOp)
	lop := strings.ToLower(l.LoadOp)
	return []figure{
		fig(ScenarioLoaded, system, OpPingPong, l.Bytes, p, report.MetricRTTP50, l.P50US, note),
		fig(ScenarioLoaded, system, OpPingPong, l.Bytes, p, report.MetricRTTP99, l.P99US, note),
		fig(ScenarioLoaded, system, OpPingPong, l.Bytes, p, report.MetricRTTMean, l.MeanUS, note),
		fig(ScenarioLoaded, system, lop, l.LoadBytes, p, report.MetricGbps, l.LoadGbps, "the load beside the ping-pong, payload bytes over its window"),
		fig(ScenarioLoaded, system, lop, l.LoadBytes, p, report.MetricMsgRate, l.LoadMsgPerS, "the load beside the ping-pong, over its window"),
	}, nil
}

// linkFigures returns the figures of system in a bench/linkbench run: the 64 B ping-pong
// (round trip p50, p99, mean; CPU) and the one-way stream at each size (datagrams received
// per second, Gbit/s of IP packet bytes; CPU), or unsupported where the link cannot carry
// the size. Size is the IP packet length.
func linkFigures(system string, res *linkbench.Results) ([]figure, error) {
	var out []figure
	cpuHow := "getrusage of the harness's process (both hosts) over the window"
	for _, r := range res.Records {
		if r.System != system {
			continue
		}
		scenario, op := ScenarioStream, OpSend
		if r.Benchmark == linkbench.BenchPingPong {
			scenario, op = ScenarioPingPong, OpPingPong
		}
		sizeNote := "size is the IP packet length (UDP payload = size - 28)"
		switch r.Metric {
		case linkbench.MetricUnsupported:
			out = append(out, unsupported(scenario, system, op, r.Size, r.Note))
			continue
		case report.MetricRTTP50, report.MetricRTTP99, report.MetricRTTMean, report.MetricMsgRate:
		case report.MetricGbps:
			sizeNote = "IP packet bytes; " + sizeNote
		case report.MetricCPUMsg, report.MetricCores:
			sizeNote = cpuNote(cpuHow, true) + "; " + sizeNote
		default:
			continue
		}
		if len(r.Runs) == 0 {
			continue
		}
		out = append(out, fig(scenario, system, op, r.Size, nil, r.Metric, r.Value, sizeNote))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bench/linkbench gave no figure of %s", system)
	}
	return out, nil
}

// Notes of the tools' figures.
const (
	noteHalf     = "round trip: the tool's figure, half a round trip, doubled"
	noteMeanOnly = "the tool reports only a mean"
)

// wantCPU reports whether size is one of cpuSizes (sockperf's largest, 65507, stands for
// 64 KiB).
func wantCPU(size int, cpuSizes []int) bool {
	return slices.Contains(cpuSizes, size) || (size == tools.SockperfMaxSize && slices.Contains(cpuSizes, 64<<10))
}

// usageFigures returns the CPU figures of a tool's run from its Usage: both processes
// over their whole lives, or over the test window when the tool says when that is.
func usageFigures(scenario, system, op string, size int, u tools.Usage, polls bool) []figure {
	how := "rusage of both processes at exit, over their whole lives"
	per, cores := u.PerMessageUS(), u.Cores()
	if w := u.Window; w != nil {
		how = "/proc/PID/stat of both processes over the tool's test phase"
		per, cores = w.PerMessageUS(), w.Cores()
	}
	if per <= 0 {
		return nil
	}
	return []figure{
		fig(scenario, system, op, size, nil, report.MetricCPUMsg, per, cpuNote(how, polls)),
		fig(scenario, system, op, size, nil, report.MetricCores, cores, cpuNote(how, polls)),
	}
}

// qperfLatFigures returns the figures of qperf's tcp_lat: its mean round trip (qperf
// prints half of it and no percentile) and, at the CPU sizes, both processes' CPU.
func qperfLatFigures(r *tools.QperfLat, cpuSizes []int) []figure {
	out := []figure{fig(ScenarioPingPong, SystemQperfTCP, OpPingPong, r.Size, nil, report.MetricRTTMean, r.RTTUS, noteHalf+"; "+noteMeanOnly)}
	if wantCPU(r.Size, cpuSizes) {
		out = append(out, usageFigures(ScenarioPingPong, SystemQperfTCP, OpPingPong, r.Size, r.Usage, false)...)
	}
	return out
}

// qperfBWFigures returns the figures of qperf's tcp_bw -m SIZE: the messages and bytes the
// receiver got per second, and both processes' CPU at the CPU sizes.
func qperfBWFigures(r *tools.QperfBW, cpuSizes []int) []figure {
	out := []figure{
		fig(ScenarioStream, SystemQperfTCP, OpSend, r.Size, nil, report.MetricMsgRate, r.MsgRate, "SIZE-byte sends; TCP coalesces them into segments"),
		fig(ScenarioStream, SystemQperfTCP, OpSend, r.Size, nil, report.MetricGbps, r.BW*8/1e9, "payload bytes the receiver got"),
	}
	if wantCPU(r.Size, cpuSizes) {
		out = append(out, usageFigures(ScenarioStream, SystemQperfTCP, OpSend, r.Size, r.Usage, false)...)
	}
	return out
}

// iperf3Figures returns the figures of an iperf3 run: the goodput the server received and
// the writes' worth of it per second (TCP keeps no message boundary), and both processes'
// CPU at the CPU sizes.
func iperf3Figures(r *tools.Iperf3, cpuSizes []int) []figure {
	out := []figure{fig(ScenarioStream, SystemIperf3TCP, OpSend, r.Size, nil, report.MetricGbps, r.ReceivedBPS/1e9, "payload bytes the receiver got (end.sum_received)")}
	if r.ReceivedSeconds > 0 && r.Size > 0 {
		out = append(out, fig(ScenarioStream, SystemIperf3TCP, OpSend, r.Size, nil, report.MetricMsgRate,
			float64(r.ReceivedBytes)/float64(r.Size)/r.ReceivedSeconds, "received bytes / -l per second: TCP keeps no message boundary"))
	}
	if wantCPU(r.Size, cpuSizes) {
		out = append(out, usageFigures(ScenarioStream, SystemIperf3TCP, OpSend, r.Size, r.Usage, false)...)
	}
	return out
}

// sockperfSystem is the system of a sockperf run.
func sockperfSystem(polling bool) string {
	if polling {
		return SystemSockperfUDPPoll
	}
	return SystemSockperfUDP
}

// sockperfPingPongFigures returns the figures of a sockperf ping-pong: the round trip's
// median, 99th percentile and mean (sockperf prints halves), and both processes' CPU over
// the test phase at the CPU sizes.
func sockperfPingPongFigures(r *tools.SockperfPingPong, cpuSizes []int) []figure {
	sys := sockperfSystem(r.Polling)
	out := []figure{
		fig(ScenarioPingPong, sys, OpPingPong, r.Size, nil, report.MetricRTTP50, r.RTT.P50, noteHalf),
		fig(ScenarioPingPong, sys, OpPingPong, r.Size, nil, report.MetricRTTP99, r.RTT.P99, noteHalf),
		fig(ScenarioPingPong, sys, OpPingPong, r.Size, nil, report.MetricRTTMean, r.RTT.Avg, noteHalf),
	}
	if wantCPU(r.Size, cpuSizes) {
		out = append(out, usageFigures(ScenarioPingPong, sys, OpPingPong, r.Size, r.Usage, r.Polling)...)
	}
	return out
}

// sockperfThroughputFigures returns the figures of a sockperf throughput run: what the
// server received per second of the client's test, in messages and Gbit/s of UDP payload,
// and both processes' CPU over the test phase at the CPU sizes.
func sockperfThroughputFigures(r *tools.SockperfThroughput, cpuSizes []int) []figure {
	sys := sockperfSystem(r.Polling)
	rate := r.ReceivedRate()
	out := []figure{
		fig(ScenarioStream, sys, OpSend, r.Size, nil, report.MetricMsgRate, rate, "datagrams the server received per second of the client's test"),
		fig(ScenarioStream, sys, OpSend, r.Size, nil, report.MetricGbps, rate*float64(r.Size)*8/1e9, "UDP payload bytes the server received"),
	}
	if wantCPU(r.Size, cpuSizes) {
		out = append(out, usageFigures(ScenarioStream, sys, OpSend, r.Size, r.Usage, r.Polling)...)
	}
	return out
}

// fabricFigures returns the figures of an fi_pingpong run of system: its mean round trip
// (usec/xfer is half of it, and the only latency it prints) and, at the CPU sizes, both
// processes' CPU over their lives (libfabric's start-up included).
func fabricFigures(system string, r *tools.FabricPingPong, cpuSizes []int) []figure {
	out := []figure{fig(ScenarioPingPong, system, OpPingPong, r.Size, nil, report.MetricRTTMean, r.RTTUS, noteHalf+"; "+noteMeanOnly)}
	if wantCPU(r.Size, cpuSizes) {
		out = append(out, usageFigures(ScenarioPingPong, system, OpPingPong, r.Size, r.Usage, true)...)
	}
	return out
}

// tcpLoadedFigures returns the figures of qperf's tcp_lat run while iperf3 streamed: the
// mean round trip under the load (qperf-tcp) and the stream's goodput (iperf3-tcp).
func tcpLoadedFigures(lat *tools.QperfLat, load *tools.Iperf3) []figure {
	p := loadParams(load.Size)
	return []figure{
		fig(ScenarioLoaded, SystemQperfTCP, OpPingPong, lat.Size, p, report.MetricRTTMean, lat.RTTUS,
			fmt.Sprintf("qperf tcp_lat while iperf3 streams %d B writes over another TCP connection; %s; %s", load.Size, noteHalf, noteMeanOnly)),
		fig(ScenarioLoaded, SystemIperf3TCP, OpSend, load.Size, p, report.MetricGbps, load.ReceivedBPS/1e9,
			"the load beside qperf's ping-pong: iperf3's goodput over its whole run, which covers the ping-pong's"),
	}
}
