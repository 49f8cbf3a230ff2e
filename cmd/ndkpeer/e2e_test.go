//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpndk/xdpndk/internal/privileged"
	"github.com/xdpndk/xdpndk/internal/testbed"
)

// The end-to-end tests build the ndkpeer binary once and run it as a user would: `ndkpeer
// serve` in host B of a test bed, every client command from host A, each checked by its
// exit code and its --json document.

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// ndkpeerBinary builds the command (statically, CGO_ENABLED=0) into a directory every user
// may read, once per test binary.
func ndkpeerBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		gobin, err := exec.LookPath("go")
		if err != nil {
			binErr = fmt.Errorf("the go command is not on PATH: %w", err)
			return
		}
		if binDir, binErr = os.MkdirTemp("", "ndkpeer-test-"); binErr != nil {
			return
		}
		if binErr = os.Chmod(binDir, 0o755); binErr != nil { // the unprivileged runs need it
			return
		}
		binPath = filepath.Join(binDir, "ndkpeer")
		cmd := exec.Command(gobin, "build", "-o", binPath, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatalf("build ndkpeer: %v", binErr)
	}
	return binPath
}

// result is one ndkpeer run.
type result struct {
	args           []string
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("ndkpeer %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// runCmd runs cmd (an ndkpeer command) to its end, bounded by 60 s.
func runCmd(t *testing.T, cmd *exec.Cmd, args []string) result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{args: args, stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("ndkpeer %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// in runs ndkpeer with args inside host h.
func in(t *testing.T, h *testbed.Host, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return runCmd(t, h.Command(ctx, ndkpeerBinary(t), args...), args)
}

// wantExit fails the test unless r ended with code and its error output names what.
func wantExit(t *testing.T, r result, code int, what ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit %d, got %v", code, r)
	}
	for _, w := range what {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr lacks %q: %v", w, r)
		}
	}
}

// decode parses r's JSON document into v.
func decode(t *testing.T, r result, v any) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("want exit 0, got %v", r)
	}
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("decode --json output: %v\n%v", err, r)
	}
}

// serverProc is a running `ndkpeer serve`.
type serverProc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  []string
	done chan struct{}
	code int
}

// startServer starts ndkpeer serve with args on host h and waits until it listens; the
// test's cleanup stops it (SIGINT, then SIGKILL) if the test did not.
func startServer(t *testing.T, h *testbed.Host, args ...string) *serverProc {
	t.Helper()
	args = append([]string{"serve", "-i", h.Ifname}, args...)
	cmd := h.Command(context.Background(), ndkpeerBinary(t), args...)
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("start ndkpeer serve: %v", err)
	}
	s := &serverProc{cmd: cmd, done: make(chan struct{})}
	ready := make(chan struct{}, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			s.mu.Lock()
			s.out = append(s.out, sc.Text())
			s.mu.Unlock()
			if strings.Contains(sc.Text(), "msg=limits") {
				ready <- struct{}{}
			}
		}
		err := cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			s.code = ee.ExitCode()
		} else if err != nil {
			s.code = -1
		}
		close(s.done)
	}()
	t.Cleanup(func() { s.stop(t) })
	select {
	case <-ready:
	case <-s.done:
		t.Fatalf("ndkpeer serve ended before listening (exit %d):\n%s", s.code, s.output())
	case <-time.After(15 * time.Second):
		t.Fatalf("ndkpeer serve did not listen within 15 s:\n%s", s.output())
	}
	return s
}

func (s *serverProc) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.out, "\n")
}

// stop sends SIGINT and waits for the exit (SIGKILL after 10 s); it returns the exit code.
func (s *serverProc) stop(t *testing.T) int {
	select {
	case <-s.done:
		return s.code
	default:
	}
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		t.Errorf("ndkpeer serve did not stop within 10 s of SIGINT:\n%s", s.output())
	}
	return s.code
}

// clientDocT is the part of a client's JSON document the tests check.
type clientDocT struct {
	Command string `json:"command"`
	Local   struct {
		XDP      string `json:"xdp"`
		MTU      int    `json:"mtu"`
		Queues   int    `json:"queues"`
		Progress string `json:"progress"`
	} `json:"local"`
	Server struct {
		XDP      string `json:"xdp"`
		Progress string `json:"progress"`
	} `json:"server"`
	Params    paramsJSON  `json:"params"`
	Latency   []latResult `json:"latency"`
	Bandwidth []bwResult  `json:"bandwidth"`
	Intervals []interval  `json:"intervals"`
}

// checkLatency checks one latency line: the size and iterations asked, positive and
// ordered figures.
func checkLatency(t *testing.T, l latResult, size, iters int) {
	t.Helper()
	if l.Bytes != size || l.Iterations != iters {
		t.Errorf("latency line %+v: want %d bytes, %d iterations", l, size, iters)
	}
	if !(l.MinUS > 0 && l.MinUS <= l.P50US && l.P50US <= l.P99US && l.P99US <= l.P999US && l.P999US <= l.MaxUS) {
		t.Errorf("latency line %+v: figures not positive and ordered min <= p50 <= p99 <= p99.9 <= max", l)
	}
	if l.MeanUS < l.MinUS || l.MeanUS > l.MaxUS {
		t.Errorf("latency line %+v: mean outside [min, max]", l)
	}
}

// checkBandwidth checks one bandwidth line: the size and iterations asked, positive rates
// that follow from the counts.
func checkBandwidth(t *testing.T, b bwResult, size int, iters int64) {
	t.Helper()
	if b.Bytes != size || (iters > 0 && b.Iterations != iters) || b.Iterations <= 0 {
		t.Errorf("bandwidth line %+v: want %d bytes, %d iterations", b, size, iters)
	}
	if b.Seconds <= 0 || b.Gbps <= 0 || b.Mmsgs <= 0 || b.Outstanding < 1 {
		t.Errorf("bandwidth line %+v: not positive", b)
		return
	}
	if g := float64(b.Iterations) * float64(b.Bytes) * 8 / b.Seconds / 1e9; math.Abs(g-b.Gbps) > 1e-9*g {
		t.Errorf("bandwidth line %+v: Gbit/s does not follow from the counts (%v)", b, g)
	}
}

// checkIntervals checks a -D run's per-second lines: contiguous from 0 to the end of the
// window, together as many operations as the result.
func checkIntervals(t *testing.T, ivs []interval, dur float64, total int64) {
	t.Helper()
	if len(ivs) == 0 {
		t.Fatal("no per-second lines")
	}
	var sum int64
	at := 0.0
	for i, iv := range ivs {
		if math.Abs(iv.StartS-at) > 1e-9 || iv.EndS <= iv.StartS {
			t.Errorf("interval %d %+v does not follow the previous (ending at %v)", i, iv, at)
		}
		if i < len(ivs)-1 && iv.EndS-iv.StartS < 0.99 {
			t.Errorf("interval %d %+v shorter than a second", i, iv)
		}
		at = iv.EndS
		sum += iv.Iterations
	}
	if at < dur {
		t.Errorf("intervals end at %v s, before the %v s window", at, dur)
	}
	if sum != total {
		t.Errorf("intervals count %d operations, the result %d", sum, total)
	}
}

// xdpAttached reports whether host h's interface has an XDP program.
func xdpAttached(t *testing.T, h *testbed.Host) bool {
	t.Helper()
	attached := false
	if err := h.Do(func() error {
		l, err := netlink.LinkByName(h.Ifname)
		if err != nil {
			return err
		}
		attached = l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return attached
}

// runningNdkpeers lists the processes running the test's binary.
func runningNdkpeers(bin string) []string {
	var pids []string
	procs, _ := filepath.Glob("/proc/[0-9]*/exe")
	for _, p := range procs {
		if exe, err := os.Readlink(p); err == nil && exe == bin {
			pids = append(pids, strings.Split(p, "/")[2])
		}
	}
	return pids
}

func TestEndToEnd(t *testing.T) {
	privileged.Require(t)
	bin := ndkpeerBinary(t)
	var names [2]string
	t.Cleanup(func() { // registered first: runs after the bed's removal
		out, err := exec.Command("ip", "netns", "list").Output()
		if err != nil {
			t.Errorf("ip netns list: %v", err)
		}
		for _, n := range names {
			if n != "" && strings.Contains(string(out), n) {
				t.Errorf("namespace %s left behind", n)
			}
		}
		if pids := runningNdkpeers(bin); len(pids) > 0 {
			t.Errorf("ndkpeer processes left running: %v", pids)
		}
	})
	bed := testbed.NewT(t, testbed.Options{MTU: 9000, Queues: 1})
	names = [2]string{bed.A.NS, bed.B.NS}
	a, b := bed.A, bed.B
	peer := b.Addr.String()
	srv := startServer(t, b, "--stats=1s")
	conns := 0 // connections the server accepted so far

	t.Run("tour", func(t *testing.T) {
		var doc struct {
			OK    bool       `json:"ok"`
			Steps []tourStep `json:"steps"`
		}
		decode(t, in(t, a, "tour", "-i", a.Ifname, "--json", peer), &doc)
		conns++
		if !doc.OK || len(doc.Steps) != 11 {
			t.Fatalf("tour: ok %v, %d steps: %+v", doc.OK, len(doc.Steps), doc.Steps)
		}
		for _, s := range doc.Steps {
			if !s.OK {
				t.Errorf("step %d (%s) failed: %s", s.N, s.What, s.Result)
			}
		}
		if s := doc.Steps[9]; !strings.Contains(s.Result, "STATUS_ACCESS_VIOLATION") {
			t.Errorf("the access after the invalidate: %q", s.Result)
		}
		text := in(t, a, "tour", "-i", a.Ifname, peer)
		conns++
		if text.code != 0 || strings.Count(text.stdout, "] ok ") != 11 || !strings.Contains(text.stdout, "all 11 steps") {
			t.Errorf("text tour: %v", text)
		}
	})

	for _, tc := range []struct {
		test  string
		size  int
		iters int
		extra []string
	}{
		{"send-lat", 64, 300, nil},
		{"write-lat", 64, 300, []string{"--inline"}},
		{"read-lat", 4096, 300, nil},
		{"send-bw", 65536, 400, nil},
		{"write-bw", 65536, 400, nil},
		{"read-bw", 8192, 400, []string{"--inline"}},
	} {
		t.Run(tc.test, func(t *testing.T) {
			args := append([]string{tc.test, "-i", a.Ifname, "-s", fmt.Sprint(tc.size), "-n", fmt.Sprint(tc.iters), "--json", peer}, tc.extra...)
			var doc clientDocT
			decode(t, in(t, a, args...), &doc)
			conns++
			if doc.Command != tc.test || doc.Local.MTU != 9000 || doc.Local.XDP == "" || doc.Server.Progress != "inline" || doc.Local.Progress != "inline" {
				t.Errorf("header: %+v", doc)
			}
			if strings.HasSuffix(tc.test, "-lat") {
				if len(doc.Latency) != 1 || len(doc.Bandwidth) != 0 {
					t.Fatalf("want one latency line: %+v", doc)
				}
				checkLatency(t, doc.Latency[0], tc.size, tc.iters)
			} else {
				if len(doc.Bandwidth) != 1 || len(doc.Latency) != 0 {
					t.Fatalf("want one bandwidth line: %+v", doc)
				}
				checkBandwidth(t, doc.Bandwidth[0], tc.size, int64(tc.iters))
			}
		})
	}

	t.Run("all-sizes", func(t *testing.T) {
		var doc clientDocT
		decode(t, in(t, a, "write-lat", "-i", a.Ifname, "-a", "--max-size", "1K", "-n", "50", "--json", peer), &doc)
		conns++
		want := []int{2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}
		if !slices.Equal(doc.Params.Sizes, want) || len(doc.Latency) != len(want) {
			t.Fatalf("sizes %v, %d lines; want %v", doc.Params.Sizes, len(doc.Latency), want)
		}
		for i, l := range doc.Latency {
			checkLatency(t, l, want[i], 50)
		}
	})

	t.Run("duration-qps", func(t *testing.T) {
		var doc clientDocT
		decode(t, in(t, a, "send-lat", "-i", a.Ifname, "-D", "2", "-q", "2", "--json", peer), &doc)
		conns += 2
		if doc.Params.QPs != 2 || len(doc.Latency) != 1 {
			t.Fatalf("want 2 QPs and one latency line: %+v", doc)
		}
		l := doc.Latency[0]
		checkLatency(t, l, 64, l.Iterations)
		checkIntervals(t, doc.Intervals, 2, int64(l.Iterations))

		text := in(t, a, "write-bw", "-i", a.Ifname, "-D", "2", peer)
		conns++
		lines := 0
		for _, line := range strings.Split(text.stdout, "\n") {
			if strings.Contains(line, " sec ") && strings.Contains(line, "Gbit/s") {
				lines++
			}
		}
		if text.code != 0 || lines < 1 || !strings.Contains(text.stdout, "BW[Gbit/s]") {
			t.Errorf("want per-second lines and a result: %v", text)
		}

		var bw clientDocT
		decode(t, in(t, a, "read-bw", "-i", a.Ifname, "-q", "2", "-n", "300", "--json", peer), &bw)
		conns += 2
		if bw.Params.QPs != 2 || len(bw.Bandwidth) != 1 {
			t.Fatalf("want 2 QPs and one bandwidth line: %+v", bw)
		}
		checkBandwidth(t, bw.Bandwidth[0], 65536, 300)
	})

	t.Run("doctor", func(t *testing.T) {
		for _, h := range []*testbed.Host{a, b} {
			var doc struct {
				Checks   []check `json:"checks"`
				Failures int     `json:"failures"`
			}
			decode(t, in(t, h, "doctor", "-i", h.Ifname, "--json"), &doc)
			got := map[string]check{}
			for _, c := range doc.Checks {
				got[c.Name] = c
				if c.Verdict == verdictFail {
					t.Errorf("%s: %+v", h.Ifname, c)
				}
				if c.Verdict != verdictOK && c.Verdict != verdictWarn {
					t.Errorf("%s: unknown verdict %+v", h.Ifname, c)
				}
			}
			for _, name := range []string{"privileges", "kernel", "interface", "driver", "xdp", "zero-copy", "queues", "ntuple", "mtu", "memlock", "hugepages", "irq-affinity", "busy-poll", "cpus", "cpufreq", "xdp-program", "udp-port"} {
				if _, ok := got[name]; !ok {
					t.Errorf("%s: no %q check", h.Ifname, name)
				}
			}
			if d := got["driver"].Detail; !strings.HasPrefix(d, "veth") {
				t.Errorf("%s: driver %q, want veth", h.Ifname, d)
			}
			if c := got["irq-affinity"]; c.Verdict != verdictOK || !strings.Contains(c.Detail, "virtual interface") {
				t.Errorf("%s: veth has no IRQs to pin: %+v", h.Ifname, c)
			}
			if c := got["busy-poll"]; c.Verdict != verdictOK || !strings.Contains(c.Detail, "NAPI id 0") {
				t.Errorf("%s: busy polling does not apply to veth: %+v", h.Ifname, c)
			}
			if d := got["mtu"].Detail; !strings.Contains(d, "MTU 9000") {
				t.Errorf("%s: mtu check %q", h.Ifname, d)
			}
			x := got["xdp-program"]
			if h == b && (x.Verdict != verdictWarn || !strings.Contains(x.Detail, "ndkpeer serve (pid")) {
				t.Errorf("host B runs the server: xdp-program check %+v", x)
			}
			if h == a && x.Verdict != verdictOK {
				t.Errorf("host A is free: xdp-program check %+v", x)
			}
		}
		wantExit(t, in(t, a, "doctor", "-i", "nosuch0"), exitNoInterface)
		wantExit(t, in(t, a, "doctor", "-i", a.Ifname, "--cpus", "0-x"), exitUsage)
		wantExit(t, in(t, a, "doctor", "-i", a.Ifname, "--busy-poll", "2s"), exitUsage)
		var told struct {
			Checks []check `json:"checks"`
		}
		decode(t, in(t, a, "doctor", "-i", a.Ifname, "--cpus", "0", "--busy-poll", "50us", "--queue", "0", "--json"), &told)
		for _, c := range told.Checks {
			if c.Name == "cpus" && !strings.Contains(c.Detail, "engine on CPU 0 (--cpus)") {
				t.Errorf("doctor --cpus 0: %+v", c)
			}
			if c.Verdict == verdictFail {
				t.Errorf("doctor --cpus 0 --busy-poll 50us --queue 0: %+v", c)
			}
		}
	})

	t.Run("stats", func(t *testing.T) {
		var st serverStats
		decode(t, in(t, b, "stats", "--json"), &st)
		if st.Interface != b.Ifname || st.Port != 4793 || st.Service != ServiceID || st.PID != srv.cmd.Process.Pid {
			t.Errorf("stats of %+v", st)
		}
		if st.Connections.Accepted != uint64(conns) || st.Connections.Active != 0 || st.Connections.Rejected != 0 {
			t.Errorf("connections %+v, want %d accepted, none active or refused", st.Connections, conns)
		}
		if bt := st.Connections.ByTest; bt["tour"] != 2 || bt["send-lat"] != 3 || bt["read-bw"] != 3 {
			t.Errorf("tests %v", bt)
		}
		ad := st.Adapter
		if ad.QPs.RxBytes == 0 || ad.QPs.TxBytes == 0 || ad.Engine.RxDatagrams == 0 || ad.Steering == nil || ad.Steering.Redirected == 0 {
			t.Errorf("counters: %+v", st)
		}
		text := in(t, b, "stats", "-i", b.Ifname)
		if text.code != 0 || !strings.Contains(text.stdout, fmt.Sprintf("%d accepted", conns)) {
			t.Errorf("text stats: %v", text)
		}
		wantExit(t, in(t, a, "stats"), exitRefused, "no ndkpeer serve")
	})

	t.Run("errors", func(t *testing.T) {
		wantExit(t, in(t, b, "serve", "-i", b.Ifname), exitBusy, "in use by ndkpeer serve (pid")
		wantExit(t, in(t, a, "send-lat", "-i", a.Ifname, "--service", "999", peer), exitRefused, "STATUS_CONNECTION_REFUSED")
		wantExit(t, in(t, a, "write-bw", "-i", a.Ifname, "-s", "32M", peer), exitRejected, "refused the test", "--max-size")
		wantExit(t, in(t, a, "send-lat", "-i", a.Ifname, "--timeout", "1s", "198.18.0.77"), exitUnreachable, "STATUS_HOST_UNREACHABLE")
		wantExit(t, in(t, a, "send-lat", "-i", a.Ifname, "198.19.255.1"), exitUnreachable, "STATUS_NETWORK_UNREACHABLE")
		wantExit(t, in(t, a, "send-lat", "-i", "nosuch0", peer), exitNoInterface, "no interface")
		wantExit(t, in(t, a, "send-lat", "-i", a.Ifname, "-q", "0", peer), exitUsage)
		if xdpAttached(t, a) {
			t.Fatal("a failed client left its XDP program on host A")
		}
		otherXDP(t, a, peer)
	})

	if code := srv.stop(t); code != 0 {
		t.Errorf("ndkpeer serve exited %d after SIGINT:\n%s", code, srv.output())
	}
	out := srv.output()
	for _, want := range []string{"msg=stats ", `msg="ndkpeer serve stopped`, `msg="adapter closed"`, fmt.Sprintf("served=%d ", conns)} {
		if !strings.Contains(out, want) {
			t.Errorf("server output lacks %q:\n%s", want, out)
		}
	}
	if xdpAttached(t, a) || xdpAttached(t, b) {
		t.Error("an XDP program is still attached after the server stopped")
	}
	if pids := runningNdkpeers(bin); len(pids) > 0 {
		t.Errorf("ndkpeer processes still running: %v", pids)
	}
	// Nobody serves on B now: B's kernel gets our UDP port and stays silent.
	wantExit(t, in(t, a, "send-lat", "-i", a.Ifname, peer), exitTimeout, "STATUS_IO_TIMEOUT")
}

// otherXDP attaches an XDP program that is not xdpndk's to host h's interface and checks
// that ndkpeer refuses to take the interface.
func otherXDP(t *testing.T, h *testbed.Host, peer string) {
	// XDP_PASS, with frags support so that veth takes it at MTU 9000.
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "otherpass", Type: ebpf.XDP, License: "GPL",
		Flags: unix.BPF_F_XDP_HAS_FRAGS, Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}})
	if err != nil {
		t.Fatalf("load an XDP program: %v", err)
	}
	defer prog.Close()
	var l link.Link
	if err := h.Do(func() (err error) {
		l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: h.IfIndex})
		return err
	}); err != nil {
		t.Fatalf("attach it: %v", err)
	}
	r := in(t, h, "send-lat", "-i", h.Ifname, peer)
	if err := l.Close(); err != nil {
		t.Errorf("detach it: %v", err)
	}
	wantExit(t, r, exitOtherXDP, "not xdpndk's", "otherpass")
	if xdpAttached(t, h) {
		t.Error("the foreign XDP program is still attached")
	}
}

// memlockMu serializes the moments the test process lowers its own RLIMIT_MEMLOCK for a
// child to inherit.
var memlockMu sync.Mutex

// TestUnprivileged runs ndkpeer without root: with no capabilities (exit 3), and with the
// network capabilities but neither CAP_IPC_LOCK nor memlock room (exit 5). Both fail
// before any interface is looked up, so they run in the test's own namespace, on a name
// that does not exist (had a check let them through, they would end with exit 4).
func TestUnprivileged(t *testing.T) {
	privileged.Require(t)
	bin := ndkpeerBinary(t)
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}

	cmd := exec.Command(bin, "serve", "-i", "xdpndkno0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: nobody}
	wantExit(t, runCmd(t, cmd, []string{"serve (as nobody)"}), exitPrivilege, "not root", "CAP_NET_ADMIN", "setcap")

	cmd = exec.Command(bin, "send-lat", "-i", "xdpndkno0", "198.18.0.2")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: nobody,
		AmbientCaps: []uintptr{unix.CAP_NET_ADMIN, unix.CAP_NET_RAW, unix.CAP_BPF}}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	memlockMu.Lock()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &old); err != nil {
		memlockMu.Unlock()
		t.Fatal(err)
	}
	low := unix.Rlimit{Cur: 1 << 20, Max: old.Max}
	err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &low)
	if err == nil {
		err = cmd.Start() // the child inherits the low limit
		if rerr := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &old); rerr != nil {
			t.Errorf("restore RLIMIT_MEMLOCK: %v", rerr)
		}
	}
	memlockMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	werr := cmd.Wait()
	r := result{args: []string{"send-lat (nobody, network capabilities, 1 MiB memlock)"}, stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		r.code = ee.ExitCode()
	} else if werr != nil {
		t.Fatal(werr)
	}
	wantExit(t, r, exitMemlock, "RLIMIT_MEMLOCK is 1.0 MiB", "CAP_IPC_LOCK")
}
