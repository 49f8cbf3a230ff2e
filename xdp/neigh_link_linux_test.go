package xdp

import (
	"context"
	"net/netip"
	"testing"
	"time"
)

// mustResolve resolves peer's next hop on l's device, so that the first datagram to it
// leaves at once instead of being held until l's next call.
func mustResolve(tb testing.TB, l *Link, peer netip.Addr) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.ResolvePeer(ctx, peer); err != nil {
		tb.Fatalf("resolve %v: %v", peer, err)
	}
}

// resolvePair resolves each link's address on the other's device.
func resolvePair(tb testing.TB, a, b *Link) {
	tb.Helper()
	mustResolve(tb, a, b.LocalAddr().Addr())
	mustResolve(tb, b, a.LocalAddr().Addr())
}
