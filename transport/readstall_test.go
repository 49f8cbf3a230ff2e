package transport_test

// Reads under the disturbances of a noisy VM, in virtual time: an engine that is not polled
// for milliseconds at random moments (a stalled vCPU), a poll that runs with a clock reading
// taken before the stall, acks that arrive late or out of order, spurious retransmission
// timeouts at the initiator.

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/racebuild"
	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/ack"
	"github.com/xdpndk/xdpndk/transport/simlink"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// stallWorld drives a semWorld's two engines like ndkbench's inline loops on a noisy VM:
// each engine is polled whenever something is due, except while its host is stalled.
type stallWorld struct {
	w     *semWorld
	nodes [2]*semNode
	until [2]int64 // stalled until (0: running)
	from  [2]int64 // when the stall began
	stale [2]bool  // the first poll after the stall uses the clock reading from before it

	rng       *rand.Rand
	nextStall int64         // when the next random stall begins (0: none)
	meanGap   time.Duration // mean time between random stalls
	minStall  time.Duration
	maxStall  time.Duration
	staleNow  bool   // stalls may also hit between reading the clock and polling
	who       int    // -1: either side at random; 0 or 1: only that side
	stalls    int    // stalls injected
	after     func() // run once after the next step's polls
}

func newStallWorld(t testing.TB, w *semWorld, a, b *semNode, seed uint64) *stallWorld {
	t.Helper()
	return &stallWorld{w: w, nodes: [2]*semNode{a, b}, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		minStall: time.Millisecond, maxStall: 5 * time.Millisecond, who: -1}
}

// stall stops polling side i from now for d.
func (s *stallWorld) stall(i int, d time.Duration) {
	now := s.w.clock.Now()
	s.until[i], s.from[i] = now+int64(d), now
	s.stale[i] = s.staleNow && s.rng.IntN(2) == 0
	s.stalls++
}

// step polls every running engine once; if none did anything it moves the clock to the
// next thing due (an engine timer, a delivery, the end of a stall, the next stall).
func (s *stallWorld) step() bool {
	w := s.w
	now := w.clock.Now()
	if s.meanGap > 0 {
		if s.nextStall == 0 {
			s.nextStall = now + int64(s.rng.ExpFloat64()*float64(s.meanGap))
		}
		if now >= s.nextStall {
			i := s.who
			if i < 0 {
				i = s.rng.IntN(2)
			}
			if s.until[i] <= now {
				s.stall(i, s.minStall+time.Duration(s.rng.Int64N(int64(s.maxStall-s.minStall)+1)))
			}
			s.nextStall = now + int64(s.rng.ExpFloat64()*float64(s.meanGap))
		}
	}
	busy := false
	next := int64(0)
	consider := func(t int64) {
		if t > now && (next == 0 || t < next) {
			next = t
		}
	}
	for i, nd := range s.nodes {
		if now < s.until[i] {
			consider(s.until[i])
			continue
		}
		pollAt := now
		if s.stale[i] {
			pollAt, s.stale[i] = s.from[i], false // the clock was read before the stall
			busy = true
		}
		n, b := nd.eng.Poll(pollAt)
		busy = busy || b
		consider(n)
	}
	if f := s.after; f != nil {
		s.after = nil
		f()
		return true
	}
	if busy {
		return true
	}
	if d, ok := w.net.NextDelivery(); ok {
		// A datagram already due waits for a stalled host; while one does, the network's
		// next delivery is hidden behind it, so time moves in steps of a microsecond.
		if d <= now {
			d = now + int64(time.Microsecond)
		}
		consider(d)
	}
	if s.nextStall > 0 {
		consider(s.nextStall)
	}
	if next == 0 {
		return false
	}
	w.clock.Set(next)
	return true
}

// runUntil steps until cond holds or limit of virtual time passed; false on the limit.
func (s *stallWorld) runUntil(limit time.Duration, cond func() bool) bool {
	end := s.w.clock.Now() + int64(limit)
	for steps := 0; !cond(); steps++ {
		if s.w.clock.Now() > end || steps > semMaxSteps {
			return false
		}
		if !s.step() && !cond() {
			return false
		}
	}
	return true
}

// stallPair is a connected pair with zero-copy transmit (as package ndk runs AF_XDP links)
// and a 64 KiB region at B that A reads.
func stallPair(t *testing.T, seed uint64) (s *stallWorld, qa, qb *transport.QP) {
	t.Helper()
	w, a, b := newSemPair(t, func(c *transport.Config) { c.ZeroCopyTx = true })
	qa, qb = w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
	region := make([]byte, 1<<16)
	pattern(region, 3)
	b.mem.add(0x61, 0, 0x10000, region, semRW)
	return newStallWorld(t, w, a, b, seed), qa, qb
}

// serialReads posts n Reads of 64 bytes one at a time on qa, each polled to its completion
// (ndkbench's Read latency phase), calling before(i) ahead of posting Read i. It fails the
// test unless every Read completes successfully with the right bytes and both QPs stay
// connected.
func (s *stallWorld) serialReads(t *testing.T, qa, qb *transport.QP, n int, before func(i int)) {
	t.Helper()
	w := s.w
	region := make([]byte, 1<<16)
	pattern(region, 3)
	dst := make([]byte, 64)
	base := w.rec.count(qa)
	for i := 0; i < n; i++ {
		if before != nil {
			before(i)
		}
		off := uint64(i%1000) * 64
		semPost(t, qa, semRead(uint64(i), 0, 0x10000+off, 0x61, dst))
		if !s.runUntil(5*time.Second, func() bool { return w.rec.count(qa) > base+i || qa.State() != transport.QPConnected }) {
			t.Fatalf("read %d: no completion (A %v, B %v)", i, qa.State(), qb.State())
		}
		if qa.State() != transport.QPConnected || qb.State() != transport.QPConnected {
			c := w.rec.of(qa)
			t.Fatalf("read %d: A %v, B %v, A's last completion %s\nA %+v\nB %+v", i, qa.State(), qb.State(),
				statusOf(c[len(c)-1:]), qa.Stats(), qb.Stats())
		}
		if c := w.rec.of(qa)[base+i]; c.Status != semOK || c.Context != uint64(i) || !bytes.Equal(dst, region[off:off+64]) {
			t.Fatalf("read %d: %s", i, statusOf([]transport.Completion{c}))
		}
	}
}

// TestReadStallPeerSilentPastRetryLimit is the regression test of the ndkbench failure:
// in the Read latency phase, A's host did not run for a while right after a Read request
// left. B answered it and kept retransmitting its unacknowledged response; its SRTT was
// microseconds, so its RTO sat at the 200 µs floor and the retry limit (7) was spent after
// 0.2+0.4+...+25.6 = 51 ms, when B failed its QP (StatusTimeout) without a packet lost.
// A woke up, completed the Read from the response waiting in its ring, posted the next one,
// and B, in error, answered it with a NakRemoteOp NAK: A's Read failed StatusRemoteError
// (NDK STATUS_REMOTE_RESOURCES), both QPs in error, B having sent that one NAK.
//
// A QP now gives up on a packet only once it has been unacknowledged for RetryTimeout (10 s
// by default), so stalls shorter than that cost retransmissions, never the connection.
func TestReadStallPeerSilentPastRetryLimit(t *testing.T) {
	for _, stall := range []time.Duration{60 * time.Millisecond, 300 * time.Millisecond, 490 * time.Millisecond} {
		t.Run(stall.String(), func(t *testing.T) {
			s, qa, qb := stallPair(t, 1)
			s.serialReads(t, qa, qb, 200, func(i int) {
				if i == 100 {
					// A stops right after its request leaves: B's response waits for A's ack.
					s.stepThen(func() { s.stall(0, stall) })
				}
			})
			st := qb.Stats()
			if st.Retransmits <= 7 {
				t.Fatalf("B retransmitted %d times: the stall did not take B past the old retry limit of 7", st.Retransmits)
			}
			t.Logf("A stalled %v: B retransmitted its response %d times and kept the connection", stall, st.Retransmits)
		})
	}
}

// stepThen arranges for f to run after the next step (the Read just posted leaves in it).
func (s *stallWorld) stepThen(f func()) { s.after = f }

// A peer that stays silent past RetryTimeout still fails the QP, in the order the bench saw:
// B gives up (StatusTimeout) no sooner than RetryTimeout after its response first left and
// within one backed-off timeout (RTO.Max) after that, and A's next Read is refused with a
// NAK (StatusRemoteError).
func TestReadStallPeerGoneGivesUp(t *testing.T) {
	s, qa, qb := stallPair(t, 2)
	var firstTx int64
	s.nodes[1].tap.onTx = func(now int64, p *wire.Packet) {
		if p.Opcode == wire.OpReadResponse && p.Flags&wire.FlagRetransmit == 0 {
			firstTx = now
		}
	}
	s.serialReads(t, qa, qb, 50, nil)
	semPost(t, qa, semRead(50, 0, 0x10000, 0x61, make([]byte, 64)))
	s.stepThen(func() { s.stall(0, 12*time.Second) })
	if !s.runUntil(11*time.Second, func() bool { return qb.State() != transport.QPConnected }) {
		t.Fatal("B never gave up on a peer silent for seconds")
	}
	gaveUp := time.Duration(s.w.clock.Now() - firstTx)
	budget, maxRTO := transport.DefaultRetryTimeout, ack.DefaultRTOConfig().Max
	if gaveUp < budget || gaveUp > budget+maxRTO+time.Millisecond {
		t.Fatalf("B gave up %v after its response first left, want within [RetryTimeout, RetryTimeout + RTO.Max] = [%v, %v]", gaveUp, budget, budget+maxRTO)
	}
	semIs(t, "B's cause", qb.Cause(), transport.ErrRetryTimeout)
	// A wakes up, completes Read 50 from the response in its ring and posts the next one.
	if !s.runUntil(5*time.Second, func() bool { return s.w.rec.count(qa) > 50 }) {
		t.Fatal("Read 50 did not complete after A woke up")
	}
	semPost(t, qa, semRead(51, 0, 0x10000, 0x61, make([]byte, 64)))
	if !s.runUntil(time.Second, func() bool { return qa.State() != transport.QPConnected }) {
		t.Fatal("A did not learn of B's failure")
	}
	got := s.w.rec.of(qa)
	semExpect(t, "A", got[len(got)-2:], semWant{50, semOpRead, semOK}, semWant{51, semOpRead, transport.StatusRemoteError})
	if n := qb.Stats().NaksSent; n != 1 {
		t.Fatalf("B sent %d NAKs, want 1", n)
	}
}

// noisySeeds is how many seeds the noisy stall tests run: one under the race detector,
// where thousands of Reads in virtual time on one goroutine run ten times slower and have
// nothing shared to race on; the plain pass runs all three.
func noisySeeds() uint64 {
	if racebuild.Enabled {
		return 1
	}
	return 3
}

// Thousands of serial Reads through the disturbances of a noisy VM, on both sides at random
// moments: hosts that do not run for 1 to 5 ms, a first poll after a stall that runs with
// the clock reading from before it, jitter that reorders acks behind requests, and
// (through the other side's stalls) spurious retransmission timeouts at the initiator. Now
// and then A stops for 60 to 450 ms, past the old retry limit at B's RTO floor. Every Read
// completes with the right bytes and neither QP fails.
func TestReadStallSerialNoisy(t *testing.T) {
	for seed := uint64(1); seed <= noisySeeds(); seed++ {
		s, qa, qb := stallPair(t, seed)
		if err := s.w.net.SetDefault(simlink.Impairments{Latency: 5 * time.Microsecond, Jitter: time.Duration(seed) * 10 * time.Microsecond}); err != nil {
			t.Fatal(err)
		}
		s.meanGap, s.staleNow = time.Millisecond, true
		long := 0
		s.serialReads(t, qa, qb, 6000, func(i int) {
			if i%1500 == 1000 {
				s.stepThen(func() { s.stall(0, 60*time.Millisecond+time.Duration(s.rng.Int64N(int64(390*time.Millisecond)))) })
				long++
			}
		})
		sa, sb := qa.Stats(), qb.Stats()
		if sa.Retransmits == 0 || sb.Retransmits == 0 || s.stalls < 100 {
			t.Fatalf("seed %d: the disturbances did not bite: %d stalls, retransmissions A %d B %d", seed, s.stalls, sa.Retransmits, sb.Retransmits)
		}
		t.Logf("seed %d: %d stalls (%d long); A: %d retransmissions, %d duplicates; B: %d retransmissions, %d duplicates",
			seed, s.stalls, long, sa.Retransmits, sa.Duplicates, sb.Retransmits, sb.Duplicates)
	}
}

// Pipelined Reads (up to ORD outstanding, 64 bytes and 6 KiB, as in ndkbench's rate phase)
// through the same disturbances: every Read completes, in order, with the right bytes.
func TestReadStallPipelinedNoisy(t *testing.T) {
	for seed := uint64(1); seed <= noisySeeds(); seed++ {
		s, qa, qb := stallPair(t, seed)
		if err := s.w.net.SetDefault(simlink.Impairments{Latency: 5 * time.Microsecond, Jitter: 20 * time.Microsecond}); err != nil {
			t.Fatal(err)
		}
		s.meanGap, s.staleNow = time.Millisecond, true
		region := make([]byte, 1<<16)
		pattern(region, 3)
		const total, depth = 4000, 32
		bufs := make([][]byte, total)
		offs := make([]uint64, total)
		posted := 0
		for done := 0; done < total; {
			for posted < total && posted-done < depth {
				size := 64
				if posted%3 == 0 {
					size = 6 << 10
				}
				offs[posted] = uint64(s.rng.IntN(len(region) - size))
				bufs[posted] = make([]byte, size)
				semPost(t, qa, semRead(uint64(posted), 0, 0x10000+offs[posted], 0x61, bufs[posted]))
				if posted == 2000 {
					s.stepThen(func() { s.stall(0, 200*time.Millisecond) })
				}
				posted++
			}
			if !s.runUntil(5*time.Second, func() bool { return s.w.rec.count(qa) > done || qa.State() != transport.QPConnected }) {
				t.Fatalf("seed %d: Read %d did not complete", seed, done)
			}
			if qa.State() != transport.QPConnected || qb.State() != transport.QPConnected {
				t.Fatalf("seed %d: A %v, B %v after %d Reads\nA %+v\nB %+v", seed, qa.State(), qb.State(), done, qa.Stats(), qb.Stats())
			}
			done = s.w.rec.count(qa)
		}
		for i, c := range s.w.rec.of(qa) {
			if c.Status != semOK || c.Context != uint64(i) || !bytes.Equal(bufs[i], region[offs[i]:offs[i]+uint64(len(bufs[i]))]) {
				t.Fatalf("seed %d: completion %d: %s", seed, i, statusOf([]transport.Completion{c}))
			}
		}
		t.Logf("seed %d: %d stalls; retransmissions A %d B %d", seed, s.stalls, qa.Stats().Retransmits, qb.Stats().Retransmits)
	}
}

// RTT samples across a stall and the RTO that follows them. A sample is the echo of the
// original request's timestamp less the peer's hold time, so a spurious retransmission
// neither shortens it (Karn) nor is it counted twice, but a stall of the responder's host is
// part of it (the hold is measured from when the engine took the packet, not from when it
// reached the host). The RTO such a sample gives, and its backoff during the stall, stay at
// or below RTO.Max; the inflation is gone after a few dozen ordinary round trips.
func TestReadStallRTOBounded(t *testing.T) {
	s, qa, qb := stallPair(t, 7)
	maxRTO := int64(ack.DefaultRTOConfig().Max)
	var last int64
	maxGap := int64(0)
	s.nodes[0].tap.onTx = func(now int64, p *wire.Packet) {
		if p.Opcode == wire.OpReadRequest {
			if p.Flags&wire.FlagRetransmit != 0 {
				maxGap = max(maxGap, now-last)
			}
			last = now
		}
	}
	s.serialReads(t, qa, qb, 100, nil)
	before := qa.Stats()
	// B stops for 450 ms right after A's request left: A retransmits it with backoff.
	s.serialReads(t, qa, qb, 1, func(int) { s.stepThen(func() { s.stall(1, 450*time.Millisecond) }) })
	after := qa.Stats()
	if n := after.Retransmits - before.Retransmits; n < 8 {
		t.Fatalf("%d retransmissions during B's stall, want more than the old retry limit of 7", n)
	}
	if maxGap > maxRTO || after.RTO > maxRTO {
		t.Fatalf("retransmissions %v apart, RTO %v after the stall: above RTO.Max %v", time.Duration(maxGap), time.Duration(after.RTO), time.Duration(maxRTO))
	}
	if after.SRTT < int64(40*time.Millisecond) {
		t.Fatalf("SRTT %v after a 450 ms response: the sample was not the original's", time.Duration(after.SRTT))
	}
	s.serialReads(t, qa, qb, 100, nil)
	if rec := qa.Stats(); rec.RTO != int64(ack.DefaultRTOConfig().Min) {
		t.Fatalf("RTO %v (SRTT %v) 100 round trips after the stall, want back at RTO.Min", time.Duration(rec.RTO), time.Duration(rec.SRTT))
	}
	t.Logf("B stalled 450 ms: A's SRTT %v, RTO %v, largest retransmission gap %v", time.Duration(after.SRTT), time.Duration(after.RTO), time.Duration(maxGap))
}
