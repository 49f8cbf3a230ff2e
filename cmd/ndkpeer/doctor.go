//go:build linux

package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/xdpndk/xdpndk/xdp"
	"golang.org/x/sys/unix"
)

// doctor checks whether this host can run ndkpeer on an interface: one line per check, a
// verdict, and the fix when it is not ok.

const doctorUsage = "-i IFACE [--port N] [--json]"

// Verdicts of a check.
const (
	verdictOK   = "ok"
	verdictWarn = "warn"
	verdictFail = "fail"
)

// check is one line of doctor's report.
type check struct {
	Name    string `json:"check"`
	Verdict string `json:"verdict"`
	Detail  string `json:"detail"`
	Fix     string `json:"fix,omitempty"`
}

func doctorCmd(args []string) int {
	fs := newFlagSet("doctor", doctorUsage, os.Stderr)
	var iface string
	fs.StringVar(&iface, "i", "", "the `IFACE` to check (required)")
	fs.StringVar(&iface, "interface", "", "same as -i")
	port := fs.Uint("port", xdp.DefaultPort, "the UDP `port` ndkpeer will use")
	jsonOut := fs.Bool("json", false, "print the checks as one JSON document")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) > 0 || iface == "" || *port == 0 || *port > 65535 {
		fmt.Fprintf(os.Stderr, "ndkpeer doctor: usage: ndkpeer doctor %s\n", doctorUsage)
		return exitUsage
	}
	checks, code := diagnose(iface, uint16(*port))
	printChecks(os.Stdout, iface, uint16(*port), checks, *jsonOut)
	return code
}

// printChecks writes the report.
func printChecks(w io.Writer, iface string, port uint16, checks []check, jsonOut bool) {
	fails, warns := 0, 0
	for _, c := range checks {
		switch c.Verdict {
		case verdictFail:
			fails++
		case verdictWarn:
			warns++
		}
	}
	if jsonOut {
		writeJSON(w, struct {
			Interface string  `json:"interface"`
			Port      uint16  `json:"port"`
			Checks    []check `json:"checks"`
			Failures  int     `json:"failures"`
			Warnings  int     `json:"warnings"`
		}{iface, port, checks, fails, warns})
		return
	}
	fmt.Fprintf(w, "ndkpeer doctor: %s, UDP port %d\n", iface, port)
	for _, c := range checks {
		fmt.Fprintf(w, "  %-4s  %-12s %s\n", c.Verdict, c.Name, c.Detail)
		if c.Fix != "" {
			fmt.Fprintf(w, "  %-4s  %-12s fix: %s\n", "", "", c.Fix)
		}
	}
	fmt.Fprintf(w, "doctor: %d failed, %d warnings, %d ok\n", fails, warns, len(checks)-fails-warns)
}

// singleFrameMTU is the largest MTU whose frames fit one UMEM frame: the frame less
// XDP_PACKET_HEADROOM (256) less an Ethernet header with a VLAN tag (18), as xdp.Open
// reckons; above it AF_XDP multi-buffer is needed.
const singleFrameMTU = umemFrameSize - 256 - 18

// serveUMEM is what ndkpeer serve pins with its defaults: the frames and the 64 MiB heap.
var serveUMEM = umemBytes(1, 64<<20)

// diagnose runs every check on iface and returns them with doctor's exit code.
func diagnose(iface string, port uint16) ([]check, int) {
	var cs []check
	add := func(name, verdict, detail, fix string) {
		cs = append(cs, check{Name: name, Verdict: verdict, Detail: detail, Fix: fix})
	}
	rel, major, minor := kernelRelease()
	privs, perr := currentPrivileges()

	// privileges
	switch m := privs.missing(); {
	case perr != nil:
		add("privileges", verdictFail, perr.Error(), "run ndkpeer as root")
	case len(m) == 0 && privs.euid == 0:
		add("privileges", verdictOK, "root, with CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF", "")
	case len(m) == 0:
		add("privileges", verdictOK, fmt.Sprintf("uid %d with CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF", privs.euid), "")
	default:
		add("privileges", verdictFail, fmt.Sprintf("uid %d, missing %s", privs.euid, strings.Join(m, ", ")),
			"run it with sudo, or: setcap cap_net_admin,cap_net_raw,cap_bpf,cap_ipc_lock+ep "+executable())
	}

	// kernel
	switch {
	case major > 6 || (major == 6 && minor >= 6):
		add("kernel", verdictOK, rel+": AF_XDP multi-buffer (6.6+), bpf_link XDP attach, need_wakeup", "")
	case major > 5 || (major == 5 && minor >= 9):
		add("kernel", verdictWarn, fmt.Sprintf("%s: no AF_XDP multi-buffer (6.6+): an MTU over %d bytes cannot be used", rel, singleFrameMTU),
			fmt.Sprintf("upgrade to Linux 6.6 or later, or keep the MTU at %d or below", singleFrameMTU))
	default:
		add("kernel", verdictFail, rel+": older than 5.9 (bpf_link XDP attach)", "upgrade to Linux 6.6 or later")
	}

	// interface
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		add("interface", verdictFail, fmt.Sprintf("no interface %q in this network namespace", iface), "name one that 'ip -br link' lists")
		return cs, exitNoInterface
	}
	addrs, _ := ifi.Addrs()
	var ip string
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			ip = n.IP.String()
			break
		}
	}
	if ip == "" {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.IsGlobalUnicast() {
				ip = n.IP.String()
				break
			}
		}
	}
	switch {
	case ifi.Flags&net.FlagUp == 0:
		add("interface", verdictFail, fmt.Sprintf("%s (index %d) is down", iface, ifi.Index), "ip link set dev "+iface+" up")
	case ip == "":
		add("interface", verdictFail, fmt.Sprintf("%s has no IPv4 or global IPv6 address", iface), "ip addr add ADDR/PREFIX dev "+iface)
	case len(ifi.HardwareAddr) != 6:
		add("interface", verdictFail, fmt.Sprintf("%s is not Ethernet", iface), "use an Ethernet interface")
	default:
		add("interface", verdictOK, fmt.Sprintf("%s index %d, up, %s, MAC %s", iface, ifi.Index, ip, ifi.HardwareAddr), "")
	}

	// driver
	if drv, ver, bus, err := ethtoolDriver(iface); err != nil {
		add("driver", verdictWarn, fmt.Sprintf("not reported (%v)", err), "")
	} else {
		d := drv
		if ver != "" {
			d += " " + ver
		}
		if bus != "" && bus != "N/A" {
			d += ", bus " + bus
		}
		add("driver", verdictOK, d, "")
	}

	// XDP modes and zero-copy
	info, nerr := xdp.QueryNetdev(ifi.Index)
	switch {
	case nerr != nil:
		add("xdp", verdictWarn, fmt.Sprintf("the kernel did not say what the driver supports (%v)", nerr), "Linux 6.3+ reports it; ndkpeer tries native, then generic XDP")
	case info.XDPFeatures&(xdp.XDPActBasic|xdp.XDPActRedirect) == xdp.XDPActBasic|xdp.XDPActRedirect:
		add("xdp", verdictOK, fmt.Sprintf("native XDP with XDP_REDIRECT (features %#x)", info.XDPFeatures), "")
	default:
		add("xdp", verdictWarn, fmt.Sprintf("no native XDP_REDIRECT in the driver (features %#x): generic (SKB) mode, slower", info.XDPFeatures),
			"use a NIC whose driver has native XDP (mlx5, ice, i40e, ixgbe, igc, virtio_net, veth, ...)")
	}
	switch {
	case nerr != nil:
		add("zero-copy", verdictWarn, "unknown: ndkpeer tries zero-copy, then copy mode, and says which it got", "")
	case info.XDPFeatures&xdp.XDPActXSKZeroCopy != 0:
		add("zero-copy", verdictOK, fmt.Sprintf("AF_XDP zero-copy supported (up to %d descriptors per packet)", info.ZCMaxSegs), "")
	default:
		add("zero-copy", verdictWarn, "no AF_XDP zero-copy in this driver: copy mode, the kernel copies every packet", "a NIC driver with AF_XDP zero-copy (mlx5, ice, i40e, ixgbe, igc, ...) for the best speed")
	}

	// queues and ntuple
	queues := rxQueues(iface)
	if queues <= 1 {
		add("queues", verdictOK, "1 RX queue: ndkpeer serves it", "")
	} else {
		frames, _ := xdp.DefaultQueueSizes(queues)
		add("queues", verdictOK, fmt.Sprintf("%d RX queues: ndkpeer serves every one (one engine polls %d AF_XDP sockets, %d frames each)", queues, queues, frames), "")
	}
	ntuple, ferr := xdp.NtupleEnabled(iface)
	switch {
	case ferr != nil:
		add("ntuple", verdictOK, fmt.Sprintf("not reported (%v); needed only to serve one queue (--queue with --steer ntuple)", ferr), "")
	case ntuple:
		add("ntuple", verdictOK, "n-tuple filters on: --queue Q --steer ntuple can serve one queue", "")
	default:
		add("ntuple", verdictOK, "n-tuple filters off: not needed while every queue is served", "")
	}

	// MTU and multi-buffer
	kernelSG := major > 6 || (major == 6 && minor >= 6)
	switch {
	case ifi.MTU <= singleFrameMTU:
		add("mtu", verdictOK, fmt.Sprintf("MTU %d: a frame fits one %d-byte UMEM frame, no multi-buffer needed", ifi.MTU, umemFrameSize), "")
	case !kernelSG:
		add("mtu", verdictFail, fmt.Sprintf("MTU %d needs AF_XDP multi-buffer, which this kernel lacks", ifi.MTU),
			fmt.Sprintf("ip link set dev %s mtu %d, or Linux 6.6+", iface, singleFrameMTU))
	case nerr == nil && info.XDPFeatures&xdp.XDPActRxSG == 0:
		add("mtu", verdictWarn, fmt.Sprintf("MTU %d needs multi-buffer XDP, which the driver does not advertise: native attach may be refused (generic mode is used then)", ifi.MTU),
			fmt.Sprintf("ip link set dev %s mtu %d", iface, singleFrameMTU))
	default:
		add("mtu", verdictOK, fmt.Sprintf("MTU %d: frames span several UMEM frames, AF_XDP multi-buffer (kernel and driver have it)", ifi.MTU), "")
	}

	// memlock
	switch lim, err := memlockLimit(); {
	case privs.has(capIPCLock):
		add("memlock", verdictOK, fmt.Sprintf("CAP_IPC_LOCK: pinning the UMEM (%s for serve) is not limited", humanBytes(serveUMEM)), "")
	case err != nil:
		add("memlock", verdictWarn, err.Error(), "")
	case lim == unix.RLIM_INFINITY:
		add("memlock", verdictOK, "RLIMIT_MEMLOCK unlimited", "")
	case lim < serveUMEM:
		add("memlock", verdictFail, fmt.Sprintf("RLIMIT_MEMLOCK %s, below the %s the server's UMEM pins", humanBytes(lim), humanBytes(serveUMEM)),
			"ulimit -l unlimited (LimitMEMLOCK=infinity in a systemd unit), or grant CAP_IPC_LOCK")
	default:
		add("memlock", verdictOK, fmt.Sprintf("RLIMIT_MEMLOCK %s, enough for the server's %s", humanBytes(lim), humanBytes(serveUMEM)), "")
	}

	// huge pages
	free, size := hugePages()
	thp := transparentHugePages()
	switch {
	case size > 0 && free*size >= serveUMEM:
		add("hugepages", verdictOK, fmt.Sprintf("%d free hugetlb pages of %s: the UMEM uses them", free, humanBytes(size)), "")
	case thp == "always" || thp == "madvise":
		add("hugepages", verdictOK, fmt.Sprintf("no hugetlb pages free (%d), transparent huge pages %q back the UMEM", free, thp), "")
	default:
		add("hugepages", verdictWarn, fmt.Sprintf("no hugetlb pages free and transparent huge pages %q: 4 KiB pages, more TLB misses", thp),
			fmt.Sprintf("reserve them: echo %d > /proc/sys/vm/nr_hugepages", (serveUMEM+(2<<20)-1)/(2<<20)))
	}

	// XDP program already attached
	x, err := attachedXDP(iface)
	switch {
	case err != nil:
		add("xdp-program", verdictWarn, err.Error(), "")
	case !x.attached:
		add("xdp-program", verdictOK, "no XDP program attached: free for ndkpeer", "")
	default:
		if pid, p, ok := findServer(iface); ok {
			add("xdp-program", verdictWarn, fmt.Sprintf("in use by ndkpeer serve (pid %d, UDP port %d): another ndkpeer cannot run on %s meanwhile", pid, p, iface), "")
		} else if x.ours {
			add("xdp-program", verdictWarn, fmt.Sprintf("in use by another xdpndk process (XDP program id %d)", x.id), "stop it to run ndkpeer here")
		} else {
			name := x.name
			if name == "" {
				name = "name unreadable"
			}
			add("xdp-program", verdictFail, fmt.Sprintf("another XDP program is attached (id %d, %s, %s mode)", x.id, name, x.mode),
				fmt.Sprintf("ip link set dev %s xdp off (or stop the program's owner), or use another interface", iface))
		}
	}

	// the UDP port
	if kernelUDPListens(port) {
		add("udp-port", verdictWarn, fmt.Sprintf("a kernel socket is bound to UDP port %d: it stops seeing that port's packets on %s while ndkpeer runs", port, iface), "pick another --port on both hosts")
	} else {
		add("udp-port", verdictOK, fmt.Sprintf("UDP port %d: no kernel socket bound; open it in firewalls between the hosts", port), "")
	}

	code := exitOK
	for _, c := range cs {
		if c.Verdict == verdictFail {
			code = exitFailed
		}
	}
	return cs, code
}

// hugePages returns the free hugetlb pages and their size (/proc/meminfo).
func hugePages() (free, size uint64) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		v, _ := strconv.ParseUint(fields[1], 10, 64)
		switch fields[0] {
		case "HugePages_Free:":
			free = v
		case "Hugepagesize:":
			size = v << 10 // kB
		}
	}
	return free, size
}

// transparentHugePages returns the selected transparent huge page mode ("always",
// "madvise", "never"), or "unknown".
func transparentHugePages() string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return "unknown"
	}
	s := string(b)
	if i := strings.IndexByte(s, '['); i >= 0 {
		if j := strings.IndexByte(s[i:], ']'); j > 0 {
			return s[i+1 : i+j]
		}
	}
	return "unknown"
}

// kernelUDPListens reports whether a kernel UDP socket of this network namespace is bound
// to port (/proc/net/udp and udp6).
func kernelUDPListens(port uint16) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, file := range []string{"/proc/net/udp", "/proc/net/udp6"} {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) > 1 && strings.HasSuffix(fields[1], want) {
				f.Close()
				return true
			}
		}
		f.Close()
	}
	return false
}
