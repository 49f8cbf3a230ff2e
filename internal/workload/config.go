package workload

import (
	"fmt"
	"time"
)

// Bounds of what a session may ask for.
const (
	// MaxQPs bounds Config.QPs.
	MaxQPs = 64
	// MaxWindows bounds Config.Windows.
	MaxWindows = 8
	// MaxReadAreaSizes bounds the read area, in units of MaxSize.
	MaxReadAreaSizes = 16
	// DefaultPort is the listener port (the NDK service) a Target listens on.
	DefaultPort = 9
)

// Mix gives the relative weights of the operations an initiator starts. The zero Mix means
// DefaultMix.
type Mix struct {
	// Send posts a Send into a receive the target posted; the target checks every byte.
	Send int
	// Write posts a Write into the request's own slot of the target's region, then reads
	// the range back and compares.
	Write int
	// Read reads part of the target's read area and checks it.
	Read int
	// Window takes a memory window the target bound (announced on the control connection),
	// writes through it, reads the range back through the region and compares, then gives
	// the window back: alternately by SendAndInvalidate with its token (the target checks
	// the receive reports it) and by a release message after which the target invalidates
	// it with Invalidate. The target binds it again and announces the new token. With no
	// window available the request is a Write.
	Window int
}

// DefaultMix is the mix of the zero Mix.
func DefaultMix() Mix { return Mix{Send: 4, Write: 3, Read: 3, Window: 2} }

// MemoryKind says where a side's buffers come from.
type MemoryKind int

const (
	// MemoryMixed alternates by connection: the initiator's even connections and the
	// target's odd ones use the adapter's pinned UMEM (Adapter.Alloc), the others ordinary
	// Go memory. An adapter without a UMEM heap uses Go memory throughout. The default.
	MemoryMixed MemoryKind = iota
	// MemoryUMEM uses Adapter.Alloc for every data buffer.
	MemoryUMEM
	// MemoryGo uses ordinary Go memory for every buffer.
	MemoryGo
)

// Config configures an initiator (Dial). The zero value of each field means its default.
type Config struct {
	// Seed makes the run reproducible: operations, sizes, offsets and every byte.
	Seed uint64
	// QPs is the number of data connections (default 4, at most MaxQPs); a control
	// connection comes with them.
	QPs int
	// Outstanding is the requests kept in flight per data connection (default 8).
	Outstanding int
	// MaxSize is the largest transfer in bytes (default 16 KiB: several packets).
	MaxSize int
	// Windows is the memory windows per data connection (default 2, at most MaxWindows; a
	// negative value means none).
	Windows int
	// ReadArea is the size of the target's read area per connection (default 2*MaxSize).
	ReadArea int
	// Mix weighs the operations.
	Mix Mix
	// Memory says where the initiator's buffers come from.
	Memory MemoryKind
	// Port is the target's listener port (default DefaultPort).
	Port uint16
	// ReceiptTimeout bounds the wait for the target's receipts at the end of Run (default
	// 10 s).
	ReceiptTimeout time.Duration
}

func (c Config) withDefaults() (Config, error) {
	if c.QPs == 0 {
		c.QPs = 4
	}
	if c.Outstanding == 0 {
		c.Outstanding = 8
	}
	if c.MaxSize == 0 {
		c.MaxSize = 16 << 10
	}
	switch {
	case c.Windows == 0:
		c.Windows = 2
	case c.Windows < 0:
		c.Windows = 0
	}
	if c.ReadArea == 0 {
		c.ReadArea = 2 * c.MaxSize
	}
	if c.Mix == (Mix{}) {
		c.Mix = DefaultMix()
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.ReceiptTimeout == 0 {
		c.ReceiptTimeout = 10 * time.Second
	}
	switch {
	case c.QPs < 1 || c.QPs > MaxQPs:
		return c, fmt.Errorf("workload: %d QPs not in [1, %d]", c.QPs, MaxQPs)
	case c.Outstanding < 1 || c.Outstanding > 1024:
		return c, fmt.Errorf("workload: %d outstanding not in [1, 1024]", c.Outstanding)
	case c.MaxSize < 1 || c.MaxSize > 1<<20:
		return c, fmt.Errorf("workload: max size %d not in [1, 1 MiB]", c.MaxSize)
	case c.Windows > MaxWindows:
		return c, fmt.Errorf("workload: %d windows (max %d)", c.Windows, MaxWindows)
	case c.ReadArea < 1 || c.ReadArea > MaxReadAreaSizes*c.MaxSize:
		return c, fmt.Errorf("workload: read area %d not in [1, %d]", c.ReadArea, MaxReadAreaSizes*c.MaxSize)
	case c.Mix.Send < 0 || c.Mix.Write < 0 || c.Mix.Read < 0 || c.Mix.Window < 0:
		return c, fmt.Errorf("workload: negative weight in %+v", c.Mix)
	}
	return c, nil
}

// Limits end Run: it stops starting requests when any limit is reached (a zero field is no
// limit), or its context ends, or every connection failed, and then waits for what is in
// flight.
type Limits struct {
	// Requests bounds the operations started, over all connections.
	Requests uint64
	// Bytes bounds the payload bytes of the operations started.
	Bytes uint64
	// Duration bounds the time spent starting operations.
	Duration time.Duration
	// Drain bounds the wait for outstanding requests once starting stops (default 10 s).
	Drain time.Duration
}

// TargetConfig configures a Target. The zero value of each field means its default.
type TargetConfig struct {
	// Port is the listener port (default DefaultPort).
	Port uint16
	// MaxSize bounds the transfer size an initiator may ask for (default 64 KiB).
	MaxSize int
	// MaxOutstanding bounds the outstanding requests per connection an initiator may ask
	// for (default 64).
	MaxOutstanding int
	// Memory says where the target's buffers come from.
	Memory MemoryKind
}

func (c TargetConfig) withDefaults() TargetConfig {
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.MaxSize <= 0 {
		c.MaxSize = 64 << 10
	}
	if c.MaxOutstanding <= 0 {
		c.MaxOutstanding = 64
	}
	return c
}

// ctlMessages sizes the control connection: the messages one side may have in flight, or
// that may arrive while its receives are not reposted yet. Per data connection the target
// sends an announcement per window (each answers a release), a receipt, and credit
// messages (at most one waits; a few may be in flight); the initiator a release per window
// and a report. Both sides post twice this many receives.
func ctlMessages(qps, windows int) int { return qps*(windows+6) + 8 }
