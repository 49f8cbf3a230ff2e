package workload

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"

	"github.com/xdpndk/xdpndk/internal/faultlink"
	"github.com/xdpndk/xdpndk/internal/plumb"
	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/ndk"
	"github.com/xdpndk/xdpndk/transport/simlink"
)

// openSim opens two adapters on a simlink pair, each with a UMEM heap (so Adapter.Alloc
// works as on AF_XDP) and each link behind a faultlink wrapper with m.
// Zero-copy transmit is on, as in the AF_XDP tests, so the wrappers handle cookies.
func openSim(t testing.TB, cfg simlink.Config, m faultlink.Impairments, seed uint64) (a, b *ndk.Adapter, fa, fb *faultlink.Link) {
	t.Helper()
	la, lb := simlink.Pair(cfg)
	fa = wrap(t, la, m, seed)
	fb = wrap(t, lb, m, seed+1)
	return openOn(t, fa), openOn(t, fb), fa, fb
}

func wrap(t testing.TB, l link.Link, m faultlink.Impairments, seed uint64) *faultlink.Link {
	t.Helper()
	w, err := faultlink.Wrap(l, faultlink.Config{Seed: seed, Impairments: m})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func openOn(t testing.TB, l link.Link) *ndk.Adapter {
	t.Helper()
	return openOnWith(t, l, ndk.DefaultOptions())
}

// openOnWith is openOn with options.
func openOnWith(t testing.TB, l link.Link, opts ndk.Options) *ndk.Adapter {
	t.Helper()
	u, err := memreg.NewUMEM(memreg.UMEMOptions{Frames: 16, HeapSize: 16 << 20, HugePages: memreg.HugeOff})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = u.Close() })
	h, err := u.NewHeap()
	if err != nil {
		t.Fatal(err)
	}
	plumb.SetExtra(&opts, plumb.Extra{UMEM: u, Heap: h})
	opts.ZeroCopyTx = true
	a, err := ndk.OpenLink(l, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	return a
}

// serve runs a Target on a until the test ends; it returns the target.
func serve(t testing.TB, a *ndk.Adapter, cfg TargetConfig) *Target {
	t.Helper()
	tg, err := NewTarget(a, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = tg.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("target did not stop within 30 s")
		}
	})
	return tg
}

// dial connects an initiator to the target on b and closes it when the test ends.
func dial(t testing.TB, a, b *ndk.Adapter, cfg Config) *Initiator {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	in, err := Dial(ctx, a, b.LocalAddr().Addr(), cfg)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = in.Close(ctx)
	})
	return in
}

var _ = netip.Addr{}
