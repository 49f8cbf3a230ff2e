package transport_test

import (
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/bench/transportbench"
	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/simlink"
)

// The engine's per-packet CPU cost: two engines on a clean simulated network in virtual
// time (bench/transportbench.Pair: one goroutine polls both, a simlink.ManualClock moves
// only when both are idle). Every figure covers both engines (A sends, B receives and
// acknowledges) plus the simulated link carrying the datagrams both ways.
//
//	go test ./transport -run '^$' -bench 'BenchmarkEngine' -benchmem
//
// ns/pkt is the elapsed time divided by the data packets A sent (acks are not counted as
// packets; they are part of the cost of each data packet).

// ebPair connects two engines over a perfect network: no latency, no loss, no bandwidth
// limit, datagrams of maxPayload bytes.
func ebPair(tb testing.TB, maxPayload int) *transportbench.Pair {
	return ebPairZC(tb, maxPayload, false)
}

// ebPairZC is ebPair with Config.ZeroCopyTx set to zc.
func ebPairZC(tb testing.TB, maxPayload int, zc bool) *transportbench.Pair {
	tb.Helper()
	p, err := transportbench.NewPair(transportbench.PairConfig{
		Seed:       1,
		MaxPayload: maxPayload,
		QP:         transport.QPConfig{SendDepth: 256, RecvDepth: 256},
		MemSize:    1 << 20,
		Engine:     func(c *transport.Config) { c.ZeroCopyTx = zc },
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Close)
	return p
}

// ebStepBudget bounds the Steps one benchmark or test may take per operation.
const ebStepBudget = 1000

// BenchmarkEngineSend64 measures one-way 64-byte Sends, pipelined A→B: A keeps 64 Sends
// posted, B keeps 128 receives posted; one op is one Send (one data packet) from post to
// both completions.
func BenchmarkEngineSend64(b *testing.B) { benchSend64(b, false) }

// BenchmarkEngineSend64ZeroCopy is BenchmarkEngineSend64 with Config.ZeroCopyTx: every data
// packet carries a cookie that the link reports through TxDone before its Send completes.
func BenchmarkEngineSend64ZeroCopy(b *testing.B) { benchSend64(b, true) }

func benchSend64(b *testing.B, zc bool) {
	const (
		size        = 64
		outstanding = 64
		recvDepth   = 128
	)
	p := ebPairZC(b, 0, zc)
	msg := make([]byte, size)
	rbuf := make([]byte, size)
	wr := transport.WorkRequest{Kind: transport.OpSend, NSGE: 1}
	wr.SGL[0] = msg
	rcv := transport.Receive{NSGE: 1}
	rcv.SGL[0] = rbuf
	var posted, recvPosted uint64
	run := func(n uint64) {
		target := p.SinkA.Done(transport.OpSend) + n
		limit := p.Steps + n*ebStepBudget + 100_000
		for p.SinkA.Done(transport.OpSend) < target {
			for recvPosted-p.SinkB.Done(transport.OpReceive) < recvDepth {
				if err := p.QB.PostReceive(&rcv); err != nil {
					b.Fatal(err)
				}
				recvPosted++
			}
			for posted-p.SinkA.Done(transport.OpSend) < outstanding && posted < target {
				if err := p.QA.PostSend(&wr); err != nil {
					b.Fatal(err)
				}
				posted++
			}
			if p.SinkA.Failed+p.SinkB.Failed > 0 {
				b.Fatalf("completion failed: A %+v B %+v", p.SinkA.First, p.SinkB.First)
			}
			if !p.Step(0) || p.Steps > limit {
				b.Fatalf("stalled after %d sends (%d steps)", p.SinkA.Done(transport.OpSend), p.Steps)
			}
		}
	}
	run(10_000) // warm up: pools, queues and the congestion window reach steady state
	tx0, acks0, steps0 := p.QA.Stats().TxPackets, p.QB.Stats().AcksSent, p.Steps
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	run(uint64(b.N))
	b.StopTimer()
	ebReport(b, p, tx0, acks0, steps0)
}

// BenchmarkEngineWrite4K measures 4 KiB Writes, pipelined A→B (16 outstanding), with
// 1500-byte datagrams (three packets per Write) and with 9000-byte ones (one packet).
func BenchmarkEngineWrite4K(b *testing.B) {
	for _, c := range []struct {
		name       string
		maxPayload int
	}{{"mtu1500", 1472}, {"mtu9000", 8972}} {
		b.Run(c.name, func(b *testing.B) {
			const (
				size        = 4096
				outstanding = 16
			)
			p := ebPair(b, c.maxPayload)
			src := make([]byte, size)
			wr := transport.WorkRequest{Kind: transport.OpWrite, NSGE: 1, RemoteToken: transportbench.RegionToken}
			wr.SGL[0] = src
			var posted uint64
			run := func(n uint64) {
				target := p.SinkA.Done(transport.OpWrite) + n
				limit := p.Steps + n*ebStepBudget + 100_000
				for p.SinkA.Done(transport.OpWrite) < target {
					for posted-p.SinkA.Done(transport.OpWrite) < outstanding && posted < target {
						wr.RemoteAddr = transportbench.RegionBase + uint64(posted%outstanding)*size
						if err := p.QA.PostSend(&wr); err != nil {
							b.Fatal(err)
						}
						posted++
					}
					if p.SinkA.Failed > 0 {
						b.Fatalf("completion failed: %+v", p.SinkA.First)
					}
					if !p.Step(0) || p.Steps > limit {
						b.Fatalf("stalled after %d writes (%d steps)", p.SinkA.Done(transport.OpWrite), p.Steps)
					}
				}
			}
			run(2_000)
			tx0, acks0, steps0 := p.QA.Stats().TxPackets, p.QB.Stats().AcksSent, p.Steps
			b.SetBytes(size)
			b.ReportAllocs()
			b.ResetTimer()
			run(uint64(b.N))
			b.StopTimer()
			ebReport(b, p, tx0, acks0, steps0)
		})
	}
}

// ebReport adds the per-packet figures: ns/pkt (elapsed / data packets A sent), pkts/op,
// acks/pkt and steps/pkt (Pair.Step calls: each polls both engines once).
func ebReport(b *testing.B, p *transportbench.Pair, tx0, acks0, steps0 uint64) {
	b.Helper()
	pkts := p.QA.Stats().TxPackets - tx0
	if pkts == 0 || b.N == 0 {
		return
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(pkts), "ns/pkt")
	b.ReportMetric(float64(pkts)/float64(b.N), "pkts/op")
	b.ReportMetric(float64(p.QB.Stats().AcksSent-acks0)/float64(pkts), "acks/pkt")
	b.ReportMetric(float64(p.Steps-steps0)/float64(pkts), "steps/pkt")
}

// TestEngineSteadyStateNoAllocs checks that, once warm, posting a Send (with its receive), a
// Write and a Read, running both engines until all complete, and completing them into a
// sink that does not allocate, allocates nothing: not the posting calls, not Poll on
// either side, not the simulated link; with zero-copy transmit (cookies and TxDone) too.
func TestEngineSteadyStateNoAllocs(t *testing.T) {
	t.Run("copy", func(t *testing.T) { engineNoAllocs(t, false) })
	t.Run("zerocopy", func(t *testing.T) { engineNoAllocs(t, true) })
}

func engineNoAllocs(t *testing.T, zc bool) {
	p := ebPairZC(t, 0, zc)
	if err := p.Net.SetDefault(simlink.Impairments{Latency: 2 * time.Microsecond}); err != nil {
		t.Fatal(err)
	}
	sbuf, rbuf := make([]byte, 3000), make([]byte, 4000)
	wbuf, readBuf := make([]byte, 5000), make([]byte, 5000)
	send := transport.WorkRequest{Kind: transport.OpSend, NSGE: 1}
	send.SGL[0] = sbuf
	rcv := transport.Receive{NSGE: 1}
	rcv.SGL[0] = rbuf
	write := transport.WorkRequest{Kind: transport.OpWrite, NSGE: 1, RemoteAddr: transportbench.RegionBase, RemoteToken: transportbench.RegionToken}
	write.SGL[0] = wbuf
	read := transport.WorkRequest{Kind: transport.OpRead, NSGE: 1, RemoteAddr: transportbench.RegionBase + 8192, RemoteToken: transportbench.RegionToken}
	read.SGL[0] = readBuf

	var failure string // set instead of calling t.Fatal inside AllocsPerRun
	waitFor := func(sink *transportbench.Counter, op transport.OpKind, want uint64) {
		for steps := 0; sink.Done(op) < want; steps++ {
			switch {
			case sink.Failed > 0:
				failure = "operation failed: " + sink.First.Status.String()
			case steps > 100_000:
				failure = op.String() + " not complete after 100000 steps"
			case !p.Step(0):
				failure = op.String() + " not complete, nothing scheduled"
			}
			if failure != "" {
				return
			}
		}
	}
	round := func() {
		if failure != "" {
			return
		}
		sends, recvs := p.SinkA.Done(transport.OpSend)+1, p.SinkB.Done(transport.OpReceive)+1
		if p.QB.PostReceive(&rcv) != nil || p.QA.PostSend(&send) != nil {
			failure = "post send/receive failed"
			return
		}
		waitFor(p.SinkA, transport.OpSend, sends)
		waitFor(p.SinkB, transport.OpReceive, recvs)
		if p.QA.PostSend(&write) != nil {
			failure = "post write failed"
			return
		}
		waitFor(p.SinkA, transport.OpWrite, p.SinkA.Done(transport.OpWrite)+1)
		if p.QA.PostSend(&read) != nil {
			failure = "post read failed"
			return
		}
		waitFor(p.SinkA, transport.OpRead, p.SinkA.Done(transport.OpRead)+1)
		// Let the last acks and timers settle, so every round starts from the same state.
		settle := p.Clock.Now() + int64(100*time.Microsecond)
		for i := 0; i < 10_000 && p.Clock.Now() < settle; i++ {
			p.Step(settle)
		}
	}
	for range 200 { // warm up
		round()
	}
	allocs := testing.AllocsPerRun(500, round)
	if failure != "" {
		t.Fatalf("%s: A %+v, B %+v, sinkA %+v sinkB %+v", failure, p.QA.Stats(), p.QB.Stats(), p.SinkA, p.SinkB)
	}
	if got := p.SinkA.Done(transport.OpRead); got < 700 {
		t.Fatalf("only %d reads completed", got)
	}
	if allocs != 0 {
		t.Errorf("post+poll+complete of Send, Write and Read: %v allocations per round, want 0", allocs)
	}
}
