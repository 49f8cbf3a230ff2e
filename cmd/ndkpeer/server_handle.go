//go:build linux

package main

import (
	"context"
	"fmt"

	"github.com/xdpndk/xdpndk/cmd/ndkpeer/internal/proto"
	"github.com/xdpndk/xdpndk/ndk"
)

// Tour layout of a connection's buffer: receive slots, reply slots, the window.
const (
	tourBufSize   = 64 << 10
	tourRecvSlots = 4
	tourReplyOff  = 1024
	tourWindowOff = 8192
	tourMaxWindow = 16 << 10
)

// handle acts on one completion of a connection. Loop goroutine.
func (s *server) handle(k *conn, r *ndk.ResultEx) {
	if r.Status != ndk.StatusSuccess {
		switch {
		case k.failure != "":
		case k.gone.Load() || r.Status == ndk.StatusCancelled:
			// A flush: the peer disconnected, or the connection aborted.
			k.failure = "connection ended: its requests were flushed"
		default:
			k.failure = fmt.Sprintf("%v completed with %v", r.Type, r.Status.Name())
		}
		return
	}
	switch r.Type {
	case ndk.OpTypeReceive, ndk.OpTypeReceiveAndInvalidate:
	default:
		if c, _ := r.RequestContext.(int); c == ctxRev {
			k.revDone() // the server's direction of -b
		}
		return // our Sends and Binds
	}
	switch k.req.Kind {
	case proto.KindSendLat:
		n := int(r.BytesTransferred)
		var sgl [1]ndk.SGE
		sgl[0] = k.mr.SGE(k.buf[:n])
		flags := ndk.OpFlags(0)
		if n <= int(k.req.InlineSize) {
			flags = ndk.OpInline
		}
		if err := k.qp.Send(ctxSend, sgl[:], flags); err != nil {
			k.failure = fmt.Sprintf("echo Send: %v", err)
			return
		}
		fallthrough
	case proto.KindSendBW:
		if err := k.qp.Receive(ctxRecv, k.recvSGE[:]); err != nil {
			k.failure = fmt.Sprintf("post receive: %v", err)
		}
	case proto.KindTour:
		s.tourMessage(k, r)
	case proto.KindControl:
		s.ctlMessage(k, r)
	}
}

// tourMessage answers one command of the tour.
func (s *server) tourMessage(k *conn, r *ndk.ResultEx) {
	slot, _ := r.RequestContext.(int)
	if slot < 0 || slot >= tourRecvSlots {
		k.failure = "tour receive of unknown slot"
		return
	}
	in := k.buf[slot*64 : slot*64+proto.TourMsgLen]
	m, err := proto.ParseTourMsg(in[:min(int(r.BytesTransferred), len(in))])
	var reply proto.TourMsg
	flags := ndk.OpFlags(0)
	switch {
	case err != nil:
		reply = proto.TourMsg{Op: proto.TourError, Token: uint32(ndk.StatusInvalidParameter)}
	case m.Op == proto.TourBind && k.mw == nil && m.Len >= 1 && m.Len <= tourMaxWindow:
		reply = s.tourBind(k, m.Len)
	case m.Op == proto.TourSolicit:
		reply, flags = proto.TourMsg{Op: proto.TourSolicited}, ndk.OpSendAndSolicitEvent
	case m.Op == proto.TourInvalidate:
		reply = proto.TourMsg{Op: proto.TourInvalidated}
		if r.Type == ndk.OpTypeReceiveAndInvalidate {
			reply.Token = uint32(r.TypeSpecific)
		}
	default:
		reply = proto.TourMsg{Op: proto.TourError, Token: uint32(ndk.StatusInvalidDeviceRequest)}
	}
	if err := k.qp.Receive(slot, []ndk.SGE{k.mr.SGE(in)}); err != nil {
		k.failure = fmt.Sprintf("post receive: %v", err)
		return
	}
	off := tourReplyOff + (k.tourSent%4)*64
	k.tourSent++
	out := reply.Append(k.buf[off:off])
	if err := k.qp.Send(ctxSend, []ndk.SGE{k.mr.SGE(out)}, flags); err != nil {
		k.failure = fmt.Sprintf("tour answer: %v", err)
	}
}

// tourBind creates a window and binds it over the window area of the connection's buffer
// with remote read and write.
func (s *server) tourBind(k *conn, n uint32) proto.TourMsg {
	mw, err := s.pd.NewMW()
	if err != nil {
		return proto.TourMsg{Op: proto.TourError, Token: uint32(ndk.StatusOf(err))}
	}
	clear(k.buf[tourWindowOff : tourWindowOff+int(n)])
	va := k.mr.VA() + tourWindowOff
	if err := k.qp.Bind(ctxBind, k.mr, mw, va, uint64(n), ndk.OpAllowRemoteRead|ndk.OpAllowRemoteWrite); err != nil {
		_ = mw.Close(context.Background())
		return proto.TourMsg{Op: proto.TourError, Token: uint32(ndk.StatusOf(err))}
	}
	k.mw = mw
	return proto.TourMsg{Op: proto.TourBound, Addr: va, Len: n, Token: mw.RemoteToken()}
}
