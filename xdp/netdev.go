package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// NetdevInfo is what the kernel's "netdev" generic netlink family reports about an
// interface's XDP support (NETDEV_CMD_DEV_GET, Linux 6.3 and later; the zero-copy segment
// limit since 6.6).
type NetdevInfo struct {
	// XDPFeatures is the NETDEV_XDP_ACT_* mask: which XDP actions and AF_XDP modes the
	// driver implements (XDPActXSKZeroCopy among them).
	XDPFeatures uint64
	// ZCMaxSegs is the most descriptors one packet may span on a zero-copy socket of this
	// interface (net_device.xdp_zc_max_segs); 1 when the driver has no multi-buffer
	// zero-copy. 0 when the kernel did not report it: it does only for drivers with AF_XDP
	// zero-copy (XDPActXSKZeroCopy), since Linux 6.6.
	ZCMaxSegs uint32
}

// NETDEV_XDP_ACT_* bits of NetdevInfo.XDPFeatures (include/uapi/linux/netdev.h).
const (
	XDPActBasic       = 1 << 0 // XDP_PASS, XDP_DROP, XDP_TX, XDP_ABORTED
	XDPActRedirect    = 1 << 1 // XDP_REDIRECT (to an AF_XDP socket among others)
	XDPActNdoXmit     = 1 << 2 // the device takes redirected frames (ndo_xdp_xmit)
	XDPActXSKZeroCopy = 1 << 3 // AF_XDP zero-copy
	XDPActRxSG        = 1 << 5 // multi-buffer XDP on receive
)

// Attributes and command of the netdev family that queryNetdev uses.
const (
	netdevCmdDevGet        = 1
	netdevAttrIfindex      = 1
	netdevAttrXDPFeatures  = 3
	netdevAttrXDPZCMaxSegs = 4
	genlHeaderLen          = 4 // cmd, version, reserved
)

// errNetdevReply is wrapped by parseNetdevReply's errors.
var errNetdevReply = errors.New("xdp: malformed netdev netlink reply")

// parseNetdevReply decodes one NETDEV_CMD_DEV_GET reply (a generic netlink message without
// its netlink header: the 4-byte genetlink header, then attributes) for the interface
// ifindex. Unknown attributes are skipped; a reply for another interface, a truncated
// attribute or a value of the wrong size is an error.
func parseNetdevReply(msg []byte, ifindex int) (NetdevInfo, error) {
	var info NetdevInfo
	if len(msg) < genlHeaderLen {
		return info, fmt.Errorf("%w: %d bytes", errNetdevReply, len(msg))
	}
	b := msg[genlHeaderLen:]
	seen := false
	for len(b) > 0 {
		if len(b) < 4 {
			return NetdevInfo{}, fmt.Errorf("%w: %d trailing bytes", errNetdevReply, len(b))
		}
		alen := int(binary.NativeEndian.Uint16(b[0:2]))
		typ := binary.NativeEndian.Uint16(b[2:4]) &^ 0xC000 // NLA_F_NESTED, NLA_F_NET_BYTEORDER
		if alen < 4 || alen > len(b) {
			return NetdevInfo{}, fmt.Errorf("%w: attribute %d of length %d in %d bytes", errNetdevReply, typ, alen, len(b))
		}
		v := b[4:alen]
		switch typ {
		case netdevAttrIfindex:
			if len(v) != 4 {
				return NetdevInfo{}, fmt.Errorf("%w: ifindex of %d bytes", errNetdevReply, len(v))
			}
			if got := int(binary.NativeEndian.Uint32(v)); got != ifindex {
				return NetdevInfo{}, fmt.Errorf("%w: reply for interface %d, asked %d", errNetdevReply, got, ifindex)
			}
			seen = true
		case netdevAttrXDPFeatures:
			if len(v) != 8 {
				return NetdevInfo{}, fmt.Errorf("%w: xdp-features of %d bytes", errNetdevReply, len(v))
			}
			info.XDPFeatures = binary.NativeEndian.Uint64(v)
		case netdevAttrXDPZCMaxSegs:
			if len(v) != 4 {
				return NetdevInfo{}, fmt.Errorf("%w: xdp-zc-max-segs of %d bytes", errNetdevReply, len(v))
			}
			info.ZCMaxSegs = binary.NativeEndian.Uint32(v)
		}
		b = b[min((alen+3)&^3, len(b)):] // attributes are 4-byte aligned; the last may be unpadded
	}
	if !seen {
		return NetdevInfo{}, fmt.Errorf("%w: no ifindex", errNetdevReply)
	}
	return info, nil
}

// zeroCopyPayloadLimit is the largest UDP payload a packet may carry on a zero-copy socket
// whose driver accepts at most segs descriptors per packet, with frameRoom bytes of packet
// per frame (the frame size less the receive headroom, so the limit holds both ways) and
// l2l3 bytes of Ethernet, IP and UDP headers; 0 when segs is 0 (not reported: no limit
// known).
func zeroCopyPayloadLimit(segs uint32, frameRoom, l2l3 int) int {
	if segs == 0 {
		return 0
	}
	return max(int(min(segs, 64))*frameRoom-l2l3, 0)
}
