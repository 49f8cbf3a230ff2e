package ndk

import (
	"testing"
)

// inlinePair connects two simlink adapters that the test goroutine drives itself
// (ProgressInline): posting and polling run on one goroutine, so allocation counts cover
// the whole path, engines and link included.
func inlinePair(t testing.TB) *pair {
	opts := DefaultOptions()
	opts.Progress = ProgressInline
	return newPair(t, linkKinds()[0], pairOpts{opts: opts})
}

// drain polls both adapters until cq has a result and returns it.
func drain(p *pair, cq *CQ, r []Result) {
	for i := 0; i < 1_000_000; i++ {
		if cq.GetResults(r) > 0 {
			return
		}
		p.A.a.Poll()
		p.B.a.Poll()
	}
	panic("no completion after a million polls")
}

// TestPostPollNoAllocs: once warm, posting a Send (with its receive), a Write and a Read
// and polling their completions out of the CQs allocates nothing: with one engine per
// adapter, and with two, the QP's datagrams forwarded between them where their flow lands
// on the other engine, and each CQ shared with a QP of the other engine (its pushes lock).
func TestPostPollNoAllocs(t *testing.T) {
	t.Run("one engine", func(t *testing.T) { postPollNoAllocs(t, inlinePair(t)) })
	t.Run("two engines", func(t *testing.T) {
		opts := DefaultOptions()
		opts.Progress = ProgressInline
		p := newPair(t, linkKinds()[2], pairOpts{opts: opts})
		for _, s := range []*side{&p.A, &p.B} {
			other, err := s.pd.NewQP(QPConfig{ReceiveCQ: s.rcq, InitiatorCQ: s.icq})
			if err != nil {
				t.Fatal(err)
			}
			if engineOf(other) == engineOf(s.qp) || !s.rcq.shared.Load() {
				t.Fatalf("second QP on engine %d beside engine %d, CQ shared %v", engineOf(other), engineOf(s.qp), s.rcq.shared.Load())
			}
		}
		postPollNoAllocs(t, p)
		t.Logf("forwarded: A %d, B %d", p.A.a.grp.Stats().Forwarded, p.B.a.grp.Stats().Forwarded)
	})
}

func postPollNoAllocs(t *testing.T, p *pair) {
	src, smr := p.A.region(t, 4096, MRAllowLocalWrite)
	dst, dmr := p.B.region(t, 4096, MRAllowLocalWrite|MRAllowRemoteRead|MRAllowRemoteWrite)
	send := []SGE{smr.SGE(src[:64])}
	recv := []SGE{dmr.SGE(dst[:64])}
	rd := []SGE{smr.SGE(src[64:128])}
	var r [4]Result
	cases := []struct {
		name string
		op   func()
	}{
		{"send", func() {
			if err := p.B.qp.Receive(nil, recv); err != nil {
				t.Fatal(err)
			}
			if err := p.A.qp.Send(nil, send, 0); err != nil {
				t.Fatal(err)
			}
			drain(p, p.A.icq, r[:1])
			drain(p, p.B.rcq, r[:1])
		}},
		{"write", func() {
			if err := p.A.qp.Write(nil, send, dmr.VA()+128, dmr.RemoteToken(), 0); err != nil {
				t.Fatal(err)
			}
			drain(p, p.A.icq, r[:1])
		}},
		{"read", func() {
			if err := p.A.qp.Read(nil, rd, dmr.VA()+256, dmr.RemoteToken(), 0); err != nil {
				t.Fatal(err)
			}
			drain(p, p.A.icq, r[:1])
		}},
	}
	for _, c := range cases {
		for i := 0; i < 100; i++ { // warm up: rings, pools, congestion state
			c.op()
		}
		if n := testing.AllocsPerRun(500, c.op); n != 0 {
			t.Errorf("%s: %v allocations per post+poll, want 0", c.name, n)
		}
		if r[0].Status != StatusSuccess {
			t.Errorf("%s: %v", c.name, r[0].Status)
		}
	}
}
