package transport

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/ack"
	"github.com/xdpndk/xdpndk/transport/congestion"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// The sender alone, in virtual time: each case is a sequence of events (packets sent,
// acknowledgements, NAKs, timer runs, retransmission rounds) at given times, with what the
// sender must decide at each step, and what it must have reported at the end.

// sndBase is the first PSN of the streams under test: near the wrap, so that the cases
// cross it.
const sndBase = wire.PSN(0xfffffffa)

// sndBytes is the payload of every packet the cases send.
const sndBytes = 1000

// fakeCC is a congestion controller that records what the sender tells it; its window
// and pacing are what the test sets.
type fakeCC struct {
	window             int
	paceUntil          int64
	sent, acked        int
	losses, lostBytes  int
	timeouts, spurious int
}

func (c *fakeCC) Window() int                         { return c.window }
func (c *fakeCC) OnSent(_ int64, b int)               { c.sent += b }
func (c *fakeCC) OnAck(_ int64, a int, _ int64)       { c.acked += a }
func (c *fakeCC) OnLoss(_ int64, l int)               { c.losses++; c.lostBytes += l }
func (c *fakeCC) OnTimeout(int64)                     { c.timeouts++ }
func (c *fakeCC) OnSpuriousTimeout(int64)             { c.spurious++ }
func (c *fakeCC) NextSendTime(now int64, _ int) int64 { return max(now, c.paceUntil) }
func (c *fakeCC) Stats() congestion.Stats             { return congestion.Stats{Window: c.window} }

// sndFailure is a failure the sender decided, with the sentinel its cause wraps.
type sndFailure struct {
	at    time.Duration
	st    Status
	seq   int64
	cause error
}

// causeKind returns the sentinel err wraps, of those the sender reports.
func causeKind(err error) error {
	for _, k := range []error{ErrRetryTimeout, ErrRNRTimeout, ErrRemoteNak} {
		if errors.Is(err, k) {
			return k
		}
	}
	return err
}

// fakeOwner plays the QP around the sender: it records the failures the sender returns,
// answers ProbeRead with the Read it awaits (read), and sends the probes the sender asks
// for unless the link is full.
type fakeOwner struct {
	read   int64 // the Read awaited (-1: none)
	full   bool  // the link takes nothing: probes do not go
	probes []time.Duration
	fails  []sndFailure
}

// record notes the failure f decided at now, if it is one.
func (o *fakeOwner) record(now int64, f failure) {
	if f.failed() {
		o.fails = append(o.fails, sndFailure{time.Duration(now), f.st, f.seq, causeKind(f.cause)})
	}
}

// sndHarness is a connected sender with its fakes.
type sndHarness struct {
	t   *testing.T
	s   sender
	own fakeOwner
	cc  fakeCC
	ctr qpCounters
}

func defaultSenderConfig() senderConfig {
	return senderConfig{retryTimeout: int64(10 * time.Second), rnrTimeout: int64(10 * time.Second),
		rnrDelay: int64(100 * time.Microsecond), window: 64}
}

func newSndHarness(t *testing.T, cfg senderConfig, rto ack.RTOConfig) *sndHarness {
	h := &sndHarness{t: t, own: fakeOwner{read: -1}, cc: fakeCC{window: 1 << 30}}
	h.s = newSender(cfg, rto, &h.ctr)
	h.s.connect(sndBase, &h.cc)
	return h
}

// offsets returns the PSN offsets from sndBase of packets.
func offsets(l []ack.PacketInfo[owner]) []uint32 {
	var o []uint32
	for _, p := range l {
		o = append(o, p.PSN.Sub(sndBase))
	}
	return o
}

// sop is an event of a sender case.
type sop int

const (
	sSend     sop = iota // n new packets of request req
	sAck                 // an Ack: every PSN before offset cum, and the SACK bits
	sNak                 // a NAK of syn for the packet at offset cum, with value
	sTimer               // OnTimer; fired is what it must report
	sResend              // a transmit round with a free link: want is what must go, in order
	sHeard               // PeerHeard with Reads outstanding
	sDeadline            // Deadline must be want[0] µs (0: nothing armed)
	sRNRCount            // the request req must have had n RNR NAKs
)

type sev struct {
	at    time.Duration
	op    sop
	req   uint32
	n     int
	cum   uint32
	sack  uint64
	syn   wire.Syndrome
	val   uint16
	fired bool
	want  []uint32
}

func send(at time.Duration, req uint32, n int) sev { return sev{at: at, op: sSend, req: req, n: n} }
func ackTo(at time.Duration, cum uint32, sack uint64) sev {
	return sev{at: at, op: sAck, cum: cum, sack: sack}
}
func nakAt(at time.Duration, syn wire.Syndrome, off uint32, val uint16) sev {
	return sev{at: at, op: sNak, syn: syn, cum: off, val: val}
}
func timerAt(at time.Duration, fired bool) sev { return sev{at: at, op: sTimer, fired: fired} }
func resend(at time.Duration, want ...uint32) sev {
	return sev{at: at, op: sResend, want: want}
}
func heard(at time.Duration) sev { return sev{at: at, op: sHeard} }
func deadlineIs(d time.Duration) sev {
	return sev{op: sDeadline, want: []uint32{uint32(d / time.Microsecond)}}
}
func rnrCount(req uint32, n int) sev               { return sev{op: sRNRCount, req: req, n: n} }
func ms(f float64) time.Duration                   { return time.Duration(f * float64(time.Millisecond)) }
func us(f float64) time.Duration                   { return time.Duration(f * float64(time.Microsecond)) }
func fails(f ...sndFailure) []sndFailure           { return f }
func durations(d ...time.Duration) []time.Duration { return d }

// run plays events and checks each step's decision.
func (h *sndHarness) run(events []sev) {
	t := h.t
	t.Helper()
	for i, ev := range events {
		now := int64(ev.at)
		switch ev.op {
		case sSend:
			for k := 0; k < ev.n; k++ {
				if _, ok := h.s.OnSent(now, sndBytes, wrOwner(ev.req, uint32(k*sndBytes))); !ok {
					t.Fatalf("event %d: send refused", i)
				}
			}
			h.s.ArmTimer(now)
		case sAck:
			a := wire.AckExt{AckPSN: sndBase.Add(ev.cum), SACK: ev.sack}
			h.s.OnAck(now, &a)
			h.s.DetectLoss(now, &a)
		case sNak:
			a := wire.AckExt{AckPSN: sndBase, Syndrome: ev.syn, NakPSN: sndBase.Add(ev.cum), Value: ev.val}
			h.s.OnAck(now, &a)
			if f := h.s.OnNak(now, &a); f.failed() {
				h.own.record(now, f)
			} else {
				h.s.DetectLoss(now, &a)
			}
		case sTimer:
			out := h.s.OnTimer(now)
			if out.readProbe {
				f, probe := h.s.ProbeRead(now, out.at, h.own.read)
				if probe && !h.own.full {
					h.own.probes = append(h.own.probes, time.Duration(now))
					h.s.ReadProbed(now)
				}
				out.fail = f
			}
			h.own.record(now, out.fail)
			if out.fired != ev.fired {
				t.Fatalf("event %d: timer at %v fired %v, want %v", i, ev.at, out.fired, ev.fired)
			}
		case sResend:
			due := h.s.Retransmissions(now)
			got := offsets(due)
			for _, info := range due {
				h.s.OnRetransmitted(now, info)
			}
			h.s.ConsumeRetransmissions(len(due))
			if len(due) > 0 {
				h.s.ArmTimer(now)
			}
			if !slices.Equal(got, ev.want) {
				t.Fatalf("event %d: at %v retransmitted %v, want %v", i, ev.at, got, ev.want)
			}
		case sHeard:
			h.s.PeerHeard(now, true)
		case sDeadline:
			want := time.Duration(ev.want[0]) * time.Microsecond
			if got := time.Duration(h.s.Deadline()); got != want {
				t.Fatalf("event %d: deadline %v, want %v", i, got, want)
			}
		case sRNRCount:
			got := 0
			if h.s.rnrCount > 0 && h.s.rnrReq.idx == ev.req {
				got = h.s.rnrCount
			}
			if got != ev.n {
				t.Fatalf("event %d: request %d had %d RNR NAKs, want %d", i, ev.req, got, ev.n)
			}
		}
	}
}

func TestSenderDecisions(t *testing.T) {
	rto := ack.RTOConfig{Initial: time.Millisecond, Min: 200 * time.Microsecond, Max: 500 * time.Millisecond}
	cases := []struct {
		name     string
		cfg      func(*senderConfig, *ack.RTOConfig)
		setup    func(*fakeOwner)
		events   []sev
		fails    []sndFailure
		probes   []time.Duration
		timeouts uint64 // retransmission timer expiries counted
		losses   int    // loss events the controller saw
		ccRTOs   int    // timeouts the controller saw
	}{{
		name: "retransmits exactly the SACK-reported losses",
		events: []sev{
			send(0, 1, 10),
			// 0, 1 acknowledged; 2 missing, 3 arrived, 4 missing, 5-9 arrived
			ackTo(us(20), 2, 0b1111101),
			resend(us(20), 2, 4),
			resend(us(21)),
			ackTo(us(40), 10, 0),
			resend(us(40)),
			deadlineIs(0),
		},
		losses: 1,
	}, {
		name: "never declares lost what a later ack may still report",
		events: []sev{
			send(0, 1, 4),
			// 1 and 2 arrived: 0 is within the reordering threshold of 2, not yet lost
			ackTo(us(20), 0, 0b11),
			resend(us(20)),
			// 3 arrives too: 0 is three behind the highest acknowledged
			ackTo(us(22), 0, 0b111),
			resend(us(22), 0),
		},
		losses: 1,
	}, {
		name: "declares lost by time once the reordering window has passed",
		events: []sev{
			send(us(8), 1, 2),
			send(us(10), 2, 1),
			// the last one arrived after 20 µs: SRTT 20 µs, window 5 µs, so the two before
			// it are lost at 8+20+5 = 33 µs
			ackTo(us(30), 0, 0b10),
			resend(us(30)),
			deadlineIs(us(33)),
			timerAt(us(32), false),
			timerAt(us(33), true),
			resend(us(33), 0, 1),
		},
		losses: 1,
	}, {
		name: "retransmits the oldest on timeout and backs off",
		events: []sev{
			send(0, 1, 1),
			deadlineIs(ms(1)),
			timerAt(us(999), false),
			timerAt(ms(1), true),
			resend(ms(1), 0),
			deadlineIs(ms(3)),
			timerAt(ms(3), true),
			resend(ms(3), 0),
			deadlineIs(ms(7)),
			// progress resets the backoff (a retransmission gives no RTT sample); with
			// nothing left the timer stops
			ackTo(ms(7.5), 1, 0),
			deadlineIs(0),
			send(ms(8), 2, 1),
			deadlineIs(ms(9)),
		},
		timeouts: 2, ccRTOs: 2,
	}, {
		name: "gives up once the packet is RetryTimeout old and a transmission after that went unanswered",
		cfg: func(c *senderConfig, r *ack.RTOConfig) {
			c.retryTimeout = int64(20 * time.Millisecond)
			*r = ack.RTOConfig{Initial: time.Millisecond, Min: time.Millisecond, Max: 8 * time.Millisecond}
		},
		events: []sev{
			send(0, 5, 1),
			timerAt(ms(1), true), resend(ms(1), 0), deadlineIs(ms(3)),
			timerAt(ms(3), true), resend(ms(3), 0), deadlineIs(ms(7)),
			timerAt(ms(7), true), resend(ms(7), 0), deadlineIs(ms(15)),
			// the backed-off timeout (8 ms, the cap) would pass the budget's end: the timer
			// is set for the end, when the packet goes once more
			timerAt(ms(15), true), resend(ms(15), 0), deadlineIs(ms(20)),
			timerAt(ms(19.999), false),
			timerAt(ms(20), true), resend(ms(20), 0), deadlineIs(ms(28)),
			// that one, made when the budget had run out, is unanswered for a timeout
			timerAt(ms(28), true),
		},
		fails:    fails(sndFailure{ms(28), StatusTimeout, 5, ErrRetryTimeout}),
		timeouts: 6, ccRTOs: 5,
	}, {
		name: "a timer that runs late retransmits before it gives up",
		cfg: func(c *senderConfig, r *ack.RTOConfig) {
			c.retryTimeout = int64(10 * time.Millisecond)
			*r = ack.RTOConfig{Initial: time.Millisecond, Min: time.Millisecond, Max: time.Millisecond}
		},
		events: []sev{
			send(0, 5, 1),
			deadlineIs(ms(1)),
			// this engine did not run for half a second: the budget ran out meanwhile, but
			// the peer never saw a retransmission; it gets one and a timeout to answer
			timerAt(ms(500), true), resend(ms(500), 0), deadlineIs(ms(501)),
			timerAt(ms(501), true),
		},
		fails:    fails(sndFailure{ms(501), StatusTimeout, 5, ErrRetryTimeout}),
		timeouts: 2, ccRTOs: 1,
	}, {
		name: "an RNR NAK starts the packet's retransmission budget again",
		cfg: func(c *senderConfig, r *ack.RTOConfig) {
			c.retryTimeout = int64(5 * time.Millisecond)
			*r = ack.RTOConfig{Initial: time.Millisecond, Min: time.Millisecond, Max: 2 * time.Millisecond}
		},
		events: []sev{
			send(0, 5, 1),
			timerAt(ms(1), true), resend(ms(1), 0),
			timerAt(ms(3), true), resend(ms(3), 0),
			// refused for want of a receive at 4 ms: an answer; the wait ends at 4.1 ms
			nakAt(ms(4), wire.SynNakRNR, 0, 0),
			resend(us(4100), 0),
			// the retry's NAK is lost: the budget runs from the NAK, to 9 ms
			timerAt(us(6100), true), resend(us(6100), 0),
			timerAt(us(8100), true), resend(us(8100), 0), deadlineIs(ms(9)),
			timerAt(ms(9), true), resend(ms(9), 0),
			timerAt(ms(11), true),
		},
		fails:    fails(sndFailure{ms(11), StatusTimeout, 5, ErrRetryTimeout}),
		timeouts: 6, ccRTOs: 5,
	}, {
		name: "waits out an RNR NAK, backs off per request, fails once the first NAK is RNRTimeout old",
		cfg:  func(c *senderConfig, _ *ack.RTOConfig) { c.rnrTimeout = int64(300 * time.Microsecond) },
		events: []sev{
			send(0, 1, 1),
			nakAt(us(10), wire.SynNakRNR, 0, 0),
			rnrCount(1, 1),
			deadlineIs(us(110)), // RNRDelay after the NAK
			resend(us(109)),
			resend(us(110), 0),
			nakAt(us(130), wire.SynNakRNR, 0, 0),
			rnrCount(1, 2),
			// twice the delay for the request's second refusal would end at 330 µs: the
			// wait ends with the budget, 300 µs after the first NAK
			deadlineIs(us(310)),
			resend(us(309)),
			resend(us(310), 0),
			nakAt(us(320), wire.SynNakRNR, 0, 0),
		},
		fails: fails(sndFailure{us(320), StatusTimeout, 1, ErrRNRTimeout}),
	}, {
		name: "the retry sent when the RNR budget ran out, unanswered, fails by the timer",
		cfg: func(c *senderConfig, r *ack.RTOConfig) {
			c.rnrTimeout = int64(300 * time.Microsecond)
			*r = ack.RTOConfig{Initial: time.Millisecond, Min: time.Millisecond, Max: time.Millisecond}
		},
		events: []sev{
			send(0, 1, 1),
			nakAt(us(10), wire.SynNakRNR, 0, 0),
			resend(us(110), 0),
			nakAt(us(130), wire.SynNakRNR, 0, 0),
			resend(us(310), 0), // the budget's end: the last retry
			// its NAK is lost; the timer, one RTO after the wait, finds the budget spent
			deadlineIs(us(1310)),
			timerAt(us(1310), true),
		},
		fails:    fails(sndFailure{us(1310), StatusTimeout, 1, ErrRNRTimeout}),
		timeouts: 1,
	}, {
		name: "takes the RNR delay the NAK names, and holds the retransmission timer",
		events: []sev{
			send(0, 1, 1),
			nakAt(us(10), wire.SynNakRNR, 0, 10), // 10 × 16 µs
			deadlineIs(us(170)),
			resend(us(170), 0),
			// the retransmission timer waits for the end of the RNR wait plus an RTO
			timerAt(ms(1), false),
			deadlineIs(ms(1.17)),
		},
	}, {
		name: "one RNR wait at a time, for the earliest refused packet",
		events: []sev{
			send(0, 1, 1),
			send(0, 2, 1),
			nakAt(us(10), wire.SynNakRNR, 0, 0),
			nakAt(us(11), wire.SynNakRNR, 1, 0), // follows from the first refusal: ignored
			nakAt(us(12), wire.SynNakRNR, 0, 0), // an early copy's NAK: already waiting
			rnrCount(1, 1), rnrCount(2, 0),
			resend(us(110), 0),
		},
	}, {
		name: "probes an outstanding Read whose response stopped, and fails it when unanswered",
		cfg: func(c *senderConfig, r *ack.RTOConfig) {
			c.retryTimeout = int64(10 * time.Millisecond)
			*r = ack.RTOConfig{Initial: time.Millisecond, Min: time.Millisecond, Max: 4 * time.Millisecond}
		},
		setup: func(o *fakeOwner) { o.read = 4 },
		events: []sev{
			heard(0),
			deadlineIs(ms(1)),
			timerAt(ms(1), true), deadlineIs(ms(3)),
			timerAt(ms(3), true), deadlineIs(ms(7)),
			timerAt(ms(7), true), deadlineIs(ms(11)),
			// the probes' budget (from the first, at 1 ms) ends at 11 ms: one more probe,
			// unanswered for a timeout
			timerAt(ms(11), true), deadlineIs(ms(15)),
			timerAt(ms(15), true),
		},
		probes:   durations(ms(1), ms(3), ms(7), ms(11)),
		fails:    fails(sndFailure{ms(15), StatusTimeout, 4, ErrRetryTimeout}),
		timeouts: 5,
	}, {
		name: "a probe the link cannot take does not count",
		cfg: func(c *senderConfig, r *ack.RTOConfig) {
			c.retryTimeout = int64(2 * time.Millisecond)
			*r = ack.RTOConfig{Initial: time.Millisecond, Min: time.Millisecond, Max: 2 * time.Millisecond}
		},
		setup: func(o *fakeOwner) { o.read, o.full = 4, true },
		events: []sev{
			heard(0),
			timerAt(ms(1), true), timerAt(ms(3), true), timerAt(ms(5), true),
		},
		timeouts: 3,
	}, {
		name: "the peer heard from starts the probes over",
		cfg: func(c *senderConfig, r *ack.RTOConfig) {
			c.retryTimeout = int64(2 * time.Millisecond)
			*r = ack.RTOConfig{Initial: time.Millisecond, Min: time.Millisecond, Max: 2 * time.Millisecond}
		},
		setup: func(o *fakeOwner) { o.read = 4 },
		events: []sev{
			heard(0),
			timerAt(ms(1), true),
			heard(ms(2)), // response bytes arrived: no failure at 3 ms
			deadlineIs(ms(4)),
			timerAt(ms(4), true),
			timerAt(ms(6), true), // the budget from 4 ms ends: one more probe
			timerAt(ms(8), true), // unanswered for a timeout: give up
		},
		probes:   durations(ms(1), ms(4), ms(6)),
		fails:    fails(sndFailure{ms(8), StatusTimeout, 4, ErrRetryTimeout}),
		timeouts: 4,
	}, {
		name: "NAKs that end the connection",
		events: []sev{
			send(0, 3, 2),
			nakAt(us(10), wire.SynNakSeq, 0, 0), // advisory
			nakAt(us(20), wire.SynNakAccess, 1, 0),
			nakAt(us(30), wire.SynNakInvalid, 0, 0),
			nakAt(us(40), wire.SynNakRemoteOp, 0, 0),
			nakAt(us(50), wire.SynNakInvalToken, 0, 0),
			nakAt(us(60), wire.SynNakAccess, 5, 0), // names no packet in flight
		},
		fails: fails(
			sndFailure{us(20), StatusAccessViolation, 3, ErrRemoteNak},
			sndFailure{us(30), StatusDataError, 3, ErrRemoteNak},
			sndFailure{us(40), StatusRemoteError, 3, ErrRemoteNak},
			sndFailure{us(50), StatusRemoteError, 3, ErrRemoteNak},
			sndFailure{us(60), StatusAccessViolation, -1, ErrRemoteNak},
		),
	}, {
		name: "go-back-N resends everything once per loss episode",
		cfg:  func(c *senderConfig, _ *ack.RTOConfig) { c.goBackN = true },
		events: []sev{
			send(0, 1, 6),
			ackTo(us(20), 1, 0b10), // 1 missing, 3 arrived
			resend(us(20), 1, 2, 4, 5),
			ackTo(us(21), 1, 0b110), // the same episode
			resend(us(21)),
			ackTo(us(40), 6, 0),
			send(us(40), 2, 3),
			ackTo(us(60), 7, 0b1), // a new episode: 7 missing
			resend(us(60), 7),
		},
		losses: 2,
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, r := defaultSenderConfig(), rto
			if c.cfg != nil {
				c.cfg(&cfg, &r)
			}
			h := newSndHarness(t, cfg, r)
			if c.setup != nil {
				c.setup(&h.own)
			}
			h.run(c.events)
			if !slices.Equal(h.own.fails, c.fails) {
				t.Errorf("failures %v, want %v", h.own.fails, c.fails)
			}
			if !slices.Equal(h.own.probes, c.probes) {
				t.Errorf("probes at %v, want %v", h.own.probes, c.probes)
			}
			if got := h.ctr.timeouts.Load(); got != c.timeouts {
				t.Errorf("%d timeouts counted, want %d", got, c.timeouts)
			}
			if h.cc.losses != c.losses || h.cc.timeouts != c.ccRTOs {
				t.Errorf("controller saw %d loss events and %d timeouts, want %d and %d", h.cc.losses, h.cc.timeouts, c.losses, c.ccRTOs)
			}
		})
	}
}

// TestSenderCanSend: a new packet leaves while fewer than Window packets are in flight,
// its payload fits the congestion window (or nothing is in flight), and pacing allows.
func TestSenderCanSend(t *testing.T) {
	cfg := defaultSenderConfig()
	cfg.window = 4
	cases := []struct {
		name     string
		inflight int   // packets of sndBytes in flight
		cwnd     int   // the controller's window
		pace     int64 // the controller's next send time
		size     int
		ok       bool
		at       int64
	}{
		{"empty", 0, 1 << 20, 0, sndBytes, true, 0},
		{"nothing in flight: one packet whatever the window", 0, 1, 0, sndBytes, true, 0},
		{"payload fits the window", 2, 2500, 0, 500, true, 0},
		{"payload does not fit", 2, 2500, 0, 501, false, 0},
		{"window of packets full", 4, 1 << 20, 0, 1, false, 0},
		{"paced", 1, 1 << 20, 5000, sndBytes, false, 5000},
		{"pacing passed", 1, 1 << 20, 100, sndBytes, true, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newSndHarness(t, cfg, ack.DefaultRTOConfig())
			for k := range c.inflight {
				h.s.OnSent(0, sndBytes, wrOwner(1, uint32(k*sndBytes)))
			}
			h.cc.window, h.cc.paceUntil = c.cwnd, c.pace
			ok, at := h.s.CanSend(100, c.size)
			if ok != c.ok || at != c.at {
				t.Fatalf("CanSend = %v, %d; want %v, %d", ok, at, c.ok, c.at)
			}
		})
	}
}

// TestSenderRTTFromEcho: the RTT sample is the timestamp echo less the peer's hold time,
// not the send time of what the ack happens to cover (which a lost ack inflates).
func TestSenderRTTFromEcho(t *testing.T) {
	h := newSndHarness(t, defaultSenderConfig(), ack.DefaultRTOConfig())
	h.s.OnSent(0, sndBytes, wrOwner(1, 0))
	now := int64(5 * time.Millisecond) // a lost ack: this one comes much later
	// the packet that triggered it left 30 µs ago, and the peer held the ack 10 µs
	a := wire.AckExt{AckPSN: sndBase.Add(1), EchoTS: uint32((now - 30_000) / 1000), Delay: 10}
	h.s.OnAck(now, &a)
	if got := h.s.rto.SRTT(); got != 20_000 {
		t.Fatalf("SRTT %d ns, want 20000", got)
	}
	if h.cc.acked != sndBytes {
		t.Fatalf("controller saw %d bytes acknowledged, want %d", h.cc.acked, sndBytes)
	}
}

// TestSenderAllocs: the sender's per-packet work allocates nothing.
func TestSenderAllocs(t *testing.T) {
	h := newSndHarness(t, defaultSenderConfig(), ack.DefaultRTOConfig())
	now := int64(0)
	allocs := testing.AllocsPerRun(1000, func() {
		now += 1000
		if ok, _ := h.s.CanSend(now, sndBytes); !ok {
			t.Fatal("window closed")
		}
		psn, _ := h.s.OnSent(now, sndBytes, wrOwner(1, 0))
		h.s.ArmTimer(now)
		a := wire.AckExt{AckPSN: psn.Add(1), EchoTS: uint32(now / 1000)}
		h.s.OnAck(now+500, &a)
		h.s.DetectLoss(now+500, &a)
		h.s.OnTimer(now + 500)
		h.s.ConsumeRetransmissions(len(h.s.Retransmissions(now + 500)))
		h.s.publishStats()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per packet", allocs)
	}
}
