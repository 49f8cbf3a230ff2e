package transport

import (
	"errors"
	"fmt"
	"time"

	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport/ack"
	"github.com/xdpndk/xdpndk/transport/congestion"
)

// Config configures an Engine. DefaultConfig fills every field but Link.
type Config struct {
	// Link is what the engine sends and receives on. Required. The engine owns it while it
	// runs but does not close it.
	Link Link
	// Now is the monotonic clock in nanoseconds. Default: time since the engine's creation.
	// Tests pass a manual clock shared with transport/simlink.
	Now func() int64
	// Resolver checks and resolves the peer's remote accesses. Default: refuses everything.
	Resolver MemoryResolver

	// RTO configures the retransmission timer (RFC 6298 estimator).
	RTO ack.RTOConfig
	// RetryLimit is how many times one packet is retransmitted before the QP fails with
	// StatusTimeout; the QP fails only once that packet has also been outstanding for
	// RTO.Max, so that a peer whose host stalls for less than that (with a microsecond SRTT
	// the limit alone is spent in 51 ms) keeps its connection. Default 7.
	RetryLimit int
	// RNRRetryLimit is how many RNR NAKs one Send may get before it fails with
	// StatusTimeout. Default 7.
	RNRRetryLimit int
	// RNRDelay is how long a sender waits after the first RNR NAK of a request that names no
	// delay; it doubles with each further RNR NAK of the same request (up to 64 times). The
	// wait is capped at 655.36 ms (InfiniBand's largest RNR timer), or at RNRDelay if that
	// is longer, whatever delay the NAK names. Default 100 µs.
	RNRDelay time.Duration
	// CreditTimeout is how long a Send waits for the peer to advertise a receive for it
	// before it is sent anyway as a probe, so that a peer that never posts one fails it
	// through the RNR retry limit (StatusTimeout) instead of holding it forever. Default
	// 100 ms.
	CreditTimeout time.Duration
	// AckEvery acknowledges after this many new packets; AckDelay at the latest this long
	// after the oldest unacknowledged one. Defaults 4 and 20 µs: with the windows of a
	// delay-based controller on a ~20 µs path (about a dozen packets) a larger AckEvery
	// leaves every round trip waiting out AckDelay (measured: 34% of a 10 Gbit/s link at
	// 16, 100% at 4).
	AckEvery int
	AckDelay time.Duration
	// Window bounds the packets one QP has in flight, and the span of PSNs from the oldest
	// unacknowledged one to the next one sent (the sender's history and the receiver's
	// reorder window). Power of two in [64, 65536]. Default 65536: 10 Gbit/s over a 10 ms
	// round trip is about 8,500 packets of 1472 bytes in flight, and under loss a hole
	// holds the span open for two to three round trips (its loss is seen one round trip
	// later, its retransmission acknowledged one more later, and a lost retransmission adds
	// more); a span that fills stalls the sender, which then sends what the repair frees
	// at once (measured: with twice the BDP as window, a 1 ms path at 1% loss overflowed its
	// bottleneck this way).
	//
	// Memory follows what a QP actually has in flight, not Window: the sender's history
	// starts at 1024 slots (56 bytes each) and doubles up to Window as more packets are
	// outstanding, its lists of acknowledged and lost packets start at 1024 entries (48
	// bytes each) and grow as needed, and only the receiver's bitmap (Window bits, 8 KiB at
	// the default) is allocated in full. A QP that keeps up to 1024 packets outstanding
	// costs what it did with a window of 1024; one that fills 16384 grows by about 0.8 MiB
	// (history) plus up to 1.5 MiB if the lists ever hold that many.
	Window int
	// NewController makes a QP's congestion controller for a payload size (MSS) in bytes.
	// Default: congestion.NewDelay with its defaults (docs/TRANSPORT.md, "Congestion
	// control").
	NewController func(mss int) congestion.Controller
	// GoBackN retransmits everything unacknowledged after a loss instead of just the missing
	// packets. It exists so benchmarks can show the difference; never use it otherwise.
	GoBackN bool
	// MaxHalfOpen bounds connection requests waiting for Accept/Reject or for their
	// ready-to-use, per engine. Default 64.
	MaxHalfOpen int
	// MaxQPs bounds the QPs that exist on the engine at once (NewQP fails with
	// ErrTooManyQPs beyond it); each costs memory sized by its queue depths and by the
	// packets it has outstanding (about 300 KiB at the defaults with up to 1024 packets
	// outstanding; up to about 2.3 MiB more for a QP that has 16384 outstanding, see
	// Window). Default 1024, at most MaxQPLimit.
	MaxQPs int
	// CMTimeout is the connection manager's retransmission interval; CMRetries how many
	// times a CM message is sent before the attempt fails. Defaults 20 ms and 10.
	CMTimeout time.Duration
	CMRetries int
	// ZeroCopyTx marks every data packet whose payload is the caller's memory (a Send's or
	// Write's gather list, a Read's resolved region) with FlagZeroCopy, so a link whose
	// registered memory holds it transmits it by reference. A work request then completes,
	// and a Read's region is released, only when the link has reported every such packet
	// of it done (TxDone) as well as acknowledged. Default false: links copy payloads.
	ZeroCopyTx bool
}

// DefaultWindow is Config.Window when it is 0 (see there).
const DefaultWindow = 65536

// DefaultConfig returns a Config with every default filled in, for link.
func DefaultConfig(link Link) Config {
	c := Config{Link: link}
	_ = c.normalize()
	return c
}

func (c *Config) normalize() error {
	if c.Link == nil {
		return errors.New("transport config: link required")
	}
	if c.Now == nil {
		start := time.Now()
		c.Now = func() int64 { return int64(time.Since(start)) }
	}
	if c.Resolver == nil {
		c.Resolver = refuseAll{}
	}
	if c.RetryLimit == 0 {
		c.RetryLimit = 7
	}
	if c.RNRRetryLimit == 0 {
		c.RNRRetryLimit = 7
	}
	if c.RNRDelay == 0 {
		c.RNRDelay = 100 * time.Microsecond
	}
	if c.CreditTimeout == 0 {
		c.CreditTimeout = 100 * time.Millisecond
	}
	if c.AckEvery == 0 {
		c.AckEvery = 4
	}
	if c.AckDelay == 0 {
		c.AckDelay = 20 * time.Microsecond
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Window&(c.Window-1) != 0 || c.Window < 64 || c.Window > 1<<16 {
		return fmt.Errorf("transport config: window %d must be a power of two in [64, 65536]", c.Window)
	}
	if c.NewController == nil {
		c.NewController = func(mss int) congestion.Controller {
			cfg := congestion.DefaultDelayConfig()
			cfg.MSS = mss
			if d, err := congestion.NewDelay(cfg); err == nil {
				return d
			}
			// Only an MSS outside the controller's range gets here; a fixed window still works.
			f, err := congestion.NewFixed(64 * max(mss, 1))
			if err != nil {
				panic("transport: fixed congestion window refused: " + err.Error())
			}
			return f
		}
	}
	if c.MaxHalfOpen == 0 {
		c.MaxHalfOpen = 64
	}
	if c.MaxQPs == 0 {
		c.MaxQPs = DefaultMaxQPs
	}
	if c.MaxQPs < 0 || c.MaxQPs > MaxQPLimit {
		return fmt.Errorf("transport config: max qps %d not in [1, %d]", c.MaxQPs, MaxQPLimit)
	}
	if c.CMTimeout == 0 {
		c.CMTimeout = 20 * time.Millisecond
	}
	if c.CMRetries == 0 {
		c.CMRetries = 10
	}
	if c.RetryLimit < 0 || c.RNRRetryLimit < 0 || c.AckEvery < 1 || c.MaxHalfOpen < 1 || c.CMRetries < 1 {
		return errors.New("transport config: negative limits")
	}
	return nil
}

// refuseAll is the resolver of an engine without memory: every remote access is refused.
type refuseAll struct{}

func (refuseAll) Acquire(memreg.PD, uint32, uint64, uint32, Access) (memreg.Span, error) {
	return memreg.Span{}, ErrAccess
}
func (refuseAll) Invalidate(memreg.PD, uint32) error { return ErrAccess }
