package transport

import (
	"math"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/ack"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// The receiver alone, in virtual time and poll rounds: each case is a sequence of
// arrivals and checks of what the receiver decides (an acknowledgement due now, or when),
// and what the acknowledgement it writes says.

// rcvBase is the peer's first PSN in these cases: near the wrap, so that they cross it.
const rcvBase = wire.PSN(0xfffffffc)

// rcvHarness is a receiver and the credit limit its QP would advertise (cr, set by the
// test).
type rcvHarness struct {
	r   receiver
	cr  uint32
	ctr qpCounters
}

// piggyback lets data packet p (n payload bytes, room for extension and payload) carry the
// acknowledgement due, as the QP and its conn do.
func (h *rcvHarness) piggyback(now int64, p *wire.Packet, n, room int) {
	if a, ok := h.r.carry(now, h.cr); ok && ackFits(p.Opcode, n, room) {
		p.Flags |= wire.FlagAck
		p.Ack = a
		h.r.carried(h.cr)
	}
}

// writeAck fills Ack packet p as the QP does.
func (h *rcvHarness) writeAck(now int64, p *wire.Packet) { p.Ack = h.r.takeAck(now, h.cr) }

func defaultReceiverConfig() receiverConfig {
	return receiverConfig{ackEvery: 4, ackDelay: int64(20 * time.Microsecond),
		rnrDelay: int64(100 * time.Microsecond), advertise: true}
}

func newRcvHarness(cfg receiverConfig) *rcvHarness {
	h := &rcvHarness{}
	h.r = newReceiver(cfg, &h.ctr)
	h.r.connect(rcvBase, 1024)
	return h
}

// rop is an event of a receiver case.
type rop int

const (
	rData   rop = iota // data packet at offset psn arrives and is placed (ackReq: with AckReq)
	rDup               // data packet at offset psn arrives again: it must be a duplicate
	rProbe             // an Ack with AckReq
	rCredit            // the credit limit becomes n
	rNak               // Nak(syn, psn)
	rFailed            // a packet psn arrives at a failed QP
	rDue               // AckDue must say due, and next (µs; -1: now)
	rSend              // the ack is sent: its AckPSN (offset), SACK, syndrome, NAK PSN and Value
)

type rev struct {
	at     time.Duration
	round  uint64
	op     rop
	psn    uint32
	ackReq bool
	n      uint32
	syn    wire.Syndrome
	due    bool
	next   time.Duration // rDue: when the next is due; -1: now (the next round)
	sack   uint64        // rSend
	value  uint16        // rSend
}

const nextRound = -1

func data(at time.Duration, round uint64, psn uint32, ackReq bool) rev {
	return rev{at: at, round: round, op: rData, psn: psn, ackReq: ackReq}
}
func dup(at time.Duration, round uint64, psn uint32) rev {
	return rev{at: at, round: round, op: rDup, psn: psn}
}
func due(at time.Duration, round uint64, d bool, next time.Duration) rev {
	return rev{at: at, round: round, op: rDue, due: d, next: next}
}
func sendAck(at time.Duration, cum uint32, sack uint64, syn wire.Syndrome, nakPSN uint32, value uint16) rev {
	return rev{at: at, op: rSend, psn: cum, sack: sack, syn: syn, n: nakPSN, value: value}
}

func (h *rcvHarness) run(t *testing.T, events []rev) {
	t.Helper()
	for i, ev := range events {
		now := int64(ev.at)
		switch ev.op {
		case rData:
			if v := h.r.Arrive(rcvBase.Add(ev.psn)); v != ack.New {
				t.Fatalf("event %d: packet %d is %v, want new", i, ev.psn, v)
			}
			h.r.OnReceived(now, ev.round, rcvBase.Add(ev.psn), uint32(now/1000), ev.ackReq)
		case rDup:
			if v := h.r.Arrive(rcvBase.Add(ev.psn)); v != ack.Duplicate {
				t.Fatalf("event %d: packet %d is %v, want duplicate", i, ev.psn, v)
			}
		case rProbe:
			h.r.OnProbe()
		case rCredit:
			h.cr = uint32(ev.n)
		case rNak:
			h.r.Nak(ev.syn, rcvBase.Add(ev.psn))
		case rFailed:
			h.r.NakFailed(rcvBase.Add(ev.psn))
		case rDue:
			d, next := h.r.AckDue(now, ev.round, h.cr)
			want := ev.next
			if want == nextRound {
				want = ev.at
			}
			if d != ev.due || time.Duration(next) != want {
				t.Fatalf("event %d: at %v round %d AckDue = %v, %v; want %v, %v", i, ev.at, ev.round, d, time.Duration(next), ev.due, want)
			}
		case rSend:
			var p wire.Packet
			p.Opcode = wire.OpAck
			h.writeAck(now, &p)
			a := p.Ack
			if a.AckPSN != rcvBase.Add(ev.psn) || a.SACK != ev.sack || a.Syndrome != ev.syn || a.Value != ev.value ||
				(ev.syn != wire.SynAck && a.NakPSN != rcvBase.Add(ev.n)) {
				t.Fatalf("event %d: ack %+v; want AckPSN +%d SACK %#x syndrome %d NAK PSN +%d value %d",
					i, a, ev.psn, ev.sack, ev.syn, ev.n, ev.value)
			}
		}
	}
}

func TestReceiverDecisions(t *testing.T) {
	cases := []struct {
		name   string
		cfg    func(*receiverConfig)
		events []rev
		acks   uint64 // acknowledgements counted sent
		naks   uint64 // NAKs counted sent
	}{{
		name: "acknowledges every AckEvery packets",
		events: []rev{
			data(0, 1, 0, false), due(0, 1, false, us(20)),
			data(us(1), 2, 1, false), data(us(2), 3, 2, false), due(us(2), 3, false, us(20)),
			data(us(3), 4, 3, false), due(us(3), 4, true, us(20)),
			sendAck(us(3), 4, 0, wire.SynAck, 0, 0),
			due(us(3), 4, false, 0),
		},
		acks: 1,
	}, {
		name: "acknowledges AckDelay after the oldest unacknowledged packet",
		events: []rev{
			data(us(10), 1, 0, false),
			data(us(15), 2, 1, false),
			due(us(29), 3, false, us(30)),
			due(us(30), 4, true, us(30)),
			sendAck(us(30), 2, 0, wire.SynAck, 0, 0),
		},
		acks: 1,
	}, {
		name: "acknowledges a gap at once, with the SACK of what arrived beyond it",
		events: []rev{
			data(0, 1, 0, false),
			data(us(1), 1, 2, false),
			due(us(1), 1, true, us(20)),
			sendAck(us(1), 1, 0b1, wire.SynAck, 0, 0),
			data(us(2), 2, 1, false), // fills the gap: no hurry
			due(us(2), 2, false, us(22)),
		},
		acks: 1,
	}, {
		name: "acknowledges AckReq one poll round later",
		events: []rev{
			data(0, 7, 0, true),
			due(0, 7, false, nextRound), // the next round: do not sleep
			due(us(1), 8, true, nextRound),
		},
	}, {
		name: "an AckReq acknowledged meanwhile is not acknowledged again",
		events: []rev{
			data(0, 7, 0, true),
			sendAck(0, 1, 0, wire.SynAck, 0, 0), // went in the same round (with a NAK, say)
			due(us(1), 8, false, 0),
		},
		acks: 1,
	}, {
		name: "repeats the acknowledgement for a duplicate, at once",
		events: []rev{
			data(0, 1, 0, false),
			sendAck(0, 1, 0, wire.SynAck, 0, 0),
			dup(us(5), 2, 0),
			due(us(5), 2, true, 0),
		},
		acks: 1,
	}, {
		name: "answers a probe at once",
		events: []rev{
			{op: rProbe},
			due(0, 1, true, 0),
		},
	}, {
		name: "advertises new credits one poll round later",
		events: []rev{
			{op: rCredit, n: 4},
			due(0, 3, false, nextRound),
			due(0, 4, true, nextRound),
			sendAck(0, 0, 0, wire.SynAck, 0, 0),
			due(0, 5, false, 0),
		},
		acks: 1,
	}, {
		name: "an SRQ's QP does not acknowledge for credits",
		cfg:  func(c *receiverConfig) { c.advertise = false },
		events: []rev{
			{op: rCredit, n: 4},
			due(0, 3, false, 0),
			due(0, 4, false, 0),
		},
	}, {
		name: "keeps the earliest RNR refusal, sends it with the configured delay",
		events: []rev{
			{op: rNak, syn: wire.SynNakRNR, psn: 5},
			{op: rNak, syn: wire.SynNakRNR, psn: 7},
			due(0, 1, true, 0),
			sendAck(0, 0, 0, wire.SynNakRNR, 5, 100/16),
			due(0, 1, false, 0),
			// after an RNR NAK, a failure is reported as such
			{op: rFailed, psn: 9},
			sendAck(0, 0, 0, wire.SynNakRemoteOp, 9, 0),
		},
		naks: 2,
	}, {
		name: "a failed QP repeats the NAK that failed it",
		events: []rev{
			{op: rNak, syn: wire.SynNakAccess, psn: 2},
			sendAck(0, 0, 0, wire.SynNakAccess, 2, 0),
			{op: rFailed, psn: 3},
			sendAck(0, 0, 0, wire.SynNakAccess, 2, 0),
		},
		naks: 2,
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := defaultReceiverConfig()
			if c.cfg != nil {
				c.cfg(&cfg)
			}
			h := newRcvHarness(cfg)
			h.run(t, c.events)
			if got := h.ctr.acksSent.Load(); got != c.acks {
				t.Errorf("%d acks counted, want %d", got, c.acks)
			}
			if got := h.ctr.naksSent.Load(); got != c.naks {
				t.Errorf("%d NAKs counted, want %d", got, c.naks)
			}
		})
	}
}

// TestReceiverGoBackN: a go-back-N receiver refuses a packet after a gap and NAKs the gap.
func TestReceiverGoBackN(t *testing.T) {
	cfg := defaultReceiverConfig()
	cfg.goBackN = true
	h := newRcvHarness(cfg)
	h.run(t, []rev{data(0, 1, 0, false)})
	if v := h.r.Arrive(rcvBase.Add(2)); v != ack.TooNew {
		t.Fatalf("a packet after a gap is %v, want refused (too new)", v)
	}
	h.run(t, []rev{sendAck(0, 1, 0, wire.SynNakSeq, 1, 0), data(us(1), 2, 1, false)})
}

// TestReceiverPiggyback: a data packet carries the pending acknowledgement only if one is
// pending, no NAK waits, and its datagram has room for its wire.AckExtLen bytes.
func TestReceiverPiggyback(t *testing.T) {
	const mss = 1000
	room := mss + maxDataExt
	cases := []struct {
		name    string
		op      wire.Opcode
		payload int
		pending bool // a data packet arrived unacknowledged
		credit  bool // the credit limit changed unadvertised
		nak     bool // a NAK waits
		carried bool
	}{
		{"small Write, ack pending", wire.OpWrite, 64, true, false, false, true},
		{"small Send, credits to advertise", wire.OpSendOnly, 64, false, true, false, true},
		{"read request, ack pending", wire.OpReadRequest, 0, true, false, false, true},
		{"full-size Write", wire.OpWrite, mss, true, false, false, false},
		{"largest that fits", wire.OpWrite, room - wire.RDMAExtLen - wire.AckExtLen, true, false, false, true},
		{"one byte more", wire.OpWrite, room - wire.RDMAExtLen - wire.AckExtLen + 1, true, false, false, false},
		{"nothing pending", wire.OpWrite, 64, false, false, false, false},
		{"a NAK waits: it goes on its own", wire.OpWrite, 64, true, false, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newRcvHarness(defaultReceiverConfig())
			if c.pending {
				h.run(t, []rev{data(us(1), 1, 0, false)})
			}
			if c.credit {
				h.cr = 8
			}
			if c.nak {
				h.r.Nak(wire.SynNakRNR, rcvBase)
			}
			p := wire.Packet{Header: wire.Header{Opcode: c.op}}
			h.piggyback(us64(11), &p, c.payload, room)
			if got := p.Flags&wire.FlagAck != 0; got != c.carried {
				t.Fatalf("carried %v, want %v", got, c.carried)
			}
			if !c.carried {
				return
			}
			// EchoTS is the TS of the packet that arrived at 1 µs (µs), Delay how long it
			// waited for this one at 11 µs
			want := wire.AckExt{AckPSN: rcvBase, Credits: h.cr, Delay: 11}
			if c.pending {
				want.AckPSN, want.EchoTS, want.Delay = rcvBase.Add(1), 1, 10
			}
			want.HighPSN = want.AckPSN // nothing arrived beyond the cumulative point
			if p.Ack != want {
				t.Fatalf("carried %+v, want %+v", p.Ack, want)
			}
			if d, _ := h.r.AckDue(us64(11), 5, h.cr); d {
				t.Fatal("an acknowledgement is still due after a packet carried it")
			}
			if h.ctr.acksPiggybacked.Load() != 1 {
				t.Fatalf("%d piggybacked acks counted, want 1", h.ctr.acksPiggybacked.Load())
			}
		})
	}
}

func us64(f float64) int64 { return int64(us(f)) }

// TestReceiverAllocs: the receiver's per-packet work allocates nothing.
func TestReceiverAllocs(t *testing.T) {
	h := newRcvHarness(defaultReceiverConfig())
	psn := rcvBase
	now, round := int64(0), uint64(0)
	var p wire.Packet
	allocs := testing.AllocsPerRun(1000, func() {
		now += 1000
		round++
		if h.r.Arrive(psn) != ack.New {
			t.Fatal("not new")
		}
		h.r.OnReceived(now, round, psn, uint32(now/1000), true)
		psn = psn.Add(1)
		p = wire.Packet{Header: wire.Header{Opcode: wire.OpWrite}}
		h.piggyback(now, &p, 64, 1020)
		if d, _ := h.r.AckDue(now, round, h.cr); d {
			h.writeAck(now, &p)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per packet", allocs)
	}
}

// TestReceiverAckHighBlock: every acknowledgement carries the block of the most recent
// arrivals, which reports what arrived far beyond the first hole (the first SACK block
// covers only the 64 PSNs after it).
func TestReceiverAckHighBlock(t *testing.T) {
	h := newRcvHarness(defaultReceiverConfig())
	for psn := uint32(1); psn <= 200; psn++ { // 0 is lost
		h.run(t, []rev{data(us(float64(psn)), 1, psn, false)})
	}
	var p wire.Packet
	p.Opcode = wire.OpAck
	h.writeAck(us64(300), &p)
	if a := p.Ack; a.AckPSN != rcvBase || a.SACK != math.MaxUint64 || a.HighPSN != rcvBase.Add(201) || a.HighSACK != math.MaxUint64 {
		t.Fatalf("ack %+v: want AckPSN +0, SACK all ones, HighPSN +201, HighSACK all ones", a)
	}
	h.run(t, []rev{data(us(301), 1, 205, false)}) // 201..204 lost too
	p = wire.Packet{Header: wire.Header{Opcode: wire.OpWrite}}
	h.piggyback(us64(302), &p, 8, 1000)
	// Bit 0: 205; bits 1-4: 204..201, missing; bits 5-63: 200..142.
	const want = 1 | ^uint64(0)>>5<<5
	if a := p.Ack; p.Flags&wire.FlagAck == 0 || a.HighPSN != rcvBase.Add(206) || a.HighSACK != want {
		t.Fatalf("piggybacked ack %+v (flags %v): want HighPSN +206, HighSACK %#x", a, p.Flags, uint64(want))
	}
}
