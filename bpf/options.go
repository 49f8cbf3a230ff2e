package bpf

import "fmt"

// DefaultQueueCount is the XSKMAP size Load uses when Options.QueueCount is 0.
const DefaultQueueCount = 64

// MaxQueueCount is the largest Options.QueueCount Load accepts.
const MaxQueueCount = 1 << 16

// Options configures Load. The zero value is not valid: Port is required.
type Options struct {
	// Port is our UDP destination port in host byte order. Required, non-zero.
	Port uint16
	// QueueCount is the number of XSKMAP slots, one per RX queue: a packet that arrives on
	// queue q is steered to the socket set with SetSocket(q, fd). Queues at or above
	// QueueCount never steer. 0 means DefaultQueueCount.
	QueueCount int
}

// DefaultOptions returns Options with every default filled in; the caller must still set
// Port.
func DefaultOptions() Options {
	return Options{QueueCount: DefaultQueueCount}
}

// withDefaults validates o and returns it with defaults applied.
func (o Options) withDefaults() (Options, error) {
	if o.Port == 0 {
		return o, fmt.Errorf("%w: port must be non-zero", ErrInvalidOptions)
	}
	if o.QueueCount == 0 {
		o.QueueCount = DefaultQueueCount
	}
	if o.QueueCount < 0 || o.QueueCount > MaxQueueCount {
		return o, fmt.Errorf("%w: queue count %d not in [1, %d]", ErrInvalidOptions, o.QueueCount, MaxQueueCount)
	}
	return o, nil
}

// Mode is how Attach hooks the program into an interface.
type Mode int

const (
	// AttachAuto tries AttachNative and falls back to AttachGeneric when that fails.
	AttachAuto Mode = iota
	// AttachNative runs the program in the driver (XDP_FLAGS_DRV_MODE): fast, needs driver
	// support, and is what AF_XDP zero-copy needs.
	AttachNative
	// AttachGeneric runs the program on the SKB path (XDP_FLAGS_SKB_MODE): works on every
	// device, slower, AF_XDP copy mode only.
	AttachGeneric
)

// String returns "auto", "native", "generic", or "Mode(n)" for an unknown value.
func (m Mode) String() string {
	switch m {
	case AttachAuto:
		return "auto"
	case AttachNative:
		return "native"
	case AttachGeneric:
		return "generic"
	default:
		return fmt.Sprintf("Mode(%d)", int(m))
	}
}
