package ndk

import (
	"testing"
)

// Benchmarks of posting and completing verbs over simlink with ProgressInline: one
// goroutine posts and polls, so ns/op is the CPU of the whole path on both sides
// (both engines and the in-memory link). Run them in one go so their ratios compare:
//
//	go test ./ndk -run '^$' -bench . -benchmem -count 5

// benchPair is inlinePair for benchmarks.
func benchPair(b *testing.B) *pair { return inlinePair(b) }

// BenchmarkSend64 is one 64-byte Send posted and completed at both ends (the sender's
// Send and the receiver's Receive), a receive posted for it each time.
func BenchmarkSend64(b *testing.B) {
	p := benchPair(b)
	src, smr := p.A.region(b, 4096, MRAllowLocalWrite)
	dst, dmr := p.B.region(b, 4096, MRAllowLocalWrite)
	send, recv := []SGE{smr.SGE(src[:64])}, []SGE{dmr.SGE(dst[:64])}
	var r [1]Result
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := p.B.qp.Receive(nil, recv); err != nil {
			b.Fatal(err)
		}
		if err := p.A.qp.Send(nil, send, 0); err != nil {
			b.Fatal(err)
		}
		drain(p, p.A.icq, r[:])
		drain(p, p.B.rcq, r[:])
	}
}

// BenchmarkPingPong64 is one round trip of the ping-pong ndkbench measures, on one
// goroutine: A sends 64 bytes, B takes the receive, reposts it and answers with a Send, A
// takes the answer. Acknowledgements ride on the answers. ns/op is the CPU of a round trip
// at both ends without the link's system calls; polls/op counts the engine rounds spent,
// datagrams/op the packets both links carried (2: every ack rides on an answer).
func BenchmarkPingPong64(b *testing.B) {
	p := benchPair(b)
	src, smr := p.A.region(b, 4096, MRAllowLocalWrite)
	dst, dmr := p.B.region(b, 4096, MRAllowLocalWrite)
	aSend, aRecv := []SGE{smr.SGE(src[:64])}, []SGE{smr.SGE(src[64:128])}
	bSend, bRecv := []SGE{dmr.SGE(dst[64:128])}, []SGE{dmr.SGE(dst[:64])}
	if err := p.A.qp.Receive(nil, aRecv); err != nil {
		b.Fatal(err)
	}
	if err := p.B.qp.Receive(nil, bRecv); err != nil {
		b.Fatal(err)
	}
	var r [4]Result
	polls := 0
	// take polls side's receive CQ (an empty CQ polls its adapter), polling the other
	// adapter in between, until a receive completed. The Sends are silent: no initiator
	// completions.
	take := func(side, other *side) {
		for i := 0; ; i++ {
			polls++
			if side.rcq.GetResults(r[:1]) > 0 {
				return
			}
			other.a.Poll()
			polls++
			if i == 1_000_000 {
				b.Fatal("no receive after a million polls")
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := p.A.qp.Send(nil, aSend, OpSilentSuccess); err != nil {
			b.Fatal(err)
		}
		take(&p.B, &p.A)
		if err := p.B.qp.Receive(nil, bRecv); err != nil {
			b.Fatal(err)
		}
		if err := p.B.qp.Send(nil, bSend, OpSilentSuccess); err != nil {
			b.Fatal(err)
		}
		take(&p.A, &p.B)
		if err := p.A.qp.Receive(nil, aRecv); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(polls)/float64(b.N), "polls/op")
	b.ReportMetric(float64(p.A.a.link.Stats().TxPackets+p.B.a.link.Stats().TxPackets)/float64(b.N), "datagrams/op")
}

// BenchmarkBindInvalidate is a memory window bound and invalidated through the QP, both
// requests completed: the per-request window pattern.
func BenchmarkBindInvalidate(b *testing.B) {
	p := benchPair(b)
	_, mr := p.A.region(b, 1<<16, MRAllowLocalWrite)
	mw, err := p.A.pd.NewMW()
	if err != nil {
		b.Fatal(err)
	}
	var r [2]Result
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := p.A.qp.Bind(nil, mr, mw, mr.VA()+4096, 4096, OpAllowRemoteRead|OpAllowRemoteWrite); err != nil {
			b.Fatal(err)
		}
		if err := p.A.qp.Invalidate(nil, mw, 0); err != nil {
			b.Fatal(err)
		}
		drain(p, p.A.icq, r[:1])
		drain(p, p.A.icq, r[:1])
	}
}

// BenchmarkWrite64 is one 64-byte Write posted and completed.
func BenchmarkWrite64(b *testing.B) {
	p := benchPair(b)
	src, smr := p.A.region(b, 4096, MRAllowLocalWrite)
	_, dmr := p.B.region(b, 4096, MRAllowLocalWrite|MRAllowRemoteWrite)
	sgl := []SGE{smr.SGE(src[:64])}
	var r [1]Result
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := p.A.qp.Write(nil, sgl, dmr.VA(), dmr.RemoteToken(), 0); err != nil {
			b.Fatal(err)
		}
		drain(p, p.A.icq, r[:])
	}
}

// BenchmarkRead64 is one 64-byte Read posted and completed.
func BenchmarkRead64(b *testing.B) {
	p := benchPair(b)
	dst, dmr := p.A.region(b, 4096, MRAllowLocalWrite)
	_, smr := p.B.region(b, 4096, MRAllowRemoteRead)
	sgl := []SGE{dmr.SGE(dst[:64])}
	var r [1]Result
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := p.A.qp.Read(nil, sgl, smr.VA(), smr.RemoteToken(), 0); err != nil {
			b.Fatal(err)
		}
		drain(p, p.A.icq, r[:])
	}
}

// BenchmarkEmptyPoll is one GetResults on an empty CQ of a connected, idle pair: the
// round an inline poller spins through while it waits (the CQ polls the engine: a
// receive that finds nothing, the connection manager and the QPs' timers looked at). A
// packet that arrives waits on average half of one before it is seen.
func BenchmarkEmptyPoll(b *testing.B) {
	p := benchPair(b)
	var r [4]Result
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if p.A.rcq.GetResults(r[:]) != 0 {
			b.Fatal("a result on an idle pair")
		}
	}
}
