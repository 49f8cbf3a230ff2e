package xdp

import (
	"github.com/xdpndk/xdpndk/transport/link"
	"github.com/xdpndk/xdpndk/xdp/xsk"
)

// SocketStatistics returns the kernel's counters of the link's AF_XDP socket
// (XDP_STATISTICS), read with a system call. Safe from any goroutine; link.ErrClosed
// after Close (the socket is gone, and its descriptor may name another file by then).
func (l *Link) SocketStatistics() (xsk.Statistics, error) {
	if !l.enter() {
		return xsk.Statistics{}, link.ErrClosed
	}
	defer l.exit()
	return l.sock.Statistics()
}
