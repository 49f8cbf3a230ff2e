package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The parsers of what the search for a busy queue's holder reads from the kernel: netlink
// answers (AF_XDP socket diagnostics, the interface's XDP attributes) and /proc entries.
// Every length is checked before it is used: a short or odd answer is an error or is
// skipped, never a panic.

// errNetlinkAnswer is wrapped by the netlink parsers' errors.
var errNetlinkAnswer = errors.New("malformed netlink answer")

// AF_XDP socket diagnostics (include/uapi/linux/xdp_diag.h).
const (
	xdpShowInfo    = 1 << 0 // XDP_SHOW_INFO: ask for XDP_DIAG_INFO (ifindex, queue)
	xdpDiagInfo    = 1      // XDP_DIAG_INFO: struct xdp_diag_info { __u32 ifindex, queue_id; }
	xdpDiagReqLen  = 20     // struct xdp_diag_req: family, protocol, pad, ino, show, cookie[2]
	xdpDiagMsgLen  = 16     // struct xdp_diag_msg: family, type, pad, ino, cookie[2]
	xdpDiagInfoLen = 8
)

// XDP attributes of a link (include/uapi/linux/if_link.h, IFLA_XDP_*; XDP_ATTACHED_*).
const (
	iflaXDPAttached  = 2
	iflaXDPProgID    = 4
	iflaXDPDrvProgID = 5
	iflaXDPSKBProgID = 6
	iflaXDPHWProgID  = 7

	xdpAttachedDrv   = 1
	xdpAttachedSKB   = 2
	xdpAttachedHW    = 3
	xdpAttachedMulti = 4
)

// nlaTypeMask clears NLA_F_NESTED and NLA_F_NET_BYTEORDER from an attribute type.
const nlaTypeMask = 0x3fff

// xdpDiagRequest is the body of a dump request for every AF_XDP socket with its interface
// and queue (struct xdp_diag_req; inode 0 and no cookie: the kernel filters on neither).
func xdpDiagRequest() []byte {
	b := make([]byte, xdpDiagReqLen)
	b[0] = unix.AF_XDP
	binary.NativeEndian.PutUint32(b[8:12], xdpShowInfo)
	return b
}

// xskDiag is one AF_XDP socket of a diagnostics dump.
type xskDiag struct {
	inode   uint64
	ifindex uint32
	queue   uint32
	bound   bool // XDP_DIAG_INFO was present
}

// parseXSKDiag decodes one answer of an AF_XDP socket dump (struct xdp_diag_msg, then
// attributes).
func parseXSKDiag(body []byte) (xskDiag, error) {
	var d xskDiag
	if len(body) < xdpDiagMsgLen {
		return d, fmt.Errorf("%w: AF_XDP diagnostics message of %d bytes", errNetlinkAnswer, len(body))
	}
	if body[0] != unix.AF_XDP {
		return d, fmt.Errorf("%w: diagnostics message of family %d", errNetlinkAnswer, body[0])
	}
	d.inode = uint64(binary.NativeEndian.Uint32(body[4:8]))
	err := netlinkAttrs(body[xdpDiagMsgLen:], func(typ uint16, v []byte) error {
		if typ != xdpDiagInfo {
			return nil
		}
		if len(v) < xdpDiagInfoLen {
			return fmt.Errorf("%w: XDP_DIAG_INFO of %d bytes", errNetlinkAnswer, len(v))
		}
		d.ifindex = binary.NativeEndian.Uint32(v[0:4])
		d.queue = binary.NativeEndian.Uint32(v[4:8])
		d.bound = true
		return nil
	})
	return d, err
}

// linkRequest is the body of RTM_GETLINK for the interface with index ifindex (struct
// ifinfomsg).
func linkRequest(ifindex int) []byte {
	b := make([]byte, unix.SizeofIfInfomsg)
	binary.NativeEndian.PutUint32(b[4:8], uint32(int32(ifindex)))
	return b
}

// xdpProg is an XDP program attached to an interface: its id and mode.
type xdpProg struct {
	id   uint32
	mode string
}

// parseLinkXDP decodes the XDP programs attached to the interface from an RTM_NEWLINK
// answer (struct ifinfomsg, then attributes; IFLA_XDP nested). An interface without XDP
// gives none.
func parseLinkXDP(body []byte) ([]xdpProg, error) {
	if len(body) < unix.SizeofIfInfomsg {
		return nil, fmt.Errorf("%w: link message of %d bytes", errNetlinkAnswer, len(body))
	}
	var (
		attached         uint8
		single, drv, skb uint32
		hw               uint32
	)
	u32 := func(dst *uint32, v []byte, name string) error {
		if len(v) < 4 {
			return fmt.Errorf("%w: %s of %d bytes", errNetlinkAnswer, name, len(v))
		}
		*dst = binary.NativeEndian.Uint32(v[0:4])
		return nil
	}
	err := netlinkAttrs(body[unix.SizeofIfInfomsg:], func(typ uint16, v []byte) error {
		if typ != unix.IFLA_XDP {
			return nil
		}
		return netlinkAttrs(v, func(typ uint16, v []byte) error {
			switch typ {
			case iflaXDPAttached:
				if len(v) < 1 {
					return fmt.Errorf("%w: IFLA_XDP_ATTACHED of 0 bytes", errNetlinkAnswer)
				}
				attached = v[0]
			case iflaXDPProgID:
				return u32(&single, v, "IFLA_XDP_PROG_ID")
			case iflaXDPDrvProgID:
				return u32(&drv, v, "IFLA_XDP_DRV_PROG_ID")
			case iflaXDPSKBProgID:
				return u32(&skb, v, "IFLA_XDP_SKB_PROG_ID")
			case iflaXDPHWProgID:
				return u32(&hw, v, "IFLA_XDP_HW_PROG_ID")
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	var progs []xdpProg
	add := func(id uint32, mode string) {
		if id != 0 {
			progs = append(progs, xdpProg{id, mode})
		}
	}
	switch attached {
	case xdpAttachedDrv:
		add(single, "native")
	case xdpAttachedSKB:
		add(single, "generic")
	case xdpAttachedHW:
		add(single, "offload")
	case xdpAttachedMulti:
		add(drv, "native")
		add(skb, "generic")
		add(hw, "offload")
	}
	return progs, nil
}

// netlinkAttrs calls fn with the type (flags cleared) and value of each attribute in b, in
// order, and stops at fn's first error. An attribute whose length does not fit is an error.
func netlinkAttrs(b []byte, fn func(typ uint16, v []byte) error) error {
	for len(b) >= 4 {
		alen := int(binary.NativeEndian.Uint16(b[0:2]))
		typ := binary.NativeEndian.Uint16(b[2:4]) & nlaTypeMask
		if alen < 4 || alen > len(b) {
			return fmt.Errorf("%w: attribute %d of length %d in %d bytes", errNetlinkAnswer, typ, alen, len(b))
		}
		if err := fn(typ, b[4:alen]); err != nil {
			return err
		}
		b = b[min(align4(alen), len(b)):]
	}
	return nil
}

// align4 rounds n up to netlink's 4-byte alignment.
func align4(n int) int { return (n + 3) &^ 3 }

// netlinkBatch is what parseNetlinkBatch found in one datagram from a netlink socket.
type netlinkBatch struct {
	bodies [][]byte // the answers' bodies (copies), in order
	done   bool     // the request is finished: NLMSG_DONE, an acknowledgement, or an error
	err    error    // the kernel's error (NLMSG_ERROR), as an errno
}

// parseNetlinkBatch decodes the messages of one datagram, keeping those that answer
// sequence number seq. A non-dump request is done with its first answer.
func parseNetlinkBatch(b []byte, seq uint32, dump bool) (netlinkBatch, error) {
	var nb netlinkBatch
	for len(b) > 0 {
		if len(b) < unix.SizeofNlMsghdr {
			return nb, fmt.Errorf("%w: %d trailing bytes", errNetlinkAnswer, len(b))
		}
		mlen := int(binary.NativeEndian.Uint32(b[0:4]))
		typ := binary.NativeEndian.Uint16(b[4:6])
		mseq := binary.NativeEndian.Uint32(b[8:12])
		if mlen < unix.SizeofNlMsghdr || mlen > len(b) {
			return nb, fmt.Errorf("%w: message of length %d in %d bytes", errNetlinkAnswer, mlen, len(b))
		}
		body := b[unix.SizeofNlMsghdr:mlen]
		b = b[min(align4(mlen), len(b)):]
		if mseq != seq {
			continue
		}
		switch typ {
		case unix.NLMSG_NOOP:
		case unix.NLMSG_DONE:
			nb.done = true
		case unix.NLMSG_ERROR:
			if len(body) < 4 {
				return nb, fmt.Errorf("%w: NLMSG_ERROR of %d bytes", errNetlinkAnswer, len(body))
			}
			if code := int32(binary.NativeEndian.Uint32(body[0:4])); code < 0 {
				nb.err = syscall.Errno(-code)
			}
			nb.done = true
		default:
			nb.bodies = append(nb.bodies, append([]byte(nil), body...))
			if !dump {
				nb.done = true
			}
		}
		if nb.done {
			return nb, nil
		}
	}
	return nb, nil
}

// fdInfo is what /proc/PID/fdinfo/FD says about a BPF link or program file descriptor.
type fdInfo struct {
	linkType   string // "xdp" for an XDP link; empty for a program
	linkID     uint32
	progID     uint32
	ifindex    uint32
	hasIfindex bool
}

// parseFdinfo reads the "key:\tvalue" lines of a fdinfo file that matter here; others, and
// values that do not parse, are ignored.
func parseFdinfo(text string) fdInfo {
	var fi fdInfo
	for line := range strings.SplitSeq(text, "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		num := func() (uint32, bool) {
			n, err := strconv.ParseUint(val, 10, 32)
			return uint32(n), err == nil
		}
		switch key {
		case "link_type":
			fi.linkType = val
		case "link_id":
			fi.linkID, _ = num()
		case "prog_id":
			fi.progID, _ = num()
		case "ifindex":
			fi.ifindex, fi.hasIfindex = num()
		}
	}
	return fi
}

// socketInode returns the inode of a /proc/PID/fd link target "socket:[INODE]".
func socketInode(target string) (uint64, bool) {
	rest, ok := strings.CutPrefix(target, "socket:[")
	if !ok {
		return 0, false
	}
	num, ok := strings.CutSuffix(rest, "]")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(num, 10, 64)
	return n, err == nil
}
