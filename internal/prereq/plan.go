package main

import (
	"bufio"
	"fmt"
	"slices"
	"strings"
)

// Requirement is one thing a target needs from the system: a command, found on PATH or in
// the sbin directories, or a file (C headers). Packages are the Debian packages that
// provide it; none means it cannot be installed with apt-get and Hint says what to do.
type Requirement struct {
	// Name is what is reported: the command's name, or a label for a file.
	Name string
	// Command is the command looked up; empty for a file.
	Command string
	// File is the path that must exist when Command is empty.
	File string
	// Packages are the Debian packages that provide it.
	Packages []string
	// Why says which part of the target needs it.
	Why string
	// Hint says how to get it when no package provides it.
	Hint string
}

// The requirements, each defined once; targets list them by name.
var requirements = map[string]Requirement{
	"ip": {Name: "ip", Command: "ip", Packages: []string{"iproute2"},
		Why: "network namespaces, veth pairs, addresses and neighbours of the test bed (internal/testbed)"},
	"ping": {Name: "ping", Command: "ping", Packages: []string{"iputils-ping"},
		Why: "reachability checks of the test bed (plain and routed), the xdp kernel-path tests, the delay line's round trip (internal/delayline, bench/longpath)"},
	"ethtool": {Name: "ethtool", Command: "ethtool", Packages: []string{"ethtool"},
		Why: "xdp/frame tests switch a veth's transmit checksum offload off; the delay line's bed turns the veth offloads off (internal/testbed Options.Path)"},
	"tshark": {Name: "tshark", Command: "tshark", Packages: []string{"tshark"},
		Why: "xdp kernel-path tests capture our datagrams and check their checksums; contrib/wireshark's tests run the dissector in it and capture on the routed bed's router"},
	"sysctl": {Name: "sysctl", Command: "sysctl", Packages: []string{"procps"},
		Why: "xdp and ndk neighbour tests set arp_notify inside a namespace"},
	"cat": {Name: "cat", Command: "cat", Packages: []string{"coreutils"},
		Why: "testbed tests read a namespace's sysctl files"},
	"sleep": {Name: "sleep", Command: "sleep", Packages: []string{"coreutils"},
		Why: "testbed tests leave a process running in a namespace"},
	"true": {Name: "true", Command: "true", Packages: []string{"coreutils"},
		Why: "testbed's sweep test takes the pid of a child that has exited"},
	"gcc": {Name: "gcc", Command: "gcc", Packages: []string{"gcc"},
		Why: "the race detector of make test needs cgo"},
	"libc-headers": {Name: "C library headers", File: "/usr/include/stdlib.h", Packages: []string{"libc6-dev"},
		Why: "cgo, for the race detector, compiles against the C library"},
	"go": {Name: "go", Command: "go",
		Why:  "cmd/ndkpeer's tests, the demo and make bench (bench/compare) build ndkpeer, internal/layers' tests run go list",
		Hint: "put the Go toolchain's bin directory (Go 1.25 or later, as go.mod says) on PATH"},
	"clang": {Name: "clang", Command: "clang", Packages: []string{"clang"},
		Why: "bpf2go compiles bpf/steer.c"},
	"llvm-strip": {Name: "llvm-strip", Command: "llvm-strip", Packages: []string{"llvm"},
		Why: "bpf2go strips the BPF object's debug sections"},
	"bpf-headers": {Name: "libbpf headers", File: "/usr/include/bpf/bpf_helpers.h", Packages: []string{"libbpf-dev"},
		Why: "bpf/steer.c includes bpf_helpers.h and bpf_endian.h"},
	"make": {Name: "make", Command: "make", Packages: []string{"make"},
		Why: "CI runs the Makefile's targets"},
	"tc": {Name: "tc", Command: "tc", Packages: []string{"iproute2"},
		Why: "the routed test bed's tbf bottleneck (internal/testbed, bench/pathbench's smoke test, make bench-path)"},
	"iperf3": {Name: "iperf3", Command: "iperf3", Packages: []string{"iperf3"},
		Why: "bulk TCP in make bench (bench/compare, bench/tools) and the kernel TCP flow beside a QP through the bottleneck (bench/pathbench's smoke test, make bench-path)"},
	"git": {Name: "git", Command: "git", Packages: []string{"git"},
		Why: "make check-generate compares bpf/ with git; the benches' results name the commit they measured (their smoke tests too): the header asks git when the build has no VCS stamp (go run in a worktree: bench/internal/report)"},
	"qperf": {Name: "qperf", Command: "qperf", Packages: []string{"qperf"},
		Why: "the reference TCP/UDP latency and bandwidth tool (make bench: bench/compare through bench/tools, its smoke test too)"},
	"sockperf": {Name: "sockperf", Command: "sockperf", Packages: []string{"sockperf"},
		Why: "the reference UDP ping-pong and message-rate tool, also busy polling (make bench: bench/compare through bench/tools, its smoke test too)"},
	"fi_pingpong": {Name: "fi_pingpong", Command: "fi_pingpong", Packages: []string{"libfabric-bin"},
		Why: "libfabric's ping-pong over its software providers (make bench: bench/compare through bench/tools, its smoke test too)"},
	"fi_info": {Name: "fi_info", Command: "fi_info", Packages: []string{"libfabric-bin"},
		Why: "libfabric's version and providers, for the record (bench/tools)"},
}

// targets lists what each target needs, in the order it is checked and reported. "bench" is
// everything make bench (bench/compare: the test bed, ndkpeer built with go, the reference
// tools) and make bench-path (tc) run. "test" is
// every command a test runs, directly or through the code it calls (internal/testbed runs
// ip and tc, and the rest by name inside a namespace with `ip netns exec`), plus cgo for the
// race detector. "ci" is everything .ci/run runs: the tests, the demo, generate and
// check-generate, and make.
var targets = map[string][]string{
	"test": {"ip", "tc", "ping", "ethtool", "tshark", "sysctl", "iperf3", "qperf", "sockperf", "fi_pingpong",
		"fi_info", "cat", "sleep", "true", "gcc", "libc-headers", "go", "git"},
	"demo":     {"ip", "go"},
	"generate": {"clang", "llvm-strip", "bpf-headers"},
	"bench":    {"ip", "tc", "iperf3", "ping", "ethtool", "qperf", "sockperf", "fi_pingpong", "fi_info", "go", "git"},
	"ci": {"ip", "tc", "ping", "ethtool", "tshark", "sysctl", "iperf3", "qperf", "sockperf", "fi_pingpong",
		"fi_info", "cat", "sleep", "true", "gcc", "libc-headers", "go", "clang", "llvm-strip", "bpf-headers", "make", "git"},
}

// targetNames returns the known targets, sorted.
func targetNames() []string {
	names := make([]string, 0, len(targets))
	for n := range targets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// needs returns the requirements of the given targets, each once, in target order.
func needs(names []string) ([]Requirement, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("no target given (known: %s)", strings.Join(targetNames(), ", "))
	}
	var out []Requirement
	seen := map[string]bool{}
	for _, t := range names {
		keys, ok := targets[t]
		if !ok {
			return nil, fmt.Errorf("unknown target %q (known: %s)", t, strings.Join(targetNames(), ", "))
		}
		for _, k := range keys {
			if !seen[k] {
				seen[k] = true
				out = append(out, requirements[k])
			}
		}
	}
	return out, nil
}

// Env is what the plan depends on in the system, so that planning is testable without
// touching it.
type Env struct {
	// Find returns where a command is, or "" if it is nowhere: PATH, then the sbin
	// directories.
	Find func(command string) string
	// Exists reports whether a file exists.
	Exists func(path string) bool
	// Root is whether the process runs as root.
	Root bool
	// OSRelease is /etc/os-release's content, "" if it could not be read.
	OSRelease string
	// AptGet is whether apt-get and debconf-set-selections can be run.
	AptGet bool
}

// Action is what the checker does after looking.
type Action int

const (
	// Nothing: every requirement is present.
	Nothing Action = iota
	// Install: the missing requirements are installed with apt-get (Steps).
	Install
	// Stop: something is missing and cannot be installed here; Advice says what to run.
	Stop
)

// Step is one command the installation runs.
type Step struct {
	Argv  []string
	Stdin string // fed to the command's standard input when not empty
}

// String shows the step as a shell command.
func (s Step) String() string {
	cmd := strings.Join(s.Argv, " ")
	if s.Stdin != "" {
		return "echo '" + s.Stdin + "' | " + cmd
	}
	return cmd
}

// tsharkPreseed answers, before tshark's package is configured, the question whether
// non-root users may capture packets, so that installing it never prompts.
const tsharkPreseed = "wireshark-common wireshark-common/install-setuid boolean false"

// iperf3Preseed answers iperf3's question whether to start a server daemon at boot: no (the
// benchmark starts its own servers inside the namespaces).
const iperf3Preseed = "iperf3 iperf3/start_daemon boolean false"

// preseeds are the debconf answers given before installing a package, by package, in the
// order they are given.
var preseeds = []struct{ pkg, answer string }{{"tshark", tsharkPreseed}, {"iperf3", iperf3Preseed}}

// aptEnv is the environment apt-get runs with: no questions.
const aptEnv = "DEBIAN_FRONTEND=noninteractive"

// Plan is the outcome of looking at the system for some targets.
type Plan struct {
	// Targets are the targets checked.
	Targets []string
	// Checked are their requirements; Missing those not present, in the same order.
	Checked, Missing []Requirement
	// Packages are the Debian packages that provide the missing requirements, each once.
	Packages []string
	// Unpackaged are the missing requirements no package provides.
	Unpackaged []Requirement
	// Action is what to do; Steps the commands for Install; Advice the lines to print for
	// Stop (the exact command to run where there is one).
	Action Action
	Steps  []Step
	Advice []string
}

// present reports whether r is on this system.
func present(env Env, r Requirement) bool {
	if r.Command != "" {
		return env.Find(r.Command) != ""
	}
	return env.Exists(r.File)
}

// debianLike reports whether os-release names Debian or a derivative of it (Ubuntu and
// its own derivatives say ID_LIKE=debian or ID_LIKE="ubuntu debian").
func debianLike(osRelease string) (bool, string) {
	var id, like string
	sc := bufio.NewScanner(strings.NewReader(osRelease))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok {
			continue
		}
		v = strings.Trim(v, `"'`)
		switch k {
		case "ID":
			id = v
		case "ID_LIKE":
			like = v
		}
	}
	for _, w := range append([]string{id}, strings.Fields(like)...) {
		if w == "debian" || w == "ubuntu" {
			return true, id
		}
	}
	return false, id
}

// installSteps are the commands that install pkgs: the questions of those among them that
// ask one answered first (preseeds), the package lists refreshed, then the packages without
// their recommendations.
func installSteps(pkgs []string) []Step {
	var steps []Step
	for _, p := range preseeds {
		if slices.Contains(pkgs, p.pkg) {
			steps = append(steps, Step{Argv: []string{"debconf-set-selections"}, Stdin: p.answer})
		}
	}
	steps = append(steps, Step{Argv: []string{"apt-get", "update"}})
	install := append([]string{"apt-get", "install", "-y", "--no-install-recommends"}, pkgs...)
	return append(steps, Step{Argv: install})
}

// shellCommand is steps as one command line a user can paste, as root (sudo prefixed when
// the user is not root).
func shellCommand(steps []Step, sudo bool) string {
	parts := make([]string, len(steps))
	for i, s := range steps {
		if s.Argv[0] == "apt-get" && s.Argv[1] == "install" {
			parts[i] = aptEnv + " " + s.String()
		} else {
			parts[i] = s.String()
		}
	}
	line := strings.Join(parts, " && ")
	if sudo {
		return `sudo sh -c "` + line + `"`
	}
	return line
}

// MakePlan looks at env for the requirements of the targets and decides what to do.
func MakePlan(names []string, env Env) (*Plan, error) {
	reqs, err := needs(names)
	if err != nil {
		return nil, err
	}
	p := &Plan{Targets: names, Checked: reqs}
	for _, r := range reqs {
		if present(env, r) {
			continue
		}
		p.Missing = append(p.Missing, r)
		if len(r.Packages) == 0 {
			p.Unpackaged = append(p.Unpackaged, r)
		}
		for _, pkg := range r.Packages {
			if !slices.Contains(p.Packages, pkg) {
				p.Packages = append(p.Packages, pkg)
			}
		}
	}
	if len(p.Missing) == 0 {
		p.Action = Nothing
		return p, nil
	}
	debian, id := debianLike(env.OSRelease)
	steps := installSteps(p.Packages)
	if len(p.Unpackaged) == 0 && debian && env.Root && env.AptGet {
		p.Action, p.Steps = Install, steps
		return p, nil
	}
	p.Action = Stop
	for _, r := range p.Unpackaged {
		p.Advice = append(p.Advice, fmt.Sprintf("%s: %s", r.Name, r.Hint))
	}
	if len(p.Packages) == 0 {
		return p, nil
	}
	switch {
	case debian && !env.Root:
		p.Advice = append(p.Advice, "not running as root; install them with:", "  "+shellCommand(steps, true))
	case debian && !env.AptGet:
		p.Advice = append(p.Advice, "apt-get or debconf-set-selections not found; the packages are: "+strings.Join(p.Packages, " "))
	case debian:
		p.Advice = append(p.Advice, "then install the packages with:", "  "+shellCommand(steps, false))
	default:
		what := id
		if what == "" {
			what = "unknown: no /etc/os-release"
		}
		var cmds []string
		for _, r := range p.Missing {
			if len(r.Packages) > 0 {
				cmds = append(cmds, r.Name)
			}
		}
		p.Advice = append(p.Advice,
			fmt.Sprintf("not Debian or Ubuntu (ID %s): install %s with this system's package manager", what, strings.Join(cmds, ", ")),
			"  (on Debian/Ubuntu, as root: "+shellCommand(steps, false)+")")
	}
	return p, nil
}

// nameList joins the requirements' names.
func nameList(rs []Requirement) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.Name
	}
	return strings.Join(s, ", ")
}
