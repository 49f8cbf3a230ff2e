package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"

	"golang.org/x/sys/unix"
)

// The ethtool commands Open uses (include/uapi/linux/ethtool.h): the number of RX queues in
// use, and n-tuple rules that steer our UDP port to a queue.

// ethChannels is struct ethtool_channels.
type ethChannels struct {
	Cmd                                         uint32
	MaxRx, MaxTx, MaxOther, MaxCombined         uint32
	RxCount, TxCount, OtherCount, CombinedCount uint32
}

// ntupleSpec is what a rule of ours sets in struct ethtool_rx_flow_spec: the flow type,
// the values and masks (union ethtool_flow_union, 52 bytes each: set mask bits are matched),
// the queue (ring_cookie) and the location.
type ntupleSpec struct {
	FlowType   uint32
	HU, MU     [52]byte
	RingCookie uint64
	Location   uint32
}

// rxnfc is struct ethtool_rxnfc (without its flexible rule_locs array) as the bytes the
// ioctl takes: its fields are native-endian, and its __u64 fields are 8-aligned except on
// 386 (the C ABI's rule, which Go's own struct layout does not follow on 32-bit ARM), so it
// is laid out by hand.
type rxnfc [rxnfcMaxSize]byte

// Offsets in struct ethtool_rxnfc: cmd 0, flow_type 4, data 8, fs 16; in fs: flow_type 0,
// h_u 4, h_ext 56, m_u 76, m_ext 128, then ring_cookie and location.
const (
	rxnfcFS      = 16
	fsHU         = 4
	fsMU         = 76
	fsCookieMin  = 148 // before alignment
	rxnfcMaxSize = 192
)

// rxnfcLayout returns the offsets of ring_cookie and location in fs, and the struct's size,
// for a target whose __u64 alignment is align (8, or 4 on 386).
func rxnfcLayout(align int) (cookie, location, size int) {
	up := func(n int) int { return (n + align - 1) &^ (align - 1) }
	cookie = up(fsCookieMin)
	location = cookie + 8
	fsSize := up(location + 4)
	return cookie, location, up(rxnfcFS + fsSize + 4) // + rule_cnt
}

// u64Align is the C alignment of a __u64 on this target.
func u64Align() int {
	if runtime.GOARCH == "386" {
		return 4
	}
	return 8
}

// put writes cmd and spec into r for a target with __u64 alignment align.
func (r *rxnfc) put(cmd uint32, spec *ntupleSpec, align int) []byte {
	cookie, loc, size := rxnfcLayout(align)
	b := r[:size]
	clear(b)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], cmd)
	ne.PutUint32(b[4:], spec.FlowType)
	fs := b[rxnfcFS:]
	ne.PutUint32(fs[0:], spec.FlowType)
	copy(fs[fsHU:fsHU+52], spec.HU[:])
	copy(fs[fsMU:fsMU+52], spec.MU[:])
	ne.PutUint64(fs[cookie:], spec.RingCookie)
	ne.PutUint32(fs[loc:], spec.Location)
	return b
}

// location reads fs.location back (the kernel's choice for RX_CLS_LOC_ANY).
func (r *rxnfc) location(align int) uint32 {
	_, loc, _ := rxnfcLayout(align)
	return binary.NativeEndian.Uint32(r[rxnfcFS+loc:])
}

// Values of include/uapi/linux/ethtool.h.
const (
	ethtoolSRXCLSRLDEL = 0x31
	ethtoolSRXCLSRLINS = 0x32
	udpV4Flow          = 0x02
	udpV6Flow          = 0x06
	rxClsLocAny        = 0xffffffff
)

// RXQueues returns how many RX queues interface ifname uses now: ETHTOOL_GCHANNELS's RX and
// combined channels (what `ethtool -l` shows as current). Drivers without that command
// report an error; Open then falls back to the kernel's count of allocated queues.
func RXQueues(ifname string) (int, error) {
	c, err := ethtoolChannels(ifname)
	if err != nil {
		return 0, fmt.Errorf("ETHTOOL_GCHANNELS on %s: %w", ifname, err)
	}
	n := int(c.RxCount + c.CombinedCount)
	if n == 0 {
		return 0, fmt.Errorf("ETHTOOL_GCHANNELS on %s reports no RX channel", ifname)
	}
	return n, nil
}

// ethFlagNtuple is ETH_FLAG_NTUPLE in ETHTOOL_GFLAGS's value.
const ethFlagNtuple = 1 << 27

// NtupleEnabled reports whether interface ifname has n-tuple filters on (`ethtool -K IF
// ntuple on`, ETHTOOL_GFLAGS's ETH_FLAG_NTUPLE), which SteerNtuple needs.
func NtupleEnabled(ifname string) (bool, error) {
	flags, err := ethtoolFlags(ifname)
	if err != nil {
		return false, fmt.Errorf("ETHTOOL_GFLAGS on %s: %w", ifname, err)
	}
	return flags&ethFlagNtuple != 0, nil
}

// ntupleRule is the rule `flow-type udp4|udp6 dst-ip dst dst-port port action queue` at any
// location.
func ntupleRule(dst netip.Addr, port uint16, queue int) ntupleSpec {
	fs := ntupleSpec{RingCookie: uint64(queue), Location: rxClsLocAny}
	if dst.Is4() {
		// struct ethtool_tcpip4_spec: ip4src, ip4dst, psrc, pdst, tos
		fs.FlowType = udpV4Flow
		a := dst.As4()
		copy(fs.HU[4:8], a[:])
		copy(fs.MU[4:8], []byte{0xff, 0xff, 0xff, 0xff})
		binary.BigEndian.PutUint16(fs.HU[10:12], port)
		binary.BigEndian.PutUint16(fs.MU[10:12], 0xffff)
	} else {
		// struct ethtool_tcpip6_spec: ip6src[16], ip6dst[16], psrc, pdst, tclass
		fs.FlowType = udpV6Flow
		a := dst.As16()
		copy(fs.HU[16:32], a[:])
		for i := 16; i < 32; i++ {
			fs.MU[i] = 0xff
		}
		binary.BigEndian.PutUint16(fs.HU[34:36], port)
		binary.BigEndian.PutUint16(fs.MU[34:36], 0xffff)
	}
	return fs
}

// ErrNtupleUnsupported means the driver refused an n-tuple rule (no flow steering, or
// `ethtool -K IF ntuple off`).
var ErrNtupleUnsupported = errors.New("the driver takes no n-tuple rule")

// insertNtuple installs the rule that steers UDP datagrams to dst:port onto queue and returns
// its location (for deleteNtuple).
func insertNtuple(ifname string, dst netip.Addr, port uint16, queue int) (uint32, error) {
	spec := ntupleRule(dst, port, queue)
	var r rxnfc
	if err := ethtoolRxnfc(ifname, r.put(ethtoolSRXCLSRLINS, &spec, u64Align())); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
			err = fmt.Errorf("%w (%w)", ErrNtupleUnsupported, err)
		}
		return 0, fmt.Errorf("ETHTOOL_SRXCLSRLINS udp dst %v port %d -> queue %d on %s: %w", dst, port, queue, ifname, err)
	}
	return r.location(u64Align()), nil
}

// deleteNtuple removes the rule at location loc.
func deleteNtuple(ifname string, loc uint32) error {
	var r rxnfc
	if err := ethtoolRxnfc(ifname, r.put(ethtoolSRXCLSRLDEL, &ntupleSpec{Location: loc}, u64Align())); err != nil {
		return fmt.Errorf("ETHTOOL_SRXCLSRLDEL location %d on %s: %w", loc, ifname, err)
	}
	return nil
}
