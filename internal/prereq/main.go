// Command prereq checks that the system has what a Makefile target needs, and installs what
// is missing where it can. `make test`, `make demo`, `make generate`, `make bench` and
// `make bench-path` run it first:
//
//	go run ./internal/prereq [-check] TARGET...
//
// TARGET is test (every command a test runs, directly or through the code it calls, and
// cgo for the race detector), demo, generate, bench (what make bench, bench/compare, make
// bench-path and bench/tools need besides root: iproute2's ip and tc, iperf3, qperf,
// sockperf, libfabric-bin's fi_pingpong and fi_info, and go to build ndkpeer) or ci (test, demo and generate, plus make and git, as .ci/run
// uses; CI runs no benchmark, but make test's smoke tests of bench/pathbench and bench/tools
// run iperf3 and the other tools).
// Each target's requirements are commands (looked up on PATH, then in /usr/local/sbin,
// /usr/sbin and /sbin) or C header files, each mapped to the Debian packages that provide
// it. When everything is present it prints one line and exits 0. When something is missing
// and the process runs as root on Debian or a derivative (ID or ID_LIKE debian or ubuntu in
// /etc/os-release), it installs the packages once with
//
//	apt-get update
//	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends PACKAGES
//
// (tshark's question about non-root captures and iperf3's about a boot-time daemon answered
// "no" beforehand with debconf-set-selections, so nothing prompts), checks again and exits
// 0 if all is there.
// Anywhere else (not root, not Debian-like) or with -check it installs nothing: it prints
// what is missing, why, and the exact command to run, and exits 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// sbinDirs are searched after PATH: a non-login PATH may lack them, and iproute2, ethtool
// and procps install there.
var sbinDirs = []string{"/usr/local/sbin", "/usr/sbin", "/sbin"}

func main() {
	check := flag.Bool("check", false, "only check: install nothing, exit 1 if something is missing")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./internal/prereq [-check] TARGET... (targets: %s)\n",
			strings.Join(targetNames(), ", "))
		flag.PrintDefaults()
	}
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, flag.Args(), *check, systemEnv(), os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "prereq:", err)
		os.Exit(1)
	}
}

// errMissing is returned when requirements are missing and were not installed.
var errMissing = errors.New("missing prerequisites")

// run checks the targets' requirements in env, installs the missing ones if the plan says
// so and check is false, and reports on out (apt-get's own output goes to out and errOut).
func run(ctx context.Context, names []string, check bool, env Env, out, errOut io.Writer) error {
	p, err := MakePlan(names, env)
	if err != nil {
		return err
	}
	label := strings.Join(names, "+")
	if p.Action == Nothing {
		fmt.Fprintf(out, "prereq: %s: all %d present (%s)\n", label, len(p.Checked), nameList(p.Checked))
		return nil
	}
	fmt.Fprintf(out, "prereq: %s: missing %s\n", label, nameList(p.Missing))
	for _, r := range p.Missing {
		fmt.Fprintf(out, "  %-17s %s\n", r.Name, r.Why)
	}
	if p.Action == Install && check {
		fmt.Fprintf(out, "prereq: -check given, installing nothing; as root run:\n  %s\n", shellCommand(p.Steps, false))
		return errMissing
	}
	if p.Action == Stop {
		for _, a := range p.Advice {
			fmt.Fprintf(out, "prereq: %s\n", a)
		}
		return errMissing
	}
	fmt.Fprintf(out, "prereq: installing with apt-get (root on a Debian-like system): %s\n", strings.Join(p.Packages, " "))
	for _, s := range p.Steps {
		if err := runStep(ctx, s, out, errOut); err != nil {
			return err
		}
	}
	again, err := MakePlan(names, env)
	if err != nil {
		return err
	}
	if len(again.Missing) > 0 {
		return fmt.Errorf("%w: still missing after installing %s: %s", errMissing,
			strings.Join(p.Packages, " "), nameList(again.Missing))
	}
	fmt.Fprintf(out, "prereq: %s: all %d present after installing %s\n", label, len(again.Checked), strings.Join(p.Packages, " "))
	return nil
}

// aptTimeout bounds each apt-get or debconf command.
const aptTimeout = 10 * time.Minute

// runStep runs one installation step, echoing it first; apt-get update is tried three
// times, 5 s apart, since a mirror can fail for a moment.
func runStep(ctx context.Context, s Step, out, errOut io.Writer) error {
	attempts := 1
	if len(s.Argv) > 1 && s.Argv[0] == "apt-get" && s.Argv[1] == "update" {
		attempts = 3
	}
	var err error
	for a := 1; a <= attempts; a++ {
		fmt.Fprintf(out, "+ %s\n", s)
		cctx, cancel := context.WithTimeout(ctx, aptTimeout)
		path := findCommand(s.Argv[0])
		if path == "" {
			cancel()
			return fmt.Errorf("%s: command not found", s.Argv[0])
		}
		cmd := exec.CommandContext(cctx, path, s.Argv[1:]...)
		cmd.Env = append(os.Environ(), aptEnv)
		cmd.Stdout, cmd.Stderr = out, errOut
		if s.Stdin != "" {
			cmd.Stdin = strings.NewReader(s.Stdin + "\n")
		}
		err = cmd.Run()
		cancel()
		if err == nil || ctx.Err() != nil {
			break
		}
		if a < attempts {
			fmt.Fprintf(out, "prereq: %s failed (%v); retrying in 5 s\n", s, err)
			select {
			case <-time.After(5 * time.Second):
			case <-ctx.Done():
			}
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", s, err)
	}
	return nil
}

// systemEnv is the Env of this process and machine.
func systemEnv() Env {
	osRelease, _ := os.ReadFile("/etc/os-release")
	return Env{
		Find:      findCommand,
		Exists:    func(path string) bool { _, err := os.Stat(path); return err == nil },
		Root:      os.Geteuid() == 0,
		OSRelease: string(osRelease),
		AptGet:    findCommand("apt-get") != "" && findCommand("debconf-set-selections") != "",
	}
}

// findCommand returns the path of command on PATH or in sbinDirs, or "".
func findCommand(command string) string {
	if p, err := exec.LookPath(command); err == nil {
		return p
	}
	for _, d := range sbinDirs {
		p := filepath.Join(d, command)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}
