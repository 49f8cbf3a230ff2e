//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/xdpndk/xdpndk/promndk"
)

// defaultMetricsPort is the TCP port of --metrics in its examples.
const defaultMetricsPort = "9464"

// metricsAddr is the TCP address --metrics v names: a port alone ("9464") or with an
// empty host (":9464") is on the loopback address, 127.0.0.1, so that a server does not
// expose its counters beyond its host unless told (--metrics 0.0.0.0:9464, or an
// address of the host).
func metricsAddr(v string) (string, error) {
	if _, err := strconv.ParseUint(v, 10, 16); err == nil {
		return net.JoinHostPort("127.0.0.1", v), nil
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return "", fmt.Errorf("--metrics %q: not an address such as 127.0.0.1:%s or a port", v, defaultMetricsPort)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", fmt.Errorf("--metrics %q: port %q is not a number in [0, 65535]", v, port)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// serveMetrics serves the adapter's counters in Prometheus's text format on
// http://addr/metrics (promndk's collector, which reads them at each scrape, and the
// process's and Go runtime's). It returns how to stop and the URL.
func (s *server) serveMetrics(addr string) (stop func(), url string, err error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(promndk.New(s.n.a, promndk.Options{}),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn), MaxRequestsInFlight: 4, Timeout: 10 * time.Second}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fail(exitBusy, "--metrics %s: %v", addr, err)
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 15 * time.Second,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Warn("metrics server failed", "err", err)
		}
	}()
	url = "http://" + ln.Addr().String() + "/metrics"
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if hs.Shutdown(ctx) != nil {
			_ = hs.Close()
		}
		<-done
	}, url, nil
}

// newServeLog is serve's log on w: slog's text (key=value) or JSON records, one a line,
// each with its time (RFC 3339, to the millisecond) and level, from level on.
func newServeLog(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: not debug, info, warn or error", level)
	}
	ho := &slog.HandlerOptions{Level: l}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, ho)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, ho)), nil
	}
	return nil, fmt.Errorf("--log-format %q: not text or json", format)
}
