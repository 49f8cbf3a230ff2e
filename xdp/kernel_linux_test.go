package xdp

import (
	"bufio"
	"bytes"
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

	"github.com/vishvananda/netlink"

	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/transport/link"
)

// listenUDP opens a kernel UDP socket inside h's namespace.
func listenUDP(t *testing.T, h *testbed.Host, port int) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := h.Do(func() (err error) {
		c, err = net.ListenUDP("udp4", &net.UDPAddr{IP: h.Addr.AsSlice(), Port: port})
		return err
	})
	if err != nil {
		t.Fatalf("listen udp in %s: %v", h.NS, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readUDP reads one datagram with a deadline.
func readUDP(t *testing.T, c *net.UDPConn) ([]byte, netip.AddrPort) {
	t.Helper()
	buf := make([]byte, 65536)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, from, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("read udp: %v", err)
	}
	return buf[:n], netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
}

// receiveOne polls l for one datagram, bounded in time, and returns a copy of it.
func receiveOne(t *testing.T, l *Link) ([]byte, netip.AddrPort) {
	t.Helper()
	var pkts [1]link.Packet
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		n, err := l.Receive(pkts[:])
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			var data []byte
			for j := range int(pkts[0].NSegs) {
				data = append(data, pkts[0].Segs[j]...)
			}
			from := pkts[0].Remote
			l.Release(pkts[:])
			return data, from
		}
		if err := l.Wait(10 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("no datagram within 5 s")
	return nil, netip.AddrPort{}
}

// TestKernelPathUntouched checks that with our program attached on A the kernel still does
// everything else there: ARP and ICMP (ping), and a kernel UDP socket on another port; and
// that a datagram the kernel of B sends to our port reaches our link on A.
func TestKernelPathUntouched(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	a := openOn(t, bed.A, Config{RingSize: 256, Frames: 512})

	out, err := bed.B.Command(context.Background(), "ping", "-c", "2", "-i", "0.2", "-W", "2", bed.A.Addr.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("ping from B to A with our program attached: %v\n%s", err, out)
	}

	srv := listenUDP(t, bed.A, 5001)
	cli := listenUDP(t, bed.B, 0)
	if _, err := cli.WriteToUDPAddrPort([]byte("kernel path"), netip.AddrPortFrom(bed.A.Addr, 5001)); err != nil {
		t.Fatal(err)
	}
	if got, _ := readUDP(t, srv); string(got) != "kernel path" {
		t.Fatalf("kernel socket on A got %q", got)
	}

	// The kernel's own UDP datagram to our port goes to our link, not to the kernel.
	msg := []byte("to the af_xdp socket")
	if _, err := cli.WriteToUDPAddrPort(msg, netip.AddrPortFrom(bed.A.Addr, testPort)); err != nil {
		t.Fatal(err)
	}
	got, from := receiveOne(t, a.Links()[0])
	if !bytes.Equal(got, msg) {
		t.Fatalf("link got %q, want %q", got, msg)
	}
	if want := netip.AddrPortFrom(bed.B.Addr, uint16(cli.LocalAddr().(*net.UDPAddr).Port)); from != want {
		t.Fatalf("datagram from %v, want %v", from, want)
	}
	c, err := a.Program().Counters()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("program counters: %+v", c)
	if c.Redirected != 1 || c.Passed == 0 || c.Malformed != 0 {
		t.Fatalf("counters %+v: want 1 redirected, some passed, none malformed", c)
	}
}

// TestKernelReceivesOurDatagrams sends from our link on A to a kernel UDP socket on B, where
// no program runs: the kernel accepting them proves the framing and checksums are real, and
// tshark capturing them on B checks the IPv4 and UDP checksums independently. It does so
// in both UDP checksum modes over IPv4: ChecksumSoftware (tshark: "good") and the default,
// ChecksumAuto, which sends none (tshark: "not present", and the kernel takes them all the
// same).
func TestKernelReceivesOurDatagrams(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	for _, tc := range []struct {
		mode   UDPChecksum
		status string // udp.checksum.status: 1 "Good", 3 "Not present" in tshark's value strings
	}{
		{ChecksumSoftware, "1"},
		{ChecksumAuto, "3"},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			a := openOn(t, bed.A, Config{RingSize: 256, Frames: 512, UDPChecksum: tc.mode})
			l := a.Links()[0]
			mustResolve(t, l, bed.B.Addr)
			srv := listenUDP(t, bed.B, testPort)

			sizes := []int{1, 2, 17, 100, 1024, 1471, 1472}
			tshark, lines := startTshark(t, bed.B, len(sizes))

			dst := netip.AddrPortFrom(bed.B.Addr, testPort)
			for i, size := range sizes {
				b := make([]byte, size)
				for j := range b {
					b[j] = byte(i*13 + j)
				}
				var p [1]link.Packet
				p[0] = link.Packet{Remote: dst, LocalPort: uint16(40000 + i)}
				p[0].SetData(b)
				if n, err := l.Send(p[:]); n != 1 || err != nil {
					t.Fatalf("send %d bytes: n=%d err=%v", size, n, err)
				}
				got, from := readUDP(t, srv)
				if !bytes.Equal(got, b) {
					t.Fatalf("kernel got %d bytes, want the %d sent", len(got), size)
				}
				if want := netip.AddrPortFrom(bed.A.Addr, uint16(40000+i)); from != want {
					t.Fatalf("kernel saw the datagram from %v, want %v (per-flow source port)", from, want)
				}
			}
			if err := tshark.Wait(); err != nil {
				t.Fatalf("tshark: %v\n%s", err, tshark.Stderr)
			}
			got := strings.Split(strings.TrimSpace(lines.String()), "\n")
			if len(got) != len(sizes) {
				t.Fatalf("tshark saw %d datagrams, want %d:\n%s", len(got), len(sizes), lines)
			}
			for i, line := range got {
				f := strings.Split(line, "\t")
				// ip.checksum.status: 1 is "Good".
				if len(f) != 3 || f[0] != "1" || f[1] != tc.status || f[2] != fmt.Sprint(sizes[i]+8) {
					t.Errorf("tshark line %d %q: want ip checksum status 1 (good), udp checksum status %s and udp length %d", i, line, tc.status, sizes[i]+8)
				}
			}
		})
	}
}

// tsharkRun is a capture in progress.
type tsharkRun struct {
	cmd    *exec.Cmd
	Stderr *bytes.Buffer
}

// Wait waits for the capture to end.
func (r *tsharkRun) Wait() error { return r.cmd.Wait() }

// startTshark starts capturing count datagrams to our port on h's interface, bounded to 20 s
// of capture (tshark's own autostop) and 60 s in all, start-up included, so that a capture
// that misses a datagram ends by the autostop and says how many it saw rather than being
// killed (on a loaded machine the former 20 s in all killed one), with checksum validation
// on, and returns once tshark reports that its capture has started.
func startTshark(t *testing.T, h *testbed.Host, count int) (*tsharkRun, *bytes.Buffer) {
	t.Helper()
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Fatalf("tshark not installed (Debian package tshark; .ci/run installs it): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	cmd := h.Command(ctx, "tshark", "-i", h.Ifname, "-n", "-l", "-p",
		"-f", fmt.Sprintf("udp dst port %d", testPort), "-c", fmt.Sprint(count), "-a", "duration:20",
		"-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE",
		"-T", "fields", "-e", "ip.checksum.status", "-e", "udp.checksum.status", "-e", "udp.length")
	var out bytes.Buffer
	cmd.Stdout = &out
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start tshark: %v", err)
	}
	run := &tsharkRun{cmd: cmd, Stderr: &bytes.Buffer{}}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		signalled := false
		for sc.Scan() {
			run.Stderr.WriteString(sc.Text() + "\n")
			// "Capturing on" comes before dumpcap reports its capture open; "Capture
			// started" (then the file's name) once it has. Waiting for the first, on a
			// loaded machine, tshark saw 1 of 4 datagrams that the kernel socket got.
			if !signalled && (strings.Contains(sc.Text(), "Capture started") || strings.Contains(sc.Text(), "File: ")) {
				close(ready)
				signalled = true
			}
		}
		if !signalled {
			close(ready)
		}
	}()
	select {
	case <-ready:
	case <-time.After(15 * time.Second):
		t.Fatal("tshark did not start capturing within 15 s")
	}
	// The kernel has the socket filter in place once tshark says it is capturing; give
	// the packet socket a moment to be bound before the first datagram.
	time.Sleep(200 * time.Millisecond)
	return run, &out
}

// xdpAttached reports whether h's veth end has an XDP program attached.
func xdpAttached(t *testing.T, h *testbed.Host) bool {
	t.Helper()
	var attached bool
	err := h.Do(func() error {
		l, err := netlink.LinkByName(h.Ifname)
		if err != nil {
			return err
		}
		x := l.Attrs().Xdp
		attached = x != nil && (x.Attached || x.ProgId != 0)
		return nil
	})
	if err != nil {
		t.Fatalf("inspect %s: %v", h.Ifname, err)
	}
	return attached
}

// TestCloseDetaches checks that Close leaves no program on the interface, and that a second
// Close is harmless.
func TestCloseDetaches(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	cfg := Config{Interface: bed.A.Ifname, Port: testPort, RingSize: 256, Frames: 512, Logger: quietLogger}
	var d *Device
	if err := bed.A.Do(func() (err error) { d, err = Open(cfg); return err }); err != nil {
		t.Fatal(err)
	}
	if !xdpAttached(t, bed.A) {
		d.Close()
		t.Fatal("no program attached after Open")
	}
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if xdpAttached(t, bed.A) {
		t.Fatal("program still attached after Close")
	}
	var pkts [1]link.Packet
	if _, err := d.Links()[0].Receive(pkts[:]); err != link.ErrClosed {
		t.Fatalf("Receive after Close: %v, want ErrClosed", err)
	}
	// The queue can be taken again at once (the bind retries past the kernel's EBUSY).
	openOn(t, bed.A, cfg)
}

// envHelper makes the test binary act as a helper process that opens a device and waits to
// be killed.
const envHelper = "XDPNDK_TEST_HELPER_IFACE"

// TestHelperProcess is not a test: TestKilledProcessDetaches runs the test binary with
// envHelper set, inside a test namespace, and this function then opens a device there and
// sleeps until it is killed (at most 30 s).
func TestHelperProcess(t *testing.T) {
	iface := os.Getenv(envHelper)
	if iface == "" {
		return // the normal test run: nothing to do here
	}
	d, err := Open(Config{Interface: iface, Port: testPort, RingSize: 256, Frames: 512, Logger: quietLogger})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("ready", d.Mode())
	time.Sleep(30 * time.Second)
	os.Exit(3)
}

// TestKilledProcessDetaches checks that a process killed with SIGKILL while it holds our
// program attached leaves nothing behind: the bpf_link goes with its last file descriptor.
func TestKilledProcessDetaches(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	cmd := bed.A.Command(ctx, os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envHelper+"="+bed.A.Ifname)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready") || strings.HasPrefix(sc.Text(), "error") {
				line <- sc.Text()
				return
			}
		}
		line <- "helper exited: " + fmt.Sprint(sc.Err())
	}()
	select {
	case l := <-line:
		if !strings.HasPrefix(l, "ready") {
			t.Fatalf("helper: %s", l)
		}
		t.Logf("helper: %s", l)
	case <-time.After(20 * time.Second):
		t.Fatal("helper did not open its device within 20 s")
	}
	if !xdpAttached(t, bed.A) {
		t.Fatal("helper's program is not attached")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for xdpAttached(t, bed.A) {
		if time.Now().After(deadline) {
			t.Fatal("program still attached 5 s after its process was killed")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
