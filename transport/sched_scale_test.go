package transport_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/bench/transportbench"
	"github.com/xdpndk/xdpndk/transport"
)

// What a round costs with N connected QPs: two engines on a perfect simulated network in
// virtual time (as BenchmarkEngineSend64), with N QP pairs connected between them.
//
//	go test ./transport -run '^$' -bench 'BenchmarkEngineScale' -benchmem
//
// BenchmarkEngineScaleIdle/qps=N is one Poll of each engine while nothing is due: the
// floor of every round. BenchmarkEngineScaleWrite64/qps=N/active=1 keeps 64 Writes of 64
// bytes outstanding on one QP while the N-1 others sit idle; .../active=all spreads them
// over every QP, 4 outstanding each (one op is one Write, post to completion, both
// engines' work; dgrams/op the datagrams both engines sent per Write, dgramsB/op the
// target's, its acknowledgements).

// scalePair is ebPair with n QP pairs: the Pair's QA-QB and n-1 more, connected through
// one listener. It returns A's QPs, the Pair's first, and the sink of the others.
func scalePair(tb testing.TB, n int) (p *transportbench.Pair, as []*transport.QP, sink *scaleSink) {
	p, as, _, sink = scalePairs(tb, n)
	return p, as, sink
}

// scalePairs is scalePair that also returns B's QPs (bs[i] is connected to as[i]).
func scalePairs(tb testing.TB, n int) (*transportbench.Pair, []*transport.QP, []*transport.QP, *scaleSink) {
	tb.Helper()
	p, err := transportbench.NewPair(transportbench.PairConfig{
		Seed:    1,
		QP:      transport.QPConfig{SendDepth: 256, RecvDepth: 256},
		MemSize: 1 << 20,
		Engine:  func(c *transport.Config) { c.MaxQPs = max(n, transport.DefaultMaxQPs) },
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Close)
	as, bs := []*transport.QP{p.QA}, []*transport.QP{p.QB}
	sink := &scaleSink{n: make([]uint64, n)}
	if n == 1 {
		return p, as, bs, sink
	}
	l, err := p.B.Listen(transportbench.Service+1, n)
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	// In batches: at most Config.MaxHalfOpen (64) requests wait for their ready-to-use.
	for first := 1; first < n; first += 32 {
		last := min(first+32, n)
		conns := make([]*transport.Connector, 0, last-first)
		for i := first; i < last; i++ {
			qa, err := p.A.NewQP(transport.QPConfig{Sink: sink, Context: i, SendDepth: 256, RecvDepth: 256})
			if err != nil {
				tb.Fatal(err)
			}
			c, err := p.A.Connect(qa, p.LinkB.LocalAddr(), transportbench.Service+1, nil, 0)
			if err != nil {
				tb.Fatal(err)
			}
			as, conns = append(as, qa), append(conns, c)
		}
		reqs := make([]*transport.ConnRequest, 0, len(conns))
		for len(reqs) < len(conns) {
			var req *transport.ConnRequest
			if err := p.RunUntil(time.Second, func() bool {
				select {
				case req = <-l.Requests():
					return true
				default:
					return false
				}
			}); err != nil {
				tb.Fatalf("connection request %d: %v", first+len(reqs), err)
			}
			qb, err := p.B.NewQP(transport.QPConfig{Sink: sink, SendDepth: 256, RecvDepth: 256})
			if err != nil {
				tb.Fatal(err)
			}
			if err := req.Accept(qb, nil, 0); err != nil {
				tb.Fatal(err)
			}
			reqs, bs = append(reqs, req), append(bs, qb)
		}
		for i, c := range conns {
			if err := p.RunUntil(time.Second, func() bool { d, _ := c.Replied(); return d }); err != nil {
				tb.Fatalf("reply %d: %v", first+i, err)
			}
			if err := c.Complete(); err != nil {
				tb.Fatalf("complete %d: %v", first+i, err)
			}
		}
		if err := p.RunUntil(time.Second, func() bool {
			for i, r := range reqs {
				if d, _ := r.Established(); !d || as[first+i].State() != transport.QPConnected {
					return false
				}
			}
			return true
		}); err != nil {
			tb.Fatalf("establish: %v", err)
		}
	}
	// Let the handshake's last acknowledgements and timers settle, and the connection
	// manager forget the attempts (it keeps them 2 s for late copies, and its poll looks
	// at each: not the QPs' cost).
	settle := p.Clock.Now() + int64(3*time.Second)
	for p.Clock.Now() < settle && p.Step(settle) {
	}
	return p, as, bs, sink
}

var scaleSizes = []int{1, 16, 256, 1024}

func BenchmarkEngineScaleIdle(b *testing.B) {
	for _, n := range scaleSizes {
		b.Run(fmt.Sprintf("qps=%d", n), func(b *testing.B) {
			p, _, _ := scalePair(b, n)
			now := p.Clock.Now()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				p.A.Poll(now)
				p.B.Poll(now)
			}
		})
	}
}

func BenchmarkEngineScaleWrite64(b *testing.B) {
	for _, n := range scaleSizes {
		for _, all := range []bool{false, true} {
			if n == 1 && all {
				continue
			}
			name := fmt.Sprintf("qps=%d/active=1", n)
			if all {
				name = fmt.Sprintf("qps=%d/active=all", n)
			}
			b.Run(name, func(b *testing.B) {
				p, as, sink := scalePair(b, n)
				active, depth := as[:1], 64
				if all {
					active, depth = as, 4
				}
				run := scaleWriter(b, p, active, depth, sink)
				run(uint64(20 * len(active) * depth)) // warm up
				b.ReportAllocs()
				a0, b0 := p.A.Stats().TxPackets, p.B.Stats().TxPackets
				b.ResetTimer()
				run(uint64(b.N))
				b.StopTimer()
				ta, tb := p.A.Stats().TxPackets-a0, p.B.Stats().TxPackets-b0
				b.ReportMetric(float64(ta+tb)/float64(b.N), "dgrams/op") // both engines' datagrams per Write
				b.ReportMetric(float64(tb)/float64(b.N), "dgramsB/op")   // the target's: its acknowledgements
			})
		}
	}
}

// scaleWriter returns a function that completes n more 64-byte Writes, keeping depth
// outstanding on each QP of qps.
func scaleWriter(tb testing.TB, p *transportbench.Pair, qps []*transport.QP, depth int, sink *scaleSink) func(n uint64) {
	wr := transport.WorkRequest{Kind: transport.OpWrite, NSGE: 1, RemoteToken: transportbench.RegionToken}
	wr.SGL[0] = make([]byte, 64)
	posted := make([]uint64, len(qps))
	for i := range qps {
		posted[i] = sink.done(p, i)
	}
	return func(n uint64) {
		target := sink.total(p) + n
		limit := p.Steps + n*ebStepBudget + 100_000
		for sink.total(p) < target {
			for i, q := range qps {
				for posted[i]-sink.done(p, i) < uint64(depth) {
					wr.RemoteAddr = transportbench.RegionBase + uint64(i%256)*4096 + (posted[i]%64)*64
					if err := q.PostSend(&wr); err != nil {
						tb.Fatal(err)
					}
					posted[i]++
				}
			}
			if p.SinkA.Failed+sink.failed > 0 {
				tb.Fatalf("completion failed: %+v %+v", p.SinkA.First, sink.first)
			}
			if !p.Step(0) || p.Steps > limit {
				tb.Fatalf("stalled after %d writes (%d steps)", sink.total(p), p.Steps)
			}
		}
	}
}

// scaleSink counts the Writes completed by each QP of A but the Pair's own (whose sink is
// the Pair's SinkA): QP i has Context i.
type scaleSink struct {
	n      []uint64
	sum    uint64
	failed uint64
	first  transport.Completion
}

// Complete implements transport.CompletionSink.
func (s *scaleSink) Complete(q *transport.QP, c *transport.Completion) {
	if c.Status != transport.StatusSuccess {
		if s.failed == 0 {
			s.first = *c
		}
		s.failed++
		return
	}
	if i, _ := q.Context().(int); i > 0 && i < len(s.n) {
		s.n[i]++
		s.sum++
	}
}

// done is the Writes QP i of A completed.
func (s *scaleSink) done(p *transportbench.Pair, i int) uint64 {
	if i == 0 {
		return p.SinkA.Done(transport.OpWrite)
	}
	return s.n[i]
}

// total is the Writes all of A's QPs completed.
func (s *scaleSink) total(p *transportbench.Pair) uint64 {
	return p.SinkA.Done(transport.OpWrite) + s.sum
}

// TestSchedSteadyStateNoAllocs checks that, once warm, Writes spread over 64 QP pairs, with
// the doorbells, the round lists and the deadline heap they go through, allocate nothing:
// not the posts, not Poll on either side.
func TestSchedSteadyStateNoAllocs(t *testing.T) {
	p, as, sink := scalePair(t, 64)
	run := scaleWriter(t, p, as, 4, sink)
	run(64 * 4 * 50) // warm up: rings, lists and heap reach their size
	if allocs := testing.AllocsPerRun(50, func() { run(512) }); allocs != 0 {
		t.Errorf("512 Writes over 64 QPs: %v allocations, want 0", allocs)
	}
	now := p.Clock.Now()
	if allocs := testing.AllocsPerRun(1000, func() { p.A.Poll(now); p.B.Poll(now) }); allocs != 0 {
		t.Errorf("an idle round of 64 QPs: %v allocations, want 0", allocs)
	}
}

// TestSchedIdleKeepAlive leaves 256 connected QP pairs idle for 65 s of virtual time: only
// their deadlines (the keepalive's) wake the engines, so every QP must still probe its
// silent peer every KeepAlive/3 (10 s) and none may fail.
func TestSchedIdleKeepAlive(t *testing.T) {
	if testing.Short() {
		t.Skip("65 s of virtual time over 256 QP pairs")
	}
	const n = 256
	p, as, bs, _ := scalePairs(t, n)
	probes := func(i int) uint64 { return as[i].Stats().KeepAlives + bs[i].Stats().KeepAlives }
	start := make([]uint64, n)
	for i := range n {
		start[i] = probes(i)
	}
	end := p.Clock.Now() + int64(65*time.Second)
	steps0 := p.Steps
	for p.Clock.Now() < end {
		p.Step(end)
	}
	steps := p.Steps - steps0
	total := uint64(0)
	for i := range n {
		if as[i].State() != transport.QPConnected || bs[i].State() != transport.QPConnected {
			t.Fatalf("pair %d: %v/%v after 65 s idle (%v, %v)", i, as[i].State(), bs[i].State(), as[i].Cause(), bs[i].Cause())
		}
		// Each side probes after 10 s of silence; the answer resets both, and when both
		// timers fire in the same round both probe: 6 or 7 periods of 10 s, one or two
		// probes each.
		if got := probes(i) - start[i]; got < 6 || got > 14 {
			t.Errorf("pair %d: %d probes in 65 s idle, want 6 to 14", i, got)
		}
		total += probes(i) - start[i]
	}
	t.Logf("65 s idle, %d QP pairs: %d steps, %d probes", n, steps, total)
	// Every step polls both engines; idle engines wake only for their timers and the
	// probes' datagrams, a few times per 10 s, not once per QP.
	if limit := uint64(n) * 7 * 8; steps > limit {
		t.Errorf("%d steps for %d idle pairs over 65 s, want at most %d", steps, n, limit)
	}
}
