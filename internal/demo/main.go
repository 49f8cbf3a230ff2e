//go:build linux

// Command demo is `make demo`: ndkpeer between two hosts. It builds ndkpeer, creates two
// network-namespace hosts joined by a veth pair (internal/testbed, MTU 9000, one queue per
// end, neighbours resolved by ARP as on a LAN), checks host B with `ndkpeer doctor`, starts
// `ndkpeer serve` on B, and from host A runs the verbs tour, a Send/Receive latency test
// and a Write bandwidth test with a line per second, then asks the server for its
// counters. Everything it prints is ndkpeer's own output. The server is stopped with
// SIGINT and the bed removed when it ends, also on Ctrl-C or a failure. It needs root and
// takes about 20 seconds.
//
//	go run ./internal/demo        (make demo)
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/xdpndk/xdpndk/internal/testbed"
)

func main() {
	if err := run(); err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(os.Stderr, "demo: interrupted; everything it made is removed")
			os.Exit(130)
		}
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func heading(format string, args ...any) { fmt.Printf("\n== "+format+"\n", args...) }

func run() (err error) {
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespaces, XDP programs, AF_XDP sockets)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()

	dir, err := os.MkdirTemp("", "ndkpeer-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "ndkpeer")
	heading("Building ndkpeer (CGO_ENABLED=0 go build -o %s ./cmd/ndkpeer)", bin)
	if err := build(ctx, bin); err != nil {
		return err
	}

	heading("Two hosts: network namespaces joined by a veth pair, MTU 9000")
	bed, err := testbed.New(testbed.Options{Name: "ndkpeerdemo", MTU: 9000, Queues: 2})
	if err != nil {
		return fmt.Errorf("create test bed: %w", err)
	}
	defer func() {
		if cerr := bed.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("remove test bed: %w", cerr))
			return
		}
		fmt.Printf("\ntest bed removed (namespaces, veth pair); total %v\n", time.Since(start).Round(100*time.Millisecond))
	}()
	for _, h := range []struct {
		name string
		h    *testbed.Host
	}{{"A", bed.A}, {"B", bed.B}} {
		fmt.Printf("host %s: netns %s, interface %s, %s\n", h.name, h.h.NS, h.h.Ifname, h.h.Addr)
	}
	a, b := bed.A, bed.B
	peer := b.Addr.String()

	if err := step(ctx, b, "B", bin, "doctor", "-i", b.Ifname); err != nil {
		return err
	}

	heading("Host B: ndkpeer serve -i %s   (its output is marked [B])", b.Ifname)
	srv, err := startServer(ctx, b, bin)
	if err != nil {
		return err
	}
	defer func() {
		heading("Stopping the server (SIGINT): it disconnects its clients and detaches its XDP program")
		if serr := srv.stop(); serr != nil {
			err = errors.Join(err, serr)
		}
	}()

	for _, args := range [][]string{
		{"tour", "-i", a.Ifname, peer},
		{"send-lat", "-i", a.Ifname, "-n", "20000", peer},
		{"write-lat", "-i", a.Ifname, "-a", "--max-size", "64K", peer},
		{"write-bw", "-i", a.Ifname, "-D", "3", peer},
	} {
		if err := step(ctx, a, "A", bin, args...); err != nil {
			return err
		}
		srv.flush()
	}
	return step(ctx, b, "B", bin, "stats", "-i", b.Ifname)
}

// build compiles ndkpeer into bin, statically (no cgo), from the module's root.
func build(ctx context.Context, bin string) error {
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	root, err := exec.CommandContext(ctx, gobin, "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	cmd := exec.CommandContext(ctx, gobin, "build", "-o", bin, "./cmd/ndkpeer")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(root)))
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build ndkpeer: %w", err)
	}
	return nil
}

// step runs one ndkpeer command on host h, printing its output, and fails if it fails.
func step(ctx context.Context, h *testbed.Host, name, bin string, args ...string) error {
	heading("Host %s: ndkpeer %s", name, strings.Join(args, " "))
	cctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	cmd := h.Command(cctx, bin, args...)
	// Interrupted or out of time, ndkpeer gets SIGINT (it disconnects and closes its
	// adapter), and SIGKILL only if it has not ended 5 s later.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("ndkpeer %s on host %s: %w", args[0], name, err)
	}
	return nil
}

// server is the running `ndkpeer serve`.
type server struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan error
}

// startServer starts ndkpeer serve on host b and waits until it listens.
func startServer(ctx context.Context, b *testbed.Host, bin string) (*server, error) {
	// Not bound to ctx: on Ctrl-C the server gets SIGINT from stop, not SIGKILL.
	cmd := b.Command(context.Background(), bin, "serve", "-i", b.Ifname)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start ndkpeer serve: %w", err)
	}
	s := &server{cmd: cmd, lines: make(chan string, 256), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
		s.done <- cmd.Wait()
	}()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				return nil, fmt.Errorf("ndkpeer serve ended before listening: %v", <-s.done)
			}
			fmt.Println("[B]", l)
			if strings.Contains(l, "msg=limits") {
				return s, nil
			}
		case <-deadline:
			_ = s.stop()
			return nil, errors.New("ndkpeer serve did not start listening within 10 s")
		case <-ctx.Done():
			_ = s.stop()
			return nil, ctx.Err()
		}
	}
}

// flush prints what the server said meanwhile.
func (s *server) flush() {
	time.Sleep(50 * time.Millisecond) // its last lines (a closed connection) follow the client's end
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				return
			}
			fmt.Println("[B]", l)
		default:
			return
		}
	}
}

// stop sends SIGINT, prints the server's last words and waits for it to exit (SIGKILL
// after 10 s).
func (s *server) stop() error {
	_ = s.cmd.Process.Signal(os.Interrupt)
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				s.lines = nil
				continue
			}
			fmt.Println("[B]", l)
		case err := <-s.done:
			if err != nil {
				return fmt.Errorf("ndkpeer serve: %w", err)
			}
			return nil
		case <-timer.C:
			_ = s.cmd.Process.Kill()
			return errors.New("ndkpeer serve did not stop within 10 s of SIGINT: killed")
		}
	}
}
