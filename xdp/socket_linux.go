package xdp

import (
	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/xdp/xsk"
)

// NewSocket creates an AF_XDP socket bound to one queue of one interface, with its four rings
// mapped: xsk.NewSocket, which documents it.
func NewSocket(u *memreg.UMEM, cfg SocketConfig) (*Socket, error) { return xsk.NewSocket(u, cfg) }
