//go:build linux && !(amd64 || arm || arm64 || loong64 || mips || mips64 || mips64le || mipsle || ppc64 || ppc64le || riscv64 || s390x)

package linkbench

import (
	"fmt"
	"runtime"

	"github.com/xdpndk/xdpndk/bpf"
	"github.com/xdpndk/xdpndk/internal/testbed"
)

// errAsavieUnavailable says why the asavie/xdp baseline is missing from this build: the
// library calls setsockopt, getsockopt and sendto by their system call numbers, which
// this architecture does not have (it reaches them through socketcall), so it does not
// compile here. AllSystems leaves the system out and Options naming it are refused.
var errAsavieUnavailable = fmt.Errorf("system %q is not available on %s/%s: github.com/asavie/xdp does not build there",
	SystemAsavie, runtime.GOOS, runtime.GOARCH)

// openAsavie reports the baseline unavailable.
func openAsavie(*testbed.Bed, int, bpf.Mode) (asavieRun, error) { return nil, errAsavieUnavailable }
