package xdp

import (
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// QueryNetdev asks the kernel's netdev generic netlink family, in the calling thread's
// network namespace, what the interface with index ifindex supports for XDP
// (NETDEV_CMD_DEV_GET). Kernels before 6.3 have no such family: the error says so.
func QueryNetdev(ifindex int) (NetdevInfo, error) {
	fam, err := netlink.GenlFamilyGet("netdev")
	if err != nil {
		return NetdevInfo{}, fmt.Errorf("xdp: netdev netlink family: %w", err)
	}
	req := nl.NewNetlinkRequest(int(fam.ID), unix.NLM_F_REQUEST)
	req.AddData(genlHeader{netdevCmdDevGet, 1, 0, 0}) // version 1; reserved bytes zero
	req.AddData(nl.NewRtAttr(netdevAttrIfindex, nl.Uint32Attr(uint32(ifindex))))
	msgs, err := req.Execute(unix.NETLINK_GENERIC, 0)
	if err != nil {
		return NetdevInfo{}, fmt.Errorf("xdp: netdev dev-get of interface %d: %w", ifindex, err)
	}
	if len(msgs) != 1 {
		return NetdevInfo{}, fmt.Errorf("%w: %d messages", errNetdevReply, len(msgs))
	}
	return parseNetdevReply(msgs[0], ifindex)
}

// genlHeader is a generic netlink header (struct genlmsghdr: cmd, version, reserved), as
// request data. nl.Genlmsg serializes 4 bytes from a 2-byte struct, so its reserved field
// is whatever memory follows, which families with strict validation refuse (EINVAL).
type genlHeader [genlHeaderLen]byte

// Len implements nl.NetlinkRequestData.
func (h genlHeader) Len() int { return len(h) }

// Serialize implements nl.NetlinkRequestData.
func (h genlHeader) Serialize() []byte { return h[:] }
