//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/xdpndk/xdpndk/cmd/ndkpeer/internal/proto"
	"github.com/xdpndk/xdpndk/ndk"
)

// The tour walks the verbs against a server, one printed step each: what it does, the NDK
// calls, and the result, which must be the expected one (a step that is expected to fail,
// the access after the invalidate, passes when it fails as NDK says it must).

const tourUsage = "-i IFACE [--json] [options] HOST"

// tourStep is one step's outcome.
type tourStep struct {
	N       int    `json:"step"`
	What    string `json:"what"`
	Calls   string `json:"ndk_calls"`
	Result  string `json:"result"`
	OK      bool   `json:"ok"`
	Elapsed string `json:"elapsed"`
}

// Layout of the client's tour buffer.
const (
	tClientBuf  = 64 << 10
	tRecvSlots  = 4
	tSendOff    = 1024
	tWriteOff   = 8192
	tReadOff    = 16384
	tWindowSize = 4096
)

func tourCmd(args []string) int {
	fs := newFlagSet("tour", tourUsage, os.Stderr)
	var af adapterFlags
	af.define(fs, "inline")
	jsonOut := fs.Bool("json", false, "print the steps as one JSON document")
	timeout := fs.Duration("timeout", 5*time.Second, "bound on connecting and on each step")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) != 1 {
		fmt.Fprintf(os.Stderr, "ndkpeer tour: one HOST expected (usage: ndkpeer tour %s)\n", tourUsage)
		return exitUsage
	}
	cfg, err := af.config()
	if err == nil && (*timeout < 10*time.Millisecond || *timeout > 10*time.Minute) {
		err = fmt.Errorf("--timeout %v: not in [10ms, 10m]", *timeout)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "ndkpeer tour: %v\n", err)
		return exitUsage
	}
	cfg.heap = ndk.DefaultHeapSize
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return report("tour", runTour(ctx, cfg, pos[0], *timeout, *jsonOut, os.Stdout), *jsonOut)
}

// tour is the tour's state.
type tour struct {
	ctx     context.Context
	timeout time.Duration
	out     io.Writer
	jsonOut bool
	steps   []tourStep

	n      *node
	pd     *ndk.PD
	cq     *ndk.CQ
	qp     *ndk.QP
	conn   *ndk.Connector
	buf    []byte
	mr     *ndk.MR
	notify chan ndk.Status
	sent   int

	winAddr  uint64
	winLen   uint32
	winToken uint32
}

// runTour runs every step; it stops at the first that does not give its expected result.
func runTour(ctx context.Context, cfg adapterConfig, host string, timeout time.Duration, jsonOut bool, out io.Writer) error {
	t := &tour{ctx: ctx, timeout: timeout, out: out, jsonOut: jsonOut, notify: make(chan ndk.Status, 4)}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	addr, err := resolveHost(rctx, host)
	cancel()
	if err != nil {
		return err
	}
	dest := netip.AddrPortFrom(addr, cfg.service)
	// The tour drives the engine from this goroutine (ProgressInline): keep it on one thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer t.close()
	steps := []struct {
		what, calls string
		fn          func() (string, error)
	}{
		{"open the adapter", "NdkOpenAdapter, NdkQueryAdapterInfo", func() (string, error) { return t.open(cfg, addr) }},
		{"register memory", "NdkCreatePd, NdkCreateMr, NdkRegisterMr", t.register},
		{"create a CQ and a QP", "NdkCreateCq, NdkCreateQp, NdkReceive", t.create},
		{"connect with private data", "NdkCreateConnector, NdkConnect, NdkGetConnectionData, NdkCompleteConnect", func() (string, error) { return t.connect(dest) }},
		{"bind a memory window (at the server)", "NdkSend, NdkReceive; the server: NdkCreateMw, NdkBind", t.bind},
		{"Write into it", "NdkWrite", t.write},
		{"Read it back", "NdkRead", t.read},
		{"Send with SOLICIT to an armed CQ", "NdkArmCq(SOLICITED), NdkSend; the server: NdkSend(SEND_AND_SOLICIT_EVENT)", t.solicit},
		{"SendAndInvalidate the window", "NdkSendAndInvalidate", t.sendInvalidate},
		{"access after the invalidate", "NdkRead", t.accessAfter},
		{"disconnect", "NdkDisconnect", t.disconnect},
	}
	if !jsonOut {
		fmt.Fprintf(out, "ndkpeer tour: the NDK verbs against %v (service %d), one step each\n", addr, cfg.service)
	}
	var failed error
	for i, s := range steps {
		t0 := time.Now()
		res, err := s.fn()
		st := tourStep{N: i + 1, What: s.what, Calls: s.calls, Result: res, OK: err == nil, Elapsed: time.Since(t0).Round(time.Microsecond).String()}
		if err != nil {
			st.Result = err.Error()
		}
		t.steps = append(t.steps, st)
		if !jsonOut {
			verdict := "ok  "
			if !st.OK {
				verdict = "FAIL"
			}
			fmt.Fprintf(out, "[%2d] %s %s\n       %s\n       -> %s (%s)\n", st.N, verdict, st.What, st.Calls, st.Result, st.Elapsed)
			if i == 0 && err == nil {
				for _, n := range t.n.notes {
					fmt.Fprintf(out, "       note: %s\n", n)
				}
			}
		}
		if err != nil {
			failed = err
			break
		}
	}
	if jsonOut {
		writeJSON(out, struct {
			Command string     `json:"command"`
			Server  string     `json:"server"`
			OK      bool       `json:"ok"`
			Steps   []tourStep `json:"steps"`
		}{"tour", dest.String(), failed == nil, t.steps})
	} else if failed == nil {
		fmt.Fprintf(out, "tour: all %d steps gave the expected result\n", len(steps))
	}
	if failed != nil {
		if exitCode(failed) != exitFailed {
			return failed
		}
		return fmt.Errorf("step %d (%s): %w", len(t.steps), t.steps[len(t.steps)-1].What, failed)
	}
	return nil
}

// close releases what the tour made.
func (t *tour) close() {
	if t.n == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if t.conn != nil {
		_ = t.conn.Close(ctx)
	}
	if t.qp != nil {
		_ = t.qp.Close(ctx)
	}
	if t.cq != nil {
		_ = t.cq.Close(ctx)
	}
	if t.mr != nil {
		_ = t.mr.Deregister(ctx)
	}
	t.n.close()
}

func (t *tour) open(cfg adapterConfig, addr netip.Addr) (string, error) {
	n, err := openNode(cfg)
	if err != nil {
		return "", err
	}
	t.n = n
	rctx, cancel := context.WithTimeout(t.ctx, t.timeout)
	defer cancel()
	if err := resolvePeer(rctx, addr, n.ifi); err != nil {
		return "", err
	}
	info := n.a.QueryAdapterInfo()
	return fmt.Sprintf("%s on %v; NDK %d.%d, max transfer %s, inline up to %d B, read limits %d/%d, %d QPs",
		modeLine(n.mode), n.a.LocalAddr(), info.Version>>16, info.Version&0xffff, humanBytes(uint64(info.MaxTransferLength)),
		info.MaxInlineDataSize, info.MaxInboundReadLimit, info.MaxOutboundReadLimit, info.MaxQPs), nil
}

func (t *tour) create() (string, error) {
	var err error
	if t.cq, err = t.n.a.NewCQ(64, func(st ndk.Status) {
		select {
		case t.notify <- st:
		default:
		}
	}); err != nil {
		return "", err
	}
	if t.qp, err = t.pd.NewQP(ndk.QPConfig{ReceiveCQ: t.cq, InitiatorCQ: t.cq, ReceiveQueueDepth: 16, InitiatorQueueDepth: 16}); err != nil {
		return "", err
	}
	for i := range tRecvSlots {
		if err := t.qp.Receive(i, []ndk.SGE{t.mr.SGE(t.buf[i*64 : i*64+proto.TourMsgLen])}); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("CQ of 64 results with a notification callback; QP of 16 receives and 16 requests; %d receives of %d B posted in the region", tRecvSlots, proto.TourMsgLen), nil
}

func (t *tour) connect(dest netip.AddrPort) (string, error) {
	var err error
	if t.conn, err = t.n.a.NewConnector(); err != nil {
		return "", err
	}
	req := proto.Request{Kind: proto.KindTour, MaxSize: tWindowSize, QPs: 1}.Append(nil)
	ctx, cancel := context.WithTimeout(t.ctx, t.timeout)
	defer cancel()
	if err := t.conn.Connect(ctx, t.qp, dest, 16, 16, req); err != nil {
		if ref, ok := refusal(t.conn, err); ok {
			return "", failWrap(exitRejected, err, "the server refused the tour: %s", ref.Reason)
		}
		return "", connectError(err, dest.String(), t.n.cfg.port)
	}
	var pd [proto.MaxPrivateData]byte
	ird, ord, size, err := t.conn.GetConnectionData(pd[:])
	if err != nil {
		return "", err
	}
	reply, err := proto.ParseReply(pd[:min(size, len(pd))], proto.KindTour)
	if err != nil {
		return "", err
	}
	if err := t.conn.CompleteConnect(ctx, nil); err != nil {
		return "", connectError(err, dest.String(), t.n.cfg.port)
	}
	return fmt.Sprintf("sent %d bytes of private data (test %q), the server answered with %d: %s; read limits %d/%d",
		len(req), proto.KindTour, size, modeLine(reply.Server), ird, ord), nil
}

func (t *tour) register() (string, error) {
	var err error
	if t.pd, err = t.n.a.NewPD(); err != nil {
		return "", err
	}
	if t.buf, err = t.n.a.Alloc(tClientBuf, 4096); err != nil {
		t.buf = make([]byte, tClientBuf)
	}
	if t.mr, err = t.pd.RegisterMR(t.buf, ndk.MRAllowLocalWrite); err != nil {
		return "", err
	}
	where := "pinned Go memory (transmitted by copy)"
	if t.mr.InUMEM() {
		where = "the adapter's UMEM (Adapter.Alloc: zero-copy transmit where the NIC allows)"
	}
	return fmt.Sprintf("%s with LOCAL_WRITE at %#x in %s: local token %#x, remote token %#x",
		humanBytes(uint64(len(t.buf))), t.mr.VA(), where, t.mr.LocalToken(), t.mr.RemoteToken()), nil
}

// send posts a tour message with flags (and, for SendAndInvalidate, the token to
// invalidate).
func (t *tour) send(m proto.TourMsg, flags ndk.OpFlags, invalidate uint32) error {
	off := tSendOff + (t.sent%4)*64
	t.sent++
	b := m.Append(t.buf[off:off])
	sgl := []ndk.SGE{t.mr.SGE(b)}
	if invalidate != 0 {
		return t.qp.SendAndInvalidate(ctxOp, sgl, flags, invalidate)
	}
	return t.qp.Send(ctxOp, sgl, flags)
}

// await polls the CQ until a result match accepts; every other result must be a success,
// except those ignore (if not nil) drops.
func (t *tour) await(match, ignore func(r *ndk.ResultEx) bool) (ndk.ResultEx, error) {
	deadline := time.Now().Add(t.timeout)
	var res [8]ndk.ResultEx
	for {
		n := t.cq.GetResultsEx(res[:])
		for i := range res[:n] {
			if match(&res[i]) {
				return res[i], nil
			}
			if ignore != nil && ignore(&res[i]) {
				continue
			}
			if res[i].Status != ndk.StatusSuccess {
				return res[i], fmt.Errorf("%v completed with %v", res[i].Type, res[i].Status)
			}
		}
		if n == 0 {
			if time.Now().After(deadline) {
				return ndk.ResultEx{}, failWrap(exitTimeout, ndk.StatusIOTimeout, "no completion within %v (STATUS_IO_TIMEOUT)", t.timeout)
			}
			if err := t.ctx.Err(); err != nil {
				return ndk.ResultEx{}, failWrap(exitInterrupted, err, "interrupted")
			}
		}
	}
}

// answer waits for the server's answer and repost the receive it arrived in.
func (t *tour) answer() (proto.TourMsg, ndk.ResultEx, error) {
	r, err := t.await(func(r *ndk.ResultEx) bool {
		return r.Type == ndk.OpTypeReceive || r.Type == ndk.OpTypeReceiveAndInvalidate
	}, nil)
	if err != nil {
		return proto.TourMsg{}, r, err
	}
	if r.Status != ndk.StatusSuccess {
		return proto.TourMsg{}, r, fmt.Errorf("the receive of the server's answer completed with %v", r.Status)
	}
	slot, _ := r.RequestContext.(int)
	if slot < 0 || slot >= tRecvSlots {
		return proto.TourMsg{}, r, fmt.Errorf("a receive of unknown context %v", r.RequestContext)
	}
	in := t.buf[slot*64 : slot*64+proto.TourMsgLen]
	m, err := proto.ParseTourMsg(in[:min(int(r.BytesTransferred), len(in))])
	if err != nil {
		return m, r, fmt.Errorf("the server's answer: %w", err)
	}
	if err := t.qp.Receive(slot, []ndk.SGE{t.mr.SGE(in)}); err != nil {
		return m, r, err
	}
	if m.Op == proto.TourError {
		return m, r, fmt.Errorf("the server could not do it: %v", ndk.Status(m.Token))
	}
	return m, r, nil
}

func (t *tour) bind() (string, error) {
	if err := t.send(proto.TourMsg{Op: proto.TourBind, Len: tWindowSize}, 0, 0); err != nil {
		return "", err
	}
	m, _, err := t.answer()
	if err != nil {
		return "", err
	}
	if m.Op != proto.TourBound || m.Len != tWindowSize || m.Token == 0 || m.Addr == 0 {
		return "", fmt.Errorf("unexpected answer %+v", m)
	}
	t.winAddr, t.winLen, t.winToken = m.Addr, m.Len, m.Token
	return fmt.Sprintf("the server bound a window of %d B at %#x with REMOTE_READ|REMOTE_WRITE and sent its token %#x in a Send", m.Len, m.Addr, m.Token), nil
}

// opDone waits for the completion of our request of type op.
func (t *tour) opDone(op ndk.OpType) (ndk.ResultEx, error) {
	return t.await(func(r *ndk.ResultEx) bool { return r.Type == op && r.RequestContext == any(ctxOp) }, nil)
}

func (t *tour) write() (string, error) {
	src := t.buf[tWriteOff : tWriteOff+tWindowSize]
	for i := range src {
		src[i] = "xdpndk tour "[i%12] + byte(i/4096)
	}
	t0 := time.Now()
	if err := t.qp.Write(ctxOp, []ndk.SGE{t.mr.SGE(src)}, t.winAddr, t.winToken, 0); err != nil {
		return "", err
	}
	r, err := t.opDone(ndk.OpTypeWrite)
	if err != nil {
		return "", err
	}
	if r.Status != ndk.StatusSuccess {
		return "", fmt.Errorf("the Write completed with %v", r.Status)
	}
	return fmt.Sprintf("%d B written into the window: %v %s in %v", len(src), r.Type, r.Status.Name(), time.Since(t0).Round(time.Microsecond)), nil
}

func (t *tour) read() (string, error) {
	dst := t.buf[tReadOff : tReadOff+tWindowSize]
	clear(dst)
	t0 := time.Now()
	if err := t.qp.Read(ctxOp, []ndk.SGE{t.mr.SGE(dst)}, t.winAddr, t.winToken, 0); err != nil {
		return "", err
	}
	r, err := t.opDone(ndk.OpTypeRead)
	if err != nil {
		return "", err
	}
	if r.Status != ndk.StatusSuccess {
		return "", fmt.Errorf("the Read completed with %v", r.Status)
	}
	if !bytes.Equal(dst, t.buf[tWriteOff:tWriteOff+tWindowSize]) {
		return "", fmt.Errorf("the %d bytes read back differ from those written", len(dst))
	}
	return fmt.Sprintf("%d B read back in %v: %s, byte for byte what the Write put there", len(dst), time.Since(t0).Round(time.Microsecond), r.Status.Name()), nil
}

func (t *tour) solicit() (string, error) {
	for len(t.notify) > 0 { // a notification of an earlier arm, if any
		<-t.notify
	}
	t.cq.Arm(ndk.NotifySolicited)
	t0 := time.Now()
	if err := t.send(proto.TourMsg{Op: proto.TourSolicit}, ndk.OpSendAndSolicitEvent, 0); err != nil {
		return "", err
	}
	m, _, err := t.answer()
	if err != nil {
		return "", err
	}
	if m.Op != proto.TourSolicited {
		return "", fmt.Errorf("unexpected answer %+v", m)
	}
	// The callback runs on the adapter's event goroutine, at the latest shortly after the
	// solicited receive completed.
	select {
	case st := <-t.notify:
		if st != ndk.StatusSuccess {
			return "", fmt.Errorf("the notification reported %v", st)
		}
		return fmt.Sprintf("the server's answer arrived with SEND_AND_SOLICIT_EVENT and our CQ's notification callback fired (%s) %v after our Send",
			st.Name(), time.Since(t0).Round(time.Microsecond)), nil
	case <-time.After(t.timeout):
		return "", fmt.Errorf("the solicited answer arrived but the armed CQ's notification did not fire within %v", t.timeout)
	}
}

func (t *tour) sendInvalidate() (string, error) {
	if err := t.send(proto.TourMsg{Op: proto.TourInvalidate}, 0, t.winToken); err != nil {
		return "", err
	}
	m, _, err := t.answer()
	if err != nil {
		return "", err
	}
	if m.Op != proto.TourInvalidated || m.Token != t.winToken {
		return "", fmt.Errorf("the server's receive did not invalidate token %#x (answer %+v)", t.winToken, m)
	}
	return fmt.Sprintf("the server's receive completed as ReceiveAndInvalidate of token %#x: the window is invalid", m.Token), nil
}

func (t *tour) accessAfter() (string, error) {
	dst := t.buf[tReadOff : tReadOff+64]
	if err := t.qp.Read(ctxOp, []ndk.SGE{t.mr.SGE(dst)}, t.winAddr, t.winToken, 0); err != nil {
		return "", err
	}
	// The failure puts the QP in error: the receives still posted are flushed
	// (STATUS_CANCELLED), possibly next to the Read's own completion.
	r, err := t.await(func(r *ndk.ResultEx) bool { return r.Type == ndk.OpTypeRead },
		func(r *ndk.ResultEx) bool { return r.Type == ndk.OpTypeReceive && r.Status == ndk.StatusCancelled })
	if err != nil {
		return "", err
	}
	if r.Status != ndk.StatusAccessViolation {
		return "", fmt.Errorf("a Read through the invalidated token completed with %v, not STATUS_ACCESS_VIOLATION", r.Status)
	}
	return fmt.Sprintf("the Read through token %#x failed with %s, as it must; the QP is in error now", t.winToken, r.Status.Name()), nil
}

func (t *tour) disconnect() (string, error) {
	ctx, cancel := context.WithTimeout(t.ctx, t.timeout)
	defer cancel()
	err := t.conn.Disconnect(ctx)
	if err != nil {
		return "", err
	}
	t.conn = nil
	return "disconnected: the server acknowledged", nil
}
