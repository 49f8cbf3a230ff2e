package xdp

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// attr encodes one netlink attribute, padded to 4 bytes.
func attr(typ uint16, v []byte) []byte {
	b := make([]byte, align4(4+len(v)))
	binary.NativeEndian.PutUint16(b[0:2], uint16(4+len(v)))
	binary.NativeEndian.PutUint16(b[2:4], typ)
	copy(b[4:], v)
	return b
}

// xskMsg encodes an AF_XDP diagnostics answer for a socket with inode ino, followed by attrs.
func xskMsg(ino uint32, attrs ...[]byte) []byte {
	b := make([]byte, xdpDiagMsgLen)
	b[0] = unix.AF_XDP
	binary.NativeEndian.PutUint32(b[4:8], ino)
	for _, a := range attrs {
		b = append(b, a...)
	}
	return b
}

func TestParseXSKDiag(t *testing.T) {
	info := append(u32(5), u32(3)...)
	d, err := parseXSKDiag(xskMsg(4242, attr(2, u32(0)), attr(xdpDiagInfo, info)))
	if err != nil || d != (xskDiag{inode: 4242, ifindex: 5, queue: 3, bound: true}) {
		t.Fatalf("got %+v, %v", d, err)
	}
	// Unbound sockets have no interface worth matching, still parse.
	if d, err := parseXSKDiag(xskMsg(7)); err != nil || d.bound || d.inode != 7 {
		t.Fatalf("no attributes: %+v, %v", d, err)
	}
	// Truncated or odd input is an error, never a panic.
	bad := map[string][]byte{
		"empty":           nil,
		"short header":    xskMsg(1)[:xdpDiagMsgLen-1],
		"wrong family":    append([]byte{unix.AF_INET}, xskMsg(1)[1:]...),
		"short info":      xskMsg(1, attr(xdpDiagInfo, u32(5))),
		"attr past end":   xskMsg(1, attr(xdpDiagInfo, info))[:xdpDiagMsgLen+6],
		"attr length < 4": append(xskMsg(1), 2, 0, 1, 0),
	}
	for name, b := range bad {
		if _, err := parseXSKDiag(b); !errors.Is(err, errNetlinkAnswer) {
			t.Errorf("%s: error %v, want errNetlinkAnswer", name, err)
		}
	}
}

// linkMsg encodes an RTM_NEWLINK answer with the given IFLA_XDP nested attributes.
func linkMsg(xdpAttrs ...[]byte) []byte {
	var nested []byte
	for _, a := range xdpAttrs {
		nested = append(nested, a...)
	}
	b := make([]byte, unix.SizeofIfInfomsg)
	b = append(b, attr(unix.IFLA_IFNAME, []byte("xa\x00"))...)
	return append(b, attr(unix.IFLA_XDP|0x8000, nested)...) // NLA_F_NESTED, as the kernel sends it
}

func TestParseLinkXDP(t *testing.T) {
	cases := []struct {
		name string
		msg  []byte
		want []xdpProg
	}{
		{"none", linkMsg(attr(iflaXDPAttached, []byte{0})), nil},
		{"native", linkMsg(attr(iflaXDPAttached, []byte{xdpAttachedDrv}), attr(iflaXDPProgID, u32(31))), []xdpProg{{31, "native"}}},
		{"generic", linkMsg(attr(iflaXDPAttached, []byte{xdpAttachedSKB}), attr(iflaXDPProgID, u32(32))), []xdpProg{{32, "generic"}}},
		{"multi", linkMsg(attr(iflaXDPAttached, []byte{xdpAttachedMulti}), attr(iflaXDPDrvProgID, u32(1)), attr(iflaXDPHWProgID, u32(2))),
			[]xdpProg{{1, "native"}, {2, "offload"}}},
		{"no IFLA_XDP", make([]byte, unix.SizeofIfInfomsg), nil},
	}
	for _, c := range cases {
		got, err := parseLinkXDP(c.msg)
		if err != nil || len(got) != len(c.want) {
			t.Errorf("%s: %v, %v; want %v", c.name, got, err, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s: %v, want %v", c.name, got, c.want)
			}
		}
	}
	bad := map[string][]byte{
		"short header":  make([]byte, unix.SizeofIfInfomsg-1),
		"short prog id": linkMsg(attr(iflaXDPAttached, []byte{xdpAttachedDrv}), attr(iflaXDPProgID, []byte{1, 2})),
		"empty mode":    linkMsg(attr(iflaXDPAttached, nil)),
		"cut":           linkMsg(attr(iflaXDPAttached, []byte{1}), attr(iflaXDPProgID, u32(3)))[:unix.SizeofIfInfomsg+14],
	}
	for name, b := range bad {
		if _, err := parseLinkXDP(b); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// nlMsg encodes a netlink message.
func nlMsg(typ uint16, seq uint32, body []byte) []byte {
	b := make([]byte, align4(unix.SizeofNlMsghdr+len(body)))
	putNlMsghdr(b[:unix.SizeofNlMsghdr+len(body)], typ, 0, seq)
	copy(b[unix.SizeofNlMsghdr:], body)
	return b
}

func TestParseNetlinkBatch(t *testing.T) {
	a, b := []byte{1, 2, 3}, []byte{4, 5, 6, 7}
	batch := append(append(append(nlMsg(20, 1, a), nlMsg(20, 9, b)...), nlMsg(20, 1, b)...), nlMsg(unix.NLMSG_DONE, 1, u32(0))...)
	nb, err := parseNetlinkBatch(batch, 1, true)
	if err != nil || !nb.done || len(nb.bodies) != 2 || string(nb.bodies[0]) != string(a) || string(nb.bodies[1]) != string(b) {
		t.Fatalf("dump: %+v, %v", nb, err)
	}
	nb, err = parseNetlinkBatch(nlMsg(20, 1, a), 1, false)
	if err != nil || !nb.done || len(nb.bodies) != 1 {
		t.Fatalf("single answer: %+v, %v", nb, err)
	}
	errno := int32(-int32(syscall.ENOENT))
	nb, err = parseNetlinkBatch(nlMsg(unix.NLMSG_ERROR, 1, binary.NativeEndian.AppendUint32(nil, uint32(errno))), 1, true)
	if err != nil || !nb.done || nb.err != syscall.ENOENT {
		t.Fatalf("error answer: %+v, %v", nb, err)
	}
	for name, b := range map[string][]byte{
		"short header":    make([]byte, 10),
		"length too long": nlMsg(20, 1, a)[:unix.SizeofNlMsghdr+2],
		"length < header": func() []byte { m := nlMsg(20, 1, a); binary.NativeEndian.PutUint32(m, 8); return m }(),
		"short error":     nlMsg(unix.NLMSG_ERROR, 1, []byte{1}),
	} {
		if _, err := parseNetlinkBatch(b, 1, true); !errors.Is(err, errNetlinkAnswer) {
			t.Errorf("%s: %v, want errNetlinkAnswer", name, err)
		}
	}
}

func TestParseFdinfo(t *testing.T) {
	link := "pos:\t0\nflags:\t02000002\nmnt_id:\t16\nino:\t1057\nlink_type:\txdp\nlink_id:\t12\nprog_tag:\t1f0a2b\nprog_id:\t77\nifindex:\t5\n"
	if fi := parseFdinfo(link); fi != (fdInfo{linkType: "xdp", linkID: 12, progID: 77, ifindex: 5, hasIfindex: true}) {
		t.Errorf("link: %+v", fi)
	}
	prog := "pos:\t0\nprog_type:\t6\nprog_jited:\t1\nprog_tag:\tab\nmemlock:\t4096\nprog_id:\t78\n"
	if fi := parseFdinfo(prog); fi != (fdInfo{progID: 78}) {
		t.Errorf("prog: %+v", fi)
	}
	if fi := parseFdinfo("prog_id:\tx\nifindex\n:\n"); fi != (fdInfo{}) {
		t.Errorf("garbage: %+v", fi)
	}
	for target, want := range map[string]uint64{"socket:[123]": 123, "socket:[]": 0, "pipe:[5]": 0, "socket:[12": 0} {
		if got, ok := socketInode(target); got != want || ok != (want != 0) {
			t.Errorf("socketInode(%q) = %d, %v", target, got, ok)
		}
	}
}

// fakeProc builds a /proc look-alike: process pid named comm with the given fd link targets
// (and, for BPF objects, fdinfo text).
func fakeProc(t *testing.T, root string, pid int, comm string, fds map[int][2]string) {
	t.Helper()
	base := filepath.Join(root, strconv.Itoa(pid))
	for _, d := range []string{"fd", "fdinfo"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "comm"), []byte(comm+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for fd, v := range fds {
		if err := os.Symlink(v[0], filepath.Join(base, "fd", strconv.Itoa(fd))); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(base, "fdinfo", strconv.Itoa(fd)), []byte(v[1]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestScanProc(t *testing.T) {
	root := t.TempDir()
	fakeProc(t, root, 100, "holder", map[int][2]string{
		3: {"socket:[555]", ""},
		4: {"socket:[555]", ""}, // a second fd of the same socket: one holder
		5: {"anon_inode:bpf_link", "link_type:\txdp\nlink_id:\t9\nprog_id:\t77\nifindex:\t5\n"},
		6: {"anon_inode:bpf-prog", "prog_type:\t6\nprog_id:\t77\n"},
	})
	fakeProc(t, root, 200, "other", map[int][2]string{
		3: {"socket:[556]", ""},
		4: {"anon_inode:bpf_link", "link_type:\txdp\nlink_id:\t10\nprog_id:\t77\nifindex:\t6\n"}, // another interface
		5: {"anon_inode:bpf-prog", "prog_type:\t6\nprog_id:\t77\n"},
		6: {"/dev/null", ""},
	})
	if err := os.MkdirAll(filepath.Join(root, "self"), 0o755); err != nil { // not a pid: skipped
		t.Fatal(err)
	}
	want := procWant{sockets: map[uint64]bool{555: true}, progs: map[uint32]bool{77: true}, ifindex: 5}
	f := scanProc(root, time.Now().Add(time.Second), 1000, want)
	if f.stopped != "" {
		t.Fatalf("stopped: %s", f.stopped)
	}
	if h := f.sockets[555]; len(h) != 1 || h[0].PID != 100 || h[0].Comm != "holder" {
		t.Errorf("socket holders %+v", h)
	}
	if l := f.links[77]; l.id != 9 || len(l.holders) != 1 || l.holders[0].PID != 100 || l.holders[0].FD != 5 {
		t.Errorf("link %+v", l)
	}
	if p := f.progs[77]; len(p) != 2 {
		t.Errorf("program holders %+v", p)
	}

	// Candidate AF_XDP sockets, as the probe says, but those excluded and the ones asked for.
	want.xsk = func(pid, fd int, path string) bool {
		return filepath.Base(path) == strconv.Itoa(fd) && (pid == 200 || fd == 3)
	}
	want.exclude = map[uint64]bool{556: true}
	f = scanProc(root, time.Now().Add(time.Second), 1000, want)
	if len(f.xsks) != 0 || len(f.sockets[555]) != 1 {
		t.Errorf("candidates %+v, sockets %+v: want none (555 is asked for, 556 excluded)", f.xsks, f.sockets)
	}
	want.exclude = nil
	f = scanProc(root, time.Now().Add(time.Second), 1000, want)
	if h := f.xsks[556]; len(f.xsks) != 1 || len(h) != 1 || h[0].PID != 200 || h[0].Comm != "other" {
		t.Errorf("candidates %+v: want 556 held by 200", f.xsks)
	}

	// Bounded: by entries, and by time.
	if f := scanProc(root, time.Now().Add(time.Second), 3, want); !strings.Contains(f.stopped, "after 3 entries") {
		t.Errorf("entry limit: stopped %q", f.stopped)
	}
	if f := scanProc(root, time.Now().Add(-time.Second), 1000, want); !strings.Contains(f.stopped, "time limit") || len(f.sockets) != 0 {
		t.Errorf("time limit: stopped %q, found %+v", f.stopped, f.sockets)
	}
	if f := scanProc(filepath.Join(root, "missing"), time.Now().Add(time.Second), 1000, want); f.stopped == "" {
		t.Error("a missing root is not reported")
	}
}

// The message names the queue and the holders, the program and its link's holder, and never
// a bind mode; without a holder it says how to look.
func TestBusyErrorMessage(t *testing.T) {
	cause := errors.Join(errors.New("bind af_xdp socket to ifindex 5 queue 0: queue already bound by another AF_XDP socket"), syscall.EBUSY)
	e := &BusyError{
		Interface: "xa", Queue: 0, Err: cause,
		Sockets:  []BusySocket{{Inode: 555, Holders: []Process{{PID: 100, Comm: "holder", FD: 3}}}},
		Programs: []AttachedProgram{{ID: 77, Name: "steer", Mode: "native", LinkID: 9, LinkHolders: []Process{{PID: 100, Comm: "holder"}}}},
	}
	var err error = e
	if !errors.Is(err, ErrBusy) || !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("%v: want ErrBusy and EBUSY", err)
	}
	want := `xdp: queue 0 of xa is already bound by another AF_XDP socket, inode 555 held by pid 100 (holder); ` +
		`the XDP program on xa is 77 "steer" (native), attached by bpf_link 9 held by pid 100 (holder): device or resource busy`
	if got := err.Error(); got != want {
		t.Errorf("message\n%s\nwant\n%s", got, want)
	}

	e = &BusyError{Interface: "xa", Queue: 2, Err: cause, note: "scan of /proc stopped at its time limit"}
	msg := e.Error()
	for _, s := range []string{"queue 2 of xa", "holder was not found", "time limit", "ss --xdp -p", "bpftool net"} {
		if !strings.Contains(msg, s) {
			t.Errorf("message %q lacks %q", msg, s)
		}
	}

	e = &BusyError{Interface: "xa", Queue: 0, Err: cause, QueueUnknown: true, diag: "no diagnostics", xskScope: "in its network namespace",
		Sockets: []BusySocket{{Inode: 1, Holders: []Process{{PID: 100, Comm: "a"}}}, {Inode: 2, Holders: []Process{{PID: 100, Comm: "a"}, {PID: 200, Comm: "b"}}}}}
	want = `xdp: queue 0 of xa is already bound by another AF_XDP socket; which one, the kernel cannot say (no diagnostics), ` +
		`but AF_XDP sockets in its network namespace are held by pid 100 (a), pid 200 (b): device or resource busy`
	if got := e.Error(); got != want {
		t.Errorf("message\n%s\nwant\n%s", got, want)
	}

	e = &BusyError{Interface: "xa", Queue: -1, Err: errors.Join(syscall.EBUSY, syscall.EEXIST),
		Programs: []AttachedProgram{{ID: 31, Name: "other", Mode: "generic", ProgHolders: []Process{{PID: 7, Comm: "loader"}}}}}
	want = `xdp: xa already has another XDP program attached: 31 "other" (generic), no bpf_link to it found, the program held by pid 7 (loader): device or resource busy`
	if got := e.Error(); got != want {
		t.Errorf("message\n%s\nwant\n%s", got, want)
	}
	if !errors.Is(e, syscall.EEXIST) {
		t.Error("the attach error's EEXIST does not match")
	}
}

// Nothing the kernel sends makes a parser panic: every answer of the search, mangled.
func FuzzParseKernelAnswers(f *testing.F) {
	info := append(u32(5), u32(3)...)
	f.Add(xskMsg(4242, attr(xdpDiagInfo, info)))
	f.Add(linkMsg(attr(iflaXDPAttached, []byte{xdpAttachedMulti}), attr(iflaXDPDrvProgID, u32(1))))
	f.Add(nlMsg(20, 1, xskMsg(1)))
	f.Add([]byte("link_type:\txdp\nlink_id:\t12\nprog_id:\t77\nifindex:\t5\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parseXSKDiag(b)
		_, _ = parseLinkXDP(b)
		_, _ = parseNetlinkBatch(b, 1, true)
		_, _ = parseNetlinkBatch(b, 1, false)
		_ = parseFdinfo(string(b))
		_, _ = socketInode(string(b))
	})
}
