package xsk

import "golang.org/x/sys/unix"

// Desc is one AF_XDP ring descriptor: a UMEM offset, a length and options (DescContinued).
type Desc = unix.XDPDesc

// DescContinued is XDP_PKT_CONTD: more descriptors of the same packet follow this one.
const DescContinued = unix.XDP_PKT_CONTD
