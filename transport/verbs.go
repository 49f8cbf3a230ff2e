package transport

import (
	"fmt"

	"github.com/xdpndk/xdpndk/transport/wire"

	"github.com/xdpndk/xdpndk/memreg"
)

// MaxSGE is the most scatter/gather entries one work request or receive may have.
const MaxSGE = 4

// Status is the outcome of a work request or receive as the transport reports it. Package
// ndk maps each to the NTSTATUS a Windows provider completes the request with.
type Status uint8

const (
	// StatusSuccess: done.
	StatusSuccess Status = iota
	// StatusCancelled: flushed (Flush, disconnect, or the QP entered the error state
	// because of an earlier failure). NDK: STATUS_CANCELLED.
	StatusCancelled
	// StatusTimeout: the retransmission budget (RetryTimeout), the RNR budget (RNRTimeout) or
	// the keepalive ran out; the peer is gone or never posted a receive (QP.Cause says
	// which). NDK: STATUS_IO_TIMEOUT.
	StatusTimeout
	// StatusAccessViolation: the peer refused a remote access (token, rights, bounds, or an
	// invalidated token); nothing was written. NDK: STATUS_ACCESS_VIOLATION.
	StatusAccessViolation
	// StatusDataOverrun: at the receiver, an incoming Send was larger than the receive
	// buffer. NDK: STATUS_DATA_OVERRUN.
	StatusDataOverrun
	// StatusDataError: at the sender, the peer refused the Send (too large for its receive)
	// or the request as invalid. NDK: STATUS_DATA_ERROR.
	StatusDataError
	// StatusRemoteError: the peer's QP failed while processing the request.
	// NDK: STATUS_REMOTE_ERROR... mapped by ndk.
	StatusRemoteError
	// StatusLocalError: the request was malformed locally (more SGEs than allowed, a length
	// over the limit). NDK: STATUS_INVALID_PARAMETER / DATA_OVERRUN by ndk.
	StatusLocalError
)

var statusNames = [...]string{"success", "cancelled", "timeout", "access violation", "data overrun", "data error", "remote error", "local error"}

// String names the status.
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// OpKind is what a work request does.
type OpKind uint8

const (
	// OpSend sends the gathered bytes into the peer's next receive.
	OpSend OpKind = iota + 1
	// OpSendInv is OpSend that also asks the peer to invalidate InvToken.
	OpSendInv
	// OpWrite writes the gathered bytes to the peer's memory at RemoteAddr/RemoteToken.
	OpWrite
	// OpRead reads Length bytes of the peer's memory at RemoteAddr/RemoteToken into the
	// scatter list.
	OpRead
	// OpReceive is a posted receive (used in completions only).
	OpReceive
	// OpReceiveInv is a receive that was completed by a SendAndInvalidate (completions only).
	OpReceiveInv
	// OpLocal is a request that sends nothing: it completes in posting order, once every
	// earlier request of the queue has completed (and, with WRReadFence, every earlier Read).
	// Package ndk posts its Bind, FastRegister and Invalidate verbs as OpLocal, so that their
	// completions take their place among the others.
	OpLocal
)

var opNames = [...]string{"", "send", "send+invalidate", "write", "read", "receive", "receive+invalidate", "local"}

// String names the operation.
func (o OpKind) String() string {
	if int(o) < len(opNames) && o != 0 {
		return opNames[o]
	}
	return fmt.Sprintf("OpKind(%d)", uint8(o))
}

// WRFlags modify a work request.
type WRFlags uint8

const (
	// WRSolicited asks the peer to signal its solicited-event waiters when this Send's receive
	// completes (SEND_AND_SOLICIT_EVENT).
	WRSolicited WRFlags = 1 << iota
	// WRReadFence holds the request until every earlier Read of the QP has completed
	// (READ_FENCE).
	WRReadFence
	// WRDefer queues the request without making it visible to the engine
	// (NDK_OP_FLAG_DEFER): it starts with the next request posted without WRDefer, or when
	// a post fails (NDKPI Deferred Processing Scheme: a failing post first releases
	// everything deferred before it), or at QP.Publish.
	WRDefer
)

// WorkRequest is one initiator-queue request. The memory its SGL names belongs to the
// transport from PostSend until the request completes: Send and Write read it (possibly
// more than once, for retransmission), Read writes into it.
type WorkRequest struct {
	Kind        OpKind
	Flags       WRFlags
	NSGE        uint8
	SGL         [MaxSGE][]byte // local memory: the gather list (Send, Write) or scatter list (Read)
	RemoteAddr  uint64         // Write, Read: the peer's virtual address (host order; may include an offset)
	RemoteToken uint32         // Write, Read: the peer's remote token
	InvToken    uint32         // OpSendInv: the token the peer invalidates
	Context     uint64         // returned in the completion
	// LocalStatus, on an OpLocal request, is the status it completes with. A status other
	// than StatusSuccess fails the QP when the request's turn comes (every earlier request
	// completed): it completes with that status and everything after it cancelled. Package
	// ndk uses it for requests that fail a local check (an SGE outside its region).
	LocalStatus Status
	// Poster is the poster's own, kept with the request and handed back with its completion
	// untouched.
	Poster PosterData
}

// PosterData is what the poster of a work request or receive keeps with it, so that the
// request has one record from post to completion (QP.Reserve; a receive's is copied once,
// into the QP's ring, since an SRQ's receives complete out of their queue's order): the
// engine stores it and never reads it. Package ndk keeps there the application's request
// context, the NDK verb and its flags, the memory regions the SGL lies in, and the memory
// object a Bind or FastRegister changed.
type PosterData struct {
	Context any
	Object  any
	Tag     uint64
	Holds   [MaxSGE]*memreg.MR
}

// release clears the request when its slot in the send queue is freed, dropping its
// references to caller memory.
func (w *WorkRequest) release() { *w = WorkRequest{} }

// Len is the total length of the work request's SGL.
func (w *WorkRequest) Len() int { return sglLen(&w.SGL, w.NSGE) }

// Receive is one posted receive: a scatter list and the context returned in its completion.
type Receive struct {
	NSGE    uint8
	SGL     [MaxSGE][]byte
	Context uint64
	// Poster is the poster's own, kept with the receive and handed back with its
	// completion untouched (as WorkRequest.Poster).
	Poster PosterData
}

// release clears the receive when its slot in the receive queue is freed, dropping its
// references to caller memory.
func (r *Receive) release() { *r = Receive{} }

// Len is the total length of the receive's SGL.
func (r *Receive) Len() int { return sglLen(&r.SGL, r.NSGE) }

func sglLen(sgl *[MaxSGE][]byte, n uint8) int {
	t := 0
	for i := 0; i < int(n) && i < MaxSGE; i++ {
		t += len(sgl[i])
	}
	return t
}

// Completion reports the end of a work request or receive.
type Completion struct {
	// Request is the work request that completed, where it was posted (its Poster data
	// included), valid only during CompletionSink.Complete; nil for a receive.
	Request *WorkRequest
	// Receive is the receive that completed (its Poster data included), valid only during
	// CompletionSink.Complete; nil for a work request.
	Receive   *Receive
	Context   uint64
	Op        OpKind
	Status    Status
	Bytes     uint32 // bytes transferred: received (receives), read (reads), sent (sends, writes)
	Solicited bool   // a receive completed by a solicited Send
	InvToken  uint32 // OpReceiveInv: the token the peer invalidated here
}

// set fills every field of c in place, for the parts' pop: a composite literal of them would
// be built on the stack and copied, its wide loads stalling on the narrow stores that built
// it, once per completion.
func (c *Completion) set(req *WorkRequest, rcv *Receive, ctx uint64, op OpKind, st Status, n uint32, solicited bool, inv uint32) {
	c.Request, c.Receive, c.Context = req, rcv, ctx
	c.Op, c.Status, c.Bytes, c.Solicited, c.InvToken = op, st, n, solicited, inv
}

// CompletionSink receives a QP's completions, on the engine goroutine, in posting order per
// queue (initiator queue, receive queue). It must not block and must not call back into the
// engine, and c is valid only during the call (copy what is needed).
type CompletionSink interface {
	Complete(qp *QP, c *Completion)
}

// MemoryResolver checks remote accesses and resolves them to memory. Its method set is
// memreg.Registry's (Acquire, Invalidate), so package ndk hands its registry to the engine
// as it is; tests use simple ones. Its methods are called on the engine goroutine and must
// not allocate or block.
type MemoryResolver interface {
	// Acquire returns the bytes [addr, addr+length) of the memory that token names, if a QP
	// of protection domain pd may access them with access: a Span of exactly length bytes,
	// contiguous or spread over fast-registered pages. If the Span holds a region (Span.MR
	// not nil) the engine releases it exactly once, when it no longer uses the bytes: at
	// once for a Write it placed, after the last response packet was acknowledged and
	// transmitted for a Read. On refusal it returns an error matching memreg.ErrAccess, holds
	// nothing, and the caller writes nothing.
	Acquire(pd memreg.PD, token uint32, addr uint64, length uint32, access memreg.Access) (memreg.Span, error)
	// Invalidate invalidates token for SendAndInvalidate; an error means the token could not
	// be invalidated (not a fast-registered region or a window of pd) and the connection is
	// aborted.
	Invalidate(pd memreg.PD, token uint32) error
}

// Limits of the connection and of one packet, for the layers above (they do not read the
// wire format).
const (
	// MaxPrivateData is the most private data a connect, accept or reject carries.
	MaxPrivateData = wire.MaxPrivateData
	// PacketOverhead is what every data packet spends of a datagram on the transport's
	// header and trailer: a message of at most MaxPayload-PacketOverhead bytes (less its
	// opcode's extension) fits in one packet.
	PacketOverhead = wire.HeaderLen + wire.TrailerLen
)
