package xdp

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// procScanMaxEntries bounds the /proc entries (process directories and file descriptors)
// one search for a holder reads.
const procScanMaxEntries = 1 << 16

// maxHolders bounds the processes kept for one socket, link or program.
const maxHolders = 8

// maxXSKs bounds the AF_XDP sockets a scan collects for procWant.xsk.
const maxXSKs = 64

// procWant is what a /proc scan looks for.
type procWant struct {
	sockets map[uint64]bool // socket inodes
	progs   map[uint32]bool // BPF program ids: the XDP links attaching them on ifindex, and the programs
	ifindex uint32
	// xsk, when not nil, tells whether file descriptor fd of process pid (path in /proc) is
	// an AF_XDP socket worth naming; the scan collects those it is asked about (sockets
	// not in sockets or exclude) in procFound.xsks.
	xsk     func(pid, fd int, path string) bool
	exclude map[uint64]bool // socket inodes never to collect in xsks
}

// linkHold is a bpf_link and the processes holding it.
type linkHold struct {
	id      uint32
	holders []Process
}

// procFound is what a /proc scan found.
type procFound struct {
	sockets map[uint64][]Process // holders by socket inode
	xsks    map[uint64][]Process // AF_XDP sockets procWant.xsk accepted, by inode (at most maxXSKs)
	links   map[uint32]linkHold  // XDP links by the id of the program they attach
	progs   map[uint32][]Process // holders of the program itself, by program id
	stopped string               // why the scan ended before the last process ("" if it did not)
}

// scanProc looks through the file descriptors of every process under root (/proc) for the
// sockets and BPF objects in want, until deadline or maxEntries directory entries read,
// whichever comes first. It reads one link per file descriptor and, for BPF links and
// programs only, their fdinfo (a few hundred bytes). What it cannot read (a process that
// exited, no permission) it skips.
func scanProc(root string, deadline time.Time, maxEntries int, want procWant) procFound {
	f := procFound{
		sockets: make(map[uint64][]Process),
		xsks:    make(map[uint64][]Process),
		links:   make(map[uint32]linkHold),
		progs:   make(map[uint32][]Process),
	}
	dir, err := os.Open(root)
	if err != nil {
		f.stopped = fmt.Sprintf("cannot read %s: %v", root, err)
		return f
	}
	defer dir.Close()
	entries := 0
	more := func() bool {
		entries++
		switch {
		case entries > maxEntries:
			f.stopped = fmt.Sprintf("scan of %s stopped after %d entries", root, maxEntries)
		case time.Now().After(deadline):
			f.stopped = fmt.Sprintf("scan of %s stopped at its time limit", root)
		default:
			return true
		}
		return false
	}
	for {
		names, err := dir.Readdirnames(256)
		for _, name := range names {
			pid, perr := strconv.Atoi(name)
			if perr != nil || pid <= 0 {
				continue
			}
			if !more() || !scanPID(root, pid, want, &f, more) {
				return f
			}
		}
		if err != nil {
			if err != io.EOF {
				f.stopped = fmt.Sprintf("listing %s: %v", root, err)
			}
			return f
		}
	}
}

// scanPID looks through the file descriptors of process pid; it returns false when more
// says the scan must stop.
func scanPID(root string, pid int, want procWant, f *procFound, more func() bool) bool {
	base := filepath.Join(root, strconv.Itoa(pid))
	dir, err := os.Open(filepath.Join(base, "fd"))
	if err != nil {
		return true // gone, or not ours to read
	}
	defer dir.Close()
	comm := "" // read once, when the process holds something
	holder := func(fd int) Process {
		if comm == "" {
			comm = readComm(base)
		}
		return Process{PID: pid, Comm: comm, FD: fd}
	}
	for {
		names, err := dir.Readdirnames(256)
		for _, name := range names {
			if !more() {
				return false
			}
			fd, perr := strconv.Atoi(name)
			if perr != nil {
				continue
			}
			target, lerr := os.Readlink(filepath.Join(base, "fd", name))
			if lerr != nil {
				continue
			}
			if ino, ok := socketInode(target); ok {
				switch {
				case want.sockets[ino]:
					f.sockets[ino] = addHolder(f.sockets[ino], holder(fd))
				case want.xsk != nil && !want.exclude[ino] && (f.xsks[ino] != nil || len(f.xsks) < maxXSKs) &&
					want.xsk(pid, fd, filepath.Join(base, "fd", name)):
					f.xsks[ino] = addHolder(f.xsks[ino], holder(fd))
				}
				continue
			}
			// The kernel names a link's file "bpf_link" and a program's "bpf-prog".
			if len(want.progs) == 0 || (target != "anon_inode:bpf_link" && target != "anon_inode:bpf-prog") {
				continue
			}
			fi, ok := readFdinfo(filepath.Join(base, "fdinfo", name))
			if !ok || !want.progs[fi.progID] {
				continue
			}
			switch {
			case fi.linkType == "xdp" && (!fi.hasIfindex || fi.ifindex == want.ifindex):
				l := f.links[fi.progID]
				l.id = fi.linkID
				l.holders = addHolder(l.holders, holder(fd))
				f.links[fi.progID] = l
			case fi.linkType == "":
				f.progs[fi.progID] = addHolder(f.progs[fi.progID], holder(fd))
			}
		}
		if err != nil {
			return true
		}
	}
}

// addHolder adds p to ps unless its process is there already or ps is full.
func addHolder(ps []Process, p Process) []Process {
	for _, q := range ps {
		if q.PID == p.PID {
			return ps
		}
	}
	if len(ps) >= maxHolders {
		return ps
	}
	return append(ps, p)
}

// readComm returns the command name of the process whose /proc directory is base.
func readComm(base string) string {
	b, ok := readSmall(filepath.Join(base, "comm"), 64)
	if !ok {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// readFdinfo reads and parses an fdinfo file.
func readFdinfo(path string) (fdInfo, bool) {
	b, ok := readSmall(path, 4096)
	if !ok {
		return fdInfo{}, false
	}
	return parseFdinfo(string(b)), true
}

// readSmall reads at most limit bytes of a file.
func readSmall(path string, limit int) ([]byte, bool) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)))
	return b, err == nil
}
