package transport

import (
	"github.com/xdpndk/xdpndk/transport/ack"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// receiver is the reliability handler of the peer's stream, the receiving half of a
// connection: which of the peer's PSNs arrived (ack.ReceiveTracker), when to acknowledge
// them (every AckEvery packets, AckDelay after the oldest unacknowledged one, at once on a
// gap, a duplicate or a probe, one poll round later for AckReq and for new credits), whether
// a data packet of ours carries the acknowledgement (carry), the credits advertised, and
// the NAK waiting to be sent. It decides and fills in acknowledgements; the QP sends them.
//
// Time (now), the engine's poll round (round) and the credit limit the QP advertises
// (credits: the MSN limit of the receives posted, from its responder) are arguments: the
// receiver reads no clock and calls nothing outside itself. Engine goroutine only.
type receiver struct {
	cfg receiverConfig
	ctr *qpCounters

	rx       *ack.ReceiveTracker // nil until the QP connects
	lastCred uint32              // credits last advertised

	pending int   // new packets not yet acknowledged
	first   int64 // arrival of the oldest unacknowledged packet
	now     bool  // acknowledge at the next opportunity (gap, duplicate, probe)
	// soon: acknowledge in the next poll round after soonRound (an AckReq), unless data
	// carries the ack first; credRound: the round new receives were first seen
	// unadvertised (0: none)
	soon      bool
	soonRound uint64
	credRound uint64
	echoTS    uint32 // TS of the packet the next ack answers
	arrival   int64  // its arrival time
	nakSyn    wire.Syndrome
	nakPSN    wire.PSN
	nakSend   bool // a NAK is waiting to be sent
}

// receiverConfig is what a receiver takes of the engine's Config.
type receiverConfig struct {
	ackEvery int   // Config.AckEvery
	ackDelay int64 // Config.AckDelay, ns
	rnrDelay int64 // Config.RNRDelay, ns: the delay an RNR NAK names
	goBackN  bool  // Config.GoBackN: take packets only in order
	// advertise: credit changes are acknowledged (false on an SRQ's QP, whose limit is no
	// promise and changes nothing for the sender)
	advertise bool
}

// newReceiver returns a receiver that is not yet connected.
func newReceiver(cfg receiverConfig, ctr *qpCounters) receiver {
	return receiver{cfg: cfg, ctr: ctr}
}

// connect starts tracking the peer's stream from its initial PSN, with a window of
// packets.
func (r *receiver) connect(peerPSN wire.PSN, window int) {
	r.rx = ack.NewReceiveTracker(peerPSN, window)
}

// Cumulative is the PSN of the peer's stream not yet received: every one before it was.
func (r *receiver) Cumulative() wire.PSN { return r.rx.Cumulative() }

// Arrive classifies a data packet of the peer's stream before it is placed: ack.New (place
// it, then call OnReceived), ack.Duplicate (arrived before: the acknowledgement was
// probably lost and is repeated at once), ack.TooOld or ack.TooNew (outside the window:
// stale or forged, not answered). A go-back-N receiver also refuses as ack.TooNew a new
// packet after a gap, and NAKs the gap (NakSeq).
func (r *receiver) Arrive(psn wire.PSN) ack.Verdict {
	if r.cfg.goBackN && psn != r.rx.Cumulative() && r.rx.Check(psn) == ack.New {
		// A go-back-N receiver (as RoCE NICs are) takes packets only in order: anything
		// after a gap is dropped and the sender learns where to go back to.
		r.Nak(wire.SynNakSeq, r.rx.Cumulative())
		return ack.TooNew
	}
	v := r.rx.Check(psn)
	if v == ack.Duplicate {
		r.now = true // our ack was probably lost: repeat it
	}
	return v
}

// OnReceived records that the new packet psn (timestamp ts, AckReq flag ackReq) was
// placed at now, in poll round round, and schedules its acknowledgement: at once if it
// leaves a gap (loss recovery waits for it), in the next round for AckReq (so that a reply
// the application posts meanwhile carries it), else by AckEvery and AckDelay.
func (r *receiver) OnReceived(now int64, round uint64, psn wire.PSN, ts uint32, ackReq bool) {
	r.rx.Receive(psn)
	if r.pending == 0 {
		r.first = now
	}
	r.pending++
	r.echoTS, r.arrival = ts, now
	switch {
	case r.rx.HasGap():
		r.now = true
	case ackReq && !r.soon:
		r.soon, r.soonRound = true, round
	}
}

// OnProbe answers an Ack with AckReq (the peer's Read probe) at the next opportunity.
func (r *receiver) OnProbe() { r.now = true }

// Nak schedules a negative acknowledgement for psn. Of several RNR refusals before the NAK
// leaves, the earliest is kept: the sender retries from it, and the later packets come
// again anyway.
func (r *receiver) Nak(syn wire.Syndrome, psn wire.PSN) {
	if syn == wire.SynNakRNR && r.nakSend && r.nakSyn == wire.SynNakRNR && r.nakPSN.Less(psn) {
		return
	}
	r.nakSyn, r.nakPSN, r.nakSend = syn, psn, true
}

// NakFailed answers a packet (psn) that arrived at a QP that failed: the peer is told
// (again) with NakRemoteOp, unless a fatal NAK is already what it will hear.
func (r *receiver) NakFailed(psn wire.PSN) {
	r.nakSend = true
	if r.nakSyn == wire.SynAck {
		r.nakSyn, r.nakPSN = wire.SynNakRemoteOp, psn
	}
}

// NakPending reports whether a NAK waits to be sent.
func (r *receiver) NakPending() bool { return r.nakSend }

// AckDue reports whether an acknowledgement (or the pending NAK) should leave now, in poll
// round round, with credits the limit to advertise, and, for when none leaves, when one
// will be due (0: none pending; now: the next round).
func (r *receiver) AckDue(now int64, round uint64, limit uint32) (due bool, next int64) {
	// New receives are advertised, and requested acks sent, one poll round later: data
	// leaving in that round (the application's answer) carries them (piggyback).
	credits := r.creditsDue(limit)
	if credits && r.credRound == 0 {
		r.credRound = round
	}
	soon := (r.soon && round != r.soonRound) || (credits && round != r.credRound)
	due = r.nakSend || r.now || soon || r.pending >= r.cfg.ackEvery ||
		(r.pending > 0 && now-r.first >= r.cfg.ackDelay)
	switch {
	case r.soon || credits:
		next = now // the next round: do not sleep
	case r.pending > 0:
		next = r.first + r.cfg.ackDelay
	}
	return due, next
}

// creditsDue reports whether the credit limit changed since it was last advertised.
func (r *receiver) creditsDue(limit uint32) bool { return r.cfg.advertise && limit != r.lastCred }

// quiet reports whether nothing of the peer's stream waits to be acknowledged (or NAKed)
// and the credit limit, limit, is advertised: no acknowledgement is due now or later.
func (r *receiver) quiet(limit uint32) bool {
	return !r.nakSend && r.pending == 0 && !r.now && !r.soon && !r.creditsDue(limit)
}

// carry returns the acknowledgement a data packet leaving now may carry (piggyback), if one
// is pending and no NAK waits (those go on their own); ok false: none. The packet that
// carries it calls carried.
func (r *receiver) carry(now int64, limit uint32) (a wire.AckExt, ok bool) {
	if r.nakSend || (r.pending == 0 && !r.now && !r.soon && !r.creditsDue(limit)) {
		return wire.AckExt{}, false
	}
	return r.ackExt(now, limit), true
}

// carried records that a data packet carried the acknowledgement carry returned.
func (r *receiver) carried(limit uint32) {
	r.ackSent(limit)
	r.ctr.acksPiggybacked.Add(1)
}

// takeAck returns the acknowledgement of an Ack packet leaving now, with the pending NAK if
// there is one, and counts it sent.
func (r *receiver) takeAck(now int64, limit uint32) wire.AckExt {
	a := r.ackExt(now, limit)
	if r.nakSend {
		a.Syndrome, a.NakPSN = r.nakSyn, r.nakPSN
		if r.nakSyn == wire.SynNakRNR {
			a.Value = uint16(min(r.cfg.rnrDelay/16/1000, 0xffff)) // the field's largest delay
		}
		r.ctr.naksSent.Add(1)
		r.ctr.naksSentBy[int(r.nakSyn)%nakKinds].Add(1)
		r.nakSend = false
		if r.nakSyn == wire.SynNakRNR {
			r.nakSyn = wire.SynAck
		}
	} else {
		r.ctr.acksSent.Add(1)
	}
	r.ackSent(limit)
	return a
}

// ackExt is the acknowledgement of the peer's stream as it stands now: the cumulative
// point, the SACK block after it and the block of the most recent arrivals.
func (r *receiver) ackExt(now int64, limit uint32) wire.AckExt {
	high, highSack := r.rx.High()
	return wire.AckExt{
		AckPSN: r.rx.Cumulative(), SACK: r.rx.SACK(), Credits: limit,
		EchoTS: r.echoTS, Delay: uint32(max(now-r.arrival, 0) / 1000),
		HighPSN: high, HighSACK: highSack,
	}
}

// ackSent records that the current acknowledgement, advertising limit, went out.
func (r *receiver) ackSent(limit uint32) {
	r.pending, r.now, r.soon, r.lastCred, r.credRound = 0, false, false, limit, 0
}
