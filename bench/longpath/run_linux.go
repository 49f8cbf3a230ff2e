package longpath

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xdpndk/xdpndk/internal/delayline"
	"github.com/xdpndk/xdpndk/internal/testbed"
)

// Run measures every path of o, one bed each, and returns the figures gathered even when
// err is not nil (failures are in the notes). It needs root, iperf3 and ping.
func Run(ctx context.Context, o Options) (*Results, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	res := &Results{Date: time.Now().Format(time.RFC3339), Options: OptionsDoc{RateBps: o.Rate, QueueBytes: o.QueueBytes,
		MTU: MTU, Runs: o.Runs, DurationS: o.Duration.Seconds(), SkipS: o.Skip.Seconds(), MessageSize: MessageSize, Depth: o.Depth},
		Notes: []string{
			"gbps: payload bits per second over [skip, duration] of each tool's own one-second intervals (ndkpeer --json intervals, from the end of its warm-up; iperf3 -J client intervals: bytes written, or received with -R)",
			"write: ndkpeer write-bw (A client -> B serve) and iperf3 A -> B; read: ndkpeer read-bw (data B -> A) and iperf3 -R (B -> A); one TCP stream, the kernel's default congestion control (CUBIC)",
			"ratio_to_tcp: ndk alone / tcp alone within each run; shared: both started together; gbps = what the delay line forwarded of each (TCP, and our UDP) in the data's direction, Ethernet frames, sampled every 100 ms, over one window: from when it carried both, plus skip, until either stopped (window_s); own_gbps = each tool's own intervals over [skip, duration] of its own clock, which start at different times",
			"retransmits: ndkpeer's client QPs' (the data's sender for write-bw; for read-bw the server sends the data and the client's figure counts only its requests) and iperf3's sender's",
		}}
	var errs []error
	for _, rtt := range o.RTTs {
		if ctx.Err() != nil {
			break
		}
		if err := runPath(ctx, o, rtt, res); err != nil {
			err = fmt.Errorf("path %v: %w", rtt, err)
			res.Notes = append(res.Notes, "failed: "+err.Error())
			errs = append(errs, err)
		}
	}
	res.evaluate(o.Rate)
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	return res, errors.Join(errs...)
}

func (o Options) progress(format string, a ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", a...)
	}
}

// runPath builds the bed of one round trip and runs every measurement on it.
func runPath(ctx context.Context, o Options, rtt time.Duration, res *Results) (err error) {
	cfg := testbed.PathConfig{Delay: rtt / 2, Rate: o.Rate, QueueBytes: o.QueueBytes}
	bed, err := testbed.New(testbed.Options{Routed: true, MTU: MTU, Name: "longpath", StaticNeighbors: true, Path: &cfg})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := bed.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	pc, _ := bed.Path()
	doc := PathDoc{RTTMS: float64(rtt) / 1e6, QueueBytes: pc.QueueBytes}
	rtts, err := bed.A.Ping(ctx, bed.B.Addr, 50, 10*time.Millisecond)
	if err != nil {
		return err
	}
	if len(rtts) > 0 {
		slices.Sort(rtts)
		doc.PingP50MS = float64(rtts[len(rtts)/2]) / 1e6
		doc.PingP99MS = float64(rtts[min(len(rtts)-1, len(rtts)*99/100)]) / 1e6
	}
	o.progress("path %v: %s; ping p50 %.3f ms p99 %.3f ms", rtt, pc, doc.PingP50MS, doc.PingP99MS)

	srv, err := startServer(ctx, bed.B, "msg=limits", o.Ndkpeer, "serve", "-i", bed.B.Ifname, "--port", strconv.Itoa(NDKPort))
	if err != nil {
		return fmt.Errorf("ndkpeer serve: %w", err)
	}
	defer srv.stop()
	ips, err := startServer(ctx, bed.B, "Server listening", "iperf3", "-s", "--forceflush", "-B", bed.B.Addr.String(), "-p", strconv.Itoa(IperfPort))
	if err != nil {
		return fmt.Errorf("iperf3 -s: %w", err)
	}
	defer ips.stop()

	from, to := o.Skip.Seconds(), o.Duration.Seconds()
	for run := range o.Runs {
		for _, op := range o.Ops {
			if ctx.Err() != nil {
				return nil
			}
			t, err := runIperf(ctx, o, bed, op, from, to)
			if err != nil {
				return fmt.Errorf("run %d, tcp %s alone: %w", run+1, op, err)
			}
			d0 := lineDrops(bed)
			n, err := runNDK(ctx, o, bed, op, from, to)
			if err != nil {
				return fmt.Errorf("run %d, ndk %s alone: %w", run+1, op, err)
			}
			drops := lineDrops(bed) - d0
			res.add(rtt, op, "alone", "tcp", "gbps", t.gbps)
			res.add(rtt, op, "alone", "tcp", "retransmits", float64(t.retransmits))
			res.add(rtt, op, "alone", "ndk", "gbps", n.gbps)
			res.add(rtt, op, "alone", "ndk", "retransmits", float64(n.retransmits))
			res.add(rtt, op, "alone", "ndk", "outstanding", float64(n.outstanding))
			res.add(rtt, op, "alone", "ndk", "line_drops", float64(drops))
			res.add(rtt, op, "alone", "ndk", "ratio_to_tcp", n.gbps/t.gbps)
			dir := delayline.AtoB
			if op == "read" {
				dir = delayline.BtoA
			}
			f0, t0 := lineForwarded(bed, dir), time.Now()
			stop := make(chan struct{})
			samples := make(chan []lineSample, 1)
			go func() { samples <- sampleLine(bed, dir, 100*time.Millisecond, stop) }()
			var wg sync.WaitGroup
			var st iperfResult
			var sn ndkResult
			var terr, nerr error
			wg.Go(func() { st, terr = runIperf(ctx, o, bed, op, from, to) })
			wg.Go(func() { sn, nerr = runNDK(ctx, o, bed, op, from, to) })
			wg.Wait()
			close(stop)
			ls := <-samples
			if err := errors.Join(terr, nerr); err != nil {
				return fmt.Errorf("run %d, %s shared: %w", run+1, op, err)
			}
			lineGbps := float64(lineForwarded(bed, dir)-f0) * 8 / time.Since(t0).Seconds() / 1e9
			// Both over the same window, measured where they share the path: the delay
			// line's TCP and UDP bytes (Ethernet frames) from when both flows run, less
			// Skip, until either stops.
			gt, gn, span, ok := sharedRates(ls, o.Skip)
			if !ok {
				return fmt.Errorf("run %d, %s shared: the line never carried both flows for longer than %v", run+1, op, o.Skip)
			}
			res.add(rtt, op, "shared", "line", "gbps", lineGbps)
			res.add(rtt, op, "shared", "all", "window_s", span)
			res.add(rtt, op, "shared", "tcp", "gbps", gt)
			res.add(rtt, op, "shared", "ndk", "gbps", gn)
			res.add(rtt, op, "shared", "tcp", "own_gbps", st.gbps)
			res.add(rtt, op, "shared", "ndk", "own_gbps", sn.gbps)
			res.add(rtt, op, "shared", "ndk", "retransmits", float64(sn.retransmits))
			st.gbps, sn.gbps = gt, gn
			o.progress("%v %-5s run %d: alone tcp %.3f ndk %.3f Gbit/s (ratio %.2f, ndk %d outstanding, %d retransmits (%v), %d line drops; tcp %d); shared tcp %.3f ndk %.3f (line %.3f)",
				rtt, op, run+1, t.gbps, n.gbps, n.gbps/t.gbps, n.outstanding, n.retransmits, n.causes, drops, t.retransmits, st.gbps, sn.gbps, lineGbps)
		}
	}
	if st, err := bed.PathStats(); err == nil {
		doc.LineDropped = st.Dir[delayline.AtoB].Dropped + st.Dir[delayline.BtoA].Dropped
		o.progress("path %v: the delay line dropped %d (A->B) and %d (B->A) frames, late p99 <= %v / %v",
			rtt, st.Dir[0].Dropped, st.Dir[1].Dropped, st.Dir[0].LateQuantile(0.99), st.Dir[1].LateQuantile(0.99))
	}
	res.Paths = append(res.Paths, doc)
	return nil
}

// lineDrops returns what the delay line's queues have dropped so far, both directions.
func lineDrops(bed *testbed.Bed) uint64 {
	st, err := bed.PathStats()
	if err != nil {
		return 0
	}
	return st.Dir[delayline.AtoB].Dropped + st.Dir[delayline.BtoA].Dropped + st.Dir[delayline.AtoB].Overflow + st.Dir[delayline.BtoA].Overflow
}

// sampleLine samples the line's direction d every interval until stop is closed (at most
// 10 minutes).
func sampleLine(bed *testbed.Bed, d delayline.Dir, interval time.Duration, stop <-chan struct{}) []lineSample {
	var out []lineSample
	tk := time.NewTicker(interval)
	defer tk.Stop()
	limit := time.After(10 * time.Minute)
	for {
		if st, err := bed.PathStats(); err == nil {
			out = append(out, lineSample{time.Now(), st.Dir[d].ForwardedTCP, st.Dir[d].ForwardedUDP})
		}
		select {
		case <-stop:
			return out
		case <-limit:
			return out
		case <-tk.C:
		}
	}
}

// lineForwarded returns the bytes the delay line forwarded so far in direction d.
func lineForwarded(bed *testbed.Bed, d delayline.Dir) uint64 {
	st, err := bed.PathStats()
	if err != nil {
		return 0
	}
	return st.Dir[d].ForwardedBytes
}

// runIperf runs one iperf3 client on A for o.Duration: A to B, or B to A for read.
func runIperf(ctx context.Context, o Options, bed *testbed.Bed, op string, from, to float64) (iperfResult, error) {
	args := []string{"-c", bed.B.Addr.String(), "-B", bed.A.Addr.String(), "-p", strconv.Itoa(IperfPort),
		"-t", strconv.Itoa(int(o.Duration / time.Second)), "-i", "1", "-J"}
	if op == "read" {
		args = append(args, "-R")
	}
	out, err := runClient(ctx, bed.A, o.Duration+20*time.Second, "iperf3", args...)
	if err != nil {
		return iperfResult{}, err
	}
	return parseIperf(out, from, to)
}

// runNDK runs one ndkpeer bandwidth test on A against B's server for o.Duration.
func runNDK(ctx context.Context, o Options, bed *testbed.Bed, op string, from, to float64) (ndkResult, error) {
	args := []string{op + "-bw", "-i", bed.A.Ifname, "--port", strconv.Itoa(NDKPort), "-s", strconv.Itoa(MessageSize),
		"-D", strconv.Itoa(int(o.Duration / time.Second)), "--json"}
	if o.Depth > 0 {
		args = append(args, "-t", strconv.Itoa(o.Depth))
	}
	args = append(args, bed.B.Addr.String())
	out, err := runClient(ctx, bed.A, o.Duration+30*time.Second, o.Ndkpeer, args...)
	if err != nil {
		return ndkResult{}, err
	}
	return parseNDK(out, from, to)
}

// runClient runs a program on h, bounded by limit, and returns its standard output.
func runClient(ctx context.Context, h *testbed.Host, limit time.Duration, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := h.Command(ctx, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("%s %s: %w: %s %s", name, strings.Join(args, " "), err,
			strings.TrimSpace(errb.String()), tail(out.String(), 300))
	}
	return out.Bytes(), nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// server is a background process on a host.
type server struct {
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	out  []string
}

// startServer starts a program on h and waits (at most 15 s) for a line of its output
// containing ready. The process lives until stop (or ctx's end, or the bed's Close).
func startServer(ctx context.Context, h *testbed.Host, ready, name string, args ...string) (*server, error) {
	cmd := h.Command(ctx, name, args...)
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, done: make(chan struct{})}
	up := make(chan struct{}, 1)
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			s.mu.Lock()
			if len(s.out) < 200 {
				s.out = append(s.out, sc.Text())
			}
			s.mu.Unlock()
			if strings.Contains(sc.Text(), ready) {
				select {
				case up <- struct{}{}:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, pipe)
		_ = cmd.Wait()
	}()
	select {
	case <-up:
		return s, nil
	case <-s.done:
		return nil, fmt.Errorf("%s ended before it was ready: %s", name, s.output())
	case <-time.After(15 * time.Second):
		s.stop()
		return nil, fmt.Errorf("%s not ready within 15 s: %s", name, s.output())
	}
}

func (s *server) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.out, "\n")
}

// stop kills the process and waits (at most 5 s) for it.
func (s *server) stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
	}
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
	}
}
