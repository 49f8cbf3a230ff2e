//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package bpf

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// testNetns is a network namespace holding one veth pair (A, B), both down and without
// addresses, so nothing is ever sent. It is deleted, with the pair, in t.Cleanup.
type testNetns struct {
	name string
	a, b string // interface names
}

var netnsSeq atomic.Uint32

func newTestNetns(t *testing.T) *testNetns {
	t.Helper()
	seq := netnsSeq.Add(1)
	n := &testNetns{
		name: fmt.Sprintf("xbpf%d-%d", os.Getpid(), seq),
		a:    fmt.Sprintf("xa%d", seq),
		b:    fmt.Sprintf("xb%d", seq),
	}
	runIP(t, "netns", "add", n.name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", n.name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", n.name, err, out)
		}
	})
	runIP(t, "-n", n.name, "link", "add", n.a, "type", "veth", "peer", "name", n.b)
	return n
}

func runIP(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// linkInfo is the part of `ip -j -d link show` the tests read.
type linkInfo struct {
	Ifindex int `json:"ifindex"`
	XDP     *struct {
		Mode int `json:"mode"` // 1 driver, 2 generic (XDP_ATTACHED_*)
		Prog *struct {
			ID int `json:"id"`
		} `json:"prog"`
	} `json:"xdp"`
}

func (n *testNetns) link(t *testing.T, dev string) linkInfo {
	t.Helper()
	out := runIP(t, "-n", n.name, "-j", "-d", "link", "show", "dev", dev)
	var infos []linkInfo
	if err := json.Unmarshal([]byte(out), &infos); err != nil || len(infos) != 1 {
		t.Fatalf("parse ip link output %q: %v", out, err)
	}
	return infos[0]
}

// do runs fn on an OS thread that has entered the namespace, so ifindexes, sockets and
// XDP attachments fn makes belong to it. The thread is never unlocked: it exits with the
// goroutine instead of going back to the scheduler with the wrong namespace.
func (n *testNetns) do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open("/run/netns/" + n.name)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", n.name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}
