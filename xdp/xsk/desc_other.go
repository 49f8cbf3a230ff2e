//go:build !linux

package xsk

// Desc is one AF_XDP ring descriptor (the kernel's struct xdp_desc): a UMEM offset, a
// length and options (DescContinued). AF_XDP exists only on Linux, where Desc is
// unix.XDPDesc; elsewhere the type is declared with the same layout so that the package's
// portable parts (configuration, framing, checksums) build, and no socket can be opened.
type Desc struct {
	Addr    uint64
	Len     uint32
	Options uint32
}

// DescContinued is XDP_PKT_CONTD: more descriptors of the same packet follow this one.
const DescContinued = 0x1
