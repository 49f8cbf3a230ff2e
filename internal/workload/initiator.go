package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"

	"github.com/xdpndk/xdpndk/ndk"
)

// Initiator is the active side of the workload: a control connection and QPs data
// connections to a Target, each with its own CQs and memory, and the requests it keeps in
// flight on them. Dial connects it, Run drives it, Close disconnects it. Run and Close must
// not run concurrently; Progress, Disconnects and QPs are safe from any goroutine.
type Initiator struct {
	a       *ndk.Adapter
	cfg     Config
	session uint64
	pd      *ndk.PD
	ctl     *ictl
	conns   []*iconn
	rnd     rng
	res     [32]ndk.ResultEx

	progress atomic.Uint64 // completions so far
	disc     atomic.Int32  // disconnect callbacks so far
	rep      Report        // built by Run
	started  uint64        // operations started (Run)
	startedB uint64        // their bytes
	closed   bool
}

// Operation phases of a slot.
const (
	phIdle = iota
	phSend
	phWrite
	phWriteBack
	phRead
	phWinWrite
	phWinBack
)

var phaseNames = [...]string{phIdle: "idle", phSend: "send", phWrite: "write", phWriteBack: "write read-back",
	phRead: "read", phWinWrite: "window write", phWinBack: "window read-back"}

type opKind uint8

const (
	opSend opKind = iota
	opWrite
	opRead
	opWindow
)

// winInfo is a window the target announced.
type winInfo struct {
	window uint16
	addr   uint64
	length uint32
	token  uint32
}

// iconn is the initiator's end of a data connection.
type iconn struct {
	in       *Initiator
	idx      int
	c        *ndk.Connector
	qp       *ndk.QP
	rcq, icq *ndk.CQ
	buf      *buffer // per slot: a source and a sink of MaxSize bytes
	lay      layout
	slots    []islot
	free     []int
	wins     []winInfo // announced, not in use
	sendSeq  uint64    // data messages posted
	sendB    uint64    // their bytes
	credit   uint64    // receives the target posted for them in all, as far as we know
	winUses  uint64
	opSeq    uint64
	failed   bool
	receipt  *Receipt
}

type islot struct {
	c     *iconn
	i     int
	phase int
	op    opKind
	size  int
	off   int
	seq   uint64
	raddr uint64
	win   winInfo
}

// Dial connects an initiator on a to the target listening on cfg.Port at addr: first the
// control connection, then cfg.QPs data connections, each getting the target's memory
// layout in the accept's private data.
func Dial(ctx context.Context, a *ndk.Adapter, addr netip.Addr, cfg Config) (in *Initiator, err error) {
	if cfg, err = cfg.withDefaults(); err != nil {
		return nil, err
	}
	// The session names this initiator at the target: random, so that several initiators
	// (even with one seed) may connect to one target; the workload's bytes come from the
	// seed alone.
	in = &Initiator{a: a, cfg: cfg, rnd: rng{s: cfg.Seed}, session: rand.Uint64() | 1}
	defer func() {
		if err != nil {
			ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			_ = in.teardown(ctx, true)
			cancel()
			in = nil
		}
	}()
	if in.pd, err = a.NewPD(); err != nil {
		return in, err
	}
	h := hello{role: roleControl, session: in.session, seed: cfg.Seed, maxSize: uint32(cfg.MaxSize),
		outstanding: uint16(cfg.Outstanding), windows: uint16(cfg.Windows), readLen: uint32(cfg.ReadArea),
		qps: uint16(cfg.QPs)}
	if err = in.dialControl(ctx, addr, h); err != nil {
		return in, fmt.Errorf("control connection: %w", err)
	}
	for i := 0; i < cfg.QPs; i++ {
		h.role, h.conn = roleData, uint16(i)
		if err = in.dialData(ctx, addr, h); err != nil {
			return in, fmt.Errorf("data connection %d: %w", i, err)
		}
	}
	return in, nil
}

func (in *Initiator) dialControl(ctx context.Context, addr netip.Addr, h hello) (err error) {
	n := ctlMessages(in.cfg.QPs, in.cfg.Windows)
	ctl := &ictl{rslots: make([]ctlSlot, 2*n), sslots: make([]ctlSlot, n)}
	in.ctl = ctl
	a := in.a
	if ctl.rcq, err = a.NewCQ(len(ctl.rslots)+4, nil); err != nil {
		return err
	}
	if ctl.icq, err = a.NewCQ(len(ctl.sslots)+4, nil); err != nil {
		return err
	}
	if ctl.qp, err = in.pd.NewQP(ndk.QPConfig{ReceiveCQ: ctl.rcq, InitiatorCQ: ctl.icq,
		ReceiveQueueDepth: len(ctl.rslots), InitiatorQueueDepth: len(ctl.sslots), MaxReceiveSGE: 1, MaxInitiatorSGE: 1}); err != nil {
		return err
	}
	if ctl.buf, err = newBuffer(a, in.pd, (len(ctl.rslots)+len(ctl.sslots))*msgLen, false, ndk.MRAllowLocalWrite); err != nil {
		return err
	}
	for i := range ctl.rslots {
		ctl.rslots[i].i = i
		if err = ctl.qp.Receive(&ctl.rslots[i], []ndk.SGE{ctl.buf.sge(i*msgLen, msgLen)}); err != nil {
			return err
		}
		ctl.recvs++
	}
	for i := range ctl.sslots {
		ctl.sslots[i].i = len(ctl.rslots) + i
		ctl.sfree = append(ctl.sfree, i)
	}
	if ctl.c, err = a.NewConnector(); err != nil {
		return err
	}
	if err = ctl.c.Connect(ctx, ctl.qp, netip.AddrPortFrom(addr, in.cfg.Port), 0, 0, h.encode()); err != nil {
		return err
	}
	return ctl.c.CompleteConnect(ctx, func() { in.disc.Add(1) })
}

func (in *Initiator) dialData(ctx context.Context, addr netip.Addr, h hello) (err error) {
	a := in.a
	cfg := &in.cfg
	c := &iconn{in: in, idx: int(h.conn)}
	in.conns = append(in.conns, c)
	if c.rcq, err = a.NewCQ(4, nil); err != nil {
		return err
	}
	if c.icq, err = a.NewCQ(cfg.Outstanding+4, nil); err != nil {
		return err
	}
	// No receives: data messages go to the target only.
	if c.qp, err = in.pd.NewQP(ndk.QPConfig{ReceiveCQ: c.rcq, InitiatorCQ: c.icq, ReceiveQueueDepth: 1,
		InitiatorQueueDepth: cfg.Outstanding, MaxReceiveSGE: 1, MaxInitiatorSGE: 1}); err != nil {
		return err
	}
	if c.buf, err = newBuffer(a, in.pd, 2*cfg.Outstanding*cfg.MaxSize, useUMEM(cfg.Memory, c.idx, true), ndk.MRAllowLocalWrite); err != nil {
		return err
	}
	c.slots = make([]islot, cfg.Outstanding)
	for i := range c.slots {
		c.slots[i] = islot{c: c, i: i}
		c.free = append(c.free, i)
	}
	if c.c, err = a.NewConnector(); err != nil {
		return err
	}
	if err = c.c.Connect(ctx, c.qp, netip.AddrPortFrom(addr, cfg.Port), 0, min(cfg.Outstanding, 64), h.encode()); err != nil {
		return err
	}
	var priv [layoutLen]byte
	_, _, n, err := c.c.GetConnectionData(priv[:])
	if err != nil {
		_ = c.c.Reject(nil)
		return fmt.Errorf("accept private data: %w", err)
	}
	if c.lay, err = decodeLayout(priv[:min(n, len(priv))], &h); err != nil {
		_ = c.c.Reject(nil)
		return err
	}
	c.credit = uint64(c.lay.recvs)
	return c.c.CompleteConnect(ctx, func() { in.disc.Add(1) })
}

// Progress returns the completions the initiator has taken so far. Safe from any
// goroutine.
func (in *Initiator) Progress() uint64 { return in.progress.Load() }

// Disconnects returns how many disconnect callbacks (CompleteConnect's) have run: the
// peer disconnected or the connection aborted. Safe from any goroutine.
func (in *Initiator) Disconnects() int { return int(in.disc.Load()) }

// Connections returns the number of connections, the control one included.
func (in *Initiator) Connections() int { return len(in.conns) + 1 }

// QPs returns the data connections' QPs (for their transport statistics).
func (in *Initiator) QPs() []*ndk.QP {
	q := make([]*ndk.QP, len(in.conns))
	for i, c := range in.conns {
		q[i] = c.qp
	}
	return q
}

// ControlQP returns the control connection's QP.
func (in *Initiator) ControlQP() *ndk.QP { return in.ctl.qp }

// Close disconnects every connection (a failed one is just closed) and frees everything.
// ctx bounds each wait. Safe to call after a failed Run.
func (in *Initiator) Close(ctx context.Context) error {
	if in.closed {
		return nil
	}
	in.closed = true
	return in.teardown(ctx, true)
}

// teardown closes what Dial made, disconnecting connections that did not fail first if
// disconnect is set.
func (in *Initiator) teardown(ctx context.Context, disconnect bool) error {
	var errs []error
	for _, c := range in.conns {
		if disconnect && !c.failed && c.c != nil {
			errs = append(errs, c.c.Disconnect(ctx))
		}
		if c.qp != nil {
			errs = append(errs, c.qp.Close(ctx))
		}
		if c.buf != nil {
			errs = append(errs, c.buf.close(ctx))
		}
		for _, cq := range []*ndk.CQ{c.rcq, c.icq} {
			if cq != nil {
				errs = append(errs, cq.Close(ctx))
			}
		}
	}
	if ctl := in.ctl; ctl != nil {
		if disconnect && !ctl.failed && ctl.c != nil {
			errs = append(errs, ctl.c.Disconnect(ctx))
		}
		if ctl.qp != nil {
			errs = append(errs, ctl.qp.Close(ctx))
		}
		if ctl.buf != nil {
			errs = append(errs, ctl.buf.close(ctx))
		}
		for _, cq := range []*ndk.CQ{ctl.rcq, ctl.icq} {
			if cq != nil {
				errs = append(errs, cq.Close(ctx))
			}
		}
	}
	return errors.Join(errs...)
}
