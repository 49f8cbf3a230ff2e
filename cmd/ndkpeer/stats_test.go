//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/ndk"
)

func TestMetricsAddr(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"9464", "127.0.0.1:9464"},
		{":9464", "127.0.0.1:9464"},
		{"0.0.0.0:9464", "0.0.0.0:9464"},
		{"198.18.0.2:80", "198.18.0.2:80"},
		{"[::1]:9464", "[::1]:9464"},
		{"localhost:9464", "localhost:9464"},
	} {
		got, err := metricsAddr(c.in)
		if err != nil || got != c.want {
			t.Errorf("metricsAddr(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "host", "1.2.3.4", ":http", "70000", ":70000", "a:b:c"} {
		if got, err := metricsAddr(bad); err == nil {
			t.Errorf("metricsAddr(%q) = %q, want an error", bad, got)
		}
	}
}

// serve's log: one record a line, with an RFC 3339 time below the second, in both formats;
// the level filters.
func TestServeLog(t *testing.T) {
	var text, js bytes.Buffer
	lt, err := newServeLog(&text, "info", "text")
	if err != nil {
		t.Fatal(err)
	}
	lt.Debug("hidden")
	lt.Info("connection accepted", "peer", netip.MustParseAddrPort("198.18.0.1:4793"))
	lt.Warn("connection closed", "why", "idle for 2m0s")
	lines := strings.Split(strings.TrimSpace(text.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2 (debug filtered):\n%s", len(lines), text.String())
	}
	re := regexp.MustCompile(`^time=(\S+) level=(INFO|WARN) msg="connection (accepted|closed)"`)
	for _, l := range lines {
		m := re.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("record %q", l)
		}
		if ts, err := time.Parse(time.RFC3339Nano, m[1]); err != nil || !strings.Contains(m[1], ".") || time.Since(ts) > time.Minute {
			t.Errorf("time %q: %v", m[1], err)
		}
	}
	lj, err := newServeLog(&js, "debug", "json")
	if err != nil {
		t.Fatal(err)
	}
	lj.Debug("control command", "op", 1)
	var rec struct {
		Time  time.Time `json:"time"`
		Level string    `json:"level"`
		Msg   string    `json:"msg"`
	}
	if err := json.Unmarshal(js.Bytes(), &rec); err != nil || rec.Level != "DEBUG" || rec.Msg != "control command" || time.Since(rec.Time) > time.Minute {
		t.Errorf("JSON record %s: %+v, %v", js.String(), rec, err)
	}
	for _, bad := range [][2]string{{"loud", "text"}, {"info", "xml"}} {
		if _, err := newServeLog(&text, bad[0], bad[1]); err == nil {
			t.Errorf("newServeLog(%q, %q) took it", bad[0], bad[1])
		}
	}
}

// teeHandler gives each handler the records of its level, with the attributes added.
func TestTeeHandler(t *testing.T) {
	var lo, hi bytes.Buffer
	l := slog.New(teeHandler{slog.NewTextHandler(&lo, &slog.HandlerOptions{Level: slog.LevelDebug}),
		slog.NewTextHandler(&hi, &slog.HandlerOptions{Level: slog.LevelWarn})}).With("a", 1)
	l.Debug("d")
	l.Warn("w")
	if s := lo.String(); !strings.Contains(s, "msg=d a=1") || !strings.Contains(s, "msg=w a=1") {
		t.Errorf("debug handler got %q", s)
	}
	if s := hi.String(); strings.Contains(s, "msg=d") || !strings.Contains(s, "msg=w a=1") {
		t.Errorf("warn handler got %q", s)
	}
}

// The stats document names every key in one style, snake_case, and text output lists
// every queue and every open QP.
func TestStatsDocument(t *testing.T) {
	sock := &ndk.SocketStats{RxFillRingEmpty: 7}
	st := serverStats{SchemaVersion: statsSchemaVersion, Interface: "eth1", Metrics: "http://127.0.0.1:9464/metrics",
		Connections: connStats{ByTest: map[string]uint64{"send-lat": 2}}}
	st.Adapter = ndk.AdapterStats{Engines: 1, Socket: sock,
		Queues: []ndk.QueueStats{{Queue: 0, Link: ndk.LinkStats{RxPackets: 11}, Socket: sock},
			{Queue: 3, Link: ndk.LinkStats{RxPackets: 13}, Socket: &ndk.SocketStats{}}},
		Steering: &ndk.SteeringStats{}, Neighbours: &ndk.NeighbourStats{}}
	st.OpenQPs = []ndk.QPStats{{QPN: 4711, State: "connected", Peer: netip.MustParseAddrPort("198.18.0.1:4793"), SRTT: 42.5}}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if !snake.MatchString(k) && path != ".connections.accepted_by_test" {
					t.Errorf("key %s.%s is not snake_case", path, k)
				}
				walk(path+"."+k, e)
			}
		case []any:
			for _, e := range x {
				walk(path+"[]", e)
			}
		}
	}
	walk("", doc)

	var out bytes.Buffer
	printStats(&out, st)
	printQPs(&out, st.OpenQPs)
	s := out.String()
	for _, want := range []string{"queue 0    engine 0: rx 11", "queue 3    engine 0: rx 13", "QPs open: 1", "4711", "198.18.0.1:4793", "42.5",
		"metrics      http://127.0.0.1:9464/metrics", "send-lat 2"} {
		if !strings.Contains(s, want) {
			t.Errorf("text stats lack %q:\n%s", want, s)
		}
	}
}
