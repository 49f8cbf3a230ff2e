package ndk

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/ack"
)

// Conformance of the work-request verbs (NDKPI's NdkSend, NdkWrite, NdkRead, NdkBind,
// NdkFastRegister, NdkInvalidate and NdkFlush pages, the NDK_OP_FLAG_* values, NDKPI Work
// Request Posting Requirements, NDKPI Deferred Processing Scheme; completion order and
// statuses as NetworkDirect's IND2CompletionQueue::GetResults gives them). Each test names
// the rule it checks and runs over every link kind. Waits are bounded; nothing asserts a
// duration.

// frBase is the base virtual address fast registrations use (FBO + n*PAGE_SIZE).
const frBase = 0x7000_0000_0000

// quiet is how long a test watches a CQ or a callback to see that nothing (more) arrives.
const quiet = 20 * time.Millisecond

// fill writes a pattern that differs per seed into b.
func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7) + byte(i>>8)
	}
}

// engineOpts returns the default options with fn adjusting the transport engine.
func engineOpts(fn func(*transport.Config)) Options {
	o := DefaultOptions()
	o.x.Engine = fn
	return o
}

// patientSends makes Sends that find no receive wait instead of failing: they stay
// outstanding until flushed (the credit wait never expires, the RNR budget never runs out).
// A lost RNR NAK leaves the refused packet to the retransmission budget, so RetryTimeout
// goes up as well.
func patientSends(c *transport.Config) {
	c.CreditTimeout = time.Hour
	c.RNRTimeout = time.Hour
	c.RetryTimeout = time.Hour
}

// pages allocates n fast-register pages of s's adapter UMEM.
func (s *side) pages(t *testing.T, n int) []byte {
	t.Helper()
	b, err := s.a.Alloc(n*4096, 4096)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.a.Free(b) })
	return b
}

// receives posts n receives of size bytes on s with contexts 0..n-1 and returns their
// buffer (receive i at [i*size, (i+1)*size)).
func (s *side) receives(t *testing.T, n, size int) []byte {
	t.Helper()
	b, mr := s.region(t, n*size, MRAllowLocalWrite)
	for i := 0; i < n; i++ {
		if err := s.qp.Receive(i, []SGE{mr.SGE(b[i*size : (i+1)*size])}); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// plainResults waits for n results through GetResults (NdkGetCqResults, not Ex).
func plainResults(t *testing.T, cq *CQ, n int) []Result {
	t.Helper()
	out := make([]Result, 0, n)
	var buf [16]Result
	deadline := time.Now().Add(10 * time.Second)
	for len(out) < n {
		k := cq.GetResults(buf[:min(len(buf), n-len(out))])
		out = append(out, buf[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d results after 10 s: %+v", len(out), n, out)
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	return out
}

// status checks that err carries st.
func status(t *testing.T, what string, err error, st Status) {
	t.Helper()
	if st == StatusSuccess {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return
	}
	if !errors.Is(err, st) {
		t.Fatalf("%s: %v, want %v", what, err, st)
	}
}

// SILENT_SUCCESS: a request that succeeds queues no completion, one that fails does, and
// requests cancelled after a failure complete even though they are silent.
func TestVerbsSilentSuccess(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		p := newPair(t, k, pairOpts{})
		tbuf, tmr := p.B.region(t, 4096, MRAllowRemoteWrite)
		src, smr := p.A.region(t, 4096, 0)
		fill(src, 1)
		tok := tmr.RemoteToken()
		for i := 0; i < 4; i++ {
			if err := p.A.qp.Write(i, []SGE{smr.SGE(src[i*512 : (i+1)*512])}, tmr.VA()+uint64(i*512), tok, OpSilentSuccess); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.A.qp.Write("signalled", []SGE{smr.SGE(src[2048:2560])}, tmr.VA()+2048, tok, 0); err != nil {
			t.Fatal(err)
		}
		want(t, results(t, p.A.icq, 1)[0], StatusSuccess, OpTypeWrite, "signalled")
		noResults(t, p.A.icq, quiet)
		if !bytes.Equal(tbuf[:2560], src[:2560]) {
			t.Fatal("silent writes did not land")
		}

		// A silent request that fails completes; the silent ones after it complete cancelled.
		if err := p.A.qp.Write("bad", []SGE{smr.SGE(src[:16])}, tmr.VA(), tok^0x8000_0000, OpSilentSuccess); err != nil {
			t.Fatal(err)
		}
		if err := p.A.qp.Write("after", []SGE{smr.SGE(src[:16])}, tmr.VA(), tok, OpSilentSuccess); err != nil {
			t.Fatal(err)
		}
		if err := p.A.qp.Send("after2", []SGE{smr.SGE(src[:16])}, OpSilentSuccess); err != nil {
			t.Fatal(err)
		}
		rs := results(t, p.A.icq, 3)
		want(t, rs[0], StatusAccessViolation, OpTypeWrite, "bad")
		want(t, rs[1], StatusCancelled, OpTypeWrite, "after")
		want(t, rs[2], StatusCancelled, OpTypeSend, "after2")
		noResults(t, p.A.icq, quiet)
	})
}

// SILENT_SUCCESS: flushed silent requests always complete, STATUS_CANCELLED, in posting
// order (NdkFlush).
func TestVerbsSilentFlushed(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		p := newPair(t, k, pairOpts{opts: engineOpts(patientSends)})
		src, smr := p.A.region(t, 256, 0)
		_, tmr := p.B.region(t, 256, MRAllowRemoteWrite)
		// B posts no receive: the Sends stay outstanding, and the Write after them too.
		for i := 0; i < 3; i++ {
			if err := p.A.qp.Send(i, []SGE{smr.SGE(src[:64])}, OpSilentSuccess); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.A.qp.Write(3, []SGE{smr.SGE(src[:64])}, tmr.VA(), tmr.RemoteToken(), OpSilentSuccess); err != nil {
			t.Fatal(err)
		}
		p.A.qp.Flush()
		rs := results(t, p.A.icq, 4)
		for i := 0; i < 3; i++ {
			want(t, rs[i], StatusCancelled, OpTypeSend, i)
		}
		want(t, rs[3], StatusCancelled, OpTypeWrite, 3)
		noResults(t, p.A.icq, quiet)
	})
}

// SEND_AND_SOLICIT_EVENT: with the peer's CQ armed for NotifySolicited, unsolicited Sends
// do not notify; the soliciting Send notifies once its receive has completed; a completion
// in error always satisfies SOLICITED.
func TestVerbsSolicitedEvent(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		type note struct {
			st     Status
			queued uint64 // results on the CQ when the callback ran
		}
		notes := make(chan note, 8)
		var cq atomic.Pointer[CQ]
		p := newPair(t, k, pairOpts{
			notifyB: func(st Status) {
				c := cq.Load()
				notes <- note{st, c.tail.Load() - c.head.Load()}
			},
			beforeB: func(s *side) { s.receives(t, 4, 256) },
		})
		cq.Store(p.B.rcq)
		src, smr := p.A.region(t, 256, 0)
		p.B.rcq.Arm(NotifySolicited)
		for i := 0; i < 2; i++ {
			if err := p.A.qp.Send(i, []SGE{smr.SGE(src[:32])}, 0); err != nil {
				t.Fatal(err)
			}
		}
		// A Send completes when acknowledged, and B acknowledges after placing it: both
		// receives have completed at B now.
		results(t, p.A.icq, 2)
		select {
		case n := <-notes:
			t.Fatalf("unsolicited Sends notified: %+v", n)
		case <-time.After(quiet):
		}
		if err := p.A.qp.Send(2, []SGE{smr.SGE(src[:32])}, OpSendAndSolicitEvent); err != nil {
			t.Fatal(err)
		}
		select {
		case n := <-notes:
			if n.st != StatusSuccess || n.queued != 3 {
				t.Fatalf("notification %v with %d results queued, want STATUS_SUCCESS after the 3rd receive", n.st, n.queued)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no notification for the solicited Send")
		}
		for i, r := range results(t, p.B.rcq, 3) {
			want(t, r, StatusSuccess, OpTypeReceive, i)
		}
		want(t, results(t, p.A.icq, 1)[0], StatusSuccess, OpTypeSend, 2)

		// An error completion (the flushed 4th receive) satisfies SOLICITED.
		p.B.rcq.Arm(NotifySolicited)
		p.B.qp.Flush()
		select {
		case n := <-notes:
			if n.st != StatusSuccess || n.queued == 0 {
				t.Fatalf("notification %v with %d results queued", n.st, n.queued)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no notification for a completion in error")
		}
		want(t, results(t, p.B.rcq, 1)[0], StatusCancelled, OpTypeReceive, 3)
	})
}

// INLINE: the payload is copied when the post returns (the source may be overwritten at
// once), the SGE tokens are ignored (unregistered memory, token 0), inline requests are not
// bound by MaxInitiatorSGE, and a payload over the QP's InlineDataSize fails inline with no
// completion, leaving the QP usable.
func TestVerbsInline(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		var rbuf []byte
		p := newPair(t, k, pairOpts{qp: QPConfig{InlineDataSize: 256, MaxInitiatorSGE: 1},
			beforeB: func(s *side) { rbuf = s.receives(t, 2, 512) }})
		src := make([]byte, 256) // not registered
		fill(src, 3)
		orig := append([]byte(nil), src...)
		if err := p.A.qp.Send("send", []SGE{{Buf: src[:100]}, {Buf: src[100:200]}}, OpInline); err != nil {
			t.Fatal(err)
		}
		fill(src, 99)
		want(t, results(t, p.A.icq, 1)[0], StatusSuccess, OpTypeSend, "send")
		r := results(t, p.B.rcq, 1)[0]
		want(t, r, StatusSuccess, OpTypeReceive, 0)
		if r.BytesTransferred != 200 || !bytes.Equal(rbuf[:200], orig[:200]) {
			t.Fatalf("received %d bytes, equal to the payload at post time: %v", r.BytesTransferred, bytes.Equal(rbuf[:200], orig[:200]))
		}

		tbuf, tmr := p.B.region(t, 4096, MRAllowRemoteWrite)
		atPost := append([]byte(nil), src...)
		if err := p.A.qp.Write("write", []SGE{{Buf: src, Token: 0}}, tmr.VA()+64, tmr.RemoteToken(), OpInline); err != nil {
			t.Fatal(err)
		}
		fill(src, 42)
		want(t, results(t, p.A.icq, 1)[0], StatusSuccess, OpTypeWrite, "write")
		if !bytes.Equal(tbuf[64:64+256], atPost) {
			t.Fatal("inline write did not carry the payload at post time")
		}

		big := make([]byte, 257)
		if err := p.A.qp.Send("big", []SGE{{Buf: big}}, OpInline); err == nil {
			t.Fatal("inline Send over InlineDataSize accepted")
		}
		if err := p.A.qp.Write("big", []SGE{{Buf: big}}, tmr.VA(), tmr.RemoteToken(), OpInline); err == nil {
			t.Fatal("inline Write over InlineDataSize accepted")
		}
		noResults(t, p.A.icq, quiet)
		if err := p.A.qp.Send("after", []SGE{{Buf: src[:8]}}, OpInline); err != nil {
			t.Fatal(err)
		}
		want(t, results(t, p.A.icq, 1)[0], StatusSuccess, OpTypeSend, "after")
		want(t, results(t, p.B.rcq, 1)[0], StatusSuccess, OpTypeReceive, 1)
	})
}

// DEFER, the example of NDKPI Deferred Processing Scheme: FastRegister #1 with DEFER
// succeeds, FastRegister #2 with DEFER fails inline and the consumer posts nothing more;
// the provider still starts #1, which completes; #2 produces no completion.
func TestVerbsDeferFailedChain(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		p := newPair(t, k, pairOpts{})
		pg := p.A.pages(t, 2)
		fr1, err := p.A.pd.NewFastRegisterMR(1, true)
		if err != nil {
			t.Fatal(err)
		}
		fr2, err := p.A.pd.NewFastRegisterMR(1, false) // not initialised for remote access
		if err != nil {
			t.Fatal(err)
		}
		if err := p.A.qp.FastRegister("fr1", fr1, [][]byte{pg[:4096]}, 0, 4096, frBase, OpAllowRemoteRead|OpDefer); err != nil {
			t.Fatalf("FastRegister #1: %v", err)
		}
		err = p.A.qp.FastRegister("fr2", fr2, [][]byte{pg[4096:]}, 0, 4096, frBase+4096, OpAllowRemoteRead|OpDefer)
		status(t, "FastRegister #2", err, StatusAccessViolation)
		want(t, results(t, p.A.icq, 1)[0], StatusSuccess, OpTypeFastRegister, "fr1")
		noResults(t, p.A.icq, quiet)
	})
}

// DEFER: deferred Sends are delivered, in order, once a request without DEFER is posted.
func TestVerbsDeferredSends(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		var rbuf []byte
		p := newPair(t, k, pairOpts{beforeB: func(s *side) { rbuf = s.receives(t, 4, 1024) }})
		src, smr := p.A.region(t, 4096, 0)
		fill(src, 5)
		for i := 0; i < 4; i++ {
			f := OpDefer
			if i == 3 {
				f = 0
			}
			if err := p.A.qp.Send(i, []SGE{smr.SGE(src[i*1024 : i*1024+100+i])}, f); err != nil {
				t.Fatal(err)
			}
		}
		for i, r := range results(t, p.A.icq, 4) {
			want(t, r, StatusSuccess, OpTypeSend, i)
		}
		for i, r := range results(t, p.B.rcq, 4) {
			want(t, r, StatusSuccess, OpTypeReceive, i)
			if n := 100 + i; int(r.BytesTransferred) != n || !bytes.Equal(rbuf[i*1024:i*1024+n], src[i*1024:i*1024+n]) {
				t.Fatalf("receive %d: %d bytes or wrong data", i, r.BytesTransferred)
			}
		}
	})
}

// READ_FENCE: a fenced request starts only after every earlier Read completed: a Read of
// a region followed by a fenced Write to the same region returns the old bytes.
func TestVerbsReadFence(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		p := newPair(t, k, pairOpts{})
		const n = 64 << 10
		tbuf, tmr := p.B.region(t, n, MRAllowRemoteRead|MRAllowRemoteWrite)
		dst, dmr := p.A.region(t, n, MRAllowLocalWrite)
		src, smr := p.A.region(t, n, 0)
		tok := tmr.RemoteToken()
		for round := byte(0); round < 4; round++ {
			fill(tbuf, 10*round)
			old := append([]byte(nil), tbuf...)
			fill(src, 10*round+200)
			if err := p.A.qp.Read("r", []SGE{dmr.SGE(dst)}, tmr.VA(), tok, 0); err != nil {
				t.Fatal(err)
			}
			if err := p.A.qp.Write("w", []SGE{smr.SGE(src)}, tmr.VA(), tok, OpReadFence); err != nil {
				t.Fatal(err)
			}
			rs := results(t, p.A.icq, 2)
			want(t, rs[0], StatusSuccess, OpTypeRead, "r")
			want(t, rs[1], StatusSuccess, OpTypeWrite, "w")
			if !bytes.Equal(dst, old) {
				t.Fatalf("round %d: the Read saw bytes of the fenced Write after it", round)
			}
			if !bytes.Equal(tbuf, src) {
				t.Fatalf("round %d: the fenced Write did not land", round)
			}
		}
	})
}

// Invalidate of a fast-registered MR: remote access works before, and no remote access
// succeeds after (STATUS_ACCESS_VIOLATION at the initiator).
func TestVerbsInvalidateFastRegisteredMR(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		p := newPair(t, k, pairOpts{})
		pg := p.B.pages(t, 1)
		fr, err := p.B.pd.NewFastRegisterMR(1, true)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.B.qp.FastRegister("fr", fr, [][]byte{pg}, 0, 4096, frBase, OpAllowRemoteWrite); err != nil {
			t.Fatal(err)
		}
		tok := fr.RemoteToken()
		want(t, results(t, p.B.icq, 1)[0], StatusSuccess, OpTypeFastRegister, "fr")
		src, smr := p.A.region(t, 64, 0)
		fill(src, 7)
		if err := p.A.qp.Write("w", []SGE{smr.SGE(src)}, frBase+100, tok, 0); err != nil {
			t.Fatal(err)
		}
		want(t, results(t, p.A.icq, 1)[0], StatusSuccess, OpTypeWrite, "w")
		if !bytes.Equal(pg[100:164], src) {
			t.Fatal("write through the fast-registered MR did not land")
		}
		if err := p.B.qp.Invalidate("inv", fr, 0); err != nil {
			t.Fatal(err)
		}
		want(t, results(t, p.B.icq, 1)[0], StatusSuccess, OpTypeInvalidate, "inv")
		before := append([]byte(nil), pg...)
		fill(src, 8)
		if err := p.A.qp.Write("w2", []SGE{smr.SGE(src)}, frBase+100, tok, 0); err != nil {
			t.Fatal(err)
		}
		want(t, results(t, p.A.icq, 1)[0], StatusAccessViolation, OpTypeWrite, "w2")
		if !bytes.Equal(pg, before) {
			t.Fatal("a write after the invalidation changed memory")
		}
	})
}

// Invalidate of a normally registered MR is a malformed request: it completes
// STATUS_INVALID_DEVICE_REQUEST (also with SILENT_SUCCESS: it failed), the QP fails, and
// later requests complete STATUS_CANCELLED. The region itself stays registered.
func TestVerbsInvalidateNormalMR(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		p := newPair(t, k, pairOpts{beforeB: func(s *side) { s.receives(t, 1, 64) }})
		buf, mr := p.A.region(t, 64, MRAllowRemoteRead)
		if err := p.A.qp.Invalidate("inv", mr, OpSilentSuccess); err != nil {
			t.Fatal(err)
		}
		if err := p.A.qp.Send("after", []SGE{mr.SGE(buf[:8])}, 0); err != nil {
			t.Fatal(err)
		}
		rs := results(t, p.A.icq, 2)
		want(t, rs[0], StatusInvalidDeviceRequest, OpTypeInvalidate, "inv")
		want(t, rs[1], StatusCancelled, OpTypeSend, "after")
		if err := mr.Deregister(bg); err != nil {
			t.Fatalf("the MR is no longer registered: %v", err)
		}
	})
}

// SendAndInvalidate: the receive completes as OpTypeReceiveAndInvalidate with the token in
// TypeSpecific; GetResults (non-Ex) still returns the completion; the sender's result is
// OpTypeSend; afterwards remote access with the token fails.
func TestVerbsSendAndInvalidate(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		var rbuf []byte
		p := newPair(t, k, pairOpts{beforeB: func(s *side) { rbuf = s.receives(t, 2, 256) }})
		_, tmr := p.B.region(t, 4096, MRAllowRemoteWrite)
		var toks [2]uint32
		for i := range toks {
			mw, err := p.B.pd.NewMW()
			if err != nil {
				t.Fatal(err)
			}
			if err := p.B.qp.Bind(i, tmr, mw, tmr.VA(), 4096, OpAllowRemoteWrite|OpSilentSuccess); err != nil {
				t.Fatal(err)
			}
			toks[i] = mw.RemoteToken()
		}
		src, smr := p.A.region(t, 256, 0)
		fill(src, 11)
		for i, tok := range toks {
			if err := p.A.qp.SendAndInvalidate(i, []SGE{smr.SGE(src[:100+i])}, 0, tok); err != nil {
				t.Fatal(err)
			}
		}
		for i, r := range results(t, p.A.icq, 2) {
			want(t, r, StatusSuccess, OpTypeSend, i)
		}
		r0 := plainResults(t, p.B.rcq, 1)[0]
		if r0.Status != StatusSuccess || r0.RequestContext != 0 || r0.BytesTransferred != 100 {
			t.Fatalf("GetResults of a ReceiveAndInvalidate: %+v", r0)
		}
		r1 := results(t, p.B.rcq, 1)[0]
		want(t, r1, StatusSuccess, OpTypeReceiveAndInvalidate, 1)
		if r1.TypeSpecific != uint64(toks[1]) || r1.BytesTransferred != 101 || !bytes.Equal(rbuf[256:357], src[:101]) {
			t.Fatalf("ReceiveAndInvalidate %+v, want token %#x and 101 bytes", r1, toks[1])
		}
		for i, tok := range toks {
			if err := p.A.qp.Write(i, []SGE{smr.SGE(src[:8])}, tmr.VA(), tok, 0); err != nil {
				t.Fatal(err)
			}
			st := StatusAccessViolation
			if i > 0 {
				st = StatusCancelled // the first refusal failed the QP
			}
			want(t, results(t, p.A.icq, 1)[0], st, OpTypeWrite, i)
		}
	})
}

// SendAndInvalidate: a later NdkInvalidate of the token the peer invalidated fails (the
// window is no longer bound: STATUS_INVALID_DEVICE_REQUEST).
func TestVerbsInvalidateAfterRemoteInvalidate(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		p := newPair(t, k, pairOpts{beforeB: func(s *side) { s.receives(t, 1, 64) }})
		_, tmr := p.B.region(t, 4096, MRAllowRemoteWrite)
		mw, err := p.B.pd.NewMW()
		if err != nil {
			t.Fatal(err)
		}
		if err := p.B.qp.Bind("bind", tmr, mw, tmr.VA(), 4096, OpAllowRemoteWrite); err != nil {
			t.Fatal(err)
		}
		tok := mw.RemoteToken()
		want(t, results(t, p.B.icq, 1)[0], StatusSuccess, OpTypeBind, "bind")
		src, smr := p.A.region(t, 64, 0)
		if err := p.A.qp.SendAndInvalidate("si", []SGE{smr.SGE(src)}, 0, tok); err != nil {
			t.Fatal(err)
		}
		want(t, results(t, p.A.icq, 1)[0], StatusSuccess, OpTypeSend, "si")
		r := results(t, p.B.rcq, 1)[0]
		want(t, r, StatusSuccess, OpTypeReceiveAndInvalidate, 0)
		if r.TypeSpecific != uint64(tok) {
			t.Fatalf("invalidated token %#x, want %#x", r.TypeSpecific, tok)
		}
		if err := p.B.qp.Invalidate("inv", mw, 0); err != nil {
			t.Fatal(err)
		}
		want(t, results(t, p.B.icq, 1)[0], StatusInvalidDeviceRequest, OpTypeInvalidate, "inv")
	})
}

// SendAndInvalidate with a token the receiver cannot invalidate (a normally registered
// MR's) aborts the connection: the sender's request fails (STATUS_REMOTE_RESOURCES,
// ND_REMOTE_ERROR: the request caused an error on the remote QP), its later requests are
// cancelled, and the receiver's receives complete STATUS_CANCELLED.
func TestVerbsSendAndInvalidateBadToken(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		p := newPair(t, k, pairOpts{beforeB: func(s *side) { s.receives(t, 2, 256) }})
		_, tmr := p.B.region(t, 4096, MRAllowRemoteWrite)
		src, smr := p.A.region(t, 64, 0)
		if err := p.A.qp.SendAndInvalidate("si", []SGE{smr.SGE(src)}, 0, tmr.RemoteToken()); err != nil {
			t.Fatal(err)
		}
		if err := p.A.qp.Send("after", []SGE{smr.SGE(src)}, 0); err != nil {
			t.Fatal(err)
		}
		rs := results(t, p.A.icq, 2)
		want(t, rs[0], StatusRemoteResources, OpTypeSend, "si")
		want(t, rs[1], StatusCancelled, OpTypeSend, "after")
		for i, r := range results(t, p.B.rcq, 2) {
			want(t, r, StatusCancelled, OpTypeReceive, i)
		}
		if st := p.B.qp.tq.State(); st != transport.QPError {
			t.Fatalf("receiver's QP %v, want error (connection aborted)", st)
		}
	})
}

// FastRegister over UMEM pages (in any order): the page rules fail inline and leave the QP
// usable; remote Write and Read at an offset cross the pages; after Invalidate the token
// is refused.
func TestVerbsFastRegisterPages(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		p := newPair(t, k, pairOpts{})
		pg := p.B.pages(t, 4)
		pages := [][]byte{pg[8192:12288], pg[:4096], pg[12288:], pg[4096:8192]}
		fr, err := p.B.pd.NewFastRegisterMR(4, true)
		if err != nil {
			t.Fatal(err)
		}
		frNo, err := p.B.pd.NewFastRegisterMR(4, false)
		if err != nil {
			t.Fatal(err)
		}
		const rw = OpAllowRemoteRead | OpAllowRemoteWrite
		for _, c := range []struct {
			name   string
			mr     *MR
			pages  [][]byte
			fbo    int
			length uint64
			base   uint64
			flags  OpFlags
			st     Status
		}{
			{"FBO of a whole page", fr, pages, 4096, 10, frBase, rw, StatusInvalidParameter},
			{"length past pages*PAGE_SIZE-FBO", fr, pages, 100, 4*4096 - 99, frBase + 100, rw, StatusInvalidParameter},
			{"base VA not FBO + n*PAGE_SIZE", fr, pages, 100, 10, frBase, rw, StatusInvalidParameter},
			{"zero-based VA", fr, pages, 0, 10, 0, rw, StatusInvalidParameter},
			{"page not PAGE_SIZE", fr, [][]byte{pg[:100]}, 0, 10, frBase, rw, StatusInvalidParameter},
			{"more pages than initialised", fr, append(pages[:4:4], pages[0]), 0, 10, frBase, rw, StatusInvalidParameter},
			{"page outside the UMEM", fr, [][]byte{make([]byte, 4096)}, 0, 10, frBase, rw, StatusInvalidParameter},
			{"remote access on an MR initialised without it", frNo, pages, 0, 10, frBase, OpAllowRemoteRead, StatusAccessViolation},
		} {
			status(t, c.name, p.B.qp.FastRegister(c.name, c.mr, c.pages, c.fbo, c.length, c.base, c.flags), c.st)
		}
		noResults(t, p.B.icq, quiet)

		const fbo, length = 100, 4*4096 - 100
		if err := p.B.qp.FastRegister("fr", fr, pages, fbo, length, frBase+fbo, rw); err != nil {
			t.Fatal(err)
		}
		tok := fr.RemoteToken()
		want(t, results(t, p.B.icq, 1)[0], StatusSuccess, OpTypeFastRegister, "fr")
		// registered byte o lives in pages[(fbo+o)/4096] at (fbo+o)%4096
		at := func(o int) byte { return pages[(fbo+o)/4096][(fbo+o)%4096] }

		src, smr := p.A.region(t, 10000, 0)
		fill(src, 13)
		const off = 50
		if err := p.A.qp.Write("w", []SGE{smr.SGE(src)}, frBase+fbo+off, tok, 0); err != nil {
			t.Fatal(err)
		}
		want(t, results(t, p.A.icq, 1)[0], StatusSuccess, OpTypeWrite, "w")
		for i := range src {
			if at(off+i) != src[i] {
				t.Fatalf("registered byte %d: %d, want %d", off+i, at(off+i), src[i])
			}
		}
		dst, dmr := p.A.region(t, length, MRAllowLocalWrite)
		if err := p.A.qp.Read("r", []SGE{dmr.SGE(dst)}, frBase+fbo, tok, 0); err != nil {
			t.Fatal(err)
		}
		want(t, results(t, p.A.icq, 1)[0], StatusSuccess, OpTypeRead, "r")
		for i := range dst {
			if dst[i] != at(i) {
				t.Fatalf("read byte %d: %d, want %d", i, dst[i], at(i))
			}
		}

		if err := p.B.qp.Invalidate("inv", fr, 0); err != nil {
			t.Fatal(err)
		}
		want(t, results(t, p.B.icq, 1)[0], StatusSuccess, OpTypeInvalidate, "inv")
		if err := p.A.qp.Read("r2", []SGE{dmr.SGE(dst[:16])}, frBase+fbo, tok, 0); err != nil {
			t.Fatal(err)
		}
		want(t, results(t, p.A.icq, 1)[0], StatusAccessViolation, OpTypeRead, "r2")
	})
}

// RDMA_READ_LOCAL_INVALIDATE: a successful Read whose first SGE lies in a fast-registered
// MR invalidates that MR (fast-registering it again then succeeds, where a registered one
// is STATUS_DEVICE_BUSY); with a normally registered MR the flag has no effect.
func TestVerbsReadLocalInvalidate(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		p := newPair(t, k, pairOpts{})
		if p.A.a.QueryAdapterInfo().Flags&AdapterRDMAReadLocalInvalidate == 0 {
			t.Fatal("adapter does not report RDMA_READ_LOCAL_INVALIDATE_SUPPORTED")
		}
		tbuf, tmr := p.B.region(t, 4096, MRAllowRemoteRead)
		fill(tbuf, 17)
		pg := p.A.pages(t, 1)
		fr, err := p.A.pd.NewFastRegisterMR(1, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.A.qp.FastRegister("fr", fr, [][]byte{pg}, 0, 4096, frBase, OpAllowLocalWrite); err != nil {
			t.Fatal(err)
		}
		// Registered: a second FastRegister is refused.
		status(t, "FastRegister of a registered MR", p.A.qp.FastRegister("again", fr, [][]byte{pg}, 0, 4096, frBase, OpAllowLocalWrite), StatusDeviceBusy)
		if err := p.A.qp.Read("r", []SGE{fr.SGE(pg[:1024])}, tmr.VA()+8, tmr.RemoteToken(), OpRDMAReadLocalInvalidate); err != nil {
			t.Fatal(err)
		}
		rs := results(t, p.A.icq, 2)
		want(t, rs[0], StatusSuccess, OpTypeFastRegister, "fr")
		want(t, rs[1], StatusSuccess, OpTypeRead, "r")
		if !bytes.Equal(pg[:1024], tbuf[8:1032]) {
			t.Fatal("read bytes differ")
		}
		if err := p.A.qp.FastRegister("fr2", fr, [][]byte{pg}, 0, 4096, frBase, OpAllowLocalWrite); err != nil {
			t.Fatalf("FastRegister after the Read's local invalidate: %v", err)
		}
		want(t, results(t, p.A.icq, 1)[0], StatusSuccess, OpTypeFastRegister, "fr2")

		dst, dmr := p.A.region(t, 64, MRAllowLocalWrite)
		for i := 0; i < 2; i++ {
			if err := p.A.qp.Read(i, []SGE{dmr.SGE(dst)}, tmr.VA(), tmr.RemoteToken(), OpRDMAReadLocalInvalidate); err != nil {
				t.Fatal(err)
			}
			want(t, results(t, p.A.icq, 1)[0], StatusSuccess, OpTypeRead, i)
		}
	})
}

// Write and Read at an offset added to the peer's address reach exactly those bytes.
func TestVerbsRemoteOffset(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		p := newPair(t, k, pairOpts{})
		tbuf, tmr := p.B.region(t, 16384, MRAllowRemoteRead|MRAllowRemoteWrite)
		src, smr := p.A.region(t, 5000, 0)
		dst, dmr := p.A.region(t, 5000, MRAllowLocalWrite)
		fill(src, 21)
		const off = 9000
		if err := p.A.qp.Write("w", []SGE{smr.SGE(src)}, tmr.VA()+off, tmr.RemoteToken(), 0); err != nil {
			t.Fatal(err)
		}
		if err := p.A.qp.Read("r", []SGE{dmr.SGE(dst[:3000]), dmr.SGE(dst[3000:])}, tmr.VA()+off, tmr.RemoteToken(), 0); err != nil {
			t.Fatal(err)
		}
		rs := results(t, p.A.icq, 2)
		want(t, rs[0], StatusSuccess, OpTypeWrite, "w")
		want(t, rs[1], StatusSuccess, OpTypeRead, "r")
		if !bytes.Equal(tbuf[off:off+5000], src) || !bytes.Equal(dst, src) {
			t.Fatal("bytes at the offset differ")
		}
		for i, b := range tbuf[:off] {
			if b != 0 {
				t.Fatalf("byte %d before the offset written", i)
			}
		}
	})
}

// A refused remote access (out of range, a right the region lacks, a stale token):
// STATUS_ACCESS_VIOLATION at the initiator, nothing written, later requests cancelled,
// and the target's pending receives complete STATUS_CANCELLED.
func TestVerbsRemoteAccessViolation(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		for _, c := range []struct {
			name  string
			flags MRFlags
			read  bool
			addr  func(va uint64) uint64
			stale bool
		}{
			{"write past the end", MRAllowRemoteWrite, false, func(va uint64) uint64 { return va + 4096 - 15 }, false},
			{"read before the start", MRAllowRemoteRead, true, func(va uint64) uint64 { return va - 1 }, false},
			{"write without remote write", MRAllowRemoteRead | MRAllowLocalWrite, false, func(va uint64) uint64 { return va }, false},
			{"read without remote read", MRAllowRemoteWrite, true, func(va uint64) uint64 { return va }, false},
			{"stale token", MRAllowRemoteWrite, false, func(va uint64) uint64 { return va }, true},
		} {
			t.Run(c.name, func(t *testing.T) {
				p := newPair(t, k, pairOpts{beforeB: func(s *side) { s.receives(t, 2, 64) }})
				tbuf, tmr := p.B.region(t, 4096, c.flags)
				fill(tbuf, 3)
				tok := tmr.RemoteToken()
				if c.stale {
					if err := tmr.Deregister(bg); err != nil {
						t.Fatal(err)
					}
				}
				before := append([]byte(nil), tbuf...)
				buf, mr := p.A.region(t, 64, MRAllowLocalWrite)
				fill(buf, 99)
				var err error
				if c.read {
					err = p.A.qp.Read("bad", []SGE{mr.SGE(buf[:16])}, c.addr(tmr.VA()), tok, 0)
				} else {
					err = p.A.qp.Write("bad", []SGE{mr.SGE(buf[:16])}, c.addr(tmr.VA()), tok, 0)
				}
				if err != nil {
					t.Fatal(err)
				}
				if err := p.A.qp.Send("after", []SGE{mr.SGE(buf[:16])}, 0); err != nil {
					t.Fatal(err)
				}
				typ := OpTypeWrite
				if c.read {
					typ = OpTypeRead
				}
				rs := results(t, p.A.icq, 2)
				want(t, rs[0], StatusAccessViolation, typ, "bad")
				want(t, rs[1], StatusCancelled, OpTypeSend, "after")
				for i, r := range results(t, p.B.rcq, 2) {
					want(t, r, StatusCancelled, OpTypeReceive, i)
				}
				if !bytes.Equal(tbuf, before) {
					t.Fatal("a refused access changed the target's memory")
				}
			})
		}
	})
}

// Completions of one queue come in posting order, whatever the verbs (Send, Write, Read,
// Bind); after an error completion every later request completes STATUS_CANCELLED, and
// the target's remaining receives too.
func TestVerbsCompletionOrder(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		const n = 16
		p := newPair(t, k, pairOpts{beforeB: func(s *side) { s.receives(t, n, 4096) }})
		tbuf, tmr := p.B.region(t, n*4096, MRAllowRemoteRead|MRAllowRemoteWrite)
		fill(tbuf, 1)
		src, smr := p.A.region(t, n*4096, MRAllowLocalWrite)
		fill(src, 2)
		dst, dmr := p.A.region(t, n*4096, MRAllowLocalWrite)
		tok := tmr.RemoteToken()
		kinds := []OpType{OpTypeSend, OpTypeWrite, OpTypeRead, OpTypeBind}
		post := func(i int, typ OpType, tok uint32) {
			t.Helper()
			j := i % n // the second round reuses the first's buffers
			b := src[j*4096 : j*4096+1000+j]
			var err error
			switch typ {
			case OpTypeSend:
				err = p.A.qp.Send(i, []SGE{smr.SGE(b)}, 0)
			case OpTypeWrite:
				err = p.A.qp.Write(i, []SGE{smr.SGE(b)}, tmr.VA()+uint64(j*4096), tok, 0)
			case OpTypeRead:
				err = p.A.qp.Read(i, []SGE{dmr.SGE(dst[j*4096 : (j+1)*4096])}, tmr.VA()+uint64(j*4096), tok, 0)
			case OpTypeBind:
				var mw *MW
				if mw, err = p.A.pd.NewMW(); err == nil {
					err = p.A.qp.Bind(i, smr, mw, smr.VA()+uint64(j*4096), 4096, OpAllowRemoteRead)
				}
			}
			if err != nil {
				t.Fatalf("post %d (%v): %v", i, typ, err)
			}
		}
		for i := 0; i < n; i++ {
			post(i, kinds[i%4], tok)
		}
		for i, r := range results(t, p.A.icq, n) {
			want(t, r, StatusSuccess, kinds[i%4], i)
		}
		sends := 0
		for i := 0; i < n; i += 4 {
			sends++
			if i+2 < n && !bytes.Equal(dst[(i+2)*4096:(i+3)*4096], tbuf[(i+2)*4096:(i+3)*4096]) {
				t.Fatalf("read %d bytes differ", i+2)
			}
		}
		for i, r := range results(t, p.B.rcq, sends) {
			want(t, r, StatusSuccess, OpTypeReceive, i)
		}

		// A refused Write in the middle: it fails, everything posted after it is cancelled.
		post(n, OpTypeWrite, tok^0x8000_0000)
		for i := n + 1; i < 2*n; i++ {
			post(i, kinds[i%4], tok)
		}
		rs := results(t, p.A.icq, n)
		want(t, rs[0], StatusAccessViolation, OpTypeWrite, n)
		for i, r := range rs[1:] {
			want(t, r, StatusCancelled, kinds[(n+1+i)%4], n+1+i)
		}
		for i, r := range results(t, p.B.rcq, n-sends) {
			want(t, r, StatusCancelled, OpTypeReceive, sends+i)
		}
	})
}

// RNR: a Send that finds no receive posted completes STATUS_IO_TIMEOUT once the RNR
// budget runs out (budget and delays lowered to keep the test short).
func TestVerbsRNRTimeout(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		p := newPair(t, k, pairOpts{opts: engineOpts(func(c *transport.Config) {
			c.RNRTimeout, c.RNRDelay, c.CreditTimeout = 2*time.Millisecond, 50*time.Microsecond, time.Millisecond
		})})
		src, smr := p.A.region(t, 64, 0)
		if err := p.A.qp.Send("rnr", []SGE{smr.SGE(src)}, 0); err != nil {
			t.Fatal(err)
		}
		if err := p.A.qp.Send("after", []SGE{smr.SGE(src)}, 0); err != nil {
			t.Fatal(err)
		}
		rs := results(t, p.A.icq, 2)
		want(t, rs[0], StatusIOTimeout, OpTypeSend, "rnr")
		want(t, rs[1], StatusCancelled, OpTypeSend, "after")
	})
}

// Transport timeout: with the peer's adapter gone without a word, a request completes
// STATUS_IO_TIMEOUT once its retransmission budget runs out.
func TestVerbsTransportTimeout(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		p := newPair(t, k, pairOpts{opts: engineOpts(func(c *transport.Config) {
			c.RetryTimeout = 20 * time.Millisecond
			c.RTO = ack.RTOConfig{Initial: time.Millisecond, Min: 200 * time.Microsecond, Max: 4 * time.Millisecond}
		})})
		_, tmr := p.B.region(t, 4096, MRAllowRemoteWrite)
		src, smr := p.A.region(t, 64, 0)
		vanish(p.B.a)
		if err := p.A.qp.Write("w", []SGE{smr.SGE(src)}, tmr.VA(), tmr.RemoteToken(), 0); err != nil {
			t.Fatal(err)
		}
		if err := p.A.qp.Send("after", []SGE{smr.SGE(src)}, 0); err != nil {
			t.Fatal(err)
		}
		rs := results(t, p.A.icq, 2)
		want(t, rs[0], StatusIOTimeout, OpTypeWrite, "w")
		want(t, rs[1], StatusCancelled, OpTypeSend, "after")
	})
}

// A receive too small for the incoming Send: STATUS_DATA_OVERRUN at the receiver,
// STATUS_DATA_ERROR at the sender; both QPs fail.
func TestVerbsReceiveTooSmall(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		p := newPair(t, k, pairOpts{beforeB: func(s *side) { s.receives(t, 2, 16) }})
		src, smr := p.A.region(t, 100, 0)
		if err := p.A.qp.Send("big", []SGE{smr.SGE(src)}, 0); err != nil {
			t.Fatal(err)
		}
		want(t, results(t, p.A.icq, 1)[0], StatusDataError, OpTypeSend, "big")
		rs := results(t, p.B.rcq, 2)
		want(t, rs[0], StatusDataOverrun, OpTypeReceive, 0)
		want(t, rs[1], StatusCancelled, OpTypeReceive, 1)
	})
}

// An SGE outside its region (a wrong token, bytes beyond the region, a Read into memory
// without local write) completes STATUS_ACCESS_VIOLATION in its turn, and the QP fails.
func TestVerbsLocalSGEViolation(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		for _, c := range []struct {
			name string
			post func(p *pair, buf []byte, mr *MR, tmr *MR) error
			typ  OpType
		}{
			{"wrong token", func(p *pair, buf []byte, mr, _ *MR) error {
				return p.A.qp.Send("bad", []SGE{{Buf: buf[:16], Token: mr.LocalToken() ^ 0x8000_0000}}, 0)
			}, OpTypeSend},
			{"beyond the region", func(p *pair, buf []byte, mr, tmr *MR) error {
				return p.A.qp.Write("bad", []SGE{mr.SGE(buf[512:2048])}, tmr.VA(), tmr.RemoteToken(), 0)
			}, OpTypeWrite},
			{"read into a region without local write", func(p *pair, buf []byte, mr, tmr *MR) error {
				return p.A.qp.Read("bad", []SGE{mr.SGE(buf[:16])}, tmr.VA(), tmr.RemoteToken(), 0)
			}, OpTypeRead},
		} {
			t.Run(c.name, func(t *testing.T) {
				p := newPair(t, k, pairOpts{})
				_, tmr := p.B.region(t, 4096, MRAllowRemoteRead|MRAllowRemoteWrite)
				buf := p.A.buf(t, 4096)
				mr, err := p.A.pd.RegisterMR(buf[:1024], 0)
				if err != nil {
					t.Fatal(err)
				}
				if err := c.post(p, buf, mr, tmr); err != nil {
					t.Fatalf("post: %v (the failure belongs in the completion)", err)
				}
				if err := p.A.qp.Write("after", []SGE{mr.SGE(buf[:16])}, tmr.VA(), tmr.RemoteToken(), 0); err != nil {
					t.Fatal(err)
				}
				rs := results(t, p.A.icq, 2)
				want(t, rs[0], StatusAccessViolation, c.typ, "bad")
				want(t, rs[1], StatusCancelled, OpTypeWrite, "after")
			})
		}
	})
}

// concurrentPosting posts Writes on p.A from one goroutine while disturb (a Flush or a
// Connector.Close) runs on this one, and checks NDKPI Work Request Posting Requirements'
// promise: every post that returned success gets exactly one completion, in posting order,
// successes before the first cancellation. The poster keeps fewer results outstanding than
// the CQ holds.
func concurrentPosting(t *testing.T, p *pair, disturb func(), inlineErr Status) {
	t.Helper()
	_, tmr := p.B.region(t, 4096, MRAllowRemoteWrite)
	src, smr := p.A.region(t, 64, 0)
	var consumed, posted atomic.Int64
	var stop atomic.Bool
	done := make(chan error, 1)
	go func() {
		for i := 0; i < 200_000 && !stop.Load(); i++ {
			if posted.Load()-consumed.Load() >= 512 {
				runtime.Gosched()
				continue
			}
			err := p.A.qp.Write(int(posted.Load()), []SGE{smr.SGE(src)}, tmr.VA(), tmr.RemoteToken(), 0)
			switch {
			case err == nil:
				posted.Add(1)
			case errors.Is(err, StatusInsufficientResources), inlineErr != 0 && errors.Is(err, inlineErr):
				runtime.Gosched()
			default:
				done <- err
				return
			}
		}
		done <- nil
	}()
	buf := make([]ResultEx, 64)
	disturbed, cancelled := false, false
	var got int64
	var posterDone bool
	deadline := time.Now().Add(20 * time.Second)
	for !posterDone || got < posted.Load() {
		if time.Now().After(deadline) {
			stop.Store(true)
			t.Fatalf("%d completions for %d posts after 20 s", got, posted.Load())
		}
		if !posterDone {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("post: %v", err)
				}
				posterDone = true
			default:
			}
		}
		n := p.A.icq.GetResultsEx(buf)
		for _, r := range buf[:n] {
			if r.RequestContext != int(got) {
				t.Fatalf("completion %d has context %v", got, r.RequestContext)
			}
			switch r.Status {
			case StatusSuccess:
				if cancelled {
					t.Fatalf("completion %d succeeded after a cancelled one", got)
				}
			case StatusCancelled:
				cancelled = true
			default:
				t.Fatalf("completion %d: %v", got, r.Status)
			}
			got++
		}
		consumed.Store(got)
		if !disturbed && got >= 50 {
			disturb()
			disturbed = true
		}
		if disturbed && got >= 2000 {
			stop.Store(true)
		}
		if n == 0 {
			time.Sleep(20 * time.Microsecond)
		}
	}
	if !disturbed {
		t.Fatalf("only %d completions: the QP was never disturbed", got)
	}
	noResults(t, p.A.icq, quiet)
	if got != posted.Load() {
		t.Fatalf("%d completions for %d posts", got, posted.Load())
	}
}

// NDKPI Work Request Posting Requirements: NdkFlush concurrent with posting on the same QP
// is safe, and every request posted gets exactly one completion (run under -race).
func TestVerbsFlushConcurrentWithPosting(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		p := newPair(t, k, pairOpts{qp: QPConfig{InitiatorQueueDepth: 64}})
		concurrentPosting(t, p, p.A.qp.Flush, 0)
	})
}

// NDKPI Work Request Posting Requirements: closing the QP's connector concurrently with
// posting is safe; posts after the disconnect fail inline (STATUS_CONNECTION_INVALID),
// every one that succeeded gets exactly one completion (run under -race).
func TestVerbsConnectorCloseConcurrentWithPosting(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		p := newPair(t, k, pairOpts{qp: QPConfig{InitiatorQueueDepth: 64}})
		closed := make(chan error, 1)
		concurrentPosting(t, p, func() {
			go func() {
				ctx, cancel := context.WithTimeout(bg, 10*time.Second)
				defer cancel()
				closed <- p.A.conn.Close(ctx)
			}()
		}, StatusConnectionInvalid)
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
	})
}

// QueryAdapterInfo's limits are enforced: a QP deeper than MaxInitiatorQueueDepth or
// MaxReceiveQueueDepth, with more SGEs than MaxInitiatorRequestSge or MaxReceiveRequestSge,
// or more inline data than MaxInlineDataSize, and a CQ deeper than MaxCqDepth, are refused
// with STATUS_INVALID_PARAMETER; a request with more SGEs than its QP allows too.
func TestVerbsAdapterLimits(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		p := newPair(t, k, pairOpts{qp: QPConfig{MaxInitiatorSGE: 2, MaxReceiveSGE: 2}})
		a := p.A.a
		info := a.QueryAdapterInfo()
		_, err := a.NewCQ(int(info.MaxCqDepth)+1, nil)
		status(t, "CQ over MaxCqDepth", err, StatusInvalidParameter)
		cq, err := a.NewCQ(16, nil)
		if err != nil {
			t.Fatal(err)
		}
		for name, cfg := range map[string]QPConfig{
			"initiator depth over MaxInitiatorQueueDepth": {InitiatorQueueDepth: int(info.MaxInitiatorQueueDepth) + 1},
			"receive depth over MaxReceiveQueueDepth":     {ReceiveQueueDepth: int(info.MaxReceiveQueueDepth) + 1},
			"SGEs over MaxInitiatorRequestSge":            {MaxInitiatorSGE: int(info.MaxInitiatorRequestSge) + 1},
			"SGEs over MaxReceiveRequestSge":              {MaxReceiveSGE: int(info.MaxReceiveRequestSge) + 1},
			"inline over MaxInlineDataSize":               {InlineDataSize: int(info.MaxInlineDataSize) + 1},
		} {
			cfg.ReceiveCQ, cfg.InitiatorCQ = cq, cq
			_, err := p.A.pd.NewQP(cfg)
			status(t, name, err, StatusInvalidParameter)
		}
		buf, mr := p.A.region(t, 64, MRAllowLocalWrite)
		_, tmr := p.B.region(t, 64, MRAllowRemoteWrite)
		sgl := []SGE{mr.SGE(buf[:8]), mr.SGE(buf[8:16]), mr.SGE(buf[16:24])}
		status(t, "Send with 3 SGEs on a 2-SGE QP", p.A.qp.Send(1, sgl, 0), StatusInvalidParameter)
		status(t, "Write with 3 SGEs on a 2-SGE QP", p.A.qp.Write(1, sgl, tmr.VA(), tmr.RemoteToken(), 0), StatusInvalidParameter)
		status(t, "Receive with 3 SGEs on a 2-SGE QP", p.A.qp.Receive(1, sgl), StatusInvalidParameter)
		noResults(t, p.A.icq, quiet)
		// The refusals left the QP usable.
		if err := p.A.qp.Write("ok", sgl[:2], tmr.VA(), tmr.RemoteToken(), 0); err != nil {
			t.Fatal(err)
		}
		want(t, results(t, p.A.icq, 1)[0], StatusSuccess, OpTypeWrite, "ok")
	})
}

// The adapter's QP limit (Options.MaxQPs, reported as AdapterInfo.MaxQPs) is enforced: one
// QP over it is refused with STATUS_INSUFFICIENT_RESOURCES and changes nothing; closing a
// QP makes room for another.
func TestVerbsQPLimit(t *testing.T) {
	opts := DefaultOptions()
	opts.MaxQPs = 3
	a, _ := linkKinds()[0].open(t, opts)
	if n := a.QueryAdapterInfo().MaxQPs; n != 3 {
		t.Fatalf("AdapterInfo.MaxQPs %d, want 3", n)
	}
	pd, err := a.NewPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := a.NewCQ(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := QPConfig{ReceiveCQ: cq, InitiatorCQ: cq}
	var qps []*QP
	for i := 0; i < 3; i++ {
		q, err := pd.NewQP(cfg)
		if err != nil {
			t.Fatalf("QP %d of 3: %v", i, err)
		}
		qps = append(qps, q)
	}
	_, err = pd.NewQP(cfg)
	status(t, "a fourth QP", err, StatusInsufficientResources)
	if err := qps[0].Close(bg); err != nil {
		t.Fatal(err)
	}
	if _, err := pd.NewQP(cfg); err != nil {
		t.Fatalf("a QP after closing one: %v", err)
	}
	d, _ := linkKinds()[0].open(t, DefaultOptions())
	if n := d.QueryAdapterInfo().MaxQPs; n != transport.DefaultMaxQPs {
		t.Fatalf("default AdapterInfo.MaxQPs %d, want %d", n, transport.DefaultMaxQPs)
	}
}
