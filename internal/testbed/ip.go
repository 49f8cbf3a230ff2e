package testbed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// netnsDir is where iproute2 keeps named network namespaces (bind mounts of nsfs files).
const netnsDir = "/run/netns"

// ipTimeout bounds every ip(8) and tc(8) invocation this package makes.
const ipTimeout = 30 * time.Second

// ipPath finds the ip(8) binary once.
var ipPath = sync.OnceValues(func() (string, error) { return findTool("ip") })

// tcPath finds the tc(8) binary once (Bed.SetBottleneck).
var tcPath = sync.OnceValues(func() (string, error) { return findTool("tc") })

// findTool finds an iproute2 program. PATH is tried first; the sbin directories are tried
// too because PATH for a non-login shell may lack them.
func findTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s(8) not found: install iproute2", name)
}

// runIP runs ip(8) with args under ipTimeout and returns its standard output. The error
// carries the command line and ip's own message.
func runIP(args ...string) ([]byte, error) { return runTool(ipPath, "ip", args...) }

// runTC runs tc(8) with args under ipTimeout, as runIP does.
func runTC(args ...string) ([]byte, error) { return runTool(tcPath, "tc", args...) }

// runTool runs the program path finds, named name in errors, with args under ipTimeout and
// returns its standard output. The error carries the command line and the program's own
// message.
func runTool(path func() (string, error), name string, args ...string) ([]byte, error) {
	p, err := path()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), ipTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, p, args...)
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg != "" {
			return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
		}
		return nil, fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return stdout.Bytes(), nil
}

// nsPath returns the file that names namespace ns.
func nsPath(ns string) string { return filepath.Join(netnsDir, ns) }

// nsExists reports whether the named namespace ns has an entry in netnsDir.
func nsExists(ns string) (bool, error) {
	_, err := os.Lstat(nsPath(ns))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat namespace %s: %w", ns, err)
	}
	return true, nil
}

// listNamespaces returns the names in netnsDir (the namespaces `ip netns list` shows).
func listNamespaces() ([]string, error) {
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", netnsDir, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, nil
}

// linkNames returns the interface names in namespace ns ("" means the caller's own).
func linkNames(ns string) ([]string, error) {
	args := []string{"-j"}
	if ns != "" {
		args = append(args, "-n", ns)
	}
	out, err := runIP(append(args, "link", "show")...)
	if err != nil {
		return nil, err
	}
	var links []struct {
		Ifname string `json:"ifname"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return nil, fmt.Errorf("parse ip link output: %w", err)
	}
	names := make([]string, 0, len(links))
	for _, l := range links {
		names = append(names, l.Ifname)
	}
	return names, nil
}

// hasLink reports whether namespace ns holds an interface called ifname.
func hasLink(ns, ifname string) (bool, error) {
	names, err := linkNames(ns)
	if err != nil {
		return false, err
	}
	for _, n := range names {
		if n == ifname {
			return true, nil
		}
	}
	return false, nil
}

// nsPids returns the processes whose network namespace is ns (as `ip netns pids` finds them).
func nsPids(ns string) ([]int, error) {
	out, err := runIP("netns", "pids", ns)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("parse ip netns pids output %q: %w", f, err)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}
