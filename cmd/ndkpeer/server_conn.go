//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/xdpndk/xdpndk/cmd/ndkpeer/internal/proto"
	"github.com/xdpndk/xdpndk/ndk"
)

// onConnect is the listener's callback (the adapter's event goroutine): it checks the
// request and either rejects it at once or accepts it on a goroutine of its own.
func (s *server) onConnect(c *ndk.Connector) {
	var pd [proto.MaxPrivateData]byte
	// A refusal is in the version of the request (a client of version 1 reads only that),
	// or ours when the request's version is not one we speak.
	version := uint8(proto.Version)
	reject := func(code proto.RefuseCode, format string, args ...any) {
		s.ctr.rejected.Add(1)
		reason := fmt.Sprintf(format, args...)
		_ = c.Reject(proto.Refusal{Version: version, Code: code, Reason: reason}.Append(nil))
		level := slog.LevelWarn
		if code == proto.RefuseStopping {
			level = slog.LevelInfo
		}
		s.log.Log(context.Background(), level, "connection refused", "peer", c.PeerAddr(), "code", code, "reason", reason)
	}
	if s.stopping.Load() {
		reject(proto.RefuseStopping, "the server is stopping")
		return
	}
	_, _, size, err := c.GetConnectionData(pd[:])
	if v := proto.VersionOf(pd[:min(size, len(pd))]); v >= proto.MinVersion && v <= proto.Version {
		version = v
	}
	if err != nil {
		reject(proto.RefuseBadRequest, "no connection data: %v", err)
		return
	}
	req, err := proto.ParseRequest(pd[:min(size, len(pd))])
	if err != nil {
		code := proto.RefuseBadRequest
		if isVersionError(err) {
			code = proto.RefuseVersion
		}
		reject(code, "%v", err)
		return
	}
	if int64(req.MaxSize) > s.lim.maxSize {
		reject(proto.RefuseLimit, "size %s over the server's limit %s (ndkpeer serve --max-size)", humanBytes(uint64(req.MaxSize)), humanBytes(uint64(s.lim.maxSize)))
		return
	}
	if int(s.conns.Add(1)) > s.lim.maxConns {
		s.conns.Add(-1)
		reject(proto.RefuseBusy, "the server has its most connections (%d; ndkpeer serve --max-conns)", s.lim.maxConns)
		return
	}
	size64 := bufferSize(req)
	if s.memUsed.Add(size64) > s.lim.maxMem {
		s.memUsed.Add(-size64)
		s.conns.Add(-1)
		reject(proto.RefuseMemory, "the server's test buffers would exceed %s (ndkpeer serve --max-mem)", humanBytes(uint64(s.lim.maxMem)))
		return
	}
	s.work.Add(1)
	go func() {
		defer s.work.Done()
		s.accept(c, req, size64)
	}()
}

// isVersionError reports a request of another protocol version.
func isVersionError(err error) bool { return errors.Is(err, proto.ErrVersion) }

// bufferSize is the test buffer a request needs: its largest message, in whole pages.
func bufferSize(req proto.Request) int64 {
	switch req.Kind {
	case proto.KindTour:
		return tourBufSize
	case proto.KindControl:
		return ctlServerBuf
	}
	return (int64(req.MaxSize) + 4095) &^ 4095
}

// accept sets a connection up (buffer, CQ, QP, receives) and accepts it with the Reply.
func (s *server) accept(c *ndk.Connector, req proto.Request, size int64) {
	k := &conn{s: s, id: s.nextID.Add(1), c: c, req: req, peer: c.PeerAddr(), since: time.Now()}
	if req.Kind == proto.KindControl {
		k.ctl = &ctlRun{k: k}
	}
	refuse := func(code proto.RefuseCode, what string, err error) {
		s.ctr.rejected.Add(1)
		_ = c.Reject(proto.Refusal{Version: req.Version, Code: code, Reason: fmt.Sprintf("%s: %v", what, err)}.Append(nil))
		s.log.Warn("connection refused", "peer", k.peer, "test", req.Kind, "code", code, "reason", what, "err", err)
		k.release()
	}
	if err := k.setup(size); err != nil {
		refuse(proto.RefuseMemory, "set up the connection", err)
		return
	}
	reply := proto.Reply{Version: req.Version, Kind: req.Kind, Server: s.n.mode}
	switch req.Kind {
	case proto.KindWriteLat, proto.KindWriteBW, proto.KindReadLat, proto.KindReadBW:
		reply.BufAddr, reply.BufLen, reply.Token = k.mr.VA(), uint64(len(k.buf)), k.mr.RemoteToken()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := c.Accept(ctx, k.qp, 64, 64, reply.Append(nil), func() { k.gone.Store(true); s.poke() })
	if err != nil {
		s.ctr.failed.Add(1)
		s.log.Warn("accept failed", "peer", k.peer, "test", req.Kind, "qpn", k.qp.Stats().QPN, "err", err)
		k.release()
		return
	}
	s.ctr.accepted.Add(1)
	s.ctr.byKind[req.Kind].Add(1)
	where := "UMEM"
	if !k.fromUMEM {
		where = "pinned Go memory"
	}
	qpn := k.qp.Stats().QPN
	session := fmt.Sprintf("%08x", uint32(req.Session))
	if req.Kind == proto.KindControl {
		s.log.Info("connection accepted", "peer", k.peer, "test", req.Kind, "qpn", qpn, "qps", req.QPs, "session", session,
			"protocol", req.Version)
	} else {
		s.log.Info("connection accepted", "peer", k.peer, "test", req.Kind, "qpn", qpn, "qp", fmt.Sprintf("%d/%d", req.QPIndex+1, req.QPs),
			"max_size", humanBytes(uint64(req.MaxSize)), "session", session, "buffer", humanBytes(uint64(len(k.buf))), "buffer_in", where)
	}
	s.connMu.Lock()
	s.live[k] = struct{}{}
	s.connMu.Unlock()
	s.loopMu.Lock()
	if s.running {
		s.incoming <- k // never blocks: it holds maxConns+1 and conns bounds them
		s.loopMu.Unlock()
		s.poke()
		return
	}
	s.loopMu.Unlock()
	s.closeConn(k, whyStopping)
}

// poke wakes the loop if it waits.
func (s *server) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// setup allocates the connection's buffer, registers it and creates its CQ and QP with
// the receives its test needs.
func (k *conn) setup(size int64) error {
	s, a, req := k.s, k.s.n.a, k.req
	if b, err := a.Alloc(int(size), 4096); err == nil {
		k.buf, k.fromUMEM = b, true
	} else {
		k.buf = make([]byte, size)
	}
	flags := ndk.MRAllowLocalWrite
	switch req.Kind {
	case proto.KindWriteLat, proto.KindWriteBW, proto.KindReadLat, proto.KindReadBW:
		flags = ndk.MRAllowRemoteRead | ndk.MRAllowRemoteWrite
	}
	var err error
	if k.mr, err = s.pd.RegisterMR(k.buf, flags); err != nil {
		return fmt.Errorf("register %s: %w", humanBytes(uint64(size)), err)
	}
	recvs := int(req.RecvDepth)
	switch req.Kind {
	case proto.KindTour:
		recvs = tourRecvSlots
	case proto.KindControl:
		recvs = ctlServerSlots
	case proto.KindSendLat, proto.KindSendBW:
		recvs = max(recvs, 1)
	default:
		recvs = 0
	}
	initiator := 64
	if req.Flags&proto.FlagBidirectional != 0 && req.Kind.Bandwidth() {
		k.revCap = int(req.Depth) // -b: the server's own direction keeps as many outstanding
		initiator = max(initiator, k.revCap+16)
	}
	var notify ndk.NotifyFunc
	if k.s.n.cfg.progress != ndk.ProgressBusy {
		notify = func(ndk.Status) { s.poke() } // the loop sleeps when idle (loop)
	}
	if k.cq, err = a.NewCQ(recvs+initiator+16, notify); err != nil {
		return fmt.Errorf("create CQ: %w", err)
	}
	qc := ndk.QPConfig{ReceiveCQ: k.cq, InitiatorCQ: k.cq, ReceiveQueueDepth: max(recvs, 1),
		InitiatorQueueDepth: initiator, InlineDataSize: int(req.InlineSize)}
	if k.qp, err = s.pd.NewQP(qc); err != nil {
		return fmt.Errorf("create QP: %w", err)
	}
	if req.Kind == proto.KindControl {
		for i := range ctlServerSlots {
			sge := []ndk.SGE{k.mr.SGE(k.buf[i*ctlServerSlotSz : i*ctlServerSlotSz+proto.CtlMsgLen])}
			if err := k.qp.Receive(i, sge); err != nil {
				return fmt.Errorf("post receive: %w", err)
			}
		}
		return nil
	}
	if req.Kind == proto.KindTour {
		for i := range tourRecvSlots {
			sge := []ndk.SGE{k.mr.SGE(k.buf[i*64 : i*64+proto.TourMsgLen])}
			if err := k.qp.Receive(i, sge); err != nil {
				return fmt.Errorf("post receive: %w", err)
			}
		}
		return nil
	}
	k.recvSGE[0] = k.mr.SGE(k.buf[:req.MaxSize])
	for range recvs {
		if err := k.qp.Receive(ctxRecv, k.recvSGE[:]); err != nil {
			return fmt.Errorf("post receive: %w", err)
		}
	}
	return nil
}

// release frees what setup made and what onConnect reserved, in reverse order.
func (k *conn) release() {
	s := k.s
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if k.qp != nil {
		_ = k.qp.Close(ctx) // the adapter's QP totals keep its counters (ndk.QPTotals)
	}
	if k.cq != nil {
		_ = k.cq.Close(ctx)
	}
	if k.mw != nil {
		_ = k.mw.Close(ctx)
	}
	if k.mr != nil {
		_ = k.mr.Deregister(ctx)
	}
	if k.fromUMEM {
		_ = s.n.a.Free(k.buf)
	}
	s.memUsed.Add(-bufferSize(k.req))
	s.conns.Add(-1)
}

// Why the loop gives a connection up, when all is well (closeConn logs others at warn).
const (
	whyPeerDisconnected = "peer disconnected"
	whyStopping         = "server stopping"
)

// closeConn disconnects a connection the loop gave up (or never took) and releases it.
func (s *server) closeConn(k *conn, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = k.c.Close(ctx) // NdkDisconnect if still connected
	st := k.qp.Stats()
	s.connMu.Lock()
	delete(s.live, k)
	s.connMu.Unlock()
	k.release()
	s.ctr.closed.Add(1)
	level := slog.LevelInfo
	if why != whyPeerDisconnected && why != whyStopping {
		level = slog.LevelWarn // idle, or the loop found it broken
	}
	s.log.Log(context.Background(), level, "connection closed", "peer", k.peer, "test", k.req.Kind, "qpn", st.QPN,
		"why", why, "after", time.Since(k.since).Round(time.Millisecond), "rx_bytes", st.RxBytes, "tx_bytes", st.TxBytes,
		"retransmits", st.Retransmits, "timeouts", st.Timeouts, "state", st.State)
}
