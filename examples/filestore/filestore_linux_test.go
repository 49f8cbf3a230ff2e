//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/privileged"
	"github.com/xdpndk/xdpndk/internal/testbed"
)

// The two-host test builds the filestore binary and runs it as a user would: serve in host
// B of a test bed (two network namespaces joined by veth, 198.18.0.0/24), put and get from
// host A, each checked by its exit code, its output and the bytes it wrote.

// buildBinary builds the command into the test's temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "filestore")
	cmd := exec.Command(gobin, "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// serveProc is a running `filestore serve`.
type serveProc struct {
	cmd  *exec.Cmd
	log  logBuffer
	done chan struct{}
	err  error // cmd.Wait's, once done is closed
}

// startServe starts filestore serve in host h and waits until it listens; cleanup kills it
// if the test did not stop it.
func startServe(t *testing.T, h *testbed.Host, bin string) *serveProc {
	t.Helper()
	s := &serveProc{cmd: h.Command(context.Background(), bin, "serve", "-i", h.Ifname), done: make(chan struct{})}
	pipe, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start filestore serve: %v", err)
	}
	ready := make(chan struct{}, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			fmt.Fprintln(&s.log, sc.Text())
			if strings.Contains(sc.Text(), "msg=listening") {
				select {
				case ready <- struct{}{}:
				default:
				}
			}
		}
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			_ = s.cmd.Process.Kill()
			<-s.done
			t.Errorf("filestore serve still ran at the end of the test: killed")
		}
		if t.Failed() {
			t.Logf("server log:\n%s", s.log.String())
		}
	})
	select {
	case <-ready:
	case <-s.done:
		t.Fatalf("filestore serve ended before listening (%v):\n%s", s.err, s.log.String())
	case <-time.After(15 * time.Second):
		t.Fatalf("filestore serve did not listen within 15 s:\n%s", s.log.String())
	}
	return s
}

// runResult is one client run.
type runResult struct {
	args           []string
	code           int
	stdout, stderr string
	took           time.Duration
}

func (r runResult) String() string {
	return fmt.Sprintf("filestore %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// runIn runs the binary with args in host h, bounded by 60 s.
func runIn(t *testing.T, h *testbed.Host, bin string, args ...string) runResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := h.Command(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := runResult{args: args, stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("filestore %s: %v", strings.Join(args, " "), err)
	}
	return r
}

func TestTwoHosts(t *testing.T) {
	privileged.Require(t)
	bin := buildBinary(t)
	bed := testbed.NewT(t, testbed.Options{MTU: 9000, Queues: 1})
	a, b := bed.A, bed.B
	srv := startServe(t, b, bin)
	server := b.Addr.String()
	dir := t.TempDir()

	type file struct {
		name, path string
		data       []byte
	}
	var files []file
	// 16 MiB of seeded random bytes, and the awkward sizes: empty (stored and fetched
	// like any other file, without a window), one byte, one past a page, one past the
	// chunk ring.
	for _, n := range []int{16 << 20, 0, 1, 4097, readsInFlight*chunkSize + 1} {
		name := fmt.Sprintf("file-%d", n)
		path, data := randomFile(t, dir, name, n, 42)
		files = append(files, file{name, path, data})
	}
	for _, f := range files {
		r := runIn(t, a, bin, "put", "-i", a.Ifname, server, f.path, f.name)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "put "+f.name+": ") {
			t.Fatalf("put: %v", r)
		}
		if len(f.data) == 16<<20 {
			t.Logf("PUT 16 MiB: %s (the process: %v)", strings.TrimSpace(r.stdout), r.took.Round(time.Millisecond))
		}
	}
	for _, f := range files {
		back := f.path + ".back"
		r := runIn(t, a, bin, "get", "-i", a.Ifname, server, f.name, back)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "get "+f.name+": ") {
			t.Fatalf("get: %v", r)
		}
		if len(f.data) == 16<<20 {
			t.Logf("GET 16 MiB: %s (the process: %v)", strings.TrimSpace(r.stdout), r.took.Round(time.Millisecond))
		}
		got, err := os.ReadFile(back)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, f.data) {
			t.Fatalf("%s: %d bytes came back, not the %d put", f.name, len(got), len(f.data))
		}
	}

	missing := filepath.Join(dir, "missing.back")
	r := runIn(t, a, bin, "get", "-i", a.Ifname, server, "no-such-name", missing)
	if r.code != exitFail || !strings.Contains(r.stderr, `the server refused GET "no-such-name": no such file`) {
		t.Fatalf("get of a missing name: %v", r)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("get of a missing name created %s (%v)", missing, err)
	}
	r = runIn(t, a, bin, "get", "-i", a.Ifname, "198.18.0.2:4999", "x", missing)
	if r.code != exitFail || !strings.Contains(r.stderr, "STATUS_CONNECTION_REFUSED") {
		t.Fatalf("get from a port nobody listens on: %v", r)
	}

	start := time.Now()
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-srv.done:
	case <-time.After(5 * time.Second):
		t.Fatalf("filestore serve did not exit within 5 s of SIGTERM:\n%s", srv.log.String())
	}
	if srv.err != nil {
		t.Fatalf("filestore serve exited with %v after SIGTERM:\n%s", srv.err, srv.log.String())
	}
	t.Logf("serve exited 0 %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	log := srv.log.String()
	if !strings.Contains(log, "msg=stopped files=5") {
		t.Errorf("the server's last words are not 'stopped files=5':\n%s", log)
	}
	if n := strings.Count(log, "msg=disconnected"); n != 2*len(files)+1 {
		t.Errorf("the server saw %d clients disconnect, want %d:\n%s", n, 2*len(files)+1, log)
	}
}
