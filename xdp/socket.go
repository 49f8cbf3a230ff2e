package xdp

import "github.com/xdpndk/xdpndk/xdp/xsk"

// The AF_XDP socket and its rings live in package xdp/xsk; these names keep working here.

// Socket is one AF_XDP socket with its fill, completion, RX and TX rings: xsk.Socket.
type Socket = xsk.Socket

// SocketConfig configures NewSocket: xsk.SocketConfig.
type SocketConfig = xsk.SocketConfig

// SocketMode is what the kernel granted a socket at bind time: xsk.SocketMode.
type SocketMode = xsk.SocketMode

// Statistics are the kernel's counters for one socket: xsk.Statistics.
type Statistics = xsk.Statistics

// BindMode selects zero-copy or copy mode for a socket: xsk.BindMode.
type BindMode = xsk.BindMode

// Bind modes (xsk.BindAuto, xsk.BindZeroCopy, xsk.BindCopy).
const (
	// BindAuto tries zero-copy and falls back to copy mode.
	BindAuto = xsk.BindAuto
	// BindZeroCopy demands zero-copy (XDP_ZEROCOPY); binding fails where the driver lacks it.
	BindZeroCopy = xsk.BindZeroCopy
	// BindCopy demands copy mode (XDP_COPY), which every driver supports.
	BindCopy = xsk.BindCopy
)

// MultiBuffer selects whether a socket uses AF_XDP multi-buffer (XDP_USE_SG):
// xsk.MultiBuffer.
type MultiBuffer = xsk.MultiBuffer

// Multi-buffer modes (xsk.MultiBufferAuto, xsk.MultiBufferRequire, xsk.MultiBufferOff).
const (
	// MultiBufferAuto asks for it and goes on without it when the kernel refuses.
	MultiBufferAuto = xsk.MultiBufferAuto
	// MultiBufferRequire fails the bind without it.
	MultiBufferRequire = xsk.MultiBufferRequire
	// MultiBufferOff does not ask for it.
	MultiBufferOff = xsk.MultiBufferOff
)

// Desc is one AF_XDP ring descriptor: a UMEM offset, a length and options (DescContinued):
// xsk.Desc.
type Desc = xsk.Desc

// DescContinued is XDP_PKT_CONTD: more descriptors of the same packet follow this one.
const DescContinued = xsk.DescContinued
