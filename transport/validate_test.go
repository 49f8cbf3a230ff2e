package transport_test

import (
	"context"
	"math"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/memreg"

	"github.com/xdpndk/xdpndk/transport/link"

	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/simlink"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// Field validation: every value a peer sends is checked before it is used. A connection
// request or reply with a field out of range is refused with a ConnReject (RejectInvalid);
// a Read or Write longer than a message may be is refused with an invalid-request NAK; an
// RNR NAK cannot park a request for longer than MaxRNRDelay.

// valRequest is a ConnRequest for service 5 right in every field.
func valRequest(connID uint64) wire.Packet {
	return wire.Packet{Header: wire.Header{Opcode: wire.OpConnRequest, TS: 1},
		CM: wire.CMExt{ServiceID: 5, ConnID: connID, SrcQPN: 7, InitialPSN: 1, MaxPayload: semMaxPayload, IRD: 4, ORD: 4, DataPort: 50000}}
}

// valReply is a ConnReply to request req (from the QP it names) right in every field.
func valReply(req wire.CMExt) wire.Packet {
	const cookie = 0xc00c1e
	return wire.Packet{Header: wire.Header{Opcode: wire.OpConnReply, DestQPN: req.SrcQPN, Cookie: cookie, TS: 1},
		CM: wire.CMExt{ServiceID: req.ServiceID, ConnID: req.ConnID, SrcQPN: 9, InitialPSN: 100, Cookie: cookie,
			MaxPayload: semMaxPayload, IRD: 4, ORD: 4, DataPort: 50001}}
}

// valCase is a change to a ConnRequest or ConnReply and whether the result is valid.
type valCase struct {
	name string
	edit func(p *wire.Packet)
	ok   bool
}

// valFieldCases are the values both a request and a reply are checked for.
func valFieldCases() []valCase {
	mp := func(v int) func(p *wire.Packet) { return func(p *wire.Packet) { p.CM.MaxPayload = uint16(v) } }
	return []valCase{
		{"MaxPayload 0", mp(0), false},
		{"MaxPayload 48", mp(48), false},
		{"MaxPayload floor-1", mp(wire.MinMaxPayload - 1), false},
		{"MaxPayload floor", mp(wire.MinMaxPayload), true},
		{"MaxPayload ceiling", mp(wire.MaxMaxPayload), true},
		{"MaxPayload ceiling+1", mp(wire.MaxMaxPayload + 1), false},
		{"MaxPayload 65535", mp(math.MaxUint16), false},
		{"SrcQPN 0", func(p *wire.Packet) { p.CM.SrcQPN = 0 }, false},
		{"DataPort 0", func(p *wire.Packet) { p.CM.DataPort = 0 }, false},
	}
}

// valRejects returns the ConnRejects raw host r received.
func valRejects(r *semNode) []semRawMsg {
	var out []semRawMsg
	for _, m := range r.rx {
		if m.op == wire.OpConnReject {
			out = append(out, m)
		}
	}
	return out
}

// valExpectRejects checks that r received exactly n ConnRejects, each for connID with
// reason, from from.
func valExpectRejects(t *testing.T, r *semNode, n int, connID uint64, reason uint16, from netip.AddrPort) {
	t.Helper()
	rej := valRejects(r)
	if len(rej) != n {
		t.Fatalf("%d ConnRejects, want %d", len(rej), n)
	}
	for _, m := range rej {
		if m.cm.ConnID != connID || m.cm.Reason != reason || m.from != from {
			t.Fatalf("ConnReject for ConnID %#x reason %d from %v, want %#x reason %d from %v", m.cm.ConnID, m.cm.Reason, m.from, connID, reason, from)
		}
	}
}

func newValWorld(t *testing.T) *semWorld {
	return newSemWorld(t, simlink.Config{Seed: 1, Default: simlink.Impairments{Latency: 5 * time.Microsecond}})
}

// TestCMFieldValidation sends connection requests and replies with each field at and past
// its bounds. A request out of range is answered at once with a ConnReject (RejectInvalid)
// and never reaches the listener; a reply out of range fails the Connector with
// ErrPeerInvalid, leaves its QP idle (reusable) and is answered with a ConnReject
// (RejectInvalid), again for a retransmitted copy. Values in range connect.
func TestCMFieldValidation(t *testing.T) {
	for _, c := range valFieldCases() {
		t.Run("request/"+c.name, func(t *testing.T) {
			w := newValWorld(t)
			b := w.engine(2, nil)
			r := w.raw(3)
			l, err := b.eng.Listen(5, 4)
			if err != nil {
				t.Fatal(err)
			}
			p := valRequest(0x77)
			c.edit(&p)
			r.sendRaw(b.addr, &p, nil)
			w.runFor(10 * time.Millisecond)
			req := pollRequest(l)
			if c.ok {
				if req == nil {
					t.Fatal("a valid request was not delivered to the listener")
				}
				valExpectRejects(t, r, 0, 0, 0, b.addr)
				return
			}
			if req != nil {
				t.Fatalf("a request with %s was delivered to the listener", c.name)
			}
			valExpectRejects(t, r, 1, 0x77, transport.RejectInvalid, b.addr)
			if got := b.eng.Stats().CMDropped; got != 1 {
				t.Fatalf("CMDropped %d, want 1", got)
			}
		})
	}

	replyCases := append(valFieldCases(),
		valCase{"cookie 0", func(p *wire.Packet) { p.Cookie, p.CM.Cookie = 0, 0 }, false},
		valCase{"header cookie 0", func(p *wire.Packet) { p.Cookie = 0 }, false},
		valCase{"cookie mismatch", func(p *wire.Packet) { p.CM.Cookie ^= 1 << 40 }, false},
		valCase{"addressed to another QP", func(p *wire.Packet) { p.DestQPN ^= 1 }, false},
	)
	for _, c := range replyCases {
		t.Run("reply/"+c.name, func(t *testing.T) {
			w := newValWorld(t)
			a := w.engine(1, nil)
			r := w.raw(3)
			qa := a.qp(transport.QPConfig{})
			conn, err := a.eng.Connect(qa, r.addr, 5, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			w.runUntil(time.Second, "request", func() bool { return r.rawCount(wire.OpConnRequest) > 0 })
			req := r.rx[0].cm
			if req.ConnID == 0 || req.SrcQPN != qa.QPN() {
				t.Fatalf("request ConnID %#x SrcQPN %d (QPN %d)", req.ConnID, req.SrcQPN, qa.QPN())
			}
			reply := valReply(req)
			c.edit(&reply)
			r.sendRaw(a.addr, &reply, nil)
			w.runUntil(time.Second, "answer", func() bool { d, _ := conn.Replied(); return d })
			_, err = conn.Replied()
			if c.ok {
				if err != nil {
					t.Fatalf("a valid reply: %v", err)
				}
				if err := conn.Complete(); err != nil {
					t.Fatal(err)
				}
				w.runUntil(time.Second, "ready-to-use", func() bool { return r.rawCount(wire.OpReadyToUse) > 0 })
				semState(t, "A", qa, transport.QPConnected)
				valExpectRejects(t, r, 0, 0, 0, a.addr)
				return
			}
			semIs(t, "connect", err, transport.ErrPeerInvalid)
			w.runFor(time.Millisecond)
			semState(t, "A after the refused reply", qa, transport.QPIdle)
			valExpectRejects(t, r, 1, req.ConnID, transport.RejectInvalid, a.addr)
			// A copy of the reply (the peer missed the reject) is refused the same way;
			// the request is not sent again.
			r.sendRaw(a.addr, &reply, nil)
			w.runFor(100 * time.Millisecond)
			valExpectRejects(t, r, 2, req.ConnID, transport.RejectInvalid, a.addr)
			if n := r.rawCount(wire.OpConnRequest); n != 1 {
				t.Fatalf("%d requests sent, want 1", n)
			}
			// The QP can connect again.
			conn2, err := a.eng.Connect(qa, r.addr, 5, nil, 0)
			if err != nil {
				t.Fatalf("connect again: %v", err)
			}
			semState(t, "A connecting again", qa, transport.QPConnecting)
			conn2.Cancel()
			w.runFor(time.Millisecond)
			semState(t, "A cancelled", qa, transport.QPIdle)
		})
	}

	t.Run("request with ConnID 0", func(t *testing.T) {
		w := newValWorld(t)
		b := w.engine(2, nil)
		r := w.raw(3)
		l, err := b.eng.Listen(5, 4)
		if err != nil {
			t.Fatal(err)
		}
		p := valRequest(0)
		r.sendRaw(b.addr, &p, nil)
		w.runFor(10 * time.Millisecond)
		if pollRequest(l) != nil || len(r.rx) != 0 {
			t.Fatalf("a request with ConnID 0 was taken or answered (%d answers)", len(r.rx))
		}
		if s := b.eng.Stats(); s.Malformed != 1 {
			t.Fatalf("Malformed %d, want 1", s.Malformed)
		}
	})
}

// TestCMInvalidSource: a connection request from an address that is not unicast, or from
// port 0, is dropped and counted, and never answered (an answer could go to a broadcast
// or multicast group). The same request from a unicast address is delivered.
func TestCMInvalidSource(t *testing.T) {
	w := newValWorld(t)
	b, bl := valEngine(w, 2, nil)
	l, err := b.eng.Listen(5, 64)
	if err != nil {
		t.Fatal(err)
	}
	sources := []netip.AddrPort{
		{},
		netip.MustParseAddrPort("0.0.0.0:4793"),
		netip.MustParseAddrPort("[::]:4793"),
		netip.MustParseAddrPort("224.0.0.1:4793"),
		netip.MustParseAddrPort("[ff02::1]:4793"),
		netip.MustParseAddrPort("[::ffff:224.0.0.9]:4793"),
		netip.MustParseAddrPort("255.255.255.255:4793"),
		netip.MustParseAddrPort("198.18.0.9:0"),
	}
	for i, src := range sources {
		p := valRequest(uint64(i + 1))
		bl.inject(src, valEncode(t, &p, nil))
		w.runFor(time.Millisecond)
		if got := b.eng.Stats().CMDropped; got != uint64(i+1) {
			t.Fatalf("from %v: CMDropped %d, want %d", src, got, i+1)
		}
		if n := bl.sentCount(wire.OpConnReject); n != 0 {
			t.Fatalf("from %v: %d rejects sent", src, n)
		}
		if pollRequest(l) != nil {
			t.Fatalf("the request from %v was delivered", src)
		}
	}
	p := valRequest(100)
	bl.inject(netip.MustParseAddrPort("198.18.0.9:4793"), valEncode(t, &p, nil))
	w.runFor(time.Millisecond)
	if pollRequest(l) == nil {
		t.Fatal("the control request from a unicast address was not delivered")
	}

	// Connect refuses such a peer, and the QP stays idle.
	qb := b.qp(transport.QPConfig{})
	for _, peer := range sources {
		if _, err := b.eng.Connect(qb, peer, 5, nil, 0); err == nil {
			t.Fatalf("Connect to %v accepted", peer)
		} else {
			semIs(t, "connect to "+peer.String(), err, transport.ErrPeerAddress)
		}
		semState(t, "qp after a refused connect", qb, transport.QPIdle)
	}
}

// TestCMReadyToUseFields: a ready-to-use with the right ConnID and cookie but another
// SrcQPN or DataPort than the request announced is dropped and counted; the right one
// establishes the connection.
func TestCMReadyToUseFields(t *testing.T) {
	w := newValWorld(t)
	b := w.engine(2, nil)
	r := w.raw(3)
	l, err := b.eng.Listen(5, 4)
	if err != nil {
		t.Fatal(err)
	}
	p := valRequest(0x99)
	r.sendRaw(b.addr, &p, nil)
	req := semNextRequest(w, l)
	qb := b.qp(transport.QPConfig{})
	if err := req.Accept(qb, nil, 0); err != nil {
		t.Fatal(err)
	}
	w.runUntil(time.Second, "reply", func() bool { return r.rawCount(wire.OpConnReply) > 0 })
	var reply semRawMsg
	for _, m := range r.rx {
		if m.op == wire.OpConnReply {
			reply = m
		}
	}
	rtu := func(edit func(p *wire.Packet)) *wire.Packet {
		p := &wire.Packet{Header: wire.Header{Opcode: wire.OpReadyToUse, DestQPN: reply.cm.SrcQPN, Cookie: reply.cm.Cookie, TS: 1},
			CM: wire.CMExt{ConnID: 0x99, SrcQPN: 7, DataPort: 50000}}
		edit(p)
		return p
	}
	for i, c := range []struct {
		name string
		edit func(p *wire.Packet)
	}{
		{"another SrcQPN", func(p *wire.Packet) { p.CM.SrcQPN = 8 }},
		{"SrcQPN 0", func(p *wire.Packet) { p.CM.SrcQPN = 0 }},
		{"another DataPort", func(p *wire.Packet) { p.CM.DataPort = 50001 }},
		{"DataPort 0", func(p *wire.Packet) { p.CM.DataPort = 0 }},
	} {
		r.sendRaw(b.addr, rtu(c.edit), nil)
		w.runFor(time.Millisecond)
		if d, _ := req.Established(); d {
			t.Fatalf("%s: the connection was established", c.name)
		}
		semState(t, c.name, qb, transport.QPConnecting)
		if got := b.eng.Stats().CMDropped; got != uint64(i+1) {
			t.Fatalf("%s: CMDropped %d, want %d", c.name, got, i+1)
		}
	}
	r.sendRaw(b.addr, rtu(func(*wire.Packet) {}), nil)
	semEstablished(t, w, req)
	semState(t, "B", qb, transport.QPConnected)
}

// TestCMDisconnectFields: a DisconnectReq with the connection's QPN, cookie and address
// but another SrcQPN or DataPort is dropped and counted; the right one disconnects.
func TestCMDisconnectFields(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
	var rtu wire.Packet
	if err := wire.Parse([][]byte{a.tap.last[wire.OpReadyToUse]}, &rtu); err != nil {
		t.Fatal(err)
	}
	disc := func(edit func(p *wire.Packet)) []byte {
		p := wire.Packet{Header: wire.Header{Opcode: wire.OpDisconnectReq, DestQPN: qb.QPN(), Cookie: rtu.Cookie, TS: 1},
			CM: wire.CMExt{SrcQPN: qa.QPN(), DataPort: rtu.CM.DataPort}}
		edit(&p)
		return valEncode(t, &p, nil)
	}
	drops := b.eng.Stats().CMDropped
	for _, c := range []struct {
		name string
		edit func(p *wire.Packet)
	}{
		{"another SrcQPN", func(p *wire.Packet) { p.CM.SrcQPN ^= 1 }},
		{"SrcQPN 0", func(p *wire.Packet) { p.CM.SrcQPN = 0 }},
		{"another DataPort", func(p *wire.Packet) { p.CM.DataPort++ }},
		{"DataPort 0", func(p *wire.Packet) { p.CM.DataPort = 0 }},
	} {
		valInject(w, a.addr, b.addr, disc(c.edit))
		w.runFor(time.Millisecond)
		semState(t, c.name, qb, transport.QPConnected)
		drops++
		if got := b.eng.Stats().CMDropped; got != drops {
			t.Fatalf("%s: CMDropped %d, want %d", c.name, got, drops)
		}
		if n := b.tap.sentCount(wire.OpDisconnectRep); n != 0 {
			t.Fatalf("%s: %d disconnect replies sent", c.name, n)
		}
	}
	valInject(w, a.addr, b.addr, disc(func(*wire.Packet) {}))
	w.runFor(time.Millisecond)
	semState(t, "B after the control DisconnectReq", qb, transport.QPDisconnected)
}

// TestCMFloorPayload: an engine whose link takes only wire.MinMaxPayload bytes connects, and
// multi-packet Sends both ways, a Write and a Read cross byte-exact in datagrams no larger.
func TestCMFloorPayload(t *testing.T) {
	w, a, b := newSemPair(t, nil)
	a.tap.maxPayload = wire.MinMaxPayload
	qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})

	region := make([]byte, 8192)
	pattern(region, 3)
	b.mem.add(0x55, 0, 0x4000, region, memreg.AccessRemoteRead|memreg.AccessRemoteWrite)
	sendA, sendB, wdata := make([]byte, 5000), make([]byte, 3000), make([]byte, 3000)
	pattern(sendA, 1)
	pattern(sendB, 2)
	pattern(wdata, 4)
	want := append([]byte(nil), region[:5000]...)
	recvB, recvA, readBuf := make([]byte, 5000), make([]byte, 3000), make([]byte, 5000)
	semRecv(t, qb, 1, recvB)
	semRecv(t, qa, 2, recvA)
	semPost(t, qa, semSend(3, 0, sendA))
	semPost(t, qa, semRead(4, 0, 0x4000, 0x55, readBuf))
	semPost(t, qa, semWrite(5, 0, 0x4000+5000, 0x55, wdata))
	semPost(t, qb, semSend(6, 0, sendB))
	w.runUntil(time.Second, "transfers", func() bool { return len(w.rec.of(qa)) == 4 && len(w.rec.of(qb)) == 2 })
	semExpect(t, "A's receives", w.rec.of(qa, transport.OpReceive), semWant{2, transport.OpReceive, semOK})
	semExpect(t, "A's requests", w.rec.of(qa, transport.OpSend, transport.OpRead, transport.OpWrite),
		semWant{3, transport.OpSend, semOK}, semWant{4, transport.OpRead, semOK}, semWant{5, transport.OpWrite, semOK})
	semExpect(t, "B's receives", w.rec.of(qb, transport.OpReceive), semWant{1, transport.OpReceive, semOK})
	semExpect(t, "B's requests", w.rec.of(qb, transport.OpSend), semWant{6, transport.OpSend, semOK})
	for _, x := range []struct {
		name      string
		got, want []byte
	}{{"send A->B", recvB, sendA}, {"send B->A", recvA, sendB}, {"read", readBuf, want}, {"write", region[5000:8000], wdata}} {
		if string(x.got) != string(x.want) {
			t.Errorf("%s: bytes differ", x.name)
		}
	}
	mss := wire.MinMaxPayload - wire.HeaderLen - wire.RDMAExtLen - wire.TrailerLen
	if n := qa.Stats().TxPackets; n < uint64((5000+mss-1)/mss+(3000+mss-1)/mss) {
		t.Errorf("A sent %d data packets: not at most %d payload bytes each", n, mss)
	}
	if a.tap.largest > wire.MinMaxPayload || b.tap.largest > wire.MinMaxPayload {
		t.Errorf("largest datagrams %d (A), %d (B): over %d", a.tap.largest, b.tap.largest, wire.MinMaxPayload)
	}
}

// TestDataLengthValidation rewrites the length or address of A's Read or Write on its way
// to B. A length over transport.MaxMessage (2^31) is refused with an invalid-request NAK
// (the request fails with StatusDataError); 2^31 itself and a range that wraps past 2^64
// are access checks (StatusAccessViolation). Nothing is placed on either side.
func TestDataLengthValidation(t *testing.T) {
	huge := func(n uint32) func(p *wire.Packet) { return func(p *wire.Packet) { p.RDMA.Length = n } }
	wrap := func(p *wire.Packet) { p.RDMA.Addr = math.MaxUint64 - 49 }
	for _, c := range []struct {
		name string
		kind transport.OpKind
		edit func(p *wire.Packet)
		want transport.Status
		syn  wire.Syndrome
	}{
		{"Read of 2^32-256 bytes", transport.OpRead, huge(math.MaxUint32 - 255), transport.StatusDataError, wire.SynNakInvalid},
		{"Read of 2^32-1 bytes", transport.OpRead, huge(math.MaxUint32), transport.StatusDataError, wire.SynNakInvalid},
		{"Read of 2^31+1 bytes", transport.OpRead, huge(1<<31 + 1), transport.StatusDataError, wire.SynNakInvalid},
		{"Read of 2^31 bytes", transport.OpRead, huge(1 << 31), transport.StatusAccessViolation, wire.SynNakAccess},
		{"Read wrapping past 2^64", transport.OpRead, wrap, transport.StatusAccessViolation, wire.SynNakAccess},
		{"Write of 2^31+1 bytes", transport.OpWrite, huge(1<<31 + 1), transport.StatusDataError, wire.SynNakInvalid},
		{"Write of 2^32-1 bytes", transport.OpWrite, huge(math.MaxUint32), transport.StatusDataError, wire.SynNakInvalid},
		{"Write of 2^31 bytes", transport.OpWrite, huge(1 << 31), transport.StatusAccessViolation, wire.SynNakAccess},
		{"Write wrapping past 2^64", transport.OpWrite, wrap, transport.StatusAccessViolation, wire.SynNakAccess},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newValWorld(t)
			a, al := valEngine(w, 1, nil)
			b, _ := valEngine(w, 2, nil)
			qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
			region := newSemGuarded(4096, 1)
			b.mem.add(0x55, 0, 0x4000, region.region, memreg.AccessRemoteRead|memreg.AccessRemoteWrite)
			local := newSemGuarded(100, 2)
			op := wire.OpReadRequest
			wr := semRead(1, 0, 0x4000, 0x55, local.region)
			if c.kind == transport.OpWrite {
				op, wr = wire.OpWrite, semWrite(1, 0, 0x4000, 0x55, local.region)
			}
			al.mutate = func(p *wire.Packet) bool {
				if p.Opcode != op {
					return false
				}
				c.edit(p)
				return true
			}
			semPost(t, qa, wr)
			w.runUntil(time.Second, "completion", func() bool { return len(w.rec.of(qa)) == 1 })
			semExpect(t, "A", w.rec.of(qa), semWant{1, c.kind, c.want})
			if got := qb.Stats().NaksSentBy[c.syn]; got != 1 {
				t.Errorf("B sent %d %v NAKs, want 1 (by kind: %v)", got, c.syn, qb.Stats().NaksSentBy)
			}
			if off, ok := region.unchanged(); !ok {
				t.Errorf("B's region changed at %d", off)
			}
			if off, ok := local.unchanged(); !ok {
				t.Errorf("A's buffer changed at %d", off)
			}
			semState(t, "A", qa, transport.QPError)
			semState(t, "B", qb, transport.QPError)
		})
	}
}

// TestRNRDelayCap: the receiver asks for the largest RNR delay the wire carries (Value
// 0xffff, 1.05 s), backed off per retry; the sender retries each time no later than
// MaxRNRDelay (655.36 ms) after the NAK, and the Send completes once a receive is posted.
func TestRNRDelayCap(t *testing.T) {
	w := newValWorld(t)
	a, al := valEngine(w, 1, nil)
	b, _ := valEngine(w, 2, func(c *transport.Config) { c.RNRDelay = 0xffff * 16 * time.Microsecond })
	qa, qb := w.connect(a, transport.QPConfig{}, b, transport.QPConfig{})
	var naks, sends []int64
	al.onRx = func(now int64, p *wire.Packet, _ *link.Packet) {
		if p.Opcode == wire.OpAck && p.Ack.Syndrome == wire.SynNakRNR {
			if p.Ack.Value != 0xffff {
				t.Errorf("RNR NAK Value %#x, want 0xffff", p.Ack.Value)
			}
			naks = append(naks, now)
		}
	}
	al.onTx = func(now int64, p *wire.Packet, _ *link.Packet) {
		if p.Opcode == wire.OpSendOnly {
			sends = append(sends, now)
		}
	}
	semPost(t, qa, semSend(1, 0, make([]byte, 100)))
	w.runUntil(20*time.Second, "three RNR NAKs", func() bool { return len(naks) == 3 })
	semRecv(t, qb, 2, make([]byte, 100))
	w.runUntil(20*time.Second, "the Send", func() bool { return len(w.rec.of(qa)) == 1 })
	semExpect(t, "A", w.rec.of(qa), semWant{1, transport.OpSend, semOK})
	for i, at := range naks {
		retry := int64(-1)
		for _, s := range sends {
			if s >= at {
				retry = s
				break
			}
		}
		if retry < 0 {
			t.Fatalf("no retry after RNR NAK %d", i)
		}
		if gap := time.Duration(retry - at); gap > transport.MaxRNRDelay || gap < transport.MaxRNRDelay/2 {
			t.Errorf("retry %d came %v after its RNR NAK, want at most %v (and the delay honoured up to it)", i, gap, transport.MaxRNRDelay)
		}
	}
}

// TestCMTableBounds fills the tables a peer and the application grow past their bounds:
// established incoming connections remembered (MaxRecent) and completed outgoing attempts
// lingering (MaxLingering). Each stays at its bound, and the oldest entry is the one
// evicted: a late copy of the first request is offered to the listener again while one of
// the last is still dropped, and a late copy of the first reply is no longer answered
// while one of the last still gets its ready-to-use again.
func TestCMTableBounds(t *testing.T) {
	const extra = 8
	small := transport.QPConfig{SendDepth: 1, RecvDepth: 1, IRD: 1, ORD: 1}
	tweak := func(c *transport.Config) { c.Window = 64; c.MaxHalfOpen = 4 }
	// Each connection's QP is closed once it connected (the tables outlive it), so that the
	// engine does not poll a thousand of them.
	closeQP := func(w *semWorld, q *transport.QP) {
		done := make(chan error, 1)
		go func() { done <- q.Close(context.Background()) }()
		deadline := time.Now().Add(10 * time.Second)
		for {
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				return
			default:
			}
			// Poll without moving the clock (the tables expire with it).
			for _, nd := range w.nodes {
				if nd.eng != nil {
					nd.eng.Poll(w.clock.Now())
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("close did not return")
			}
			runtime.Gosched()
		}
	}

	t.Run("recent", func(t *testing.T) {
		w := newValWorld(t)
		b := w.engine(2, tweak)
		r := w.raw(3)
		l, err := b.eng.Listen(5, 4)
		if err != nil {
			t.Fatal(err)
		}
		n := transport.MaxRecent + extra
		for i := 1; i <= n; i++ {
			p := valRequest(uint64(i))
			r.sendRaw(b.addr, &p, nil)
			req := semNextRequest(w, l)
			qb := b.qp(small)
			if err := req.Accept(qb, nil, 0); err != nil {
				t.Fatal(err)
			}
			w.runUntil(time.Second, "reply", func() bool { return r.rawCount(wire.OpConnReply) == i })
			reply := r.rx[len(r.rx)-1].cm
			rtu := wire.Packet{Header: wire.Header{Opcode: wire.OpReadyToUse, DestQPN: reply.SrcQPN, Cookie: reply.Cookie},
				CM: wire.CMExt{ConnID: uint64(i), SrcQPN: 7, DataPort: 50000}}
			r.sendRaw(b.addr, &rtu, nil)
			semEstablished(t, w, req)
			closeQP(w, qb)
			if _, recent, _, _ := transport.CMTableSizes(b.eng); recent != min(i, transport.MaxRecent) {
				t.Fatalf("after %d connections %d remembered, want %d", i, recent, min(i, transport.MaxRecent))
			}
		}
		// A late copy of the newest request is dropped; of the oldest, offered again.
		drops := b.eng.Stats().CMDropped
		last := valRequest(uint64(n))
		r.sendRaw(b.addr, &last, nil)
		w.runFor(time.Millisecond)
		if pollRequest(l) != nil || b.eng.Stats().CMDropped != drops+1 {
			t.Fatal("a late copy of the newest request was not dropped")
		}
		first := valRequest(1)
		r.sendRaw(b.addr, &first, nil)
		w.runFor(time.Millisecond)
		if pollRequest(l) == nil {
			t.Fatal("the oldest connection was not the one forgotten")
		}
	})

	t.Run("lingering", func(t *testing.T) {
		w := newValWorld(t)
		a := w.engine(1, tweak)
		r := w.raw(3)
		n := transport.MaxLingering + extra
		replies := make([]wire.Packet, 0, n)
		for i := 1; i <= n; i++ {
			qa := a.qp(small)
			conn, err := a.eng.Connect(qa, r.addr, 5, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			w.runUntil(time.Second, "request", func() bool { return r.rawCount(wire.OpConnRequest) == i })
			reply := valReply(r.rx[len(r.rx)-1].cm)
			replies = append(replies, reply)
			r.sendRaw(a.addr, &reply, nil)
			semComplete(t, w, conn)
			w.runUntil(time.Second, "ready-to-use", func() bool { return r.rawCount(wire.OpReadyToUse) == i })
			closeQP(w, qa)
			if _, _, conns, _ := transport.CMTableSizes(a.eng); conns != min(i, transport.MaxLingering) {
				t.Fatalf("after %d connections %d attempts listed, want %d", i, conns, min(i, transport.MaxLingering))
			}
		}
		// The QPs were closed: a late copy of a reply is refused (the peer's half-open
		// connection ends) rather than answered with a ready-to-use.
		rtus, rejects := r.rawCount(wire.OpReadyToUse), r.rawCount(wire.OpConnReject)
		r.sendRaw(a.addr, &replies[n-1], nil)
		w.runFor(time.Millisecond)
		if got := r.rawCount(wire.OpConnReject); got != rejects+1 || r.rawCount(wire.OpReadyToUse) != rtus {
			t.Fatalf("a late copy of the newest reply got %d rejections, want 1", got-rejects)
		}
		drops := a.eng.Stats().CMDropped
		r.sendRaw(a.addr, &replies[0], nil)
		w.runFor(time.Millisecond)
		if got := r.rawCount(wire.OpConnReject); got != rejects+1 || a.eng.Stats().CMDropped != drops+1 {
			t.Fatal("the oldest attempt was not the one evicted")
		}
	})
}

// TestCMFlushWhileConnecting flushes QPs in the middle of connecting. The QP stays in the
// error state however the attempt ends (timeout, rejection, Complete, the peer's
// ready-to-use), what was posted to it completes cancelled, and nothing panics. (A QP
// flushed while connecting used to be set idle by a timed-out attempt while the engine
// polled it, and crashed it.)
func TestCMFlushWhileConnecting(t *testing.T) {
	t.Run("attempt times out", func(t *testing.T) {
		w := newValWorld(t)
		a := w.engine(1, func(c *transport.Config) { c.CMTimeout = time.Millisecond })
		r := w.raw(3)
		qa := a.qp(transport.QPConfig{})
		semRecv(t, qa, 1, make([]byte, 10))
		conn, err := a.eng.Connect(qa, r.addr, 5, nil, 2*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		qa.Flush()
		w.runFor(10 * time.Millisecond)
		_, err = conn.Replied()
		semIs(t, "connect", err, transport.ErrConnectTimeout)
		semState(t, "A", qa, transport.QPError)
		semExpect(t, "A", w.rec.of(qa), semWant{1, transport.OpReceive, transport.StatusCancelled})
	})
	t.Run("Complete after the flush", func(t *testing.T) {
		w := newValWorld(t)
		a := w.engine(1, nil)
		r := w.raw(3)
		qa := a.qp(transport.QPConfig{})
		conn, err := a.eng.Connect(qa, r.addr, 5, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		w.runUntil(time.Second, "request", func() bool { return r.rawCount(wire.OpConnRequest) > 0 })
		reply := valReply(r.rx[0].cm)
		r.sendRaw(a.addr, &reply, nil)
		semReplied(t, w, conn)
		qa.Flush()
		w.runFor(time.Millisecond)
		if err := conn.Complete(); err != nil {
			t.Fatal(err)
		}
		w.runFor(time.Millisecond)
		semState(t, "A", qa, transport.QPError)
		if r.rawCount(wire.OpReadyToUse) != 0 {
			t.Fatal("a flushed QP sent a ready-to-use")
		}
		valExpectRejects(t, r, 1, reply.CM.ConnID, transport.RejectByPeer, a.addr)
	})
	t.Run("ready-to-use after the flush", func(t *testing.T) {
		w := newValWorld(t)
		b := w.engine(2, nil)
		r := w.raw(3)
		l, err := b.eng.Listen(5, 4)
		if err != nil {
			t.Fatal(err)
		}
		p := valRequest(0x55)
		r.sendRaw(b.addr, &p, nil)
		req := semNextRequest(w, l)
		qb := b.qp(transport.QPConfig{})
		if err := req.Accept(qb, nil, 0); err != nil {
			t.Fatal(err)
		}
		w.runUntil(time.Second, "reply", func() bool { return r.rawCount(wire.OpConnReply) > 0 })
		qb.Flush()
		w.runFor(time.Millisecond)
		reply := r.rx[len(r.rx)-1].cm
		rtu := wire.Packet{Header: wire.Header{Opcode: wire.OpReadyToUse, DestQPN: reply.SrcQPN, Cookie: reply.Cookie},
			CM: wire.CMExt{ConnID: 0x55, SrcQPN: 7, DataPort: 50000}}
		r.sendRaw(b.addr, &rtu, nil)
		semAwaitEstablished(w, req)
		_, err = req.Established()
		semIs(t, "accept", err, transport.ErrConnectCancelled)
		semState(t, "B", qb, transport.QPError)
	})
}
