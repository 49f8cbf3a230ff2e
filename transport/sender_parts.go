package transport

import (
	"github.com/xdpndk/xdpndk/transport/ack"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// retxQueue is the sender's list of packets to send again, in the order they should go:
// first the forced ones (a timeout's, an RNR wait's or a tail probe's packet: one packet
// each, sent regardless of the window; all of a go-back-N episode), then those loss
// detection found, which wait for room in the window.
type retxQueue struct {
	list   []ack.PacketInfo[owner]
	forced int // the first forced entries of list
}

// isForced reports whether entry i goes regardless of the window.
func (q *retxQueue) isForced(i int) bool { return i < q.forced }

// consume drops the first n entries.
func (q *retxQueue) consume(n int) {
	q.list = q.list[:copy(q.list, q.list[n:])]
	q.forced = max(q.forced-n, 0)
}

// setForced replaces the list by l, every entry forced (go-back-N).
func (q *retxQueue) setForced(l []ack.PacketInfo[owner]) { q.list, q.forced = l, len(l) }

// pushForced puts info at the front of the list as forced, once: an entry already there
// for its PSN moves to the front.
func (q *retxQueue) pushForced(info ack.PacketInfo[owner]) {
	for i := range q.list {
		if q.list[i].PSN == info.PSN {
			if i < q.forced {
				return
			}
			q.list = append(q.list[:i], q.list[i+1:]...)
			break
		}
	}
	q.list = append(q.list, ack.PacketInfo[owner]{})
	copy(q.list[1:], q.list)
	q.list[0] = info
	q.forced++
}

// tailProbe is the timer of the tail loss probe (RFC 8985 §7): when the probe timeout
// passes without an acknowledgement, the last packet goes again so that its ack reveals
// any loss before it, instead of waiting for the retransmission timer.
//
// A probe whose acknowledgement answers a packet sent before it (the timestamp echo is
// older) was needless: the original had arrived and its ack was only late, as it is when
// the peer's host answers late. Such probes are counted (QPStats.NeedlessProbes), not
// avoided: lengthening the probe timeout after them (by SRTT, doubling up to the RTO)
// cut the demo's needless probes from 20,115 to 7 in 3 s but left the tails of loss
// episodes to the retransmission timer (its share of retransmissions at 1% loss on the veth
// bed: 0.018 without, 0.32 with, 0.136 with the extension capped at SRTT).
type tailProbe struct {
	at    int64 // when the probe is due; 0 when not armed
	count int   // probes sent since the last acknowledgement of new data
	// the last probe, until its packet is acknowledged
	sent   bool
	psn    wire.PSN
	sentAt int64
}

// maxTailProbes is how many tail loss probes may go before the retransmission timer has
// to fire: two, as Linux's TLP.
const maxTailProbes = 2

// arm sets the probe for now plus the probe timeout, 2*SRTT plus the time the peer may
// hold an acknowledgement (RFC 8985 §7.2), if allowed (something is in flight and the mode
// probes), a probe is left, an estimate exists and it comes before the retransmission
// timer (rtoAt, 0: not armed); otherwise it disarms it.
func (p *tailProbe) arm(now, srtt, ackDelay, rtoAt int64, allowed bool) {
	p.at = 0
	if !allowed || srtt == 0 || p.count >= maxTailProbes {
		return
	}
	if at := now + 2*srtt + ackDelay; rtoAt == 0 || at < rtoAt {
		p.at = at
	}
}

// probed records a probe of psn at now.
func (p *tailProbe) probed(now int64, psn wire.PSN) {
	p.count++
	p.sent, p.psn, p.sentAt = true, psn, now
}

// needless reports, once the probed packet is acknowledged by a (already applied to
// sent), whether the probe was needless: a answers a packet sent before the probe.
func (p *tailProbe) needless(sent *ack.SentHistory[owner], a *wire.AckExt) bool {
	if !p.sent {
		return false
	}
	if _, out := sent.Lookup(p.psn); out {
		return false
	}
	p.sent = false
	return a.EchoTS != 0 && int32(uint32(p.sentAt/1000)-a.EchoTS) > 0
}

// timeoutRun is a run of retransmission timeouts in progress: when its first one fired
// and the packet it sent again. Once that packet is acknowledged the run ends, and the
// timestamp echo says whether the original had arrived: then the timeouts were spurious
// (Eifel detection, RFC 3522, with our echo in place of TCP's) and the controller undoes
// its reaction (RFC 4015).
type timeoutRun struct {
	on    bool
	first int64
	psn   wire.PSN
}

// start records a timeout at now that sent psn again, unless a run is in progress.
func (r *timeoutRun) start(now int64, psn wire.PSN) {
	if !r.on {
		*r = timeoutRun{on: true, first: now, psn: psn}
	}
}

// ended reports, for acknowledgement a (already applied to sent), whether it ends the run
// and proves it spurious: the packet is acknowledged and a answers a packet sent before
// the first timeout.
func (r *timeoutRun) ended(sent *ack.SentHistory[owner], a *wire.AckExt) bool {
	if _, out := sent.Lookup(r.psn); out {
		return false
	}
	r.on = false
	return a.EchoTS != 0 && int32(uint32(r.first/1000)-a.EchoTS) > 0
}
