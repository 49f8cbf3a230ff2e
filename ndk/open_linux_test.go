package ndk

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/xdpndk/xdpndk/internal/privileged"
	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/xdp"
)

// openXDP opens an adapter on h's veth end inside h's namespace, closed at cleanup (the
// conformance suite's afxdp link kind; open_other_test.go skips it off Linux).
func openXDP(t testing.TB, h *testbed.Host, cfg xdp.Config, opts Options) *Adapter {
	t.Helper()
	cfg.Interface = h.Ifname
	var a *Adapter
	if err := h.Do(func() (err error) { a, err = Open(cfg, opts); return err }); err != nil {
		t.Fatalf("open adapter on %s/%s: %v", h.NS, h.Ifname, err)
	}
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	return a
}

// attached reports whether h's veth end has an XDP program.
func attached(t *testing.T, h *testbed.Host) bool {
	t.Helper()
	var on bool
	if err := h.Do(func() error {
		l, err := netlink.LinkByName(h.Ifname)
		if err != nil {
			return err
		}
		x := l.Attrs().Xdp
		on = x != nil && (x.Attached || x.ProgId != 0)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return on
}

// TestOpenClose: Open attaches the steering program and gives the adapter a UMEM heap;
// Close, with objects still open, detaches the program and frees the queue (it can be
// opened again at once); a second Close is harmless; objects of a closed adapter refuse
// work with STATUS_DEVICE_REMOVED.
func TestOpenClose(t *testing.T) {
	privileged.Require(t)
	bed := testbed.NewT(t, testbed.Options{})
	cfg := xdp.Config{Interface: bed.A.Ifname, Port: testPort, RingSize: 256, Frames: 512, HeapSize: 1 << 20}
	open := func() *Adapter {
		var a *Adapter
		if err := bed.A.Do(func() (err error) { a, err = Open(cfg, DefaultOptions()); return err }); err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := open()
	if !attached(t, bed.A) || a.Device() == nil {
		t.Fatal("no program attached after Open")
	}
	buf, err := a.Alloc(4096, 4096)
	if err != nil {
		t.Fatal(err)
	}
	pd, _ := a.NewPD()
	mr, err := pd.RegisterMR(buf, MRAllowLocalWrite)
	if err != nil || !mr.InUMEM() {
		t.Fatalf("register UMEM buffer: %v, in UMEM %v", err, err == nil && mr.InUMEM())
	}
	cq, _ := a.NewCQ(8, nil)
	if _, err := pd.NewQP(QPConfig{ReceiveCQ: cq, InitiatorCQ: cq}); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if attached(t, bed.A) {
		t.Fatal("program still attached after Close")
	}
	if _, err := pd.NewQP(QPConfig{ReceiveCQ: cq, InitiatorCQ: cq}); !errors.Is(err, StatusDeviceRemoved) {
		t.Fatalf("NewQP on a closed adapter: %v", err)
	}
	b := open()
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The bed's veth has one queue: a second one does not exist, and Open says so.
	cfg.Queues = []int{0, 1}
	if err := bed.A.Do(func() error { _, err := Open(cfg, DefaultOptions()); return err }); !errors.Is(err, StatusDeviceNotReady) || !strings.Contains(err.Error(), "no queue 1") {
		t.Fatalf("two queues on a one-queue veth: %v", err)
	}
}

// TestOpenLogsToOptionsLogger: with xdp.DefaultConfig (whose Logger is slog.Default()),
// the device's messages go to Options.Logger, with the adapter's own.
func TestOpenLogsToOptionsLogger(t *testing.T) {
	privileged.Require(t)
	bed := testbed.NewT(t, testbed.Options{})
	cfg := xdp.DefaultConfig(bed.A.Ifname)
	cfg.Port, cfg.RingSize, cfg.Frames = testPort, 256, 512
	var out logBuffer
	opts := DefaultOptions()
	opts.HeapSize = 1 << 20
	opts.Logger = slog.New(slog.NewTextHandler(&out, nil))
	openXDP(t, bed.A, cfg, opts)
	s := out.String()
	for _, want := range []string{`msg="xdp device open"`, `msg="adapter open"`, " progress=inline "} {
		if !strings.Contains(s, want) {
			t.Errorf("Options.Logger did not get %s:\n%s", want, s)
		}
	}
}
