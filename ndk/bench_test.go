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
