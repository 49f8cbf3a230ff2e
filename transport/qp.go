package transport

import (
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"
)

// QPState is where a queue pair is in its life.
type QPState uint32

const (
	// QPIdle: created; receives may be posted, work requests may not.
	QPIdle QPState = iota
	// QPConnecting: a connection is being set up.
	QPConnecting
	// QPConnected: work requests flow.
	QPConnected
	// QPError: a request failed, the QP was flushed, or the peer went away; everything
	// outstanding completes (cancelled), new posts complete cancelled.
	QPError
	// QPDisconnected: the connection was closed gracefully; the QP cannot be reused.
	QPDisconnected
)

var qpStateNames = [...]string{"idle", "connecting", "connected", "error", "disconnected"}

// String names the state.
func (s QPState) String() string {
	if int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", uint32(s))
}

// QPConfig configures Engine.NewQP.
type QPConfig struct {
	// SendDepth and RecvDepth bound the work requests and receives outstanding at once
	// (rounded up to powers of two). Defaults 256 and 256.
	SendDepth, RecvDepth int
	// PD is the protection domain handed to the MemoryResolver.
	PD uint32
	// IRD is how many Reads the peer may have outstanding here (inbound); ORD how many this
	// QP may have outstanding at the peer (outbound). Negotiated down at connect. Default 16.
	IRD, ORD int
	// Sink receives the QP's completions. Required.
	Sink CompletionSink
	// Context is returned by QP.Context (the NDK QP context echoed in results).
	Context any
	// OnDisconnect, if set, is called once, on the engine goroutine, when the connection
	// ends other than by this side's Flush, Disconnect or Close: the peer disconnected, the
	// peer went silent (retransmission timeout, keepalive), or a failure aborted the
	// connection (NDK's disconnect event); QP.Cause says which. It must not block.
	OnDisconnect func(q *QP)
	// SRQ, if set, is a shared receive queue of the same engine the QP takes its receives
	// from (NdkCreateQpWithSrq); PostReceive then fails with ErrSRQReceive, and RecvDepth
	// bounds the SRQ receives the QP holds at once (taken, not yet completed).
	SRQ *SRQ
	// RetryTimeout, RNRTimeout and KeepAlive override the engine's Config values of the
	// same names for this QP; 0 takes the engine's. RetryTimeout and RNRTimeout may not be
	// negative; a negative KeepAlive disables the keepalive for this QP.
	RetryTimeout, RNRTimeout, KeepAlive time.Duration
}

// Errors returned by posting calls. A posting call that returns an error changed nothing.
var (
	// ErrNotConnected: work requests need a connected QP (NDK: STATUS_CONNECTION_INVALID).
	ErrNotConnected = errors.New("queue pair not connected")
	// ErrQueueFull: the queue already holds its depth of requests.
	ErrQueueFull = errors.New("queue full")
	// ErrInvalidRequest: the request is malformed (no SGE or too many, bad kind, zero-length
	// Read).
	ErrInvalidRequest = errors.New("invalid work request")
)

// QP is a reliable connected queue pair on an Engine. Posting (PostSend, PostReceive) may
// be done from any goroutine, one poster per queue at a time (NDKPI Work Request Posting
// Requirements), never blocks and never allocates. Everything else runs on the engine
// goroutine.
type QP struct {
	e    *Engine
	home atomic.Pointer[Engine] // e, for goroutines other than e's (it changes once at most: group.go)
	qpn  uint32
	cfg  QPConfig
	sink CompletionSink

	state atomic.Uint32 // QPState; written by the engine, read by posters
	sendQ *spsc[WorkRequest, *WorkRequest]
	// sendBound is the most work requests outstanding (SendDepth rounded up); sendDone
	// counts those completed, before their completion is delivered (written by the
	// engine): posted - sendDone is what is outstanding
	sendBound uint64
	sendDone  atomic.Uint64
	recvQ     *spsc[Receive, *Receive]
	bellSlot  uint32 // the doorbell slot both posting queues ring (sched.go; engine goroutine)
	srq       *SRQ   // QPConfig.SRQ: where receives come from instead of recvQ
	flushReq  atomic.Bool
	maxORD    int // QPConfig.ORD at creation: the most SetReadLimits may set

	connIndex int // index in the engine's connected list, -1 when not in it
	// held: the peer disconnected and the application has not flushed yet, so posted
	// receives and outstanding requests stay as they are (engine goroutine only)
	held bool
	// indicated: the disconnect event fired (engine goroutine only)
	indicated bool
	// cause: why the QP failed or disconnected (Cause); set once, before the state changes
	cause atomic.Pointer[error]
	ka    keepAlive // the peer's liveness while connected (engine goroutine only)

	// The parts, wired by newQP. None of them holds a pointer to the QP or to another part
	// (the requester and the responder send through conn, the way out): each takes events
	// and returns what should happen, and the QP (qp_flow.go) acts on it.
	conn conn       // the connection: addresses, cookie, MSS, the way out; set up through the QP
	snd  sender     // reliability of our stream: history, RTO, congestion control, loss
	rcv  receiver   // reliability of the peer's stream: what arrived, acks, NAKs, credits
	req  requester  // our work requests
	resp responder  // the peer's requests: receives, Writes, read jobs
	comp Completion // the completion being delivered: Complete gets a pointer to it

	// counters (read by Stats from any goroutine)
	ctr qpCounters
}

// QPN is the QP's number, unique on its engine.
func (q *QP) QPN() uint32 { return q.qpn }

// Context returns QPConfig.Context.
func (q *QP) Context() any { return q.cfg.Context }

// State returns the QP's state.
func (q *QP) State() QPState { return QPState(q.state.Load()) }

// Peer returns the connected peer's address (zero before connect).
func (q *QP) Peer() netip.AddrPort { return q.conn.peer }

// SourcePort is the UDP source port the QP's data packets leave from: random per QP, so that
// RSS and ECMP spread QPs over queues and paths. It does not change.
func (q *QP) SourcePort() uint16 { return q.conn.srcPort }

// PostSend queues a copy of a Send, SendAndInvalidate, Write or Read. It returns
// ErrNotConnected unless the QP is connected or in error (an errored QP takes the request
// and completes it cancelled), ErrInvalidRequest for a malformed request, ErrQueueFull
// when SendDepth requests are outstanding. A failing post changes nothing but releasing
// what was deferred before it (NDKPI Deferred Processing Scheme).
func (q *QP) PostSend(wr *WorkRequest) error {
	if err := checkSend(q.State(), wr); err != nil {
		q.Publish()
		return err
	}
	slot := q.reserve()
	if slot == nil {
		q.Publish()
		return ErrQueueFull
	}
	*slot = *wr
	q.enqueue(wr.Flags)
	return nil
}

// Reserve returns the send queue's next free work request for the poster to fill in place,
// cleared, or nil when SendDepth requests are outstanding. The request is the one record
// of what is posted: the engine works from it where it is until the request completes (it
// is Completion.Request then), and the poster keeps its own data with it (Poster). Nothing
// is posted until Commit; a Reserve without a Commit posts nothing, and the next Reserve
// returns the same request. Same goroutine rules as PostSend.
func (q *QP) Reserve() *WorkRequest {
	if q.sendFull() {
		return nil
	}
	return q.sendQ.reserveZero()
}

// reserve returns the send queue's next slot, not cleared (PostSend overwrites it whole),
// or nil when SendDepth requests are outstanding. Poster side.
func (q *QP) reserve() *WorkRequest {
	if q.sendFull() {
		return nil
	}
	return q.sendQ.reserve()
}

// sendFull reports whether SendDepth requests are outstanding. Poster side.
func (q *QP) sendFull() bool { return q.sendQ.staged-q.sendDone.Load() >= q.sendBound }

// Commit posts the request Reserve returned, as PostSend posts a copy: the same checks
// and errors (ErrQueueFull aside), and a failing Commit posts nothing.
func (q *QP) Commit(wr *WorkRequest) error {
	if err := checkSend(q.State(), wr); err != nil {
		q.Publish()
		return err
	}
	q.enqueue(wr.Flags)
	return nil
}

// enqueue queues the reserved request, deferred with WRDefer, else published with
// everything deferred before it.
func (q *QP) enqueue(flags WRFlags) {
	q.sendQ.commit()
	if flags&WRDefer == 0 && q.sendQ.publish() {
		q.wake()
	}
}

// checkSend validates a work request for PostSend on a QP in state st.
func checkSend(st QPState, wr *WorkRequest) error {
	switch st {
	case QPConnected, QPError:
	default:
		return ErrNotConnected
	}
	if wr.NSGE > MaxSGE {
		return fmt.Errorf("%d SGEs (max %d): %w", wr.NSGE, MaxSGE, ErrInvalidRequest)
	}
	switch wr.Kind {
	case OpSend, OpSendInv, OpWrite:
	case OpRead:
		if wr.Len() == 0 {
			return fmt.Errorf("zero-length read: %w", ErrInvalidRequest)
		}
	case OpLocal:
		if wr.NSGE != 0 {
			return fmt.Errorf("local request with %d SGEs: %w", wr.NSGE, ErrInvalidRequest)
		}
	default:
		return fmt.Errorf("kind %v: %w", wr.Kind, ErrInvalidRequest)
	}
	if uint64(wr.Len()) > MaxMessage {
		return fmt.Errorf("%d bytes (max %d): %w", wr.Len(), MaxMessage, ErrInvalidRequest)
	}
	return nil
}

// SetReadLimits lowers the QP's read limits before it connects (NdkConnect and NdkAccept
// take them): ird Reads the peer may have outstanding here, ord this QP may have outstanding
// at the peer. They may not exceed the QPConfig values the QP was created with (its
// resources are sized by them); the connection negotiates them down further. It fails with
// ErrBadState unless the QP is idle, and with ErrInvalidRequest for values out of range.
func (q *QP) SetReadLimits(ird, ord int) error {
	if q.State() != QPIdle {
		return fmt.Errorf("read limits of a %v qp: %w", q.State(), ErrBadState)
	}
	if ird < 0 || ord < 0 || 2*ird > q.resp.maxJobs || ord > q.maxORD {
		return fmt.Errorf("read limits %d/%d over the qp's %d/%d: %w", ird, ord, q.resp.maxJobs/2, q.maxORD, ErrInvalidRequest)
	}
	q.cfg.IRD, q.cfg.ORD = ird, ord
	return nil
}

// Publish makes every request posted with WRDefer visible to the engine. Same goroutine
// rules as PostSend.
func (q *QP) Publish() {
	if q.sendQ.publish() {
		q.wake()
	}
}

// PostReceive queues a receive buffer. Receives may be posted before the QP connects. A
// QP with an SRQ refuses it (ErrSRQReceive): post to the SRQ.
func (q *QP) PostReceive(r *Receive) error {
	if q.srq != nil {
		return ErrSRQReceive
	}
	if r.NSGE > MaxSGE {
		return fmt.Errorf("%d SGEs (max %d): %w", r.NSGE, MaxSGE, ErrInvalidRequest)
	}
	if !q.recvQ.push(r) {
		return ErrQueueFull
	}
	q.wake()
	return nil
}

// deliver hands the completion a part set in q.comp to the sink. The sink sees a pointer
// into the QP (so the completion does not escape to the heap); it is valid only during the
// call.
func (q *QP) deliver() { q.sink.Complete(q, &q.comp) }

// Flush cancels every outstanding request and receive: they complete StatusCancelled and
// the QP enters the error state. Safe concurrently with posting (NDKPI Work Request Posting
// Requirements), and on a QP that never connected.
func (q *QP) Flush() {
	q.flushReq.Store(true)
	q.post(func(now int64) {
		if q.connIndex < 0 { // not polled: a QP that is idle or still connecting
			q.flushReq.Store(false)
			q.abort(ErrFlushed)
		}
	})
}

// nakKinds bounds the syndromes counted per kind.
const nakKinds = 8

// MaxMessage is the largest message in bytes: the wire's offsets are 32-bit and
// signed-safe. It is typed so that it is a valid constant on 32-bit platforms too, where
// it does not fit an int; lengths are compared with it as uint64.
const MaxMessage uint64 = 1 << 31

// MaxQueueDepth is the deepest send or receive queue of a QP (QPConfig.SendDepth,
// RecvDepth).
const MaxQueueDepth = 1 << 16

// qpCounters are a QP's cumulative counters.
type qpCounters struct {
	txPackets, txBytes, rxPackets, rxBytes, retransmits, timeouts atomic.Uint64
	acksSent, naksSent, naksRecv, dupRecv, rnrNaks                atomic.Uint64
	acksPiggybacked                                               atomic.Uint64
	tailProbes, needlessProbes, spuriousRTOs, rtoRetransmits      atomic.Uint64
	lossRetransmits, rnrRetransmits                               atomic.Uint64
	keepAlives                                                    atomic.Uint64
	naksSentBy, naksRecvBy                                        [nakKinds]atomic.Uint64
	// estimates, published by the engine after each acknowledgement it processes
	srtt, rttvar, rto, cwnd, inflight atomic.Int64
}

// QPStats are a QP's counters and estimates.
type QPStats struct {
	TxPackets, TxBytes uint64 // data packets sent (retransmissions included) and payload bytes
	RxPackets, RxBytes uint64 // new data packets accepted and payload bytes
	Retransmits        uint64 // data packets sent again
	Timeouts           uint64 // retransmission timer expiries
	// RTORetransmits, LossRetransmits, TailProbes and RNRRetransmits count the packets
	// queued for retransmission by each cause: a timer expiry, loss detection (SACK, RACK),
	// a tail loss probe, the end of an RNR wait. A packet queued by two causes before it
	// left again counts under both, one acknowledged meanwhile leaves no more: Retransmits
	// (those sent) is at most their sum.
	RTORetransmits     uint64 // packets a timer expiry queued for retransmission (go-back-N: everything unacknowledged)
	LossRetransmits    uint64 // packets loss detection found lost and queued for retransmission
	RNRRetransmits     uint64 // packets queued again at the end of their RNR wait
	TailProbes         uint64 // tail loss probes sent (RFC 8985 §7): the last packet sent again before the timer
	NeedlessProbes     uint64 // tail probes whose original had arrived (its ack was late, not lost)
	SpuriousTimeouts   uint64 // timer expiries the timestamp echo proved spurious (their window cut undone)
	KeepAlives         uint64 // keepalive probes sent (the peer was silent for a third of KeepAlive)
	AcksSent, NaksSent uint64
	AcksPiggybacked    uint64 // acknowledgements carried by data packets (FlagAck)
	NaksReceived       uint64
	// NaksSentBy and NaksReceivedBy count NAKs by kind, indexed by wire.Syndrome
	// (1 sequence, 2 RNR, 3 access, 4 invalid request, 5 remote operation, 6 invalidate token).
	NaksSentBy, NaksReceivedBy [nakKinds]uint64
	Duplicates                 uint64 // data packets received more than once
	RNRNaks                    uint64 // RNR NAKs received
	SRTT, RTTVar, RTO          int64  // ns
	CongestionWindow           int    // bytes
	InFlight                   int    // bytes
	State                      QPState
}

// Stats returns the QP's counters and its latest published estimates. Safe from any
// goroutine.
func (q *QP) Stats() QPStats {
	s := QPStats{
		TxPackets: q.ctr.txPackets.Load(), TxBytes: q.ctr.txBytes.Load(),
		RxPackets: q.ctr.rxPackets.Load(), RxBytes: q.ctr.rxBytes.Load(),
		Retransmits: q.ctr.retransmits.Load(), Timeouts: q.ctr.timeouts.Load(),
		RTORetransmits: q.ctr.rtoRetransmits.Load(), TailProbes: q.ctr.tailProbes.Load(),
		LossRetransmits: q.ctr.lossRetransmits.Load(), RNRRetransmits: q.ctr.rnrRetransmits.Load(),
		NeedlessProbes:   q.ctr.needlessProbes.Load(),
		SpuriousTimeouts: q.ctr.spuriousRTOs.Load(), KeepAlives: q.ctr.keepAlives.Load(),
		AcksSent: q.ctr.acksSent.Load(), NaksSent: q.ctr.naksSent.Load(), AcksPiggybacked: q.ctr.acksPiggybacked.Load(),
		NaksReceived: q.ctr.naksRecv.Load(), Duplicates: q.ctr.dupRecv.Load(), RNRNaks: q.ctr.rnrNaks.Load(),
		State: q.State(),
	}
	for i := range s.NaksSentBy {
		s.NaksSentBy[i], s.NaksReceivedBy[i] = q.ctr.naksSentBy[i].Load(), q.ctr.naksRecvBy[i].Load()
	}
	s.SRTT, s.RTTVar, s.RTO = q.ctr.srtt.Load(), q.ctr.rttvar.Load(), q.ctr.rto.Load()
	s.CongestionWindow, s.InFlight = int(q.ctr.cwnd.Load()), int(q.ctr.inflight.Load())
	return s
}
