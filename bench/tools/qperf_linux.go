//go:build linux

package tools

import (
	"context"
	"fmt"
	"os/exec"
	"time"

	"github.com/xdpndk/xdpndk/internal/testbed"
)

// qperfPair is the qperf server in B (`qperf -lp QperfPort`, which listens on B's
// addresses only: B's namespace has no other) and the client in A running test for d
// (whole seconds) with size-byte messages, then "quit", which makes the server exit. The
// options come before the test: qperf applies an option to the tests named after it (-m
// after the test name is ignored).
func qperfPair(bed *testbed.Bed, test string, size int, d time.Duration) *pair {
	secs := wholeSeconds(d)
	sargs := []string{"-lp", itoa(QperfPort)}
	cargs := []string{bed.B.Addr.String(), "-lp", itoa(QperfPort), "-ip", itoa(QperfDataPort),
		"-t", itoa(secs), "-vv", "-uu", "-e", "9", "-m", itoa(size), test, "quit"}
	return &pair{
		tool:       "qperf",
		serverArgs: append([]string{"qperf"}, sargs...),
		clientArgs: append([]string{"qperf"}, cargs...),
		server:     func(ctx context.Context) *exec.Cmd { return bed.B.Command(ctx, "qperf", sargs...) },
		client:     func(ctx context.Context) *exec.Cmd { return bed.A.Command(ctx, "qperf", cargs...) },
		ready:      listen{"tcp", QperfPort},
		limit:      time.Duration(secs)*time.Second + slack,
	}
}

// qperfCheck validates a qperf run's arguments.
func qperfCheck(proto QperfProto, size int) error {
	if proto != QperfTCP && proto != QperfUDP {
		return fmt.Errorf("qperf: unknown transport %q", proto)
	}
	if size < 1 || (proto == QperfUDP && size > 65507) {
		return fmt.Errorf("qperf: message size %d out of range", size)
	}
	return nil
}

// RunQperfLat runs qperf's tcp_lat or udp_lat (proto) with size-byte messages for d
// (rounded up to whole seconds, at least 1) from A to B.
func RunQperfLat(ctx context.Context, bed *testbed.Bed, proto QperfProto, size int, d time.Duration) (*QperfLat, error) {
	if err := qperfCheck(proto, size); err != nil {
		return nil, err
	}
	test := string(proto) + "_lat"
	run, err := qperfPair(bed, test, size, d).run(ctx, bed)
	if err != nil {
		return nil, err
	}
	res, err := ParseQperfLat([]byte(run.ClientOut), test)
	if err == nil && res.Size != size {
		err = fmt.Errorf("qperf ran %d-byte messages, not %d", res.Size, size)
	}
	if err != nil {
		return nil, &RunError{Run: run, Err: err}
	}
	res.Run = *run
	res.Usage.Messages = res.LocRecvMsgs + res.RemRecvMsgs
	return res, nil
}

// RunQperfBW runs qperf's tcp_bw or udp_bw (proto) with size-byte messages for d (rounded
// up to whole seconds, at least 1): A sends, B receives.
func RunQperfBW(ctx context.Context, bed *testbed.Bed, proto QperfProto, size int, d time.Duration) (*QperfBW, error) {
	if err := qperfCheck(proto, size); err != nil {
		return nil, err
	}
	test := string(proto) + "_bw"
	run, err := qperfPair(bed, test, size, d).run(ctx, bed)
	if err != nil {
		return nil, err
	}
	res, err := ParseQperfBW([]byte(run.ClientOut), test)
	if err == nil && res.Size != size {
		err = fmt.Errorf("qperf ran %d-byte messages, not %d", res.Size, size)
	}
	if err != nil {
		return nil, &RunError{Run: run, Err: err}
	}
	res.Run = *run
	res.Usage.Messages = res.RecvMsgs
	return res, nil
}
