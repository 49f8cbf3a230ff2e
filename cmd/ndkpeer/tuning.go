//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// This file holds doctor's tuning checks: the settings docs/TUNING.md says matter for
// latency (the CPUs the engine runs on, their frequency governor, the IRQs of the served
// queues, busy polling, huge pages, the memlock limit). They read /proc and /sys under a
// root directory, "/" on a host and a fake tree in tests, and never fail the doctor: what
// they find is ok or a warning.

// tuningInput is what the tuning checks look at.
type tuningInput struct {
	root     string        // file-system root of /proc and /sys: "/" on a host
	iface    string        // the interface
	driver   string        // its driver (ETHTOOL_GDRVINFO), "" when unknown
	queues   int           // RX queues the interface uses
	queue    int           // the one queue served (--queue), or -1: every queue
	cpus     cpuSet        // the CPUs the engine runs on; nil: not known
	cpusFrom string        // where cpus came from, for the report
	busyPoll time.Duration // the --busy-poll ndkpeer will run with (0: none)
	umem     uint64        // bytes the adapter's UMEM pins
}

// path returns p (absolute, as on a host) under the input's root.
func (in *tuningInput) path(p string) string { return filepath.Join(in.root, p) }

// readTrim returns the file's first line, trimmed; ok is false when it cannot be read.
func readTrim(path string) (string, bool) {
	b, err := readBounded(path, 64<<10)
	if err != nil {
		return "", false
	}
	s, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(s), true
}

// readBounded reads at most limit bytes of a file.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

// readInt returns the decimal integer a sysfs or procfs file holds.
func readInt(path string) (int64, bool) {
	s, ok := readTrim(path)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}

// cpuSet is a sorted set of CPU numbers without duplicates.
type cpuSet []int

// maxCPUs bounds a CPU list: Linux's NR_CPUS is at most 8192.
const maxCPUs = 8192

// parseCPUList parses a CPU list as the kernel writes one (smp_affinity_list,
// /sys/devices/system/cpu/online, taskset -c): "0-3,8,10-11"; "" and "(null)" are the
// empty set.
func parseCPUList(s string) (cpuSet, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "(null)" {
		return cpuSet{}, nil
	}
	var set cpuSet
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 || a >= maxCPUs {
			return nil, fmt.Errorf("CPU list %q: %q is not a CPU number below %d", s, lo, maxCPUs)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b >= maxCPUs {
				return nil, fmt.Errorf("CPU list %q: range %q", s, part)
			}
		}
		for c := a; c <= b; c++ {
			set = append(set, c)
		}
		if len(set) > maxCPUs {
			return nil, fmt.Errorf("CPU list %q: more than %d CPUs", s, maxCPUs)
		}
	}
	slices.Sort(set)
	return slices.Compact(set), nil
}

// String formats the set as a CPU list ("0-3,8").
func (s cpuSet) String() string {
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(s[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(s[j]))
		}
		i = j + 1
	}
	return b.String()
}

// subsetOf reports whether every CPU of s is in t.
func (s cpuSet) subsetOf(t cpuSet) bool {
	for _, c := range s {
		if _, ok := slices.BinarySearch(t, c); !ok {
			return false
		}
	}
	return true
}

// cpusWord is "CPU" or "CPUs" for the set.
func (s cpuSet) cpusWord() string {
	if len(s) == 1 {
		return "CPU " + s.String()
	}
	return "CPUs " + s.String()
}

// engineCPUs decides which CPUs the doctor takes the engine to run on: the --cpus list
// when given, else the process's own CPU affinity (sched_getaffinity) when it is narrower
// than the online CPUs, as under `taskset -c 2 ndkpeer doctor`, which is how ndkpeer serve
// would be pinned. nil means not known.
func engineCPUs(root, flag string, affinity cpuSet) (cpuSet, string, error) {
	if flag != "" {
		s, err := parseCPUList(flag)
		if err != nil {
			return nil, "", fmt.Errorf("--cpus: %w", err)
		}
		if len(s) == 0 {
			return nil, "", errors.New("--cpus: no CPU named")
		}
		return s, "--cpus", nil
	}
	online, ok := readTrim(filepath.Join(root, "sys/devices/system/cpu/online"))
	if !ok || len(affinity) == 0 {
		return nil, "", nil
	}
	on, err := parseCPUList(online)
	if err != nil || !affinity.subsetOf(on) || len(affinity) >= len(on) {
		return nil, "", nil
	}
	return affinity, "taskset: this process's CPU affinity", nil
}

// processAffinity returns the CPUs this process may run on.
func processAffinity() cpuSet {
	var m unix.CPUSet
	if err := unix.SchedGetaffinity(0, &m); err != nil {
		return nil
	}
	var s cpuSet
	for c := 0; c < len(m)*64 && c < maxCPUs; c++ {
		if m.IsSet(c) {
			s = append(s, c)
		}
	}
	return s
}

// checkCPUs reports where the doctor takes the engine to run and whether those CPUs are
// isolated (isolcpus, nohz_full).
func checkCPUs(in *tuningInput) check {
	c := check{Name: "cpus", Verdict: verdictOK}
	isolated, _ := readTrim(in.path("sys/devices/system/cpu/isolated"))
	iso, _ := parseCPUList(isolated)
	nohz, _ := readTrim(in.path("sys/devices/system/cpu/nohz_full"))
	nz, _ := parseCPUList(nohz)
	online, _ := readTrim(in.path("sys/devices/system/cpu/online"))
	on, oerr := parseCPUList(online)
	isoText := func(s cpuSet) string {
		if len(s) == 0 {
			return "none"
		}
		return s.String()
	}
	if in.cpus == nil {
		c.Detail = fmt.Sprintf("not told where the engine runs (--cpus LIST, or run the doctor under ndkpeer's taskset); isolated: %s, nohz_full: %s",
			isoText(iso), isoText(nz))
		return c
	}
	if oerr == nil && len(on) > 0 && !in.cpus.subsetOf(on) {
		c.Verdict = verdictWarn
		c.Detail = fmt.Sprintf("the engine's %s (%s) are not all online (online: %s)", in.cpus.cpusWord(), in.cpusFrom, on)
		c.Fix = "name online CPUs: taskset -c CPU ndkpeer serve ..."
		return c
	}
	c.Detail = fmt.Sprintf("engine on %s (%s); isolated: %s, nohz_full: %s", in.cpus.cpusWord(), in.cpusFrom, isoText(iso), isoText(nz))
	if !in.cpus.subsetOf(iso) {
		c.Detail += "; not isolated: other tasks may share them (docs/TUNING.md, CPU isolation)"
	}
	return c
}

// checkCPUFreq reports the frequency governor of every CPU: "performance" keeps a polling
// core at speed.
func checkCPUFreq(in *tuningInput) check {
	c := check{Name: "cpufreq", Verdict: verdictOK}
	cpus := listCPUs(in.path("sys/devices/system/cpu"))
	byGov := map[string]cpuSet{}
	var driver string
	for _, n := range cpus {
		dir := in.path(fmt.Sprintf("sys/devices/system/cpu/cpu%d/cpufreq", n))
		g, ok := readTrim(filepath.Join(dir, "scaling_governor"))
		if !ok || g == "" {
			continue
		}
		byGov[g] = append(byGov[g], n)
		if driver == "" {
			driver, _ = readTrim(filepath.Join(dir, "scaling_driver"))
		}
	}
	if len(byGov) == 0 {
		c.Detail = fmt.Sprintf("no cpufreq on any of the %d CPUs: this kernel does not set their frequency (a virtual machine, or no cpufreq driver loaded); the hypervisor or firmware does", len(cpus))
		return c
	}
	govs := make([]string, 0, len(byGov))
	for g := range byGov {
		govs = append(govs, g)
	}
	slices.Sort(govs)
	drv := ""
	if driver != "" {
		drv = ", driver " + driver
	}
	if len(govs) == 1 && govs[0] == "performance" {
		c.Detail = fmt.Sprintf("governor performance on all %d CPUs with cpufreq%s", len(byGov["performance"]), drv)
		return c
	}
	parts := make([]string, 0, len(govs))
	for _, g := range govs {
		parts = append(parts, fmt.Sprintf("%s on %s", g, byGov[g].cpusWord()))
	}
	c.Verdict = verdictWarn
	c.Detail = "governor " + strings.Join(parts, ", ") + drv + ": a core that idles between packets may be slow to come back to speed"
	if in.cpus != nil && in.cpus.subsetOf(byGov["performance"]) {
		c.Detail += fmt.Sprintf(" (the engine's %s are at performance)", in.cpus.cpusWord())
	}
	c.Fix = "cpupower frequency-set -g performance, or: echo performance | tee /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor"
	return c
}

// listCPUs returns the numbers of the cpuN directories under dir, sorted.
func listCPUs(dir string) []int {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var cpus []int
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "cpu")
		if !ok || rest == "" {
			continue
		}
		n, err := strconv.Atoi(rest)
		if err != nil || n < 0 || n >= maxCPUs {
			continue
		}
		cpus = append(cpus, n)
	}
	slices.Sort(cpus)
	return cpus
}

// irq is one interrupt of the interface's device.
type irq struct {
	num       int
	name      string
	queue     int    // the queue it serves by the number its name ends in, or -1
	affinity  cpuSet // smp_affinity_list: where the kernel may run it
	effective cpuSet // effective_affinity_list: where it runs now (nil: not reported)
}

// procInterrupts parses /proc/interrupts into IRQ number -> name (the last field of the
// line: the handler's name). Lines of named interrupts (NMI, LOC, ...) are skipped.
func procInterrupts(path string) (map[int]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	names := map[int]string{}
	for lines := 0; sc.Scan() && lines < 1<<16; lines++ {
		label, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(label))
		if err != nil || n < 0 {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		names[n] = fields[len(fields)-1]
	}
	return names, sc.Err()
}

// adminIRQWords mark a device's interrupts that serve no queue (configuration, mailbox,
// management, asynchronous events).
var adminIRQWords = []string{"config", "async", "misc", "mgmnt", "mgmt", "ctrl", "cmd", "event", "fdir", "mbx", "aer", "pme"}

// irqQueue returns the queue an interrupt of interface iface serves by its name, or -1:
// the number the name ends in (before an "@pci:..." suffix, and not counting the
// interface's own name, which ends in a digit as often as not), as in "virtio2-input.0",
// "eth1-TxRx-3", "ice-eth1-TxRx-3", "mlx5_comp3@pci:0000:3b:00.0"; a name with a
// management word, or the interface's name alone (ixgbe's link vector), serves none.
func irqQueue(name, iface string) int {
	base, _, _ := strings.Cut(name, "@")
	if iface != "" {
		base = strings.ReplaceAll(base, iface, "")
	}
	lower := strings.ToLower(base)
	for _, w := range adminIRQWords {
		if strings.Contains(lower, w) {
			return -1
		}
	}
	i := len(base)
	for i > 0 && base[i-1] >= '0' && base[i-1] <= '9' {
		i--
	}
	if i == len(base) || len(base)-i > 5 {
		return -1
	}
	q, _ := strconv.Atoi(base[i:])
	return q
}

// interfaceIRQs returns the queue interrupts of the interface's device: its MSI vectors
// (/sys/class/net/IF/device/msi_irqs, or the parent device's for virtio_net, whose device
// is a virtio device on a PCI function) named in /proc/interrupts, or else the interrupts
// whose name holds the interface's name. virtual is true when the interface has no device
// (veth, bridges, ...). all counts the device's interrupts, queue or not.
func interfaceIRQs(in *tuningInput) (irqs []irq, all int, virtual bool, err error) {
	dev := in.path("sys/class/net/" + in.iface + "/device")
	if _, err := os.Stat(dev); err != nil {
		return nil, 0, true, nil
	}
	names, err := procInterrupts(in.path("proc/interrupts"))
	if err != nil {
		return nil, 0, false, fmt.Errorf("read /proc/interrupts: %w", err)
	}
	var nums []int
	msi := filepath.Join(dev, "msi_irqs")
	if _, err := os.Stat(msi); err != nil {
		if real, err := filepath.EvalSymlinks(dev); err == nil {
			msi = filepath.Join(filepath.Dir(real), "msi_irqs")
		}
	}
	if ents, err := os.ReadDir(msi); err == nil {
		for _, e := range ents {
			if n, err := strconv.Atoi(e.Name()); err == nil && n >= 0 {
				nums = append(nums, n)
			}
		}
	} else {
		for n, name := range names {
			if strings.Contains(name, in.iface) {
				nums = append(nums, n)
			}
		}
	}
	slices.Sort(nums)
	for _, n := range nums {
		name, ok := names[n]
		if !ok {
			continue
		}
		all++
		q := irqQueue(name, in.iface)
		if q < 0 {
			continue
		}
		r := irq{num: n, name: name, queue: q}
		dir := in.path(fmt.Sprintf("proc/irq/%d", n))
		if s, ok := readTrim(filepath.Join(dir, "smp_affinity_list")); ok {
			r.affinity, _ = parseCPUList(s)
		}
		if s, ok := readTrim(filepath.Join(dir, "effective_affinity_list")); ok {
			r.effective, _ = parseCPUList(s)
		}
		irqs = append(irqs, r)
	}
	return irqs, all, false, nil
}

// servedIRQs keeps the interrupts of the queues ndkpeer serves: --queue's, or every queue
// the interface uses. When no interrupt's number matches them (a driver that numbers its
// vectors otherwise) it keeps them all.
func servedIRQs(irqs []irq, queue, queues int) []irq {
	var out []irq
	for _, r := range irqs {
		if (queue >= 0 && r.queue == queue) || (queue < 0 && r.queue < max(queues, 1)) {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return irqs
	}
	return out
}

// processRunning returns the pid of a process whose comm is name (/proc/PID/comm), or 0.
func processRunning(root, name string) int {
	ents, err := os.ReadDir(filepath.Join(root, "proc"))
	if err != nil {
		return 0
	}
	for i, e := range ents {
		if i >= 1<<16 {
			break
		}
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		if comm, ok := readTrim(filepath.Join(root, "proc", e.Name(), "comm")); ok && comm == name {
			return pid
		}
	}
	return 0
}

// describeIRQ is "38 virtio2-input.0 (queue 0) on 0-1 (now 1)".
func describeIRQ(r irq) string {
	s := fmt.Sprintf("%d %s (queue %d) on %s", r.num, r.name, r.queue, r.affinity)
	if len(r.affinity) == 0 {
		s = fmt.Sprintf("%d %s (queue %d), affinity unreadable", r.num, r.name, r.queue)
	}
	if len(r.effective) > 0 && !slices.Equal(r.effective, r.affinity) {
		s += fmt.Sprintf(" (now %s)", r.effective)
	}
	return s
}

// listSome joins at most n items and says how many more there are.
func listSome(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, "; ")
	}
	return strings.Join(items[:n], "; ") + fmt.Sprintf("; and %d more", len(items)-n)
}

// checkIRQAffinity checks that the interrupts of the served queues run on the engine's
// CPUs (or, when those are not known, each on one CPU), and that irqbalance does not move
// them.
func checkIRQAffinity(in *tuningInput) check {
	c := check{Name: "irq-affinity", Verdict: verdictOK}
	irqs, all, virtual, err := interfaceIRQs(in)
	switch {
	case virtual:
		c.Detail = fmt.Sprintf("no device IRQs: %s is a virtual interface (veth, ...); nothing to pin", in.iface)
		return c
	case err != nil:
		c.Verdict, c.Detail = verdictWarn, err.Error()
		return c
	case len(irqs) == 0:
		c.Verdict = verdictWarn
		c.Detail = fmt.Sprintf("found no queue IRQs of %s (%d device IRQs in /proc/interrupts, none named for a queue)", in.iface, all)
		c.Fix = "find them in /proc/interrupts and pin each to the engine's core: echo CPU > /proc/irq/N/smp_affinity_list"
		return c
	}
	served := servedIRQs(irqs, in.queue, in.queues)
	var wrong []irq
	for _, r := range served {
		if in.cpus != nil && (len(r.affinity) == 0 || !r.affinity.subsetOf(in.cpus)) {
			wrong = append(wrong, r)
		}
		if in.cpus == nil && len(r.affinity) != 1 {
			wrong = append(wrong, r)
		}
	}
	balancer := processRunning(in.root, "irqbalance")
	which := "every queue's"
	if in.queue >= 0 {
		which = fmt.Sprintf("queue %d's", in.queue)
	}
	if len(wrong) == 0 && balancer == 0 {
		descs := make([]string, len(served))
		for i, r := range served {
			descs[i] = describeIRQ(r)
		}
		if in.cpus != nil {
			c.Detail = fmt.Sprintf("%s IRQs on the engine's %s: %s", which, in.cpus.cpusWord(), listSome(descs, 4))
		} else {
			c.Detail = fmt.Sprintf("%s IRQs each on one CPU: %s; give --cpus to check they are the engine's", which, listSome(descs, 4))
		}
		return c
	}
	c.Verdict = verdictWarn
	var parts, nums []string
	if len(wrong) > 0 {
		descs := make([]string, len(wrong))
		for i, r := range wrong {
			descs[i] = describeIRQ(r)
			nums = append(nums, strconv.Itoa(r.num))
		}
		if in.cpus != nil {
			parts = append(parts, fmt.Sprintf("%d of %d served queue IRQs not on the engine's %s (%s): %s",
				len(wrong), len(served), in.cpus.cpusWord(), in.cpusFrom, listSome(descs, 3)))
		} else {
			parts = append(parts, fmt.Sprintf("%d of %d served queue IRQs may run on several CPUs: %s", len(wrong), len(served), listSome(descs, 3)))
		}
	}
	if balancer != 0 {
		parts = append(parts, fmt.Sprintf("irqbalance runs (pid %d) and moves IRQs", balancer))
	}
	c.Detail = strings.Join(parts, "; ")
	var fixes []string
	if len(nums) > 0 {
		cpu := "CPU"
		if in.cpus != nil {
			cpu = in.cpus.String()
		}
		fixes = append(fixes, fmt.Sprintf("for n in %s; do echo %s > /proc/irq/$n/smp_affinity_list; done", strings.Join(nums, " "), cpu))
		if in.cpus == nil {
			fixes[0] += " (CPU: the core that polls, taskset -c CPU ndkpeer ...; then doctor --cpus CPU)"
		}
	}
	if balancer != 0 {
		fixes = append(fixes, "systemctl stop irqbalance (or ban these IRQs: irqbalance --banirq=N)")
	}
	c.Fix = strings.Join(fixes, "; ")
	return c
}

// checkBusyPoll reports the busy-poll settings: the net.core.busy_poll and busy_read
// sysctls, and the interface's napi_defer_hard_irqs, gro_flush_timeout and threaded NAPI.
// It warns when they contradict each other or the --busy-poll ndkpeer will run with.
func checkBusyPoll(in *tuningInput) check {
	c := check{Name: "busy-poll", Verdict: verdictOK}
	poll, pok := readInt(in.path("proc/sys/net/core/busy_poll"))
	read, rok := readInt(in.path("proc/sys/net/core/busy_read"))
	netdir := in.path("sys/class/net/" + in.iface)
	deferIRQs, dok := readInt(filepath.Join(netdir, "napi_defer_hard_irqs"))
	flush, fok := readInt(filepath.Join(netdir, "gro_flush_timeout"))
	threaded, tok := readTrim(filepath.Join(netdir, "threaded"))
	val := func(v int64, ok bool, unit string) string {
		if !ok {
			return "absent"
		}
		return strconv.FormatInt(v, 10) + unit
	}
	values := fmt.Sprintf("net.core.busy_poll %s, busy_read %s; %s napi_defer_hard_irqs %s, gro_flush_timeout %s",
		val(poll, pok, " µs"), val(read, rok, " µs"), in.iface, val(deferIRQs, dok, ""), val(flush, fok, " ns"))
	if tok && threaded != "0" {
		values += ", threaded NAPI " + threaded + " (pin the napi/" + in.iface + "-* threads like IRQs)"
	}
	if _, err := os.Stat(filepath.Join(netdir, "device")); err != nil || in.driver == "veth" {
		c.Detail = values + fmt.Sprintf(": none of it applies to %s, a virtual interface (veth: NAPI id 0)", in.iface)
		return c
	}
	deferring := dok && fok && deferIRQs > 0 && flush > 0
	switch {
	case dok && deferIRQs > 0 && fok && flush == 0:
		c.Verdict = verdictWarn
		c.Detail = values + ": napi_defer_hard_irqs does nothing without gro_flush_timeout"
		c.Fix = fmt.Sprintf("with --busy-poll: echo 200000 > %s/gro_flush_timeout; without: echo 0 > %s/napi_defer_hard_irqs",
			"/sys/class/net/"+in.iface, "/sys/class/net/"+in.iface)
	case deferring && in.busyPoll == 0:
		c.Verdict = verdictWarn
		c.Detail = values + fmt.Sprintf(": interrupts are deferred for busy polling, and without it (doctor --busy-poll says the server uses it) a packet can wait up to %s for the timer", time.Duration(flush))
		c.Fix = fmt.Sprintf("run ndkpeer with --busy-poll (and doctor --busy-poll), or: echo 0 > /sys/class/net/%s/napi_defer_hard_irqs", in.iface)
	case !deferring && in.busyPoll > 0:
		c.Verdict = verdictWarn
		c.Detail = values + fmt.Sprintf(": --busy-poll %v without deferred interrupts: the interrupts keep running the queues beside the busy polling", in.busyPoll)
		c.Fix = fmt.Sprintf("echo 2 > /sys/class/net/%s/napi_defer_hard_irqs; echo 200000 > /sys/class/net/%s/gro_flush_timeout (preferred busy polling, docs/TUNING.md)", in.iface, in.iface)
	case deferring:
		c.Detail = values + fmt.Sprintf(": preferred busy polling (--busy-poll %v) with interrupts deferred up to %s", in.busyPoll, time.Duration(flush))
	default:
		c.Detail = values + ": interrupt-driven (no busy polling asked: doctor --busy-poll DURATION checks a server that will)"
	}
	return c
}

// meminfo is what /proc/meminfo says of hugetlb pages.
type meminfo struct {
	total, free, reserved uint64 // HugePages_Total, _Free, _Rsvd
	size                  uint64 // Hugepagesize, bytes
}

// readMeminfo reads the hugetlb lines of /proc/meminfo.
func readMeminfo(path string) (meminfo, error) {
	b, err := readBounded(path, 1<<20)
	if err != nil {
		return meminfo{}, err
	}
	var m meminfo
	for line := range strings.SplitSeq(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		v, err := strconv.ParseUint(fields[1], 10, 64)
		if err != nil {
			continue
		}
		switch fields[0] {
		case "HugePages_Total:":
			m.total = v
		case "HugePages_Free:":
			m.free = v
		case "HugePages_Rsvd:":
			m.reserved = v
		case "Hugepagesize:":
			if v < 1<<40 {
				m.size = v << 10 // kB
			}
		}
	}
	return m, nil
}

// transparentHugePages returns the selected transparent huge page mode ("always",
// "madvise", "never") under root, or "unknown".
func transparentHugePages(root string) string {
	s, ok := readTrim(filepath.Join(root, "sys/kernel/mm/transparent_hugepage/enabled"))
	if !ok {
		return "unknown"
	}
	if i := strings.IndexByte(s, '['); i >= 0 {
		if j := strings.IndexByte(s[i:], ']'); j > 0 {
			return s[i+1 : i+j]
		}
	}
	return "unknown"
}

// checkHugePages says what will back the UMEM: memreg maps it from hugetlb pages when the
// pool has enough free for all of it (MAP_HUGETLB), else from transparent huge pages
// (MADV_HUGEPAGE), else from 4 KiB pages.
func checkHugePages(in *tuningInput) check {
	c := check{Name: "hugepages", Verdict: verdictOK}
	m, err := readMeminfo(in.path("proc/meminfo"))
	thp := transparentHugePages(in.root)
	if err != nil {
		c.Verdict, c.Detail = verdictWarn, fmt.Sprintf("read /proc/meminfo: %v", err)
		return c
	}
	avail := uint64(0)
	if m.free > m.reserved {
		avail = m.free - m.reserved
	}
	page := m.size
	if page == 0 {
		page = 2 << 20
	}
	need := (in.umem + page - 1) / page
	switch {
	case m.size > 0 && avail >= need:
		c.Detail = fmt.Sprintf("%d of %d hugetlb pages of %s free (vm.nr_hugepages %d): the UMEM (%s, %d pages) is mapped from them",
			avail, m.total, humanBytes(m.size), m.total, humanBytes(in.umem), need)
	case m.total > 0:
		c.Verdict = verdictWarn
		c.Detail = fmt.Sprintf("%d of %d hugetlb pages of %s free, the UMEM needs %d (%s): it falls back to transparent huge pages (%s)",
			avail, m.total, humanBytes(page), need, humanBytes(in.umem), thp)
		c.Fix = fmt.Sprintf("echo %d > /proc/sys/vm/nr_hugepages (or vm.nr_hugepages=%d in /etc/sysctl.d; hugepages=%d on the kernel command line at boot)",
			m.total+need-avail, m.total+need-avail, m.total+need-avail)
	case thp == "always" || thp == "madvise":
		c.Detail = fmt.Sprintf("no hugetlb pages (vm.nr_hugepages %d), transparent huge pages %q back the UMEM (%s) where the kernel has them",
			m.total, thp, humanBytes(in.umem))
	default:
		c.Verdict = verdictWarn
		c.Detail = fmt.Sprintf("no hugetlb pages (vm.nr_hugepages %d) and transparent huge pages %q: 4 KiB pages, more TLB misses", m.total, thp)
		c.Fix = fmt.Sprintf("reserve them: echo %d > /proc/sys/vm/nr_hugepages", need)
	}
	return c
}

// memlockCheck judges the memlock limit for a UMEM of need bytes: with CAP_IPC_LOCK
// mlock(2) is not limited; otherwise RLIMIT_MEMLOCK (lim, or err reading it) must hold it.
func memlockCheck(ipcLock bool, lim uint64, err error, need uint64) check {
	c := check{Name: "memlock", Verdict: verdictOK}
	switch {
	case ipcLock:
		c.Detail = fmt.Sprintf("CAP_IPC_LOCK: pinning the UMEM (%s for serve) is not limited", humanBytes(need))
	case err != nil:
		c.Verdict, c.Detail = verdictWarn, err.Error()
	case lim == unix.RLIM_INFINITY:
		c.Detail = "RLIMIT_MEMLOCK unlimited"
	case lim < need:
		c.Verdict = verdictFail
		c.Detail = fmt.Sprintf("RLIMIT_MEMLOCK %s, below the %s the server's UMEM pins", humanBytes(lim), humanBytes(need))
		c.Fix = "ulimit -l unlimited (LimitMEMLOCK=infinity in a systemd unit), or grant CAP_IPC_LOCK"
	default:
		c.Detail = fmt.Sprintf("RLIMIT_MEMLOCK %s, enough for the server's %s", humanBytes(lim), humanBytes(need))
	}
	return c
}

// xdpFeatureNames names the NETDEV_XDP_ACT_* bits (include/uapi/linux/netdev.h) as
// `ip -d link` and the netdev netlink family spell them.
var xdpFeatureNames = []string{"basic", "redirect", "ndo-xmit", "xsk-zerocopy", "hw-offload", "rx-sg", "ndo-xmit-sg"}

// describeXDPFeatures is "basic, redirect, rx-sg (0x23)".
func describeXDPFeatures(f uint64) string {
	var names []string
	for i, n := range xdpFeatureNames {
		if f&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if rest := f &^ (1<<len(xdpFeatureNames) - 1); rest != 0 {
		names = append(names, fmt.Sprintf("%#x", rest))
	}
	if len(names) == 0 {
		return fmt.Sprintf("none (%#x)", f)
	}
	return fmt.Sprintf("%s (%#x)", strings.Join(names, ", "), f)
}

// zeroCopyCheck describes AF_XDP zero-copy on a driver that has it: segs descriptors per
// packet at most (xdp-zc-max-segs; 0: not reported, and xdp assumes 4). When that many
// 4 KiB frames hold less than an MTU-sized datagram, xdp lowers the payload limit to what
// they hold (the frame less the 256-byte receive headroom, less 42 bytes of Ethernet, IPv4
// and UDP headers), as its Open does.
func zeroCopyCheck(segs uint32, mtu int, iface string) check {
	c := check{Name: "zero-copy", Verdict: verdictOK}
	reported := segs != 0
	if !reported {
		segs = 4
	}
	word := "descriptors"
	if segs == 1 {
		word = "descriptor"
	}
	c.Detail = fmt.Sprintf("AF_XDP zero-copy supported (up to %d %s per packet)", segs, word)
	if !reported {
		c.Detail = fmt.Sprintf("AF_XDP zero-copy supported (descriptors per packet not reported: %d assumed)", segs)
	}
	limit := int(min(segs, 64))*(umemFrameSize-256) - (14 + 20 + 8)
	if mtuPayload := mtu - 20 - 8; limit < mtuPayload {
		c.Verdict = verdictWarn
		c.Detail += fmt.Sprintf(": the payload is limited to %d bytes, below the MTU's %d", limit, mtuPayload)
		c.Fix = fmt.Sprintf("ip link set dev %s mtu %d (one frame per packet), or --bind-mode copy for the whole MTU", iface, singleFrameMTU)
	}
	return c
}
