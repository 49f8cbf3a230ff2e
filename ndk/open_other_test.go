//go:build !linux

package ndk

import (
	"testing"

	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/xdp"
)

// openXDP skips: AF_XDP, and so Open, exists only on Linux (open_linux_test.go has the real
// one); this keeps the conformance suite's afxdp link kind compiling elsewhere.
func openXDP(t testing.TB, h *testbed.Host, _ xdp.Config, _ Options) *Adapter {
	t.Helper()
	t.Skipf("AF_XDP adapters are Linux-only (host %s)", h.NS)
	return nil
}
