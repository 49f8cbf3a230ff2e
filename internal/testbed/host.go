package testbed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// ErrNotSupported is returned on systems other than Linux, which have no network namespaces.
var ErrNotSupported = errors.New("test bed needs Linux network namespaces")

// ErrGoexit is returned by [Host.Do] when fn ended its goroutine with runtime.Goexit instead
// of returning, typically by calling t.Fatal or t.FailNow inside fn (which is wrong: report
// the failure through the returned error and call t.Fatal outside).
var ErrGoexit = errors.New("function exited its goroutine (t.FailNow inside Host.Do?)")

// Host is one side of a [Bed]: a network namespace holding one end of the veth pair. In a
// routed bed each of the router's two interfaces is described by a Host too ([Router]).
//
// Its fields are set by [New] and must not be modified. A Host is safe for concurrent use.
type Host struct {
	// NS is the namespace's name, as listed by `ip netns list` (a file in /run/netns).
	NS string
	// Ifname is the name of the veth end inside NS.
	Ifname string
	// IfIndex is the interface index of the veth end inside NS.
	IfIndex int
	// MAC is the Ethernet address of the veth end (random, locally administered).
	MAC net.HardwareAddr
	// Addr is the IPv4 address of the veth end (198.18.0.1 for host A, .2 for host B with
	// the default prefix).
	Addr netip.Addr
	// Prefix is the subnet of the veth end's link (masked), the one Addr belongs to.
	Prefix netip.Prefix
	// Gateway is the router's address on this host's link in a routed bed (the next hop
	// of the host's route to the other host's subnet); the zero Addr in the plain bed and
	// for the router's own interfaces.
	Gateway netip.Addr
	// GatewayMAC is the Ethernet address of the router's interface on this host's link (the
	// next hop's MAC towards the other host) in a routed bed; nil otherwise.
	GatewayMAC net.HardwareAddr
}

// Do runs fn inside h's network namespace and returns its error.
//
// fn runs on a new goroutine locked to an OS thread that has been switched into the
// namespace with setns(2). The thread is never unlocked: it ends when the goroutine does,
// so no other goroutine is ever scheduled on a thread in the wrong namespace. Sockets
// (including AF_XDP sockets), netlink handles and XDP attachments created inside fn belong
// to h's namespace and stay there after fn returns; they may then be used from any
// goroutine. Goroutines that fn starts run on other threads, in the caller's namespace, not
// in h's. fn may run as long as it likes (a polling loop, for instance); each call costs a
// thread creation, so Do is for setup, not for per-packet work.
//
// A panic in fn is returned as an error carrying the panic value and stack; fn ending with
// runtime.Goexit (t.FailNow) returns ErrGoexit. Do is safe for concurrent use.
func (h *Host) Do(fn func() error) error {
	path := nsPath(h.NS)
	enter := func() error { return enterNetns(path) }
	result := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		runLocked(enter, fn, result)
	}()
	if err := <-result; err != nil {
		return fmt.Errorf("in namespace %s: %w", h.NS, err)
	}
	return nil
}

// runLocked runs enter and then fn on the calling goroutine's OS thread, which it must have
// locked, and sends the outcome to result.
//
// On any thread but the process's main one it never unlocks, so the thread exits with the
// goroutine. The main thread is special: Go cannot end it, it would only park it forever,
// still in the namespace (and /proc/self/ns/net would then name that namespace). So on the
// main thread runLocked keeps that thread occupied, which forces a nested goroutine onto
// another thread, lets the nested goroutine do the work there, and then unlocks the main
// thread, which never left its namespace.
func runLocked(enter, fn func() error, result chan<- error) {
	if onMainThread() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread() // never unlocked: this thread is not the main one
			runLocked(enter, fn, result)
		}()
		<-done
		runtime.UnlockOSThread()
		return
	}
	returned := false
	defer func() {
		if returned {
			return
		}
		if r := recover(); r != nil {
			result <- fmt.Errorf("panic: %v\n%s", r, debug.Stack())
			return
		}
		result <- ErrGoexit
	}()
	if err := enter(); err != nil {
		returned = true
		result <- err
		return
	}
	err := fn()
	returned = true
	result <- err
}

// Command returns a command that runs name with args inside h's namespace, as
// `ip netns exec NS name args...` (which also shows the namespace's own /sys to the
// program). ctx bounds its run time as with exec.CommandContext; the caller starts and
// waits for it. A process still running in the namespace when the bed is closed is killed.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	ip, err := ipPath()
	if err != nil {
		ip = "ip" // exec reports the failed lookup when the command is started
	}
	full := append([]string{"netns", "exec", h.NS, name}, args...)
	return exec.CommandContext(ctx, ip, full...)
}

// Run runs name with args inside h's namespace (Command), bounded to 10 s, and fails t
// with the command's output if it fails.
func (h *Host) Run(t testing.TB, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := h.Command(ctx, name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v in %s: %v\n%s", name, args, h.NS, err, out)
	}
}
