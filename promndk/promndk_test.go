package promndk_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strconv"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xdpndk/xdpndk/ndk"
	"github.com/xdpndk/xdpndk/promndk"
	"github.com/xdpndk/xdpndk/transport/simlink"
)

// host is an adapter on a simulated link with a PD and a CQ.
type host struct {
	a  *ndk.Adapter
	pd *ndk.PD
	cq *ndk.CQ
}

func openHost(t *testing.T, l *simlink.Link) *host {
	t.Helper()
	a, err := ndk.OpenLink(l, ndk.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	h := &host{a: a}
	if h.pd, err = a.NewPD(); err != nil {
		t.Fatal(err)
	}
	if h.cq, err = a.NewCQ(1024, nil); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *host) qp(t *testing.T) *ndk.QP {
	t.Helper()
	q, err := h.pd.NewQP(ndk.QPConfig{ReceiveCQ: h.cq, InitiatorCQ: h.cq})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// connect connects n QPs of a to b's listener on service 7, with only the public API.
func connect(t *testing.T, a, b *host, n int) []*ndk.QP {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	accepted := make(chan error, n)
	l, err := b.a.NewListener(func(c *ndk.Connector) {
		q, err := b.pd.NewQP(ndk.QPConfig{ReceiveCQ: b.cq, InitiatorCQ: b.cq})
		if err != nil {
			accepted <- err
			return
		}
		go func() { accepted <- c.Accept(ctx, q, 16, 16, nil, nil) }()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	if err := l.Listen(netip.AddrPortFrom(netip.Addr{}, 7)); err != nil {
		t.Fatal(err)
	}
	var qps []*ndk.QP
	for range n {
		q := a.qp(t)
		c, err := a.a.NewConnector()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Connect(ctx, q, netip.AddrPortFrom(b.a.LocalAddr().Addr(), 7), 16, 16, nil); err != nil {
			t.Fatalf("connect: %v", err)
		}
		if err := c.CompleteConnect(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if err := <-accepted; err != nil {
			t.Fatalf("accept: %v", err)
		}
		qps = append(qps, q)
	}
	return qps
}

// region registers n bytes of Go memory on h.
func (h *host) region(t *testing.T, n int, flags ndk.MRFlags) ([]byte, *ndk.MR) {
	t.Helper()
	b := make([]byte, n)
	mr, err := h.pd.RegisterMR(b, flags)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mr.Deregister(context.Background()) })
	return b, mr
}

// writes posts n Writes of size bytes on q into b's region and waits for them.
func writes(t *testing.T, a *host, q *ndk.QP, dst *ndk.MR, n, size int) {
	t.Helper()
	src, smr := a.region(t, size, ndk.MRAllowLocalWrite)
	for i := range n {
		if err := q.Write(i, []ndk.SGE{smr.SGE(src)}, dst.VA(), dst.RemoteToken(), 0); err != nil {
			t.Fatal(err)
		}
	}
	var res [64]ndk.ResultEx
	deadline := time.Now().Add(10 * time.Second)
	for got := 0; got < n; {
		k := a.cq.GetResultsEx(res[:])
		for _, r := range res[:k] {
			if r.Status != ndk.StatusSuccess {
				t.Fatalf("write: %+v", r)
			}
		}
		got += k
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d Writes completed in 10 s", got, n)
			}
			a.a.Poll()
			runtime.Gosched()
		}
	}
}

// scrape fetches srv's /metrics as Prometheus's text format and parses it.
func scrape(t *testing.T, srv *httptest.Server) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse the scrape: %v", err)
	}
	return fams
}

// value returns the sample of family name whose labels include want, and whether there is
// one.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		}
	}
	return 0, false
}

func mustValue(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	v, ok := value(fams, name, labels)
	if !ok {
		t.Fatalf("no series %s%v in the scrape", name, labels)
	}
	return v
}

// A scrape over HTTP shows the adapter's counters move with its traffic: the per-QP
// series of the QPs under the label limit, the others summed into qpn="other", the
// adapter-wide totals, which keep a closed QP's counts.
func TestScrapeOverHTTP(t *testing.T) {
	la, lb := simlink.Pair(simlink.Config{Seed: 1, MaxPayload: 8972})
	a, b := openHost(t, la), openHost(t, lb)
	qps := connect(t, a, b, 3)
	_, dst := b.region(t, 1<<16, ndk.MRAllowLocalWrite|ndk.MRAllowRemoteWrite)

	reg := prometheus.NewPedanticRegistry() // checks every sample against its description
	reg.MustRegister(promndk.New(a.a, promndk.Options{MaxQPs: 2, ConstLabels: prometheus.Labels{"adapter": "a"}}))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	defer srv.Close()

	before := scrape(t, srv)
	if v := mustValue(t, before, "xdpndk_qps", nil); v != 3 {
		t.Errorf("xdpndk_qps %v, want 3", v)
	}
	if v := mustValue(t, before, "xdpndk_qps_unlabelled", nil); v != 1 {
		t.Errorf("xdpndk_qps_unlabelled %v, want 1 (3 QPs, limit 2)", v)
	}
	qpn := func(q *ndk.QP) string { return strconv.FormatUint(uint64(q.Stats().QPN), 10) }
	for _, q := range qps[:2] {
		info := map[string]string{"qpn": qpn(q), "state": "connected", "peer": q.Stats().Peer.String(), "engine": "0", "adapter": "a"}
		if v := mustValue(t, before, "xdpndk_qp_info", info); v != 1 {
			t.Errorf("qp_info%v = %v", info, v)
		}
	}
	if _, ok := value(before, "xdpndk_qp_info", map[string]string{"qpn": qpn(qps[2])}); ok {
		t.Errorf("the third QP has a series of its own beyond the limit of 2")
	}
	other := map[string]string{"qpn": "other"}
	mustValue(t, before, "xdpndk_qp_tx_packets_total", other)
	if _, ok := value(before, "xdpndk_qp_srtt_seconds", other); ok {
		t.Error("qpn=\"other\" has a round-trip estimate: a sum of estimates means nothing")
	}

	const n, size = 30, 512
	writes(t, a, qps[0], dst, n, size) // labelled
	writes(t, a, qps[2], dst, n, size) // summed into "other"
	after := scrape(t, srv)
	grew := func(name string, labels map[string]string, by float64) {
		t.Helper()
		v0, v1 := mustValue(t, before, name, labels), mustValue(t, after, name, labels)
		if v1-v0 < by {
			t.Errorf("%s%v grew from %v to %v, want at least %v more", name, labels, v0, v1, by)
		}
	}
	first := map[string]string{"qpn": qpn(qps[0])}
	grew("xdpndk_qp_tx_packets_total", first, n)
	grew("xdpndk_qp_tx_bytes_total", first, n*size)
	grew("xdpndk_qp_tx_packets_total", other, n)
	grew("xdpndk_qps_tx_packets_total", nil, 2*n)
	grew("xdpndk_qps_tx_bytes_total", nil, 2*n*size)
	grew("xdpndk_engine_tx_datagrams_total", nil, 1)
	grew("xdpndk_engine_rx_datagrams_total", nil, 1)
	grew("xdpndk_link_tx_bytes_total", map[string]string{"queue": "0", "engine": "0"}, 1)
	if v := mustValue(t, after, "xdpndk_qp_srtt_seconds", first); v <= 0 || v > 1 {
		t.Errorf("srtt %v s", v)
	}
	if v := mustValue(t, after, "xdpndk_qp_retransmits_queued_total", map[string]string{"qpn": qpn(qps[0]), "cause": "loss"}); v < 0 {
		t.Errorf("queued retransmissions %v", v)
	}
	if v := mustValue(t, after, "xdpndk_memory_regions", map[string]string{"kind": "registered"}); v != 2 {
		t.Errorf("%v regions registered on A, want its two source buffers", v)
	}
	// Exactly the counts the QPs report.
	if got, want := mustValue(t, after, "xdpndk_qp_tx_packets_total", first), float64(qps[0].Stats().TxPackets); got != want {
		t.Errorf("QP %s: scraped %v packets, the QP says %v", qpn(qps[0]), got, want)
	}

	// A closed QP leaves the per-QP series, not the adapter's totals.
	total := mustValue(t, after, "xdpndk_qps_tx_packets_total", nil)
	if err := qps[0].Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	closed := scrape(t, srv)
	if v := mustValue(t, closed, "xdpndk_qps_tx_packets_total", nil); v < total {
		t.Errorf("the adapter's total fell from %v to %v when a QP closed", total, v)
	}
	if _, ok := value(closed, "xdpndk_qp_tx_packets_total", first); ok {
		t.Error("a closed QP still has its series")
	}
	if v := mustValue(t, closed, "xdpndk_qps_unlabelled", nil); v != 0 {
		t.Errorf("2 QPs left under a limit of 2, %v unlabelled", v)
	}
	if _, ok := value(closed, "xdpndk_qp_tx_packets_total", other); ok {
		t.Error(`qpn="other" with no QP beyond the limit`)
	}
	if v := mustValue(t, closed, "xdpndk_qps_closed_total", nil); v != 1 {
		t.Errorf("qps_closed_total %v", v)
	}
}

// The names and help texts follow Prometheus's conventions (promlint), and the collector
// describes everything it collects (a pedantic registry checks).
func TestLint(t *testing.T) {
	la, lb := simlink.Pair(simlink.Config{Seed: 1, MaxPayload: 8972})
	a, b := openHost(t, la), openHost(t, lb)
	connect(t, a, b, 1)
	c := promndk.New(a.a, promndk.Options{})
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counters := 0
	for _, f := range fams {
		name := f.GetName()
		if f.GetType() == dto.MetricType_COUNTER {
			counters++
			if name[len(name)-6:] != "_total" {
				t.Errorf("counter %s does not end in _total", name)
			}
		}
	}
	if counters < 40 {
		t.Errorf("%d counter families: fewer than the adapter counts", counters)
	}
}

// The QP label limit: negative labels no QP, every one is summed.
func TestNoQPLabels(t *testing.T) {
	la, lb := simlink.Pair(simlink.Config{Seed: 1, MaxPayload: 8972})
	a, b := openHost(t, la), openHost(t, lb)
	connect(t, a, b, 2)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promndk.New(a.a, promndk.Options{MaxQPs: -1}))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	if n := len(byName["xdpndk_qp_tx_packets_total"].GetMetric()); n != 1 {
		t.Errorf("%d per-QP series, want only qpn=\"other\"", n)
	}
	if v := mustValue(t, byName, "xdpndk_qps_unlabelled", nil); v != 2 {
		t.Errorf("unlabelled %v, want 2", v)
	}
	if _, ok := byName["xdpndk_qp_info"]; ok {
		t.Error("qp_info without labelled QPs")
	}
}
