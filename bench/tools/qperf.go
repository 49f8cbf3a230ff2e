package tools

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// QperfProto is the transport of a qperf socket test.
type QperfProto string

// The transports of qperf's socket tests.
const (
	QperfTCP QperfProto = "tcp"
	QperfUDP QperfProto = "udp"
)

// QperfCPU is qperf's own CPU report for one side (-vv). qperf reads the aggregate "cpu"
// line of /proc/stat, which is machine-wide: with both hosts on one machine the two sides
// report the same figure, and it includes everything else the machine ran meanwhile. It is
// kept for the record; Run.Usage has the processes' own CPU time.
type QperfCPU struct {
	// Used, User, Intr and Kernel are percentages of one CPU (200 is two CPUs busy):
	// cpus_used and its parts.
	Used   float64 `json:"used_pct"`
	User   float64 `json:"user_pct"`
	Intr   float64 `json:"intr_pct"`
	Kernel float64 `json:"kernel_pct"`
	// CPUTime and RealTime are cpu_time and real_time, in seconds.
	CPUTime  float64 `json:"cpu_time_s"`
	RealTime float64 `json:"real_time_s"`
}

// QperfLat is the result of qperf's tcp_lat or udp_lat: a ping-pong of Size-byte messages
// for a fixed time, one message in flight.
type QperfLat struct {
	// Test is "tcp_lat" or "udp_lat".
	Test string `json:"test"`
	// Size is the message size qperf reports (msg_size), in bytes.
	Size int `json:"size"`
	// LatencyUS is qperf's latency: half the mean round trip, in µs.
	LatencyUS float64 `json:"latency_us"`
	// RTTUS is the mean round trip, 2 × LatencyUS.
	RTTUS float64 `json:"rtt_us"`
	// MsgRate is msg_rate, messages per second counting both directions (1 / latency).
	MsgRate float64 `json:"msg_rate"`
	// Seconds is the measured time (time).
	Seconds float64 `json:"seconds"`
	// LocSendMsgs, LocRecvMsgs (the client's) and RemSendMsgs, RemRecvMsgs (the server's)
	// are the messages each side sent and received.
	LocSendMsgs int64 `json:"loc_send_msgs"`
	LocRecvMsgs int64 `json:"loc_recv_msgs"`
	RemSendMsgs int64 `json:"rem_send_msgs"`
	RemRecvMsgs int64 `json:"rem_recv_msgs"`
	// Loc and Rem are qperf's CPU reports of the client and the server (machine-wide).
	Loc QperfCPU `json:"loc_cpu"`
	Rem QperfCPU `json:"rem_cpu"`
	// Run is how it was run; Run.Usage.Messages is LocRecvMsgs + RemRecvMsgs.
	Run
}

// QperfBW is the result of qperf's tcp_bw or udp_bw: the client streams Size-byte messages
// to the server for a fixed time.
type QperfBW struct {
	// Test is "tcp_bw" or "udp_bw".
	Test string `json:"test"`
	// Size is msg_size, in bytes.
	Size int `json:"size"`
	// BW is the bandwidth the receiver got, in bytes per second: bw (tcp_bw) or recv_bw
	// (udp_bw).
	BW float64 `json:"bw_bytes_per_s"`
	// SendBW is udp_bw's send_bw in bytes per second; tcp_bw prints none and it is 0.
	SendBW float64 `json:"send_bw_bytes_per_s,omitempty"`
	// MsgRate is msg_rate: messages received per second.
	MsgRate float64 `json:"msg_rate"`
	// Seconds is the measured time (time).
	Seconds float64 `json:"seconds"`
	// SendBytes, SendMsgs, RecvBytes and RecvMsgs are what the client sent and the server
	// received.
	SendBytes int64 `json:"send_bytes"`
	SendMsgs  int64 `json:"send_msgs"`
	RecvBytes int64 `json:"recv_bytes"`
	RecvMsgs  int64 `json:"recv_msgs"`
	// SendCost and RecvCost are send_cost and recv_cost, CPU nanoseconds per gigabyte,
	// computed by qperf from its machine-wide CPU figure.
	SendCost float64 `json:"send_cost_ns_per_gb"`
	RecvCost float64 `json:"recv_cost_ns_per_gb"`
	// Send and Recv are qperf's CPU reports of the client and the server (machine-wide).
	Send QperfCPU `json:"send_cpu"`
	Recv QperfCPU `json:"recv_cpu"`
	// Run is how it was run; Run.Usage.Messages is RecvMsgs.
	Run
}

// qperfField is one "name = value unit" line of qperf's report.
type qperfField struct {
	v    float64
	unit string
}

// qperfReport is one test's section of qperf's output: its fields, and any other line
// (an error message) it printed.
type qperfReport struct {
	test   string
	fields map[string]qperfField
	other  []string
}

// parseQperf splits qperf's output into its tests' sections ("tcp_lat:" followed by
// indented "name = value unit" lines).
func parseQperf(out []byte) ([]*qperfReport, error) {
	var reports []*qperfReport
	var cur *qperfReport
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), " \t\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		if line[0] != ' ' && line[0] != '\t' && strings.HasSuffix(line, ":") && !strings.Contains(line, " ") {
			cur = &qperfReport{test: strings.TrimSuffix(line, ":"), fields: map[string]qperfField{}}
			reports = append(reports, cur)
			continue
		}
		if cur == nil {
			return nil, fmt.Errorf("qperf printed %q before any test", strings.TrimSpace(line))
		}
		name, rest, ok := strings.Cut(line, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.Contains(name, " ") || !strings.HasPrefix(line, " ") {
			cur.other = append(cur.other, strings.TrimSpace(line))
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			cur.other = append(cur.other, strings.TrimSpace(line))
			continue
		}
		v, err := strconv.ParseFloat(strings.ReplaceAll(f[0], ",", ""), 64)
		if err != nil {
			return nil, fmt.Errorf("qperf %s: %s: value %q: %w", cur.test, name, f[0], err)
		}
		unit := strings.Join(f[1:], " ")
		if i := strings.Index(unit, " ("); i >= 0 { // "64 KiB (65,536)"
			unit = unit[:i]
		}
		cur.fields[name] = qperfField{v, unit}
	}
	return reports, sc.Err()
}

// qperfUnits maps each unit qperf prints to its factor to the base unit of its kind:
// seconds, per second, bytes per second, bytes, percent, ns/GB, or a plain count.
var qperfUnits = map[string]map[string]float64{
	"time":    {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "sec": 1},
	"rate":    {"/sec": 1, "K/sec": 1e3, "M/sec": 1e6, "G/sec": 1e9},
	"bw":      {"bytes/sec": 1, "KB/sec": 1e3, "MB/sec": 1e6, "GB/sec": 1e9},
	"size":    {"bytes": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30},
	"percent": {"% cpus": 1},
	"cost":    {"ns/GB": 1},
	"count":   {"": 1},
}

// get returns the field name converted to the base unit of kind; a missing field or an
// unknown unit is an error.
func (r *qperfReport) get(name, kind string) (float64, error) {
	f, ok := r.fields[name]
	if !ok {
		return 0, fmt.Errorf("qperf %s: no %s in the report", r.test, name)
	}
	k, ok := qperfUnits[kind][f.unit]
	if !ok {
		return 0, fmt.Errorf("qperf %s: %s in unknown unit %q", r.test, name, f.unit)
	}
	return f.v * k, nil
}

// getter collects the first error of a series of get calls.
type getter struct {
	r   *qperfReport
	err error
}

func (g *getter) f(name, kind string) float64 {
	v, err := g.r.get(name, kind)
	if err != nil && g.err == nil {
		g.err = err
	}
	return v
}

func (g *getter) i(name, kind string) int64 { return int64(g.f(name, kind) + 0.5) }

// part is a part of qperf's CPU report, which leaves out a part that is zero (measured: no
// rem_cpus_user line when the machine spent no user time over the test, all of it kernel
// and interrupt work, as qperf's own tests are): 0 when missing, like its value.
func (g *getter) part(name string) float64 {
	if _, ok := g.r.fields[name]; !ok {
		return 0
	}
	return g.f(name, "percent")
}

func (g *getter) cpu(prefix string) QperfCPU {
	return QperfCPU{
		Used: g.f(prefix+"_cpus_used", "percent"), User: g.part(prefix + "_cpus_user"),
		Intr: g.part(prefix + "_cpus_intr"), Kernel: g.part(prefix + "_cpus_kernel"),
		CPUTime: g.f(prefix+"_cpu_time", "time"), RealTime: g.f(prefix+"_real_time", "time"),
	}
}

// qperfSection returns the report of test in out, or an error carrying what qperf printed
// instead of figures.
func qperfSection(out []byte, test string) (*qperfReport, error) {
	reports, err := parseQperf(out)
	if err != nil {
		return nil, err
	}
	for _, r := range reports {
		if r.test != test {
			continue
		}
		if len(r.other) > 0 {
			return nil, fmt.Errorf("qperf %s: %s", test, strings.Join(r.other, "; "))
		}
		if len(r.fields) == 0 {
			return nil, fmt.Errorf("qperf %s: no figures", test)
		}
		return r, nil
	}
	return nil, fmt.Errorf("qperf printed no %s report", test)
}

// ParseQperfLat parses the output of `qperf -vv -uu ... tcp_lat` (or udp_lat): every
// figure QperfLat holds must be there and the latency positive. Its Run is left empty.
func ParseQperfLat(out []byte, test string) (*QperfLat, error) {
	if test != "tcp_lat" && test != "udp_lat" {
		return nil, fmt.Errorf("qperf: %q is not a latency test", test)
	}
	r, err := qperfSection(out, test)
	if err != nil {
		return nil, err
	}
	g := &getter{r: r}
	res := &QperfLat{
		Test:        test,
		Size:        int(g.i("msg_size", "size")),
		LatencyUS:   g.f("latency", "time") * 1e6,
		MsgRate:     g.f("msg_rate", "rate"),
		Seconds:     g.f("time", "time"),
		LocSendMsgs: g.i("loc_send_msgs", "count"), LocRecvMsgs: g.i("loc_recv_msgs", "count"),
		RemSendMsgs: g.i("rem_send_msgs", "count"), RemRecvMsgs: g.i("rem_recv_msgs", "count"),
		Loc: g.cpu("loc"), Rem: g.cpu("rem"),
	}
	if g.err != nil {
		return nil, g.err
	}
	if !(res.LatencyUS > 0) || res.LocRecvMsgs <= 0 {
		return nil, fmt.Errorf("qperf %s: latency %v µs over %d messages: no measurement", test, res.LatencyUS, res.LocRecvMsgs)
	}
	res.RTTUS = 2 * res.LatencyUS
	return res, nil
}

// ParseQperfBW parses the output of `qperf -vv -uu ... tcp_bw` (or udp_bw): every figure
// QperfBW holds must be there and the bandwidth positive. Its Run is left empty.
func ParseQperfBW(out []byte, test string) (*QperfBW, error) {
	var bw string
	switch test {
	case "tcp_bw":
		bw = "bw"
	case "udp_bw":
		bw = "recv_bw"
	default:
		return nil, fmt.Errorf("qperf: %q is not a bandwidth test", test)
	}
	r, err := qperfSection(out, test)
	if err != nil {
		return nil, err
	}
	g := &getter{r: r}
	res := &QperfBW{
		Test:     test,
		Size:     int(g.i("msg_size", "size")),
		BW:       g.f(bw, "bw"),
		MsgRate:  g.f("msg_rate", "rate"),
		Seconds:  g.f("time", "time"),
		SendMsgs: g.i("send_msgs", "count"), SendBytes: g.i("send_bytes", "size"),
		RecvMsgs: g.i("recv_msgs", "count"), RecvBytes: g.i("recv_bytes", "size"),
		SendCost: g.f("send_cost", "cost"), RecvCost: g.f("recv_cost", "cost"),
		Send: g.cpu("send"), Recv: g.cpu("recv"),
	}
	if test == "udp_bw" {
		res.SendBW = g.f("send_bw", "bw")
	}
	if g.err != nil {
		return nil, g.err
	}
	if !(res.BW > 0) || res.RecvMsgs <= 0 {
		return nil, errors.New("qperf " + test + ": nothing received: no measurement")
	}
	return res, nil
}
