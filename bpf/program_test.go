//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package bpf

import (
	"errors"
	"math"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpndk/xdpndk/internal/privileged"
	"github.com/xdpndk/xdpndk/internal/testbed"
)

const (
	testPort  = 47000
	otherPort = 47001
)

func loadTest(t testing.TB) *Program {
	t.Helper()
	p, err := Load(Options{Port: testPort})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

func counters(t *testing.T, p *Program) Counters {
	t.Helper()
	c, err := p.Counters()
	if err != nil {
		t.Fatalf("Counters: %v", err)
	}
	return c
}

func sub(a, b Counters) Counters {
	return Counters{
		Redirected:      a.Redirected - b.Redirected,
		Passed:          a.Passed - b.Passed,
		NoSocket:        a.NoSocket - b.NoSocket,
		Malformed:       a.Malformed - b.Malformed,
		FaultDropped:    a.FaultDropped - b.FaultDropped,
		RedirectedBytes: a.RedirectedBytes - b.RedirectedBytes,
	}
}

func run(t *testing.T, p *Program, pkt []byte) uint32 {
	t.Helper()
	v, err := p.Run(pkt)
	if err != nil {
		t.Fatalf("Run(%d bytes): %v", len(pkt), err)
	}
	return v
}

// xskOn binds a minimal AF_XDP socket to queue 0 of h's veth end, inside h's namespace, and
// closes it in t.Cleanup (before the bed that holds h is removed).
func xskOn(t testing.TB, h *testbed.Host) *testXSK {
	t.Helper()
	var x *testXSK
	if err := h.Do(func() (err error) {
		x, err = newTestXSK(h.IfIndex, 0)
		return err
	}); err != nil {
		t.Fatalf("create AF_XDP socket: %v", err)
	}
	t.Cleanup(x.Close)
	return x
}

// attachTestXSK binds a minimal AF_XDP socket to queue 0 of host A's veth in a fresh test
// bed and puts it in p's XSKMAP at queue 0, which is where BPF_PROG_TEST_RUN packets arrive.
func attachTestXSK(t testing.TB, p *Program) {
	t.Helper()
	x := xskOn(t, testbed.NewT(t, testbed.Options{}).A)
	if err := p.SetSocket(0, x.fd); err != nil {
		t.Fatalf("SetSocket: %v", err)
	}
	t.Cleanup(func() {
		if err := p.ClearSocket(0); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("ClearSocket: %v", err)
		}
	})
}

// xdpMode returns the kernel's XDP attach mode of h's veth end: 0 without a program,
// otherwise XDP_ATTACHED_DRV (1) or XDP_ATTACHED_SKB (2).
func xdpMode(t *testing.T, h *testbed.Host) uint32 {
	t.Helper()
	var mode uint32
	if err := h.Do(func() error {
		l, err := netlink.LinkByName(h.Ifname)
		if err != nil {
			return err
		}
		if x := l.Attrs().Xdp; x != nil && x.ProgId != 0 {
			mode = x.AttachMode
		}
		return nil
	}); err != nil {
		t.Fatalf("read XDP state of %s: %v", h.Ifname, err)
	}
	return mode
}

// pinCPU keeps the calling goroutine on one OS thread and that thread on one CPU, so
// every Run uses the same per-CPU PRNG. Call the returned function (deferred) to undo.
func pinCPU(t *testing.T) func() {
	t.Helper()
	runtime.LockOSThread()
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("sched_getaffinity: %v", err)
	}
	cpu := -1
	for i := range len(old) * 64 {
		if old.IsSet(i) {
			cpu = i
			break
		}
	}
	var one unix.CPUSet
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("sched_setaffinity: %v", err)
	}
	return func() {
		if err := unix.SchedSetaffinity(0, &old); err != nil {
			t.Errorf("restore affinity: %v", err)
			return // leave the thread locked: it dies with the goroutine
		}
		runtime.UnlockOSThread()
	}
}

type steerCase struct {
	name string
	pkt  []byte
	want class
}

func ipv4UDP(port uint16, n int, tpids ...uint16) []byte {
	return ether(etherTypeIPv4, ipv4(protoUDP, udp(port, n), 0), tpids...)
}

func ipv6UDP(port uint16, n int, tpids ...uint16) []byte {
	return ether(etherTypeIPv6, ipv6(protoUDP, nil, udp(port, n)), tpids...)
}

func steerCases() []steerCase {
	const ip = ethHeaderLen // offset of the IP header in an untagged frame
	ours4 := ipv4UDP(testPort, 32)
	ours6 := ipv6UDP(testPort, 32)
	udpAt4 := ip + ipv4HeaderLen
	udpAt6 := ip + ipv6HeaderLen

	padded := ipv4UDP(testPort, 0)
	padded = append(padded, make([]byte, 60-len(padded))...)

	extChain := slices.Concat(ipv6Ext(protoDstOpts, 0), ipv6Ext(protoRouting, 2), ipv6Ext(protoUDP, 1))
	var tooManyExt []byte
	for range 9 {
		tooManyExt = append(tooManyExt, ipv6Ext(protoDstOpts, 0)...)
	}
	tooManyExt[len(tooManyExt)-8] = protoUDP
	fragHdr := []byte{protoUDP, 0, 0, 1, 0, 0, 0, 1} // offset 0, MF set

	return []steerCase{
		// Ours.
		{"ipv4", ours4, classOurs},
		{"ipv4 ihl 6", ether(etherTypeIPv4, ipv4(protoUDP, udp(testPort, 32), 4)), classOurs},
		{"ipv4 ihl 15", ether(etherTypeIPv4, ipv4(protoUDP, udp(testPort, 32), 40)), classOurs},
		{"ipv4 empty padded to 60", padded, classOurs},
		{"ipv4 jumbo 9000 multi-buffer", ipv4UDP(testPort, 9000-ipv4HeaderLen-udpHeaderLen), classOurs},
		{"ipv6", ours6, classOurs},
		{"ipv6 extension headers", ether(etherTypeIPv6, ipv6(protoHopOpts, slices.Concat(ipv6Ext(protoDstOpts, 0), extChain), udp(testPort, 32))), classOurs},
		{"ipv6 jumbo 9000 multi-buffer", ipv6UDP(testPort, 9000-ipv6HeaderLen-udpHeaderLen), classOurs},
		{"vlan ipv4", ipv4UDP(testPort, 32, tpid8021Q), classOurs},
		{"qinq ipv4", ipv4UDP(testPort, 32, tpid8021AD, tpid8021Q), classOurs},
		{"vlan ipv6", ipv6UDP(testPort, 32, tpid8021Q), classOurs},
		{"qinq ipv6", ipv6UDP(testPort, 32, tpid8021AD, tpid8021Q), classOurs},

		// Not ours.
		{"arp", ether(etherTypeARP, arp()), classOther},
		{"lldp", ether(0x88CC, make([]byte, 46)), classOther},
		{"icmp", ether(etherTypeIPv4, ipv4(protoICMP, []byte{8, 0, 0, 0, 0, 1, 0, 1}, 0)), classOther},
		{"tcp to our port", ether(etherTypeIPv4, ipv4(protoTCP, tcp(testPort), 0)), classOther},
		{"tcp6 to our port", ether(etherTypeIPv6, ipv6(protoTCP, nil, tcp(testPort))), classOther},
		{"icmpv6", ether(etherTypeIPv6, ipv6(protoICMPv6, nil, []byte{128, 0, 0, 0, 0, 1, 0, 1})), classOther},
		{"udp other port", ipv4UDP(otherPort, 32), classOther},
		{"udp6 other port", ipv6UDP(otherPort, 32), classOther},
		{"udp source port ours", edit(ipv4UDP(otherPort, 32), func(b []byte) { be.PutUint16(b[udpAt4:], testPort) }), classOther},
		{"ipv4 first fragment", edit(ours4, func(b []byte) { be.PutUint16(b[ip+6:], 0x2000) }), classOther},
		{"ipv4 last fragment", edit(ours4, func(b []byte) { be.PutUint16(b[ip+6:], 0x0010) }), classOther},
		{"ipv6 fragment header", ether(etherTypeIPv6, ipv6(protoFragment, fragHdr, udp(testPort, 32))), classOther},
		{"ipv6 too many extension headers", ether(etherTypeIPv6, ipv6(protoDstOpts, tooManyExt, udp(testPort, 32))), classOther},
		{"ipv6 jumbogram", edit(ours6, func(b []byte) { be.PutUint16(b[ip+4:], 0) }), classOther},
		{"three vlan tags", ipv4UDP(testPort, 32, tpid8021AD, tpid8021Q, tpid8021Q), classOther},

		// Malformed.
		{"truncated vlan tag", ether(tpid8021Q, nil), classMalformed},
		{"truncated inner vlan tag", ether(tpid8021Q, []byte{0, 1}, tpid8021AD), classMalformed},
		{"truncated ipv4", ether(etherTypeIPv4, make([]byte, 19)), classMalformed},
		{"ipv4 ihl 4", edit(ours4, func(b []byte) { b[ip] = 0x44 }), classMalformed},
		{"ipv4 ihl 0", edit(ours4, func(b []byte) { b[ip] = 0x40 }), classMalformed},
		{"ipv4 bad version", edit(ours4, func(b []byte) { b[ip] = 0x65 }), classMalformed},
		{"ipv4 total length below header", edit(ours4, func(b []byte) { be.PutUint16(b[ip+2:], 19) }), classMalformed},
		{"ipv4 total length beyond frame", edit(ours4, func(b []byte) { be.PutUint16(b[ip+2:], uint16(len(b)-ip+1)) }), classMalformed},
		{"ipv4 truncated frame", ours4[:len(ours4)-1], classMalformed},
		{"ipv4 options beyond frame", ether(etherTypeIPv4, edit(ipv4(protoUDP, nil, 0), func(b []byte) { b[0] = 0x4F })), classMalformed},
		{"truncated udp", ether(etherTypeIPv4, ipv4(protoUDP, udp(testPort, 0)[:4], 0)), classMalformed},
		{"udp length below 8", edit(ours4, func(b []byte) { be.PutUint16(b[udpAt4+4:], 7) }), classMalformed},
		{"udp length beyond ip payload", edit(ours4, func(b []byte) { be.PutUint16(b[udpAt4+4:], 41) }), classMalformed},
		{"truncated ipv6", ether(etherTypeIPv6, make([]byte, 39)), classMalformed},
		{"ipv6 bad version", edit(ours6, func(b []byte) { b[ip] = 0x40 }), classMalformed},
		{"ipv6 payload length beyond frame", edit(ours6, func(b []byte) { be.PutUint16(b[ip+4:], 41) }), classMalformed},
		{"ipv6 extension beyond payload", ether(etherTypeIPv6, ipv6(protoHopOpts, ipv6Ext(protoUDP, 3)[:8], nil)), classMalformed},
		{"ipv6 truncated extension", ether(etherTypeIPv6, ipv6(protoHopOpts, nil, []byte{protoUDP})), classMalformed},
		{"truncated udp6", ether(etherTypeIPv6, ipv6(protoUDP, nil, udp(testPort, 0)[:4])), classMalformed},
		{"udp6 length beyond ip payload", edit(ours6, func(b []byte) { be.PutUint16(b[udpAt6+4:], 41) }), classMalformed},
		{"udp6 length below 8", edit(ours6, func(b []byte) { be.PutUint16(b[udpAt6+4:], 0) }), classMalformed},
		{"vlan truncated ipv4", ether(etherTypeIPv4, make([]byte, 10), tpid8021Q), classMalformed},
	}
}

// TestModelMatchesTable checks the Go model against the table, so the fuzz test compares
// the kernel with something that is itself right.
func TestModelMatchesTable(t *testing.T) {
	for _, c := range steerCases() {
		if got := model(c.pkt, testPort); got != c.want {
			t.Errorf("%s: model says %v, table says %v", c.name, got, c.want)
		}
	}
}

func TestSteer(t *testing.T) {
	privileged.Require(t)
	p := loadTest(t)

	check := func(t *testing.T, socket bool) {
		var total Counters
		for _, c := range steerCases() {
			before := counters(t, p)
			verdict := run(t, p, c.pkt)
			got := sub(counters(t, p), before)

			want := Counters{}
			wantVerdict := XDPPass
			switch {
			case c.want == classOther:
				want.Passed = 1
			case c.want == classMalformed:
				want.Malformed = 1
			case socket:
				want.Redirected, want.RedirectedBytes = 1, uint64(len(c.pkt))
				wantVerdict = XDPRedirect
			default:
				want.NoSocket = 1
			}
			if verdict != wantVerdict || got != want {
				t.Errorf("%s (%v): verdict %d, counters %+v; want %d, %+v", c.name, c.want, verdict, got, wantVerdict, want)
			}
			total.Redirected += want.Redirected
			total.RedirectedBytes += want.RedirectedBytes
			total.Passed += want.Passed
			total.NoSocket += want.NoSocket
			total.Malformed += want.Malformed
		}
		if t.Failed() {
			return
		}
		t.Logf("counters after the table: %+v", total)
	}

	start := counters(t, p)
	t.Run("no socket", func(t *testing.T) { check(t, false) })
	t.Run("socket", func(t *testing.T) {
		attachTestXSK(t, p)
		check(t, true)
	})
	// The totals over both passes: each case counted exactly once per pass.
	var want Counters
	for _, c := range steerCases() {
		switch c.want {
		case classOther:
			want.Passed += 2
		case classMalformed:
			want.Malformed += 2
		case classOurs:
			want.NoSocket++
			want.Redirected++
			want.RedirectedBytes += uint64(len(c.pkt))
		}
	}
	if got := sub(counters(t, p), start); got != want {
		t.Errorf("total counters %+v, want %+v", got, want)
	}
}

func TestRunShortFrame(t *testing.T) {
	privileged.Require(t)
	p := loadTest(t)
	before := counters(t, p)
	if _, err := p.Run(make([]byte, ethHeaderLen-1)); err == nil {
		t.Error("Run accepted a 13-byte frame; the kernel demands at least an Ethernet header")
	}
	if got := sub(counters(t, p), before); got != (Counters{}) {
		t.Errorf("counters moved: %+v", got)
	}
}

func TestFaultInjection(t *testing.T) {
	privileged.Require(t)
	p := loadTest(t)
	attachTestXSK(t, p)
	defer pinCPU(t)()

	ours := ipv4UDP(testPort, 64)
	others := [][]byte{
		ipv4UDP(otherPort, 64),
		ether(etherTypeIPv4, ipv4(protoTCP, tcp(testPort), 0)),
		ether(etherTypeARP, arp()),
		edit(ours, func(b []byte) { b[ethHeaderLen] = 0x44 }), // malformed
	}
	const n = 2000
	sequence := func(interleave bool) []uint32 {
		t.Helper()
		verdicts := make([]uint32, n)
		for i := range verdicts {
			if interleave {
				for _, o := range others {
					if v := run(t, p, o); v != XDPPass {
						t.Fatalf("other traffic got verdict %d", v)
					}
				}
			}
			verdicts[i] = run(t, p, ours)
		}
		return verdicts
	}
	set := func(prob float64, seed uint64) {
		t.Helper()
		if err := p.SetFaultDrop(prob, seed); err != nil {
			t.Fatalf("SetFaultDrop(%v, %d): %v", prob, seed, err)
		}
	}
	count := func(verdicts []uint32, want uint32) int {
		k := 0
		for _, v := range verdicts {
			if v == want {
				k++
			}
		}
		return k
	}

	// Half: a binomial(2000, 0.5) count, deterministic per seed.
	set(0.5, 42)
	before := counters(t, p)
	first := sequence(false)
	drops := count(first, XDPDrop)
	if drops < 850 || drops > 1150 || drops+count(first, XDPRedirect) != n {
		t.Fatalf("p=0.5: %d drops and %d redirects of %d", drops, count(first, XDPRedirect), n)
	}
	got := sub(counters(t, p), before)
	if got.FaultDropped != uint64(drops) || got.Redirected != uint64(n-drops) || got.Passed+got.NoSocket+got.Malformed != 0 {
		t.Errorf("counters %+v after %d drops", got, drops)
	}
	t.Logf("p=0.5 seed 42: %d of %d dropped", drops, n)

	set(0.5, 42)
	if again := sequence(false); !slices.Equal(again, first) {
		t.Error("same seed, different drop sequence")
	}
	set(0.5, 42)
	before = counters(t, p)
	if again := sequence(true); !slices.Equal(again, first) {
		t.Error("same seed, different drop sequence when other traffic is interleaved")
	}
	got = sub(counters(t, p), before)
	if got.Passed != 3*n || got.Malformed != n || got.FaultDropped != uint64(drops) {
		t.Errorf("counters %+v with interleaved traffic", got)
	}
	set(0.5, 43)
	if other := sequence(false); slices.Equal(other, first) {
		t.Error("seeds 42 and 43 gave the same drop sequence")
	}

	// All and nothing.
	set(1, 7)
	if v := sequence(true); count(v, XDPDrop) != n {
		t.Errorf("p=1: %d of %d dropped", count(v, XDPDrop), n)
	}
	set(0, 7)
	if v := sequence(false); count(v, XDPRedirect) != n {
		t.Errorf("p=0: %d of %d redirected", count(v, XDPRedirect), n)
	}

	// Only packets that would be redirected are dropped: without a socket they pass.
	set(1, 7)
	if err := p.ClearSocket(0); err != nil {
		t.Fatal(err)
	}
	before = counters(t, p)
	if v := run(t, p, ours); v != XDPPass {
		t.Errorf("p=1 without socket: verdict %d, want pass", v)
	}
	if got := sub(counters(t, p), before); got != (Counters{NoSocket: 1}) {
		t.Errorf("p=1 without socket: counters %+v", got)
	}

	for _, bad := range []float64{math.NaN(), -0.01, 1.01, math.Inf(1), math.Inf(-1)} {
		if err := p.SetFaultDrop(bad, 1); err == nil {
			t.Errorf("SetFaultDrop(%v) accepted", bad)
		}
	}
}

func TestLoadInvalidOptions(t *testing.T) {
	for _, opts := range []Options{
		{},
		{QueueCount: 4},
		{Port: testPort, QueueCount: -1},
		{Port: testPort, QueueCount: MaxQueueCount + 1},
	} {
		p, err := Load(opts)
		if err == nil {
			p.Close()
			t.Errorf("Load(%+v) succeeded", opts)
			continue
		}
		if !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("Load(%+v): %v, want ErrInvalidOptions", opts, err)
		}
	}
}

func TestLoadOptions(t *testing.T) {
	privileged.Require(t)
	p, err := Load(Options{Port: 9, QueueCount: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Port() != 9 || p.QueueCount() != 3 {
		t.Errorf("Port %d QueueCount %d, want 9 and 3", p.Port(), p.QueueCount())
	}
	// Port 9 is ours now, testPort is not.
	if v := run(t, p, ipv4UDP(9, 8)); v != XDPPass || counters(t, p).NoSocket != 1 {
		t.Errorf("port 9: verdict %d, counters %+v", v, counters(t, p))
	}
	d := DefaultOptions()
	d.Port = testPort
	q, err := Load(d)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if q.QueueCount() != DefaultQueueCount {
		t.Errorf("QueueCount %d, want %d", q.QueueCount(), DefaultQueueCount)
	}
}

func TestSocketErrors(t *testing.T) {
	privileged.Require(t)
	p, err := Load(Options{Port: testPort, QueueCount: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, q := range []int{-1, 2} {
		if err := p.SetSocket(q, 0); err == nil {
			t.Errorf("SetSocket(%d) accepted", q)
		}
		if err := p.ClearSocket(q); err == nil {
			t.Errorf("ClearSocket(%d) accepted", q)
		}
	}
	if err := p.SetSocket(0, -1); err == nil {
		t.Error("SetSocket(fd -1) accepted")
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := p.SetSocket(1, fd); err == nil {
		t.Error("SetSocket accepted a UDP socket")
	}
	if err := p.ClearSocket(1); err != nil {
		t.Errorf("ClearSocket of an empty queue: %v", err)
	}
}

func TestAttachDetachClose(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	p, err := Load(Options{Port: testPort})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// The bed numbers the ends 2 and 3, so the Program's per-ifindex bookkeeping tells
	// them apart although they live in different namespaces.
	a, b := bed.A, bed.B
	ifA, ifB := a.IfIndex, b.IfIndex

	attach := func(h *testbed.Host, ifindex int, mode Mode) (got Mode, err error) {
		err = h.Do(func() error {
			got, err = p.Attach(ifindex, mode)
			return err
		})
		return got, err
	}
	const kernelDrvMode, kernelSKBMode = 1, 2 // XDP_ATTACHED_DRV, XDP_ATTACHED_SKB

	if mode, err := attach(a, ifA, AttachAuto); err != nil || mode != AttachNative {
		t.Fatalf("Attach(auto) on veth: %v, %v; want native", mode, err)
	}
	if m := xdpMode(t, a); m != kernelDrvMode {
		t.Errorf("%s: XDP mode %d after native attach", a.Ifname, m)
	}
	if _, err := attach(a, ifA, AttachGeneric); !errors.Is(err, ErrAttached) {
		t.Errorf("second Attach: %v, want ErrAttached", err)
	}
	if mode, err := attach(b, ifB, AttachGeneric); err != nil || mode != AttachGeneric {
		t.Fatalf("Attach(generic): %v, %v", mode, err)
	}
	if m := xdpMode(t, b); m != kernelSKBMode {
		t.Errorf("%s: XDP mode %d after generic attach", b.Ifname, m)
	}
	if _, err := attach(a, 0, AttachNative); err == nil {
		t.Error("Attach(ifindex 0) accepted")
	}
	if _, err := attach(a, ifA+ifB+100, Mode(7)); err == nil {
		t.Error("Attach(mode 7) accepted")
	}

	if err := p.Detach(ifA); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if m := xdpMode(t, a); m != 0 {
		t.Errorf("%s: XDP mode %d after Detach", a.Ifname, m)
	}
	if err := p.Detach(ifA); !errors.Is(err, ErrNotAttached) {
		t.Errorf("second Detach: %v, want ErrNotAttached", err)
	}
	if mode, err := attach(a, ifA, AttachNative); err != nil || mode != AttachNative {
		t.Fatalf("Attach(native) after Detach: %v, %v", mode, err)
	}

	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, h := range []*testbed.Host{a, b} {
		if m := xdpMode(t, h); m != 0 {
			t.Errorf("%s: XDP mode %d after Close", h.Ifname, m)
		}
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := attach(a, ifA, AttachAuto); !errors.Is(err, ErrClosed) {
		t.Errorf("Attach after Close: %v, want ErrClosed", err)
	}
	if err := p.Detach(ifA); !errors.Is(err, ErrClosed) {
		t.Errorf("Detach after Close: %v, want ErrClosed", err)
	}
	if _, err := p.Counters(); !errors.Is(err, ErrClosed) {
		t.Errorf("Counters after Close: %v, want ErrClosed", err)
	}
	if _, err := p.Run(ipv4UDP(testPort, 8)); !errors.Is(err, ErrClosed) {
		t.Errorf("Run after Close: %v, want ErrClosed", err)
	}
	if err := p.SetSocket(0, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("SetSocket after Close: %v, want ErrClosed", err)
	}
	if err := p.SetFaultDrop(0.5, 1); !errors.Is(err, ErrClosed) {
		t.Errorf("SetFaultDrop after Close: %v, want ErrClosed", err)
	}
}

func TestModeString(t *testing.T) {
	for m, want := range map[Mode]string{AttachAuto: "auto", AttachNative: "native", AttachGeneric: "generic", Mode(9): "Mode(9)"} {
		if got := m.String(); got != want {
			t.Errorf("Mode(%d).String() = %q, want %q", int(m), got, want)
		}
	}
}

// FuzzSteer runs arbitrary frames through the kernel program and checks the verdict and
// the counter that moved against the Go model of the verdict table. No socket is set, so
// ours shows as NoSocket.
func FuzzSteer(f *testing.F) {
	for _, c := range steerCases() {
		f.Add(c.pkt)
	}
	privileged.Require(f)
	p, err := Load(Options{Port: testPort})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { p.Close() })

	f.Fuzz(func(t *testing.T, pkt []byte) {
		if len(pkt) < ethHeaderLen || len(pkt) > 9216 {
			return // outside what the kernel's test run accepts (14 bytes to a few pages)
		}
		before := counters(t, p)
		verdict := run(t, p, pkt)
		got := sub(counters(t, p), before)
		var want Counters
		switch model(pkt, testPort) {
		case classOther:
			want.Passed = 1
		case classMalformed:
			want.Malformed = 1
		case classOurs:
			want.NoSocket = 1
		}
		if verdict != XDPPass || got != want {
			t.Errorf("verdict %d counters %+v, model wants pass and %+v\n% x", verdict, got, want, pkt)
		}
	})
}

// TestSocketLifetime checks what SetSocket documents: the map does not keep a closed
// socket, and ClearSocket stops steering.
func TestSocketLifetime(t *testing.T) {
	privileged.Require(t)
	p := loadTest(t)
	bed := testbed.NewT(t, testbed.Options{})
	pkt := ipv4UDP(testPort, 16)

	x := xskOn(t, bed.A)
	if err := p.SetSocket(0, x.fd); err != nil {
		t.Fatal(err)
	}
	if v := run(t, p, pkt); v != XDPRedirect {
		t.Fatalf("with socket: verdict %d", v)
	}
	x.Close()
	if v := run(t, p, pkt); v != XDPPass {
		t.Errorf("after closing the socket: verdict %d, want pass", v)
	}

	// The second socket binds to the peer: a closed socket's queue stays busy until the
	// kernel's deferred cleanup has run.
	y := xskOn(t, bed.B)
	if err := p.SetSocket(0, y.fd); err != nil {
		t.Fatal(err)
	}
	if err := p.ClearSocket(0); err != nil {
		t.Fatal(err)
	}
	before := counters(t, p)
	if v := run(t, p, pkt); v != XDPPass {
		t.Errorf("after ClearSocket: verdict %d, want pass", v)
	}
	if got := sub(counters(t, p), before); got != (Counters{NoSocket: 1}) {
		t.Errorf("after ClearSocket: counters %+v", got)
	}
}

// BenchmarkSteerRedirect is the program's cost for one of our datagrams that it redirects
// to a socket (parse, counters, the arrival stamp, the XSKMAP redirect), measured by the
// kernel over BPF_PROG_TEST_RUN repetitions: ns/op is the kernel's time per run.
func BenchmarkSteerRedirect(b *testing.B) {
	privileged.Require(b)
	p := loadTest(b)
	attachTestXSK(b, p)
	pkt := ipv4UDP(testPort, 32)
	const repeat = 100_000
	var total time.Duration
	runs := 0
	b.ResetTimer()
	for b.Loop() {
		verdict, per, err := p.prog.Benchmark(pkt, repeat, nil)
		if err != nil || verdict != XDPRedirect {
			b.Fatalf("run: verdict %d, %v", verdict, err)
		}
		total += per * repeat
		runs += repeat
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(runs), "ns/pkt")
}
