package tools

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The testdata are the tools' real outputs on the two-namespace bed of this project's
// machine (2 vCPUs shared with other work), captured by the smoke test
// (XDPNDK_TOOLS_CAPTURE) or, for the odd cases, by hand with the same command lines
// (testdata/README.md).

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// without returns out without its lines that contain s.
func without(out []byte, s string) []byte {
	var keep []string
	for _, l := range strings.Split(string(out), "\n") {
		if !strings.Contains(l, s) {
			keep = append(keep, l)
		}
	}
	return []byte(strings.Join(keep, "\n"))
}

// replaced returns out with old replaced by new, which must occur.
func replaced(t *testing.T, out []byte, old, new string) []byte {
	t.Helper()
	if !strings.Contains(string(out), old) {
		t.Fatalf("%q not in the capture", old)
	}
	return []byte(strings.Replace(string(out), old, new, 1))
}

// setQperf returns qperf's output out with field name's line replaced by "name = value".
func setQperf(t *testing.T, out []byte, name, value string) []byte {
	t.Helper()
	lines := strings.Split(string(out), "\n")
	for i, l := range lines {
		if f := strings.Fields(l); len(f) > 1 && f[0] == name && f[1] == "=" {
			lines[i] = "    " + name + " = " + value
			return []byte(strings.Join(lines, "\n"))
		}
	}
	t.Fatalf("no %s in the capture", name)
	return nil
}

// wantErr fails unless err is non-nil and its message contains every part.
func wantErr(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
		return
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %q lacks %q", what, err, p)
		}
	}
}

func TestParseQperfLat(t *testing.T) {
	out := read(t, "qperf_tcp_lat_64.out")
	r, err := ParseQperfLat(out, "tcp_lat")
	if err != nil {
		t.Fatal(err)
	}
	// latency = 11422.6258 ns; msg_rate = 87545.5446 /sec (both directions); 1 s.
	want := QperfLat{Test: "tcp_lat", Size: 64, LatencyUS: 11.4226258, RTTUS: 22.8452516, MsgRate: 87545.5446, Seconds: 1,
		LocSendMsgs: 44210, LocRecvMsgs: 44210, RemSendMsgs: 44210, RemRecvMsgs: 44211,
		Loc: QperfCPU{Used: 200, User: 94.0594059, Intr: 19.8019802, Kernel: 86.1386139, CPUTime: 2.019999981, RealTime: 1.01},
		Rem: QperfCPU{Used: 200, User: 94.0594059, Intr: 19.8019802, Kernel: 86.1386139, CPUTime: 2.019999981, RealTime: 1.01}}
	if !near(r.LatencyUS, want.LatencyUS) || !near(r.RTTUS, want.RTTUS) || !near(r.Loc.CPUTime, want.Loc.CPUTime) ||
		!near(r.Loc.RealTime, want.Loc.RealTime) {
		t.Errorf("latency %v / %v µs, cpu time %v s, real time %v s", r.LatencyUS, r.RTTUS, r.Loc.CPUTime, r.Loc.RealTime)
	}
	// Nanoseconds scaled to seconds or microseconds: compared above to a relative 1e-9.
	r.LatencyUS, r.RTTUS = want.LatencyUS, want.RTTUS
	r.Loc.CPUTime, r.Rem.CPUTime, r.Loc.RealTime, r.Rem.RealTime = want.Loc.CPUTime, want.Rem.CPUTime, want.Loc.RealTime, want.Rem.RealTime
	if !equalJSON(t, r, &want) {
		t.Errorf("got  %+v\nwant %+v", *r, want)
	}

	u, err := ParseQperfLat(read(t, "qperf_udp_lat_64.out"), "udp_lat")
	if err != nil {
		t.Fatal(err)
	}
	if u.Test != "udp_lat" || u.Size != 64 || !(u.LatencyUS > 1 && u.LatencyUS < 1e4) || u.RTTUS != 2*u.LatencyUS {
		t.Errorf("udp_lat: %+v", u)
	}

	// The same output asked for the other test, a missing line, an unknown unit, and
	// qperf's own failure.
	_, err = ParseQperfLat(out, "udp_lat")
	wantErr(t, "wrong test", err, "no udp_lat report")
	_, err = ParseQperfLat(without(out, "rem_recv_msgs"), "tcp_lat")
	wantErr(t, "missing line", err, "no rem_recv_msgs")
	// qperf leaves out a CPU part that is zero (seen: no rem_cpus_user when the machine
	// spent no user time over the test): it reads as 0; cpus_used stays required.
	z, err := ParseQperfLat(without(out, "rem_cpus_user"), "tcp_lat")
	if err != nil || z.Rem.User != 0 || z.Rem.Kernel == 0 || z.Loc.User == 0 {
		t.Errorf("a zero CPU part left out: %+v, %v", z, err)
	}
	_, err = ParseQperfLat(without(out, "loc_cpus_used"), "tcp_lat")
	wantErr(t, "missing cpus_used", err, "no loc_cpus_used")
	_, err = ParseQperfLat(setQperf(t, out, "latency", "11 fortnights"), "tcp_lat")
	wantErr(t, "unknown unit", err, "unknown unit")
	_, err = ParseQperfLat(read(t, "qperf_noserver.out"), "tcp_lat")
	wantErr(t, "no server", err, "failed to connect")
	_, err = ParseQperfLat(nil, "tcp_lat")
	wantErr(t, "empty", err, "no tcp_lat report")
	_, err = ParseQperfLat(out, "tcp_bw")
	wantErr(t, "not a latency test", err, "not a latency test")
}

func TestParseQperfBW(t *testing.T) {
	r, err := ParseQperfBW(read(t, "qperf_tcp_bw_64.out"), "tcp_bw")
	if err != nil {
		t.Fatal(err)
	}
	want := QperfBW{Test: "tcp_bw", Size: 64, BW: 22466560, MsgRate: 351040, Seconds: 1,
		SendBytes: 22617664, SendMsgs: 353401, RecvBytes: 22466560, RecvMsgs: 351040,
		SendCost: 88426461725, RecvCost: 88576088620,
		Send: QperfCPU{Used: 200, User: 97, Intr: 22, Kernel: 81, CPUTime: 2, RealTime: 1},
		Recv: QperfCPU{Used: 199, User: 97, Intr: 22, Kernel: 80, CPUTime: 1.99000001, RealTime: 1}}
	if !near(r.Recv.CPUTime, want.Recv.CPUTime) {
		t.Errorf("recv cpu time %v", r.Recv.CPUTime)
	}
	r.Recv.CPUTime = want.Recv.CPUTime
	if !equalJSON(t, r, &want) {
		t.Errorf("got  %+v\nwant %+v", *r, want)
	}

	big, err := ParseQperfBW(read(t, "qperf_tcp_bw_65536.out"), "tcp_bw")
	if err != nil {
		t.Fatal(err)
	}
	if big.Size != 65536 || !(big.BW > 1e6) || big.RecvBytes != big.RecvMsgs*65536 {
		t.Errorf("tcp_bw 65536: %+v", big)
	}

	u, err := ParseQperfBW(read(t, "qperf_udp_bw_64.out"), "udp_bw")
	if err != nil {
		t.Fatal(err)
	}
	if !(u.SendBW >= u.BW && u.BW > 0) || u.SendMsgs < u.RecvMsgs || u.MsgRate != float64(u.RecvMsgs) {
		t.Errorf("udp_bw: %+v", u)
	}

	out := read(t, "qperf_udp_bw_64.out")
	_, err = ParseQperfBW(without(out, "send_bw"), "udp_bw")
	wantErr(t, "missing send_bw", err, "no send_bw")
	_, err = ParseQperfBW(without(out, "recv_bw"), "udp_bw")
	wantErr(t, "missing recv_bw", err, "no recv_bw")
	_, err = ParseQperfBW(replaced(t, out, "msg_rate", "msg_rate = x\n    junk"), "udp_bw")
	wantErr(t, "junk value", err, "value")
	zero := setQperf(t, setQperf(t, out, "recv_bw", "0 bytes/sec"), "recv_msgs", "0")
	_, err = ParseQperfBW(zero, "udp_bw")
	wantErr(t, "nothing received", err, "no measurement")
	_, err = ParseQperfBW(read(t, "qperf_noserver.out"), "tcp_bw")
	wantErr(t, "no server", err, "no tcp_bw report")
}

func TestParseIperf3(t *testing.T) {
	r, err := ParseIperf3(read(t, "iperf3_P1.out"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Version != "iperf 3.12" || r.Streams != 1 || r.Size != 131072 || r.Congestion != "cubic" || r.ReceiverCongestion != "cubic" {
		t.Errorf("header: %+v", r)
	}
	if !(r.ReceivedBytes > 0 && r.ReceivedBytes <= r.SentBytes && r.ReceivedBPS > 1e9 && r.SentSeconds > 0.9 && r.CPU.HostTotal > 0) {
		t.Errorf("figures: %+v", r)
	}
	p2, err := ParseIperf3(read(t, "iperf3_P2.out"))
	if err != nil {
		t.Fatal(err)
	}
	if p2.Streams != 2 || !(p2.ReceivedBPS > 0) {
		t.Errorf("-P 2: %+v", p2)
	}

	_, err = ParseIperf3(read(t, "iperf3_refused.json"))
	wantErr(t, "refused", err, "unable to connect to server: Connection refused")
	full := read(t, "iperf3_P1.out")
	_, err = ParseIperf3(full[:len(full)/2])
	wantErr(t, "truncated", err, "decode")
	_, err = ParseIperf3(replaced(t, full, `"sum_received"`, `"sum_received_not"`))
	wantErr(t, "no sum_received", err, "sum_received")
	_, err = ParseIperf3(replaced(t, full, `"cpu_utilization_percent"`, `"cpu"`))
	wantErr(t, "no cpu", err, "cpu_utilization_percent")
	_, err = ParseIperf3(replaced(t, full, `"protocol":	"TCP"`, `"protocol":	"UDP"`))
	wantErr(t, "udp", err, `"UDP"`)
	_, err = ParseIperf3([]byte(`{"start": {}, "intervals": [], "end": {}}`))
	wantErr(t, "empty", err, "test_start")
}

func TestParseSockperfPingPong(t *testing.T) {
	r, err := ParseSockperfPingPong(read(t, "sockperf_pp_64.out"), read(t, "sockperf_pp_64.server.out"))
	if err != nil {
		t.Fatal(err)
	}
	want := SockperfPingPong{RunSeconds: 1, WarmupMS: 400, Sent: 21009, Received: 21008, ValidSeconds: 0.55,
		ValidSent: 10893, ValidReceived: 10893, ServerReceived: 21009, Observations: 10893}
	got := *r
	got.Latency, got.RTT = SockperfLatency{}, SockperfLatency{}
	if !equalJSON(t, &got, &want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	l := r.Latency
	if l.Avg <= 0 || l.Min <= 0 || l.P50 < l.Min || l.P90 < l.P50 || l.P99 < l.P90 || l.P999 < l.P99 ||
		l.P9999 < l.P999 || l.P99999 < l.P9999 || l.Max < l.P99999 || l.P25 > l.P50 || l.P75 < l.P50 {
		t.Errorf("latency not ordered: %+v", l)
	}
	if r.RTT.P50 != 2*l.P50 || r.RTT.Max != 2*l.Max || r.RTT.Avg != 2*l.Avg {
		t.Errorf("rtt %+v, latency %+v", r.RTT, l)
	}

	// Polling on a busy machine: few observations, still a valid report.
	p, err := ParseSockperfPingPong(read(t, "sockperf_polling_pp_64.out"), read(t, "sockperf_polling_pp_64.server.out"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Observations != 161 || p.ServerReceived != 189 {
		t.Errorf("polling: %+v", p)
	}
	big, err := ParseSockperfPingPong(read(t, "sockperf_pp_8972.out"), read(t, "sockperf_pp_8972.server.out"))
	if err != nil {
		t.Fatal(err)
	}
	if big.Latency.P50 != 7.606 || big.Latency.Max != 9969.072 {
		t.Errorf("8972: %+v", big.Latency)
	}

	client, server := read(t, "sockperf_pp_64.out"), read(t, "sockperf_pp_64.server.out")
	_, err = ParseSockperfPingPong(read(t, "sockperf_pp_noserver.out"), nil)
	wantErr(t, "no server", err, "No messages were received from the server")
	_, err = ParseSockperfPingPong(without(client, "percentile 99.900"), server)
	wantErr(t, "missing percentile", err, "percentile 99.900")
	_, err = ParseSockperfPingPong(without(client, "<MIN>"), server)
	wantErr(t, "missing min", err, "<MIN>")
	_, err = ParseSockperfPingPong(without(client, "[Valid Duration]"), server)
	wantErr(t, "missing valid", err, "[Valid Duration]")
	_, err = ParseSockperfPingPong(client, without(server, "received and handled"))
	wantErr(t, "server killed", err, "(server)")
	_, err = ParseSockperfPingPong(replaced(t, client, "Summary: Latency is", "Summary: Round trip is"), server)
	wantErr(t, "full rtt", err, "Round trip")
}

func TestParseSockperfThroughput(t *testing.T) {
	r, err := ParseSockperfThroughput(read(t, "sockperf_tp_64.out"), read(t, "sockperf_tp_64.server.out"))
	if err != nil {
		t.Fatal(err)
	}
	want := SockperfThroughput{Sent: 39168, SendSeconds: 1.001, SendRate: 39126, SendMBps: 2.388, Received: 31635}
	if !equalJSON(t, r, &want) {
		t.Errorf("got  %+v\nwant %+v", *r, want)
	}
	if got := r.ReceivedRate(); !near(got, 31635/1.001) {
		t.Errorf("received rate %v", got)
	}
	client, server := read(t, "sockperf_tp_64.out"), read(t, "sockperf_tp_64.server.out")
	_, err = ParseSockperfThroughput(client, without(server, "received and handled"))
	wantErr(t, "server killed", err, "(server)")
	_, err = ParseSockperfThroughput(without(client, "Message Rate"), server)
	wantErr(t, "no rate", err, "message rate")
	_, err = ParseSockperfThroughput(read(t, "sockperf_pp_noserver.out"), nil)
	wantErr(t, "no server", err, "count of messages sent", "No messages")
	_, err = ParseSockperfThroughput(replaced(t, client, "Total of 39168", "Total of 0"), server)
	wantErr(t, "nothing sent", err, "no measurement")
}

func TestParseFabricRow(t *testing.T) {
	r, err := ParseFabricRow(read(t, "fi_pingpong_tcp_msg_64.out"))
	if err != nil {
		t.Fatal(err)
	}
	// 64      2k      =2k      250k       12.73s      0.02    3182.46       0.00 (a busy machine)
	want := FabricRow{Bytes: 64, Sent: 2000, Acked: 2000, AllAcked: true, Total: 250 * 1024, Seconds: 12.73, MBps: 0.02,
		USPerXfer: 3182.46, MXfersPerSec: 0}
	if r != want {
		t.Errorf("got  %+v\nwant %+v", r, want)
	}
	big, err := ParseFabricRow(read(t, "fi_pingpong_tcp_msg_65536.out"))
	if err != nil {
		t.Fatal(err)
	}
	if big.Bytes != 65536 || big.Sent != 200 || big.Total != 25*1024*1024 {
		t.Errorf("65536: %+v", big)
	}
	for _, name := range []string{"tcp_rdm_64", "tcp_ofi_rxm_rdm_64", "udp_ofi_rxd_rdm_64", "udp_dgram_64", "sockets_msg_64", "sockets_rdm_64"} {
		for _, side := range []string{".out", ".server.out"} {
			r, err := ParseFabricRow(read(t, "fi_pingpong_"+name+side))
			if err != nil {
				t.Errorf("%s%s: %v", name, side, err)
			} else if r.Bytes != 64 || !r.AllAcked || !(r.USPerXfer > 0) {
				t.Errorf("%s%s: %+v", name, side, r)
			}
		}
	}

	_, err = ParseFabricRow(read(t, "fi_pingpong_noserver.out"))
	wantErr(t, "no server", err, "failed to connect: Connection refused")
	_, err = ParseFabricRow(read(t, "fi_pingpong_udp_dgram_8972.server.out"))
	wantErr(t, "refused size", err, "ret=-61")
	out := read(t, "fi_pingpong_tcp_msg_64.out")
	_, err = ParseFabricRow(without(out, "usec/xfer"))
	wantErr(t, "no header", err, "no result")
	_, err = ParseFabricRow(without(out, "=2k"))
	wantErr(t, "no row", err, "no result")
	_, err = ParseFabricRow(append(out, out[strings.Index(string(out), "\n")+1:]...))
	wantErr(t, "two rows", err, "2 rows")
	_, err = ParseFabricRow(replaced(t, out, "12.73s", "12.73"))
	wantErr(t, "time without unit", err, "no unit")
	_, err = ParseFabricRow(replaced(t, out, "3182.46", "x"))
	wantErr(t, "bad number", err, "usec/xfer")
	_, err = ParseFabricRow(replaced(t, out, "3182.46", "0.00"))
	wantErr(t, "zero", err, "no measurement")
	if why := fabricRefusal(string(read(t, "fi_pingpong_udp_dgram_8972.server.out"))); !strings.Contains(why, "-61") {
		t.Errorf("refusal %q", why)
	}
	if why := fabricRefusal(string(read(t, "fi_pingpong_noserver.out"))); why != "" {
		t.Errorf("a refused connection is no refusal of the size: %q", why)
	}
}

func TestFabricSupport(t *testing.T) {
	for _, f := range Fabrics {
		if why := FabricSupport(f, 64); why != "" {
			t.Errorf("%v at 64 bytes: %s", f, why)
		}
	}
	if FabricSupport(FabricUDPDgram, FabricUDPMaxSize) != "" || FabricSupport(FabricUDPDgram, FabricUDPMaxSize+1) == "" {
		t.Error("udp dgram's limit")
	}
	if FabricSupport(FabricUDPRxdRdm, 65536) != "" || FabricSupport(Fabric{"tcp", "stream"}, 64) == "" {
		t.Error("rxd carries large messages; stream is no endpoint type")
	}
	if len(FabricUnavailable) == 0 {
		t.Error("the unavailable fabtests are not listed")
	}
}

func TestParseVersions(t *testing.T) {
	for tool, want := range map[string]string{"qperf": "0.4.11", "iperf3": "3.12", "sockperf": "3.7-no.git", "libfabric": "1.17.0"} {
		file := "version_" + tool + ".out"
		if tool == "libfabric" {
			file = "version_fi_info.out"
		}
		got, err := ParseVersion(tool, read(t, file))
		if err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", tool, got, err, want)
		}
	}
	if _, err := ParseVersion("qperf", []byte("qperf: command not found")); err == nil {
		t.Error("no version accepted")
	}
	if _, err := ParseVersion("netperf", []byte("netperf 2.7")); err == nil {
		t.Error("unknown tool accepted")
	}
	p, err := ParseFabricProviders(read(t, "fi_info_l.out"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tcp", "udp", "ofi_rxd", "ofi_rxm", "sockets"} {
		if !slices.Contains(p, want) {
			t.Errorf("providers %q lack %s", p, want)
		}
	}
	if _, err := ParseFabricProviders(nil); err == nil {
		t.Error("no provider accepted")
	}
}

func TestUsage(t *testing.T) {
	u := Usage{Client: CPUTime{User: 100 * time.Millisecond, System: 400 * time.Millisecond},
		Server:     CPUTime{User: 200 * time.Millisecond, System: 300 * time.Millisecond},
		ClientWall: time.Second, ServerWall: 2 * time.Second, Messages: 1000}
	if u.CPU() != time.Second || u.PerMessageUS() != 1000 || u.Cores() != 0.75 {
		t.Errorf("cpu %v, per message %v µs, cores %v", u.CPU(), u.PerMessageUS(), u.Cores())
	}
	if (Usage{}).PerMessageUS() != 0 || (Usage{}).Cores() != 0 {
		t.Error("an empty usage has figures")
	}
	e := &RunError{Run: &Run{Tool: "qperf", ServerArgs: []string{"qperf"}, ClientArgs: []string{"qperf", "x"},
		ClientOut: "tcp_lat:\n\x1b[2;35mfailed\x1b[0m\n"}, Err: errors.New("boom")}
	wantErr(t, "run error", e, "qperf: boom", "server (B): qperf\n    (printed nothing)", "client (A): qperf x\n    | tcp_lat:\n    | failed")
	if !errors.Is(e, e.Err) {
		t.Error("RunError does not unwrap")
	}
	if wholeSeconds(0) != 1 || wholeSeconds(1500*time.Millisecond) != 2 || wholeSeconds(time.Second) != 1 {
		t.Error("wholeSeconds")
	}
}

// near reports whether a and b agree to 1e-9 relative.
func near(a, b float64) bool {
	d := a - b
	if d < 0 {
		d = -d
	}
	return d <= 1e-9*max(1, b, -b)
}

// equalJSON compares two values by their JSON encoding (floats as printed).
func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	x, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(x) == string(y)
}
