package testbed

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Naming.
//
// A namespace is named NSPrefix + "<pid>-<start>-<n>[-<tag>]-<a|b>", where pid and start
// identify the creating process (its process id and its start time in clock ticks after
// boot, field 22 of /proc/PID/stat), n counts beds within that process and tag is the
// sanitised Options.Name. The pair (pid, start) lets Sweep tell a live creator from a dead
// one even after the pid has been reused.
//
// A veth end is named "xn<pid base 36>-<n base 36><a|b>": unique on the machine too (which
// keeps captures readable), and at most 15 bytes (IFNAMSIZ-1) for any pid up to 2^22 and
// more than two billion beds per process. The router of a routed bed names its ends
// "xn<pid>-<n>ra" (towards A) and "xn<pid>-<n>rb" (towards B): one byte more, which still
// fits for any pid up to 2^22 and sixty million beds per process (New fails cleanly, before
// touching anything, beyond that).

// NSPrefix starts the name of every namespace this package creates. Sweep considers only
// namespaces whose name starts with it, so namespaces made by other tools (including ad hoc
// ones named "xdpndk-...") are never touched.
const NSPrefix = "xdpndk-tb-"

// ifNameMax is the longest interface name Linux accepts (IFNAMSIZ - 1).
const ifNameMax = 15

// bedCounter numbers the beds of this process.
var bedCounter atomic.Uint64

// procID identifies a process across pid reuse.
type procID struct {
	pid   int
	start uint64 // clock ticks after boot; 0 when unknown
}

// selfID is this process's identity, read once.
var selfID = func() procID {
	pid := os.Getpid()
	start, _, _ := procStart(pid)
	return procID{pid: pid, start: start}
}()

// nsName returns the namespace name of one side ('a', 'b', or 'r' for the router of a
// routed bed) of bed n.
func nsName(id procID, n uint64, tag string, side byte) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s%d-%d-%d", NSPrefix, id.pid, id.start, n)
	if tag != "" {
		b.WriteString("-")
		b.WriteString(tag)
	}
	b.WriteByte('-')
	b.WriteByte(side)
	return b.String()
}

// vethName returns the veth end name of one side ('a' or 'b') of bed n.
func vethName(pid int, n uint64, side byte) (string, error) {
	return vethNameSuffix(pid, n, string(side))
}

// routerVethName returns the name of the router's veth end towards side ('a' or 'b') of
// routed bed n: "xn<pid>-<n>r<side>".
func routerVethName(pid int, n uint64, side byte) (string, error) {
	return vethNameSuffix(pid, n, "r"+string(side))
}

// vethNameSuffix returns "xn<pid base 36>-<n base 36><suffix>", or an error if that is
// longer than an interface name may be.
func vethNameSuffix(pid int, n uint64, suffix string) (string, error) {
	name := "xn" + strconv.FormatInt(int64(pid), 36) + "-" + strconv.FormatUint(n, 36) + suffix
	if len(name) > ifNameMax {
		return "", fmt.Errorf("veth name %q is longer than %d bytes", name, ifNameMax)
	}
	return name, nil
}

// parseNSName extracts the creator of a namespace named by nsName. ok is false for names
// this package did not make.
func parseNSName(name string) (id procID, ok bool) {
	rest, found := strings.CutPrefix(name, NSPrefix)
	if !found {
		return procID{}, false
	}
	fields := strings.Split(rest, "-")
	if len(fields) < 4 { // pid, start, n, [tag,] side
		return procID{}, false
	}
	pid, err := strconv.Atoi(fields[0])
	if err != nil || pid <= 0 {
		return procID{}, false
	}
	start, err := strconv.ParseUint(fields[1], 10, 64)
	if err != nil {
		return procID{}, false
	}
	return procID{pid: pid, start: start}, true
}

// errNoProcess means the process does not exist.
var errNoProcess = errors.New("no such process")

// procStart returns the start time of process pid (clock ticks after boot) and whether it
// is still running (not a zombie). It returns errNoProcess when the process is gone.
func procStart(pid int) (start uint64, running bool, err error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return 0, false, errNoProcess
	}
	if err != nil {
		return 0, false, fmt.Errorf("read stat of pid %d: %w", pid, err)
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after
	// the last ')'. Field 3 (state) is then fields[0] and field 22 (starttime) fields[19].
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, false, fmt.Errorf("parse stat of pid %d: no ')'", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 20 {
		return 0, false, fmt.Errorf("parse stat of pid %d: %d fields after comm", pid, len(fields))
	}
	start, err = strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("parse start time of pid %d: %w", pid, err)
	}
	state := fields[0]
	return start, state != "Z" && state != "X", nil
}

// creatorAlive reports whether the process that created a namespace still runs.
func creatorAlive(id procID) (bool, error) {
	start, running, err := procStart(id.pid)
	if errors.Is(err, errNoProcess) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if id.start != 0 && start != id.start {
		return false, nil // the pid now belongs to another process
	}
	return running, nil
}
