package transport_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// TestPiggybackPingPong: in a Send ping-pong where each side answers (reposting its
// receive and posting its reply) as soon as its receive completes, the acknowledgements
// and credit updates ride on the replies (FlagAck), so a round trip costs two datagrams,
// not five or six; and every byte still arrives exactly.
func TestPiggybackPingPong(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
	const rounds = 200
	abuf, bbuf := make([]byte, 64), make([]byte, 64)
	semRecv(t, qa, 0, abuf)
	semRecv(t, qb, 0, bbuf)
	var sent [2]int
	var piggy int
	count := func(side int) func(int64, *wire.Packet) {
		return func(_ int64, p *wire.Packet) {
			sent[side]++
			if p.Flags&wire.FlagAck != 0 {
				piggy++
			}
		}
	}
	a.tap.onTx, b.tap.onTx = count(0), count(1)
	msg := make([]byte, 64)
	for i := range rounds {
		msg[0] = byte(i)
		semPost(t, qa, semSend(uint64(i), 0, msg))
		w.runUntil(time.Second, "request", func() bool { return len(w.rec.of(qb, transport.OpReceive)) == i+1 })
		if bbuf[0] != byte(i) {
			t.Fatalf("round %d: B received %d", i, bbuf[0])
		}
		semRecv(t, qb, uint64(i+1), bbuf)
		semPost(t, qb, semSend(uint64(i), 0, bytes.Repeat([]byte{byte(i)}, 64)))
		w.runUntil(time.Second, "reply", func() bool { return len(w.rec.of(qa, transport.OpReceive)) == i+1 })
		if abuf[63] != byte(i) {
			t.Fatalf("round %d: A received %d", i, abuf[63])
		}
		semRecv(t, qa, uint64(i+1), abuf)
	}
	w.runUntil(time.Second, "all sends complete", func() bool {
		return len(w.rec.of(qa, transport.OpSend)) == rounds && len(w.rec.of(qb, transport.OpSend)) == rounds
	})
	perRound := float64(sent[0]+sent[1]) / rounds
	t.Logf("%d datagrams for %d round trips (%.2f per round trip), %d carried an ack", sent[0]+sent[1], rounds, perRound, piggy)
	if perRound > 2.2 {
		t.Fatalf("%.2f datagrams per round trip, want about 2 (acks riding on the replies)", perRound)
	}
	if st := qa.Stats(); st.AcksPiggybacked == 0 || qb.Stats().AcksPiggybacked == 0 {
		t.Fatalf("no piggybacked acks: A %d, B %d", st.AcksPiggybacked, qb.Stats().AcksPiggybacked)
	}
}

// TestPiggybackFitsAgreedSize: an ack rides on a data packet only while the datagram stays
// within the payload size both ends agreed on (the smaller link's), not this end's own.
// B's link takes 1000 bytes, A's the network's 1472; A sends full-size Write packets while
// it owes B acks for B's Writes.
func TestPiggybackFitsAgreedSize(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	b.tap.maxPayload = 1000
	qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
	ga, gb := newSemGuarded(1<<16, 1), newSemGuarded(1<<16, 2)
	a.mem.add(0x21, 0, 0x10000, ga.region, semRW)
	b.mem.add(0x11, 0, 0x10000, gb.region, semRW)
	const n = 20
	for i := range n {
		// A's Write is posted as B's arrives: A's next transmit owes B an ack.
		semPost(t, qb, semWrite(uint64(i), 0, 0x10000, 0x21, make([]byte, 64)))
		w.runUntil(time.Second, "B's write at A", func() bool { return qa.Stats().RxPackets > uint64(i) })
		semPost(t, qa, semWrite(uint64(i), 0, 0x10000, 0x11, make([]byte, 4000)))
	}
	w.runUntil(time.Second, "writes both ways", func() bool { return len(w.rec.of(qa)) == n && len(w.rec.of(qb)) == n })
	if a.tap.largest > 1000 {
		t.Fatalf("A sent a %d-byte datagram; the agreed limit is 1000", a.tap.largest)
	}
	if qa.Stats().AcksPiggybacked == 0 {
		t.Fatal("no ack rode on A's data packets: the case was not exercised")
	}
}
