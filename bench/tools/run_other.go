//go:build !linux

package tools

import (
	"context"
	"time"

	"github.com/xdpndk/xdpndk/internal/testbed"
)

// RunQperfLat returns ErrNotSupported.
func RunQperfLat(ctx context.Context, bed *testbed.Bed, proto QperfProto, size int, d time.Duration) (*QperfLat, error) {
	return nil, ErrNotSupported
}

// RunQperfBW returns ErrNotSupported.
func RunQperfBW(ctx context.Context, bed *testbed.Bed, proto QperfProto, size int, d time.Duration) (*QperfBW, error) {
	return nil, ErrNotSupported
}

// RunIperf3 returns ErrNotSupported.
func RunIperf3(ctx context.Context, bed *testbed.Bed, size, streams int, d time.Duration) (*Iperf3, error) {
	return nil, ErrNotSupported
}

// RunSockperfPingPong returns ErrNotSupported.
func RunSockperfPingPong(ctx context.Context, bed *testbed.Bed, size int, d time.Duration, polling bool) (*SockperfPingPong, error) {
	return nil, ErrNotSupported
}

// RunSockperfThroughput returns ErrNotSupported.
func RunSockperfThroughput(ctx context.Context, bed *testbed.Bed, size int, d time.Duration, polling bool) (*SockperfThroughput, error) {
	return nil, ErrNotSupported
}

// RunFabricPingPong returns ErrNotSupported.
func RunFabricPingPong(ctx context.Context, bed *testbed.Bed, fab Fabric, size, iterations int) (*FabricPingPong, error) {
	return nil, ErrNotSupported
}

// ToolVersions returns ErrNotSupported.
func ToolVersions(ctx context.Context) (Versions, error) { return Versions{}, ErrNotSupported }
