//go:build linux

package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/xdpndk/xdpndk/xdp"
)

// doctor checks whether this host can run ndkpeer on an interface: one line per check, a
// verdict, and the fix when it is not ok.

const doctorUsage = "-i IFACE [--port N] [--queue Q] [--cpus LIST] [--busy-poll DURATION] [--json]"

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
	var opts doctorOptions
	fs.StringVar(&opts.iface, "i", "", "the `IFACE` to check (required)")
	fs.StringVar(&opts.iface, "interface", "", "same as -i")
	port := fs.Uint("port", xdp.DefaultPort, "the UDP `port` ndkpeer will use")
	fs.IntVar(&opts.queue, "queue", -1, "the one `QUEUE` ndkpeer will serve (its --queue); default: every RX queue")
	cpus := fs.String("cpus", "", "the `LIST` of CPUs the engine will run on (taskset -c LIST ndkpeer ...), e.g. 2 or 2-3; default: this process's CPU affinity when it is narrower than the online CPUs")
	fs.DurationVar(&opts.busyPoll, "busy-poll", 0, "the --busy-poll `DURATION` ndkpeer will run with (0: none)")
	jsonOut := fs.Bool("json", false, "print the checks as one JSON document")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) > 0 || opts.iface == "" || *port == 0 || *port > 65535 || opts.queue < -1 || opts.queue > 4095 || opts.busyPoll < 0 || opts.busyPoll > time.Second {
		fmt.Fprintf(os.Stderr, "ndkpeer doctor: usage: ndkpeer doctor %s\n", doctorUsage)
		return exitUsage
	}
	opts.port = uint16(*port)
	if opts.cpus, opts.cpusFrom, err = engineCPUs("/", *cpus, processAffinity()); err != nil {
		fmt.Fprintf(os.Stderr, "ndkpeer doctor: %v\n", err)
		return exitUsage
	}
	checks, code := diagnose(opts)
	printChecks(os.Stdout, opts.iface, opts.port, checks, *jsonOut)
	return code
}

// doctorOptions are what doctor checks: the interface and port, and how ndkpeer will run
// there (the queue served, the engine's CPUs, busy polling).
type doctorOptions struct {
	iface    string
	port     uint16
	queue    int           // --queue, or -1: every queue
	cpus     cpuSet        // the engine's CPUs; nil: not known
	cpusFrom string        // where cpus came from
	busyPoll time.Duration // --busy-poll
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

// serveHeap is the UMEM heap ndkpeer serve allocates test buffers from.
const serveHeap = 64 << 20

// diagnose runs every check on iface and returns them with doctor's exit code.
func diagnose(o doctorOptions) ([]check, int) {
	iface, port := o.iface, o.port
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
	drv, ver, bus, err := ethtoolDriver(iface)
	if err != nil {
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
		add("xdp", verdictOK, "native XDP with XDP_REDIRECT; features "+describeXDPFeatures(info.XDPFeatures), "")
	default:
		add("xdp", verdictWarn, "no native XDP_REDIRECT in the driver (features "+describeXDPFeatures(info.XDPFeatures)+"): generic (SKB) mode, slower",
			"use a NIC whose driver has native XDP (mlx5, ice, i40e, ixgbe, igc, virtio_net, veth, ...)")
	}
	switch {
	case nerr != nil:
		add("zero-copy", verdictWarn, "unknown: ndkpeer tries zero-copy, then copy mode, and says which it got", "")
	case info.XDPFeatures&xdp.XDPActXSKZeroCopy != 0:
		c := zeroCopyCheck(info.ZCMaxSegs, ifi.MTU, iface)
		cs = append(cs, c)
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
	served := queues
	if o.queue >= 0 {
		served = 1
	}
	tin := &tuningInput{root: "/", iface: iface, driver: drv, queues: queues, queue: o.queue,
		cpus: o.cpus, cpusFrom: o.cpusFrom, busyPoll: o.busyPoll, umem: umemBytes(served, serveHeap)}
	ntuple, ferr := xdp.NtupleEnabled(iface)
	switch {
	case ferr != nil:
		add("ntuple", verdictOK, fmt.Sprintf("not reported (%v); needed only to serve one queue (--queue with --steer ntuple)", ferr), "")
	case ntuple:
		add("ntuple", verdictOK, "n-tuple filters on: --queue Q --steer ntuple can serve one queue", "")
	default:
		add("ntuple", verdictOK, "n-tuple filters off: not needed while every queue is served", "")
	}

	cs = append(cs, checkIRQAffinity(tin), checkBusyPoll(tin))

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

	// memlock and huge pages
	lim, lerr := memlockLimit()
	cs = append(cs, memlockCheck(privs.has(capIPCLock), lim, lerr, tin.umem), checkHugePages(tin))

	// the CPUs
	cs = append(cs, checkCPUs(tin), checkCPUFreq(tin))

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
