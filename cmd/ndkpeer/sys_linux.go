//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/vishvananda/netlink/nl"
	"github.com/xdpndk/xdpndk/xdp"
	"golang.org/x/sys/unix"
)

// This file holds what ndkpeer asks the kernel about this host before it opens an adapter
// (and what doctor reports): privileges, the memlock limit, the interface and the XDP
// program attached to it.

// Capability numbers (include/uapi/linux/capability.h).
const (
	capNetAdmin = 12
	capNetRaw   = 13
	capIPCLock  = 14
	capSysAdmin = 21
	capBPF      = 39
)

// privileges is what the process may do.
type privileges struct {
	euid int
	caps uint64 // effective capability set
}

// currentPrivileges reads the effective user id and capabilities (/proc/self/status).
func currentPrivileges() (privileges, error) {
	p := privileges{euid: os.Geteuid()}
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return p, fmt.Errorf("read capabilities: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return p, fmt.Errorf("read capabilities: CapEff %q: %w", v, err)
			}
			p.caps = caps
			return p, nil
		}
	}
	return p, errors.New("read capabilities: no CapEff line in /proc/self/status")
}

func (p privileges) has(c int) bool { return p.caps&(1<<c) != 0 }

// missing returns the capabilities an adapter needs that p lacks: CAP_NET_ADMIN (attach
// the XDP program), CAP_NET_RAW (AF_XDP sockets), CAP_BPF (load it; CAP_SYS_ADMIN also
// does). CAP_IPC_LOCK is not among them: a large enough RLIMIT_MEMLOCK replaces it
// (checkMemlock).
func (p privileges) missing() []string {
	var m []string
	if !p.has(capNetAdmin) {
		m = append(m, "CAP_NET_ADMIN")
	}
	if !p.has(capNetRaw) {
		m = append(m, "CAP_NET_RAW")
	}
	if !p.has(capBPF) && !p.has(capSysAdmin) {
		m = append(m, "CAP_BPF")
	}
	return m
}

// checkPrivileges fails with exitPrivilege when an adapter cannot be opened for lack of
// privileges.
func checkPrivileges() error {
	p, err := currentPrivileges()
	if err != nil {
		return failWrap(exitPrivilege, err, "cannot tell this process's privileges (%v): run it as root", err)
	}
	if m := p.missing(); len(m) > 0 {
		who := "not root"
		if p.euid == 0 {
			who = "root without all capabilities"
		}
		return fail(exitPrivilege, "%s: missing %s: run it with sudo, or grant them: setcap cap_net_admin,cap_net_raw,cap_bpf,cap_ipc_lock+ep %s",
			who, strings.Join(m, ", "), executable())
	}
	return nil
}

// executable names this program for messages.
func executable() string {
	if p, err := os.Executable(); err == nil {
		return p
	}
	return "ndkpeer"
}

// memlockLimit returns RLIMIT_MEMLOCK's soft limit (unix.RLIM_INFINITY: none).
func memlockLimit() (uint64, error) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err != nil {
		return 0, fmt.Errorf("getrlimit(RLIMIT_MEMLOCK): %w", err)
	}
	return rl.Cur, nil
}

// checkMemlock fails with exitMemlock when the process may not lock need bytes: without
// CAP_IPC_LOCK, mlock(2) of the UMEM counts against RLIMIT_MEMLOCK.
func checkMemlock(need uint64) error {
	p, err := currentPrivileges()
	if err == nil && p.has(capIPCLock) {
		return nil
	}
	lim, err := memlockLimit()
	if err != nil || lim == unix.RLIM_INFINITY || lim >= need {
		return nil
	}
	return fail(exitMemlock, "RLIMIT_MEMLOCK is %s but the adapter pins %s (its UMEM): raise it (ulimit -l unlimited; LimitMEMLOCK=infinity in a systemd unit) or grant CAP_IPC_LOCK",
		humanBytes(lim), humanBytes(need))
}

// lookupInterface returns the interface, or an exitNoInterface error.
func lookupInterface(name string) (*net.Interface, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, failWrap(exitNoInterface, err, "no interface %q in this network namespace: 'ip -br link' lists them", name)
	}
	return ifi, nil
}

// rxQueues returns how many RX queues the interface uses (xdp.RXQueues: ETHTOOL_GCHANNELS),
// or the kernel's count of allocated queues when the driver does not say, or 1.
func rxQueues(ifname string) int {
	if n, err := xdp.RXQueues(ifname); err == nil {
		return n
	}
	if l, err := netlink.LinkByName(ifname); err == nil && l.Attrs().NumRxQueues > 0 {
		return l.Attrs().NumRxQueues
	}
	return 1
}

// xdpAttachment is the XDP program attached to an interface, if any.
type xdpAttachment struct {
	attached bool
	id       uint32
	mode     string // "native", "generic", "offload" or "" when unknown
	name     string // the program's name; "" if it could not be read
	ours     bool   // xdpndk's steering program (its name and map names)
}

// attachedXDP reports the XDP program attached to the interface (rtnetlink IFLA_XDP).
func attachedXDP(ifname string) (xdpAttachment, error) {
	var x xdpAttachment
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return x, fmt.Errorf("read interface %s: %w", ifname, err)
	}
	xa := l.Attrs().Xdp
	if xa == nil || (!xa.Attached && xa.ProgId == 0) {
		return x, nil
	}
	x.attached, x.id = true, xa.ProgId
	switch xa.AttachMode {
	case nl.XDP_ATTACHED_DRV:
		x.mode = "native"
	case nl.XDP_ATTACHED_SKB:
		x.mode = "generic"
	case nl.XDP_ATTACHED_HW:
		x.mode = "offload"
	case nl.XDP_ATTACHED_HW + 1: // XDP_ATTACHED_MULTI
		x.mode = "several modes"
	}
	x.name, x.ours = programIdentity(x.id)
	return x, nil
}

// programIdentity returns the name of the BPF program id and whether it is xdpndk's
// steering program: named "steer", with the maps "xsks" and "fault_config". Reading it needs
// CAP_SYS_ADMIN; without, the name is "".
func programIdentity(id uint32) (string, bool) {
	prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
	if err != nil {
		return "", false
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		return "", false
	}
	if info.Name != "steer" {
		return info.Name, false
	}
	ids, ok := info.MapIDs()
	if !ok {
		return info.Name, false
	}
	seen := map[string]bool{}
	for _, mid := range ids {
		m, err := ebpf.NewMapFromID(mid)
		if err != nil {
			continue
		}
		if mi, err := m.Info(); err == nil {
			seen[mi.Name] = true
		}
		m.Close()
	}
	return info.Name, seen["xsks"] && seen["fault_config"]
}

// checkXDPFree fails when an XDP program is attached to the interface already: exitBusy
// when it is xdpndk's (a running ndkpeer serve, named with its pid when its stats socket
// answers, or another xdpndk process), exitOtherXDP otherwise.
func checkXDPFree(ifname string) error {
	x, err := attachedXDP(ifname)
	if err != nil || !x.attached {
		return nil
	}
	if pid, p, ok := findServer(ifname); ok {
		return fail(exitBusy, "%s is in use by ndkpeer serve (pid %d, UDP port %d): stop it, or run on another interface (one xdpndk process per interface)", ifname, pid, p)
	}
	if x.ours {
		return fail(exitBusy, "%s is in use by another xdpndk process (its XDP program, id %d, is attached): stop it, or run on another interface (one xdpndk process per interface)", ifname, x.id)
	}
	name := x.name
	if name == "" {
		name = "unknown name"
	}
	return fail(exitOtherXDP, "%s already has an XDP program that is not xdpndk's (id %d, %s, %s mode): remove it ('ip link set dev %s xdp off', or stop its owner) or use another interface",
		ifname, x.id, name, x.mode, ifname)
}

// kernelRelease returns the running kernel's release and its major and minor version.
func kernelRelease() (string, int, int) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown", 0, 0
	}
	rel := unix.ByteSliceToString(u.Release[:])
	var major, minor int
	parts := strings.SplitN(rel, ".", 3)
	if len(parts) >= 2 {
		major, minor = leadingInt(parts[0]), leadingInt(parts[1])
	}
	return rel, major, minor
}

// leadingInt returns the number the decimal digits at the start of s make (0 if none).
func leadingInt(s string) int {
	n := 0
	for i := 0; i < len(s) && s[i] >= '0' && s[i] <= '9' && n < 1e6; i++ {
		n = n*10 + int(s[i]-'0')
	}
	return n
}

// ethtoolDriver returns ETHTOOL_GDRVINFO's driver name, version and bus address.
func ethtoolDriver(ifname string) (driver, version, bus string, err error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", "", "", fmt.Errorf("socket for ethtool: %w", err)
	}
	defer unix.Close(fd)
	info, err := unix.IoctlGetEthtoolDrvinfo(fd, ifname)
	if err != nil {
		return "", "", "", fmt.Errorf("ETHTOOL_GDRVINFO on %s: %w", ifname, err)
	}
	return unix.ByteSliceToString(info.Driver[:]), unix.ByteSliceToString(info.Version[:]), unix.ByteSliceToString(info.Bus_info[:]), nil
}
