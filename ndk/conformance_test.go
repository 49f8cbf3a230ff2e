package ndk

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

// Conformance: each test states the NDKPI rule it checks and runs over every link kind.

// Posting on a QP that is not connected returns STATUS_CONNECTION_INVALID; receives may be
// posted before connecting.
func TestConnectionInvalid(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		a, _ := k.open(t, DefaultOptions())
		pd, _ := a.NewPD()
		cq, _ := a.NewCQ(16, nil)
		qp, err := pd.NewQP(QPConfig{ReceiveCQ: cq, InitiatorCQ: cq})
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 64)
		mr, err := pd.RegisterMR(b, MRAllowLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		mw, _ := pd.NewMW()
		for name, post := range map[string]func() error{
			"send":       func() error { return qp.Send(1, []SGE{mr.SGE(b)}, 0) },
			"write":      func() error { return qp.Write(1, []SGE{mr.SGE(b)}, 0x1000, 1, 0) },
			"read":       func() error { return qp.Read(1, []SGE{mr.SGE(b)}, 0x1000, 1, 0) },
			"bind":       func() error { return qp.Bind(1, mr, mw, mr.VA(), 8, OpAllowRemoteRead) },
			"invalidate": func() error { return qp.Invalidate(1, mw, 0) },
		} {
			if err := post(); !errors.Is(err, StatusConnectionInvalid) {
				t.Errorf("%s before connect: %v, want STATUS_CONNECTION_INVALID", name, err)
			}
		}
		if err := qp.Receive(1, []SGE{mr.SGE(b)}); err != nil {
			t.Errorf("receive before connect: %v", err)
		}
	})
}

// Send/Receive: bytes arrive exactly, results carry the QP context, the request context,
// the type and (receives) the byte count, in posting order.
func TestSendReceive(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		const n = 32
		var rbuf []byte
		var rmr *MR
		p := newPair(t, k, pairOpts{qp: QPConfig{Context: "qp"}, beforeB: func(s *side) {
			rbuf, rmr = s.region(t, n*4096, MRAllowLocalWrite)
			for i := 0; i < n; i++ {
				if err := s.qp.Receive(i, []SGE{rmr.SGE(rbuf[i*4096 : (i+1)*4096])}); err != nil {
					t.Fatal(err)
				}
			}
		}})
		sbuf, smr := p.A.region(t, n*4096, 0)
		for i := range sbuf {
			sbuf[i] = byte(i * 7)
		}
		for i := 0; i < n; i++ {
			size := 1 + i*127
			if err := p.A.qp.Send(i, []SGE{smr.SGE(sbuf[i*4096 : i*4096+size])}, 0); err != nil {
				t.Fatal(err)
			}
		}
		for i, r := range results(t, p.A.icq, n) {
			want(t, r, StatusSuccess, OpTypeSend, i)
			if r.QPContext != "qp" {
				t.Fatalf("QP context %v", r.QPContext)
			}
		}
		for i, r := range results(t, p.B.rcq, n) {
			want(t, r, StatusSuccess, OpTypeReceive, i)
			size := 1 + i*127
			if r.BytesTransferred != uint32(size) || !bytes.Equal(rbuf[i*4096:i*4096+size], sbuf[i*4096:i*4096+size]) {
				t.Fatalf("receive %d: %d bytes, data equal %v", i, r.BytesTransferred, bytes.Equal(rbuf[i*4096:i*4096+size], sbuf[i*4096:i*4096+size]))
			}
		}
	})
}

// Bind and Write/Read through a window: the token works right after Bind returns, inside
// the window's range and rights; outside them the initiator gets STATUS_ACCESS_VIOLATION,
// nothing is written, the target's pending receives complete STATUS_CANCELLED.
func TestWindowWriteRead(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		p := newPair(t, k, pairOpts{})
		tbuf, tmr := p.B.region(t, 8192, MRAllowLocalWrite)
		mw, err := p.B.pd.NewMW()
		if err != nil {
			t.Fatal(err)
		}
		if err := p.B.qp.Bind("bind", tmr, mw, tmr.VA()+1024, 4096, OpAllowRemoteRead|OpAllowRemoteWrite); err != nil {
			t.Fatal(err)
		}
		tok := mw.RemoteToken() // usable now, before the bind completes
		want(t, results(t, p.B.icq, 1)[0], StatusSuccess, OpTypeBind, "bind")

		src, smr := p.A.region(t, 4096, MRAllowLocalWrite)
		for i := range src {
			src[i] = byte(i)
		}
		if err := p.A.qp.Write("w", []SGE{smr.SGE(src[:3000])}, tmr.VA()+1024+100, tok, 0); err != nil {
			t.Fatal(err)
		}
		want(t, results(t, p.A.icq, 1)[0], StatusSuccess, OpTypeWrite, "w")
		if !bytes.Equal(tbuf[1124:1124+3000], src[:3000]) {
			t.Fatal("written bytes differ")
		}
		dst, dmr := p.A.region(t, 4096, MRAllowLocalWrite)
		if err := p.A.qp.Read("r", []SGE{dmr.SGE(dst)}, tmr.VA()+1024, tok, 0); err != nil {
			t.Fatal(err)
		}
		want(t, results(t, p.A.icq, 1)[0], StatusSuccess, OpTypeRead, "r")
		if !bytes.Equal(dst, tbuf[1024:1024+4096]) {
			t.Fatal("read bytes differ")
		}

		// One byte past the window: refused, nothing written, the target's receive cancelled.
		rb, rmr := p.B.region(t, 64, MRAllowLocalWrite)
		if err := p.B.qp.Receive("recv", []SGE{rmr.SGE(rb)}); err != nil {
			t.Fatal(err)
		}
		before := append([]byte(nil), tbuf...)
		if err := p.A.qp.Write("bad", []SGE{smr.SGE(src[:16])}, tmr.VA()+1024+4096-15, tok, 0); err != nil {
			t.Fatal(err)
		}
		if err := p.A.qp.Send("after", []SGE{smr.SGE(src[:16])}, 0); err != nil {
			t.Fatal(err)
		}
		rs := results(t, p.A.icq, 2)
		want(t, rs[0], StatusAccessViolation, OpTypeWrite, "bad")
		want(t, rs[1], StatusCancelled, OpTypeSend, "after")
		want(t, results(t, p.B.rcq, 1)[0], StatusCancelled, OpTypeReceive, "recv")
		if !bytes.Equal(before, tbuf) {
			t.Fatal("a refused write changed memory")
		}
	})
}

// Invalidate of a window: afterwards the peer's access fails with
// STATUS_ACCESS_VIOLATION.
func TestInvalidateWindow(t *testing.T) {
	forEachLink(t, func(t *testing.T, k linkKind) {
		p := newPair(t, k, pairOpts{})
		_, tmr := p.B.region(t, 4096, MRAllowLocalWrite)
		mw, _ := p.B.pd.NewMW()
		if err := p.B.qp.Bind(1, tmr, mw, tmr.VA(), 4096, OpAllowRemoteWrite); err != nil {
			t.Fatal(err)
		}
		tok := mw.RemoteToken()
		if err := p.B.qp.Invalidate(2, mw, 0); err != nil {
			t.Fatal(err)
		}
		rs := results(t, p.B.icq, 2)
		want(t, rs[0], StatusSuccess, OpTypeBind, 1)
		want(t, rs[1], StatusSuccess, OpTypeInvalidate, 2)
		src, smr := p.A.region(t, 64, 0)
		if err := p.A.qp.Write(3, []SGE{smr.SGE(src)}, tmr.VA(), tok, 0); err != nil {
			t.Fatal(err)
		}
		want(t, results(t, p.A.icq, 1)[0], StatusAccessViolation, OpTypeWrite, 3)
	})
}

var bg = context.Background()
