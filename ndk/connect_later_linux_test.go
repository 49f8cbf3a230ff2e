package ndk

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/privileged"
	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/xdp"
)

// A client may start before its server: Connect with a 5 s context to a host whose adapter
// opens, and starts listening, only 1 s later connects (the request is sent again until the
// context's deadline), over AF_XDP between two namespace hosts.
func TestConnectBeforeTheServerStarts(t *testing.T) {
	privileged.Require(t)
	bed := testbed.NewT(t, testbed.Options{})
	cfg := xdp.Config{Port: testPort, RingSize: 1024, Frames: 4096, HeapSize: 8 << 20}
	a := idleSide(t, openXDP(t, bed.A, cfg, DefaultOptions()))
	c, err := a.a.NewConnector()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- c.Connect(ctx, a.qp, netip.AddrPortFrom(bed.B.Addr, servicePort), 4, 4, nil) }()

	time.Sleep(time.Second)
	select {
	case err := <-done:
		t.Fatalf("Connect returned before the server started: %v", err)
	default:
	}
	// The server comes up with its interface down, so that none of the client's retries
	// reaches an adapter that is open but not yet listening: that one would be refused at
	// once, as a request to a service nobody listens on must be (RejectNoListener).
	bed.B.Run(t, "ip", "link", "set", bed.B.Ifname, "down")
	b := idleSide(t, openXDP(t, bed.B, cfg, DefaultOptions()))
	accept, accepted := acceptor(b, 4, 4, nil, nil)
	b.listen(t, accept)
	bed.B.Run(t, "ip", "link", "set", bed.B.Ifname, "up")
	listening := time.Since(start)
	if err := <-done; err != nil {
		t.Fatalf("Connect with a 5 s context to a server listening after %v: %v", listening.Round(time.Millisecond), err)
	}
	t.Logf("connected %v after Connect began, %v after the server started listening",
		time.Since(start).Round(time.Millisecond), (time.Since(start) - listening).Round(time.Millisecond))
	complete(t, c, nil, accepted)
}
