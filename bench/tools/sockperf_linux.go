//go:build linux

package tools

import (
	"context"
	"fmt"
	"os/exec"
	"time"

	"github.com/xdpndk/xdpndk/internal/testbed"
)

// sockperfPair is the sockperf server in B (bound to B's address, stopped with SIGINT once
// the client is done: it then prints how many messages it handled) and the client in A
// (bound to A's address) running mode for d (whole seconds). With polling both open their
// socket non-blocking (--nonblocked) and so spin on recvfrom.
func sockperfPair(bed *testbed.Bed, mode string, size int, d time.Duration, polling bool) (*pair, error) {
	if size < SockperfMinSize || size > SockperfMaxSize {
		return nil, fmt.Errorf("sockperf: message size %d outside [%d, %d]", size, SockperfMinSize, SockperfMaxSize)
	}
	secs := wholeSeconds(d)
	sargs := []string{"server", "-i", bed.B.Addr.String(), "-p", itoa(SockperfPort)}
	cargs := []string{mode, "-i", bed.B.Addr.String(), "-p", itoa(SockperfPort), "--client_ip", bed.A.Addr.String(),
		"-m", itoa(size), "-t", itoa(secs)}
	if polling {
		sargs = append(sargs, "--nonblocked")
		cargs = append(cargs, "--nonblocked")
	}
	return &pair{
		tool:       "sockperf",
		serverArgs: append([]string{"sockperf"}, sargs...),
		clientArgs: append([]string{"sockperf"}, cargs...),
		server:     func(ctx context.Context) *exec.Cmd { return bed.B.Command(ctx, "sockperf", sargs...) },
		client:     func(ctx context.Context) *exec.Cmd { return bed.A.Command(ctx, "sockperf", cargs...) },
		ready:      listen{"udp", SockperfPort},
		interrupt:  true,
		window:     &[2]string{"Starting test...", "Test end"},
		limit:      time.Duration(secs)*time.Second + slack,
	}, nil
}

// RunSockperfPingPong runs `sockperf ping-pong` over UDP with size-byte messages for d
// (rounded up to whole seconds, at least 1) from A to B, both sides polling if polling is
// set.
func RunSockperfPingPong(ctx context.Context, bed *testbed.Bed, size int, d time.Duration, polling bool) (*SockperfPingPong, error) {
	p, err := sockperfPair(bed, "ping-pong", size, d, polling)
	if err != nil {
		return nil, err
	}
	run, err := p.run(ctx, bed)
	if err != nil {
		return nil, err
	}
	res, err := ParseSockperfPingPong([]byte(run.ClientOut), []byte(run.ServerOut))
	if err != nil {
		return nil, &RunError{Run: run, Err: err}
	}
	res.Size, res.Polling, res.Run = size, polling, *run
	res.Usage.Messages = res.ServerReceived + res.Received
	res.Usage.Window.Messages = 2 * res.Received
	return res, nil
}

// RunSockperfThroughput runs `sockperf throughput` over UDP with size-byte messages for d
// (rounded up to whole seconds, at least 1): A sends as fast as it can, B counts; both
// sides poll if polling is set.
func RunSockperfThroughput(ctx context.Context, bed *testbed.Bed, size int, d time.Duration, polling bool) (*SockperfThroughput, error) {
	p, err := sockperfPair(bed, "throughput", size, d, polling)
	if err != nil {
		return nil, err
	}
	run, err := p.run(ctx, bed)
	if err != nil {
		return nil, err
	}
	res, err := ParseSockperfThroughput([]byte(run.ClientOut), []byte(run.ServerOut))
	if err != nil {
		return nil, &RunError{Run: run, Err: err}
	}
	res.Size, res.Polling, res.Run = size, polling, *run
	res.Usage.Messages = res.Received
	res.Usage.Window.Messages = res.Received
	return res, nil
}
