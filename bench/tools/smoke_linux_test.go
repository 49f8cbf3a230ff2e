//go:build linux

package tools

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/testbed"
)

// captureEnv names a directory where the smoke test writes every tool's raw output (the
// testdata of the parser tests are such captures): XDPNDK_TOOLS_CAPTURE=dir go test -run
// Smoke ./bench/tools.
const captureEnv = "XDPNDK_TOOLS_CAPTURE"

// capture writes a run's outputs to the capture directory, if one is set.
func capture(t *testing.T, name string, r *Run) {
	dir := os.Getenv(captureEnv)
	if dir == "" || r == nil {
		return
	}
	for file, out := range map[string]string{name + ".out": r.ClientOut, name + ".server.out": r.ServerOut} {
		if out == "" {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(out), 0o644); err != nil {
			t.Errorf("capture: %v", err)
		}
	}
}

// plausibleLatency fails unless us, a latency in µs, lies in [1 µs, maxUS].
func plausibleLatency(t *testing.T, what string, us, maxUS float64) {
	t.Helper()
	if !(us >= 1 && us <= maxUS) {
		t.Errorf("%s = %v µs, want within [1 µs, %v µs]", what, us, maxUS)
	}
}

// Latency limits: a median or a minimum within 10 ms; a mean, which a busy shared machine
// stretches (a descheduled process waits a time slice or more), within 100 ms.
const (
	plausibleUS     = 10e3
	plausibleMeanUS = 100e3
)

// positive fails unless every named figure is > 0.
func positive(t *testing.T, what string, figures map[string]float64) {
	t.Helper()
	for k, v := range figures {
		if !(v > 0) {
			t.Errorf("%s: %s = %v, want > 0", what, k, v)
		}
	}
}

// checkRun checks what every run must have: both command lines, both processes' CPU time
// and wall time, delivered messages.
func checkRun(t *testing.T, what string, r *Run) {
	t.Helper()
	u := r.Usage
	if len(r.ServerArgs) < 2 || len(r.ClientArgs) < 2 {
		t.Errorf("%s: command lines %q / %q", what, r.ServerArgs, r.ClientArgs)
	}
	positive(t, what, map[string]float64{
		"client CPU": u.Client.Total().Seconds(), "server CPU": u.Server.Total().Seconds(),
		"client wall": u.ClientWall.Seconds(), "server wall": u.ServerWall.Seconds(),
		"messages": float64(u.Messages), "CPU per message": u.PerMessageUS(), "cores": u.Cores(),
	})
	if u.ClientWall > u.ServerWall {
		t.Errorf("%s: the client lived %v, longer than the server's %v", what, u.ClientWall, u.ServerWall)
	}
	if c := u.Cores(); c > 2.5 {
		t.Errorf("%s: %v cores on a 2-CPU machine", what, c)
	}
	t.Logf("%s: client %v (%v), server %v (%v), %d messages: %.2f µs CPU/message, %.2f cores",
		what, u.Client.Total(), u.ClientWall.Round(time.Millisecond), u.Server.Total(), u.ServerWall.Round(time.Millisecond),
		u.Messages, u.PerMessageUS(), u.Cores())
	if w := u.Window; w != nil {
		// CPU is read in 10 ms ticks: a short window of a process that mostly sleeps
		// may show none; the client or the server of every tool here works in it.
		positive(t, what+" window", map[string]float64{"wall": w.Wall.Seconds(), "cpu": w.CPU().Seconds(),
			"messages": float64(w.Messages)})
		if w.Wall > u.ClientWall || w.Client > u.Client.Total()+20*time.Millisecond || w.Server > u.Server.Total()+20*time.Millisecond {
			t.Errorf("%s: window %+v outside the processes' lives %+v", what, *w, u)
		}
		t.Logf("%s: window %v: client %v, server %v, %d messages: %.2f µs CPU/message, %.2f cores",
			what, w.Wall.Round(time.Millisecond), w.Client, w.Server, w.Messages, w.PerMessageUS(), w.Cores())
	}
}

// TestSmoke runs every tool once between the two hosts of a bed, briefly, at 64 bytes and
// one bulk size, and checks that every figure is there, positive and plausible, and that
// the CPU of both processes was measured. It asserts nothing about speed: the machine is
// shared.
func TestSmoke(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{MTU: 9000, StaticNeighbors: true}) // skips without root
	for _, tool := range []string{"qperf", "iperf3", "sockperf", "fi_pingpong", "fi_info"} {
		if _, err := exec.LookPath(tool); err != nil {
			// Not a skip: make test's prerequisite step installs them.
			t.Fatalf("%s not found (go run ./internal/prereq test installs it): %v", tool, err)
		}
	}
	ctx := t.Context()
	const d = time.Second

	t.Run("versions", func(t *testing.T) {
		v, err := ToolVersions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if v.Qperf == "" || v.Iperf3 == "" || v.Sockperf == "" || v.Libfabric == "" || len(v.FabricProviders) == 0 {
			t.Errorf("versions %+v", v)
		}
		t.Logf("%+v", v)
	})

	t.Run("qperf", func(t *testing.T) {
		for _, proto := range []QperfProto{QperfTCP, QperfUDP} {
			lat, err := RunQperfLat(ctx, bed, proto, 64, d)
			if err != nil {
				t.Fatal(err)
			}
			capture(t, "qperf_"+string(proto)+"_lat_64", &lat.Run)
			plausibleLatency(t, lat.Test+" latency", lat.LatencyUS, plausibleUS)
			if lat.RTTUS != 2*lat.LatencyUS || lat.Size != 64 {
				t.Errorf("%s: %+v", lat.Test, lat)
			}
			positive(t, lat.Test, map[string]float64{"msg_rate": lat.MsgRate, "time": lat.Seconds,
				"loc_cpus_used": lat.Loc.Used, "rem_cpus_used": lat.Rem.Used, "rem_recv_msgs": float64(lat.RemRecvMsgs)})
			checkRun(t, lat.Test, &lat.Run)
		}
		for _, c := range []struct {
			proto QperfProto
			size  int
		}{{QperfTCP, 64}, {QperfTCP, 65536}, {QperfUDP, 64}} {
			bw, err := RunQperfBW(ctx, bed, c.proto, c.size, d)
			if err != nil {
				t.Fatal(err)
			}
			capture(t, "qperf_"+bw.Test+"_"+itoa(c.size), &bw.Run)
			positive(t, bw.Test, map[string]float64{"bw": bw.BW, "msg_rate": bw.MsgRate, "time": bw.Seconds,
				"send_msgs": float64(bw.SendMsgs), "recv_bytes": float64(bw.RecvBytes), "send_cost": bw.SendCost,
				"recv_cost": bw.RecvCost, "send_cpus_used": bw.Send.Used})
			if bw.Size != c.size || (c.proto == QperfUDP && !(bw.SendBW > 0)) {
				t.Errorf("%s: %+v", bw.Test, bw)
			}
			checkRun(t, bw.Test+" "+itoa(c.size), &bw.Run)
		}
	})

	t.Run("iperf3", func(t *testing.T) {
		for _, streams := range []int{1, 2} {
			res, err := RunIperf3(ctx, bed, 131072, streams, d)
			if err != nil {
				t.Fatal(err)
			}
			capture(t, "iperf3_P"+itoa(streams), &res.Run)
			positive(t, "iperf3", map[string]float64{"received": res.ReceivedBPS, "sent": res.SentBPS,
				"host cpu": res.CPU.HostTotal, "remote cpu": res.CPU.RemoteTotal, "seconds": res.ReceivedSeconds})
			if res.Streams != streams || res.Congestion != "cubic" || res.Version == "" {
				t.Errorf("iperf3: %+v", res)
			}
			checkRun(t, "iperf3 -P "+itoa(streams), &res.Run)
		}
	})

	t.Run("sockperf", func(t *testing.T) {
		for _, polling := range []bool{false, true} {
			name := "sockperf"
			if polling {
				name += " polling"
			}
			pp, err := RunSockperfPingPong(ctx, bed, 64, d, polling)
			if err != nil {
				t.Fatal(err)
			}
			capture(t, strings.ReplaceAll(name, " ", "_")+"_pp_64", &pp.Run)
			l := pp.Latency
			for k, v := range map[string]float64{"min": l.Min, "p50": l.P50} {
				plausibleLatency(t, name+" "+k, v, plausibleUS)
			}
			plausibleLatency(t, name+" avg", l.Avg, plausibleMeanUS)
			// The tail is the machine's: a polling process descheduled by other work waits
			// a whole time slice or more.
			if !(l.P99 >= 1 && l.Max <= 1e6) {
				t.Errorf("%s: p99 %v µs, max %v µs, want within [1 µs, 1 s]", name, l.P99, l.Max)
			}
			if !(l.Max >= l.P99 && l.P99 >= l.P50 && l.P50 >= l.Min) || pp.RTT.P50 != 2*l.P50 {
				t.Errorf("%s: latency %+v, rtt %+v", name, l, pp.RTT)
			}
			positive(t, name, map[string]float64{"observations": float64(pp.Observations), "valid seconds": pp.ValidSeconds})
			checkRun(t, name+" ping-pong", &pp.Run)
			if pp.Usage.Window == nil {
				t.Errorf("%s ping-pong: no window", name)
			}

			tp, err := RunSockperfThroughput(ctx, bed, 64, d, polling)
			if err != nil {
				t.Fatal(err)
			}
			capture(t, strings.ReplaceAll(name, " ", "_")+"_tp_64", &tp.Run)
			positive(t, name+" throughput", map[string]float64{"sent": float64(tp.Sent), "rate": tp.SendRate,
				"MBps": tp.SendMBps, "received": float64(tp.Received), "received rate": tp.ReceivedRate()})
			checkRun(t, name+" throughput", &tp.Run)
			if tp.Usage.Window == nil {
				t.Errorf("%s throughput: no window", name)
			}
		}
	})

	t.Run("libfabric", func(t *testing.T) {
		type tc struct {
			fab   Fabric
			size  int
			iters int
		}
		cases := []tc{{FabricTCPMsg, 65536, 100}, {FabricUDPDgram, 8972, 10}}
		for _, f := range Fabrics {
			iters := 1000
			if f.Provider == "sockets" {
				iters = 10 // milliseconds per transfer here: its progress thread and the polling main thread share 2 vCPUs
			}
			cases = append(cases, tc{f, 64, iters})
		}
		for _, c := range cases {
			what := c.fab.String() + " " + itoa(c.size)
			res, err := RunFabricPingPong(ctx, bed, c.fab, c.size, c.iters)
			if FabricSupport(c.fab, c.size) != "" {
				if !errors.Is(err, ErrUnsupported) || res == nil || res.Unsupported == "" {
					t.Errorf("%s: want unsupported, got %v", what, err)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s: %v", what, err)
				continue
			}
			capture(t, "fi_pingpong_"+strings.NewReplacer(";", "_", "/", "_").Replace(c.fab.String())+"_"+itoa(c.size), &res.Run)
			// usec/xfer is a mean, and both processes poll: the machine's load shows.
			// sockets' progress thread and the polling main thread of both processes share
			// 2 vCPUs: milliseconds per transfer, tens of them when the machine is busy.
			limit := plausibleMeanUS
			if c.fab.Provider == "sockets" {
				limit = 1e6
			}
			plausibleLatency(t, what+" latency", res.LatencyUS, limit)
			// time has two decimals: a short run on a quiet machine prints 0.00s.
			positive(t, what, map[string]float64{"server usec/xfer": res.Server.USPerXfer,
				"bytes": res.Client.Bytes, "total": res.Client.Total})
			if res.Client.Seconds < 0 {
				t.Errorf("%s: time %v", what, res.Client.Seconds)
			}
			if c.fab.Provider != "sockets" && !(res.Client.MBps > 0) { // sockets': 0.00 MB/sec, printed with two decimals
				t.Errorf("%s: MB/sec = %v, want > 0", what, res.Client.MBps)
			}
			checkRun(t, what, &res.Run)
		}
	})
}

// nsPids returns the processes inside h's namespace (`ip netns pids`).
func nsPids(t *testing.T, h *testbed.Host) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "pids", h.NS).CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns pids %s: %v: %s", h.NS, err, out)
	}
	return strings.Fields(string(out))
}

// TestBounded: a run whose context ends before the tool does fails with a RunError
// carrying the command lines, and leaves no process in either namespace; so does a run
// whose client fails (no server answers the version it was given).
func TestBounded(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{StaticNeighbors: true})
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := RunQperfLat(ctx, bed, QperfTCP, 64, 20*time.Second)
	var re *RunError
	if !errors.As(err, &re) || !errors.Is(err, context.DeadlineExceeded) || len(re.Run.ClientArgs) == 0 {
		t.Fatalf("err = %v, want a RunError at the deadline", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("returned after %v", el)
	}
	for _, h := range []*testbed.Host{bed.A, bed.B} {
		if p := nsPids(t, h); len(p) > 0 {
			t.Errorf("processes left in %s: %v", h.NS, p)
		}
	}

	// A client that fails at once (qperf refuses an unknown test, so the server never
	// gets "quit"): the server is killed after the grace period and reaped, and the
	// error is the client's.
	p := qperfPair(bed, "no_such_test", 64, time.Second)
	run, err := p.run(t.Context(), bed)
	if !errors.As(err, &re) || run == nil || run.Usage.ServerWall < exitGrace || !strings.Contains(err.Error(), "client: exit status") {
		t.Fatalf("err = %v, run %+v; want the client's failure with the server reaped", err, run)
	}
	t.Logf("%v", err)
	for _, h := range []*testbed.Host{bed.A, bed.B} {
		if p := nsPids(t, h); len(p) > 0 {
			t.Errorf("processes left in %s: %v", h.NS, p)
		}
	}
}
