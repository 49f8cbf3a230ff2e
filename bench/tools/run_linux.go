//go:build linux

package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/xdpndk/xdpndk/internal/testbed"
)

// Bounds of a run beyond the tool's own duration.
const (
	// listenLimit bounds the wait for the server's socket to appear.
	listenLimit = 5 * time.Second
	// exitGrace is how long a server that stops by itself (qperf after quit, iperf3 -1,
	// fi_pingpong) or on SIGINT (sockperf) gets after the client has exited, before it is
	// killed.
	exitGrace = 5 * time.Second
	// slack is added to a run's expected duration for its deadline: start-up, connection,
	// warm-up, the server's stop.
	slack = 30 * time.Second
)

// proc is one tool process started in a host's namespace.
type proc struct {
	cmd   *exec.Cmd
	out   output // stdout and stderr; read only after done
	start time.Time
	end   time.Time
	err   error         // what Wait returned
	done  chan struct{} // closed once Wait has returned
}

// startProc starts cmd (from Host.Command: `ip netns exec NS tool ...`, which execs the
// tool, so the process started is the tool itself) as the leader of a new process group,
// so that killing the group also kills what the tool forked (qperf's server forks one
// process per test). Cancelling cmd's context kills the group.
func startProc(cmd *exec.Cmd, w *windowMarks) (*proc, error) {
	p := &proc{cmd: cmd, done: make(chan struct{}), out: output{marks: w}}
	if w != nil {
		w.client = p
	}
	cmd.Stdout, cmd.Stderr = &p.out, &p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return p.signal(syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p.start = time.Now()
	go func() {
		p.err = cmd.Wait()
		p.end = time.Now()
		close(p.done)
	}()
	return p, nil
}

// signal sends sig to the process's group (the tool and anything it forked).
func (p *proc) signal(sig syscall.Signal) error {
	err := syscall.Kill(-p.cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// exited reports whether the process has exited (and been waited for).
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop waits up to grace for the process to exit, then kills its group and waits for it.
// It reports whether it had to kill.
func (p *proc) stop(grace time.Duration) (killed bool) {
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return false
	case <-t.C:
	}
	_ = p.signal(syscall.SIGKILL)
	<-p.done
	return true
}

// usage returns the process's CPU time from its rusage at exit (zero before it exited)
// and its life.
func (p *proc) usage() (CPUTime, time.Duration) {
	ps := p.cmd.ProcessState
	if ps == nil {
		return CPUTime{}, 0
	}
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok {
		return CPUTime{}, p.end.Sub(p.start)
	}
	return CPUTime{User: time.Duration(ru.Utime.Nano()), System: time.Duration(ru.Stime.Nano())}, p.end.Sub(p.start)
}

// output collects what a process prints; with marks it also watches for the lines that
// open and close the tool's test window. Write is called by one goroutine at a time
// (os/exec: the same writer for stdout and stderr). It has no ReadFrom method (an
// embedded bytes.Buffer would give it one, and io.Copy would then bypass Write).
type output struct {
	buf   bytes.Buffer
	marks *windowMarks
	line  []byte // the last line's beginning, while it is not complete
}

// String returns everything written.
func (o *output) String() string { return o.buf.String() }

func (o *output) Write(b []byte) (int, error) {
	n, err := o.buf.Write(b)
	if o.marks == nil {
		return n, err
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			o.line = append(o.line, b...)
			break
		}
		o.marks.see(string(append(o.line, b[:i]...)))
		o.line, b = o.line[:0], b[i+1:]
	}
	return n, err
}

// windowMarks samples both processes' CPU when the client prints the line containing
// start and the one containing end.
type windowMarks struct {
	start, end     string
	client, server *proc // set before the client starts (server) and by startProc (client)

	mu     sync.Mutex
	t      [2]time.Time
	c, s   [2]time.Duration
	seen   [2]bool
	failed error
}

// see samples the CPU if line is the start or the end mark.
func (w *windowMarks) see(line string) {
	i := -1
	switch {
	case strings.Contains(line, w.start):
		i = 0
	case strings.Contains(line, w.end):
		i = 1
	default:
		return
	}
	now := time.Now()
	c, cerr := procCPU(w.client.cmd.Process.Pid)
	s, serr := procCPU(w.server.cmd.Process.Pid)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen[i] {
		return
	}
	if err := errors.Join(cerr, serr); err != nil {
		w.failed = err
		return
	}
	w.t[i], w.c[i], w.s[i], w.seen[i] = now, c, s, true
}

// window returns the window, or nil with the reason when a mark was not seen.
func (w *windowMarks) window() (*Window, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.failed != nil:
		return nil, w.failed
	case !w.seen[0]:
		return nil, fmt.Errorf("the client never printed %q", w.start)
	case !w.seen[1]:
		return nil, fmt.Errorf("the client never printed %q", w.end)
	}
	return &Window{Wall: w.t[1].Sub(w.t[0]), Client: w.c[1] - w.c[0], Server: w.s[1] - w.s[0]}, nil
}

// userHZ is the unit of the times in /proc/PID/stat: USER_HZ, 100 on Linux.
const userHZ = 100

// procCPU returns the CPU time of process pid and of the children it waited for so far:
// utime + stime + cutime + cstime from /proc/PID/stat, summed over its threads.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ...: the fields after the command's closing parenthesis start
	// with the third (state); utime, stime, cutime, cstime are the 14th to 17th.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 15 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	var ticks int64
	for _, s := range f[11:15] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// exitError describes how a process ended badly: its exit status or signal.
func (p *proc) exitError(who string) error {
	if p.err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", who, p.err)
}

// listen names a socket the server opens when it is ready: tcp (a listening socket) or
// udp (a bound one) on port.
type listen struct {
	proto string
	port  int
}

// pair describes one client-server run of a tool.
type pair struct {
	tool                   string
	serverArgs, clientArgs []string // the tools' argv, for the record
	// server and client make the commands, in B and in A, bound to ctx.
	server, client func(ctx context.Context) *exec.Cmd
	// ready is the server's socket to wait for before starting the client.
	ready listen
	// interrupt: the server runs until it gets SIGINT, sent once the client has exited
	// (sockperf). Otherwise it exits by itself once the client is done.
	interrupt bool
	// limit bounds the whole run.
	limit time.Duration
	// window, when set, holds the lines of the client's output that open and close the
	// tool's test phase: Usage.Window is measured between them.
	window *[2]string
}

// run runs the pair in bed: starts the server in B, waits until its socket is there,
// starts the client in A, waits for it, then stops the server (waits for it to exit, or
// interrupts it), killing whatever still runs at the deadline or on an error. Both
// processes are gone when it returns. It returns the run with both outputs and usages;
// the error says what failed, with the outputs (RunError).
func (s *pair) run(parent context.Context, bed *testbed.Bed) (*Run, error) {
	ctx, cancel := context.WithTimeout(parent, s.limit)
	defer cancel()
	r := &Run{Tool: s.tool, ServerArgs: s.serverArgs, ClientArgs: s.clientArgs}
	fail := func(err error) (*Run, error) { return r, &RunError{Run: r, Err: err} }

	srv, err := startProc(s.server(ctx), nil)
	if err != nil {
		return fail(fmt.Errorf("start the server: %w", err))
	}
	var cli *proc
	finish := func() {
		// Both gone, also on an error or a panic; then the record.
		if cli != nil && !cli.exited() {
			_ = cli.signal(syscall.SIGKILL)
			<-cli.done
		}
		if !srv.exited() {
			_ = srv.signal(syscall.SIGKILL)
			<-srv.done
		}
		r.ServerOut = srv.out.String()
		r.Usage.Server, r.Usage.ServerWall = srv.usage()
		if cli != nil {
			r.ClientOut = cli.out.String()
			r.Usage.Client, r.Usage.ClientWall = cli.usage()
		}
	}
	defer finish()

	if err := awaitSocket(ctx, bed.B, s.ready, srv); err != nil {
		finish()
		return fail(fmt.Errorf("server not ready: %w", err))
	}
	var marks *windowMarks
	if s.window != nil {
		marks = &windowMarks{start: s.window[0], end: s.window[1], server: srv}
	}
	if cli, err = startProc(s.client(ctx), marks); err != nil {
		cli = nil
		finish()
		return fail(fmt.Errorf("start the client: %w", err))
	}
	<-cli.done // the context's deadline kills it (cmd.Cancel)
	if s.interrupt && !srv.exited() {
		_ = srv.signal(syscall.SIGINT)
	}
	killed := srv.stop(exitGrace)
	finish()
	switch {
	case parent.Err() != nil:
		return fail(fmt.Errorf("stopped: the caller's context ended: %w", context.Cause(parent)))
	case ctx.Err() != nil:
		return fail(fmt.Errorf("not finished within its limit of %v: %w", s.limit, ctx.Err()))
	case cli.err != nil:
		return fail(cli.exitError("client"))
	case killed:
		return fail(fmt.Errorf("the server did not exit within %v of the client", exitGrace))
	case srv.err != nil:
		return fail(srv.exitError("server"))
	}
	if marks != nil {
		if r.Usage.Window, err = marks.window(); err != nil {
			return fail(fmt.Errorf("CPU of the test window: %w", err))
		}
	}
	return r, nil
}

// awaitSocket waits until a socket of h's namespace matches l, polling the namespace's
// /proc/net tables every 10 ms, for at most listenLimit; it fails at once if srv exits.
func awaitSocket(ctx context.Context, h *testbed.Host, l listen, srv *proc) error {
	deadline := time.Now().Add(listenLimit)
	for {
		found, err := hasSocket(h, l)
		if err != nil {
			return err
		}
		if found {
			return nil
		}
		if srv.exited() {
			return fmt.Errorf("it exited before opening %s port %d (%v)", l.proto, l.port, srv.err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %s socket on port %d after %v", l.proto, l.port, listenLimit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// hasSocket reports whether h's namespace has a socket matching l: a TCP socket listening
// on the port, or a UDP socket bound to it, over IPv4 or IPv6.
func hasSocket(h *testbed.Host, l listen) (bool, error) {
	want := fmt.Sprintf(":%04X", l.port)
	var found bool
	err := h.Do(func() error {
		for _, file := range []string{l.proto, l.proto + "6"} {
			b, err := os.ReadFile("/proc/thread-self/net/" + file)
			if errors.Is(err, os.ErrNotExist) {
				continue // no IPv6 in the bed
			}
			if err != nil {
				return err
			}
			for _, line := range strings.Split(string(b), "\n")[1:] {
				// sl local_address rem_address st ...; st 0A is TCP's LISTEN.
				f := strings.Fields(line)
				if len(f) > 3 && strings.HasSuffix(f[1], want) && (l.proto == "udp" || f[3] == "0A") {
					found = true
				}
			}
		}
		return nil
	})
	return found, err
}

// itoa is strconv.Itoa, for argument lists.
func itoa(i int) string { return strconv.Itoa(i) }
