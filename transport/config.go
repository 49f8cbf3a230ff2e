package transport

import (
	"errors"
	"fmt"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"

	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport/ack"
	"github.com/xdpndk/xdpndk/transport/congestion"
)

// Config configures an Engine. DefaultConfig fills every field but Link.
type Config struct {
	// Link is what the engine sends and receives on. Required. The engine owns it while it
	// runs but does not close it.
	Link link.Link
	// Now is the monotonic clock in nanoseconds. Default: time since the engine's creation.
	// Tests pass a manual clock shared with transport/simlink.
	Now func() int64
	// Resolver checks and resolves the peer's remote accesses. Default: refuses everything.
	Resolver MemoryResolver

	// RTO configures the retransmission timer (RFC 6298 estimator). Its Max (500 ms by
	// default) also bounds how long a peer that comes back after a silence waits for our
	// next retransmission; keep it at most a second.
	RTO ack.RTOConfig
	// RetryTimeout is the retransmission budget, as a duration: a packet (or a Read whose
	// response stopped arriving, probed by the requester) that stays unacknowledged for
	// RetryTimeout after it was first sent fails its QP with StatusTimeout (Cause:
	// ErrRetryTimeout). Retransmissions go on meanwhile, with the RTO backing off up to
	// RTO.Max. Only a transmission made after the budget ran out and left unanswered for a
	// full timeout fails the QP, and a timer that runs late (this engine did not run) first
	// retransmits, so a QP fails at most about RetryTimeout + RTO.Max after the peer stopped
	// answering and never because this host was descheduled. A packet refused with an RNR
	// NAK starts its budget again at the NAK (RNRTimeout bounds the refusals). QPConfig may
	// override it per QP. Default 10 s (docs/RELIABILITY.md, "Liveness budgets").
	RetryTimeout time.Duration
	// RNRTimeout is the RNR budget: a request the peer keeps refusing with RNR NAKs (no
	// receive posted) fails with StatusTimeout (Cause: ErrRNRTimeout) once its first RNR NAK
	// is RNRTimeout old: when a further RNR NAK arrives then, or when the retry sent as the
	// budget ran out gets no answer at all for a retransmission timeout. The RNR wait per
	// retry stays capped at 655.36 ms. QPConfig may override it per QP. Default 10 s.
	RNRTimeout time.Duration
	// KeepAlive is how long a connected QP may hear nothing from its peer before it fails
	// with StatusTimeout (Cause: ErrKeepAlive) and fires OnDisconnect. Nothing is sent on a
	// connection whose peer is heard from: after KeepAlive/3 of silence the QP probes (an
	// Ack asking for an immediate answer), again with backoff while the silence lasts. A
	// negative value disables it. QPConfig may override it per QP. Default 30 s.
	KeepAlive time.Duration
	// RNRDelay is how long a sender waits after the first RNR NAK of a request that names no
	// delay; it doubles with each further RNR NAK of the same request (up to 64 times the delay). The
	// wait is capped at 655.36 ms (InfiniBand's largest RNR timer), or at RNRDelay if that
	// is longer, whatever delay the NAK names. Default 100 µs.
	RNRDelay time.Duration
	// CreditTimeout is how long a Send waits for the peer to advertise a receive for it
	// before it is sent anyway as a probe, so that a peer that never posts one fails it
	// through the RNR budget (RNRTimeout, StatusTimeout) instead of holding it forever.
	// Default 100 ms.
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
	// starts at 16 slots (56 bytes each) and doubles up to Window as more packets are
	// outstanding, its lists of acknowledged and lost packets start at 16 entries (48
	// bytes each) and grow as needed, and the receiver's bitmap starts at 1024 bits and
	// doubles up to Window bits (8 KiB at the default) as PSNs arrive further ahead of its
	// cumulative point. A QP that fills 16384 grows by about 0.8 MiB (history) plus up to
	// 1.5 MiB if the lists ever hold that many; memory is never given back while the QP
	// lives (docs/TRANSPORT.md, "Memory per QP").
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
	// ErrTooManyQPs beyond it); each costs memory by the requests and packets it has had
	// outstanding at once, not by its configured depths (a few KiB idle; up to about 2.3
	// MiB more for a QP that has 16384 packets outstanding, see Window). Default 1024, at
	// most MaxQPLimit.
	MaxQPs int
	// CMTimeout is the connection manager's first retransmission interval: a connection
	// request, a reply waiting for its ready-to-use and a disconnect request are sent again
	// after it, then at doubling intervals up to 500 ms, until answered or until the
	// operation's timeout. Default 20 ms.
	CMTimeout time.Duration
	// ConnectTimeout is how long Engine.Connect waits for an answer and ConnRequest.Accept
	// for the ready-to-use when they are given a timeout of 0 (ErrConnectTimeout after it).
	// Default 30 s: as long as the caller's own deadline would usually be, so that a peer
	// host that stalls for seconds is still connected to.
	ConnectTimeout time.Duration
	// ZeroCopyTx marks every data packet whose payload is the caller's memory (a Send's or
	// Write's gather list, a Read's resolved region) with FlagZeroCopy, so a link whose
	// registered memory holds it transmits it by reference. A work request then completes,
	// and a Read's region is released, only when the link has reported every such packet
	// of it done (TxDone) as well as acknowledged. Default false: links copy payloads.
	ZeroCopyTx bool
	// PackLimit packs small requests: a data packet whose payload is at most PackLimit
	// bytes leaves in one Bundle datagram with the QP's other such packets of the same
	// engine round (a copy of its payload; docs/PROTOCOL.md §5.1), each keeping its own
	// PSN, completion and acknowledgement, so that small messages share what the path
	// charges per datagram; a lone one leaves as a plain packet, as soon as before. 0
	// takes the default, DefaultPackLimit; a negative value packs nothing. At most
	// MaxPackLimit.
	PackLimit int
	// InboxSlots is how many datagrams one engine of a Group can have waiting in the
	// inbox of another (a power of two in [2, 4096]; default 64): datagrams that arrived
	// at the first for a QP of the second (docs/TRANSPORT.md, "Several engines"). Beyond
	// it they are dropped and counted (GroupStats.ForwardDropped). Each pair of engines
	// that trades a datagram allocates its slots once, of the largest datagram each.
	InboxSlots int
}

// DefaultWindow is Config.Window when it is 0 (see there).
const DefaultWindow = 65536

// The liveness defaults (Config fields of the same names; docs/RELIABILITY.md, "Liveness
// budgets", says why).
const (
	// DefaultRetryTimeout is Config.RetryTimeout when it is 0.
	DefaultRetryTimeout = 10 * time.Second
	// DefaultRNRTimeout is Config.RNRTimeout when it is 0.
	DefaultRNRTimeout = 10 * time.Second
	// DefaultKeepAlive is Config.KeepAlive when it is 0.
	DefaultKeepAlive = 30 * time.Second
	// DefaultConnectTimeout is Config.ConnectTimeout when it is 0.
	DefaultConnectTimeout = 30 * time.Second
)

// Limits of Config.PackLimit (docs/TRANSPORT.md, "Packing small requests", says why the
// default).
const (
	// DefaultPackLimit is Config.PackLimit when it is 0.
	DefaultPackLimit = 1024
	// MaxPackLimit is the largest Config.PackLimit. A QP packs at most what leaves room for
	// an entry's header and a piggybacked ack in its datagrams, whatever the limit.
	MaxPackLimit = 1<<16 - 1
)

// DefaultConfig returns a Config with every default filled in, for link.
func DefaultConfig(link link.Link) Config {
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
	if c.RetryTimeout == 0 {
		c.RetryTimeout = DefaultRetryTimeout
	}
	if c.RNRTimeout == 0 {
		c.RNRTimeout = DefaultRNRTimeout
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = DefaultKeepAlive
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
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	switch {
	case c.PackLimit == 0:
		c.PackLimit = DefaultPackLimit
	case c.PackLimit < 0:
		c.PackLimit = -1
	case c.PackLimit > MaxPackLimit:
		return fmt.Errorf("transport config: pack limit %d over %d", c.PackLimit, MaxPackLimit)
	}
	if c.InboxSlots == 0 {
		c.InboxSlots = 64
	}
	if c.InboxSlots&(c.InboxSlots-1) != 0 || c.InboxSlots < 2 || c.InboxSlots > 4096 {
		return fmt.Errorf("transport config: inbox slots %d must be a power of two in [2, 4096]", c.InboxSlots)
	}
	if c.RetryTimeout < 0 || c.RNRTimeout < 0 || c.CMTimeout < 0 || c.ConnectTimeout < 0 || c.RNRDelay < 0 || c.CreditTimeout < 0 {
		return errors.New("transport config: negative durations (only KeepAlive may be negative: disabled)")
	}
	if c.AckEvery < 1 || c.MaxHalfOpen < 1 {
		return errors.New("transport config: negative limits")
	}
	return nil
}

// refuseAll is the resolver of an engine without memory: every remote access is refused.
type refuseAll struct{}

func (refuseAll) Acquire(memreg.PD, uint32, uint64, uint32, memreg.Access) (memreg.Span, error) {
	return memreg.Span{}, memreg.ErrAccess
}
func (refuseAll) Invalidate(memreg.PD, uint32) error { return memreg.ErrAccess }
