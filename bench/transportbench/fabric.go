package transportbench

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/congestion"
	"github.com/xdpndk/xdpndk/transport/simlink"
)

// MaxSenders bounds FabricConfig.Senders.
const MaxSenders = 64

// FabricConfig configures NewFabric.
type FabricConfig struct {
	// Senders is how many sender hosts there are (1 to MaxSenders), each with its own
	// engine and one QP connected to its own QP on the receiver's engine.
	Senders int
	// Seed seeds the network.
	Seed uint64
	// MaxPayload is the largest datagram; 0 means simlink.DefaultMaxPayload.
	MaxPayload int
	// Latency is the one-way delay of every path (both directions).
	Latency time.Duration
	// Loss is the random loss probability of every path, both directions (data after the
	// bottleneck, acks on the way back).
	Loss float64
	// Bandwidth (bit/s) and QueueBytes (tail drop) configure the bottleneck at the
	// receiver's ingress that every sender→receiver path feeds. The receiver→sender paths
	// (acks) have no bandwidth limit.
	Bandwidth  int64
	QueueBytes int
	// Engine, if not nil, adjusts every engine's configuration (senders' and receiver's)
	// after the fabric filled in its link, clock and resolver.
	Engine func(*transport.Config)
	// SendDepth is each sender QP's send queue depth (0: the engine's default).
	SendDepth int
	// MemPerSender is the bytes of the receiver's region each sender writes into (its own
	// slice, at RegionBase + i*MemPerSender); 0 means 1 MiB.
	MemPerSender int
}

// Fabric is N sender engines on N hosts and one receiver engine on another, on one
// simulated network, with every sender→receiver path feeding one shared bottleneck at
// the receiver's ingress: the topology of fairness and incast. Sender i's QP Tx[i] is
// connected to the receiver's QP Rx[i]. One goroutine drives every engine in virtual time
// (Step); it is not safe for concurrent use.
type Fabric struct {
	Clock      *simlink.ManualClock
	Net        *simlink.Network
	Bottleneck *simlink.Bottleneck
	// RxEngine is the receiver's engine, RxLink its link; RxMem the region every sender
	// writes into.
	RxEngine *transport.Engine
	RxLink   *simlink.Link
	RxMem    *Region
	// TxEngines and TxLinks are the senders'; Tx and Rx the QPs (Tx[i] on TxEngines[i],
	// Rx[i] on RxEngine); TxSinks count Tx[i]'s completions, RxSink those of every Rx QP.
	TxEngines []*transport.Engine
	TxLinks   []*simlink.Link
	Tx, Rx    []*transport.QP
	TxSinks   []*Counter
	RxSink    *Counter
	// CC is the congestion controller each Tx QP's data stream got from the engine's
	// Config.NewController (nil if it made none), for its Stats.
	CC []congestion.Controller
	// MemPerSender is the size of each sender's slice of RxMem.
	MemPerSender int
	// Steps counts Step calls.
	Steps uint64

	engines []simlink.Poller // senders then receiver, the order Step polls them
}

// fabricHost returns host i's address: senders 198.18.0.1.., the receiver 198.18.1.1.
func fabricHost(i int, receiver bool) netip.AddrPort {
	if receiver {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 1, 1}), 4793)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)}), 4793)
}

// NewFabric creates the network, the bottleneck and the engines, and connects every
// sender's QP to the receiver (on a perfect network: the latency, loss and bottleneck
// apply from the first datagram after the last connection is established).
func NewFabric(cfg FabricConfig) (*Fabric, error) {
	if cfg.Senders < 1 || cfg.Senders > MaxSenders {
		return nil, fmt.Errorf("%w: %d senders, want 1 to %d", ErrInvalidOptions, cfg.Senders, MaxSenders)
	}
	if cfg.MemPerSender <= 0 {
		cfg.MemPerSender = 1 << 20
	}
	f := &Fabric{
		Clock:        simlink.NewManualClock(1),
		RxSink:       new(Counter),
		RxMem:        &Region{Buf: make([]byte, cfg.MemPerSender*cfg.Senders)},
		MemPerSender: cfg.MemPerSender,
		CC:           make([]congestion.Controller, cfg.Senders),
	}
	f.Net = simlink.NewNetwork(simlink.Config{
		Seed: cfg.Seed, Clock: f.Clock, MaxPayload: cfg.MaxPayload, RxQueue: 1 << 20,
	})
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()
	var err error
	if f.Bottleneck, err = f.Net.NewBottleneck("receiver-ingress", simlink.BottleneckConfig{
		Bandwidth: cfg.Bandwidth, QueueBytes: cfg.QueueBytes,
	}); err != nil {
		return nil, err
	}
	mk := func(l *simlink.Link, mem *Region, onCC func(congestion.Controller)) (*transport.Engine, error) {
		c := transport.DefaultConfig(l)
		c.Now = f.Clock.Now
		c.Resolver = mem
		c.MaxQPs = max(c.MaxQPs, cfg.Senders)
		if cfg.Engine != nil {
			cfg.Engine(&c)
		}
		if mkcc := c.NewController; mkcc != nil && onCC != nil {
			c.NewController = func(mss int) congestion.Controller {
				cc := mkcc(mss)
				onCC(cc)
				return cc
			}
		}
		return transport.NewEngine(c)
	}
	if f.RxLink, err = f.Net.AddHost(fabricHost(0, true)); err != nil {
		return nil, err
	}
	if f.RxEngine, err = mk(f.RxLink, f.RxMem, nil); err != nil {
		return nil, fmt.Errorf("receiver engine: %w", err)
	}
	for i := range cfg.Senders {
		l, err := f.Net.AddHost(fabricHost(i, false))
		if err != nil {
			return nil, err
		}
		i := i
		e, err := mk(l, &Region{}, func(cc congestion.Controller) {
			if f.CC[i] == nil { // the first is the requester's data stream
				f.CC[i] = cc
			}
		})
		if err != nil {
			return nil, fmt.Errorf("sender engine %d: %w", i, err)
		}
		f.TxLinks = append(f.TxLinks, l)
		f.TxEngines = append(f.TxEngines, e)
		f.TxSinks = append(f.TxSinks, new(Counter))
	}
	for _, e := range f.TxEngines {
		f.engines = append(f.engines, e)
	}
	f.engines = append(f.engines, f.RxEngine)
	if err := f.connect(cfg); err != nil {
		return nil, err
	}
	rx := f.RxLink.LocalAddr()
	for _, l := range f.TxLinks {
		fwd := simlink.Impairments{Latency: cfg.Latency, Loss: cfg.Loss}
		if err := f.Net.SetPath(l.LocalAddr(), rx, fwd); err != nil {
			return nil, err
		}
		if err := f.Net.SetPath(rx, l.LocalAddr(), fwd); err != nil {
			return nil, err
		}
		if err := f.Net.SetBottleneck(l.LocalAddr(), rx, f.Bottleneck); err != nil {
			return nil, err
		}
	}
	ok = true
	return f, nil
}

// connect connects every sender's QP to a new QP on the receiver, one after the other.
func (f *Fabric) connect(cfg FabricConfig) error {
	l, err := f.RxEngine.Listen(Service, 1)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer l.Close()
	for i, e := range f.TxEngines {
		tx, err := e.NewQP(transport.QPConfig{SendDepth: cfg.SendDepth, RecvDepth: 16, Sink: f.TxSinks[i]})
		if err != nil {
			return fmt.Errorf("new QP on sender %d: %w", i, err)
		}
		rx, err := f.RxEngine.NewQP(transport.QPConfig{RecvDepth: 16, SendDepth: 16, Sink: f.RxSink})
		if err != nil {
			return fmt.Errorf("new QP %d on the receiver: %w", i, err)
		}
		f.Tx, f.Rx = append(f.Tx, tx), append(f.Rx, rx)
		conn, err := e.Connect(tx, f.RxLink.LocalAddr(), Service, nil, 0)
		if err != nil {
			return fmt.Errorf("connect %d: %w", i, err)
		}
		var req *transport.ConnRequest
		if err := f.RunUntil(time.Second, func() bool {
			select {
			case req = <-l.Requests():
				return true
			default:
				return false
			}
		}); err != nil {
			return fmt.Errorf("connection request %d: %w", i, err)
		}
		if err := req.Accept(rx, nil, 0); err != nil {
			return fmt.Errorf("accept %d: %w", i, err)
		}
		if err := f.RunUntil(time.Second, func() bool { d, _ := conn.Replied(); return d }); err != nil {
			return fmt.Errorf("connection reply %d: %w", i, err)
		}
		if _, err := conn.Replied(); err != nil {
			return fmt.Errorf("connect %d: %w", i, err)
		}
		if err := conn.Complete(); err != nil {
			return fmt.Errorf("complete %d: %w", i, err)
		}
		if err := f.RunUntil(time.Second, func() bool {
			d, _ := req.Established()
			return d && tx.State() == transport.QPConnected
		}); err != nil {
			return fmt.Errorf("establish %d: %w", i, err)
		}
		if _, err := req.Established(); err != nil {
			return fmt.Errorf("establish %d: %w", i, err)
		}
	}
	return nil
}

// Close closes the network (and so every link).
func (f *Fabric) Close() {
	if f.Net != nil {
		_ = f.Net.Close()
	}
}

// Step polls every engine once at the current virtual time. If none did anything, it
// moves the clock to the earliest engine deadline or delivery, but not past limit
// (limit <= 0: no limit). It returns false when nothing at all is scheduled (the clock then
// moves to limit, if one was given).
func (f *Fabric) Step(limit int64) bool {
	f.Steps++
	ok, _ := step(f.Clock, f.Net, limit, f.engines...)
	return ok
}

// RunUntil steps until cond holds, or fails when limit of virtual time passes, nothing is
// scheduled any more, or maxSteps steps were taken.
func (f *Fabric) RunUntil(limit time.Duration, cond func() bool) error {
	return runUntil(f.Clock, limit, cond, f.Step)
}

// errFlowFailed is wrapped when a Write completes with an error.
var errFlowFailed = errors.New("write failed")
