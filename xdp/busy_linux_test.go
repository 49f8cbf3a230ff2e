package xdp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	ebpflink "github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"

	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/xdp/xsk"
)

// busyConfig is the small device the busy tests open.
var busyConfig = Config{RingSize: 256, Frames: 512}

// openFails opens a device on h's interface that must fail, and returns the error.
func openFails(t *testing.T, h *testbed.Host, cfg Config) error {
	t.Helper()
	cfg.Interface, cfg.Port, cfg.Logger = h.Ifname, testPort, quietLogger
	var openErr error
	start := time.Now()
	if err := h.Do(func() error {
		d, err := Open(cfg)
		if err == nil {
			return d.Close()
		}
		openErr = err
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if openErr == nil {
		t.Fatalf("a second device opened on %s/%s", h.NS, h.Ifname)
	}
	t.Logf("Open failed after %v: %v", time.Since(start).Round(time.Millisecond), openErr)
	return openErr
}

// checkQueueBusy checks Open's error for queue 0 of h's interface held by process pid: ErrBusy
// and EBUSY match; the message names the interface, the queue and the pid, and nothing of
// zero-copy; the socket and the steering program's bpf_link are found held by pid.
func checkQueueBusy(t *testing.T, err error, h *testbed.Host, pid int) {
	t.Helper()
	if !errors.Is(err, ErrBusy) || !errors.Is(err, syscall.EBUSY) || !errors.Is(err, xsk.ErrBusy) {
		t.Errorf("error %v: want ErrBusy, xsk.ErrBusy and EBUSY", err)
	}
	msg := err.Error()
	for _, s := range []string{fmt.Sprintf("queue 0 of %s ", h.Ifname), fmt.Sprintf("pid %d (", pid), "already bound by another AF_XDP socket"} {
		if !strings.Contains(msg, s) {
			t.Errorf("message lacks %q: %s", s, msg)
		}
	}
	if lower := strings.ToLower(msg); strings.Contains(lower, "zerocopy") || strings.Contains(lower, "zero-copy") {
		t.Errorf("message mentions zero-copy, which is not the problem: %s", msg)
	}
	var be *BusyError
	if !errors.As(err, &be) {
		t.Fatalf("error %T is no *BusyError", err)
	}
	// Without the kernel's AF_XDP socket diagnostics the sockets are the namespace's
	// candidates: in this bed, the holder's only.
	held := func(ps []Process) bool { return len(ps) == 1 && ps[0].PID == pid }
	if be.Interface != h.Ifname || be.Queue != 0 || len(be.Sockets) != 1 || !held(be.Sockets[0].Holders) {
		t.Errorf("busy error %+v: want one socket on queue 0 of %s held by pid %d", be, h.Ifname, pid)
	}
	if len(be.Programs) != 1 || be.Programs[0].Name != "steer" || be.Programs[0].LinkID == 0 ||
		!held(be.Programs[0].LinkHolders) {
		t.Errorf("programs %+v: want the steering program, its bpf_link held by pid %d", be.Programs, pid)
	}
}

// A second device on an interface this process already serves fails with ErrBusy naming
// this process as the holder (not with the zero-copy attempt's error), and the first device
// keeps its program.
func TestOpenBusySameProcess(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	first := openOn(t, bed.A, busyConfig)
	err := openFails(t, bed.A, busyConfig)
	checkQueueBusy(t, err, bed.A, os.Getpid())

	// The failed Open left the first device's program attached.
	var progs []xdpProg
	if err := bed.A.Do(func() (err error) {
		progs, err = attachedPrograms(first.ifindex, time.Now().Add(time.Second))
		return err
	}); err != nil || len(progs) != 1 {
		t.Fatalf("after the failed Open: programs %v, %v; want the first device's", progs, err)
	}
}

// envBusyHolder names the interface TestBusyHolderProcess opens a device on.
const envBusyHolder = "XDPNDK_XDP_BUSY_HOLDER"

// TestBusyHolderProcess is not a test: TestOpenBusyOtherProcess runs the test binary with
// envBusyHolder set, inside a host's namespace, and this function then opens a device there,
// prints "ready PID" and holds it until its stdin closes (at most 60 s).
func TestBusyHolderProcess(t *testing.T) {
	iface := os.Getenv(envBusyHolder)
	if iface == "" {
		return // the normal test run: nothing to do here
	}
	cfg := busyConfig
	cfg.Interface, cfg.Port, cfg.Logger = iface, testPort, quietLogger
	d, err := Open(cfg)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("ready", os.Getpid())
	closed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(60 * time.Second):
	}
	_ = d.Close()
	os.Exit(0)
}

// startHolder runs TestBusyHolderProcess in h and returns its pid once its device is open.
// It is stopped (and killed if need be) when the test ends.
func startHolder(t *testing.T, h *testbed.Host) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	cmd := h.Command(ctx, os.Args[0], "-test.run=^TestBusyHolderProcess$", "-test.count=1", "-test.timeout=80s")
	cmd.Env = append(os.Environ(), envBusyHolder+"="+h.Ifname)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close() // the holder closes its device and exits
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("holder process %d did not exit: killed", cmd.Process.Pid)
			_ = cmd.Process.Kill()
			<-done
		}
		cancel()
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready") || strings.HasPrefix(sc.Text(), "error") {
				lines <- sc.Text()
				break
			}
		}
		for sc.Scan() { // keep draining so the child never blocks on its stdout
		}
		select {
		case lines <- "holder exited: " + fmt.Sprint(sc.Err()):
		default:
		}
	}()
	select {
	case l := <-lines:
		var pid int
		if _, err := fmt.Sscanf(l, "ready %d", &pid); err != nil {
			t.Fatalf("holder process: %s", l)
		}
		return pid
	case <-time.After(20 * time.Second):
		t.Fatal("holder process not ready within 20 s")
	}
	return 0
}

// A device on an interface another process serves fails with ErrBusy naming that process.
func TestOpenBusyOtherProcess(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	pid := startHolder(t, bed.A)
	if pid == os.Getpid() || pid <= 0 {
		t.Fatalf("holder pid %d", pid)
	}
	err := openFails(t, bed.A, busyConfig)
	checkQueueBusy(t, err, bed.A, pid)
}

// foreignProgram loads an XDP program that passes everything, named foreign_pass; it is
// closed when the test ends.
func foreignProgram(t *testing.T) (*ebpf.Program, uint32) {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "foreign_pass", Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}, // XDP_PASS
	})
	if err != nil {
		t.Fatalf("load a foreign XDP program: %v", err)
	}
	t.Cleanup(func() { _ = prog.Close() })
	info, err := prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, ok := info.ID()
	if !ok {
		t.Fatal("the kernel gives no program id")
	}
	return prog, uint32(id)
}

// checkHookBusy checks Open's error when the foreign program id is on h's interface.
func checkHookBusy(t *testing.T, err error, h *testbed.Host, id uint32, mode string) *BusyError {
	t.Helper()
	if !errors.Is(err, ErrBusy) || (!errors.Is(err, syscall.EBUSY) && !errors.Is(err, syscall.EEXIST)) {
		t.Errorf("error %v: want ErrBusy, and EBUSY or EEXIST", err)
	}
	msg := err.Error()
	for _, s := range []string{h.Ifname + " already has another XDP program attached", fmt.Sprintf("%d \"foreign_pass\" (%s)", id, mode), fmt.Sprintf("pid %d (", os.Getpid())} {
		if !strings.Contains(msg, s) {
			t.Errorf("message lacks %q: %s", s, msg)
		}
	}
	var be *BusyError
	if !errors.As(err, &be) || be.Queue != -1 || len(be.Programs) != 1 || be.Programs[0].ID != id {
		t.Fatalf("error %+v: want a *BusyError for the hook naming program %d", err, id)
	}
	return be
}

// Another program attached to the interface makes Open fail with ErrBusy naming it, and the
// process holding its bpf_link (or, attached through netlink, the program).
func TestOpenBusyForeignProgram(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	prog, id := foreignProgram(t)
	var ifindex int
	if err := bed.A.Do(func() error {
		ifi, err := net.InterfaceByName(bed.A.Ifname)
		if err != nil {
			return err
		}
		ifindex = ifi.Index
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	t.Run("bpf_link", func(t *testing.T) {
		var l ebpflink.Link
		if err := bed.A.Do(func() (err error) {
			l, err = ebpflink.AttachXDP(ebpflink.XDPOptions{Program: prog, Interface: ifindex, Flags: ebpflink.XDPDriverMode})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		err := openFails(t, bed.A, busyConfig)
		be := checkHookBusy(t, err, bed.A, id, "native")
		if p := be.Programs[0]; p.LinkID == 0 || len(p.LinkHolders) != 1 || p.LinkHolders[0].PID != os.Getpid() {
			t.Errorf("program %+v: want its bpf_link held by this process", p)
		}
	})

	t.Run("netlink", func(t *testing.T) {
		detach := func() error {
			lnk, err := netlink.LinkByIndex(ifindex)
			if err != nil {
				return err
			}
			return netlink.LinkSetXdpFdWithFlags(lnk, -1, nl.XDP_FLAGS_SKB_MODE)
		}
		if err := bed.A.Do(func() error {
			lnk, err := netlink.LinkByIndex(ifindex)
			if err != nil {
				return err
			}
			return netlink.LinkSetXdpFdWithFlags(lnk, prog.FD(), nl.XDP_FLAGS_SKB_MODE)
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := bed.A.Do(detach); err != nil {
				t.Errorf("detach the foreign program: %v", err)
			}
		})
		err := openFails(t, bed.A, busyConfig)
		be := checkHookBusy(t, err, bed.A, id, "generic")
		if p := be.Programs[0]; p.LinkID != 0 || len(p.ProgHolders) == 0 || p.ProgHolders[0].PID != os.Getpid() {
			t.Errorf("program %+v: want no bpf_link, the program held by this process", p)
		}
	})
}
