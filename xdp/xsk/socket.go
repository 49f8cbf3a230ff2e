package xsk

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/xdpndk/xdpndk/memreg"
)

// PacketHeadroom is XDP_PACKET_HEADROOM: the kernel leaves this many bytes before the
// received data in every RX frame (copy and zero-copy mode alike), so a frame of FrameSize
// bytes receives at most FrameSize-PacketHeadroom bytes of a packet.
const PacketHeadroom = 256

// In unaligned-chunk mode the kernel returns RX addresses as a base in the low 48 bits plus
// the offset of the data from that base in the high 16 (XSK_UNALIGNED_BUF_OFFSET_SHIFT).
const (
	unalignedOffsetShift = 48
	unalignedAddrMask    = 1<<unalignedOffsetShift - 1
)

// BindMode selects zero-copy or copy mode for a socket.
type BindMode int

const (
	// BindAuto tries zero-copy and falls back to copy mode.
	BindAuto BindMode = iota
	// BindZeroCopy demands zero-copy (XDP_ZEROCOPY); binding fails where the driver lacks it.
	BindZeroCopy
	// BindCopy demands copy mode (XDP_COPY), which every driver supports.
	BindCopy
)

// MultiBuffer selects whether a socket uses AF_XDP multi-buffer (XDP_USE_SG), which packets
// larger than one frame need in both directions.
type MultiBuffer int

const (
	// MultiBufferAuto asks for it and goes on without it when the kernel refuses.
	MultiBufferAuto MultiBuffer = iota
	// MultiBufferRequire fails the bind without it.
	MultiBufferRequire
	// MultiBufferOff does not ask for it.
	MultiBufferOff
)

// SocketConfig configures NewSocket. Ring sizes are numbers of entries, powers of two.
type SocketConfig struct {
	IfIndex int // interface index, in the namespace the socket is created in
	Queue   int // the interface's RX/TX queue to bind

	FillSize, CompSize, RxSize, TxSize uint32 // ring sizes; 0 means the default (4096, 4096, 4096, 2048)

	Bind        BindMode
	MultiBuffer MultiBuffer
	// NeedWakeup asks the kernel to say when it needs a system call (XDP_USE_NEED_WAKEUP) so
	// the datapath makes none otherwise.
	NeedWakeup bool
	// Unaligned registers the UMEM in unaligned-chunk mode, so TX descriptors may point at
	// any offset (zero-copy transmit from application buffers). Only the socket that
	// registers the UMEM uses it; sharers must pass the same value.
	Unaligned bool

	// Shared is the socket that registered the UMEM, for a socket on another queue of the same
	// interface; nil for the first socket.
	Shared *Socket

	// BusyPoll, when non-zero, sets SO_PREFER_BUSY_POLL and SO_BUSY_POLL (in µs), and
	// BusyPollBudget, when non-zero, SO_BUSY_POLL_BUDGET. Mode reports whether they took.
	BusyPoll       time.Duration
	BusyPollBudget int
	// TxBudget, when non-zero, raises the number of packets one kick transmits in copy mode
	// (XDP_MAX_TX_SKB_BUDGET; the kernel default is 32). Mode reports whether it took.
	TxBudget int
	// BusyRetry bounds how long to retry a bind that fails with EBUSY because a socket on the
	// same queue was closed moments ago. Default 500 ms.
	BusyRetry time.Duration
}

func (c *SocketConfig) normalize() error {
	def := func(v *uint32, d uint32) error {
		if *v == 0 {
			*v = d
		}
		if *v&(*v-1) != 0 || *v > 1<<20 {
			return fmt.Errorf("xdp ring size %d: must be a power of two up to %d", *v, 1<<20)
		}
		return nil
	}
	if err := errors.Join(def(&c.FillSize, 4096), def(&c.CompSize, 4096), def(&c.RxSize, 4096), def(&c.TxSize, 2048)); err != nil {
		return err
	}
	if c.IfIndex <= 0 || c.Queue < 0 {
		return fmt.Errorf("xdp socket: bad interface index %d or queue %d", c.IfIndex, c.Queue)
	}
	if c.BusyRetry == 0 {
		c.BusyRetry = 500 * time.Millisecond
	}
	if c.Bind < BindAuto || c.Bind > BindCopy || c.MultiBuffer < MultiBufferAuto || c.MultiBuffer > MultiBufferOff {
		return errors.New("xdp socket: unknown bind or multi-buffer mode")
	}
	return nil
}

// ErrBusy is wrapped by NewSocket's error when the queue is already bound by another AF_XDP
// socket: the kernel answered EBUSY (for longer than SocketConfig.BusyRetry, which covers a
// socket closed moments ago). Such an error matches syscall.EBUSY too.
var ErrBusy = errors.New("queue already bound by another AF_XDP socket")

// BindError is NewSocket's error when no bind mode succeeded.
type BindError struct {
	IfIndex int // the interface index asked for
	Queue   int // the queue asked for
	// Err is the cause. For a busy queue (the kernel checks that before the mode, so every
	// mode tried gets EBUSY, zero-copy included) it wraps ErrBusy and EBUSY, whatever else a
	// mode was refused for; otherwise it is the failure of the last mode tried.
	Err error
	// Refused are the earlier attempts the kernel refused for their mode (EOPNOTSUPP,
	// EINVAL: zero-copy on a driver without it, say): notes, not the cause. The message
	// names them only when the queue was not busy.
	Refused []error
}

// Error describes the failure: the queue, the cause and, unless the queue was busy, the
// modes refused before.
func (e *BindError) Error() string {
	msg := fmt.Sprintf("bind af_xdp socket to ifindex %d queue %d: %v", e.IfIndex, e.Queue, e.Err)
	if len(e.Refused) == 0 || errors.Is(e.Err, ErrBusy) {
		return msg
	}
	notes := make([]string, len(e.Refused))
	for i, r := range e.Refused {
		notes[i] = r.Error()
	}
	return msg + " (refused before: " + strings.Join(notes, "; ") + ")"
}

// Unwrap returns the cause (Err); the refusals before it are notes and do not match.
func (e *BindError) Unwrap() error { return e.Err }

// SocketMode is what the kernel granted a socket at bind time.
type SocketMode struct {
	ZeroCopy    bool // XDP_ZEROCOPY in effect (the kernel's XDP_OPTIONS says so)
	MultiBuffer bool // XDP_USE_SG
	NeedWakeup  bool // XDP_USE_NEED_WAKEUP
	BusyPoll    bool // the busy-poll socket options were accepted (on veth they have no effect)
	TxBudget    int  // XDP_MAX_TX_SKB_BUDGET in effect, 0 for the kernel default
}

// String describes the mode for logs, e.g. "copy+sg+need_wakeup".
func (m SocketMode) String() string {
	parts := []string{"copy"}
	if m.ZeroCopy {
		parts[0] = "zerocopy"
	}
	if m.MultiBuffer {
		parts = append(parts, "sg")
	}
	if m.NeedWakeup {
		parts = append(parts, "need_wakeup")
	}
	if m.BusyPoll {
		parts = append(parts, "busy_poll")
	}
	if m.TxBudget > 0 {
		parts = append(parts, fmt.Sprintf("tx_budget=%d", m.TxBudget))
	}
	return strings.Join(parts, "+")
}

// Statistics are the kernel's counters for one socket (struct xdp_statistics).
type Statistics struct {
	RxDropped        uint64 // packets dropped for reasons other than invalid descriptors (no room, no SG for a multi-buffer packet)
	RxInvalidDescs   uint64 // packets dropped because of invalid descriptors
	TxInvalidDescs   uint64 // TX descriptors the kernel rejected
	RxRingFull       uint64 // packets dropped because the RX ring was full
	RxFillRingEmpty  uint64 // times the fill ring was empty when a packet arrived
	TxRingEmptyDescs uint64 // times the kernel found the TX ring empty when kicked
}

// Socket is one AF_XDP socket with its fill, completion, RX and TX rings. The rings are
// single-producer/single-consumer: one goroutine at a time may use a Socket's ring methods
// (Fill, Receive, Transmit, Complete, Kick). Mode, FD and Statistics are safe anywhere.
type Socket struct {
	fd   int
	umem *memreg.UMEM
	cfg  SocketConfig
	mode SocketMode

	fill, comp, rx, tx   ring // fill, tx: we produce; rx, comp: we consume
	fillAddrs, compAddrs []uint64
	rxDescs, txDescs     []Desc
	maps                 [][]byte
	fallbacks            []error
}
