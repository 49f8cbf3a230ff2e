//go:build linux

package tools

import (
	"context"
	"fmt"
	"os/exec"
	"time"

	"github.com/xdpndk/xdpndk/internal/testbed"
)

// RunIperf3 runs one iperf3 TCP test from A to B for d (rounded up to whole seconds, at
// least 1): streams connections (-P), each writing size bytes per write (-l), with CUBIC
// congestion control (-C cubic). The server (-s -1: one test, then exit) is bound to B's
// address, the client to A's; both report in JSON (-J), the client's report is parsed.
func RunIperf3(ctx context.Context, bed *testbed.Bed, size, streams int, d time.Duration) (*Iperf3, error) {
	if size < 1 || streams < 1 || streams > 128 {
		return nil, fmt.Errorf("iperf3: %d streams of %d-byte writes out of range", streams, size)
	}
	secs := wholeSeconds(d)
	sargs := []string{"-s", "-1", "-J", "-B", bed.B.Addr.String(), "-p", itoa(Iperf3Port)}
	cargs := []string{"-c", bed.B.Addr.String(), "-B", bed.A.Addr.String(), "-p", itoa(Iperf3Port),
		"-t", itoa(secs), "-J", "-C", "cubic", "-l", itoa(size), "-P", itoa(streams)}
	p := &pair{
		tool:       "iperf3",
		serverArgs: append([]string{"iperf3"}, sargs...),
		clientArgs: append([]string{"iperf3"}, cargs...),
		server:     func(ctx context.Context) *exec.Cmd { return bed.B.Command(ctx, "iperf3", sargs...) },
		client:     func(ctx context.Context) *exec.Cmd { return bed.A.Command(ctx, "iperf3", cargs...) },
		ready:      listen{"tcp", Iperf3Port},
		limit:      time.Duration(secs)*time.Second + slack,
	}
	run, err := p.run(ctx, bed)
	if err != nil {
		if run != nil && run.ClientOut != "" {
			if _, perr := ParseIperf3([]byte(run.ClientOut)); perr != nil {
				err = fmt.Errorf("%w (%v)", err, perr) // iperf3's own "error" member says more
			}
		}
		return nil, err
	}
	res, err := ParseIperf3([]byte(run.ClientOut))
	switch {
	case err != nil:
	case res.Size != size || res.Streams != streams:
		err = fmt.Errorf("iperf3 ran %d streams of %d-byte writes, not %d of %d", res.Streams, res.Size, streams, size)
	case res.Congestion != "cubic":
		err = fmt.Errorf("iperf3's sender used %q congestion control, not cubic", res.Congestion)
	}
	if err != nil {
		return nil, &RunError{Run: run, Err: err}
	}
	res.Run = *run
	res.Usage.Messages = res.ReceivedBytes / int64(res.Size)
	return res, nil
}
