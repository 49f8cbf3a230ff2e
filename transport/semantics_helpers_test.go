package transport_test

// Helpers of the semantic conformance tests (semantics_test.go, cm_test.go). Every name
// here starts with sem so that it cannot collide with the helpers of other test files of
// the package.

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"

	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/simlink"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// semMaxPayload is the datagram size of the semantic tests' networks; semMSS the payload
// bytes of one data packet on them (what the engine computes in QP.setup).
const (
	semMaxPayload = 1472
	semMSS        = semMaxPayload - wire.HeaderLen - wire.SendExtLen - wire.TrailerLen
	semPort       = 4793
)

// semAddr is the address of simulated host n: 198.18.x.y:4793 (the benchmarking range).
func semAddr(n int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(n >> 8), byte(n)}), semPort)
}

// semTap wraps a simlink link: it parses every datagram the engine sends and receives,
// counts them per opcode, can drop chosen outgoing ones (a lost message), and calls
// observers. The engine cannot tell it from the link.
type semTap struct {
	*simlink.Link
	clock func() int64

	mu     sync.Mutex
	sent   map[wire.Opcode]int // datagrams handed to the network, per opcode (retransmissions included)
	recvd  map[wire.Opcode]int
	drop   func(p *wire.Packet) bool // true: lose this outgoing datagram
	onTx   func(now int64, p *wire.Packet)
	onRx   func(now int64, p *wire.Packet)
	last   map[wire.Opcode][]byte // a copy of the last datagram sent, per opcode
	parsed wire.Packet
	segs   [link.MaxSegments][]byte

	maxPayload int // MaxPayload to report (0: the network's)
	largest    int // the longest datagram sent
}

// MaxPayload implements link.Link: maxPayload when set, as for a host whose link takes
// less than the network does.
func (t *semTap) MaxPayload() int {
	if t.maxPayload > 0 {
		return t.maxPayload
	}
	return t.Link.MaxPayload()
}

func newSemTap(l *simlink.Link, clock func() int64) *semTap {
	return &semTap{Link: l, clock: clock, sent: map[wire.Opcode]int{}, recvd: map[wire.Opcode]int{}, last: map[wire.Opcode][]byte{}}
}

// parse parses pk into t.parsed; false if it is not a valid datagram. t.mu held.
func (t *semTap) parse(pk *link.Packet) bool {
	n := min(int(pk.NSegs), link.MaxSegments)
	for i := range n {
		t.segs[i] = pk.Segs[i]
	}
	return wire.Parse(t.segs[:n], &t.parsed) == nil
}

// Send implements link.Link: datagrams are passed on one at a time so that a dropped
// one can be skipped while still being reported as sent.
func (t *semTap) Send(pkts []link.Packet) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range pkts {
		t.largest = max(t.largest, pkts[i].Len())
		if t.parse(&pkts[i]) {
			if t.drop != nil && t.drop(&t.parsed) {
				continue // lost on the wire
			}
			op := t.parsed.Opcode
			if n, err := t.Link.Send(pkts[i : i+1]); n == 0 {
				return i, err
			}
			t.sent[op]++
			t.last[op] = t.last[op][:0]
			for _, seg := range pkts[i].Segs[:pkts[i].NSegs] {
				t.last[op] = append(t.last[op], seg...)
			}
			if t.onTx != nil {
				t.onTx(t.clock(), &t.parsed)
			}
			continue
		}
		if n, err := t.Link.Send(pkts[i : i+1]); n == 0 {
			return i, err
		}
	}
	return len(pkts), nil
}

// Receive implements link.Link.
func (t *semTap) Receive(pkts []link.Packet) (int, error) {
	n, err := t.Link.Receive(pkts)
	if n == 0 {
		return n, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range pkts[:n] {
		if t.parse(&pkts[i]) {
			t.recvd[t.parsed.Opcode]++
			if t.onRx != nil {
				t.onRx(t.clock(), &t.parsed)
			}
		}
	}
	return n, err
}

// replay sends a copy of the last datagram of opcode op again, to to (a delayed
// duplicate). Engine goroutine only (virtual-time tests).
func (t *semTap) replay(op wire.Opcode, to netip.AddrPort) error {
	t.mu.Lock()
	b := append([]byte(nil), t.last[op]...)
	t.mu.Unlock()
	if len(b) == 0 {
		return errors.New("nothing to replay")
	}
	pk := link.Packet{Remote: to}
	pk.SetData(b)
	_, err := t.Link.Send([]link.Packet{pk})
	return err
}

// sentCount returns how many datagrams of opcode op went out.
func (t *semTap) sentCount(op wire.Opcode) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sent[op]
}

// recvCount returns how many datagrams of opcode op came in.
func (t *semTap) recvCount(op wire.Opcode) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.recvd[op]
}

// setDrop installs a loss function (nil: lose nothing).
func (t *semTap) setDrop(f func(p *wire.Packet) bool) {
	t.mu.Lock()
	t.drop = f
	t.mu.Unlock()
}

// semDropFirst returns a loss function that loses the first n datagrams of opcode op.
func semDropFirst(op wire.Opcode, n int) func(p *wire.Packet) bool {
	return func(p *wire.Packet) bool {
		if p.Opcode == op && n > 0 {
			n--
			return true
		}
		return false
	}
}

// semRawMsg is a datagram a raw host received.
type semRawMsg struct {
	at   int64
	from netip.AddrPort
	op   wire.Opcode
	cm   wire.CMExt
	priv []byte
}

// semNode is one simulated host: an engine on a tapped link, or a raw host that sends
// hand-made datagrams and records what it receives.
type semNode struct {
	w    *semWorld
	addr netip.AddrPort
	link *simlink.Link
	tap  *semTap
	eng  *transport.Engine // nil for a raw host
	mem  *testMem

	rx   []semRawMsg // raw host: what arrived
	pkts [64]link.Packet
	buf  [semMaxPayload]byte
}

// semWorld is engines (and raw hosts) on one simulated network, driven in virtual time by
// the test goroutine, like the harness's world but with any number of hosts, tapped links
// and per-side QP configurations.
type semWorld struct {
	t     testing.TB
	clock *simlink.ManualClock
	net   *simlink.Network
	rec   *recorder
	nodes []*semNode
	svc   uint64
}

// newSemWorld makes an empty network with ncfg (its clock replaced by a manual one).
func newSemWorld(t testing.TB, ncfg simlink.Config) *semWorld {
	t.Helper()
	w := &semWorld{t: t, clock: simlink.NewManualClock(1), rec: newRecorder(), svc: 100}
	ncfg.Clock = w.clock
	if ncfg.MaxPayload == 0 {
		ncfg.MaxPayload = semMaxPayload
	}
	w.net = simlink.NewNetwork(ncfg)
	t.Cleanup(func() { w.net.Close() })
	return w
}

// newSemPair is the common case: engines a (host 1) and b (host 2), with a 5 µs latency.
func newSemPair(t testing.TB, tweak func(*transport.Config)) (w *semWorld, a, b *semNode) {
	t.Helper()
	w = newSemWorld(t, simlink.Config{Seed: 1, Default: simlink.Impairments{Latency: 5 * time.Microsecond}})
	return w, w.engine(1, tweak), w.engine(2, tweak)
}

// engine adds host n with an engine on a tapped link.
func (w *semWorld) engine(n int, tweak func(*transport.Config)) *semNode {
	w.t.Helper()
	l, err := w.net.AddHost(semAddr(n))
	if err != nil {
		w.t.Fatal(err)
	}
	nd := &semNode{w: w, addr: semAddr(n), link: l, mem: newTestMem()}
	nd.tap = newSemTap(l, w.clock.Now)
	cfg := transport.DefaultConfig(nd.tap)
	cfg.Now = w.clock.Now
	cfg.Resolver = nd.mem
	if tweak != nil {
		tweak(&cfg)
	}
	if nd.eng, err = transport.NewEngine(cfg); err != nil {
		w.t.Fatal(err)
	}
	w.nodes = append(w.nodes, nd)
	return nd
}

// raw adds host n without an engine.
func (w *semWorld) raw(n int) *semNode {
	w.t.Helper()
	l, err := w.net.AddHost(semAddr(n))
	if err != nil {
		w.t.Fatal(err)
	}
	nd := &semNode{w: w, addr: semAddr(n), link: l}
	w.nodes = append(w.nodes, nd)
	return nd
}

// drain receives and records everything that arrived at a raw host.
func (nd *semNode) drain() bool {
	got := false
	for {
		n, _ := nd.link.Receive(nd.pkts[:])
		if n == 0 {
			return got
		}
		got = true
		for i := range nd.pkts[:n] {
			pk := &nd.pkts[i]
			var p wire.Packet
			if wire.Parse(pk.Segs[:pk.NSegs], &p) == nil {
				nd.rx = append(nd.rx, semRawMsg{at: nd.w.clock.Now(), from: pk.Remote, op: p.Opcode, cm: p.CM,
					priv: append([]byte(nil), p.PrivateData...)})
			}
		}
		nd.link.Release(nd.pkts[:n])
	}
}

// sendRaw sends a hand-made datagram from a raw host: p (header, extension, private data)
// and payload, with a correct CRC.
func (nd *semNode) sendRaw(to netip.AddrPort, p *wire.Packet, payload []byte) {
	nd.w.t.Helper()
	if p.Opcode >= wire.OpConnRequest {
		p.CM.PrivateLen = uint16(len(p.PrivateData))
	}
	hl, err := wire.Encode(nd.buf[:], p)
	if err != nil {
		nd.w.t.Fatal(err)
	}
	n := hl + copy(nd.buf[hl:], payload)
	crc := wire.UpdateCRC(0, nd.buf[:n])
	wire.PutTrailer(nd.buf[n:n+wire.TrailerLen], crc)
	pk := link.Packet{Remote: to}
	pk.SetData(nd.buf[:n+wire.TrailerLen])
	if _, err := nd.link.Send([]link.Packet{pk}); err != nil {
		nd.w.t.Fatal(err)
	}
}

// rawCount counts the datagrams of opcode op a raw host received.
func (nd *semNode) rawCount(op wire.Opcode) int {
	c := 0
	for _, m := range nd.rx {
		if m.op == op {
			c++
		}
	}
	return c
}

// step polls every engine once and drains every raw host; if nothing happened it moves the
// clock to the next thing due, but not past horizon (0: no horizon). False: nothing at all
// is scheduled.
func (w *semWorld) step(horizon int64) bool {
	now := w.clock.Now()
	busy := false
	next := int64(0)
	for _, nd := range w.nodes {
		if nd.eng == nil {
			busy = nd.drain() || busy
			continue
		}
		n, b := nd.eng.Poll(now)
		busy = busy || b
		if n > now && (next == 0 || n < next) {
			next = n
		}
	}
	if busy {
		return true
	}
	if d, ok := w.net.NextDelivery(); ok && (next == 0 || d < next) {
		next = d
	}
	if next == 0 {
		return false
	}
	if horizon > 0 && next > horizon {
		next = horizon
	}
	w.clock.Set(max(next, now+1))
	return true
}

const semMaxSteps = 20_000_000

// runUntil steps until cond holds; it fails the test past limit of virtual time, after too
// many steps, or when nothing is scheduled any more and cond does not hold.
func (w *semWorld) runUntil(limit time.Duration, what string, cond func() bool) {
	w.t.Helper()
	runSteps(w.t, w.clock, limit, semMaxSteps, what, cond, func() bool { return w.step(0) })
}

// runFor steps for d of virtual time.
func (w *semWorld) runFor(d time.Duration) {
	w.t.Helper()
	end := w.clock.Now() + int64(d)
	for steps := 0; w.clock.Now() < end; steps++ {
		if steps > semMaxSteps {
			w.t.Fatalf("runFor %v: too many steps", d)
		}
		if !w.step(end) {
			w.clock.Set(end)
		}
	}
}

// elapsedSince returns the virtual time since t0.
func (w *semWorld) elapsedSince(t0 int64) time.Duration { return time.Duration(w.clock.Now() - t0) }

// qp makes a QP on node nd reporting to the world's recorder.
func (nd *semNode) qp(cfg transport.QPConfig) *transport.QP {
	nd.w.t.Helper()
	if cfg.Sink == nil {
		cfg.Sink = nd.w.rec
	}
	q, err := nd.eng.NewQP(cfg)
	if err != nil {
		nd.w.t.Fatal(err)
	}
	return q
}

// connectQPs connects existing idle QPs qa (on a) and qb (on b, through a listener on a new
// service) and returns the connector and the request.
func (w *semWorld) connectQPs(a *semNode, qa *transport.QP, b *semNode, qb *transport.QP) (*transport.Connector, *transport.ConnRequest) {
	w.t.Helper()
	w.svc++
	l, err := b.eng.Listen(w.svc, 4)
	if err != nil {
		w.t.Fatal(err)
	}
	defer l.Close()
	conn, err := a.eng.Connect(qa, b.addr, w.svc, nil, 0)
	if err != nil {
		w.t.Fatal(err)
	}
	req := semNextRequest(w, l)
	if err := req.Accept(qb, nil, 0); err != nil {
		w.t.Fatal(err)
	}
	finishConnect(w.t, w, conn, req, qa, nil)
	if qa.State() != transport.QPConnected || qb.State() != transport.QPConnected {
		w.t.Fatalf("after connect: states %v / %v", qa.State(), qb.State())
	}
	return conn, req
}

// connect makes a connected QP pair with per-side configurations.
func (w *semWorld) connect(a *semNode, cfgA transport.QPConfig, b *semNode, cfgB transport.QPConfig) (qa, qb *transport.QP) {
	w.t.Helper()
	qa, qb = a.qp(cfgA), b.qp(cfgB)
	w.connectQPs(a, qa, b, qb)
	return qa, qb
}

// semNextRequest runs until the listener delivers a request.
func semNextRequest(w *semWorld, l *transport.Listener) *transport.ConnRequest {
	w.t.Helper()
	return awaitRequest(w.t, w, "connection request", l)
}

// semDial makes idle QPs qa on a and qb on b and a listener l on b for service 5 with
// backlog n, and connects qa to it with private data priv.
func semDial(t testing.TB, a, b *semNode, n int, priv []byte) (qa, qb *transport.QP, l *transport.Listener, conn *transport.Connector) {
	t.Helper()
	qa, qb = a.qp(transport.QPConfig{}), b.qp(transport.QPConfig{})
	l, err := b.eng.Listen(5, n)
	if err != nil {
		t.Fatal(err)
	}
	if conn, err = a.eng.Connect(qa, b.addr, 5, priv, 0); err != nil {
		t.Fatal(err)
	}
	return qa, qb, l, conn
}

// semReplied runs until conn's reply arrives and fails the test if it is an error.
func semReplied(t testing.TB, w *semWorld, conn *transport.Connector) {
	t.Helper()
	w.runUntil(time.Second, "reply", func() bool { d, _ := conn.Replied(); return d })
	if _, err := conn.Replied(); err != nil {
		t.Fatal(err)
	}
}

// semEstablished runs until req is established and fails the test if that is an error.
func semEstablished(t testing.TB, w *semWorld, req *transport.ConnRequest) {
	t.Helper()
	semAwaitEstablished(w, req)
	if _, err := req.Established(); err != nil {
		t.Fatal(err)
	}
}

// semAwaitEstablished runs until req is established, with or without an error.
func semAwaitEstablished(w *semWorld, req *transport.ConnRequest) {
	w.t.Helper()
	w.runUntil(time.Second, "established", func() bool { d, _ := req.Established(); return d })
}

// semComplete runs until conn's reply arrives (not checking it) and completes the
// connection, failing the test if Complete does.
func semComplete(t testing.TB, w *semWorld, conn *transport.Connector) {
	t.Helper()
	w.runUntil(time.Second, "reply", func() bool { d, _ := conn.Replied(); return d })
	if err := conn.Complete(); err != nil {
		t.Fatal(err)
	}
}

// semRejected runs until conn's answer arrives and checks that it is a rejection
// (ErrRejected).
func semRejected(t testing.TB, w *semWorld, conn *transport.Connector, what string) {
	t.Helper()
	w.runUntil(time.Second, "rejection", func() bool { d, _ := conn.Replied(); return d })
	_, err := conn.Replied()
	semIs(t, what, err, transport.ErrRejected)
}

// semFinish is semReplied, the connector's Complete, and semEstablished: an accepted
// connection run to the end.
func semFinish(t testing.TB, w *semWorld, conn *transport.Connector, req *transport.ConnRequest) {
	t.Helper()
	semReplied(t, w, conn)
	if err := conn.Complete(); err != nil {
		t.Fatal(err)
	}
	semEstablished(t, w, req)
}

// semSGL makes an SGL of bufs.
func semSGL(bufs ...[]byte) (n uint8, sgl [transport.MaxSGE][]byte) {
	copy(sgl[:], bufs)
	return uint8(len(bufs)), sgl
}

// semSend is a Send of bufs.
func semSend(ctx uint64, flags transport.WRFlags, bufs ...[]byte) *transport.WorkRequest {
	n, sgl := semSGL(bufs...)
	return &transport.WorkRequest{Kind: transport.OpSend, Flags: flags, NSGE: n, SGL: sgl, Context: ctx}
}

// semSendInv is a SendAndInvalidate of bufs naming token.
func semSendInv(ctx uint64, token uint32, bufs ...[]byte) *transport.WorkRequest {
	wr := semSend(ctx, 0, bufs...)
	wr.Kind, wr.InvToken = transport.OpSendInv, token
	return wr
}

// semWrite is a Write of bufs to addr/token.
func semWrite(ctx uint64, flags transport.WRFlags, addr uint64, token uint32, bufs ...[]byte) *transport.WorkRequest {
	n, sgl := semSGL(bufs...)
	return &transport.WorkRequest{Kind: transport.OpWrite, Flags: flags, NSGE: n, SGL: sgl, RemoteAddr: addr, RemoteToken: token, Context: ctx}
}

// semRead is a Read of addr/token into bufs.
func semRead(ctx uint64, flags transport.WRFlags, addr uint64, token uint32, bufs ...[]byte) *transport.WorkRequest {
	wr := semWrite(ctx, flags, addr, token, bufs...)
	wr.Kind = transport.OpRead
	return wr
}

// semPost posts wr and fails the test on an error.
func semPost(t testing.TB, q *transport.QP, wr *transport.WorkRequest) {
	t.Helper()
	if err := q.PostSend(wr); err != nil {
		t.Fatalf("post %v ctx %d: %v", wr.Kind, wr.Context, err)
	}
}

// semRecv posts a receive of bufs and fails the test on an error.
func semRecv(t testing.TB, q *transport.QP, ctx uint64, bufs ...[]byte) {
	t.Helper()
	n, sgl := semSGL(bufs...)
	if err := q.PostReceive(&transport.Receive{NSGE: n, SGL: sgl, Context: ctx}); err != nil {
		t.Fatalf("post receive ctx %d: %v", ctx, err)
	}
}

// semWant is an expected completion.
type semWant struct {
	ctx uint64
	op  transport.OpKind
	st  transport.Status
}

// semExpect checks that got is exactly want, in order (context, operation, status), and
// stops the test if not.
func semExpect(t testing.TB, what string, got []transport.Completion, want ...semWant) {
	t.Helper()
	if !semMatch(t, what, got, want...) {
		t.FailNow()
	}
}

// semMatch is semExpect that only reports the mismatch (and returns false).
func semMatch(t testing.TB, what string, got []transport.Completion, want ...semWant) bool {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = got[i].Context == want[i].ctx && got[i].Op == want[i].op && got[i].Status == want[i].st
	}
	if !ok {
		exp := ""
		for _, x := range want {
			exp += fmt.Sprintf("[%v %v ctx=%d] ", x.op, x.st, x.ctx)
		}
		t.Errorf("%s completions:\n got  %s\n want %s", what, statusOf(got), exp)
	}
	return ok
}

// semState checks a QP's state.
func semState(t testing.TB, what string, q *transport.QP, want transport.QPState) {
	t.Helper()
	if got := q.State(); got != want {
		t.Fatalf("%s: QP state %v, want %v", what, got, want)
	}
}

// semIs checks errors.Is(err, target).
func semIs(t testing.TB, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error %v, want %v", what, err, target)
	}
}

// semGuarded is a registered region inside a larger buffer whose guard bytes on both
// sides let a test see stray writes.
type semGuarded struct {
	all    []byte // guard | region | guard
	region []byte
	orig   []byte // the initial contents of all
}

const semGuard = 512

// newSemGuarded makes a region of size bytes with guards, filled with a pattern.
func newSemGuarded(size, seed int) *semGuarded {
	g := &semGuarded{all: make([]byte, size+2*semGuard)}
	pattern(g.all, seed)
	g.region = g.all[semGuard : semGuard+size]
	g.orig = append([]byte(nil), g.all...)
	return g
}

// unchanged reports the first changed byte's offset relative to the region (negative: in
// the leading guard), or ok.
func (g *semGuarded) unchanged() (off int, ok bool) {
	for i := range g.all {
		if g.all[i] != g.orig[i] {
			return i - semGuard, false
		}
	}
	return 0, true
}
