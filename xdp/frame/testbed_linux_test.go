package frame

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/testbed"
)

// The test bed helpers TestEncapKernelAccepts needs (package xdp's tests have the same).

// listenUDP opens a kernel UDP socket inside h's namespace.
func listenUDP(t *testing.T, h *testbed.Host, port int) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := h.Do(func() (err error) {
		c, err = net.ListenUDP("udp4", &net.UDPAddr{IP: h.Addr.AsSlice(), Port: port})
		return err
	})
	if err != nil {
		t.Fatalf("listen udp in %s: %v", h.NS, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// hostRun runs name args inside h's namespace, bounded in time, and fails t with the
// command's output if it fails.
func hostRun(t testing.TB, h *testbed.Host, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := h.Command(ctx, name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v in %s: %v\n%s", name, args, h.NS, err, out)
	}
}
