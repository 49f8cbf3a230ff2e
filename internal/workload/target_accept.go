package workload

import (
	"context"
	"fmt"
	"time"

	"github.com/xdpndk/xdpndk/ndk"
)

// connectRequest answers a connection request: a control connection opens a session, a
// data connection joins one.
func (t *Target) connectRequest(ctx context.Context, c *ndk.Connector) {
	var pd [helloLen]byte
	_, _, n, err := c.GetConnectionData(pd[:])
	var h hello
	if err == nil {
		h, err = decodeHello(pd[:min(n, len(pd))], t.cfg)
	}
	if err != nil {
		t.reject(c)
		return
	}
	s := t.sessions[h.session]
	if h.role == roleControl {
		if s != nil {
			t.reject(c)
			return
		}
		s, err = t.newSession(c, h)
		if err != nil {
			t.fail(err)
			t.reject(c)
			return
		}
		t.sessions[h.session] = s
		t.accepting++
		go func() {
			actx, cancel := context.WithTimeout(ctx, acceptTimeout)
			defer cancel()
			err := c.Accept(actx, s.ctl.qp, 0, 0, nil, func() { s.ctl.gone.Store(true) })
			t.accepted <- acceptDone{ctl: s.ctl, err: err}
		}()
		return
	}
	if s == nil || h.seed != s.h.seed || h.qps != s.h.qps || h.maxSize != s.h.maxSize ||
		h.outstanding != s.h.outstanding || h.windows != s.h.windows || h.readLen != s.h.readLen ||
		s.conns[h.conn] != nil {
		t.reject(c)
		return
	}
	tc, err := s.newConn(c, h)
	if err != nil {
		t.fail(err)
		t.reject(c)
		return
	}
	s.conns[h.conn] = tc
	priv := tc.lay.encode()
	t.accepting++
	go func() {
		actx, cancel := context.WithTimeout(ctx, acceptTimeout)
		defer cancel()
		err := c.Accept(actx, tc.qp, min(int(h.outstanding), 64), 0, priv, func() { tc.gone.Store(true) })
		t.accepted <- acceptDone{data: tc, err: err}
	}()
}

// acceptTimeout bounds an Accept.
const acceptTimeout = 10 * time.Second

func (t *Target) reject(c *ndk.Connector) {
	t.ctr.rejected.Add(1)
	_ = c.Reject(nil)
}

// acceptFinished marks a connection up, or tears down what failed to connect.
func (t *Target) acceptFinished(d acceptDone) {
	if d.ctl != nil {
		s := d.ctl.s
		if d.err != nil {
			t.fail(fmt.Errorf("accept control connection: %w", d.err))
			t.closeSession(s)
			return
		}
		d.ctl.up = true
		t.ctr.sessions.Add(1)
		return
	}
	c := d.data
	if d.err != nil {
		t.fail(fmt.Errorf("accept data connection %d: %w", c.idx, d.err))
		c.s.conns[c.idx] = nil
		c.close()
		return
	}
	c.up = true
	t.ctr.conns.Add(1)
	for _, w := range c.wins {
		c.bind(w)
	}
}

// newSession sets up the control connection's QP, CQs and buffers, receives posted.
func (t *Target) newSession(c *ndk.Connector, h hello) (*session, error) {
	pd, err := t.a.NewPD()
	if err != nil {
		return nil, err
	}
	s := &session{t: t, h: h, pd: pd, conns: make([]*tconn, h.qps)}
	nmsg := ctlMessages(int(h.qps), int(h.windows))
	nrecv, nsend := 2*nmsg, 2*nmsg
	ctl := &tctl{s: s, c: c, rslots: make([]ctlSlot, nrecv), sslots: make([]ctlSlot, nsend)}
	s.ctl = ctl
	if ctl.rcq, err = t.a.NewCQ(nrecv+4, nil); err != nil {
		return nil, err
	}
	if ctl.icq, err = t.a.NewCQ(nsend+4, nil); err != nil {
		ctl.close()
		return nil, err
	}
	if ctl.qp, err = pd.NewQP(ndk.QPConfig{ReceiveCQ: ctl.rcq, InitiatorCQ: ctl.icq,
		ReceiveQueueDepth: nrecv, InitiatorQueueDepth: nsend, MaxReceiveSGE: 1, MaxInitiatorSGE: 1}); err != nil {
		ctl.close()
		return nil, err
	}
	if ctl.buf, err = newBuffer(t.a, pd, (nrecv+nsend)*msgLen, false, ndk.MRAllowLocalWrite); err != nil {
		ctl.close()
		return nil, err
	}
	for i := range ctl.rslots {
		ctl.rslots[i].i = i
		if err := ctl.qp.Receive(&ctl.rslots[i], []ndk.SGE{ctl.buf.sge(i*msgLen, msgLen)}); err != nil {
			ctl.close()
			return nil, err
		}
	}
	for i := range ctl.sslots {
		ctl.sslots[i].i = nrecv + i
		ctl.sfree = append(ctl.sfree, i)
	}
	return s, nil
}

// newConn sets up a data connection: its region (write slots, windows' ranges, the read
// area written with its pattern), receives, windows.
func (s *session) newConn(c *ndk.Connector, h hello) (tc *tconn, err error) {
	a := s.t.a
	tc = &tconn{s: s, idx: int(h.conn), c: c, reportWant: -1}
	defer func() {
		if err != nil {
			tc.close()
		}
	}()
	size := int(h.maxSize)
	recvDepth := min(2*int(h.outstanding)+2, 4096)
	if tc.rcq, err = a.NewCQ(recvDepth+4, nil); err != nil {
		return tc, err
	}
	if tc.icq, err = a.NewCQ(2*int(h.windows)+8, nil); err != nil {
		return tc, err
	}
	if tc.qp, err = s.pd.NewQP(ndk.QPConfig{ReceiveCQ: tc.rcq, InitiatorCQ: tc.icq,
		ReceiveQueueDepth: recvDepth, InitiatorQueueDepth: 2*int(h.windows) + 4, MaxReceiveSGE: 1, MaxInitiatorSGE: 1}); err != nil {
		return tc, err
	}
	umem := useUMEM(s.t.cfg.Memory, tc.idx, false)
	slots := int(h.outstanding)
	regionLen := (slots+int(h.windows))*size + int(h.readLen)
	if tc.region, err = newBuffer(a, s.pd, regionLen, umem, ndk.MRAllowRemoteWrite|ndk.MRAllowRemoteRead); err != nil {
		return tc, err
	}
	readOff := (slots + int(h.windows)) * size
	fillStream(tc.region.b[readOff:], readKey(h.seed, tc.idx), 0)
	tc.lay = layout{va: tc.region.mr.VA(), length: uint64(regionLen), token: tc.region.mr.RemoteToken(),
		slots: uint16(slots), slotSize: h.maxSize, winOff: uint64(slots * size), windows: h.windows,
		readOff: uint64(readOff), readLen: h.readLen}
	if tc.recv, err = newBuffer(a, s.pd, recvDepth*size, !umem, ndk.MRAllowLocalWrite); err != nil {
		return tc, err
	}
	tc.rslots = make([]trecv, recvDepth)
	for i := range tc.rslots {
		tc.rslots[i] = trecv{c: tc, i: i}
		if err = tc.repost(i); err != nil {
			return tc, err
		}
	}
	tc.lay.recvs = uint16(recvDepth)
	tc.announced = tc.posted
	for i := 0; i < int(h.windows); i++ {
		mw, err := s.pd.NewMW()
		if err != nil {
			return tc, err
		}
		tc.wins = append(tc.wins, &twin{c: tc, i: i, mw: mw, va: tc.lay.va + tc.lay.winOff + uint64(i*size)})
	}
	return tc, nil
}

func (c *tconn) repost(i int) error {
	size := int(c.lay.slotSize)
	if err := c.qp.Receive(&c.rslots[i], []ndk.SGE{c.recv.sge(i*size, size)}); err != nil {
		return err
	}
	c.posted++
	return nil
}
