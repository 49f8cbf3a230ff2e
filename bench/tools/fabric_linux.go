//go:build linux

package tools

import (
	"context"
	"fmt"
	"math"
	"os/exec"

	"github.com/xdpndk/xdpndk/internal/testbed"
)

// RunFabricPingPong runs fi_pingpong over fab between A (client) and B (server):
// iterations round trips of size-byte messages. The server's control socket listens on
// FabricPort in B (B's namespace has no address outside the bed); the client connects to
// B's address. A combination that cannot run here (FabricSupport, or a provider that
// finds no endpoint for it) returns a result with Unsupported set and an error wrapping
// ErrUnsupported.
func RunFabricPingPong(ctx context.Context, bed *testbed.Bed, fab Fabric, size, iterations int) (*FabricPingPong, error) {
	if size < 1 || iterations < 1 {
		return nil, fmt.Errorf("fi_pingpong: %d iterations of %d bytes out of range", iterations, size)
	}
	res := &FabricPingPong{Fabric: fab, Size: size, Iterations: iterations}
	if why := FabricSupport(fab, size); why != "" {
		res.Unsupported = why
		return res, fmt.Errorf("fi_pingpong %v, %d bytes: %w: %s", fab, size, ErrUnsupported, why)
	}
	common := []string{"-p", fab.Provider, "-e", fab.Endpoint, "-I", itoa(iterations), "-S", itoa(size)}
	sargs := append([]string{"-B", itoa(FabricPort)}, common...)
	cargs := append(append([]string{"-P", itoa(FabricPort)}, common...), bed.B.Addr.String())
	p := &pair{
		tool:       "fi_pingpong",
		serverArgs: append([]string{"fi_pingpong"}, sargs...),
		clientArgs: append([]string{"fi_pingpong"}, cargs...),
		server:     func(ctx context.Context) *exec.Cmd { return bed.B.Command(ctx, "fi_pingpong", sargs...) },
		client:     func(ctx context.Context) *exec.Cmd { return bed.A.Command(ctx, "fi_pingpong", cargs...) },
		ready:      listen{"tcp", FabricPort},
		limit:      FabricLimit,
	}
	run, err := p.run(ctx, bed)
	if run != nil {
		res.Run = *run
	}
	if err != nil {
		if why := fabricRefusal(res.ServerOut + "\n" + res.ClientOut); why != "" {
			res.Unsupported = why
			return res, fmt.Errorf("fi_pingpong %v, %d bytes: %w: %s (%v)", fab, size, ErrUnsupported, why, err)
		}
		return nil, err
	}
	if res.Client, err = ParseFabricRow([]byte(run.ClientOut)); err == nil {
		res.Server, err = ParseFabricRow([]byte(run.ServerOut))
	}
	switch {
	case err != nil:
	case !res.Client.AllAcked:
		err = fmt.Errorf("fi_pingpong: %v pings sent, %v acknowledged", res.Client.Sent, res.Client.Acked)
	case math.Abs(res.Client.Sent-float64(iterations)) > 0.05*float64(iterations)+1:
		err = fmt.Errorf("fi_pingpong sent %v pings, not %d", res.Client.Sent, iterations)
	}
	if err != nil {
		return nil, &RunError{Run: run, Err: err}
	}
	res.LatencyUS = res.Client.USPerXfer
	res.RTTUS = 2 * res.LatencyUS
	res.Usage.Messages = 2 * int64(iterations)
	return res, nil
}
