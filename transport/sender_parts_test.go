package transport

import (
	"testing"

	"github.com/xdpndk/xdpndk/transport/ack"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// A tail probe whose packet is acknowledged by an ack answering an older transmission was
// needless: the probe timeout grows (from SRTT, doubling, up to the limit); a needed one
// shrinks it again.
func TestTailProbeLearnsFromNeedlessProbes(t *testing.T) {
	const srtt, ackDelay, limit = 30_000, 20_000, 200_000
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
	// Needless: the ack of the probed packet echoes its first transmission.
	p.probed(p.at, psn)
	h.OnAck(psn.Add(1), 0, p.at+5_000, nil)
	a := wire.AckExt{AckPSN: psn.Add(1), EchoTS: uint32(now / 1000)}
	if !p.acked(h, &a, srtt, limit) || p.extra != srtt {
		t.Fatalf("needless probe: extra %d, want %d", p.extra, srtt)
	}
	for range 5 { // doubling, capped
		psn, now = send(now+1_000_000), now+1_000_000
		p.count = 0
		p.probed(now+100_000, psn)
		h.OnAck(psn.Add(1), 0, now+200_000, nil)
		a = wire.AckExt{AckPSN: psn.Add(1), EchoTS: uint32(now / 1000)}
		p.acked(h, &a, srtt, limit)
	}
	if p.extra != limit {
		t.Fatalf("after needless probes: extra %d, want the limit %d", p.extra, limit)
	}
	p.count = 0
	p.arm(now, srtt, ackDelay, 0, true)
	if want := now + 2*srtt + ackDelay + limit; p.at != want {
		t.Fatalf("probe at %d, want %d (extended)", p.at, want)
	}
	// Needed: the ack echoes the probe itself.
	psn, now = send(now+1_000_000), now+1_000_000
	p.probed(now+300_000, psn)
	h.OnAck(psn.Add(1), 0, now+400_000, nil)
	a = wire.AckExt{AckPSN: psn.Add(1), EchoTS: uint32((now + 300_000) / 1000)}
	if p.acked(h, &a, srtt, limit) || p.extra != limit/2 {
		t.Fatalf("needed probe: extra %d, want %d", p.extra, limit/2)
	}
	// Not armed past the timer, nor without an estimate, nor beyond the probe budget.
	p.arm(now, srtt, ackDelay, now+1000, true)
	if p.at != 0 {
		t.Fatal("armed after the retransmission timer")
	}
	p.arm(now, 0, ackDelay, 0, true)
	if p.at != 0 {
		t.Fatal("armed without an RTT estimate")
	}
	p.count = maxTailProbes
	p.arm(now, srtt, ackDelay, 0, true)
	if p.at != 0 {
		t.Fatal("armed beyond the probe budget")
	}
}
