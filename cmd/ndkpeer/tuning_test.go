//go:build linux

package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeTree writes files (path relative to root -> content) under a new temporary root.
func fakeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// wantCheck fails unless c has the verdict and its detail and fix contain the strings.
func wantCheck(t *testing.T, c check, name, verdict string, detail []string, fix []string) {
	t.Helper()
	if c.Name != name || c.Verdict != verdict {
		t.Errorf("check %q %q, want %q %q: %+v", c.Name, c.Verdict, name, verdict, c)
	}
	for _, s := range detail {
		if !strings.Contains(c.Detail, s) {
			t.Errorf("%s detail %q lacks %q", c.Name, c.Detail, s)
		}
	}
	for _, s := range fix {
		if !strings.Contains(c.Fix, s) {
			t.Errorf("%s fix %q lacks %q", c.Name, c.Fix, s)
		}
	}
	if verdict == verdictOK && c.Fix != "" {
		t.Errorf("%s is ok but has a fix: %q", c.Name, c.Fix)
	}
	if verdict != verdictOK && c.Fix == "" && len(fix) > 0 {
		t.Errorf("%s: no fix", c.Name)
	}
}

func TestParseCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want cpuSet
		text string
	}{
		{"", cpuSet{}, ""}, {"(null)\n", cpuSet{}, ""}, {"3", cpuSet{3}, "3"}, {"0-3", cpuSet{0, 1, 2, 3}, "0-3"},
		{"0-1,4,6-7\n", cpuSet{0, 1, 4, 6, 7}, "0-1,4,6-7"}, {"5,1,3-4,1", cpuSet{1, 3, 4, 5}, "1,3-5"},
		{"8191", cpuSet{8191}, "8191"},
	} {
		got, err := parseCPUList(tc.in)
		if err != nil || !slices.Equal(got, tc.want) || got.String() != tc.text {
			t.Errorf("parseCPUList(%q) = %v (%q), %v; want %v (%q)", tc.in, got, got.String(), err, tc.want, tc.text)
		}
	}
	for _, bad := range []string{"a", "-1", "1-", "3-1", "0-8192", "8192", "1,,2", "0-4294967296", "1 2"} {
		if s, err := parseCPUList(bad); err == nil {
			t.Errorf("parseCPUList(%q) = %v, want an error", bad, s)
		}
	}
	if !(cpuSet{1, 2}).subsetOf(cpuSet{0, 1, 2, 3}) || (cpuSet{1, 4}).subsetOf(cpuSet{0, 1, 2, 3}) || !(cpuSet{}).subsetOf(nil) {
		t.Error("subsetOf")
	}
}

func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0-3,8", "", "(null)", "1,1,1", "7-7", "0-8191", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		set, err := parseCPUList(s)
		if err != nil {
			return
		}
		if len(set) > maxCPUs || !slices.IsSorted(set) || len(slices.Compact(slices.Clone(set))) != len(set) {
			t.Fatalf("parseCPUList(%q) = %v: not a sorted set of at most %d CPUs", s, set, maxCPUs)
		}
		back, err := parseCPUList(set.String())
		if err != nil || !slices.Equal(back, set) {
			t.Fatalf("%v formats as %q, which parses as %v, %v", set, set.String(), back, err)
		}
	})
}

func TestEngineCPUs(t *testing.T) {
	root := fakeTree(t, map[string]string{"sys/devices/system/cpu/online": "0-3\n"})
	for _, tc := range []struct {
		flag     string
		affinity cpuSet
		want     cpuSet
		from     string
		err      bool
	}{
		{"2-3", cpuSet{0, 1, 2, 3}, cpuSet{2, 3}, "--cpus", false},
		{"", cpuSet{2}, cpuSet{2}, "taskset", false},
		{"", cpuSet{0, 1, 2, 3}, nil, "", false}, // all online CPUs: not pinned
		{"", cpuSet{5}, nil, "", false},          // not online: not trusted
		{"", nil, nil, "", false},
		{"x", nil, nil, "", true},
		{"(null)", nil, nil, "", true},
	} {
		got, from, err := engineCPUs(root, tc.flag, tc.affinity)
		if (err != nil) != tc.err || !slices.Equal(got, tc.want) || !strings.Contains(from, tc.from) || (tc.want == nil) != (got == nil) {
			t.Errorf("engineCPUs(%q, %v) = %v, %q, %v; want %v from %q (error %v)", tc.flag, tc.affinity, got, from, err, tc.want, tc.from, tc.err)
		}
	}
	// Without the online list the affinity cannot be judged.
	if got, _, _ := engineCPUs(t.TempDir(), "", cpuSet{1}); got != nil {
		t.Errorf("no online list: engine CPUs %v", got)
	}
}

func TestCheckCPUs(t *testing.T) {
	root := fakeTree(t, map[string]string{
		"sys/devices/system/cpu/online":    "0-7\n",
		"sys/devices/system/cpu/isolated":  "2-3\n",
		"sys/devices/system/cpu/nohz_full": "2-3\n",
	})
	in := &tuningInput{root: root}
	wantCheck(t, checkCPUs(in), "cpus", verdictOK, []string{"not told", "--cpus", "isolated: 2-3", "nohz_full: 2-3"}, nil)
	in.cpus, in.cpusFrom = cpuSet{2}, "--cpus"
	c := checkCPUs(in)
	wantCheck(t, c, "cpus", verdictOK, []string{"engine on CPU 2 (--cpus)", "isolated: 2-3"}, nil)
	if strings.Contains(c.Detail, "not isolated") {
		t.Errorf("CPU 2 is isolated: %q", c.Detail)
	}
	in.cpus = cpuSet{4, 5}
	wantCheck(t, checkCPUs(in), "cpus", verdictOK, []string{"CPUs 4-5", "not isolated"}, nil)
	in.cpus = cpuSet{9}
	wantCheck(t, checkCPUs(in), "cpus", verdictWarn, []string{"not all online", "online: 0-7"}, []string{"taskset"})

	// A kernel without isolation files: none.
	in = &tuningInput{root: t.TempDir(), cpus: cpuSet{1}, cpusFrom: "--cpus"}
	wantCheck(t, checkCPUs(in), "cpus", verdictOK, []string{"isolated: none", "nohz_full: none"}, nil)
}

func TestCheckCPUFreq(t *testing.T) {
	gov := func(govs ...string) map[string]string {
		m := map[string]string{}
		for i, g := range govs {
			d := filepath.Join("sys/devices/system/cpu", "cpu"+string(rune('0'+i)))
			m[filepath.Join(d, "topology/core_id")] = "0\n"
			if g != "" {
				m[filepath.Join(d, "cpufreq/scaling_governor")] = g + "\n"
				m[filepath.Join(d, "cpufreq/scaling_driver")] = "intel_pstate\n"
			}
		}
		m["sys/devices/system/cpu/cpufreq/boost"] = "1\n" // not a CPU
		return m
	}
	in := &tuningInput{root: fakeTree(t, gov("performance", "performance", "performance"))}
	wantCheck(t, checkCPUFreq(in), "cpufreq", verdictOK, []string{"performance on all 3 CPUs", "intel_pstate"}, nil)

	in = &tuningInput{root: fakeTree(t, gov("powersave", "performance", "powersave", "schedutil")), cpus: cpuSet{1}}
	wantCheck(t, checkCPUFreq(in), "cpufreq", verdictWarn,
		[]string{"performance on CPU 1", "powersave on CPUs 0,2", "schedutil on CPU 3", "the engine's CPU 1 are at performance"},
		[]string{"cpupower frequency-set -g performance", "scaling_governor"})
	in.cpus = cpuSet{0}
	if c := checkCPUFreq(in); strings.Contains(c.Detail, "engine") {
		t.Errorf("the engine's CPU 0 is not at performance: %q", c.Detail)
	}

	// A virtual machine: CPUs without cpufreq.
	in = &tuningInput{root: fakeTree(t, gov("", ""))}
	wantCheck(t, checkCPUFreq(in), "cpufreq", verdictOK, []string{"no cpufreq on any of the 2 CPUs", "virtual machine"}, nil)
}

func TestIRQQueue(t *testing.T) {
	for name, want := range map[string]int{
		"eth10": -1, "eth10-TxRx-4": 4, "virtio2-input.0": 0, "virtio2-output.3": 3, "virtio2-config": -1, "eth1-TxRx-12": 12, "ice-eth1-TxRx-3": 3,
		"i40e-0000:3b:00.0:misc": -1, "mlx5_comp7@pci:0000:3b:00.0": 7, "mlx5_async0@pci:0000:3b:00.0": -1,
		"eth1": 1, "eth": -1, "i40e-eth10-TxRx-0": 0, "ena-mgmnt@pci:0000:00:05.0": -1, "eth1-Tx-Rx-2": 2, "": -1, "q1234567": -1,
	} {
		if got := irqQueue(name, "eth10"); got != want {
			t.Errorf("irqQueue(%q) = %d, want %d", name, got, want)
		}
	}
}

const fakeInterrupts = `           CPU0       CPU1       CPU2       CPU3
  0:         40          0          0          0   IO-APIC   2-edge      timer
 40:          1          0          0          0   PCI-MSIX-0000:03:00.0   0-edge      eth1-TxRx-0
 41:          0          7          0          0   PCI-MSIX-0000:03:00.0   1-edge      eth1-TxRx-1
 42:          0          0          1          0   PCI-MSIX-0000:03:00.0   2-edge      eth1
 38:          0       2644          0          0   PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0
 39:       2384          0          0          0   PCI-MSIX-0000:00:03.0   2-edge      virtio2-output.0
 37:          0          0          0          0   PCI-MSIX-0000:00:03.0   0-edge      virtio2-config
 50:          0          0          0          0   PCI-MSIX-0000:3b:00.0   0-edge      mlx5_async0@pci:0000:3b:00.0
 51:          0          0          0          0   PCI-MSIX-0000:3b:00.0   1-edge      mlx5_comp0@pci:0000:3b:00.0
 52:          0          0          0          0   PCI-MSIX-0000:3b:00.0   2-edge      mlx5_comp1@pci:0000:3b:00.0
NMI:          0          0          0          0   Non-maskable interrupts
LOC:   27140988   25537405          0          0   Local timer interrupts
bad line
 x1:   1
`

func TestProcInterrupts(t *testing.T) {
	root := fakeTree(t, map[string]string{"proc/interrupts": fakeInterrupts})
	names, err := procInterrupts(filepath.Join(root, "proc/interrupts"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{0: "timer", 40: "eth1-TxRx-0", 41: "eth1-TxRx-1", 42: "eth1", 38: "virtio2-input.0", 39: "virtio2-output.0",
		37: "virtio2-config", 50: "mlx5_async0@pci:0000:3b:00.0", 51: "mlx5_comp0@pci:0000:3b:00.0", 52: "mlx5_comp1@pci:0000:3b:00.0"}
	if len(names) != len(want) {
		t.Errorf("names %v, want %v", names, want)
	}
	for n, w := range want {
		if names[n] != w {
			t.Errorf("IRQ %d named %q, want %q", n, names[n], w)
		}
	}
}

// irqTree is a host with three NICs: eth1 (ixgbe-like, two queues, MSI-X 40-42), eth2
// (virtio_net: its device is a virtio device whose PCI parent has the MSI-X vectors
// 37-39) and eth3 (mlx5-like, 50-52), and veth0, which has no device.
func irqTree(t *testing.T, affinity map[int]string) string {
	files := map[string]string{
		"proc/interrupts":                                    fakeInterrupts,
		"sys/class/net/eth1/device/msi_irqs/40":              "msix\n",
		"sys/class/net/eth1/device/msi_irqs/41":              "msix\n",
		"sys/class/net/eth1/device/msi_irqs/42":              "msix\n",
		"sys/devices/pci0000:00/0000:00:03.0/msi_irqs/37":    "msix\n",
		"sys/devices/pci0000:00/0000:00:03.0/msi_irqs/38":    "msix\n",
		"sys/devices/pci0000:00/0000:00:03.0/msi_irqs/39":    "msix\n",
		"sys/devices/pci0000:00/0000:00:03.0/virtio2/vendor": "0x1af4\n",
		"sys/class/net/eth3/device/msi_irqs/50":              "msix\n",
		"sys/class/net/eth3/device/msi_irqs/51":              "msix\n",
		"sys/class/net/eth3/device/msi_irqs/52":              "msix\n",
		"sys/class/net/veth0/mtu":                            "1500\n",
		"proc/1/comm":                                        "init\n",
	}
	for n, a := range affinity {
		files[filepath.Join("proc/irq", strconv.Itoa(n), "smp_affinity_list")] = a + "\n"
	}
	files["proc/irq/38/effective_affinity_list"] = "1\n"
	root := fakeTree(t, files)
	if err := os.MkdirAll(filepath.Join(root, "sys/class/net/eth2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../devices/pci0000:00/0000:00:03.0/virtio2", filepath.Join(root, "sys/class/net/eth2/device")); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestInterfaceIRQs(t *testing.T) {
	root := irqTree(t, map[int]string{40: "0", 41: "1", 42: "2", 37: "0-3", 38: "0-3", 39: "0-3", 51: "2", 52: "3"})
	for _, tc := range []struct {
		iface   string
		want    []int
		all     int
		virtual bool
	}{
		{"eth1", []int{40, 41}, 3, false}, // 42, named "eth1", is the link vector
		{"eth2", []int{38, 39}, 3, false},
		{"eth3", []int{51, 52}, 3, false},
		{"veth0", nil, 0, true},
	} {
		irqs, all, virtual, err := interfaceIRQs(&tuningInput{root: root, iface: tc.iface})
		var got []int
		for _, r := range irqs {
			got = append(got, r.num)
		}
		if err != nil || !slices.Equal(got, tc.want) || all != tc.all || virtual != tc.virtual {
			t.Errorf("%s: IRQs %v of %d, virtual %v, %v; want %v of %d, virtual %v", tc.iface, got, all, virtual, err, tc.want, tc.all, tc.virtual)
		}
	}
	irqs, _, _, _ := interfaceIRQs(&tuningInput{root: root, iface: "eth2"})
	if len(irqs) != 2 || irqs[0].queue != 0 || !slices.Equal(irqs[0].affinity, cpuSet{0, 1, 2, 3}) || !slices.Equal(irqs[0].effective, cpuSet{1}) {
		t.Errorf("eth2's IRQs %+v", irqs)
	}
}

func TestCheckIRQAffinity(t *testing.T) {
	pinned := map[int]string{40: "2", 41: "0-3", 42: "0-3", 37: "0-3", 38: "1", 39: "1", 51: "2", 52: "3"}
	root := irqTree(t, pinned)
	eth := func(iface string, queues, queue int, cpus cpuSet) *tuningInput {
		return &tuningInput{root: root, iface: iface, queues: queues, queue: queue, cpus: cpus, cpusFrom: "--cpus"}
	}
	// eth1 with one queue in use: its IRQ is on CPU 2, where the engine runs (the link
	// vector, 42, is no queue's and spread: it does not count).
	wantCheck(t, checkIRQAffinity(eth("eth1", 1, -1, cpuSet{2})), "irq-affinity", verdictOK,
		[]string{"every queue's IRQs on the engine's CPU 2", "40 eth1-TxRx-0 (queue 0) on 2"}, nil)
	// Two queues in use: queue 1's IRQ may run anywhere.
	wantCheck(t, checkIRQAffinity(eth("eth1", 2, -1, cpuSet{2})), "irq-affinity", verdictWarn,
		[]string{"1 of 2 served queue IRQs not on the engine's CPU 2 (--cpus)", "41 eth1-TxRx-1 (queue 1) on 0-3"},
		[]string{"for n in 41; do echo 2 > /proc/irq/$n/smp_affinity_list; done"})
	// Only queue 0 served (--queue 0): its IRQ is all that matters.
	wantCheck(t, checkIRQAffinity(eth("eth1", 2, 0, cpuSet{2})), "irq-affinity", verdictOK, []string{"queue 0's IRQs on the engine's CPU 2"}, nil)
	// The engine on CPU 3: the served IRQ is elsewhere.
	wantCheck(t, checkIRQAffinity(eth("eth1", 1, -1, cpuSet{3})), "irq-affinity", verdictWarn,
		[]string{"1 of 1 served queue IRQs not on the engine's CPU 3"}, []string{"for n in 40; do echo 3 >"})
	// Engine CPUs not known: each IRQ on one CPU is ok, a spread one is not.
	wantCheck(t, checkIRQAffinity(eth("eth2", 1, -1, nil)), "irq-affinity", verdictOK,
		[]string{"each on one CPU", "38 virtio2-input.0 (queue 0) on 1", "39 virtio2-output.0 (queue 0) on 1", "give --cpus"}, nil)
	wantCheck(t, checkIRQAffinity(eth("eth1", 2, -1, nil)), "irq-affinity", verdictWarn,
		[]string{"1 of 2 served queue IRQs may run on several CPUs", "41 eth1-TxRx-1"}, []string{"for n in 41; do echo CPU >", "doctor --cpus"})
	// mlx5's completion vectors, one per channel.
	wantCheck(t, checkIRQAffinity(eth("eth3", 2, -1, cpuSet{2, 3})), "irq-affinity", verdictOK, []string{"CPUs 2-3", "mlx5_comp1@pci:0000:3b:00.0 (queue 1) on 3"}, nil)
	wantCheck(t, checkIRQAffinity(eth("eth3", 2, -1, cpuSet{2})), "irq-affinity", verdictWarn, []string{"52 mlx5_comp1"}, []string{"for n in 52;"})
	// veth: nothing to pin.
	wantCheck(t, checkIRQAffinity(eth("veth0", 1, -1, cpuSet{2})), "irq-affinity", verdictOK, []string{"virtual interface"}, nil)

	// irqbalance moves what is pinned.
	if err := os.MkdirAll(filepath.Join(root, "proc/712"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "proc/712/comm"), []byte("irqbalance\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantCheck(t, checkIRQAffinity(eth("eth1", 1, -1, cpuSet{2})), "irq-affinity", verdictWarn,
		[]string{"irqbalance runs (pid 712)"}, []string{"systemctl stop irqbalance"})

	// A device whose vectors name no queue.
	root = fakeTree(t, map[string]string{
		"proc/interrupts":                       " 60:  0  PCI-MSI  0-edge  foo-config\n",
		"sys/class/net/eth9/device/msi_irqs/60": "msi\n",
	})
	wantCheck(t, checkIRQAffinity(&tuningInput{root: root, iface: "eth9", queue: -1}), "irq-affinity", verdictWarn,
		[]string{"found no queue IRQs of eth9 (1 device IRQs"}, []string{"/proc/irq/N/smp_affinity_list"})
	// No /proc/interrupts: said, not failed.
	root = fakeTree(t, map[string]string{"sys/class/net/eth9/device/vendor": "1\n"})
	wantCheck(t, checkIRQAffinity(&tuningInput{root: root, iface: "eth9", queue: -1}), "irq-affinity", verdictWarn, []string{"/proc/interrupts"}, nil)
	// A device without MSI: its IRQs found by the interface's name.
	root = fakeTree(t, map[string]string{
		"proc/interrupts":                   " 11:  5  IO-APIC  11-fasteoi  eth5-rx-0\n 12: 1 IO-APIC 12-fasteoi other-rx-0\n",
		"proc/irq/11/smp_affinity_list":     "0\n",
		"sys/class/net/eth5/device/vendor":  "1\n",
		"sys/class/net/other/device/vendor": "1\n",
	})
	wantCheck(t, checkIRQAffinity(&tuningInput{root: root, iface: "eth5", queues: 1, queue: -1, cpus: cpuSet{0}, cpusFrom: "--cpus"}), "irq-affinity", verdictOK,
		[]string{"11 eth5-rx-0 (queue 0) on 0"}, nil)
}

func TestCheckBusyPoll(t *testing.T) {
	tree := func(poll, read, deferIRQs, flush, threaded string, device bool) string {
		m := map[string]string{
			"proc/sys/net/core/busy_poll":              poll,
			"proc/sys/net/core/busy_read":              read,
			"sys/class/net/eth1/napi_defer_hard_irqs":  deferIRQs,
			"sys/class/net/eth1/gro_flush_timeout":     flush,
			"sys/class/net/eth1/threaded":              threaded,
			"sys/class/net/veth1/napi_defer_hard_irqs": "0\n",
		}
		if device {
			m["sys/class/net/eth1/device/vendor"] = "0x8086\n"
		}
		return fakeTree(t, m)
	}
	in := func(root string, busy time.Duration) *tuningInput {
		return &tuningInput{root: root, iface: "eth1", driver: "ice", busyPoll: busy}
	}
	wantCheck(t, checkBusyPoll(in(tree("0", "0", "0", "0", "0", true), 0)), "busy-poll", verdictOK,
		[]string{"net.core.busy_poll 0 µs, busy_read 0 µs", "napi_defer_hard_irqs 0, gro_flush_timeout 0 ns", "interrupt-driven"}, nil)
	wantCheck(t, checkBusyPoll(in(tree("50", "50", "2", "200000", "0", true), 50*time.Microsecond)), "busy-poll", verdictOK,
		[]string{"net.core.busy_poll 50 µs", "preferred busy polling (--busy-poll 50µs)", "200µs"}, nil)
	wantCheck(t, checkBusyPoll(in(tree("0", "0", "2", "200000", "0", true), 0)), "busy-poll", verdictWarn,
		[]string{"interrupts are deferred", "up to 200µs"}, []string{"--busy-poll", "echo 0 > /sys/class/net/eth1/napi_defer_hard_irqs"})
	wantCheck(t, checkBusyPoll(in(tree("0", "0", "0", "0", "0", true), 50*time.Microsecond)), "busy-poll", verdictWarn,
		[]string{"--busy-poll 50µs without deferred interrupts"}, []string{"echo 2 > /sys/class/net/eth1/napi_defer_hard_irqs", "gro_flush_timeout"})
	wantCheck(t, checkBusyPoll(in(tree("0", "0", "2", "0", "0", true), 0)), "busy-poll", verdictWarn,
		[]string{"does nothing without gro_flush_timeout"}, []string{"echo 200000 >"})
	wantCheck(t, checkBusyPoll(in(tree("0", "0", "0", "0", "1", true), 0)), "busy-poll", verdictOK, []string{"threaded NAPI 1", "napi/eth1-"}, nil)
	// Not a device: none of it applies.
	wantCheck(t, checkBusyPoll(in(tree("0", "0", "2", "200000", "0", false), 0)), "busy-poll", verdictOK, []string{"none of it applies", "NAPI id 0"}, nil)
	// An old kernel without the files: said, not guessed.
	wantCheck(t, checkBusyPoll(in(fakeTree(t, map[string]string{"sys/class/net/eth1/device/vendor": "1"}), 0)), "busy-poll", verdictOK,
		[]string{"net.core.busy_poll absent", "napi_defer_hard_irqs absent"}, nil)
}

func TestCheckHugePages(t *testing.T) {
	meminfo := func(total, free, rsvd, sizeKB string) string {
		return "MemTotal:       24000000 kB\nHugePages_Total:   " + total + "\nHugePages_Free:    " + free +
			"\nHugePages_Rsvd:    " + rsvd + "\nHugePages_Surp:        0\nHugepagesize:       " + sizeKB + " kB\n"
	}
	tree := func(mi, thp string) string {
		return fakeTree(t, map[string]string{"proc/meminfo": mi, "sys/kernel/mm/transparent_hugepage/enabled": thp})
	}
	umem := umemBytes(1, serveHeap) // 96 MiB: 48 pages of 2 MiB
	in := func(root string) *tuningInput { return &tuningInput{root: root, umem: umem} }
	wantCheck(t, checkHugePages(in(tree(meminfo("64", "60", "4", "2048"), "always [madvise] never\n"))), "hugepages", verdictOK,
		[]string{"56 of 64 hugetlb pages of 2.0 MiB free", "vm.nr_hugepages 64", "48 pages"}, nil)
	wantCheck(t, checkHugePages(in(tree(meminfo("40", "40", "0", "2048"), "always [madvise] never\n"))), "hugepages", verdictWarn,
		[]string{"40 of 40", "needs 48", "madvise"}, []string{"echo 48 > /proc/sys/vm/nr_hugepages"})
	wantCheck(t, checkHugePages(in(tree(meminfo("0", "0", "0", "2048"), "always [madvise] never\n"))), "hugepages", verdictOK,
		[]string{"no hugetlb pages (vm.nr_hugepages 0)", `"madvise"`}, nil)
	wantCheck(t, checkHugePages(in(tree(meminfo("0", "0", "0", "2048"), "always madvise [never]\n"))), "hugepages", verdictWarn,
		[]string{`"never"`, "4 KiB pages"}, []string{"echo 48 > /proc/sys/vm/nr_hugepages"})
	// 1 GiB default pages: one holds the UMEM.
	wantCheck(t, checkHugePages(in(tree(meminfo("2", "1", "0", "1048576"), "[always] madvise never\n"))), "hugepages", verdictOK,
		[]string{"1 of 2 hugetlb pages of 1.0 GiB", "1 pages"}, nil)
	wantCheck(t, checkHugePages(in(t.TempDir())), "hugepages", verdictWarn, []string{"/proc/meminfo"}, nil)
}

func TestMemlockCheck(t *testing.T) {
	need := umemBytes(1, serveHeap)
	wantCheck(t, memlockCheck(true, 0, nil, need), "memlock", verdictOK, []string{"CAP_IPC_LOCK", "96.0 MiB"}, nil)
	wantCheck(t, memlockCheck(false, unix.RLIM_INFINITY, nil, need), "memlock", verdictOK, []string{"unlimited"}, nil)
	wantCheck(t, memlockCheck(false, 8<<20, nil, need), "memlock", verdictFail, []string{"RLIMIT_MEMLOCK 8.0 MiB, below the 96.0 MiB"},
		[]string{"ulimit -l unlimited", "LimitMEMLOCK=infinity", "CAP_IPC_LOCK"})
	wantCheck(t, memlockCheck(false, 1<<30, nil, need), "memlock", verdictOK, []string{"enough for the server's 96.0 MiB"}, nil)
	wantCheck(t, memlockCheck(false, 0, os.ErrPermission, need), "memlock", verdictWarn, []string{"permission"}, nil)
	// Every served queue pins its frames: four queues need more.
	if four := umemBytes(4, serveHeap); four != 4*8192*4096+serveHeap {
		t.Errorf("four queues pin %d bytes", four)
	}
}

func TestDescribeXDPFeatures(t *testing.T) {
	for f, want := range map[uint64]string{
		0x23: "basic, redirect, rx-sg (0x23)", 0x2b: "basic, redirect, xsk-zerocopy, rx-sg (0x2b)", 0: "none (0x0)",
		0x7f: "basic, redirect, ndo-xmit, xsk-zerocopy, hw-offload, rx-sg, ndo-xmit-sg (0x7f)", 0x101: "basic, 0x100 (0x101)",
	} {
		if got := describeXDPFeatures(f); got != want {
			t.Errorf("describeXDPFeatures(%#x) = %q, want %q", f, got, want)
		}
	}
}

func TestZeroCopyCheck(t *testing.T) {
	wantCheck(t, zeroCopyCheck(1, 1500, "eth1"), "zero-copy", verdictOK, []string{"up to 1 descriptor per packet"}, nil)
	wantCheck(t, zeroCopyCheck(1, 9000, "eth1"), "zero-copy", verdictWarn, []string{"limited to 3798 bytes, below the MTU's 8972"},
		[]string{"ip link set dev eth1 mtu 3822", "--bind-mode copy"})
	wantCheck(t, zeroCopyCheck(8, 9000, "eth1"), "zero-copy", verdictOK, []string{"up to 8 descriptors"}, nil)
	wantCheck(t, zeroCopyCheck(0, 9000, "eth1"), "zero-copy", verdictOK, []string{"not reported: 4 assumed"}, nil)
}
