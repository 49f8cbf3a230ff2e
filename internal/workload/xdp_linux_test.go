package workload

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/xdpndk/xdpndk/transport/link"

	"github.com/xdpndk/xdpndk/internal/faultlink"
	"github.com/xdpndk/xdpndk/internal/plumb"
	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/ndk"
	"github.com/xdpndk/xdpndk/xdp"
)

// xdpPort is the UDP port of the privileged tests' devices.
const xdpPort = 4793

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// xdpConfig is the device configuration of the privileged tests (the interface is set by
// openXDP).
func xdpConfig() xdp.Config {
	return xdp.Config{Port: xdpPort, RingSize: 1024, Frames: 4096, HeapSize: 16 << 20, Logger: quietLogger}
}

// xdpSide is an adapter on an AF_XDP device whose link is wrapped by a faultlink.Link.
type xdpSide struct {
	a   *ndk.Adapter
	dev *xdp.Device
	fl  *faultlink.Link
}

// openXDP opens the device on h as ndk.Open would, but hands ndk.OpenLink the device's
// link wrapped in a faultlink.Link with fc, so the test can impair what the adapter
// transmits and see what it receives. Zero-copy transmit is on (as in ndk's conformance
// suite) so the wrapper's handling of zero-copy cookies is exercised even in veth's copy
// mode. Everything is closed when the test ends.
func openXDP(t testing.TB, h *testbed.Host, cfg xdp.Config, fc faultlink.Config, opts ndk.Options) xdpSide {
	t.Helper()
	cfg.Interface = h.Ifname
	var d *xdp.Device
	if err := h.Do(func() (err error) { d, err = xdp.Open(cfg); return err }); err != nil {
		t.Fatalf("open xdp device on %s/%s: %v", h.NS, h.Ifname, err)
	}
	closeDev := true
	defer func() {
		if closeDev {
			_ = d.Close()
		}
	}()
	heap, err := d.UMEM().NewHeap()
	if err != nil {
		t.Fatal(err)
	}
	fl, err := faultlink.Wrap(d.Links()[0], fc)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Spin == 0 {
		opts = ndk.DefaultOptions()
	}
	plumb.SetExtra(&opts, plumb.Extra{UMEM: d.UMEM(), Heap: heap})
	opts.ZeroCopyTx = true
	var link link.Link = fl
	a, err := ndk.OpenLink(link, opts)
	if err != nil {
		t.Fatal(err)
	}
	closeDev = false
	t.Cleanup(func() {
		_ = a.Close(context.Background())
		_ = d.Close()
	})
	return xdpSide{a: a, dev: d, fl: fl}
}

// ndkOptions are the adapters' options in the privileged tests.
func ndkOptions() ndk.Options { return ndk.DefaultOptions() }
