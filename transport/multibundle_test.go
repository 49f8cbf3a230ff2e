package transport_test

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/simlink"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// Packing across QPs (bundle.go, docs/PROTOCOL.md §5.2): the small data packets of several
// QPs to one peer that leave in one engine round share a datagram, each QP's entries in a
// group of their own; each entry is matched and taken as its plain packet would be.

// multiWorkload posts, before the engines run, perQP small Writes (every third gathered
// from three SGEs) on each of qas to regions of B, and runs run until every one completed.
// It checks the completions (success, posting order, bytes) and the memory.
func multiWorkload(t *testing.T, memB *testMem, rec *recorder, run func(time.Duration, string, func() bool), qas []*transport.QP, perQP, size int) {
	t.Helper()
	srcs, dsts := make([][]byte, len(qas)), make([][]byte, len(qas))
	rng := rand.New(rand.NewPCG(uint64(len(qas)), uint64(perQP)))
	for q := range qas {
		tok := uint32(500 + q)
		dsts[q] = make([]byte, perQP*size)
		base := uint64(1)<<40 + uint64(q)<<24
		memB.add(tok, 0, base, dsts[q], memreg.AccessRemoteWrite)
		srcs[q] = make([]byte, perQP*size)
		fillRandom(srcs[q], rng)
	}
	before := make([]int, len(qas))
	for q, qa := range qas {
		before[q] = rec.count(qa)
	}
	for i := range perQP {
		for q, qa := range qas {
			piece := srcs[q][i*size : (i+1)*size]
			wr := transport.WorkRequest{Kind: transport.OpWrite, RemoteAddr: uint64(1)<<40 + uint64(q)<<24 + uint64(i*size), RemoteToken: uint32(500 + q), Context: uint64(i)}
			if i%3 == 0 && size >= 3 {
				wr.NSGE, wr.SGL[0], wr.SGL[1], wr.SGL[2] = 3, piece[:1], piece[1:2], piece[2:]
			} else {
				wr.NSGE, wr.SGL[0] = 1, piece
			}
			if err := qa.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
		}
	}
	run(20*time.Second, "every request", func() bool {
		for q, qa := range qas {
			if rec.count(qa) < before[q]+perQP {
				return false
			}
		}
		return true
	})
	for q, qa := range qas {
		for i, c := range rec.of(qa)[before[q]:] {
			if c.Status != transport.StatusSuccess || c.Context != uint64(i) || int(c.Bytes) != size {
				t.Fatalf("QP %d completion %d: %+v", q, i, c)
			}
		}
		if !bytes.Equal(dsts[q], srcs[q]) {
			t.Fatalf("QP %d: written memory differs", q)
		}
	}
}

// connectN connects n QP pairs of w.
func connectN(w *world, n int) (qas, qbs []*transport.QP) {
	for range n {
		qa, qb := w.connect(transport.QPConfig{SendDepth: 512})
		qas, qbs = append(qas, qa), append(qbs, qb)
	}
	return qas, qbs
}

// TestPackAcrossQPs: 32 QPs to one peer with 4 small Writes each, posted at once, leave in
// multi-QP Bundles (far fewer datagrams than packets); every request completes in order,
// byte-exact, and the peer takes exactly the entries that were sent, each by its own QP.
func TestPackAcrossQPs(t *testing.T) {
	w := newWorld(t, simlink.Config{MaxPayload: 1472, Default: simlink.Impairments{Latency: 5 * time.Microsecond}}, nil)
	qas, qbs := connectN(w, 32)
	a0, b0 := w.a.Stats(), w.b.Stats()
	acks0 := acksSent(qbs)
	multiWorkload(t, w.memB, w.rec, w.runUntil, qas, 4, 64)
	a, b := w.a.Stats(), w.b.Stats()
	sent, multi := a.BundledSent-a0.BundledSent, a.MultiBundlesSent-a0.MultiBundlesSent
	if multi == 0 || sent < 2*(a.BundlesSent-a0.BundlesSent) {
		t.Fatalf("A sent %d multi-QP bundles, %d bundles of %d packets: want packing across QPs", multi, a.BundlesSent-a0.BundlesSent, sent)
	}
	if dg := a.TxPackets - a0.TxPackets; dg >= 128/2 {
		t.Fatalf("A handed %d datagrams to the link for 128 requests", dg)
	}
	if b.MultiBundlesReceived-b0.MultiBundlesReceived != multi || b.BundledReceived-b0.BundledReceived != sent ||
		b.BundlesReceived-b0.BundlesReceived != a.BundlesSent-a0.BundlesSent {
		t.Fatalf("B received %+v, A sent %+v", b, a)
	}
	if b.NoQP+b.BadCookie+b.BadSource+b.Malformed != 0 {
		t.Fatalf("B dropped: %+v", b)
	}
	// B acknowledges each QP on its own (it sends no data to piggyback on); the Acks of the
	// QPs it answers in one round share datagrams too.
	acks, dgB := acksSent(qbs)-acks0, b.TxPackets-b0.TxPackets
	if acks < 32 || dgB*2 > acks || b.MultiBundlesSent == b0.MultiBundlesSent {
		t.Fatalf("B sent %d Acks of 32 QPs in %d datagrams (%d multi-QP bundles): want them packed", acks, dgB, b.MultiBundlesSent-b0.MultiBundlesSent)
	}
	if a.NoQP+a.BadCookie+a.BadSource+a.Malformed != 0 {
		t.Fatalf("A dropped: %+v", a)
	}
	t.Logf("128 Writes of 64 B on 32 QPs: %d datagrams from A, %d bundles (%d multi-QP) of %d packets; %d Acks from B in %d datagrams",
		a.TxPackets-a0.TxPackets, a.BundlesSent-a0.BundlesSent, multi, sent, acks, dgB)
}

// acksSent is the Acks (positive and negative) qs sent on their own, not piggybacked.
func acksSent(qs []*transport.QP) (n uint64) {
	for _, q := range qs {
		s := q.Stats()
		n += s.AcksSent + s.NaksSent
	}
	return n
}

// TestPackAcrossQPsLossy: the same under loss, reordering, duplication and corruption,
// with Sends too: every request completes, in order, byte-exact: what was lost of a
// multi-QP Bundle is resent by each of its QPs.
func TestPackAcrossQPsLossy(t *testing.T) {
	imp := simlink.Impairments{Latency: 5 * time.Microsecond, Loss: 0.05, Jitter: 30 * time.Microsecond, Duplicate: 0.05, Corrupt: 0.02}
	w := newWorld(t, simlink.Config{Seed: 19, MaxPayload: 1472, Default: imp}, nil)
	qas, _ := connectN(w, 24)
	multiWorkload(t, w.memB, w.rec, w.runUntil, qas, 30, 48)
	a := w.a.Stats()
	if a.MultiBundlesSent == 0 {
		t.Fatal("no multi-QP bundle sent")
	}
	var retx uint64
	for _, q := range qas {
		retx += q.Stats().Retransmits
	}
	if retx == 0 {
		t.Fatal("nothing was retransmitted under 5% loss")
	}
	t.Logf("%d multi-QP bundles, %d retransmissions", a.MultiBundlesSent, retx)
}

// TestPackAcrossQPsNoAllocs: a round of small Writes on 8 QPs, packed across them, posted,
// sent, received, acknowledged and completed, allocates nothing once warm.
func TestPackAcrossQPsNoAllocs(t *testing.T) {
	w := newWorld(t, simlink.Config{MaxPayload: 1472, Default: simlink.Impairments{Latency: 5 * time.Microsecond}}, nil)
	sink := &countSink{}
	l, err := w.b.Listen(7, 8)
	if err != nil {
		t.Fatal(err)
	}
	var qas []*transport.QP
	for range 8 {
		qa, err := w.a.NewQP(transport.QPConfig{Sink: sink})
		if err != nil {
			t.Fatal(err)
		}
		qb, err := w.b.NewQP(transport.QPConfig{Sink: sink})
		if err != nil {
			t.Fatal(err)
		}
		conn, err := w.a.Connect(qa, w.lb.LocalAddr(), 7, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		req := awaitRequest(t, w, "connection request", l)
		if err := req.Accept(qb, nil, 0); err != nil {
			t.Fatal(err)
		}
		finishConnect(t, w, conn, req, qa, nil)
		qas = append(qas, qa)
	}
	l.Close()
	target := make([]byte, 64*len(qas))
	w.memB.add(9, 0, 1<<30, target, memreg.AccessRemoteWrite)
	src := make([]byte, 64)
	wrs := make([]transport.WorkRequest, len(qas))
	for i := range wrs {
		wrs[i] = transport.WorkRequest{Kind: transport.OpWrite, NSGE: 1, RemoteAddr: 1<<30 + uint64(64*i), RemoteToken: 9}
		wrs[i].SGL[0] = src
	}
	var failure string
	round := func() {
		if failure != "" {
			return
		}
		want := sink.done[transport.OpWrite] + uint64(2*len(qas))
		for i, q := range qas {
			for range 2 { // two Writes on each QP
				if q.PostSend(&wrs[i]) != nil {
					failure = "post failed"
					return
				}
			}
		}
		for steps := 0; sink.done[transport.OpWrite] < want; steps++ {
			if sink.failed > 0 || steps > 100_000 || !w.step() {
				failure = "writes not complete"
				return
			}
		}
		// Let the last acks settle, without moving the clock past the settling time (to
		// the keepalive timers, whose probes would leave between the QPs' Writes).
		settle := w.clock.Now() + int64(100*time.Microsecond)
		for i := 0; i < 10_000; i++ {
			now := w.clock.Now()
			busy, next := w.poll(now)
			if busy {
				continue
			}
			if next == 0 || now >= settle {
				break
			}
			w.clock.Set(min(next, settle))
		}
	}
	for range 100 {
		round()
	}
	multi := w.a.Stats().MultiBundlesSent
	allocs := testing.AllocsPerRun(200, round)
	if failure != "" {
		t.Fatal(failure)
	}
	if w.a.Stats().MultiBundlesSent-multi < 200 {
		t.Fatalf("only %d multi-QP bundles in 200 rounds", w.a.Stats().MultiBundlesSent-multi)
	}
	if allocs != 0 {
		t.Errorf("Writes packed across 8 QPs: %v allocations per round, want 0", allocs)
	}
}

// TestGroupPackAcrossEngines: two engines per host, datagrams steered by flow hash (RSS):
// multi-QP Bundles carry entries of QPs that B's two engines own, and each engine takes its
// own entries (a datagram taken by both counts at each, so B counts more multi-QP Bundles
// than A sent); every request completes, byte-exact, and nothing is dropped.
func TestGroupPackAcrossEngines(t *testing.T) {
	w := newGroupWorld(t, 2, 2, simlink.SteerFlowHash, nil)
	// B's QPs on both engines: each on an SRQ of its own engine, where it stays when
	// accepted (an accepted QP without one moves to the engine its request arrived at).
	// A places its QPs on its engines in turn: pairs 4k and 4k+2 are A's engine 0's, and
	// their peers on B's engines 0 and 1.
	var srqs [2]*transport.SRQ
	for i := range srqs {
		var err error
		if srqs[i], err = w.gb.NewSRQ(16); err != nil {
			t.Fatal(err)
		}
	}
	l, err := w.gb.Listen(7, 16)
	if err != nil {
		t.Fatal(err)
	}
	var qas, qbs []*transport.QP
	for i := range 16 {
		qa, err := w.ga.NewQP(transport.QPConfig{SendDepth: 512, Sink: w.rec})
		if err != nil {
			t.Fatal(err)
		}
		qb, err := w.gb.NewQP(transport.QPConfig{SRQ: srqs[i/2%2], Sink: w.rec})
		if err != nil {
			t.Fatal(err)
		}
		w.connectPair(l, qa, qb)
		qas, qbs = append(qas, qa), append(qbs, qb)
	}
	l.Close()
	owners := map[*transport.Engine]int{}
	for _, q := range qbs {
		owners[q.Engine()]++
	}
	if len(owners) != 2 {
		t.Fatalf("B's QPs on %d engines, want both", len(owners))
	}
	multiWorkload(t, w.memB, w.rec, w.runUntil, qas, 4, 64)
	w.runUntil(time.Second, "inboxes taken", func() bool {
		a, b := w.ga.Stats(), w.gb.Stats()
		return a.ForwardReceived == a.Forwarded && b.ForwardReceived == b.Forwarded
	})
	a, b := w.ga.Stats(), w.gb.Stats()
	t.Logf("A: %+v", a)
	t.Logf("B: %+v", b)
	if a.MultiBundlesSent == 0 {
		t.Fatal("A sent no multi-QP bundle")
	}
	if b.Forwarded == 0 || b.MultiBundlesReceived <= a.MultiBundlesSent {
		t.Fatalf("B forwarded %d datagrams, received %d multi-QP bundles of A's %d: no bundle reached both engines",
			b.Forwarded, b.MultiBundlesReceived, a.MultiBundlesSent)
	}
	if b.BundledReceived != a.BundledSent {
		t.Fatalf("B took %d entries, A sent %d", b.BundledReceived, a.BundledSent)
	}
	if b.NoQP+b.BadCookie+b.BadSource+b.ForwardDropped != 0 {
		t.Fatalf("B dropped datagrams or entries: %+v", b)
	}
}

// forgedGroup is one group of a forged multi-QP Bundle: its header's fields and a Write.
type forgedGroup struct {
	qpn    uint32
	cookie uint64
	port   uint16
	psn    wire.PSN
	off    uint64 // where in B's region the Write goes
}

// forgeMulti encodes groups gs, each of one 200-byte Write of payload, as a multi-QP
// Bundle datagram.
func forgeMulti(t *testing.T, gs []forgedGroup, payload []byte) []byte {
	t.Helper()
	b := make([]byte, wire.HeaderLen, 4096)
	if err := wire.EncodeHeader(b, &wire.Header{Opcode: wire.OpMultiBundle, TS: 1}); err != nil {
		t.Fatal(err)
	}
	for _, g := range gs {
		var gh [wire.GroupHeaderLen]byte
		if err := wire.EncodeGroup(gh[:], g.qpn, g.cookie, g.port, 1); err != nil {
			t.Fatal(err)
		}
		p := wire.Packet{Header: wire.Header{Opcode: wire.OpWrite, Flags: wire.FlagAckReq | wire.FlagLast, PSN: g.psn},
			RDMA: wire.RDMAExt{Addr: winBaseB + g.off, Token: winTokenB, Length: uint32(len(payload))}}
		var eb [64]byte
		n, err := wire.EncodeEntry(eb[:], &p, len(payload))
		if err != nil {
			t.Fatal(err)
		}
		b = append(append(append(b, gh[:]...), eb[:n]...), payload...)
	}
	b = append(b, 0, 0, 0, 0)
	wire.PutTrailer(b[len(b)-wire.TrailerLen:], wire.UpdateCRC(0, b[:len(b)-wire.TrailerLen]))
	var check wire.Packet
	if err := wire.Parse([][]byte{b}, &check); err != nil {
		t.Fatalf("forged multi-QP bundle does not parse: %v", err)
	}
	return b
}

// TestMultiBundleForgedEntries: each entry of a multi-QP Bundle is matched as its plain
// packet would be. Entries for no QP, an unconnected QP, with the wrong cookie or from the
// wrong source port are each dropped and counted and change nothing; an entry right in
// every field beside them is taken: its Write lands.
func TestMultiBundleForgedEntries(t *testing.T) {
	f := newForgedWorld(t)
	payload := make([]byte, 200)
	fillRandom(payload, rand.New(rand.NewPCG(3, 4)))
	qpn, psn := f.qb.QPN(), f.ta.nextPSN(t)
	bad := []forgedGroup{
		{qpn: qpn ^ 0x400000, cookie: f.cookie, port: f.aPort, psn: psn, off: 8000}, // no QP
		{qpn: f.idle.QPN(), cookie: f.cookie, port: f.aPort, psn: psn, off: 8000},   // not connected
		{qpn: qpn, cookie: f.cookie ^ 1, port: f.aPort, psn: psn, off: 8000},        // wrong cookie
		{qpn: qpn, cookie: f.cookie, port: f.aPort ^ 0x100, psn: psn, off: 8000},    // wrong source port
	}
	from := netip.AddrPortFrom(f.aAddr.Addr(), f.aPort)

	// Every entry bad: each counted, nothing else changes, nothing answers.
	before := f.snapshot()
	rx0 := f.b.Stats().RxPackets
	injectFrom(t, f.world, from, f.bAddr, forgeMulti(t, bad, payload))
	f.runUntil(time.Millisecond, "arrival", func() bool { return f.b.Stats().RxPackets > rx0 })
	f.runFor(60 * time.Microsecond)
	after := f.snapshot()
	want := before.eb
	want.RxPackets++
	want.NoQP += 2
	want.BadCookie++
	want.BadSource++
	if got := after.eb; got.TxPackets != want.TxPackets || got != want {
		t.Errorf("all entries bad: B's counters\n got %+v\nwant %+v", got, want)
	}
	f.expectUnchanged(t, "all entries bad", before, after, false)

	// The same with a right entry among them: it is taken, the others dropped as before.
	good := forgedGroup{qpn: qpn, cookie: f.cookie, port: f.aPort, psn: psn, off: 8000}
	gs := []forgedGroup{bad[0], bad[2], good, bad[3], bad[1]}
	s0 := f.b.Stats()
	injectFrom(t, f.world, from, f.bAddr, forgeMulti(t, gs, payload))
	f.runUntil(time.Millisecond, "the right entry's Write", func() bool { return bytes.Equal(f.regionB[8000:8200], payload) })
	s := f.b.Stats()
	if s.NoQP-s0.NoQP != 2 || s.BadCookie-s0.BadCookie != 1 || s.BadSource-s0.BadSource != 1 ||
		s.BundledReceived-s0.BundledReceived != 1 || s.MultiBundlesReceived-s0.MultiBundlesReceived != 1 {
		t.Errorf("a right entry among bad ones: B's counters\n got %+v\nfrom %+v", s, s0)
	}
}

// TestGroupPackAcrossEnginesNoAllocs: the same across two engines per host, where B's
// engines hand each other the multi-QP Bundles whose groups they share: no allocation per
// round once warm (the inboxes' slots were allocated at their first use).
func TestGroupPackAcrossEnginesNoAllocs(t *testing.T) {
	w := newGroupWorld(t, 2, 2, simlink.SteerFlowHash, nil)
	sink := &countSink{}
	var srqs [2]*transport.SRQ
	for i := range srqs {
		var err error
		if srqs[i], err = w.gb.NewSRQ(16); err != nil {
			t.Fatal(err)
		}
	}
	l, err := w.gb.Listen(7, 8)
	if err != nil {
		t.Fatal(err)
	}
	var qas []*transport.QP
	for i := range 8 {
		qa, err := w.ga.NewQP(transport.QPConfig{Sink: sink})
		if err != nil {
			t.Fatal(err)
		}
		qb, err := w.gb.NewQP(transport.QPConfig{SRQ: srqs[i/2%2], Sink: sink})
		if err != nil {
			t.Fatal(err)
		}
		w.connectPair(l, qa, qb)
		qas = append(qas, qa)
	}
	l.Close()
	target := make([]byte, 64*len(qas))
	w.memB.add(9, 0, 1<<30, target, memreg.AccessRemoteWrite)
	src := make([]byte, 64)
	wrs := make([]transport.WorkRequest, len(qas))
	for i := range wrs {
		wrs[i] = transport.WorkRequest{Kind: transport.OpWrite, NSGE: 1, RemoteAddr: 1<<30 + uint64(64*i), RemoteToken: 9}
		wrs[i].SGL[0] = src
	}
	var failure string
	round := func() {
		if failure != "" {
			return
		}
		want := sink.done[transport.OpWrite] + uint64(len(qas))
		for i, q := range qas {
			if q.PostSend(&wrs[i]) != nil {
				failure = "post failed"
				return
			}
		}
		for steps := 0; sink.done[transport.OpWrite] < want; steps++ {
			if sink.failed > 0 || steps > 100_000 || !w.step() {
				failure = "writes not complete"
				return
			}
		}
		settle := w.clock.Now() + int64(100*time.Microsecond)
		for i := 0; i < 10_000; i++ {
			now := w.clock.Now()
			next, busy := w.net.PollAll(now, w.pollers...)
			if busy {
				continue
			}
			if next == 0 || now >= settle {
				break
			}
			w.clock.Set(min(max(next, now+1), settle))
		}
	}
	for range 100 {
		round()
	}
	b0 := w.gb.Stats()
	allocs := testing.AllocsPerRun(200, round)
	if failure != "" {
		t.Fatal(failure)
	}
	b := w.gb.Stats()
	if b.Forwarded-b0.Forwarded < 200 || b.MultiBundlesReceived-b0.MultiBundlesReceived < 200 {
		t.Fatalf("in 200 rounds B forwarded %d datagrams and took %d multi-QP bundles", b.Forwarded-b0.Forwarded, b.MultiBundlesReceived-b0.MultiBundlesReceived)
	}
	if allocs != 0 {
		t.Errorf("Writes packed across QPs of two engines: %v allocations per round, want 0", allocs)
	}
}
