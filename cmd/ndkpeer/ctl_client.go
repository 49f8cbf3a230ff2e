//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/xdpndk/xdpndk/cmd/ndkpeer/internal/proto"
	"github.com/xdpndk/xdpndk/ndk"
)

// ctlClient is the client's end of a run's control connection (--cpu-util, -b): one
// command at a time, a Send of a proto.CtlMsg answered by one from the server. The
// measurement loop posts a command and polls for the answer among its own completions
// (post, poll), so that nothing it measures waits for the exchange; call does both, for the
// moments nothing is measured.
type ctlClient struct {
	qp   *ndk.QP
	cq   *ndk.CQ
	conn *ndk.Connector
	mr   *ndk.MR
	buf  []byte
	umem bool // buf came from the adapter's UMEM

	goneFlag  chan struct{} // closed by the disconnect callback
	res       [4]ndk.Result
	sge, rsge [1]ndk.SGE

	pending proto.CtlOp // the command awaiting its answer (0: none)
	sentAt  int64       // when it was posted (clock)
	answer  proto.CtlMsg
	got     bool // the answer's receive completed
	sent    bool // the command's Send completed
}

// Layout of the control buffer: the receive slot, then the send slot.
const (
	ctlRecvOff = 0
	ctlSendOff = 256
	ctlBufSize = 4096
)

// openCtl creates the control QP and connects it to the server with the session's
// number; the server finds the run's test connections by it.
func (s *session) openCtl(ctx context.Context, session uint64) (*ctlClient, error) {
	c := &ctlClient{goneFlag: make(chan struct{})}
	var err error
	if c.buf, err = s.n.a.Alloc(ctlBufSize, 4096); err != nil {
		c.buf = make([]byte, ctlBufSize)
	} else {
		c.umem = true
	}
	if c.mr, err = s.pd.RegisterMR(c.buf, ndk.MRAllowLocalWrite); err != nil {
		return c, fmt.Errorf("register the control buffer: %w", err)
	}
	if c.cq, err = s.n.a.NewCQ(16, nil); err != nil {
		return c, fmt.Errorf("create the control CQ: %w", err)
	}
	if c.qp, err = s.pd.NewQP(ndk.QPConfig{ReceiveCQ: c.cq, InitiatorCQ: c.cq, ReceiveQueueDepth: 2, InitiatorQueueDepth: 4}); err != nil {
		return c, fmt.Errorf("create the control QP: %w", err)
	}
	c.rsge[0] = c.mr.SGE(c.buf[ctlRecvOff : ctlRecvOff+proto.CtlMsgLen])
	if err := c.qp.Receive(ctxRecv, c.rsge[:]); err != nil {
		return c, fmt.Errorf("post the control receive: %w", err)
	}
	if c.conn, err = s.n.a.NewConnector(); err != nil {
		return c, fmt.Errorf("create connector: %w", err)
	}
	o := s.o
	req := proto.Request{Kind: proto.KindControl, MaxSize: proto.CtlMsgLen, QPs: uint16(o.qps), Session: session, Flags: s.reqFlags()}
	cctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if err := c.conn.Connect(cctx, c.qp, s.dest, 0, 0, req.Append(nil)); err != nil {
		if ref, ok := refusal(c.conn, err); ok {
			return c, refusedError(err, ref, s.dest)
		}
		return c, connectError(err, s.dest.String(), s.n.cfg.port)
	}
	var pd [proto.MaxPrivateData]byte
	_, _, size, err := c.conn.GetConnectionData(pd[:])
	if err != nil {
		return c, fmt.Errorf("read the server's answer: %w", err)
	}
	if _, err := proto.ParseReply(pd[:min(size, len(pd))], proto.KindControl); err != nil {
		_ = c.conn.Reject(nil)
		return c, fmt.Errorf("the server's answer to the control connection: %w", err)
	}
	var once sync.Once
	if err := c.conn.CompleteConnect(cctx, func() { once.Do(func() { close(c.goneFlag) }) }); err != nil {
		return c, connectError(err, s.dest.String(), s.n.cfg.port)
	}
	return c, nil
}

// close disconnects and frees the control connection.
func (c *ctlClient) close(ctx context.Context, a *ndk.Adapter) {
	if c.conn != nil {
		_ = c.conn.Close(ctx)
	}
	if c.qp != nil {
		_ = c.qp.Close(ctx)
	}
	if c.cq != nil {
		_ = c.cq.Close(ctx)
	}
	if c.mr != nil {
		_ = c.mr.Deregister(ctx)
	}
	if c.umem {
		_ = a.Free(c.buf)
	}
}

// post sends a command; its answer is then polled for.
func (c *ctlClient) post(m proto.CtlMsg) error {
	if c.pending != 0 {
		return fmt.Errorf("control: %v sent while %v awaits its answer", m.Op, c.pending)
	}
	out := m.Append(c.buf[ctlSendOff:ctlSendOff])
	c.sge[0] = c.mr.SGE(out)
	if err := c.qp.Send(ctxOp, c.sge[:], 0); err != nil {
		return fmt.Errorf("send the control message: %w", err)
	}
	c.pending, c.sentAt, c.got, c.sent = m.Op, clock(), false, false
	return nil
}

// errCtlGone is the failure of a control connection the server closed.
var errCtlGone = errors.New("the server closed the control connection")

// poll takes the control CQ's completions; it returns true with the answer once it came
// (and its Send completed: the slot is free again), and reposts the receive.
func (c *ctlClient) poll() (proto.CtlMsg, bool, error) {
	n, err := c.cq.Poll(c.res[:])
	if err != nil {
		var ce *ndk.ConnectionEnded
		if errors.As(err, &ce) {
			return proto.CtlMsg{}, false, errCtlGone
		}
		return proto.CtlMsg{}, false, fmt.Errorf("control CQ: %w", err)
	}
	for i := range c.res[:n] {
		r := &c.res[i]
		if r.Status != ndk.StatusSuccess {
			return proto.CtlMsg{}, false, fmt.Errorf("control %v completed with %v", r.RequestContext, r.Status)
		}
		if ctx, _ := r.RequestContext.(int); ctx == ctxOp {
			c.sent = true
			continue
		}
		m, err := proto.ParseCtlMsg(c.buf[ctlRecvOff : ctlRecvOff+min(int(r.BytesTransferred), proto.CtlMsgLen)])
		if err != nil {
			return proto.CtlMsg{}, false, fmt.Errorf("the server's control answer: %w", err)
		}
		if err := c.qp.Receive(ctxRecv, c.rsge[:]); err != nil {
			return proto.CtlMsg{}, false, fmt.Errorf("post the control receive: %w", err)
		}
		c.answer, c.got = m, true
	}
	clear(c.res[:n])
	if c.pending == 0 || !c.got || !c.sent {
		select {
		case <-c.goneFlag:
			return proto.CtlMsg{}, false, errCtlGone
		default:
		}
		return proto.CtlMsg{}, false, nil
	}
	op := c.pending
	c.pending = 0
	if c.answer.Op == proto.CtlError {
		return c.answer, true, fmt.Errorf("the server could not carry out %v: %v", ctlName(op), ndk.Status(c.answer.Status))
	}
	if c.answer.Op != proto.CtlCounters {
		return c.answer, true, fmt.Errorf("the server answered %v with op %d", ctlName(op), c.answer.Op)
	}
	return c.answer, true, nil
}

// overdue reports a command unanswered for longer than timeout.
func (c *ctlClient) overdue(now int64, timeout time.Duration) bool {
	return c.pending != 0 && now-c.sentAt > int64(timeout)
}

// call sends a command and waits for its answer (nothing else outstanding meanwhile).
func (c *ctlClient) call(m proto.CtlMsg, timeout time.Duration) (proto.CtlMsg, error) {
	if err := c.post(m); err != nil {
		return proto.CtlMsg{}, err
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		ans, ok, err := c.poll()
		if err != nil || ok {
			return ans, err
		}
		time.Sleep(20 * time.Microsecond)
	}
	return proto.CtlMsg{}, failWrap(exitTimeout, ndk.StatusIOTimeout, "the server did not answer %v within %v (STATUS_IO_TIMEOUT)", ctlName(m.Op), timeout)
}

// ctlName names a command for messages.
func ctlName(op proto.CtlOp) string {
	switch op {
	case proto.CtlStart:
		return "the window's start"
	case proto.CtlSample:
		return "an interval's sample"
	case proto.CtlStop:
		return "the window's end"
	}
	return fmt.Sprintf("control op %d", op)
}
