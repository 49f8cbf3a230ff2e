package transport

import (
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/ack"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// The tail probe is armed 2*SRTT plus the ack delay ahead, never past the retransmission
// timer, never without an estimate or beyond its budget; once the probed packet is
// acknowledged, an ack that answers an older transmission marks the probe needless.
func TestTailProbe(t *testing.T) {
	const srtt, ackDelay = 30_000, 20_000
	h := ack.NewSentHistory[owner](100, 64)
	var p tailProbe
	send := func(now int64) wire.PSN {
		psn := h.NextPSN()
		h.OnSent(ack.PacketInfo[owner]{PSN: psn, Bytes: 1000, SentAt: now, FirstSentAt: now})
		return psn
	}
	now := int64(1_000_000)
	psn := send(now)
	p.arm(now, srtt, ackDelay, 0, true)
	if want := now + 2*srtt + ackDelay; p.at != want {
		t.Fatalf("probe at %d, want %d", p.at, want)
	}
	p.probed(p.at, psn)
	if p.needless(h, &wire.AckExt{AckPSN: psn}) {
		t.Fatal("needless before the probed packet was acknowledged")
	}
	h.OnAck(psn.Add(1), 0, p.at+5_000, nil)
	if !p.needless(h, &wire.AckExt{AckPSN: psn.Add(1), EchoTS: uint32(now / 1000)}) {
		t.Fatal("an ack echoing the first transmission: the probe should be needless")
	}
	if p.needless(h, &wire.AckExt{AckPSN: psn.Add(1), EchoTS: uint32(now / 1000)}) {
		t.Fatal("a probe judged twice")
	}
	psn, now = send(now+1_000_000), now+1_000_000
	p.probed(now+100_000, psn)
	h.OnAck(psn.Add(1), 0, now+200_000, nil)
	if p.needless(h, &wire.AckExt{AckPSN: psn.Add(1), EchoTS: uint32((now + 100_000) / 1000)}) {
		t.Fatal("an ack echoing the probe itself: the probe was needed")
	}
	p.count = 0
	if p.arm(now, srtt, ackDelay, now+1000, true); p.at != 0 {
		t.Fatal("armed after the retransmission timer")
	}
	if p.arm(now, 0, ackDelay, 0, true); p.at != 0 {
		t.Fatal("armed without an RTT estimate")
	}
	if p.arm(now, srtt, ackDelay, 0, false); p.at != 0 {
		t.Fatal("armed when not allowed")
	}
	p.count = maxTailProbes
	if p.arm(now, srtt, ackDelay, 0, true); p.at != 0 {
		t.Fatal("armed beyond the probe budget")
	}
}

// A late timer gets the peer one more transmission and timeout instead of a failure, but
// only until the budget has run out twice over.
func TestBudgetSpentLateGraceIsBounded(t *testing.T) {
	const sec = int64(time.Second)
	s := sender{cfg: senderConfig{retryTimeout: 10 * sec}}
	for _, c := range []struct {
		now, at, last int64
		want          bool
	}{
		{now: 9 * sec, at: 9 * sec, last: 9 * sec, want: false},                               // budget not spent
		{now: 11 * sec, at: 11 * sec, last: 10 * sec, want: true},                             // on time, unanswered after the end
		{now: 11 * sec, at: 11 * sec, last: 9 * sec, want: false},                             // the last transmission was before the end
		{now: 15 * sec, at: 11 * sec, last: 10 * sec, want: false},                            // late: one more chance
		{now: 20*sec + 1, at: 19 * sec, last: 10 * sec, want: true},                           // late, but twice the budget: fails
		{now: 25 * sec, at: 25*sec - sec/2 + 1, last: 24 * sec, want: true},                   // on time after the grace
		{now: 12 * sec, at: 12*sec - 100*int64(time.Millisecond), last: 11 * sec, want: true}, // 100 ms late is on time
	} {
		if got := s.budgetSpent(c.now, c.at, 0, c.last); got != c.want {
			t.Errorf("budgetSpent(now %v, at %v, last %v) = %v, want %v", time.Duration(c.now), time.Duration(c.at), time.Duration(c.last), got, c.want)
		}
	}
}
