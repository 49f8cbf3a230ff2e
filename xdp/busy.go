package xdp

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"
)

// ErrBusy is wrapped by Open's error when something Open needs on the interface is taken:
// a queue to serve is bound by another AF_XDP socket (the error then also matches
// syscall.EBUSY and xsk.ErrBusy), or another XDP program is attached to the interface (the
// error then also matches the kernel's refusal, EBUSY or EEXIST). The error is a
// *BusyError, which names the holder as far as Open could find it.
var ErrBusy = errors.New("xdp: interface busy")

// BusyError is Open's error when another AF_XDP socket is bound to a queue Open has to bind,
// or another XDP program is attached to the interface. Open looks for who holds them at
// once, best effort and for at most 200 ms: the kernel's AF_XDP socket diagnostics
// (NETLINK_SOCK_DIAG) for the sockets bound to the queue, or, where the kernel has none,
// the AF_XDP sockets in the interface's network namespace; the interface's XDP attributes
// for its program; the file descriptors in /proc for the processes holding either. The
// message names what was found, never the bind mode being tried (a busy queue refuses
// every mode alike), and says how to look further when nothing was.
// errors.Is(err, ErrBusy) holds, and so does errors.Is with the kernel's errno.
type BusyError struct {
	// Interface is the name of the interface.
	Interface string
	// Queue is the queue bound by another socket, or -1 when it is the XDP program that
	// could not be attached.
	Queue int
	// Sockets are the AF_XDP sockets found bound to Queue, with the processes holding them.
	// When QueueUnknown is set they are instead the AF_XDP sockets found in the interface's
	// network namespace (this device's own excepted): the holder is among them.
	Sockets []BusySocket
	// QueueUnknown says the kernel could not tell which socket is bound to Queue: it has no
	// AF_XDP socket diagnostics (CONFIG_XDP_SOCKETS_DIAG), or they failed.
	QueueUnknown bool
	// Programs are the XDP programs found attached to the interface (one per attach mode).
	Programs []AttachedProgram
	// Err is the kernel's refusal as the bind or attach reported it.
	Err error

	note     string // why the search may have missed the holder (a time limit, an error)
	diag     string // why the kernel could not say which socket is bound (QueueUnknown)
	xskScope string // where the candidate sockets were looked for (QueueUnknown)
}

// BusySocket is an AF_XDP socket bound to the busy queue (or, with QueueUnknown, one that
// may be), and the processes that hold it.
type BusySocket struct {
	// Inode is the socket's inode number: what `ss --xdp` shows and /proc/PID/fd/N links to
	// ("socket:[INODE]").
	Inode uint64
	// Holders are the processes with a file descriptor for it (none if it was not found in
	// /proc: another PID namespace, or the search stopped).
	Holders []Process
}

// AttachedProgram is an XDP program attached to an interface, and who keeps it there.
type AttachedProgram struct {
	// ID is the kernel's program id (`bpftool prog show id ID`).
	ID uint32
	// Name is the program's name (at most 15 bytes), empty if it could not be read.
	Name string
	// Mode is how it is attached: "native", "generic" or "offload".
	Mode string
	// LinkID is the id of the bpf_link attaching it, 0 when no process was found holding
	// one (the program may have been attached through netlink, which needs no holder).
	LinkID uint32
	// LinkHolders are the processes holding that bpf_link: as long as one does, the program
	// stays attached.
	LinkHolders []Process
	// ProgHolders are other processes found holding the program itself (the one that loaded
	// it, typically), when no bpf_link holder was found.
	ProgHolders []Process
}

// Process is a process holding a file descriptor, as found in /proc.
type Process struct {
	PID  int    // process id, in the PID namespace of /proc
	Comm string // its command name (/proc/PID/comm), empty if unreadable
	FD   int    // the file descriptor
}

// busySearchTime bounds the search for the holder of a busy queue or XDP hook (it runs in
// Open only, after the kernel refused).
const busySearchTime = 200 * time.Millisecond

// Error describes what is taken and by whom.
func (e *BusyError) Error() string {
	var b strings.Builder
	if e.Queue >= 0 {
		fmt.Fprintf(&b, "xdp: queue %d of %s is already bound by another AF_XDP socket", e.Queue, e.Interface)
		if e.QueueUnknown {
			fmt.Fprintf(&b, "; which one, the kernel cannot say (%s)", e.diag)
			if ps := socketHolders(e.Sockets); len(ps) > 0 {
				fmt.Fprintf(&b, ", but AF_XDP sockets %s are held by %s", e.xskScope, processes(ps))
			}
		} else {
			for _, s := range e.Sockets {
				fmt.Fprintf(&b, ", inode %d held by ", s.Inode)
				if len(s.Holders) == 0 {
					b.WriteString("no process visible here")
				} else {
					b.WriteString(processes(s.Holders))
				}
			}
		}
		if len(e.Programs) > 0 {
			fmt.Fprintf(&b, "; the XDP program on %s is ", e.Interface)
			writePrograms(&b, e.Programs)
		}
	} else if len(e.Programs) > 0 {
		fmt.Fprintf(&b, "xdp: %s already has another XDP program attached: ", e.Interface)
		writePrograms(&b, e.Programs)
	} else {
		// The kernel also refuses when a device above (a bond, say) has a program.
		fmt.Fprintf(&b, "xdp: the kernel refused to attach the XDP program to %s, but no other program was found on it (has a device above it one?)", e.Interface)
	}
	if !e.named() {
		b.WriteString("; its holder was not found")
		if e.note != "" {
			b.WriteString(" (" + e.note + ")")
		}
		b.WriteString(": `ss --xdp -p` lists AF_XDP sockets and their processes, `bpftool net` the XDP programs")
	}
	if errno, ok := errnoOf(e.Err); ok {
		b.WriteString(": " + errno.Error())
	}
	return b.String()
}

// named reports whether the error names a holding process.
func (e *BusyError) named() bool {
	for _, s := range e.Sockets {
		if len(s.Holders) > 0 {
			return true
		}
	}
	for _, p := range e.Programs {
		if len(p.LinkHolders) > 0 || len(p.ProgHolders) > 0 {
			return true
		}
	}
	return false
}

// Unwrap returns ErrBusy and the kernel's refusal.
func (e *BusyError) Unwrap() []error { return []error{ErrBusy, e.Err} }

// writePrograms describes attached programs: id, name, mode and holders.
func writePrograms(b *strings.Builder, progs []AttachedProgram) {
	for i, p := range progs {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(b, "%d", p.ID)
		if p.Name != "" {
			fmt.Fprintf(b, " %q", p.Name)
		}
		if p.Mode != "" {
			fmt.Fprintf(b, " (%s)", p.Mode)
		}
		switch {
		case len(p.LinkHolders) > 0:
			fmt.Fprintf(b, ", attached by bpf_link %d held by %s", p.LinkID, processes(p.LinkHolders))
		case len(p.ProgHolders) > 0:
			fmt.Fprintf(b, ", no bpf_link to it found, the program held by %s", processes(p.ProgHolders))
		default:
			b.WriteString(", no process found holding it or a bpf_link to it (attached through netlink?)")
		}
	}
}

// socketHolders returns the processes holding any of socks, each once, in order.
func socketHolders(socks []BusySocket) []Process {
	var ps []Process
	for _, s := range socks {
		for _, h := range s.Holders {
			if !slices.ContainsFunc(ps, func(p Process) bool { return p.PID == h.PID }) {
				ps = append(ps, h)
			}
		}
	}
	return ps
}

// processes lists processes as "pid 12 (name), pid 34 (name)".
func processes(ps []Process) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("pid %d", p.PID)
		if p.Comm != "" {
			parts[i] += " (" + p.Comm + ")"
		}
	}
	return strings.Join(parts, ", ")
}

// errnoOf returns the first errno in err's tree.
func errnoOf(err error) (syscall.Errno, bool) {
	var errno syscall.Errno
	ok := errors.As(err, &errno)
	return errno, ok
}
