// Package privileged gates tests that need root: network namespaces, XDP programs, AF_XDP
// sockets, BPF_PROG_TEST_RUN, mlock of large areas.
//
// On a developer machine without the privileges such a test is skipped with a message that
// says so. When XDPNDK_REQUIRE_PRIVILEGED=1 (CI sets it) the same test fails instead, so a
// skip can never hide a regression.
package privileged

import (
	"os"
	"os/exec"
	"testing"
)

// EnvRequire is the environment variable that turns a missing privilege into a failure.
const EnvRequire = "XDPNDK_REQUIRE_PRIVILEGED"

// Required reports whether privileged tests must run (EnvRequire is "1").
func Required() bool { return os.Getenv(EnvRequire) == "1" }

// Available reports whether this process runs with the privileges the privileged tests need
// (effective user id 0; CAP_NET_ADMIN+CAP_BPF+CAP_IPC_LOCK alone are not enough to create
// network namespaces with iproute2).
func Available() bool { return os.Geteuid() == 0 }

// Require skips t when the process is not privileged, or fails it when EnvRequire is "1".
// Call it first in every privileged test.
func Require(t testing.TB) {
	t.Helper()
	if Available() {
		return
	}
	if Required() {
		t.Fatalf("privileged test cannot run: not root, and %s=1 demands it", EnvRequire)
	}
	t.Skipf("privileged test skipped: not root (set %s=1 to make this a failure)", EnvRequire)
}

// Tool returns the path of the command name, which the Debian package pkg provides (make
// test's prerequisite step installs it). Without it t is skipped, or fails when EnvRequire
// is "1": a missing tool must not hide a test in CI.
func Tool(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if Required() {
		t.Fatalf("%s not installed (Debian package %s; make test installs it) and %s=1: %v", name, pkg, EnvRequire, err)
	}
	t.Skipf("%s not installed (Debian package %s): %v", name, pkg, err)
	return ""
}
