package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

const (
	debianRelease = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nID=debian\n"
	ubuntuRelease = "NAME=\"Ubuntu\"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID=\"24.04\"\n"
	mintRelease   = "NAME=\"Linux Mint\"\nID=linuxmint\nID_LIKE=\"ubuntu debian\"\n"
	fedoraRelease = "NAME=\"Fedora Linux\"\nID=fedora\nVERSION_ID=41\n"
)

// fakeEnv is a system where everything is present except the named commands and files.
func fakeEnv(root bool, osRelease string, missing ...string) Env {
	return Env{
		Find: func(c string) string {
			if slices.Contains(missing, c) {
				return ""
			}
			return "/usr/bin/" + c
		},
		Exists:    func(p string) bool { return !slices.Contains(missing, p) },
		Root:      root,
		OSRelease: osRelease,
		AptGet:    true,
	}
}

func mustPlan(t *testing.T, names []string, env Env) *Plan {
	t.Helper()
	p, err := MakePlan(names, env)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTables: every target names known requirements, and every requirement is either
// installable (packages) or says how to get it (hint), and is a command or a file.
func TestTables(t *testing.T) {
	for name, keys := range targets {
		for _, k := range keys {
			if _, ok := requirements[k]; !ok {
				t.Errorf("target %s needs %q, which is not a requirement", name, k)
			}
		}
	}
	for k, r := range requirements {
		if (r.Command == "") == (r.File == "") {
			t.Errorf("%s: exactly one of Command and File must be set: %+v", k, r)
		}
		if (len(r.Packages) == 0) == (r.Hint == "") {
			t.Errorf("%s: exactly one of Packages and Hint must be set: %+v", k, r)
		}
		if r.Name == "" || r.Why == "" {
			t.Errorf("%s: no name or reason: %+v", k, r)
		}
	}
	// The ci target is the union of the others (plus what only CI runs).
	ci := targets["ci"]
	for _, name := range []string{"test", "demo", "generate"} {
		for _, k := range targets[name] {
			if !slices.Contains(ci, k) {
				t.Errorf("ci lacks %s's %s", name, k)
			}
		}
	}
}

func TestNeeds(t *testing.T) {
	if _, err := needs(nil); err == nil {
		t.Error("no target accepted")
	}
	if _, err := needs([]string{"test", "bogus"}); err == nil || !strings.Contains(err.Error(), `"bogus"`) {
		t.Errorf("unknown target: err = %v", err)
	}
	// make bench-path runs tc (the bottleneck) and iperf3 (the TCP flow); make bench
	// (bench/compare) builds ndkpeer with go and runs the reference tools through bench/tools.
	bench, err := needs([]string{"bench"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"ip", "tc", "iperf3", "qperf", "sockperf", "fi_pingpong", "fi_info", "go"} {
		if !slices.ContainsFunc(bench, func(r Requirement) bool { return r.Command == c }) {
			t.Errorf("bench lacks %s: %s", c, nameList(bench))
		}
	}
	rs, err := needs([]string{"test", "demo"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(targets["test"]) {
		t.Errorf("test+demo: %d requirements (%s), want test's %d: demo's ip and go counted once",
			len(rs), nameList(rs), len(targets["test"]))
	}
}

func TestPlanAllPresent(t *testing.T) {
	p := mustPlan(t, []string{"test"}, fakeEnv(false, fedoraRelease))
	if p.Action != Nothing || len(p.Missing) != 0 || len(p.Packages) != 0 || len(p.Steps) != 0 {
		t.Errorf("everything present: %+v", p)
	}
}

// TestPlanInstall: as root on a Debian-like system, missing requirements map to their
// packages (each once, in requirement order) and are installed with apt-get update and
// apt-get install -y --no-install-recommends; tshark's question is answered first only
// when tshark is installed.
func TestPlanInstall(t *testing.T) {
	update := Step{Argv: []string{"apt-get", "update"}}
	install := func(pkgs ...string) Step {
		return Step{Argv: append([]string{"apt-get", "install", "-y", "--no-install-recommends"}, pkgs...)}
	}
	preseed := Step{Argv: []string{"debconf-set-selections"}, Stdin: tsharkPreseed}
	preseedIperf3 := Step{Argv: []string{"debconf-set-selections"}, Stdin: iperf3Preseed}
	for _, tc := range []struct {
		name    string
		targets []string
		release string
		missing []string
		pkgs    []string
		steps   []Step
	}{
		{"ethtool", []string{"test"}, debianRelease, []string{"ethtool"},
			[]string{"ethtool"}, []Step{update, install("ethtool")}},
		{"tshark preseeded", []string{"test"}, debianRelease, []string{"tshark"},
			[]string{"tshark"}, []Step{preseed, update, install("tshark")}},
		{"ping and sysctl", []string{"test"}, ubuntuRelease, []string{"sysctl", "ping"},
			[]string{"iputils-ping", "procps"}, []Step{update, install("iputils-ping", "procps")}},
		{"race detector", []string{"test"}, debianRelease, []string{"gcc", "/usr/include/stdlib.h"},
			[]string{"gcc", "libc6-dev"}, []Step{update, install("gcc", "libc6-dev")}},
		{"coreutils once", []string{"test"}, mintRelease, []string{"cat", "sleep", "true"},
			[]string{"coreutils"}, []Step{update, install("coreutils")}},
		{"iperf3 for pathbench's smoke test", []string{"test"}, debianRelease, []string{"iperf3"},
			[]string{"iperf3"}, []Step{preseedIperf3, update, install("iperf3")}},
		{"the reference tools, libfabric-bin once", []string{"bench"}, debianRelease,
			[]string{"qperf", "sockperf", "fi_pingpong", "fi_info"},
			[]string{"qperf", "sockperf", "libfabric-bin"}, []Step{update, install("qperf", "sockperf", "libfabric-bin")}},
		{"iproute2 once for ip and tc", []string{"test"}, debianRelease, []string{"tc", "ip"},
			[]string{"iproute2"}, []Step{update, install("iproute2")}},
		{"demo needs ip", []string{"demo"}, debianRelease, []string{"ip", "ethtool"},
			[]string{"iproute2"}, []Step{update, install("iproute2")}},
		{"generate", []string{"generate"}, debianRelease, []string{"clang", "llvm-strip", "/usr/include/bpf/bpf_helpers.h"},
			[]string{"clang", "llvm", "libbpf-dev"}, []Step{update, install("clang", "llvm", "libbpf-dev")}},
		{"everything for ci", []string{"ci"}, debianRelease,
			[]string{"ip", "tc", "ping", "ethtool", "tshark", "sysctl", "iperf3", "qperf", "sockperf", "fi_pingpong", "fi_info",
				"gcc", "/usr/include/stdlib.h", "clang", "llvm-strip", "/usr/include/bpf/bpf_helpers.h", "make", "git"},
			[]string{"iproute2", "iputils-ping", "ethtool", "tshark", "procps", "iperf3", "qperf", "sockperf", "libfabric-bin",
				"gcc", "libc6-dev", "clang", "llvm", "libbpf-dev", "make", "git"},
			[]Step{preseed, preseedIperf3, update, install("iproute2", "iputils-ping", "ethtool", "tshark", "procps", "iperf3",
				"qperf", "sockperf", "libfabric-bin", "gcc", "libc6-dev", "clang", "llvm", "libbpf-dev", "make", "git")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPlan(t, tc.targets, fakeEnv(true, tc.release, tc.missing...))
			if p.Action != Install {
				t.Fatalf("action %v, want Install; advice %q", p.Action, p.Advice)
			}
			if !reflect.DeepEqual(p.Packages, tc.pkgs) {
				t.Errorf("packages %q, want %q", p.Packages, tc.pkgs)
			}
			if !reflect.DeepEqual(p.Steps, tc.steps) {
				t.Errorf("steps %q, want %q", p.Steps, tc.steps)
			}
		})
	}
}

// TestPlanStop: where it cannot install, the plan stops with the exact command to run.
func TestPlanStop(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     Env
		targets []string
		advice  []string
	}{
		{"not root", fakeEnv(false, debianRelease, "ethtool"), []string{"test"}, []string{
			"not running as root; install them with:",
			`  sudo sh -c "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ethtool"`,
		}},
		{"not root, tshark", fakeEnv(false, ubuntuRelease, "tshark", "ip"), []string{"test"}, []string{
			"not running as root; install them with:",
			`  sudo sh -c "echo 'wireshark-common wireshark-common/install-setuid boolean false' | debconf-set-selections && ` +
				`apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iproute2 tshark"`,
		}},
		{"not Debian", fakeEnv(true, fedoraRelease, "tshark"), []string{"test"}, []string{
			"not Debian or Ubuntu (ID fedora): install tshark with this system's package manager",
			"  (on Debian/Ubuntu, as root: echo 'wireshark-common wireshark-common/install-setuid boolean false' | " +
				"debconf-set-selections && apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends tshark)",
		}},
		{"no os-release", fakeEnv(true, "", "ping"), []string{"test"}, []string{
			"not Debian or Ubuntu (ID unknown: no /etc/os-release): install ping with this system's package manager",
			"  (on Debian/Ubuntu, as root: apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iputils-ping)",
		}},
		{"go is not a package", fakeEnv(true, debianRelease, "go", "ip"), []string{"demo"}, []string{
			"go: " + requirements["go"].Hint,
			"then install the packages with:",
			"  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iproute2",
		}},
		{"only go", fakeEnv(true, debianRelease, "go"), []string{"demo"}, []string{"go: " + requirements["go"].Hint}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPlan(t, tc.targets, tc.env)
			if p.Action != Stop || len(p.Steps) != 0 {
				t.Fatalf("action %v with steps %q, want Stop", p.Action, p.Steps)
			}
			if !reflect.DeepEqual(p.Advice, tc.advice) {
				t.Errorf("advice:\n%s\nwant:\n%s", strings.Join(p.Advice, "\n"), strings.Join(tc.advice, "\n"))
			}
		})
	}
	env := fakeEnv(true, debianRelease, "ethtool")
	env.AptGet = false
	if p := mustPlan(t, []string{"test"}, env); p.Action != Stop || !strings.Contains(strings.Join(p.Advice, "\n"), "apt-get or debconf-set-selections not found") {
		t.Errorf("no apt-get: action %v, advice %q", p.Action, p.Advice)
	}
}

func TestDebianLike(t *testing.T) {
	for _, tc := range []struct {
		release string
		want    bool
		id      string
	}{
		{debianRelease, true, "debian"},
		{ubuntuRelease, true, "ubuntu"},
		{mintRelease, true, "linuxmint"},
		{"ID=ubuntu\n", true, "ubuntu"},
		{"ID='raspbian'\nID_LIKE='debian'\n", true, "raspbian"},
		{fedoraRelease, false, "fedora"},
		{"ID=arch\n", false, "arch"},
		{"ID=\"debian-ish\"\nID_LIKE=\"debianish\"\n", false, "debian-ish"},
		{"", false, ""},
	} {
		if got, id := debianLike(tc.release); got != tc.want || id != tc.id {
			t.Errorf("debianLike(%q) = %v, %q; want %v, %q", tc.release, got, id, tc.want, tc.id)
		}
	}
}

// TestFindCommand: a command not on PATH is found in the sbin directories, if it is an
// executable regular file.
func TestFindCommand(t *testing.T) {
	dir := t.TempDir()
	old := sbinDirs
	sbinDirs = []string{filepath.Join(dir, "none"), dir}
	t.Cleanup(func() { sbinDirs = old })
	t.Setenv("PATH", filepath.Join(dir, "empty"))
	if err := os.WriteFile(filepath.Join(dir, "tool"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "subdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := findCommand("tool"); got != filepath.Join(dir, "tool") {
		t.Errorf("findCommand(tool) = %q, want it in the sbin directory", got)
	}
	for _, c := range []string{"data", "subdir", "absent"} {
		if got := findCommand(c); got != "" {
			t.Errorf("findCommand(%s) = %q, want not found", c, got)
		}
	}
}

// TestRun: what the command prints and returns, without installing anything: one line when
// all is present; the missing requirements and the command to run, and errMissing, when it
// must stop or when -check forbids installing.
func TestRun(t *testing.T) {
	ctx := context.Background()
	var out bytes.Buffer
	if err := run(ctx, []string{"demo"}, false, fakeEnv(false, debianRelease), &out, &out); err != nil {
		t.Fatal(err)
	}
	if want := "prereq: demo: all 2 present (ip, go)\n"; out.String() != want {
		t.Errorf("output %q, want %q", out.String(), want)
	}

	out.Reset()
	err := run(ctx, []string{"test"}, false, fakeEnv(false, debianRelease, "ethtool"), &out, &out)
	if !errors.Is(err, errMissing) {
		t.Errorf("not root, ethtool missing: err = %v, want errMissing", err)
	}
	for _, want := range []string{
		"prereq: test: missing ethtool\n",
		"  ethtool           " + requirements["ethtool"].Why + "\n",
		`sudo sh -c "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ethtool"`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	err = run(ctx, []string{"test"}, true, fakeEnv(true, debianRelease, "ethtool"), &out, &out)
	if !errors.Is(err, errMissing) {
		t.Errorf("-check as root: err = %v, want errMissing", err)
	}
	if strings.Contains(out.String(), "+ apt-get") ||
		!strings.Contains(out.String(), "as root run:\n  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ethtool\n") {
		t.Errorf("-check: ran something or did not print the command:\n%s", out.String())
	}
}

// TestCheckEachTestRequirement: with any one of the test target's requirements missing,
// -check fails and names it, and without -check (as root on Debian) the plan installs its
// package, or stops for go, which no package provides.
func TestCheckEachTestRequirement(t *testing.T) {
	for _, k := range targets["test"] {
		r := requirements[k]
		what := r.Command
		if what == "" {
			what = r.File
		}
		env := fakeEnv(true, debianRelease, what)
		var out bytes.Buffer
		if err := run(context.Background(), []string{"test"}, true, env, &out, &out); !errors.Is(err, errMissing) {
			t.Errorf("%s missing, -check: err = %v, want errMissing", k, err)
		}
		if !strings.Contains(out.String(), "prereq: test: missing "+r.Name+"\n") {
			t.Errorf("%s missing, -check: output does not name it:\n%s", k, out.String())
		}
		p := mustPlan(t, []string{"test"}, env)
		switch {
		case len(r.Packages) == 0:
			if p.Action != Stop {
				t.Errorf("%s missing: action %v, want Stop", k, p.Action)
			}
		case p.Action != Install || !reflect.DeepEqual(p.Packages, r.Packages):
			t.Errorf("%s missing: action %v, packages %q; want Install of %q", k, p.Action, p.Packages, r.Packages)
		}
	}
}
