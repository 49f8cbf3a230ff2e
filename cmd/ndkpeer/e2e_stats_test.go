//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/xdpndk/xdpndk/internal/privileged"
	"github.com/xdpndk/xdpndk/internal/testbed"
)

// scrapeIn fetches http://addr/metrics from inside host h's namespace (where the server's
// loopback address is) and parses Prometheus's text format.
func scrapeIn(t *testing.T, h *testbed.Host, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	var fams map[string]*dto.MetricFamily
	err := h.Do(func() error { // the socket is made on this thread, in h's namespace
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := fmt.Fprintf(c, "GET /metrics HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", addr); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /metrics: %s", resp.Status)
		}
		p := expfmt.NewTextParser(model.LegacyValidation)
		fams, err = p.TextToMetricFamilies(resp.Body)
		return err
	})
	if err != nil {
		t.Fatalf("scrape %s in %s: %v", addr, h.NS, err)
	}
	return fams
}

// sumOf sums the samples of family name whose labels include want (0 and false if it has
// none).
func sumOf(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	sum, found := 0.0, false
next:
	for _, m := range f.Metric {
		for _, l := range m.Label {
			if v, ok := want[l.GetName()]; ok && v != l.GetValue() {
				continue next
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		}
	}
	return sum, found
}

// serveLogLine is a record of serve's text log: its time, level and message first.
var serveLogLine = regexp.MustCompile(`^time=(\S+) level=(DEBUG|INFO|WARN|ERROR) msg=("(?:[^"\\]|\\.)*"|\S+)`)

// ndkpeer serve on a two-queue interface, watched the three ways an operator can: its
// metrics over HTTP (--metrics) move with traffic, `ndkpeer stats --qp` lists the open QPs
// and counts both queues, and its log has a timestamped event for each connect and
// disconnect, at the level it deserves.
func TestServeMetricsStatsEvents(t *testing.T) {
	privileged.Require(t)
	bed := testbed.NewT(t, testbed.Options{MTU: 9000, Queues: 2})
	a, b := bed.A, bed.B
	peer := b.Addr.String()
	srv := startServer(t, b, "--metrics", ":"+defaultMetricsPort)
	const addr = "127.0.0.1:" + defaultMetricsPort

	before := scrapeIn(t, b, addr)
	for _, name := range []string{"xdpndk_engines", "xdpndk_qps", "xdpndk_link_rx_packets_total", "xdpndk_xsk_rx_dropped_packets_total",
		"xdpndk_xdp_packets_total", "xdpndk_umem_size_bytes", "process_cpu_seconds_total", "go_goroutines"} {
		if _, ok := sumOf(before, name, nil); !ok {
			t.Errorf("no %s in the scrape", name)
		}
	}
	if n := len(before["xdpndk_link_rx_packets_total"].GetMetric()); n != 2 {
		t.Errorf("%d series of xdpndk_link_rx_packets_total, want one per queue (2)", n)
	}

	// A run of two QPs that lasts a few seconds: stats --qp sees both while it runs.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"write-bw", "-i", a.Ifname, "-q", "2", "-D", "3", "-s", "8192", "--json", peer}
	client := a.Command(ctx, ndkpeerBinary(t), args...)
	done := make(chan result, 1)
	go func() { done <- runCmd(t, client, args) }()
	var st serverStats
	deadline := time.Now().Add(20 * time.Second)
	for {
		st = serverStats{}
		decode(t, in(t, b, "stats", "--json", "--qp"), &st)
		if len(st.OpenQPs) == 2 && st.OpenQPs[0].RxPackets > 0 && st.OpenQPs[1].RxPackets > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats --qp did not show the run's 2 QPs within 20 s: %+v", st.OpenQPs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, q := range st.OpenQPs {
		// The server's end of a Write test receives and acknowledges (no round trip of its
		// own to estimate: SRTT stays 0).
		if q.State != "connected" || q.Peer.Addr() != a.Addr || q.QPN == 0 || q.RxBytes == 0 || q.AcksSent == 0 || q.RTO <= 0 || q.CongestionWindow <= 0 {
			t.Errorf("open QP %+v", q)
		}
	}
	text := in(t, b, "stats", "--qp")
	if text.code != 0 || !strings.Contains(text.stdout, "QPs open: 2") || !strings.Contains(text.stdout, fmt.Sprintf(" %d ", st.OpenQPs[0].QPN)) {
		t.Errorf("stats --qp: %v", text)
	}
	if r := <-done; r.code != 0 {
		t.Fatalf("write-bw: %v", r)
	}
	wantExit(t, in(t, a, "write-bw", "-i", a.Ifname, "-s", "32M", peer), exitRejected, "refused the test")

	// Every queue is counted: two queues, each with its socket, and the sums are theirs.
	st = serverStats{}
	decode(t, in(t, b, "stats", "--json"), &st)
	ad := st.Adapter
	if len(ad.Queues) != 2 || ad.Socket == nil {
		t.Fatalf("queues %+v, socket %v: want both queues, with their sockets", ad.Queues, ad.Socket)
	}
	var rx, fillEmpty uint64
	for _, q := range ad.Queues {
		if q.Socket == nil {
			t.Errorf("queue %d has no socket counters", q.Queue)
			continue
		}
		rx += q.Link.RxPackets
		fillEmpty += q.Socket.RxFillRingEmpty
	}
	if rx != ad.Link.RxPackets || fillEmpty != ad.Socket.RxFillRingEmpty || rx == 0 {
		t.Errorf("queues' rx %d and fill-ring-empty %d, sums %d and %d", rx, fillEmpty, ad.Link.RxPackets, ad.Socket.RxFillRingEmpty)
	}
	if len(st.OpenQPs) != 0 {
		t.Errorf("open_qps without --qp: %+v", st.OpenQPs)
	}
	if ad.QPs.Created != 2 || ad.QPs.Closed != 2 || ad.QPs.Live != 0 || ad.QPs.RxBytes == 0 {
		t.Errorf("QP totals %+v, want the run's 2 QPs, closed, their bytes kept", ad.QPs)
	}
	if st.Metrics != "http://"+addr+"/metrics" {
		t.Errorf("metrics_url %q", st.Metrics)
	}

	after := scrapeIn(t, b, addr)
	grew := func(name string, labels map[string]string) {
		t.Helper()
		v0, _ := sumOf(before, name, labels)
		v1, ok := sumOf(after, name, labels)
		if !ok || v1 <= v0 {
			t.Errorf("%s%v went from %v to %v over a run", name, labels, v0, v1)
		}
	}
	grew("xdpndk_qps_created_total", nil)
	grew("xdpndk_qps_closed_total", nil)
	grew("xdpndk_qps_rx_bytes_total", nil)
	grew("xdpndk_qps_rx_packets_total", nil)
	grew("xdpndk_qps_acks_sent_total", nil)
	grew("xdpndk_engine_rx_datagrams_total", nil)
	grew("xdpndk_link_rx_packets_total", nil)
	grew("xdpndk_link_rx_bytes_total", nil)
	grew("xdpndk_xdp_packets_total", map[string]string{"verdict": "redirected"})
	if v, _ := sumOf(after, "xdpndk_qps_rx_bytes_total", nil); v != float64(ad.QPs.RxBytes) {
		t.Errorf("scraped %v bytes received, stats says %d", v, ad.QPs.RxBytes)
	}

	if code := srv.stop(t); code != 0 {
		t.Errorf("ndkpeer serve exited %d:\n%s", code, srv.output())
	}
	// The log: every line a record with its time (RFC 3339, below the second) and level;
	// each of the run's connections accepted and closed at info, the refusal at warn.
	out := srv.output()
	t.Logf("the serve log:\n%s", out)
	counts := map[string]int{}
	for _, l := range strings.Split(out, "\n") {
		m := serveLogLine.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("not a log record: %q", l)
			continue
		}
		ts, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil || !strings.Contains(m[1], ".") || time.Since(ts) > 5*time.Minute || time.Until(ts) > time.Minute {
			t.Errorf("time %q (%v) of %q", m[1], err, l)
		}
		ev := m[2] + " " + m[3]
		if strings.Contains(l, " test=") { // the server's own events name the test
			ev = "server " + ev
			if !strings.Contains(l, " peer="+a.Addr.String()+":") || !strings.Contains(l, " qpn=") {
				t.Errorf("event without its peer or QP: %q", l)
			}
		}
		counts[ev]++
	}
	for ev, n := range map[string]int{
		`server INFO "connection accepted"`: 2,
		`server INFO "connection closed"`:   2,
		`WARN "connection refused"`:         1, // before its request is read: no test
		// The adapter's own (ndk.Options.Logger): its QPs' state changes.
		`INFO "connection established"`:        2,
		`INFO "connection closed by the peer"`: 2,
		`INFO "adapter open"`:                  1,
		`INFO "adapter closed"`:                1,
	} {
		if counts[ev] != n {
			t.Errorf("%d events %s, want %d:\n%s", counts[ev], ev, n, out)
		}
	}
	if !strings.Contains(out, `why="peer disconnected"`) {
		t.Errorf("no close for the peer's disconnect:\n%s", out)
	}
}
