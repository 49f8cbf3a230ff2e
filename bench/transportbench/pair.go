package transportbench

import (
	"errors"
	"fmt"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"

	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/congestion"
	"github.com/xdpndk/xdpndk/transport/simlink"
)

// RegionBase and RegionToken name the memory region every Pair registers on both engines:
// remote accesses address it from RegionBase with RegionToken, protection domain 0.
const (
	RegionBase  = uint64(0x1000_0000)
	RegionToken = uint32(0x5eed)
	// Service is the connection-manager service number a Pair's B listens on.
	Service = uint64(7)
)

// Region is a transport.MemoryResolver over one buffer: the token RegionToken of
// protection domain 0 names Buf, whose first byte has the address RegionBase, with remote
// read and write rights. Acquire allocates nothing; Invalidate refuses (the region is not
// fast-registered).
type Region struct {
	Buf []byte
}

// Acquire implements transport.MemoryResolver: Resolve, with the PD typed as memreg's.
func (r *Region) Acquire(pd memreg.PD, token uint32, addr uint64, length uint32, a memreg.Access) (memreg.Span, error) {
	return r.Resolve(uint32(pd), token, addr, length, a)
}

// Resolve returns the span [addr, addr+length) of Buf if pd is 0 and token RegionToken, and
// refuses with memreg.ErrAccess otherwise.
func (r *Region) Resolve(pd, token uint32, addr uint64, length uint32, _ memreg.Access) (memreg.Span, error) {
	if pd != 0 || token != RegionToken || addr < RegionBase {
		return memreg.Span{}, memreg.ErrAccess
	}
	off := addr - RegionBase
	if off > uint64(len(r.Buf)) || uint64(length) > uint64(len(r.Buf))-off {
		return memreg.Span{}, memreg.ErrAccess
	}
	return memreg.Span{Buf: r.Buf[off : off+uint64(length)], N: uint64(length)}, nil
}

// Invalidate implements transport.MemoryResolver: it always refuses.
func (r *Region) Invalidate(memreg.PD, uint32) error { return memreg.ErrAccess }

// opSlots is the size of Counter's per-operation arrays: every transport.OpKind value.
const opSlots = 8

// Counter is a transport.CompletionSink that only counts: completions and bytes per
// operation, and failures (with the first one kept). It allocates nothing. Its fields are
// read by the goroutine that drives the engines, which is also the one that calls
// Complete.
type Counter struct {
	// N and Bytes count successful completions and their bytes, indexed by
	// transport.OpKind.
	N, Bytes [opSlots]uint64
	// Failed counts completions with a status other than StatusSuccess; First is the
	// first of them.
	Failed uint64
	First  transport.Completion
}

// Complete implements transport.CompletionSink.
func (c *Counter) Complete(_ *transport.QP, comp *transport.Completion) {
	if comp.Status != transport.StatusSuccess {
		if c.Failed == 0 {
			c.First = *comp
		}
		c.Failed++
		return
	}
	if k := int(comp.Op); k >= 0 && k < opSlots {
		c.N[k]++
		c.Bytes[k] += uint64(comp.Bytes)
	}
}

// Done returns the successful completions of op.
func (c *Counter) Done(op transport.OpKind) uint64 {
	if int(op) >= opSlots {
		return 0
	}
	return c.N[op]
}

// PairConfig configures NewPair.
type PairConfig struct {
	// Seed seeds the simulated network (simlink.Config.Seed).
	Seed uint64
	// MaxPayload is the largest datagram (the simulated path MTU less IP and UDP headers).
	// 0 means simlink.DefaultMaxPayload (1472, a 1500-byte MTU).
	MaxPayload int
	// Impairments apply to both directions once the QPs are connected (connection set-up
	// runs on a perfect network, so that a lost handshake message cannot cost a
	// connection-manager timeout).
	Impairments simlink.Impairments
	// RxQueue bounds the datagrams queued towards one host (simlink.Config.RxQueue); 0 is
	// simlink's default.
	RxQueue int
	// Engine, if not nil, adjusts both engines' configuration after the Pair filled in its
	// link, clock and resolver.
	Engine func(*transport.Config)
	// QP configures both QPs; its Sink is replaced by the Pair's counters.
	QP transport.QPConfig
	// Wrap, if not nil, is given each engine's link (side 0: A, 1: B) and returns the
	// Link the engine runs on: a tracing or fault-injecting wrapper around it.
	Wrap func(side int, l link.Link) link.Link
	// MemSize is the size of the region each engine registers (Region); 0 means 1 MiB.
	MemSize int
}

// Pair is two engines, A and B, on a simulated network, with one connected QP each (QA on
// A, QB on B), driven in virtual time by the one goroutine that calls Step. It is not safe
// for concurrent use.
type Pair struct {
	Clock        *simlink.ManualClock
	Net          *simlink.Network
	LinkA, LinkB *simlink.Link
	A, B         *transport.Engine
	QA, QB       *transport.QP
	// SinkA and SinkB receive QA's and QB's completions.
	SinkA, SinkB *Counter
	// MemA and MemB are the regions registered on A and B.
	MemA, MemB *Region
	// CCA is the congestion controller of QA's stream (what the engine's default
	// Config.NewController made for it), for its Stats. Read it only between Steps.
	CCA congestion.Controller
	// Steps counts Step calls; Advances those that moved the clock.
	Steps, Advances uint64

	ccs [2][]congestion.Controller // controllers each engine made, in order
}

// NewPair creates the network and the engines and connects QA to QB.
func NewPair(cfg PairConfig) (*Pair, error) {
	if cfg.MemSize <= 0 {
		cfg.MemSize = 1 << 20
	}
	p := &Pair{
		Clock: simlink.NewManualClock(1),
		SinkA: new(Counter), SinkB: new(Counter),
		MemA: &Region{Buf: make([]byte, cfg.MemSize)}, MemB: &Region{Buf: make([]byte, cfg.MemSize)},
	}
	p.LinkA, p.LinkB = simlink.Pair(simlink.Config{
		Seed: cfg.Seed, Clock: p.Clock, MaxPayload: cfg.MaxPayload, RxQueue: cfg.RxQueue,
	})
	p.Net = p.LinkA.Network()
	mk := func(side int, l *simlink.Link, m *Region) (*transport.Engine, error) {
		var link link.Link = l
		if cfg.Wrap != nil {
			link = cfg.Wrap(side, l)
		}
		c := transport.DefaultConfig(link)
		c.Now = p.Clock.Now
		c.Resolver = m
		if cfg.Engine != nil {
			cfg.Engine(&c)
		}
		if mkcc := c.NewController; mkcc != nil {
			c.NewController = func(mss int) congestion.Controller {
				cc := mkcc(mss)
				p.ccs[side] = append(p.ccs[side], cc)
				return cc
			}
		}
		return transport.NewEngine(c)
	}
	var err error
	if p.A, err = mk(0, p.LinkA, p.MemA); err != nil {
		p.Close()
		return nil, fmt.Errorf("engine A: %w", err)
	}
	if p.B, err = mk(1, p.LinkB, p.MemB); err != nil {
		p.Close()
		return nil, fmt.Errorf("engine B: %w", err)
	}
	if err := p.connect(cfg.QP); err != nil {
		p.Close()
		return nil, err
	}
	if n := len(p.ccs[0]); n > 0 {
		p.CCA = p.ccs[0][n-1]
	}
	if err := p.Net.SetDefault(cfg.Impairments); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// connect makes QA on A connect to a listener on B that accepts with QB.
func (p *Pair) connect(qcfg transport.QPConfig) error {
	qa, qb := qcfg, qcfg
	qa.Sink, qb.Sink = p.SinkA, p.SinkB
	var err error
	if p.QA, err = p.A.NewQP(qa); err != nil {
		return fmt.Errorf("new QP on A: %w", err)
	}
	if p.QB, err = p.B.NewQP(qb); err != nil {
		return fmt.Errorf("new QP on B: %w", err)
	}
	l, err := p.B.Listen(Service, 1)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer l.Close()
	conn, err := p.A.Connect(p.QA, p.LinkB.LocalAddr(), Service, nil, 0)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	var req *transport.ConnRequest
	if err := p.RunUntil(time.Second, func() bool {
		select {
		case req = <-l.Requests():
			return true
		default:
			return false
		}
	}); err != nil {
		return fmt.Errorf("connection request: %w", err)
	}
	if err := req.Accept(p.QB, nil, 0); err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	if err := p.RunUntil(time.Second, func() bool { d, _ := conn.Replied(); return d }); err != nil {
		return fmt.Errorf("connection reply: %w", err)
	}
	if _, err := conn.Replied(); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	if err := conn.Complete(); err != nil {
		return fmt.Errorf("complete: %w", err)
	}
	if err := p.RunUntil(time.Second, func() bool {
		d, _ := req.Established()
		return d && p.QA.State() == transport.QPConnected
	}); err != nil {
		return fmt.Errorf("establish: %w", err)
	}
	if _, err := req.Established(); err != nil {
		return fmt.Errorf("establish: %w", err)
	}
	return nil
}

// Close closes the network (and so both links). The engines have no goroutine to stop.
func (p *Pair) Close() {
	if p.Net != nil {
		_ = p.Net.Close()
	}
}

// Step polls both engines once at the current virtual time. If neither did anything, it
// moves the clock to the earliest of the engines' deadlines and the next delivery, but not
// past limit (limit <= 0: no limit). It returns false when nothing at all is scheduled (no
// engine deadline, no datagram queued): the clock then moves to limit, if one was given.
func (p *Pair) Step(limit int64) bool {
	p.Steps++
	ok, advanced := step(p.Clock, p.Net, limit, p.A, p.B)
	if advanced {
		p.Advances++
	}
	return ok
}

// step polls engines once, in order, at clock's time; if none did anything it moves the
// clock to the earliest engine deadline or delivery on net, but not past limit (limit <= 0:
// no limit), and reports that it advanced. It returns false when nothing at all is
// scheduled (the clock then moves to limit, if one was given).
func step(clock *simlink.ManualClock, net *simlink.Network, limit int64, engines ...simlink.Poller) (ok, advanced bool) {
	now := clock.Now()
	next, busy := net.PollAll(now, engines...)
	if busy {
		return true, false
	}
	scheduled := next != 0
	if limit > 0 && (next == 0 || next > limit) {
		next = limit
	}
	if next == 0 {
		return false, false
	}
	if next <= now {
		// Something is due now that no engine took (a deadline in the past): move on by a
		// nanosecond so that time always advances between idle polls.
		next = now + 1
	}
	clock.Set(next)
	return scheduled, true
}

// ErrStalled is returned by RunUntil when nothing is scheduled any more and the condition
// still does not hold.
var ErrStalled = errors.New("nothing scheduled")

// maxSteps bounds the Steps of one RunUntil, whatever limit it was given.
const maxSteps = 100_000_000

// RunUntil steps until cond holds, or fails when limit of virtual time passes, nothing is
// scheduled any more, or maxSteps steps were taken.
func (p *Pair) RunUntil(limit time.Duration, cond func() bool) error {
	return runUntil(p.Clock, limit, cond, p.Step)
}

// runUntil is RunUntil over any set of engines: step is their Step.
func runUntil(clock *simlink.ManualClock, limit time.Duration, cond func() bool, step func(limit int64) bool) error {
	end := clock.Now() + int64(limit)
	for steps := 0; !cond(); steps++ {
		if clock.Now() >= end {
			return fmt.Errorf("not done after %v of virtual time", limit)
		}
		if steps >= maxSteps {
			return fmt.Errorf("not done after %d steps", steps)
		}
		if !step(end) && !cond() {
			return fmt.Errorf("%w at virtual time %v", ErrStalled, time.Duration(clock.Now()))
		}
	}
	return nil
}
