//go:build linux

package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/xdpndk/xdpndk/cmd/ndkpeer/internal/proto"
	"github.com/xdpndk/xdpndk/ndk"
)

// The server's end of a run's control connection (--cpu-util, -b): the measured window's
// CPU time and, with -b, the same test run towards the client on every connection of the
// run's session. Everything here runs on the loop's goroutine.

// Layout of a control connection's buffer: receive slots, then the answer.
const (
	ctlServerSlots  = 2
	ctlServerSlotSz = 128
	ctlAnswerOff    = 1024
	ctlServerBuf    = 4096
	// ctlFindWait bounds how long a CtlStart waits for the session's connections to reach
	// the loop (the last one's Accept may finish after the client's CompleteConnect).
	ctlFindWait = 2 * time.Second
	// ctlDrainWait bounds how long a CtlStop waits for the server's direction to complete
	// what it posted (the transport's retry budget gives up before).
	ctlDrainWait = 15 * time.Second
)

// ctlRun is a control connection's window.
type ctlRun struct {
	k       *conn        // the control connection
	cmd     proto.CtlMsg // the command being carried out
	pending bool         // cmd awaits its answer
	since   time.Time    // when cmd arrived

	started bool
	t0      int64 // clock at CtlStart
	cpu0    cpuTimes
	conns   []*conn // the session's test connections

	// the server's direction (-b)
	reverse  bool
	posting  bool
	kind     proto.Kind
	size     int
	depth    int
	pace     pacer
	done     int64 // operations completed since t0, while counting
	last     int64 // clock of the last of them
	counting bool
	answer   proto.CtlMsg // CtlStop's, taken at its arrival, sent once drained
}

// ctlMessage takes a command from a control connection's receive (handle).
func (s *server) ctlMessage(k *conn, r *ndk.ResultEx) {
	slot, _ := r.RequestContext.(int)
	if slot < 0 || slot >= ctlServerSlots {
		k.failure = "control receive of unknown slot"
		return
	}
	in := k.buf[slot*ctlServerSlotSz : slot*ctlServerSlotSz+proto.CtlMsgLen]
	m, err := proto.ParseCtlMsg(in[:min(int(r.BytesTransferred), len(in))])
	if rerr := k.qp.Receive(slot, []ndk.SGE{k.mr.SGE(in)}); rerr != nil {
		k.failure = "post receive: " + rerr.Error()
		return
	}
	c := k.ctl
	if s.log.Enabled(context.Background(), slog.LevelDebug) { // per command: the debug level's
		s.log.Debug("control command", "peer", k.peer, "op", m.Op, "pending", c.pending, "err", err)
	}
	switch {
	case err != nil:
		s.ctlAnswer(k, proto.CtlMsg{Op: proto.CtlError, Status: uint32(ndk.StatusInvalidParameter)})
	case c.pending:
		s.ctlAnswer(k, proto.CtlMsg{Op: proto.CtlError, Status: uint32(ndk.StatusDeviceBusy)})
	case m.Op == proto.CtlStart || m.Op == proto.CtlSample || m.Op == proto.CtlStop:
		c.cmd, c.pending, c.since = m, true, time.Now()
	default:
		s.ctlAnswer(k, proto.CtlMsg{Op: proto.CtlError, Status: uint32(ndk.StatusInvalidDeviceRequest)})
	}
}

// ctlAnswer sends an answer on a control connection.
func (s *server) ctlAnswer(k *conn, m proto.CtlMsg) {
	out := m.Append(k.buf[ctlAnswerOff:ctlAnswerOff])
	if err := k.qp.Send(ctxSend, []ndk.SGE{k.mr.SGE(out)}, 0); err != nil {
		k.failure = "control answer: " + err.Error()
	}
}

// counters are the window's figures now.
func (c *ctlRun) counters(now int64, polls bool) proto.CtlMsg {
	cpu := processCPU().sub(c.cpu0)
	m := proto.CtlMsg{Op: proto.CtlCounters, Ops: uint64(c.done), ElapsedNs: uint64(max(now-c.t0, 0)),
		UserNs: uint64(max(cpu.user, 0)), SysNs: uint64(max(cpu.sys, 0))}
	if c.last > c.t0 {
		m.LastNs = uint64(c.last - c.t0)
	}
	if polls {
		m.Flags |= proto.CtlPolls
	}
	return m
}

// control carries out the pending commands of the loop's control connections. polls says
// whether the loop polls (rather than sleeping on notifications).
func (s *server) control(conns []*conn, polls bool) {
	for _, k := range conns {
		c := k.ctl
		if c == nil || !c.pending || k.failure != "" {
			continue
		}
		now := clock()
		switch c.cmd.Op {
		case proto.CtlStart:
			s.ctlStart(k, conns, now, polls)
		case proto.CtlSample:
			c.pending = false
			if !c.started {
				s.ctlAnswer(k, proto.CtlMsg{Op: proto.CtlError, Status: uint32(ndk.StatusInvalidDeviceState)})
				continue
			}
			s.ctlAnswer(k, c.counters(now, polls))
		case proto.CtlStop:
			if !c.started {
				c.pending = false
				s.ctlAnswer(k, proto.CtlMsg{Op: proto.CtlError, Status: uint32(ndk.StatusInvalidDeviceState)})
				continue
			}
			if c.counting {
				c.answer, c.counting, c.posting = c.counters(now, polls), false, false
			}
			outstanding := 0
			for _, t := range c.conns {
				outstanding += t.revOut
			}
			switch {
			case outstanding == 0:
				c.pending = false
				c.detach()
				s.ctlAnswer(k, c.answer)
			case time.Since(c.since) > ctlDrainWait:
				c.pending = false
				c.detach()
				s.ctlAnswer(k, proto.CtlMsg{Op: proto.CtlError, Status: uint32(ndk.StatusIOTimeout)})
			}
		}
	}
}

// ctlStart opens a window once every connection of the session is in the loop.
func (s *server) ctlStart(k *conn, conns []*conn, now int64, polls bool) {
	c, m := k.ctl, k.ctl.cmd
	fail := func(st ndk.Status) {
		c.pending = false
		s.ctlAnswer(k, proto.CtlMsg{Op: proto.CtlError, Status: uint32(st)})
	}
	if c.started {
		fail(ndk.StatusInvalidDeviceState)
		return
	}
	c.conns = c.conns[:0]
	for _, t := range conns {
		if t != k && t.req.Session == k.req.Session && t.req.Kind != proto.KindControl && t.failure == "" {
			c.conns = append(c.conns, t)
		}
	}
	if len(c.conns) < int(k.req.QPs) {
		if time.Since(c.since) > ctlFindWait {
			fail(ndk.StatusConnectionInvalid) // a connection of the session never came
		}
		return // the rest may still be on their way to the loop
	}
	c.reverse = m.Flags&proto.CtlReverse != 0
	if c.reverse {
		for _, t := range c.conns {
			r := t.req
			switch {
			case r.Kind != m.Kind, r.Flags&proto.FlagBidirectional == 0, m.Size > r.MaxSize, int(m.Depth) > t.revCap:
				fail(ndk.StatusInvalidParameter)
				return
			case r.Kind != proto.KindSendBW && r.BufLen < uint64(m.Size):
				fail(ndk.StatusInvalidParameter)
				return
			}
		}
	}
	c.started, c.counting, c.pending = true, true, false
	c.t0, c.cpu0, c.done, c.last = clock(), processCPU(), 0, 0
	if c.reverse {
		c.kind, c.size, c.depth, c.posting = m.Kind, int(m.Size), int(m.Depth), true
		c.pace = newPacer(int64(m.Rate), c.t0)
		for _, t := range c.conns {
			t.rev, t.revOut = c, 0
			t.revSGE[0] = t.mr.SGE(t.buf[:c.size])
		}
	}
	s.ctlAnswer(k, c.counters(now, polls))
}

// detach ends the window: the session's connections stop counting for it.
func (c *ctlRun) detach() {
	for _, t := range c.conns {
		if t.rev == c {
			t.rev = nil
		}
	}
	c.conns = c.conns[:0]
	c.started, c.posting, c.counting, c.reverse = false, false, false, false
}

// reverse posts the server's direction of every open window (-b), within each
// connection's depth and the window's pace. It reports whether it posted, and the clock of
// the next paced post (0: none waits).
func (s *server) reverse(conns []*conn) (posted bool, next int64) {
	for _, k := range conns {
		c := k.ctl
		if c == nil || !c.posting {
			continue
		}
		now := clock()
		for _, t := range c.conns {
			if t.failure != "" || t.rev != c {
				continue
			}
			flags := ndk.OpFlags(0)
			if c.size <= int(t.req.InlineSize) && c.kind != proto.KindReadBW {
				flags = ndk.OpInline
			}
			for t.revOut < c.depth && c.pace.due(now) {
				var err error
				switch c.kind {
				case proto.KindSendBW:
					err = t.qp.Send(ctxRev, t.revSGE[:], flags)
				case proto.KindWriteBW:
					err = t.qp.Write(ctxRev, t.revSGE[:], t.req.BufAddr, t.req.Token, flags)
				default:
					err = t.qp.Read(ctxRev, t.revSGE[:], t.req.BufAddr, t.req.Token, 0)
				}
				if ndk.StatusOf(err) == ndk.StatusInsufficientResources {
					break // the initiator queue is full: completions first
				}
				if err != nil {
					t.failure = "reverse " + c.kind.Op() + ": " + err.Error()
					break
				}
				c.pace.took(now)
				t.revOut++
				posted = true
			}
		}
		if c.pace.rate > 0 && (next == 0 || c.pace.next < next) {
			next = c.pace.next
		}
	}
	return posted, next
}

// revDone counts one completion of the server's direction on t.
func (t *conn) revDone() {
	t.revOut--
	if c := t.rev; c != nil && c.counting {
		c.done++
		c.last = clock()
	}
}

// leaveWindows forgets a connection the loop gives up: a test connection leaves its window (what
// it had outstanding is flushed), a control connection's window ends.
func (k *conn) leaveWindows() {
	if c := k.rev; c != nil {
		k.rev = nil
		for i, t := range c.conns {
			if t == k {
				c.conns = append(c.conns[:i], c.conns[i+1:]...)
				break
			}
		}
	}
	if k.ctl != nil {
		k.ctl.detach()
	}
}
