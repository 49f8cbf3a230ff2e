//go:build linux

package tools

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"time"
)

// ToolVersions runs each tool's version option (in this process's namespace: nothing is
// sent) and fi_info -l, and returns what they report. It returns what it found with the
// errors of the tools that failed.
func ToolVersions(ctx context.Context) (Versions, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var v Versions
	var errs []error
	get := func(tool string, cmd *exec.Cmd) []byte {
		out, err := cmd.CombinedOutput()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w: %s", cmd, err, out))
			return nil
		}
		return out
	}
	parse := func(dst *string, tool string, out []byte) {
		if out == nil {
			return
		}
		s, err := ParseVersion(tool, out)
		if err != nil {
			errs = append(errs, err)
		}
		*dst = s
	}
	parse(&v.Qperf, "qperf", get("qperf", exec.CommandContext(ctx, "qperf", "--version")))
	parse(&v.Iperf3, "iperf3", get("iperf3", exec.CommandContext(ctx, "iperf3", "--version")))
	parse(&v.Sockperf, "sockperf", get("sockperf", exec.CommandContext(ctx, "sockperf", "--version")))
	parse(&v.Libfabric, "libfabric", get("fi_info", exec.CommandContext(ctx, "fi_info", "--version")))
	if out := get("fi_info", exec.CommandContext(ctx, "fi_info", "-l")); out != nil {
		p, err := ParseFabricProviders(out)
		if err != nil {
			errs = append(errs, err)
		}
		v.FabricProviders = p
	}
	return v, errors.Join(errs...)
}
