package ndk

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport"
)

// QPConfig configures PD.NewQP (the arguments of NdkCreateQp / NdkCreateQpWithSrq).
type QPConfig struct {
	// ReceiveCQ and InitiatorCQ receive the QP's completions (they may be the same CQ).
	ReceiveCQ, InitiatorCQ *CQ
	// Context is echoed as QPContext in every result of the QP.
	Context any
	// ReceiveQueueDepth and InitiatorQueueDepth bound outstanding receives and initiator
	// requests (default 256 each).
	ReceiveQueueDepth, InitiatorQueueDepth int
	// MaxReceiveSGE and MaxInitiatorSGE bound SGEs per request (default and maximum 4).
	MaxReceiveSGE, MaxInitiatorSGE int
	// InlineDataSize is the largest OpInline payload (default 0: no inline requests).
	InlineDataSize int
	// SRQ, if set, is the shared receive queue (of this adapter) the QP takes its receives
	// from (NdkCreateQpWithSrq): ReceiveQueueDepth and MaxReceiveSGE are ignored, and
	// Receive fails with STATUS_INVALID_PARAMETER.
	SRQ *SRQ
	// RetryTimeout, RNRTimeout and KeepAlive override the adapter's Options of the same
	// names for this QP (0: the adapter's; a negative KeepAlive turns keepalive off; the
	// others may not be negative).
	RetryTimeout, RNRTimeout, KeepAlive time.Duration
}

// QP is a reliable connected queue pair (NDK_QP). Posting follows NDKPI Work Request
// Posting Requirements: calls on one queue (the initiator queue: Send, SendAndInvalidate,
// Read, Write, Bind, FastRegister, Invalidate; the receive queue: Receive) are serialized
// by the caller; the two queues, and Flush, may run concurrently. Posting never blocks and
// never allocates.
//
// Ordering, as on an InfiniBand reliable connection: the initiator requests of a QP
// complete in posting order, and its Sends consume the peer's receives in posting order.
// When the peer's receive of a Send completes, every Write posted before that Send on the
// same QP has landed in the peer's memory, so a Send after Writes is a commit: the
// receiver may read what the Writes wrote. A Read returns what every Write posted before it
// on the same QP wrote. A request posted after a Read may reach the peer before the Read is
// served: OpReadFence makes it wait until every earlier Read completed. A Write completes
// at the initiator once the peer has the data in its memory.
type QP struct {
	pd  *PD
	a   *Adapter
	tq  *transport.QP
	cfg QPConfig
	seq uint64 // its place among the adapter's QPs in the order of creation

	unusable atomic.Bool // its CQ overran
	conn     atomic.Pointer[Connector]

	// initiator queue: a request's one record is the transport's work request, which the
	// poster fills in place (transport.QP.Reserve) with what this side keeps of it
	// (transport.PosterData: the request context, the verb and flags as a tag, the regions
	// its SGEs lie in, the window or region a Bind or FastRegister changed), and which the
	// engine hands back with its completion (sink)
	iposted uint64 // poster only: requests posted
	idone   atomic.Uint64
	inline  []byte // InitiatorQueueDepth (rounded up) × InlineDataSize
	imask   uint64 // the inline buffer's request index: position & imask

	// receive queue: a receive's record is the transport's (transport.Receive, with the
	// request context and the regions its SGEs lie in as its PosterData)
	rposted uint64
	rdone   atomic.Uint64
	rr      transport.Receive // the poster's, copied into the queue
}

// opTag is what an initiator request keeps of its verb (transport.PosterData.Tag): its
// NDK operation type and flags.
func opTag(op OpType, flags OpFlags) uint64 { return uint64(op)<<32 | uint64(flags) }

// tagOp splits an opTag.
func tagOp(tag uint64) (OpType, OpFlags) { return OpType(tag >> 32), OpFlags(uint32(tag)) }

// NewQP creates a queue pair in the PD (NdkCreateQp).
// Receives may be posted at once; the other verbs need a connection (Connector).
// Errors: STATUS_INVALID_PARAMETER for a missing CQ or a limit over the adapter's,
// STATUS_INSUFFICIENT_RESOURCES when the adapter holds Options.MaxQPs QPs already.
func (pd *PD) NewQP(cfg QPConfig) (*QP, error) {
	a := pd.a
	if err := a.checkOpen(); err != nil {
		return nil, err
	}
	if cfg.ReceiveCQ == nil || cfg.InitiatorCQ == nil || cfg.ReceiveCQ.a != a || cfg.InitiatorCQ.a != a {
		return nil, errorf(StatusInvalidParameter, "QP needs a receive CQ and an initiator CQ of this adapter")
	}
	if cfg.SRQ != nil { // NdkCreateQpWithSrq: the receive queue is the SRQ
		if cfg.SRQ.a != a || cfg.SRQ.closed.Load() {
			return nil, errorf(StatusInvalidParameter, "SRQ closed or of another adapter")
		}
		cfg.ReceiveQueueDepth, cfg.MaxReceiveSGE = 1, 1 // ignored: no receive slots needed
	}
	if cfg.ReceiveQueueDepth == 0 {
		cfg.ReceiveQueueDepth = 256
	}
	if cfg.InitiatorQueueDepth == 0 {
		cfg.InitiatorQueueDepth = 256
	}
	if cfg.MaxReceiveSGE == 0 {
		cfg.MaxReceiveSGE = transport.MaxSGE
	}
	if cfg.MaxInitiatorSGE == 0 {
		cfg.MaxInitiatorSGE = transport.MaxSGE
	}
	switch {
	case cfg.ReceiveQueueDepth < 1 || cfg.ReceiveQueueDepth > maxQueueDepth,
		cfg.InitiatorQueueDepth < 1 || cfg.InitiatorQueueDepth > maxQueueDepth:
		return nil, errorf(StatusInvalidParameter, "queue depths %d/%d not in [1, %d]", cfg.ReceiveQueueDepth, cfg.InitiatorQueueDepth, maxQueueDepth)
	case cfg.MaxReceiveSGE < 1 || cfg.MaxReceiveSGE > transport.MaxSGE,
		cfg.MaxInitiatorSGE < 1 || cfg.MaxInitiatorSGE > transport.MaxSGE:
		return nil, errorf(StatusInvalidParameter, "SGE limits %d/%d not in [1, %d]", cfg.MaxReceiveSGE, cfg.MaxInitiatorSGE, transport.MaxSGE)
	case cfg.InlineDataSize < 0 || cfg.InlineDataSize > maxInline:
		return nil, errorf(StatusInvalidParameter, "inline size %d over %d", cfg.InlineDataSize, maxInline)
	}
	q := &QP{pd: pd, a: a, cfg: cfg}
	in := pow2(cfg.InitiatorQueueDepth)
	q.imask = uint64(in - 1)
	q.inline = make([]byte, in*cfg.InlineDataSize)
	tc := transport.QPConfig{
		SendDepth: cfg.InitiatorQueueDepth, RecvDepth: cfg.ReceiveQueueDepth,
		PD: uint32(pd.id), IRD: maxReadLimit, ORD: maxReadLimit,
		Sink: (*sink)(q), Context: q, OnDisconnect: q.peerDisconnected,
		RetryTimeout: cfg.RetryTimeout, RNRTimeout: cfg.RNRTimeout, KeepAlive: cfg.KeepAlive,
	}
	if cfg.SRQ != nil {
		tc.SRQ, tc.RecvDepth = cfg.SRQ.ts, 0 // the transport's default bound of receives in progress
	}
	tq, err := a.grp.NewQP(tc)
	if err != nil {
		if errors.Is(err, transport.ErrTooManyQPs) {
			return nil, wrap(StatusInsufficientResources, err)
		}
		return nil, wrap(StatusInvalidParameter, err)
	}
	q.tq = tq
	if err := a.feedCQs(&cfg, tq.Engine().Index()); err != nil {
		_ = tq.Close(context.Background())
		return nil, err
	}
	a.objMu.Lock()
	if a.qps == nil {
		a.qps = make(map[*QP]struct{})
	}
	a.qpsCreated++
	q.seq = a.qpsCreated
	a.qps[q] = struct{}{}
	a.objMu.Unlock()
	cfg.ReceiveCQ.attach(q)
	if cfg.InitiatorCQ != cfg.ReceiveCQ {
		cfg.InitiatorCQ.attach(q)
	}
	return q, nil
}

func pow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// Context returns the QP's context.
func (q *QP) Context() any { return q.cfg.Context }

// Send posts a Send (NdkSend) of the bytes the SGEs gather. Flags: OpSilentSuccess,
// OpReadFence, OpSendAndSolicitEvent, OpInline, OpDefer.
func (q *QP) Send(requestContext any, sgl []SGE, flags OpFlags) error {
	return q.postData(transport.OpSend, OpTypeSend, requestContext, sgl, flags, sendFlags, 0, 0, 0)
}

// SendAndInvalidate posts a Send that also has the peer invalidate its token
// remoteToken when the receive completes (NdkSendAndInvalidate); the peer's receive
// completes as OpTypeReceiveAndInvalidate. Flags as Send.
func (q *QP) SendAndInvalidate(requestContext any, sgl []SGE, flags OpFlags, remoteToken uint32) error {
	return q.postData(transport.OpSendInv, OpTypeSend, requestContext, sgl, flags, sendFlags, 0, 0, remoteToken)
}

// Write posts an RDMA Write (NdkWrite) of the gathered bytes to the peer's memory at
// remoteAddr (host byte order; the consumer may add an offset to the address the peer
// gave) under remoteToken. Flags: OpSilentSuccess, OpReadFence, OpInline, OpDefer.
func (q *QP) Write(requestContext any, sgl []SGE, remoteAddr uint64, remoteToken uint32, flags OpFlags) error {
	return q.postData(transport.OpWrite, OpTypeWrite, requestContext, sgl, flags, writeFlags, remoteAddr, remoteToken, 0)
}

// Read posts an RDMA Read (NdkRead) of the peer's memory at remoteAddr under remoteToken
// into the SGEs (which need local write). Flags: OpSilentSuccess, OpReadFence,
// OpRDMAReadLocalInvalidate (the fast-register MR of the first SGE is invalidated when
// the Read succeeds), OpDefer.
func (q *QP) Read(requestContext any, sgl []SGE, remoteAddr uint64, remoteToken uint32, flags OpFlags) error {
	return q.postData(transport.OpRead, OpTypeRead, requestContext, sgl, flags, readFlags, remoteAddr, remoteToken, 0)
}

// postData posts a Send, SendAndInvalidate, Write or Read.
func (q *QP) postData(kind transport.OpKind, op OpType, requestContext any, sgl []SGE, flags, allowed OpFlags, raddr uint64, rtok, invTok uint32) error {
	wr, err := q.begin(op, requestContext, flags, allowed)
	if err != nil {
		return err
	}
	wr.Kind, wr.Flags, wr.RemoteAddr, wr.RemoteToken, wr.InvToken = kind, wrFlags(flags), raddr, rtok, invTok
	if flags&OpInline != 0 {
		if err := q.copyInline(wr, sgl); err != nil {
			return q.refuse(wr, err)
		}
	} else {
		if len(sgl) > q.cfg.MaxInitiatorSGE {
			return q.refuse(wr, errorf(StatusInvalidParameter, "%d SGEs (max %d)", len(sgl), q.cfg.MaxInitiatorSGE))
		}
		total := uint64(0)
		for i := range sgl {
			total += uint64(len(sgl[i].Buf))
		}
		if total > maxTransfer {
			return q.refuse(wr, errorf(StatusInvalidParameter, "%d bytes (max %d)", total, uint64(maxTransfer)))
		}
		if kind == transport.OpRead && total == 0 {
			return q.refuse(wr, errorf(StatusInvalidParameter, "zero-length Read"))
		}
		if !q.pd.acquire(&wr.Poster.Holds, sgl, kind == transport.OpRead) {
			// An SGE outside its region: the request completes with
			// STATUS_ACCESS_VIOLATION in its turn and the QP fails (NDK local protection
			// error), as hardware reports it.
			*wr = transport.WorkRequest{Kind: transport.OpLocal, Flags: wr.Flags, Poster: wr.Poster,
				LocalStatus: transport.StatusAccessViolation}
		} else {
			wr.NSGE = fillSGL(&wr.SGL, sgl)
		}
	}
	return q.commit(wr)
}

// copyInline copies an inline payload into the request's inline buffer (tokens ignored).
// Reads never get here: OpInline is not among readFlags.
func (q *QP) copyInline(wr *transport.WorkRequest, sgl []SGE) error {
	size := q.cfg.InlineDataSize
	total := 0
	for i := range sgl {
		total += len(sgl[i].Buf)
	}
	if total > size {
		return errorf(StatusInvalidBufferSize, "%d inline bytes (QP inline size %d)", total, size)
	}
	off := int(q.iposted&q.imask) * size
	buf := q.inline[off : off+total : off+total]
	w := 0
	for i := range sgl {
		w += copy(buf[w:], sgl[i].Buf)
	}
	if total > 0 {
		wr.NSGE = 1
		wr.SGL[0] = buf
	}
	return nil
}

// acquire checks the SGEs against their regions in pd and holds them. On failure it holds
// nothing.
func (pd *PD) acquire(holds *[transport.MaxSGE]*memreg.MR, sgl []SGE, write bool) bool {
	for i := range sgl {
		mr, err := pd.a.reg.AcquireLocal(pd.id, sgl[i].Token, sgl[i].Buf, write)
		if err != nil {
			releaseHolds(holds)
			return false
		}
		holds[i] = mr
	}
	return true
}

// fillSGL puts the SGEs' buffers into a request's SGL and returns how many.
func fillSGL(dst *[transport.MaxSGE][]byte, sgl []SGE) uint8 {
	for i := range sgl {
		dst[i] = sgl[i].Buf
	}
	return uint8(len(sgl))
}

func releaseHolds(h *[transport.MaxSGE]*memreg.MR) {
	for i, mr := range h {
		if mr != nil {
			mr.Release()
			h[i] = nil
		}
	}
}

func wrFlags(f OpFlags) transport.WRFlags {
	var w transport.WRFlags
	if f&OpReadFence != 0 {
		w |= transport.WRReadFence
	}
	if f&OpSendAndSolicitEvent != 0 {
		w |= transport.WRSolicited
	}
	if f&OpDefer != 0 {
		w |= transport.WRDefer
	}
	return w
}

// begin checks what every initiator request needs and returns its record, the transport's
// work request reserved for it, with what this side keeps of it.
func (q *QP) begin(op OpType, requestContext any, flags, allowed OpFlags) (*transport.WorkRequest, error) {
	if flags&^allowed != 0 {
		return nil, q.reject(errorf(StatusInvalidParameter, "flags %#x not allowed on %v", uint32(flags&^allowed), op))
	}
	if err := q.usable(); err != nil {
		return nil, q.reject(err)
	}
	switch q.tq.State() {
	case transport.QPConnected, transport.QPError:
	default:
		return nil, q.reject(errorf(StatusConnectionInvalid, "QP is %v", q.tq.State()))
	}
	if q.iposted-q.idone.Load() >= uint64(q.cfg.InitiatorQueueDepth) {
		return nil, q.reject(errorf(StatusInsufficientResources, "initiator queue full (%d)", q.cfg.InitiatorQueueDepth))
	}
	wr := q.tq.Reserve()
	if wr == nil { // cannot happen: the queue holds the depth rounded up
		return nil, q.reject(errorf(StatusInsufficientResources, "initiator queue full (%d)", q.cfg.InitiatorQueueDepth))
	}
	wr.Poster = transport.PosterData{Context: requestContext, Tag: opTag(op, flags)}
	return wr, nil
}

// reject fails a post inline before it took a slot. NDKPI Deferred Processing Scheme:
// requests deferred before it are released first.
func (q *QP) reject(err error) error {
	q.tq.Publish()
	return err
}

// refuse fails a post inline that reserved wr (begin): what it holds and the registry
// change of a Bind or FastRegister are undone, nothing is posted, then as reject.
func (q *QP) refuse(wr *transport.WorkRequest, err error) error {
	releaseHolds(&wr.Poster.Holds)
	q.undo(&wr.Poster)
	*wr = transport.WorkRequest{}
	return q.reject(err)
}

// commit posts the prepared request wr.
func (q *QP) commit(wr *transport.WorkRequest) error {
	if err := q.tq.Commit(wr); err != nil {
		return q.refuse(wr, postError(err))
	}
	q.iposted++
	return nil
}

func (q *QP) usable() error {
	if q.unusable.Load() {
		return errorf(StatusInvalidDeviceState, "the QP's CQ overran")
	}
	return q.a.checkOpen()
}

// postError maps a transport posting error to its status.
func postError(err error) error {
	switch {
	case errors.Is(err, transport.ErrNotConnected):
		return wrap(StatusConnectionInvalid, err)
	case errors.Is(err, transport.ErrQueueFull):
		return wrap(StatusInsufficientResources, err)
	}
	return wrap(StatusInvalidParameter, err)
}

// Bind binds mw to [va, va+length) of mr through this QP (NdkBind). The window's remote
// token is valid when Bind returns; the bind completes as OpTypeBind in posting order.
// Flags: OpSilentSuccess, OpReadFence, OpAllowRemoteRead, OpAllowRemoteWrite, OpDefer.
// Inline errors: STATUS_ACCESS_VIOLATION (range outside mr, remote write on an MR without
// local write, MW and MR of different PDs), STATUS_INVALID_PARAMETER (zero-based address),
// STATUS_DEVICE_BUSY (the window is bound), STATUS_CONNECTION_INVALID.
func (q *QP) Bind(requestContext any, mr *MR, mw *MW, va, length uint64, flags OpFlags) error {
	wr, err := q.begin(OpTypeBind, requestContext, flags, bindFlags)
	if err != nil {
		return err
	}
	if mr == nil || mw == nil || mr.pd.a != q.a || mw.pd.a != q.a {
		return q.refuse(wr, errorf(StatusInvalidParameter, "MR or MW of another adapter"))
	}
	if mw.pd != q.pd {
		return q.refuse(wr, errorf(StatusAccessViolation, "window of another PD than the QP's"))
	}
	if err := q.a.reg.Bind(q.tq.QPN(), mw.w, mr.m, va, length, memreg.OpFlags(flags)); err != nil {
		return q.refuse(wr, memError(err))
	}
	wr.Poster.Object = mw
	mw.mu.Lock()
	mw.va, mw.length = va, length
	mw.mu.Unlock()
	return q.commitLocal(wr, flags, transport.StatusSuccess)
}

// FastRegister maps adapter pages (each memreg.FastRegisterPageSize bytes of the adapter's
// UMEM, in any order) into the fast-register MR mr (NdkFastRegister): length bytes from
// fbo into the first page, at virtual address baseVA (fbo + n*PAGE_SIZE, not 0). The
// region's tokens are valid when it returns. Flags: OpSilentSuccess, OpReadFence,
// OpAllowRemoteRead, OpAllowLocalWrite, OpAllowRemoteWrite, OpRDMAReadSink, OpDefer.
// Inline errors: STATUS_ACCESS_VIOLATION (remote access on an MR initialised without it),
// STATUS_INVALID_PARAMETER (page, FBO, length or address rules), STATUS_DEVICE_BUSY (still
// registered), STATUS_INVALID_DEVICE_REQUEST (a normally registered MR).
func (q *QP) FastRegister(requestContext any, mr *MR, pages [][]byte, fbo int, length, baseVA uint64, flags OpFlags) error {
	wr, err := q.begin(OpTypeFastRegister, requestContext, flags, frFlags)
	if err != nil {
		return err
	}
	if mr == nil || mr.pd != q.pd {
		return q.refuse(wr, errorf(StatusAccessViolation, "MR of another PD than the QP's"))
	}
	if err := q.a.reg.FastRegister(mr.m, pages, fbo, length, baseVA, memreg.OpFlags(flags)); err != nil {
		return q.refuse(wr, memError(err))
	}
	wr.Poster.Object = mr
	mr.mu.Lock()
	mr.fva, mr.flen = baseVA, length
	mr.mu.Unlock()
	return q.commitLocal(wr, flags, transport.StatusSuccess)
}

// Invalidate invalidates a fast-registered MR or a bound MW (NdkInvalidate): no remote
// access through its token succeeds once Invalidate returns. It completes as
// OpTypeInvalidate in posting order. Invalidating a normally registered MR, an unbound
// window or an unregistered MR is a malformed request: it completes with
// STATUS_INVALID_DEVICE_REQUEST and the QP fails (NDSPI). Flags: OpSilentSuccess,
// OpReadFence, OpDefer.
func (q *QP) Invalidate(requestContext any, obj MemoryObject, flags OpFlags) error {
	wr, err := q.begin(OpTypeInvalidate, requestContext, flags, invFlags)
	if err != nil {
		return err
	}
	st := transport.StatusSuccess
	switch o := obj.(type) {
	case *MR:
		if o == nil || o.pd.a != q.a || q.a.reg.InvalidateMR(o.m) != nil {
			st = transport.StatusLocalError
		}
	case *MW:
		if o == nil || o.pd.a != q.a || q.a.reg.InvalidateMW(o.w) != nil {
			st = transport.StatusLocalError
		}
	default:
		return q.refuse(wr, errorf(StatusInvalidParameter, "Invalidate of %T", obj))
	}
	return q.commitLocal(wr, flags, st)
}

// commitLocal posts a local verb as a packet-less request that completes in order.
func (q *QP) commitLocal(wr *transport.WorkRequest, flags OpFlags, st transport.Status) error {
	wr.Kind, wr.Flags, wr.LocalStatus = transport.OpLocal, wrFlags(flags), st
	return q.commit(wr)
}

// undo reverts the registry change of a Bind or FastRegister that did not happen (the
// window or region it changed is the request's Object).
func (q *QP) undo(p *transport.PosterData) {
	switch o := p.Object.(type) {
	case *MW:
		_ = q.a.reg.InvalidateMW(o.w)
	case *MR:
		_ = q.a.reg.InvalidateMR(o.m)
	}
}

// Receive posts a receive buffer (NdkReceive); it may be posted before the QP connects.
// The SGEs need local write. Errors: STATUS_INVALID_PARAMETER (too many SGEs),
// STATUS_ACCESS_VIOLATION (an SGE outside its region), STATUS_INSUFFICIENT_RESOURCES
// (the receive queue is full).
func (q *QP) Receive(requestContext any, sgl []SGE) error {
	if q.cfg.SRQ != nil {
		return errorf(StatusInvalidParameter, "the QP receives from its SRQ: post with SRQ.Receive")
	}
	if err := q.usable(); err != nil {
		return err
	}
	if len(sgl) > q.cfg.MaxReceiveSGE {
		return errorf(StatusInvalidParameter, "%d SGEs (max %d)", len(sgl), q.cfg.MaxReceiveSGE)
	}
	if q.rposted-q.rdone.Load() >= uint64(q.cfg.ReceiveQueueDepth) {
		return errorf(StatusInsufficientResources, "receive queue full (%d)", q.cfg.ReceiveQueueDepth)
	}
	r := &q.rr
	*r = transport.Receive{Poster: transport.PosterData{Context: requestContext}}
	if !q.pd.acquire(&r.Poster.Holds, sgl, true) {
		return errorf(StatusAccessViolation, "receive SGE outside its region or without local write")
	}
	r.NSGE = fillSGL(&r.SGL, sgl)
	if err := q.tq.PostReceive(r); err != nil {
		releaseHolds(&r.Poster.Holds)
		*r = transport.Receive{}
		return postError(err)
	}
	*r = transport.Receive{} // the queue has its copy: drop the references
	q.rposted++
	return nil
}

// Flush cancels every outstanding request and receive (NdkFlush): they complete
// STATUS_CANCELLED, and the QP is in error. Safe concurrently with posting.
func (q *QP) Flush() { q.tq.Flush() }

// sink is a QP as the engine's transport.CompletionSink: its Complete turns the engine's
// completions into results on the QP's CQs (engine goroutine). A type of its own keeps
// the method out of the QP's public API.
type sink QP

// Complete implements transport.CompletionSink.
func (k *sink) Complete(_ *transport.QP, c *transport.Completion) {
	q := (*QP)(k)
	r := ResultEx{Result: Result{Status: ntStatus(c.Status), BytesTransferred: c.Bytes, QPContext: q.cfg.Context}}
	if c.Status != transport.StatusSuccess {
		r.ProviderErrorCode = uint32(c.Status)
	}
	switch c.Op {
	case transport.OpReceive, transport.OpReceiveInv:
		r.Type = OpTypeReceive
		if c.Op == transport.OpReceiveInv {
			r.Type, r.TypeSpecific = OpTypeReceiveAndInvalidate, uint64(c.InvToken)
		}
		p := &c.Receive.Poster // the receive's record, freed once this returns
		releaseHolds(&p.Holds)
		r.RequestContext = p.Context
		if q.cfg.SRQ != nil { // a receive this QP took from its SRQ
			q.cfg.SRQ.completed.Add(1)
		} else {
			q.rdone.Add(1)
		}
		q.cfg.ReceiveCQ.push(&r, c.Solicited)
		return
	}
	p := &c.Request.Poster // the request's one record, freed once this returns
	op, flags := tagOp(p.Tag)
	if c.Status == transport.StatusSuccess {
		if op == OpTypeRead && flags&OpRDMAReadLocalInvalidate != 0 && p.Holds[0] != nil {
			// RDMA_READ_LOCAL_INVALIDATE: the Read's first SGE names a fast-register MR,
			// invalidated now; for other regions the flag has no effect.
			_ = q.a.reg.InvalidateMR(p.Holds[0])
		}
	} else {
		q.undo(p)
	}
	releaseHolds(&p.Holds)
	r.RequestContext, r.Type = p.Context, op
	silent := flags&OpSilentSuccess != 0 && c.Status == transport.StatusSuccess
	q.idone.Add(1)
	if !silent {
		q.cfg.InitiatorCQ.push(&r, false)
	}
}

// ntStatus maps a transport status to the NTSTATUS a Windows provider completes the request
// with (NdkFlush's STATUS_CANCELLED, NetworkDirect's IND2CompletionQueue::GetResults
// statuses; docs/NDK.md, "Completions and CQs").
func ntStatus(s transport.Status) Status {
	switch s {
	case transport.StatusSuccess:
		return StatusSuccess
	case transport.StatusCancelled:
		return StatusCancelled
	case transport.StatusTimeout:
		return StatusIOTimeout
	case transport.StatusAccessViolation:
		return StatusAccessViolation
	case transport.StatusDataOverrun:
		return StatusDataOverrun
	case transport.StatusDataError:
		return StatusDataError
	case transport.StatusRemoteError:
		return StatusRemoteResources
	case transport.StatusLocalError:
		return StatusInvalidDeviceRequest
	}
	return StatusInternalError
}

// peerDisconnected is the engine's disconnect event: the connector's callback runs on the
// event goroutine.
func (q *QP) peerDisconnected(*transport.QP) {
	q.logQPFailed()
	if c := q.conn.Load(); c != nil {
		c.disconnected()
	}
}

// Close closes the QP (NdkCloseObject) in whatever state it is: every outstanding request
// and receive completes (STATUS_CANCELLED unless it completed otherwise first) and releases
// the memory it held, so its regions deregister at once afterwards. A connected QP is not
// disconnected gracefully first (Connector.Disconnect or Close does that): its peer sees
// the connection end through its keepalive or retransmission timeout. ctx bounds the wait
// for the engine (STATUS_PENDING if it ends first).
func (q *QP) Close(ctx context.Context) error {
	if q.a.stopped.Load() {
		return nil // the adapter closed it
	}
	return q.close(ctx)
}

// close is Close, also while the adapter closes.
func (q *QP) close(ctx context.Context) error {
	err := q.tq.Close(ctx)
	q.cfg.ReceiveCQ.detach(q)
	q.cfg.InitiatorCQ.detach(q)
	q.a.objMu.Lock()
	if _, ok := q.a.qps[q]; ok {
		delete(q.a.qps, q)
		q.a.retire(q) // its counters stay in the adapter's totals
	}
	q.a.objMu.Unlock()
	if err != nil {
		return wrap(StatusPending, err)
	}
	return nil
}
