package workload

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdpndk/xdpndk/ndk"
)

// Target is the passive side of the workload: it listens on an adapter, gives each
// connecting initiator registered memory (a region per data connection, receives, memory
// windows), checks every data message it receives, binds, invalidates and re-binds windows
// as the initiator uses them, and answers reports with receipts. It may run in the
// initiator's process or in another one. Run drives it; Stats is safe from any goroutine.
type Target struct {
	a   *ndk.Adapter
	cfg TargetConfig
	l   *ndk.Listener

	incoming chan *ndk.Connector
	accepted chan acceptDone

	// Run's goroutine only.
	sessions  map[uint64]*session
	accepting int // Accept calls in progress
	res       [32]ndk.ResultEx

	ctr targetCounters

	mu   sync.Mutex
	errs []error // the first maxErrs errors
}

// maxErrs bounds the errors a Target keeps.
const maxErrs = 8

// TargetStats are a Target's counters.
type TargetStats struct {
	Sessions    uint64 // control connections accepted
	Connections uint64 // data connections accepted
	Rejected    uint64 // connection requests refused (bad hello, unknown session, ...)
	Received    uint64 // data messages received
	Bytes       uint64 // their bytes
	Mismatches  uint64 // data messages with a wrong length or byte
	Binds       uint64 // window binds posted
	Invalidates uint64 // window invalidations completed (Invalidate)
	RemoteInv   uint64 // windows invalidated by the initiator's SendAndInvalidate
	Releases    uint64 // release messages received
	Receipts    uint64 // receipts sent
	Errors      uint64 // completions in error and protocol violations on live connections
	Closed      uint64 // sessions torn down
}

type targetCounters struct {
	sessions, conns, rejected, received, bytes, mismatches, binds, invalidates, remoteInv,
	releases, receipts, errors, closed atomic.Uint64
}

type acceptDone struct {
	ctl  *tctl
	data *tconn
	err  error
}

// session is one initiator's connections: a control connection and its data connections,
// sharing a PD.
type session struct {
	t     *Target
	h     hello // the control connection's hello
	pd    *ndk.PD
	ctl   *tctl
	conns []*tconn
}

// tctl is the target's end of a control connection.
type tctl struct {
	s        *session
	c        *ndk.Connector
	qp       *ndk.QP
	rcq, icq *ndk.CQ
	buf      *buffer // nrecv receive slots, then nsend send slots, msgLen bytes each
	rslots   []ctlSlot
	sslots   []ctlSlot
	sfree    []int
	backlog  []msg // messages waiting for a send slot (bounded: see send)
	up       bool
	gone     atomic.Bool
}

type ctlSlot struct{ i int }

// tconn is the target's end of a data connection.
type tconn struct {
	s        *session
	idx      int
	c        *ndk.Connector
	qp       *ndk.QP
	rcq, icq *ndk.CQ
	region   *buffer // write slots, windows' ranges, read area
	recv     *buffer // receive slots of maxSize
	lay      layout
	rslots   []trecv
	wins     []*twin
	up       bool
	gone     atomic.Bool

	nextSeq    uint64
	received   uint64
	bytes      uint64
	bad        uint64
	inv        uint64
	badSeq     uint64 // first mismatched message + 1
	badOff     uint32
	reportWant int64 // receipt owed once received reaches it; -1: none

	// Credits: the initiator sends data message k only once it knows that more than k
	// receives were posted in all, so a target that is slow to post them again (a
	// descheduled process) makes it wait instead of exhausting its RNR retries.
	posted       uint64 // receives posted since connecting
	announced    uint64 // the count the last credit message carried (the layout's at first)
	creditQueued bool   // a credit message waits in the control backlog
}

type trecv struct {
	c *tconn
	i int
}

// Window states at the target.
const (
	winIdle = iota
	winBound
	winInvalidating
)

type twin struct {
	c     *tconn
	i     int
	mw    *ndk.MW
	state int
	token uint32
	va    uint64
}

// NewTarget creates a target listening on cfg.Port of a. Run serves it.
func NewTarget(a *ndk.Adapter, cfg TargetConfig) (*Target, error) {
	t := &Target{a: a, cfg: cfg.withDefaults(), incoming: make(chan *ndk.Connector, 64),
		accepted: make(chan acceptDone, 64), sessions: map[uint64]*session{}}
	l, err := a.NewListener(func(c *ndk.Connector) {
		select {
		case t.incoming <- c:
		default:
			t.ctr.rejected.Add(1)
			_ = c.Reject(nil)
		}
	})
	if err != nil {
		return nil, err
	}
	if err := l.Listen(netip.AddrPortFrom(netip.Addr{}, t.cfg.Port)); err != nil {
		return nil, err
	}
	t.l = l
	return t, nil
}

// Stats returns the target's counters. Safe from any goroutine.
func (t *Target) Stats() TargetStats {
	c := &t.ctr
	return TargetStats{
		Sessions: c.sessions.Load(), Connections: c.conns.Load(), Rejected: c.rejected.Load(),
		Received: c.received.Load(), Bytes: c.bytes.Load(), Mismatches: c.mismatches.Load(),
		Binds: c.binds.Load(), Invalidates: c.invalidates.Load(), RemoteInv: c.remoteInv.Load(),
		Releases: c.releases.Load(), Receipts: c.receipts.Load(), Errors: c.errors.Load(),
		Closed: c.closed.Load(),
	}
}

// Err returns the first errors the target saw on live connections (completions in error,
// protocol violations, failed setups), or nil. Safe from any goroutine.
func (t *Target) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return errors.Join(t.errs...)
}

func (t *Target) fail(err error) {
	t.ctr.errors.Add(1)
	t.mu.Lock()
	if len(t.errs) < maxErrs {
		t.errs = append(t.errs, fmt.Errorf("%s: %w", time.Now().Format("15:04:05.000000"), err))
	}
	t.mu.Unlock()
}

// Run serves until ctx ends, then disconnects and frees everything. It returns ctx's error.
func (t *Target) Run(ctx context.Context) error {
	defer t.shutdown()
	idle := 0
	for ctx.Err() == nil {
		work := false
		select {
		case c := <-t.incoming:
			t.connectRequest(ctx, c)
			work = true
		case d := <-t.accepted:
			t.accepting--
			t.acceptFinished(d)
			work = true
		default:
		}
		for _, s := range t.sessions {
			if t.pollSession(s) {
				work = true
			}
		}
		idle = backoff(work, idle)
	}
	return ctx.Err()
}

// backoff sleeps a little after idle rounds, longer the longer nothing happens (up to
// 500 µs), and returns the new idle count.
func backoff(work bool, idle int) int {
	if work {
		return 0
	}
	idle++
	if idle > 8 {
		time.Sleep(time.Duration(min(idle, 50)) * 10 * time.Microsecond)
	}
	return idle
}

// closeSession tears a session down: its data connections, then the control connection.
func (t *Target) closeSession(s *session) {
	for i, c := range s.conns {
		if c != nil {
			s.conns[i] = nil
			c.close()
		}
	}
	s.ctl.close()
	delete(t.sessions, s.h.session)
	t.ctr.closed.Add(1)
}

// closeTimeout bounds each wait of a teardown.
const closeTimeout = 2 * time.Second

func (c *tconn) close() {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if c.up && !c.gone.Load() && c.c != nil {
		_ = c.c.Disconnect(ctx)
	}
	if c.qp != nil {
		_ = c.qp.Close(ctx)
	}
	for _, w := range c.wins {
		_ = w.mw.Close(ctx)
	}
	for _, b := range []*buffer{c.region, c.recv} {
		if b != nil {
			_ = b.close(ctx)
		}
	}
	for _, cq := range []*ndk.CQ{c.rcq, c.icq} {
		if cq != nil {
			_ = cq.Close(ctx)
		}
	}
}

func (ctl *tctl) close() {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if ctl.up && !ctl.gone.Load() && ctl.c != nil {
		_ = ctl.c.Disconnect(ctx)
	}
	if ctl.qp != nil {
		_ = ctl.qp.Close(ctx)
	}
	if ctl.buf != nil {
		_ = ctl.buf.close(ctx)
	}
	for _, cq := range []*ndk.CQ{ctl.rcq, ctl.icq} {
		if cq != nil {
			_ = cq.Close(ctx)
		}
	}
}

// shutdown stops listening, waits for accepts in progress, and tears every session down.
func (t *Target) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = t.l.Close(ctx)
	for {
		select {
		case c := <-t.incoming:
			t.reject(c)
			continue
		default:
		}
		break
	}
	// Accepts in progress end with Run's context; their connections are torn down below.
	for t.accepting > 0 {
		select {
		case d := <-t.accepted:
			t.accepting--
			if d.err == nil && d.ctl != nil {
				d.ctl.up = true
			}
			if d.err == nil && d.data != nil {
				d.data.up = true
			}
		case <-ctx.Done():
			t.accepting = 0
		}
	}
	for _, s := range t.sessions {
		t.closeSession(s)
	}
}
