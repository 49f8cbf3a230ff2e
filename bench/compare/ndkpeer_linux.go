//go:build linux

package compare

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/xdpndk/xdpndk/bench/internal/report"
)

// ndkpeer's options on both hosts: the adapters serve queue 0 only, which both sides
// transmit on (the veth delivers what TX queue i sends to the peer's RX queue i), since
// the asavie/xdp sockets of earlier repetitions stay bound to queues 1..Runs.
var ndkpeerQueue = []string{"--queue", "0", "--steer", "external"}

// Bounds of the ndkpeer processes.
const (
	serveReady  = 15 * time.Second // for ndkpeer serve to listen
	serveStop   = 10 * time.Second // for it to exit after SIGINT
	clientSlack = 30 * time.Second // beyond a client's expected time
)

// ndkpeerVersion returns what `ndkpeer --version` prints.
func (r *runner) ndkpeerVersion(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, r.bin, "--version").Output()
	if err != nil {
		return "ndkpeer (version unknown: " + err.Error() + ")"
	}
	return strings.TrimSpace(string(out))
}

// server is a running `ndkpeer serve` in host B.
type server struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  []string
	done chan struct{}
	err  error
}

// startServe starts ndkpeer serve in B and waits until it listens. The server outlives a
// cancelled ctx: stop ends it (SIGTERM), after the client that was running has ended, so
// that an interrupted client is not left waiting for a server that was killed under it
// (the bed's removal kills whatever is left).
func (r *runner) startServe(ctx context.Context) (*server, error) {
	args := append([]string{"serve", "-i", r.bed.B.Ifname}, ndkpeerQueue...)
	cmd := r.bed.B.Command(context.WithoutCancel(ctx), r.bin, args...)
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start ndkpeer serve: %w", err)
	}
	s := &server{cmd: cmd, done: make(chan struct{})}
	ready := make(chan struct{}, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			s.mu.Lock()
			s.out = append(s.out, sc.Text())
			if len(s.out) > 200 {
				s.out = s.out[len(s.out)-100:]
			}
			s.mu.Unlock()
			if strings.Contains(sc.Text(), "msg=limits") {
				select {
				case ready <- struct{}{}:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, pipe)
		s.err = cmd.Wait()
		close(s.done)
	}()
	t := time.NewTimer(serveReady)
	defer t.Stop()
	select {
	case <-ready:
		return s, nil
	case <-s.done:
		return nil, fmt.Errorf("ndkpeer serve ended before listening (%v):\n%s", s.err, s.tail())
	case <-t.C:
		s.stop()
		return nil, fmt.Errorf("ndkpeer serve did not listen within %v:\n%s", serveReady, s.tail())
	case <-ctx.Done():
		s.stop()
		return nil, ctx.Err()
	}
}

// tail returns the server's last lines.
func (s *server) tail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.out[max(0, len(s.out)-8):], "\n")
}

// stop stops the server (SIGTERM, SIGKILL after serveStop) and reports how it ended.
// SIGTERM rather than SIGINT: a process started in the background by a shell ignores
// SIGINT, and its children inherit that.
func (s *server) stop() error {
	select {
	case <-s.done:
		return s.err
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(serveStop)
	defer t.Stop()
	select {
	case <-s.done:
		return s.err
	case <-t.C:
		_ = s.cmd.Process.Kill()
		<-s.done
		return fmt.Errorf("ndkpeer serve did not stop within %v of SIGINT", serveStop)
	}
}

// ndkpeerTurn measures xdpndk (sys: polling or -e) through ndkpeer: serve in B for the
// turn, then a client in A per test and run of consecutive sizes, each with --cpu-util,
// then the loaded ping-pong (send-lat --load).
func (r *runner) ndkpeerTurn(ctx context.Context, rep int, sys string) {
	events := sys == SystemXDPNDKEvents
	var all []figure
	for _, t := range ndkpeerTests {
		metrics := []string{report.MetricRTTP50, report.MetricRTTP99, report.MetricRTTMean}
		if t.scenario == ScenarioStream {
			metrics = []string{report.MetricMsgRate, report.MetricGbps}
		}
		all = append(all, expect(t.scenario, sys, t.op, r.o.Sizes, nil, metrics...)...)
	}
	p := loadParams(LoadSize)
	loadExp := append(expect(ScenarioLoaded, sys, OpPingPong, []int{PingSize}, p, report.MetricRTTP50, report.MetricRTTP99, report.MetricRTTMean),
		expect(ScenarioLoaded, sys, OpWrite, []int{LoadSize}, p, report.MetricGbps)...)
	var srv *server
	r.measure(ctx, "ndkpeer serve in B", append(all, loadExp...), func() ([]figure, error) {
		var err error
		srv, err = r.startServe(ctx)
		return nil, err
	})
	if srv == nil {
		return
	}
	defer func() {
		if err := srv.stop(); err != nil && ctx.Err() == nil {
			err = fmt.Errorf("%s ndkpeer serve, repetition %d: %w:\n%s", sys, rep+1, err, srv.tail())
			r.notes = append(r.notes, report.FailedNote(err))
			r.errs = append(r.errs, err)
		}
	}()
	for _, t := range ndkpeerTests {
		run := func(sizes []int, quiet bool) error {
			what := fmt.Sprintf("%s %s", t.command, sizeName(sizes[0]))
			if len(sizes) > 1 {
				what += ".." + sizeName(sizes[len(sizes)-1])
			}
			exp := filterFigs(all, func(f figure) bool {
				sc, op, _ := ndkpeerWhere(t.command)
				return f.ref.Scenario == sc && f.ref.Op == op && containsInt(sizes, f.ref.Size)
			})
			fn := func() ([]figure, error) {
				d, err := r.ndkpeerClient(ctx, t.command, sizes, events, r.o.NdkpeerWindow, "--cpu-util")
				if err != nil {
					return nil, err
				}
				r.ndkpeerMode(sys, d, events)
				return ndkpeerFigures(sys, d, CPUSizes)
			}
			if quiet {
				figs, err := fn()
				if err == nil {
					r.col.add(r.rep, figs...)
					r.progress("%s: %s", what, summarize(figs))
				}
				return err
			}
			r.measure(ctx, what, exp, fn)
			return nil
		}
		for _, sizes := range consecutive(r.o.Sizes) {
			if len(sizes) == 1 {
				_ = run(sizes, false)
				continue
			}
			// One process measures a run of sizes (-a); if it fails, each size is measured
			// again by a process of its own, so that one size's failure loses that size
			// only (ndkpeer reports nothing of a run that failed).
			if err := run(sizes, true); err != nil && ctx.Err() == nil {
				r.progress("%s %s..%s failed (%s): each size again, one process each", t.command, sizeName(sizes[0]), sizeName(sizes[len(sizes)-1]), firstLine(err.Error()))
				for _, s := range sizes {
					_ = run([]int{s}, false)
				}
			}
		}
	}
	r.measure(ctx, fmt.Sprintf("send-lat %d B --load write:%s", PingSize, sizeName(LoadSize)), loadExp, func() ([]figure, error) {
		d, err := r.ndkpeerClient(ctx, "send-lat", []int{PingSize}, events, r.o.LoadTime, "--load", "write:"+strconv.Itoa(LoadSize))
		if err != nil {
			return nil, err
		}
		return ndkpeerLoadedFigures(sys, d)
	})
}

// ndkpeerMode notes what sys ran with, from a client's document.
func (r *runner) ndkpeerMode(sys string, d *ndkpeerDoc, events bool) {
	how := "polling (the client's loop spins on its CQs; the server's loop spins while traffic comes)"
	if events {
		how = "-e: both loops arm their CQs and sleep on the notifications (the adapter's goroutine still spins 50 us after work)"
	}
	r.modes[sys] = fmt.Sprintf("ndkpeer (this build) serve in B, a client per test in A, --queue 0 --steer external, %s; client %s; server %s",
		how, d.Local, d.Server)
}

// ndkpeerClient runs an ndkpeer test in A against the server in B: sizes (consecutive
// powers of two: -a, or one: -s), window each (-D), -e when events, extra options; and
// returns its parsed JSON document.
func (r *runner) ndkpeerClient(ctx context.Context, command string, sizes []int, events bool, window time.Duration, extra ...string) (*ndkpeerDoc, error) {
	args := append([]string{command, "-i", r.bed.A.Ifname}, ndkpeerQueue...)
	args = append(args, "--json", "-D", strconv.FormatFloat(window.Seconds(), 'f', -1, 64))
	if len(sizes) == 1 {
		args = append(args, "-s", strconv.Itoa(sizes[0]))
	} else {
		args = append(args, "-a", "--min-size", strconv.Itoa(sizes[0]), "--max-size", strconv.Itoa(sizes[len(sizes)-1]))
	}
	if events {
		args = append(args, "-e")
	}
	args = append(args, extra...)
	args = append(args, r.bed.B.Addr.String())
	limit := time.Duration(len(sizes))*(window+3*time.Second) + clientSlack
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := r.bed.A.Command(cctx, r.bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) } // ndkpeer ends at once (exit 130)
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	d, perr := parseNdkpeer(stdout.Bytes())
	switch {
	case err != nil && cctx.Err() != nil && ctx.Err() == nil:
		return nil, fmt.Errorf("ndkpeer %s did not finish within %v: %s", strings.Join(args, " "), limit, lastLines(stderr.String(), 4))
	case perr != nil && err != nil:
		var ee *exec.ExitError
		if errors.As(err, &ee) && stdout.Len() > 0 {
			return nil, fmt.Errorf("ndkpeer %s: %w", strings.Join(args, " "), perr)
		}
		return nil, fmt.Errorf("ndkpeer %s: %v: %s", strings.Join(args, " "), err, lastLines(stderr.String(), 4))
	case perr != nil:
		return nil, fmt.Errorf("ndkpeer %s: %w", strings.Join(args, " "), perr)
	case err != nil:
		return nil, fmt.Errorf("ndkpeer %s: %v: %s", strings.Join(args, " "), err, lastLines(stderr.String(), 4))
	}
	return d, nil
}

// lastLines returns the last n lines of s, joined with " | ".
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}
