package transport

import (
	"testing"

	"github.com/xdpndk/xdpndk/transport/ack"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// The tail probe is armed 2*SRTT plus the ack delay ahead, never past the retransmission
// timer, never without an estimate or beyond its budget; once the probed packet is
// acknowledged, an ack that answers an older transmission marks the probe needless.
func TestTailProbe(t *testing.T) {
	const srtt, ackDelay = 30_000, 20_000
	h := ack.NewSentHistory(100, 64)
	var p tailProbe
	send := func(now int64) wire.PSN {
		psn := h.NextPSN()
		h.OnSent(ack.PacketInfo{PSN: psn, Bytes: 1000, SentAt: now, FirstSentAt: now})
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
