package transport_test

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/memreg"

	"github.com/xdpndk/xdpndk/transport/link"

	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/simlink"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// Forged datagrams: a connected pair, and an attacker on the same network who has seen
// its traffic (the tap) and injects datagrams right in every field but one, from a third
// host or from the peers' own addresses. Each must be dropped, counted in the right
// counter, and change nothing: no completion, no byte of memory, no state, no answer.

const (
	pairCMPort = 4793   // the port of Pair's links: where CM messages come from
	winTokenB  = 0x55   // B's read/write region
	winBaseB   = 0x4000 // its address
)

func simHost(last byte, port uint16) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 0, last}), port)
}

// forge encodes p, appends payload and the CRC trailer: a datagram that parses.
func forge(t *testing.T, p wire.Packet, payload []byte) []byte {
	t.Helper()
	p.CM.PrivateLen = uint16(len(p.PrivateData))
	b := make([]byte, wire.HeaderLen+wire.CMExtLen+wire.MaxPrivateData+len(payload)+wire.TrailerLen)
	n, err := wire.Encode(b, &p)
	if err != nil {
		t.Fatalf("forge %v: %v", p.Opcode, err)
	}
	n += copy(b[n:], payload)
	wire.PutTrailer(b[n:], wire.UpdateCRC(0, b[:n]))
	b = b[:n+wire.TrailerLen]
	var check wire.Packet
	if err := wire.Parse([][]byte{b}, &check); err != nil {
		t.Fatalf("forged %v does not parse: %v", p.Opcode, err)
	}
	return b
}

// injectFrom sends dgram to to from a host at the IP of from, with from's port as its source
// port: a new host on the network, or one sharing the IP of a peer (a raw socket there).
func injectFrom(t *testing.T, w *world, from, to netip.AddrPort, dgram []byte) {
	t.Helper()
	l, err := w.net.AddHost(netip.AddrPortFrom(from.Addr(), 31337))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close() // nothing may answer it anyway; a closed host keeps no queue
	pk := []link.Packet{{Remote: to, LocalPort: from.Port(), NSegs: 1, Segs: [link.MaxSegments][]byte{dgram}}}
	if n, err := l.Send(pk); n != 1 || err != nil {
		t.Fatalf("inject: sent %d: %v", n, err)
	}
}

// forgedWorld is a connected pair after some traffic, with what the attacker learned.
type forgedWorld struct {
	*world
	ta, tb      *tapLink
	qa, qb      *transport.QP
	idle        *transport.QP // a QP on B that never connected
	disconnects atomic.Int32  // OnDisconnect calls
	cookie      uint64
	aPort       uint16 // A's QP source port
	bPort       uint16 // B's
	aAddr       netip.AddrPort
	bAddr       netip.AddrPort
	connID      uint64 // A's connection request's
	regionB     []byte // B's memory that A may read and write
	recvB       []byte // a receive B has posted, for A's next Send
	nextMSN     uint32 // the MSN of A's next Send
}

// newForgedWorld connects A to B over tapped links, moves traffic both ways and posts a
// receive on B for A's next Send.
func newForgedWorld(t *testing.T) *forgedWorld {
	w, ta, tb := newTapWorld(t, simlink.Config{Seed: 41, Default: simlink.Impairments{Latency: 5 * time.Microsecond}}, nil)
	f := &forgedWorld{world: w, ta: ta, tb: tb}
	f.qa, f.qb = w.connect(transport.QPConfig{OnDisconnect: func(*transport.QP) { f.disconnects.Add(1) }})
	var err error
	if f.idle, err = w.b.NewQP(transport.QPConfig{Sink: w.rec}); err != nil {
		t.Fatal(err)
	}
	f.regionB = make([]byte, 16<<10)
	fillRandom(f.regionB, rand.New(rand.NewPCG(41, 1)))
	w.memB.add(winTokenB, 0, winBaseB, f.regionB, memreg.AccessRemoteRead|memreg.AccessRemoteWrite)
	f.aAddr, f.bAddr = w.la.LocalAddr(), w.lb.LocalAddr()

	// Traffic both ways, so that the tap has seen every kind of packet.
	f.traffic(t, "before")
	f.cookie = ta.lastOf(t, wire.OpWrite).Cookie
	f.aPort, f.bPort = ta.port(t), tb.port(t)
	f.connID = ta.lastOf(t, wire.OpConnRequest).CM.ConnID
	if f.cookie == 0 || f.aPort == 0 || f.bPort == 0 {
		t.Fatalf("tap learned cookie %#x ports %d %d", f.cookie, f.aPort, f.bPort)
	}
	// A receive for A's next Send, which forged Sends must not fill.
	f.recvB = make([]byte, 2000)
	fillByte(f.recvB, guardByte)
	if err := f.qb.PostReceive(&transport.Receive{NSGE: 1, SGL: [transport.MaxSGE][]byte{f.recvB}, Context: 7777}); err != nil {
		t.Fatal(err)
	}
	w.runFor(time.Millisecond) // credits reach A; everything idle
	return f
}

// traffic moves a Send, a Write and a Read from A to B and a Send from B to A, and checks
// them byte-exact. It consumes f.recvB if posted.
func (f *forgedWorld) traffic(t *testing.T, when string) {
	t.Helper()
	w := f.world
	rng := rand.New(rand.NewPCG(41, uint64(len(when))))
	msg := make([]byte, 1000)
	fillRandom(msg, rng)
	recv := f.recvB
	if recv == nil {
		recv = make([]byte, 2000)
		fillByte(recv, guardByte)
		if err := f.qb.PostReceive(&transport.Receive{NSGE: 1, SGL: [transport.MaxSGE][]byte{recv}, Context: 7777}); err != nil {
			t.Fatal(err)
		}
	}
	back := make([]byte, 300)
	fillRandom(back, rng)
	recvA := make([]byte, 300)
	if err := f.qa.PostReceive(&transport.Receive{NSGE: 1, SGL: [transport.MaxSGE][]byte{recvA}, Context: 8888}); err != nil {
		t.Fatal(err)
	}
	wdata := make([]byte, 3000)
	fillRandom(wdata, rng)
	rbuf := make([]byte, 5000)
	na, nb := w.rec.count(f.qa), w.rec.count(f.qb)
	for _, wr := range []transport.WorkRequest{
		{Kind: transport.OpSend, NSGE: 1, SGL: [transport.MaxSGE][]byte{msg}, Context: 1},
		{Kind: transport.OpWrite, NSGE: 1, SGL: [transport.MaxSGE][]byte{wdata}, RemoteAddr: winBaseB + 100, RemoteToken: winTokenB, Context: 2},
		{Kind: transport.OpRead, NSGE: 1, SGL: [transport.MaxSGE][]byte{rbuf}, RemoteAddr: winBaseB, RemoteToken: winTokenB, Context: 3, Flags: transport.WRReadFence},
	} {
		if err := f.qa.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.qb.PostSend(&transport.WorkRequest{Kind: transport.OpSend, NSGE: 1, SGL: [transport.MaxSGE][]byte{back}, Context: 4}); err != nil {
		t.Fatal(err)
	}
	w.runUntil(time.Second, "traffic "+when, func() bool { return w.rec.count(f.qa) == na+4 && w.rec.count(f.qb) == nb+2 })
	w.runFor(time.Millisecond)
	ca, cb := w.rec.of(f.qa)[na:], w.rec.of(f.qb)[nb:]
	if len(ca) != 4 || len(cb) != 2 {
		t.Fatalf("traffic %s: completions A %s B %s", when, statusOf(ca), statusOf(cb))
	}
	wantA := []transport.Completion{
		{Context: 1, Op: transport.OpSend, Status: transport.StatusSuccess, Bytes: 1000},
		{Context: 2, Op: transport.OpWrite, Status: transport.StatusSuccess, Bytes: 3000},
		{Context: 3, Op: transport.OpRead, Status: transport.StatusSuccess, Bytes: 5000},
	}
	var reqA []transport.Completion
	for _, c := range ca {
		if c.Op == transport.OpReceive {
			if want := (transport.Completion{Context: 8888, Op: transport.OpReceive, Status: transport.StatusSuccess, Bytes: 300}); c != want {
				t.Errorf("traffic %s: A's receive %+v", when, c)
			}
			continue
		}
		reqA = append(reqA, c)
	}
	for i := range reqA {
		if i >= len(wantA) || reqA[i] != wantA[i] {
			t.Errorf("traffic %s: A's completions %s", when, statusOf(ca))
			break
		}
	}
	for _, c := range cb {
		var want transport.Completion
		if c.Op == transport.OpReceive {
			want = transport.Completion{Context: 7777, Op: transport.OpReceive, Status: transport.StatusSuccess, Bytes: 1000}
		} else {
			want = transport.Completion{Context: 4, Op: transport.OpSend, Status: transport.StatusSuccess, Bytes: 300}
		}
		if c != want {
			t.Errorf("traffic %s: B's completion %+v, want %+v", when, c, want)
		}
	}
	if !bytes.Equal(recv[:1000], msg) {
		t.Errorf("traffic %s: the Send arrived with other bytes", when)
	}
	if ok, at := allByte(recv[1000:], guardByte); !ok {
		t.Errorf("traffic %s: receive byte %d past the message written", when, 1000+at)
	}
	if !bytes.Equal(recvA, back) {
		t.Errorf("traffic %s: B's Send arrived with other bytes", when)
	}
	if !bytes.Equal(f.regionB[100:3100], wdata) {
		t.Errorf("traffic %s: the Write did not land", when)
	}
	if !bytes.Equal(rbuf, f.regionB[:5000]) {
		t.Errorf("traffic %s: the Read returned other bytes", when)
	}
	f.recvB = nil
	f.nextMSN = f.ta.lastOf(t, wire.OpSendOnly).Send.MSN + 1
}

// forgedState is what a forged datagram must not change.
type forgedState struct {
	ea, eb           transport.EngineStats
	sa, sb           transport.QPStats
	completions      int
	region, recv     []byte
	disconnects      int32
	stA, stB, stIdle transport.QPState
}

func (f *forgedWorld) snapshot() forgedState {
	return forgedState{
		ea: f.a.Stats(), eb: f.b.Stats(), sa: f.qa.Stats(), sb: f.qb.Stats(),
		completions: f.rec.total(),
		region:      bytes.Clone(f.regionB), recv: bytes.Clone(f.recvB),
		disconnects: f.disconnects.Load(),
		stA:         f.qa.State(), stB: f.qb.State(), stIdle: f.idle.State(),
	}
}

// dropKind names an EngineStats counter.
type dropKind int

const (
	cMalformed dropKind = iota
	cNoQP
	cBadSource
	cBadCookie
	cOutOfWindow
	cCMDropped
	cNone // dropped by the QP itself, in no engine counter (an ack naming unsent PSNs)
)

var dropKindNames = [...]string{"Malformed", "NoQP", "BadSource", "BadCookie", "OutOfWindow", "CMDropped", "none"}

func bumpDrop(s transport.EngineStats, c dropKind) transport.EngineStats {
	s.RxPackets++
	switch c {
	case cMalformed:
		s.Malformed++
	case cNoQP:
		s.NoQP++
	case cBadSource:
		s.BadSource++
	case cBadCookie:
		s.BadCookie++
	case cOutOfWindow:
		s.OutOfWindow++
	case cCMDropped:
		s.CMDropped++
	}
	return s
}

// forgedCase is one forged datagram and the counter that must count it.
type forgedCase struct {
	name  string
	from  netip.AddrPort // source IP and port the datagram claims
	toA   bool           // sent to A (else to B)
	dgram []byte
	want  dropKind
}

// expectDropped injects c and checks that the target engine counted it in c.want and that
// nothing else changed. busyA says A may transmit meanwhile (its timers run).
func (f *forgedWorld) expectDropped(t *testing.T, c forgedCase, busyA bool) {
	t.Helper()
	target, to := f.b, f.bAddr
	if c.toA {
		target, to = f.a, f.aAddr
	}
	before := f.snapshot()
	rx0 := target.Stats().RxPackets
	injectFrom(t, f.world, c.from, to, c.dgram)
	f.runUntil(time.Millisecond, c.name+": arrival", func() bool { return target.Stats().RxPackets > rx0 })
	f.runFor(60 * time.Microsecond) // long enough for any answer to reach the peer
	after := f.snapshot()

	tgt, other := after.eb, after.ea
	wantT, wantO := bumpDrop(before.eb, c.want), before.ea
	if c.toA {
		tgt, other = after.ea, after.eb
		wantT, wantO = bumpDrop(before.ea, c.want), before.eb
	}
	// Transmissions are compared apart: a forged datagram must not be answered.
	txT, txO := tgt.TxPackets-wantT.TxPackets, other.TxPackets-wantO.TxPackets
	tgt.TxPackets, wantT.TxPackets, other.TxPackets, wantO.TxPackets = 0, 0, 0, 0
	if busyA {
		txT = 0 // A retransmits on its timer (into a path that loses everything)
	}
	if tgt != wantT {
		t.Errorf("%s: target engine counters\n got %+v\nwant %+v (one more %s)", c.name, tgt, wantT, dropKindNames[c.want])
	}
	if other != wantO {
		t.Errorf("%s: the other engine's counters changed\n got %+v\nwant %+v", c.name, other, wantO)
	}
	if txT != 0 || txO != 0 {
		t.Errorf("%s: the forged datagram was answered: target sent %d, other %d", c.name, txT, txO)
	}
	f.expectUnchanged(t, c.name, before, after, busyA)
}

// expectUnchanged checks that nothing an application or the peer could see changed.
func (f *forgedWorld) expectUnchanged(t *testing.T, name string, before, after forgedState, busyA bool) {
	t.Helper()
	if after.completions != before.completions {
		t.Errorf("%s: %d completions appeared: A %s B %s", name, after.completions-before.completions,
			statusOf(f.rec.of(f.qa)), statusOf(f.rec.of(f.qb)))
	}
	if after.stA != transport.QPConnected || after.stB != transport.QPConnected || after.stIdle != before.stIdle {
		t.Errorf("%s: states A %v B %v idle %v (was %v), want connected, connected, unchanged", name, after.stA, after.stB, after.stIdle, before.stIdle)
	}
	if after.disconnects != before.disconnects {
		t.Errorf("%s: OnDisconnect was called", name)
	}
	if !bytes.Equal(after.region, before.region) {
		t.Errorf("%s: B's memory changed", name)
	}
	if !bytes.Equal(after.recv, before.recv) {
		t.Errorf("%s: B's posted receive buffer changed", name)
	}
	for _, q := range []struct {
		who  string
		b, a transport.QPStats
		busy bool
	}{{"A", before.sa, after.sa, busyA}, {"B", before.sb, after.sb, false}} {
		if q.a.RxPackets != q.b.RxPackets || q.a.RxBytes != q.b.RxBytes || q.a.Duplicates != q.b.Duplicates ||
			q.a.AcksSent != q.b.AcksSent || q.a.NaksSent != q.b.NaksSent || q.a.NaksReceived != q.b.NaksReceived ||
			(!q.busy && (q.a.TxPackets != q.b.TxPackets || q.a.Retransmits != q.b.Retransmits)) {
			t.Errorf("%s: QP %s counters changed:\n got %+v\nwant %+v", name, q.who, q.a, q.b)
		}
	}
}

// write returns a Write to B's region that A could have sent next: right in every
// field.
func (f *forgedWorld) write(t *testing.T, psn wire.PSN, cookie uint64, qpn uint32) []byte {
	p := wire.Packet{Header: wire.Header{Opcode: wire.OpWrite, Flags: wire.FlagAckReq | wire.FlagLast, DestQPN: qpn, PSN: psn, Cookie: cookie, TS: 1},
		RDMA: wire.RDMAExt{Addr: winBaseB + 8000, Token: winTokenB, Length: 200}}
	payload := make([]byte, 200)
	fillByte(payload, 0xEE)
	return forge(t, p, payload)
}

// send returns a SendOnly of 100 bytes that would fill B's posted receive.
func (f *forgedWorld) send(t *testing.T, psn wire.PSN, cookie uint64, qpn uint32) []byte {
	p := wire.Packet{Header: wire.Header{Opcode: wire.OpSendOnly, Flags: wire.FlagAckReq, DestQPN: qpn, PSN: psn, Cookie: cookie, TS: 1},
		Send: wire.SendExt{MSN: f.nextMSN, Total: 100}}
	payload := make([]byte, 100)
	fillByte(payload, 0xEE)
	return forge(t, p, payload)
}

func forgeCM(t *testing.T, op wire.Opcode, qpn uint32, cookie uint64, ext wire.CMExt) []byte {
	return forge(t, wire.Packet{Header: wire.Header{Opcode: op, DestQPN: qpn, Cookie: cookie, TS: 1}, CM: ext}, nil)
}

// TestForgedPacketsToResponder forges data and connection-management datagrams to B, the
// responder of a connected pair, and CM datagrams to A; then the pair still works.
func TestForgedPacketsToResponder(t *testing.T) {
	f := newForgedWorld(t)
	psn := f.ta.nextPSN(t) // where B's window starts: the datagram A would send next
	window := uint32(transport.DefaultConfig(f.la).Window)
	qb, qa := f.qb.QPN(), f.qa.QPN()
	third := simHost(3, f.aPort)
	aData := netip.AddrPortFrom(f.aAddr.Addr(), f.aPort) // exactly where A's data comes from
	good := f.write(t, psn, f.cookie, qb)

	badCRC := bytes.Clone(good)
	badCRC[len(badCRC)-1] ^= 0x01
	flipped := bytes.Clone(good)
	flipped[wire.HeaderLen+20] ^= 0x10 // a payload bit, CRC left as it was
	noQPN := qb ^ 0x00a5_5a00
	for noQPN == qb || noQPN == f.idle.QPN() || noQPN == 0 {
		noQPN++
	}

	cases := []forgedCase{
		{name: "bad CRC trailer", from: aData, dgram: badCRC, want: cMalformed},
		{name: "payload bit flipped", from: aData, dgram: flipped, want: cMalformed},
		{name: "truncated", from: aData, dgram: good[:wire.HeaderLen+wire.RDMAExtLen], want: cMalformed},
		{name: "wrong cookie (Send into the posted receive)", from: aData, dgram: f.send(t, psn, f.cookie^1<<40, qb), want: cBadCookie},
		{name: "wrong cookie (Write)", from: aData, dgram: f.write(t, psn, f.cookie+1, qb), want: cBadCookie},
		{name: "zero cookie", from: aData, dgram: f.write(t, psn, 0, qb), want: cBadCookie},
		{name: "QPN that does not exist", from: aData, dgram: f.write(t, psn, f.cookie, noQPN), want: cNoQP},
		{name: "QPN of an unconnected QP", from: aData, dgram: f.write(t, psn, f.cookie, f.idle.QPN()), want: cNoQP},
		{name: "QPN 0", from: aData, dgram: f.write(t, psn, f.cookie, 0), want: cNoQP},
		{name: "PSN at the end of the window (Send)", from: aData, dgram: f.send(t, psn.Add(window), f.cookie, qb), want: cOutOfWindow},
		{name: "PSN at the end of the window (Write)", from: aData, dgram: f.write(t, psn.Add(window), f.cookie, qb), want: cOutOfWindow},
		{name: "PSN half the space ahead", from: aData, dgram: f.write(t, psn.Add(1<<31-1), f.cookie, qb), want: cOutOfWindow},
		{name: "PSN more than a window behind", from: aData, dgram: f.write(t, psn-wire.PSN(window)-1, f.cookie, qb), want: cOutOfWindow},
		{name: "source: a third host", from: third, dgram: good, want: cBadSource},
		{name: "source: A's IP, another port", from: netip.AddrPortFrom(f.aAddr.Addr(), f.aPort+1), dgram: good, want: cBadSource},
		{name: "source: A's CM port", from: f.aAddr, dgram: good, want: cBadSource},
		{name: "source: B's own address", from: netip.AddrPortFrom(f.bAddr.Addr(), f.aPort), dgram: f.send(t, psn, f.cookie, qb), want: cBadSource},
		{name: "DisconnectReq with the wrong cookie", from: f.aAddr, dgram: forgeCM(t, wire.OpDisconnectReq, qb, f.cookie^1, wire.CMExt{SrcQPN: qa, DataPort: f.aPort}), want: cCMDropped},
		{name: "DisconnectReq from a third host", from: simHost(3, pairCMPort), dgram: forgeCM(t, wire.OpDisconnectReq, qb, f.cookie, wire.CMExt{SrcQPN: qa, DataPort: f.aPort}), want: cCMDropped},
		{name: "DisconnectReq from A's data port", from: aData, dgram: forgeCM(t, wire.OpDisconnectReq, qb, f.cookie, wire.CMExt{SrcQPN: qa, DataPort: f.aPort}), want: cCMDropped},
		{name: "DisconnectReq to the unconnected QP", from: f.aAddr, dgram: forgeCM(t, wire.OpDisconnectReq, f.idle.QPN(), f.cookie, wire.CMExt{SrcQPN: qa}), want: cCMDropped},
		{name: "DisconnectRep with the wrong cookie", from: f.aAddr, dgram: forgeCM(t, wire.OpDisconnectRep, qb, f.cookie^1, wire.CMExt{SrcQPN: qa}), want: cCMDropped},
		{name: "ConnReject to B", from: f.aAddr, dgram: forgeCM(t, wire.OpConnReject, 0, 0, wire.CMExt{ConnID: f.connID, Reason: transport.RejectByPeer}), want: cCMDropped},
		{name: "ReadyToUse with the wrong cookie", from: f.aAddr, dgram: forgeCM(t, wire.OpReadyToUse, qb, f.cookie^1, wire.CMExt{ConnID: f.connID, SrcQPN: qa, DataPort: f.aPort}), want: cCMDropped},
		{name: "ConnReject to A from B's address", toA: true, from: f.bAddr, dgram: forgeCM(t, wire.OpConnReject, 0, 0, wire.CMExt{ConnID: f.connID, Reason: transport.RejectByPeer}), want: cCMDropped},
		{name: "ConnReject to A from a third host", toA: true, from: simHost(3, pairCMPort), dgram: forgeCM(t, wire.OpConnReject, 0, 0, wire.CMExt{ConnID: f.connID, Reason: transport.RejectByPeer}), want: cCMDropped},
		{name: "ConnReply to A from a third host", toA: true, from: simHost(3, pairCMPort), dgram: forgeCM(t, wire.OpConnReply, qa, f.cookie^1, wire.CMExt{ConnID: f.connID, SrcQPN: qb, Cookie: f.cookie ^ 1, MaxPayload: 1472, DataPort: 1}), want: cCMDropped},
		{name: "DisconnectReq to A with the wrong cookie", toA: true, from: f.bAddr, dgram: forgeCM(t, wire.OpDisconnectReq, qa, f.cookie^1, wire.CMExt{SrcQPN: qb, DataPort: f.bPort}), want: cCMDropped},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { f.expectDropped(t, c, false) })
	}

	// A replay of A's last Write, byte for byte from A's own source: a duplicate, which
	// may be answered with an ack (as a lost ack would be) but is never placed again.
	t.Run("replay of a Write", func(t *testing.T) {
		last := f.ta.lastOf(t, wire.OpWrite)
		if last.LocalPort != f.aPort {
			t.Fatalf("A's Write left from port %d, its acks from %d", last.LocalPort, f.aPort)
		}
		fillByte(f.regionB[100:3100], scribbleByte) // where the original Write landed
		before := f.snapshot()
		rx0 := f.b.Stats().RxPackets
		injectFrom(t, f.world, aData, f.bAddr, last.Raw)
		f.runUntil(time.Millisecond, "replay: arrival", func() bool { return f.b.Stats().RxPackets > rx0 })
		f.runFor(60 * time.Microsecond)
		after := f.snapshot()
		eb := after.eb
		eb.RxPackets, eb.TxPackets = before.eb.RxPackets, before.eb.TxPackets
		if eb != before.eb {
			t.Errorf("B's drop counters changed: %+v, was %+v", after.eb, before.eb)
		}
		if d := after.sb.Duplicates - before.sb.Duplicates; d != 1 {
			t.Errorf("B counted %d duplicates, want 1", d)
		}
		if after.sb.RxPackets != before.sb.RxPackets || after.sb.RxBytes != before.sb.RxBytes {
			t.Errorf("B accepted the replay: %+v", after.sb)
		}
		if ok, at := allByte(f.regionB[100:3100], scribbleByte); !ok {
			t.Errorf("the replayed Write was placed again (byte %d)", at)
		}
		if after.completions != before.completions || after.stA != transport.QPConnected || after.stB != transport.QPConnected {
			t.Errorf("replay: completions %d -> %d, states %v %v", before.completions, after.completions, after.stA, after.stB)
		}
	})

	t.Run("traffic after", func(t *testing.T) { f.traffic(t, "after the forgeries") })

	// Controls, last because they break the connection: the same forgeries with nothing
	// wrong are taken, so each case above was refused for its one wrong field. (The
	// cookie is the connection's only secret; an attacker who reads the path can inject.)
	t.Run("control: a Write right in every field lands", func(t *testing.T) {
		psn := f.ta.nextPSN(t)
		rx := f.qb.Stats().RxPackets
		injectFrom(t, f.world, aData, f.bAddr, f.write(t, psn, f.cookie, qb))
		f.runFor(100 * time.Microsecond)
		if ok, _ := allByte(f.regionB[8000:8200], 0xEE); !ok || f.qb.Stats().RxPackets != rx+1 {
			t.Errorf("the control Write was not placed (B received %d packets)", f.qb.Stats().RxPackets-rx)
		}
	})
	t.Run("control: a DisconnectReq right in every field disconnects", func(t *testing.T) {
		injectFrom(t, f.world, f.aAddr, f.bAddr, forgeCM(t, wire.OpDisconnectReq, qb, f.cookie, wire.CMExt{SrcQPN: qa, DataPort: f.aPort}))
		f.runFor(100 * time.Microsecond)
		if f.qb.State() != transport.QPDisconnected || f.disconnects.Load() != 1 {
			t.Errorf("B is %v after the control DisconnectReq, OnDisconnect called %d times", f.qb.State(), f.disconnects.Load())
		}
	})
}

// TestForgedAcks forges acknowledgements and NAKs to A while one of its Writes is
// outstanding (the path to B loses everything, so no real ack comes): none may complete
// the Write or fail the QP. Then the path heals and the Write completes byte-exact.
func TestForgedAcks(t *testing.T) {
	f := newForgedWorld(t)
	qa := f.qa.QPN()
	if err := f.net.SetPath(f.aAddr, f.bAddr, simlink.Impairments{Latency: 5 * time.Microsecond, Loss: 1}); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 4000)
	fillRandom(data, rand.New(rand.NewPCG(41, 9)))
	tx0 := f.qa.Stats().TxPackets
	if err := f.qa.PostSend(&transport.WorkRequest{Kind: transport.OpWrite, NSGE: 1, SGL: [transport.MaxSGE][]byte{data}, RemoteAddr: winBaseB + 9000, RemoteToken: winTokenB, Context: 50}); err != nil {
		t.Fatal(err)
	}
	f.runUntil(time.Millisecond, "write sent", func() bool { return f.qa.Stats().TxPackets >= tx0+3 })
	next := f.ta.nextPSN(t) // A's stream: everything before it is in flight
	bData := netip.AddrPortFrom(f.bAddr.Addr(), f.bPort)
	ackAll := func(cookie uint64, ackPSN wire.PSN, syn wire.Syndrome, nakPSN wire.PSN) []byte {
		return forge(t, wire.Packet{Header: wire.Header{Opcode: wire.OpAck, DestQPN: qa, Cookie: cookie, TS: 1},
			Ack: wire.AckExt{AckPSN: ackPSN, SACK: ^uint64(0), Credits: f.nextMSN + 100, Syndrome: syn, NakPSN: nakPSN}}, nil)
	}
	everything := ackAll(f.cookie, next, wire.SynAck, 0)
	nak := ackAll(f.cookie, next-3, wire.SynNakAccess, next-3)
	cases := []forgedCase{
		{name: "ack of everything from a third host", from: simHost(3, f.bPort), dgram: everything, want: cBadSource},
		{name: "ack of everything from B's CM port", from: f.bAddr, dgram: everything, want: cBadSource},
		{name: "ack of everything from B's IP, another port", from: netip.AddrPortFrom(f.bAddr.Addr(), f.bPort+1), dgram: everything, want: cBadSource},
		{name: "ack of everything with the wrong cookie", from: bData, dgram: ackAll(f.cookie^1<<63, next, wire.SynAck, 0), want: cBadCookie},
		{name: "ack of everything to another QPN", from: bData, dgram: forge(t, wire.Packet{Header: wire.Header{Opcode: wire.OpAck, DestQPN: qa + 1, Cookie: f.cookie, TS: 1},
			Ack: wire.AckExt{AckPSN: next}}, nil), want: cNoQP},
		{name: "access NAK from a third host", from: simHost(3, f.bPort), dgram: nak, want: cBadSource},
		{name: "access NAK with the wrong cookie", from: bData, dgram: ackAll(f.cookie+1, next-3, wire.SynNakAccess, next-3), want: cBadCookie},
		{name: "ack with a bad CRC", from: bData, dgram: func() []byte { b := bytes.Clone(everything); b[len(b)-2] ^= 4; return b }(), want: cMalformed},
		// Right in every field the attacker can know, but acknowledging PSNs A never sent:
		// SentHistory refuses the whole ack.
		{name: "ack beyond anything sent", from: bData, dgram: ackAll(f.cookie, next.Add(1000), wire.SynAck, 0), want: cNone},
	}
	for _, c := range cases {
		c.toA = true
		t.Run(c.name, func(t *testing.T) { f.expectDropped(t, c, true) })
	}
	if n := len(f.rec.of(f.qa, transport.OpWrite)); n != 1 {
		t.Fatalf("A has %d Write completions before the path healed: %s", n, statusOf(f.rec.of(f.qa)))
	}
	f.net.ClearPath(f.aAddr, f.bAddr)
	f.runUntil(time.Second, "write after healing", func() bool { return len(f.rec.of(f.qa, transport.OpWrite)) == 2 })
	if c := f.rec.of(f.qa, transport.OpWrite)[1]; c != (transport.Completion{Context: 50, Op: transport.OpWrite, Status: transport.StatusSuccess, Bytes: 4000}) {
		t.Fatalf("write completed %+v", c)
	}
	if !bytes.Equal(f.regionB[9000:13000], data) {
		t.Fatal("the Write did not land byte-exact")
	}
	f.traffic(t, "after the forged acks")

	// Control: the ack right in every field completes a Write B never received, so the
	// cases above were refused for their one wrong field.
	if err := f.net.SetPath(f.aAddr, f.bAddr, simlink.Impairments{Latency: 5 * time.Microsecond, Loss: 1}); err != nil {
		t.Fatal(err)
	}
	tx0 = f.qa.Stats().TxPackets
	if err := f.qa.PostSend(&transport.WorkRequest{Kind: transport.OpWrite, NSGE: 1, SGL: [transport.MaxSGE][]byte{data[:10]}, RemoteAddr: winBaseB, RemoteToken: winTokenB, Context: 51}); err != nil {
		t.Fatal(err)
	}
	f.runUntil(time.Millisecond, "control write sent", func() bool { return f.qa.Stats().TxPackets > tx0 })
	injectFrom(t, f.world, bData, f.aAddr, ackAll(f.cookie, f.ta.nextPSN(t), wire.SynAck, 0))
	f.runFor(100 * time.Microsecond)
	if ws := f.rec.of(f.qa, transport.OpWrite); len(ws) != 4 || ws[3].Context != 51 || ws[3].Status != transport.StatusSuccess {
		t.Errorf("the control ack did not complete the Write: %s", statusOf(ws))
	}
}
