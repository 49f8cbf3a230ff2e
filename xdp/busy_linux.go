package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// The search for who holds a busy queue or XDP hook (BusyError). It runs in Open, after the
// kernel refused, on Open's thread (so its netlink sockets are in the interface's
// namespace), and never longer than busySearchTime: every netlink wait has that deadline,
// and the /proc scan stops at it or at procScanMaxEntries.

// queueBusy returns Open's error for queue q of the device's interface, bound by another
// AF_XDP socket (cause is NewSocket's error), naming the sockets bound there, the XDP
// program on the interface and the processes holding them, as far as it finds them.
func (d *Device) queueBusy(q int, cause error) error {
	deadline := time.Now().Add(busySearchTime)
	e := &BusyError{Interface: d.cfg.Interface, Queue: q, Err: cause}
	var notes []error
	inodes, diagErr := xskOnQueue(d.ifindex, q, deadline)
	progs, err := attachedPrograms(d.ifindex, deadline)
	if err != nil {
		notes = append(notes, fmt.Errorf("XDP program of the interface: %w", err))
	}
	want := newProcWant(d.ifindex, inodes, progs)
	if diagErr != nil {
		// Without the kernel's word on which socket is bound where, the AF_XDP sockets of
		// the namespace (but this device's own) are the candidates.
		e.QueueUnknown = true
		e.diag = fmt.Sprintf("AF_XDP socket diagnostics: %v", diagErr)
		if errors.Is(diagErr, unix.ENOENT) {
			e.diag = "no AF_XDP socket diagnostics in this kernel: CONFIG_XDP_SOCKETS_DIAG"
		}
		probe := newXSKProbe()
		defer probe.close()
		want.xsk, want.exclude = probe.isXSK, d.socketInodes()
		e.xskScope = "in its network namespace"
		if probe.netns == 0 {
			e.xskScope = "on this host"
		}
	}
	findHolders(e, want, inodes, progs, deadline, &notes)
	e.note = joinNotes(notes)
	return e
}

// hookBusy returns Open's error when the steering program could not be attached because
// another XDP program is (cause is the attach error), naming that program and the
// processes keeping it there, as far as it finds them.
func (d *Device) hookBusy(cause error) error {
	deadline := time.Now().Add(busySearchTime)
	e := &BusyError{Interface: d.cfg.Interface, Queue: -1, Err: cause}
	var notes []error
	progs, err := attachedPrograms(d.ifindex, deadline)
	if err != nil {
		notes = append(notes, fmt.Errorf("XDP program of the interface: %w", err))
	}
	findHolders(e, newProcWant(d.ifindex, nil, progs), nil, progs, deadline, &notes)
	e.note = joinNotes(notes)
	return e
}

// newProcWant asks a /proc scan for the sockets with the given inodes and for the programs.
func newProcWant(ifindex int, inodes []uint64, progs []xdpProg) procWant {
	want := procWant{sockets: make(map[uint64]bool), progs: make(map[uint32]bool), ifindex: uint32(ifindex)}
	for _, ino := range inodes {
		want.sockets[ino] = true
	}
	for _, p := range progs {
		want.progs[p.id] = true
	}
	return want
}

// socketInodes returns the inodes of the device's own sockets (bound on other queues
// before one was found busy).
func (d *Device) socketInodes() map[uint64]bool {
	own := make(map[uint64]bool)
	for _, l := range d.links {
		var st unix.Stat_t
		if unix.Fstat(l.sock.FD(), &st) == nil {
			own[st.Ino] = true
		}
	}
	return own
}

// findHolders scans /proc once for what want asks and fills e: the sockets with the given
// inodes (or the candidate AF_XDP sockets want.xsk accepts), the programs with their
// names, and the processes holding them.
func findHolders(e *BusyError, want procWant, inodes []uint64, progs []xdpProg, deadline time.Time, notes *[]error) {
	var found procFound
	if len(inodes) > 0 || len(progs) > 0 || want.xsk != nil {
		found = scanProc("/proc", deadline, procScanMaxEntries, want)
		if found.stopped != "" {
			*notes = append(*notes, errors.New(found.stopped))
		}
	}
	for _, ino := range inodes {
		e.Sockets = append(e.Sockets, BusySocket{Inode: ino, Holders: found.sockets[ino]})
	}
	candidates := make([]uint64, 0, len(found.xsks))
	for ino := range found.xsks {
		candidates = append(candidates, ino)
	}
	slices.Sort(candidates)
	for _, ino := range candidates {
		e.Sockets = append(e.Sockets, BusySocket{Inode: ino, Holders: found.xsks[ino]})
	}
	for _, p := range progs {
		ap := AttachedProgram{ID: p.id, Mode: p.mode, Name: programName(p.id)}
		if l, ok := found.links[p.id]; ok {
			ap.LinkID, ap.LinkHolders = l.id, l.holders
		} else {
			ap.ProgHolders = found.progs[p.id]
		}
		e.Programs = append(e.Programs, ap)
	}
}

// xskProbe recognises the AF_XDP sockets of any process that are in the calling thread's
// network namespace, for when the kernel has no AF_XDP socket diagnostics. A socket's
// protocol is the "system.sockprotoname" attribute of its /proc/PID/fd entry ("XDP");
// its namespace is compared by cookie (SO_NETNS_COOKIE, Linux 5.14) on a duplicate of the
// descriptor taken with pidfd_getfd (Linux 5.6) and closed at once, which leaves the
// owner's socket as it was.
type xskProbe struct {
	netns uint64 // cookie of the namespace; 0 if unknown: sockets of every namespace count
	pid   int    // the process probed last
	pidfd int    // its pidfd, -1 if it could not be opened
}

// newXSKProbe returns a probe for the calling thread's network namespace.
func newXSKProbe() *xskProbe {
	p := &xskProbe{pidfd: -1}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return p
	}
	defer unix.Close(fd)
	if c, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE); err == nil {
		p.netns = c
	}
	return p
}

// isXSK reports whether descriptor fd of process pid, at path under /proc, is an AF_XDP
// socket in the probe's namespace. Descriptors of one process come in a row: its pidfd is
// opened once.
func (p *xskProbe) isXSK(pid, fd int, path string) bool {
	var name [16]byte
	n, err := unix.Getxattr(path, "system.sockprotoname", name[:])
	if err != nil || n <= 0 || n > len(name) || strings.TrimRight(string(name[:n]), "\x00") != "XDP" {
		return false
	}
	if p.netns == 0 {
		return true
	}
	if pid != p.pid {
		p.close()
		p.pid = pid
		if p.pidfd, err = unix.PidfdOpen(pid, 0); err != nil {
			p.pidfd = -1
		}
	}
	if p.pidfd < 0 {
		return false
	}
	dup, err := unix.PidfdGetfd(p.pidfd, fd, 0)
	if err != nil {
		return false
	}
	defer unix.Close(dup)
	c, err := unix.GetsockoptUint64(dup, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	return err == nil && c == p.netns
}

// close closes the probe's pidfd.
func (p *xskProbe) close() {
	if p.pidfd >= 0 {
		unix.Close(p.pidfd)
		p.pidfd = -1
	}
}

// joinNotes joins the search's notes into one line ("" for none).
func joinNotes(notes []error) string {
	s := ""
	for i, n := range notes {
		if i > 0 {
			s += "; "
		}
		s += n.Error()
	}
	return s
}

// programName returns the name of the BPF program with the given id, or "" if it cannot be
// read (it went away, or no CAP_SYS_ADMIN).
func programName(id uint32) string {
	p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
	if err != nil {
		return ""
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		return ""
	}
	return info.Name
}

// xskOnQueue returns the inodes of the AF_XDP sockets bound to queue q of interface
// ifindex, from the kernel's AF_XDP socket diagnostics (the xsk_diag module, which the
// kernel loads on demand where it is a module).
func xskOnQueue(ifindex, q int, deadline time.Time) ([]uint64, error) {
	bodies, err := netlinkQuery(unix.NETLINK_SOCK_DIAG, unix.SOCK_DIAG_BY_FAMILY, unix.NLM_F_DUMP, xdpDiagRequest(), deadline)
	if err != nil {
		return nil, err
	}
	var inodes []uint64
	for _, b := range bodies {
		s, err := parseXSKDiag(b)
		if err != nil {
			return inodes, err
		}
		if s.bound && s.ifindex == uint32(ifindex) && s.queue == uint32(q) {
			inodes = append(inodes, s.inode)
		}
	}
	return inodes, nil
}

// attachedPrograms returns the XDP programs attached to interface ifindex (RTM_GETLINK's
// IFLA_XDP).
func attachedPrograms(ifindex int, deadline time.Time) ([]xdpProg, error) {
	bodies, err := netlinkQuery(unix.NETLINK_ROUTE, unix.RTM_GETLINK, 0, linkRequest(ifindex), deadline)
	if err != nil {
		return nil, err
	}
	if len(bodies) != 1 {
		return nil, fmt.Errorf("%w: %d answers to RTM_GETLINK", errNetlinkAnswer, len(bodies))
	}
	return parseLinkXDP(bodies[0])
}

// netlinkMaxAnswer bounds the bytes netlinkQuery reads for one request.
const netlinkMaxAnswer = 4 << 20

// netlinkQuery sends one request (message type typ with flags, then body) on a new netlink
// socket of protocol proto, in the calling thread's network namespace, and returns the
// bodies of the kernel's answers: every one up to NLMSG_DONE for a dump (NLM_F_DUMP in
// flags), else the first. It gives up at deadline and after netlinkMaxAnswer bytes.
func netlinkQuery(proto int, typ, flags uint16, body []byte, deadline time.Time) ([][]byte, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("bind netlink socket: %w", err)
	}
	const seq = 1
	req := make([]byte, unix.SizeofNlMsghdr+len(body))
	putNlMsghdr(req, typ, flags|unix.NLM_F_REQUEST, seq)
	copy(req[unix.SizeofNlMsghdr:], body)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("netlink send: %w", err)
	}
	dump := flags&unix.NLM_F_DUMP != 0
	buf := make([]byte, 64<<10)
	var bodies [][]byte
	for total := 0; total < netlinkMaxAnswer; {
		left := time.Until(deadline)
		if left <= 0 {
			return bodies, fmt.Errorf("no complete netlink answer within %v", busySearchTime)
		}
		tv := unix.NsecToTimeval(max(left.Nanoseconds(), int64(time.Millisecond)))
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return bodies, fmt.Errorf("netlink receive timeout: %w", err)
		}
		n, from, err := unix.Recvfrom(fd, buf, unix.MSG_TRUNC)
		switch {
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN):
			continue // EAGAIN: the timeout; the deadline check above ends it
		case err != nil:
			return bodies, fmt.Errorf("netlink receive: %w", err)
		case n > len(buf):
			return bodies, fmt.Errorf("%w: message of %d bytes truncated", errNetlinkAnswer, n)
		}
		if sa, ok := from.(*unix.SockaddrNetlink); !ok || sa.Pid != 0 {
			continue // not from the kernel
		}
		total += n
		nb, err := parseNetlinkBatch(buf[:n], seq, dump)
		if err != nil {
			return bodies, err
		}
		bodies = append(bodies, nb.bodies...)
		if nb.err != nil {
			return bodies, nb.err
		}
		if nb.done {
			return bodies, nil
		}
	}
	return bodies, fmt.Errorf("netlink answer longer than %d bytes", netlinkMaxAnswer)
}

// putNlMsghdr writes a netlink message header for a message of len(b) bytes into b.
func putNlMsghdr(b []byte, typ, flags uint16, seq uint32) {
	binary.NativeEndian.PutUint32(b[0:4], uint32(len(b)))
	binary.NativeEndian.PutUint16(b[4:6], typ)
	binary.NativeEndian.PutUint16(b[6:8], flags)
	binary.NativeEndian.PutUint32(b[8:12], seq)
	binary.NativeEndian.PutUint32(b[12:16], 0)
}
