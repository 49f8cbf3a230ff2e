//go:build linux

package linkbench

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xdpndk/xdpndk/internal/privileged"
	"github.com/xdpndk/xdpndk/internal/testbed"
)

// TestSmokeQuick runs the whole harness in quick mode at 64 bytes for every system this
// build can measure but xdpndk-no-wakeup (three; two on linux/386, where asavie/xdp does
// not build) and checks that every figure is there, positive and survives the JSON round
// trip. It asserts sanity only, never speed.
func TestSmokeQuick(t *testing.T) {
	privileged.Require(t)
	o := QuickOptions()
	o.Sizes = []int{64}
	o.Systems = slices.DeleteFunc(slices.Clone(AllSystems), func(s string) bool { return s == SystemXDPNDKNoWakeup })
	res, err := Run(t.Context(), o)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}

	for _, sys := range o.Systems {
		if res.Header.Modes[sys] == "" {
			t.Errorf("%s: no mode in the header", sys)
		}
		for _, m := range []struct {
			bench, metric string
			size          int
		}{
			{BenchOneWay, MetricPPS, 64},
			{BenchOneWay, MetricGbps, 64},
			{BenchOneWay, MetricTxPPS, 64},
			{BenchPingPong, MetricRTTP50, PingSize},
			{BenchPingPong, MetricRTTP90, PingSize},
			{BenchPingPong, MetricRTTP99, PingSize},
			{BenchPingPong, MetricRTTMean, PingSize},
			{BenchOneWay, MetricCPUMsg, 64},
			{BenchOneWay, MetricCores, 64},
			{BenchPingPong, MetricCPUMsg, PingSize},
			{BenchPingPong, MetricCores, PingSize},
		} {
			rec := res.Find(m.bench, sys, m.size, m.metric)
			if rec == nil || len(rec.Runs) != o.Runs || !(rec.Value > 0) {
				t.Errorf("%s %s %s: record %+v, want %d positive runs", sys, m.bench, m.metric, rec, o.Runs)
			}
		}
		p50 := res.Find(BenchPingPong, sys, PingSize, MetricRTTP50)
		p99 := res.Find(BenchPingPong, sys, PingSize, MetricRTTP99)
		if p50 != nil && p99 != nil && p99.Value < p50.Value {
			t.Errorf("%s: rtt p99 %v below p50 %v", sys, p99.Value, p50.Value)
		}
		// Not a speed goal: allocating per packet would show as one object per datagram. The
		// count is the whole process's: its other goroutines allocate a few thousand objects
		// in the window, which is a sizeable share of the datagrams when a loaded machine
		// slows the window's traffic (seen: 4,513 for 69,788), so the bound is a quarter.
		// (xdp's AllocsPerRun tests hold the datapath to zero exactly.)
		pps := res.Find(BenchOneWay, sys, 64, MetricPPS)
		allocs := res.Find(BenchOneWay, sys, 64, MetricAllocs)
		if pps != nil && allocs != nil {
			pkts := pps.Value * o.Duration.Seconds()
			if allocs.Value > pkts/4 {
				t.Errorf("%s: %v heap objects allocated while about %.0f datagrams were received", sys, allocs.Value, pkts)
			}
		}
	}

	path := filepath.Join(t.TempDir(), "link.json")
	if err := res.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Records) != len(res.Records) || back.Header.Bed.MTU != BedMTU || back.Header.Bed.Queues != 2 {
		t.Errorf("JSON round trip: %d records, bed %+v; want %d, MTU %d, 2 queues", len(back.Records), back.Header.Bed, len(res.Records), BedMTU)
	}

	// Run removed its bed.
	entries, err := os.ReadDir("/run/netns")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	mine := fmt.Sprintf("%s%d-", testbed.NSPrefix, os.Getpid())
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), mine) {
			t.Errorf("namespace %s left behind", e.Name())
		}
	}
}
