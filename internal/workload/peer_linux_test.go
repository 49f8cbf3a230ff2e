package workload

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/faultlink"
	"github.com/xdpndk/xdpndk/internal/plumb"
	"github.com/xdpndk/xdpndk/internal/racebuild"
	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/ndk"
	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// envTarget names the interface TestTargetProcess serves on; envTargetRetryTimeout and
// envTargetKeepAlive, when set, are its adapter's Options.RetryTimeout and KeepAlive (as
// time.ParseDuration reads them).
const (
	envTarget             = "XDPNDK_WORKLOAD_TARGET"
	envTargetRetryTimeout = "XDPNDK_WORKLOAD_TARGET_RETRY_TIMEOUT"
	envTargetKeepAlive    = "XDPNDK_WORKLOAD_TARGET_KEEPALIVE"
)

// targetOptions are the options of TestTargetProcess's adapter that the parent may set (a
// zero field: the default).
type targetOptions struct {
	RetryTimeout, KeepAlive time.Duration
}

// env returns the environment variables that pass o to TestTargetProcess.
func (o targetOptions) env() []string {
	var e []string
	if o.RetryTimeout != 0 {
		e = append(e, envTargetRetryTimeout+"="+o.RetryTimeout.String())
	}
	if o.KeepAlive != 0 {
		e = append(e, envTargetKeepAlive+"="+o.KeepAlive.String())
	}
	return e
}

// targetOptionsFromEnv reads what env wrote into opts.
func targetOptionsFromEnv(opts *ndk.Options) error {
	for _, v := range []struct {
		name string
		dst  *time.Duration
	}{{envTargetRetryTimeout, &opts.RetryTimeout}, {envTargetKeepAlive, &opts.KeepAlive}} {
		s := os.Getenv(v.name)
		if s == "" {
			continue
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%s=%q: %w", v.name, s, err)
		}
		*v.dst = d
	}
	return nil
}

// TestTargetProcess is not a test: TestPeerKillRestart and the stall and keepalive tests
// run the test binary with envTarget set, inside host B's namespace, and this function
// then opens an adapter there (with the options of envTargetRetryTimeout and
// envTargetKeepAlive, if set), prints "ready" and serves a Target until it is killed (at
// most 60 s).
func TestTargetProcess(t *testing.T) {
	iface := os.Getenv(envTarget)
	if iface == "" {
		return // the normal test run: nothing to do here
	}
	cfg := xdpConfig()
	cfg.Interface = iface
	opts := ndk.DefaultOptions()
	if err := targetOptionsFromEnv(&opts); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	a, err := ndk.Open(cfg, opts)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	tg, err := NewTarget(a, TargetConfig{})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("ready", a.LocalAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_ = tg.Run(ctx)
	os.Exit(3)
}

// child is a TestTargetProcess running in a host of the bed.
type child struct {
	cmd    *exec.Cmd
	waited bool
}

// startTarget starts TestTargetProcess in h and waits until it serves. It is killed when
// the test ends, if still running.
func startTarget(t *testing.T, h *testbed.Host) *child {
	t.Helper()
	return startTargetWith(t, h, targetOptions{})
}

// startTargetWith is startTarget with options for the target's adapter.
func startTargetWith(t *testing.T, h *testbed.Host, o targetOptions) *child {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	cmd := h.Command(ctx, os.Args[0], "-test.run=^TestTargetProcess$", "-test.count=1", "-test.timeout=80s")
	cmd.Env = append(append(os.Environ(), envTarget+"="+h.Ifname), o.env()...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	c := &child{cmd: cmd}
	t.Cleanup(func() {
		if !c.waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		cancel()
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready") || strings.HasPrefix(sc.Text(), "error") {
				line <- sc.Text()
				break
			}
		}
		for sc.Scan() { // keep draining so the child never blocks on its stdout
		}
		select {
		case line <- "target exited: " + fmt.Sprint(sc.Err()):
		default:
		}
	}()
	select {
	case l := <-line:
		if !strings.HasPrefix(l, "ready") {
			t.Fatalf("target process: %s", l)
		}
		t.Logf("target process %d: %s", cmd.Process.Pid, l)
	case <-time.After(20 * time.Second):
		t.Fatal("target process not ready within 20 s")
	}
	return c
}

// kill kills the process with SIGKILL and reaps it.
func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = c.cmd.Wait()
	c.waited = true
}

// stop stops the process with SIGSTOP and waits until the kernel reports every thread of
// it stopped (its engine, its timers, its socket's consumer: a thread stops when it next
// runs, which on a busy machine may take a while). It returns the time just before the
// signal was sent and the time every thread was seen stopped. A process left stopped is
// still killed when the test ends (SIGKILL ends a stopped process).
func (c *child) stop(t *testing.T) (sent, stopped time.Time) {
	t.Helper()
	sent = time.Now()
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	c.waitThreads(t, "stopped", func(st byte) bool { return st == 'T' })
	return sent, time.Now()
}

// cont resumes a process stopped by stop (SIGCONT) and waits until the kernel reports no
// thread of it stopped. It returns the time just before the signal was sent.
func (c *child) cont(t *testing.T) time.Time {
	t.Helper()
	at := time.Now()
	if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	c.waitThreads(t, "resumed", func(st byte) bool { return st != 'T' })
	return at
}

// waitThreads waits (at most 5 s) until the state letter of every thread of the process
// (/proc/PID/task/TID/stat) satisfies ok.
func (c *child) waitThreads(t *testing.T, what string, ok func(byte) bool) {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/task", c.cmd.Process.Pid)
	deadline := time.Now().Add(5 * time.Second)
	for {
		tasks, err := os.ReadDir(dir)
		if err != nil || len(tasks) == 0 {
			t.Fatalf("target process not %s: %d threads, %v", what, len(tasks), err)
		}
		bad := ""
		for _, task := range tasks {
			path := dir + "/" + task.Name() + "/stat"
			b, err := os.ReadFile(path)
			if err != nil {
				continue // the thread exited
			}
			// "tid (comm) S ...": the state follows the last ')'.
			i := strings.LastIndexByte(string(b), ')')
			if i < 0 || i+2 >= len(b) {
				t.Fatalf("%s: %q", path, b)
			}
			if !ok(b[i+2]) {
				bad = fmt.Sprintf("thread %s in state %c", task.Name(), b[i+2])
				break
			}
		}
		if bad == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("target process not %s after 5 s: %s", what, bad)
		}
		time.Sleep(time.Millisecond)
	}
}

// staleSum is what the engine counts for datagrams that belong to no live connection.
func staleSum(s transport.EngineStats) uint64 {
	return s.NoQP + s.BadCookie + s.BadSource + s.CMDropped
}

// The target runs in a child process in host B; the initiator in this process connects
// QPs to it and keeps requests in flight, recording (with its link's tap) some of the
// datagrams the child sends. Then:
//
//  1. SIGKILL the child: every request in flight completes with STATUS_IO_TIMEOUT or
//     STATUS_CANCELLED within the drain bound, nothing is left outstanding, and the
//     disconnect callback of every connection runs (NDKPI: the connection aborted);
//  2. restart the child: a new initiator connects and the verb mix passes byte-exact;
//  3. while it runs, replay the recorded datagrams of the dead incarnation at this host from
//     B's address and the ports they came from (a kernel UDP socket in B): every one is
//     dropped and counted by the engine (no QP, bad cookie, bad source, or CM dropped),
//     and the live mix still passes byte-exact with no unexpected completion.
func TestPeerKillRestart(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{MTU: 9000})
	// A short budget keeps the test short: what it shows is that every request ends, and
	// when (requests posted after the kill, control Sends among them, start theirs then).
	opts := ndkOptions()
	opts.RetryTimeout = killBudget
	parent := openXDP(t, bed.A, xdpConfig(), faultlink.Config{}, opts)
	target := bed.B.Addr
	rec := parent.fl.Record(400, 3)

	old := startTarget(t, bed.B)
	cfg := Config{Seed: 11, QPs: 4, Outstanding: 8, MaxSize: 16 << 10}
	in := dialTo(t, parent.a, target, cfg)
	runDone := make(chan Report, 1)
	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	go func() { runDone <- in.Run(runCtx, Limits{Duration: 60 * time.Second, Drain: 5 * time.Second}) }()
	want := uint64(3000)
	if racebuild.Enabled {
		want = 600
	}
	waitFor(t, 20*time.Second, "traffic before the kill", func() bool { return in.Progress() >= want })

	// 1. Kill.
	old.kill(t)
	killed := time.Now()
	parent.fl.StopRecording()
	var r Report
	select {
	case r = <-runDone:
	case <-time.After(4*killBudget + 5*time.Second):
		// Every connection should have failed by now: requests outstanding at the kill
		// within the budget (plus a timeout), those posted when they failed (the control
		// Sends that report it) one budget later. Stop Run to see what is stuck.
		for i, q := range in.QPs() {
			t.Logf("QP %d: %+v", i, plumb.QP(q).Stats())
		}
		t.Logf("control QP: %+v", plumb.QP(in.ControlQP()).Stats())
		xs, _ := parent.dev.Links()[0].Socket().Statistics()
		t.Logf("engine %+v; link %+v; socket %+v; wrapper %+v", plumb.Engine(parent.a).Stats(), parent.fl.Stats(), xs, parent.fl.FaultStats())
		stopRun()
		r = <-runDone
		t.Fatalf("requests still in flight %v after the kill: %s", time.Since(killed).Round(time.Second), strings.Join(r.InFlight, "; "))
	}
	t.Logf("after the kill: Run returned in %v: %s", time.Since(killed).Round(time.Millisecond), r.String())
	if r.Outstanding != 0 || r.ControlReceives != 0 {
		t.Fatalf("%d requests and %d control receives still outstanding after the kill", r.Outstanding, r.ControlReceives)
	}
	for st := range r.Statuses {
		if st != ndk.StatusSuccess && st != ndk.StatusIOTimeout && st != ndk.StatusCancelled {
			t.Errorf("completion with %v after the peer was killed (want STATUS_IO_TIMEOUT or STATUS_CANCELLED)", st)
		}
	}
	if r.Statuses[ndk.StatusIOTimeout] == 0 || r.Failed != in.Connections() || r.Mismatches != 0 || r.Unexpected != 0 || r.PostErrors != 0 {
		t.Errorf("after the kill: %d timeouts, %d of %d connections failed, %d mismatches (%s), %d unexpected (%s), %d posts refused (%v)",
			r.Statuses[ndk.StatusIOTimeout], r.Failed, in.Connections(), r.Mismatches, r.FirstMismatch, r.Unexpected,
			r.FirstUnexpected, r.PostErrors, r.FirstPostError)
	}
	deadline := time.Now().Add(5 * time.Second)
	for in.Disconnects() < in.Connections() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := in.Disconnects(); n != in.Connections() {
		t.Errorf("disconnect callbacks ran for %d of %d aborted connections (NDKPI: called when the peer disconnects or the connection aborts)",
			n, in.Connections())
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := in.Close(closeCtx); err != nil {
		t.Logf("closing the failed initiator: %v", err)
	}
	cancel()
	stale := rec.Datagrams()
	if len(stale) == 0 {
		t.Fatal("nothing recorded from the old target")
	}

	// 2. Restart, and a new mix.
	startTarget(t, bed.B)
	cfg.Seed = 12
	in2 := dialTo(t, parent.a, target, cfg)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() { runDone <- in2.Run(ctx, Limits{Duration: 60 * time.Second}) }()
	waitFor(t, 20*time.Second, "traffic after the restart", func() bool { return in2.Progress() >= want/4 })

	// 3. Replay the old incarnation's datagrams.
	before := plumb.Engine(parent.a).Stats()
	sent, units := replay(t, bed.B, bed.A.Addr, stale)
	waitFor(t, 10*time.Second, "the replayed datagrams to be counted", func() bool {
		return staleSum(plumb.Engine(parent.a).Stats())-staleSum(before) >= uint64(units)
	})
	time.Sleep(200 * time.Millisecond) // the mix goes on after the replay
	stop()
	r2 := <-runDone
	after := plumb.Engine(parent.a).Stats()
	t.Logf("replayed %d datagrams of the killed target: no QP %d, bad cookie %d, bad source %d, CM dropped %d, malformed %d, out of window %d",
		sent, after.NoQP-before.NoQP, after.BadCookie-before.BadCookie, after.BadSource-before.BadSource,
		after.CMDropped-before.CMDropped, after.Malformed-before.Malformed, after.OutOfWindow-before.OutOfWindow)
	t.Logf("after the restart: %s", r2.String())
	if d := staleSum(after) - staleSum(before); d != uint64(units) {
		t.Errorf("%d replayed datagrams (%d drops to count: a multi-QP Bundle's groups count one each), %d counted as stale", sent, units, d)
	}
	checkReport(t, &r2)
}

// killBudget is TestPeerKillRestart's RetryTimeout.
const killBudget = 2 * time.Second

// dialTo connects an initiator on a to a target at addr and closes it when the test ends.
func dialTo(t *testing.T, a *ndk.Adapter, addr netip.Addr, cfg Config) *Initiator {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	in, err := Dial(ctx, a, addr, cfg)
	if err != nil {
		t.Fatalf("dial %v: %v", addr, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = in.Close(ctx)
	})
	return in
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// replay sends each datagram from h's address and the port it came from, to dst at the
// port it was sent to, with kernel UDP sockets inside h's namespace (only datagrams that
// came from h's address are sent, so nothing leaves the bed). It returns how many it sent.
func replay(t *testing.T, h *testbed.Host, dst netip.Addr, dgs []faultlink.Datagram) (sent, units int) {
	t.Helper()
	err := h.Do(func() error {
		socks := map[uint16]*net.UDPConn{}
		defer func() {
			for _, s := range socks {
				_ = s.Close()
			}
		}()
		for _, d := range dgs {
			if d.Remote.Addr() != h.Addr {
				continue
			}
			s := socks[d.Remote.Port()]
			if s == nil {
				var err error
				if s, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(d.Remote)); err != nil {
					return err
				}
				socks[d.Remote.Port()] = s
			}
			if _, err := s.WriteToUDPAddrPort(d.Data, netip.AddrPortFrom(dst, d.LocalPort)); err != nil {
				return err
			}
			sent++
			units += dropUnits(d.Data)
			if sent%16 == 0 {
				time.Sleep(100 * time.Microsecond) // paced: the receive ring is not the subject
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("replay from %s: %v", h.NS, err)
	}
	return sent, units
}

// dropUnits is how many drops the engine counts for datagram d when nothing in it is for a
// live QP: one, or one per group of a multi-QP Bundle (each names its own QP, and each is
// matched, and counted, once).
func dropUnits(d []byte) int {
	var p, e wire.Packet
	if wire.Parse([][]byte{d}, &p) != nil || p.Opcode != wire.OpMultiBundle {
		return 1
	}
	n := 0
	for it := p.Entries(); it.Next(&e); {
		if it.GroupStart() {
			n++
		}
	}
	return n
}
