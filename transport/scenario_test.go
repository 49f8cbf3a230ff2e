package transport_test

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/memreg"

	"github.com/xdpndk/xdpndk/transport/link"

	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/ack"
	"github.com/xdpndk/xdpndk/transport/simlink"
)

// The reliability suite: two engines over simlink, in virtual time, under every kind of
// impairment the network simulates, moving Sends, Writes and Reads of every interesting
// size, with exact assertions on completions and memory.

const (
	guardByte    = 0xA5 // bytes nobody may write: guards, unused receive tails
	scribbleByte = 0xC3 // what a test writes over delivered data to catch late copies landing
)

// scenario is one row of the reliability table.
type scenario struct {
	name  string
	seed  uint64
	imp   simlink.Impairments  // every path
	back  *simlink.Impairments // the B->A path only, instead of imp (ACK loss)
	huge  int                  // a message size beyond 64 KiB to add (4 MiB, 1 MiB), or 0
	bidir bool                 // B moves data to A at the same time as A to B
	kinds []transport.OpKind   // what the workload does (default Send, Write, Read)
	clean bool                 // a lossless network: no retransmission is acceptable
	// zeroCopy runs the engines with ZeroCopyTx on links that report zero-copy packets
	// done late and out of order (zcLink)
	zeroCopy bool
}

// scenarios is the table: every impairment simlink has, alone and combined. Latency is 5 µs
// each way throughout; Jitter 30 µs reorders.
func scenarios() []scenario {
	lat := 5 * time.Microsecond
	ackLoss := simlink.Impairments{Latency: lat, Loss: 0.2}
	return []scenario{
		{name: "clean", seed: 1, imp: simlink.Impairments{Latency: lat}, huge: 4 << 20, bidir: true, clean: true},
		{name: "loss0.1", seed: 2, imp: simlink.Impairments{Latency: lat, Loss: 0.001}, huge: 1 << 20, bidir: true},
		{name: "loss1", seed: 3, imp: simlink.Impairments{Latency: lat, Loss: 0.01}, huge: 4 << 20, bidir: true},
		{name: "loss10", seed: 4, imp: simlink.Impairments{Latency: lat, Loss: 0.10}},
		{name: "burst", seed: 5, imp: simlink.Impairments{Latency: lat, Burst: simlink.Burst{GoodToBad: 0.01, BadToGood: 0.3, BadLoss: 1}}, bidir: true},
		{name: "reorder", seed: 6, imp: simlink.Impairments{Latency: lat, Jitter: 6 * lat}, bidir: true},
		{name: "dup10", seed: 7, imp: simlink.Impairments{Latency: lat, Duplicate: 0.10}, bidir: true},
		// Only acknowledgements are lost: A sends, and only the B->A path loses.
		{name: "ackloss", seed: 8, imp: simlink.Impairments{Latency: lat}, back: &ackLoss,
			kinds: []transport.OpKind{transport.OpSend, transport.OpWrite}},
		// The same with Reads, whose responses travel the lossy path as data.
		{name: "ackloss+reads", seed: 9, imp: simlink.Impairments{Latency: lat}, back: &ackLoss},
		{name: "corrupt2", seed: 10, imp: simlink.Impairments{Latency: lat, Corrupt: 0.02}, bidir: true},
		// A 10 Gbit/s bottleneck with a shallow queue: loss by tail drop, as congestion makes it.
		{name: "bottleneck", seed: 12, imp: simlink.Impairments{Latency: lat, Bandwidth: 10e9, QueueBytes: 12 << 10}, huge: 1 << 20, bidir: true},
		{name: "combo", seed: 11, imp: simlink.Impairments{Latency: lat, Loss: 0.01, Jitter: 6 * lat, Duplicate: 0.05, Corrupt: 0.01}, huge: 4 << 20, bidir: true},
	}
}

// expWR is one work request of a flow and what its completion and memory must show.
type expWR struct {
	wr     transport.WorkRequest
	data   []byte // Send, Write: the bytes sent; Read: the local buffer the SGL cuts
	remote []byte // Write: where the bytes land at the peer; Read: the bytes expected
}

// expRecv is one receive of a flow and the message it must receive.
type expRecv struct {
	r   transport.Receive
	buf []byte // the buffer its SGL cuts: the message, then guard bytes
	msg []byte // the Send it must receive
	sum uint32 // CRC32 of msg
}

// scnFlow is the traffic from one QP to its peer: requests posted on from, receives on to.
type scnFlow struct {
	name     string
	from, to *transport.QP
	wrs      []expWR
	rcvs     []expRecv
	wregion  []byte // the peer's Write target, guard bytes between the Writes
	rregion  []byte // the peer's Read source
	wrTokens [2]uint32
}

// newScnFlow builds the workload of one direction: for each size of sizes one request of
// each kind, plus random smaller ones, shuffled; the peer's memory regions are registered
// in mem under tokens derived from dir.
func newScnFlow(name string, dir uint64, seed uint64, sizes []int, kinds []transport.OpKind, mem *testMem) *scnFlow {
	rng := rand.New(rand.NewPCG(seed, dir))
	type op struct {
		kind transport.OpKind
		size int
	}
	var ops []op
	for _, s := range sizes {
		for _, k := range kinds {
			ops = append(ops, op{k, s})
		}
	}
	for range 24 {
		size := 1 + rng.IntN(3*mssFor(0))
		if rng.IntN(4) == 0 {
			size = 1 + rng.IntN(32<<10)
		}
		ops = append(ops, op{kinds[rng.IntN(len(kinds))], size})
	}
	rng.Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })

	f := &scnFlow{name: name}
	wlen, rmax := 0, 0
	for _, o := range ops {
		switch o.kind {
		case transport.OpWrite:
			wlen += o.size + 64
		case transport.OpRead:
			rmax = max(rmax, o.size)
		}
	}
	f.wregion = make([]byte, wlen+64)
	fillByte(f.wregion, guardByte)
	f.rregion = make([]byte, rmax+4096)
	fillRandom(f.rregion, rng)
	const wbase, rbase = 0x7f00_0000_0000, 0x7e00_0000_0000
	f.wrTokens = [2]uint32{uint32(0x100 + dir), uint32(0x200 + dir)}
	mem.add(f.wrTokens[0], 0, wbase, f.wregion, memreg.AccessRemoteWrite)
	mem.add(f.wrTokens[1], 0, rbase, f.rregion, memreg.AccessRemoteRead)

	woff := 64
	for i, o := range ops {
		e := expWR{data: make([]byte, o.size)}
		e.wr.Kind = o.kind
		e.wr.Context = dir<<32 | uint64(i)
		switch o.kind {
		case transport.OpSend:
			fillRandom(e.data, rng)
			r := expRecv{buf: make([]byte, o.size+rng.IntN(3)*rng.IntN(100)), msg: e.data, sum: crc32.ChecksumIEEE(e.data)}
			fillByte(r.buf, guardByte)
			r.r.SGL, r.r.NSGE = splitSGL(r.buf, 1+rng.IntN(transport.MaxSGE), rng)
			r.r.Context = dir<<32 | 1<<31 | uint64(len(f.rcvs))
			f.rcvs = append(f.rcvs, r)
		case transport.OpWrite:
			fillRandom(e.data, rng)
			e.wr.RemoteAddr, e.wr.RemoteToken = wbase+uint64(woff), f.wrTokens[0]
			e.remote = f.wregion[woff : woff+o.size]
			woff += o.size + 64
		case transport.OpRead:
			fillByte(e.data, guardByte)
			off := rng.IntN(len(f.rregion) - o.size + 1)
			e.wr.RemoteAddr, e.wr.RemoteToken = rbase+uint64(off), f.wrTokens[1]
			e.remote = f.rregion[off : off+o.size]
		}
		e.wr.SGL, e.wr.NSGE = splitSGL(e.data, 1+rng.IntN(transport.MaxSGE), rng)
		f.wrs = append(f.wrs, e)
	}
	return f
}

// post posts the flow's receives on to, then its requests on from.
func (f *scnFlow) post(t *testing.T) {
	t.Helper()
	for i := range f.rcvs {
		if err := f.to.PostReceive(&f.rcvs[i].r); err != nil {
			t.Fatalf("%s: post receive %d: %v", f.name, i, err)
		}
	}
	for i := range f.wrs {
		if err := f.from.PostSend(&f.wrs[i].wr); err != nil {
			t.Fatalf("%s: post %v %d: %v", f.name, f.wrs[i].wr.Kind, i, err)
		}
	}
}

// check verifies the flow's completions (exactly its requests and receives, in posting
// order, successful, with their byte counts) and every byte of memory it touched.
func (f *scnFlow) check(t *testing.T, rec *recorder) {
	t.Helper()
	got := rec.of(f.from, transport.OpSend, transport.OpSendInv, transport.OpWrite, transport.OpRead)
	if len(got) != len(f.wrs) {
		t.Errorf("%s: %d request completions, want %d: %s", f.name, len(got), len(f.wrs), statusOf(got))
	}
	for i := range min(len(got), len(f.wrs)) {
		e, c := &f.wrs[i], got[i]
		want := transport.Completion{Context: e.wr.Context, Op: e.wr.Kind, Status: transport.StatusSuccess, Bytes: uint32(len(e.data))}
		if c != want {
			t.Errorf("%s: request completion %d is %+v, want %+v", f.name, i, c, want)
		}
	}
	rc := rec.of(f.to, transport.OpReceive, transport.OpReceiveInv)
	if len(rc) != len(f.rcvs) {
		t.Errorf("%s: %d receive completions, want %d: %s", f.name, len(rc), len(f.rcvs), statusOf(rc))
	}
	for i := range min(len(rc), len(f.rcvs)) {
		r, c := &f.rcvs[i], rc[i]
		want := transport.Completion{Context: r.r.Context, Op: transport.OpReceive, Status: transport.StatusSuccess, Bytes: uint32(len(r.msg))}
		if c != want {
			t.Errorf("%s: receive completion %d is %+v, want %+v", f.name, i, c, want)
			continue
		}
		if sum := crc32.ChecksumIEEE(r.buf[:c.Bytes]); sum != r.sum || !bytes.Equal(r.buf[:c.Bytes], r.msg) {
			t.Errorf("%s: receive %d (%d bytes): checksum %08x, want %08x", f.name, i, c.Bytes, sum, r.sum)
		}
		if ok, at := allByte(r.buf[c.Bytes:], guardByte); !ok {
			t.Errorf("%s: receive %d: byte %d past the message was written", f.name, i, int(c.Bytes)+at)
		}
	}
	for i := range f.wrs {
		e := &f.wrs[i]
		switch e.wr.Kind {
		case transport.OpWrite:
			if !bytes.Equal(e.remote, e.data) {
				t.Errorf("%s: write %d (%d bytes) did not land byte-exact", f.name, i, len(e.data))
			}
		case transport.OpRead:
			if !bytes.Equal(e.data, e.remote) {
				t.Errorf("%s: read %d (%d bytes) returned other bytes", f.name, i, len(e.data))
			}
		}
	}
	// Guards around the Writes: nothing wrote outside them.
	w := f.wregion
	for i := range f.wrs {
		if f.wrs[i].wr.Kind == transport.OpWrite {
			fillByte(f.wrs[i].remote, guardByte) // temporarily: then the whole region is guard bytes
		}
	}
	if ok, at := allByte(w, guardByte); !ok {
		t.Errorf("%s: write region byte %d outside every Write was written", f.name, at)
	}
	for i := range f.wrs {
		if f.wrs[i].wr.Kind == transport.OpWrite {
			copy(f.wrs[i].remote, f.wrs[i].data)
		}
	}
}

// scribbleAll overwrites every buffer the flow's data landed in, so that a stale copy of a
// packet placed after its completion shows.
func (f *scnFlow) scribbleAll() {
	for i := range f.rcvs {
		fillByte(f.rcvs[i].buf, scribbleByte)
	}
	fillByte(f.wregion, scribbleByte)
	for i := range f.wrs {
		if f.wrs[i].wr.Kind == transport.OpRead {
			fillByte(f.wrs[i].data, scribbleByte)
		}
	}
}

// checkScribbled verifies that nothing was placed after scribbleAll.
func (f *scnFlow) checkScribbled(t *testing.T) {
	t.Helper()
	for i := range f.rcvs {
		if ok, at := allByte(f.rcvs[i].buf, scribbleByte); !ok {
			t.Errorf("%s: receive %d: byte %d written after its completion", f.name, i, at)
		}
	}
	if ok, at := allByte(f.wregion, scribbleByte); !ok {
		t.Errorf("%s: write region byte %d written after every Write completed", f.name, at)
	}
	for i := range f.wrs {
		if f.wrs[i].wr.Kind == transport.OpRead {
			if ok, at := allByte(f.wrs[i].data, scribbleByte); !ok {
				t.Errorf("%s: read %d: byte %d written after its completion", f.name, i, at)
			}
		}
	}
}

// scenarioResult is what a run reports, and what two runs of one seed must agree on.
type scenarioResult struct {
	virtual              time.Duration
	retxA, retxB         uint64
	timeoutsA, timeoutsB uint64
	net                  simlink.PathStats
}

// runScenario runs one row of the table and checks it; it returns its figures.
func runScenario(t *testing.T, sc scenario) scenarioResult {
	const maxPayload = 1472
	mss := mssFor(maxPayload)
	var w *world
	var zcs []*zcLink
	if sc.zeroCopy {
		var za, zb *zcLink
		w, za, zb = newZCWorld(t, simlink.Config{Seed: sc.seed, MaxPayload: maxPayload}, sc.seed)
		zcs = []*zcLink{za, zb}
	} else {
		w = newWorld(t, simlink.Config{Seed: sc.seed, MaxPayload: maxPayload}, nil)
	}
	qa, qb := w.connect(transport.QPConfig{})
	if err := w.net.SetDefault(sc.imp); err != nil {
		t.Fatal(err)
	}
	if sc.back != nil {
		if err := w.net.SetPath(w.lb.LocalAddr(), w.la.LocalAddr(), *sc.back); err != nil {
			t.Fatal(err)
		}
	}
	sizes := []int{1, mss - 1, mss, mss + 1, 64 << 10}
	if sc.huge > 0 {
		sizes = append(sizes, sc.huge)
	}
	kinds := sc.kinds
	if kinds == nil {
		kinds = []transport.OpKind{transport.OpSend, transport.OpWrite, transport.OpRead}
	}
	ab := newScnFlow("A->B", 1, sc.seed, sizes, kinds, w.memB)
	ab.from, ab.to = qa, qb
	flows := []*scnFlow{ab}
	if sc.bidir {
		ba := newScnFlow("B->A", 2, sc.seed, sizes, kinds, w.memA)
		ba.from, ba.to = qb, qa
		flows = append(flows, ba)
	}
	want := map[*transport.QP]int{}
	for _, f := range flows {
		want[f.from] += len(f.wrs)
		want[f.to] += len(f.rcvs)
	}
	start := w.clock.Now()
	net0 := w.net.Stats()
	for _, f := range flows {
		f.post(t)
	}
	w.runUntil(60*time.Second, sc.name, func() bool {
		return w.rec.count(qa) >= want[qa] && w.rec.count(qb) >= want[qb]
	})
	res := scenarioResult{virtual: time.Duration(w.clock.Now() - start)}
	for _, f := range flows {
		f.check(t, w.rec)
	}

	// Let everything in flight arrive and every timer run out: nothing more may complete,
	// and no late copy may land in memory that was handed back.
	for _, f := range flows {
		f.scribbleAll()
	}
	w.runFor(time.Second)
	for _, f := range flows {
		f.checkScribbled(t)
	}
	for _, q := range []*transport.QP{qa, qb} {
		if n := w.rec.count(q); n != want[q] {
			t.Errorf("QP %d: %d completions, want %d: spurious %s", q.QPN(), n, want[q], statusOf(w.rec.of(q)[min(n, want[q]):]))
		}
		if s := q.State(); s != transport.QPConnected {
			t.Errorf("QP %d ended %v, want connected", q.QPN(), s)
		}
	}
	if d, ok := w.net.NextDelivery(); ok {
		t.Errorf("a datagram is still queued for %v after the settling time", time.Duration(d))
	}
	for i, z := range zcs {
		z.check(t)
		sent, reported, pending := z.counts()
		if sent == 0 || reported != sent || pending != 0 {
			t.Errorf("zero-copy link %d: %d packets sent, %d reported done, %d pending", i, sent, reported, pending)
		}
	}

	sa, sb := qa.Stats(), qb.Stats()
	ea, eb := w.a.Stats(), w.b.Stats()
	ns := w.net.Stats()
	ns.Sent -= net0.Sent
	ns.Delivered -= net0.Delivered
	res.retxA, res.retxB = sa.Retransmits, sb.Retransmits
	res.timeoutsA, res.timeoutsB = sa.Timeouts, sb.Timeouts
	res.net = ns
	// Every corrupted copy reached an engine, and the CRC must have refused every one.
	if got := ea.Malformed + eb.Malformed; got != ns.Corrupted {
		t.Errorf("engines refused %d malformed datagrams; the network corrupted %d", got, ns.Corrupted)
	}
	if ns.DroppedRxFull != 0 {
		t.Errorf("%d datagrams dropped at a full receive queue: the test measures something else", ns.DroppedRxFull)
	}
	for _, e := range []transport.EngineStats{ea, eb} {
		if e.NoQP+e.BadSource+e.BadCookie+e.OutOfWindow+e.CMDropped != 0 {
			t.Errorf("engine dropped datagrams of a healthy connection: %+v", e)
		}
	}
	for _, s := range []transport.QPStats{sa, sb} {
		// Every retransmission sent was queued by one of the causes counted.
		if queued := s.RTORetransmits + s.LossRetransmits + s.TailProbes + s.RNRRetransmits; s.Retransmits > queued {
			t.Errorf("%d retransmissions sent, only %d queued (timer %d, loss %d, tail probe %d, RNR %d)",
				s.Retransmits, queued, s.RTORetransmits, s.LossRetransmits, s.TailProbes, s.RNRRetransmits)
		}
	}
	if !sc.clean && sa.LossRetransmits+sb.LossRetransmits == 0 && sa.Retransmits+sb.Retransmits > sa.RTORetransmits+sb.RTORetransmits+sa.TailProbes+sb.TailProbes {
		t.Errorf("retransmissions beyond the timer's and the tail probes', yet loss detection queued none: %+v %+v", sa, sb)
	}
	if sc.clean && sa.Retransmits+sb.Retransmits+sa.Timeouts+sb.Timeouts != 0 {
		t.Errorf("lossless network, yet retransmits A %d B %d, timeouts A %d B %d",
			sa.Retransmits, sb.Retransmits, sa.Timeouts, sb.Timeouts)
	}
	t.Logf("%s: virtual %v; A retransmits %d timeouts %d naks %d dups %d; B retransmits %d timeouts %d naks %d dups %d",
		sc.name, res.virtual, sa.Retransmits, sa.Timeouts, sa.NaksReceived, sa.Duplicates,
		sb.Retransmits, sb.Timeouts, sb.NaksReceived, sb.Duplicates)
	t.Logf("%s: retransmissions queued by timer/loss/tail probe/RNR: A %d/%d/%d/%d, B %d/%d/%d/%d", sc.name,
		sa.RTORetransmits, sa.LossRetransmits, sa.TailProbes, sa.RNRRetransmits, sb.RTORetransmits, sb.LossRetransmits, sb.TailProbes, sb.RNRRetransmits)
	t.Logf("%s: A srtt %v rto %v cwnd %d; B srtt %v rto %v cwnd %d", sc.name,
		time.Duration(sa.SRTT), time.Duration(sa.RTO), sa.CongestionWindow, time.Duration(sb.SRTT), time.Duration(sb.RTO), sb.CongestionWindow)
	t.Logf("%s: network sent %d, lost %d+%d burst+%d queue, duplicated %d, corrupted %d, reordered %d; engines refused %d malformed",
		sc.name, ns.Sent, ns.DroppedLoss, ns.DroppedBurst, ns.DroppedQueue, ns.Duplicated, ns.Corrupted, ns.Reordered, ea.Malformed+eb.Malformed)
	return res
}

// TestScenarios runs the reliability table.
func TestScenarios(t *testing.T) {
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) { runScenario(t, sc) })
	}
}

// TestScenarioDeterministic runs one impaired scenario twice: a seed must replay the same
// run, or a failure found by the table could not be reproduced.
func TestScenarioDeterministic(t *testing.T) {
	sc := scenario{name: "replay", seed: 42, bidir: true, imp: simlink.Impairments{
		Latency: 5 * time.Microsecond, Loss: 0.02, Jitter: 30 * time.Microsecond, Duplicate: 0.05, Corrupt: 0.01}}
	r1 := runScenario(t, sc)
	r2 := runScenario(t, sc)
	if r1 != r2 {
		t.Errorf("two runs of seed %d differ:\n%+v\n%+v", sc.seed, r1, r2)
	}
}

// partitionTimeout and partitionRTO are the reliability configuration of the partition
// tests: a short retransmission budget, so that the bound is tight.
const partitionTimeout = 20 * time.Millisecond

var partitionRTO = ack.RTOConfig{Initial: time.Millisecond, Min: 500 * time.Microsecond, Max: 4 * time.Millisecond}

// TestPartitionTimesOut cuts a connected pair apart for longer than the retransmission
// budget: the oldest outstanding request completes StatusTimeout, everything else
// StatusCancelled, in posting order, once the budget (RetryTimeout from the first
// transmission) has run out and the retransmission made then went unanswered for a timeout
// (at most RTO.Max).
func TestPartitionTimesOut(t *testing.T) {
	w := newWorld(t, simlink.Config{Seed: 21, Default: simlink.Impairments{Latency: 5 * time.Microsecond}}, func(c *transport.Config) {
		c.RetryTimeout = partitionTimeout
		c.RTO = partitionRTO
	})
	qa, qb := w.connect(transport.QPConfig{})
	target := make([]byte, 256<<10)
	fillRandom(target, rand.New(rand.NewPCG(21, 0)))
	w.memB.add(0x77, 0, 0x9000, target, memreg.AccessRemoteRead|memreg.AccessRemoteWrite)

	// Some traffic first, so that RTT samples exist; B posts receives for everything A
	// will send, so that A holds credits and its Sends are not waiting for any.
	for i := range 8 {
		if err := qb.PostReceive(&transport.Receive{NSGE: 1, SGL: [transport.MaxSGE][]byte{make([]byte, 70000)}, Context: uint64(100 + i)}); err != nil {
			t.Fatal(err)
		}
	}
	warm := make([]byte, 5000)
	pattern(warm, 3)
	for i, wr := range []transport.WorkRequest{
		{Kind: transport.OpSend, NSGE: 1, SGL: [transport.MaxSGE][]byte{warm}, Context: 1},
		{Kind: transport.OpWrite, NSGE: 1, SGL: [transport.MaxSGE][]byte{warm}, RemoteAddr: 0x9000, RemoteToken: 0x77, Context: 2},
		{Kind: transport.OpRead, NSGE: 1, SGL: [transport.MaxSGE][]byte{make([]byte, 3000)}, RemoteAddr: 0x9000, RemoteToken: 0x77, Context: 3},
	} {
		if err := qa.PostSend(&wr); err != nil {
			t.Fatalf("warm-up %d: %v", i, err)
		}
	}
	w.runUntil(time.Second, "warm-up", func() bool { return w.rec.count(qa) == 3 })
	for _, c := range w.rec.of(qa) {
		if c.Status != transport.StatusSuccess {
			t.Fatalf("warm-up: %s", statusOf(w.rec.of(qa)))
		}
	}
	w.runFor(10 * time.Millisecond) // everything acknowledged, credits known
	if err := qa.PostReceive(&transport.Receive{NSGE: 1, SGL: [transport.MaxSGE][]byte{make([]byte, 100)}, Context: 900}); err != nil {
		t.Fatal(err)
	}
	w.runFor(time.Millisecond)
	before := w.rec.count(qa)
	stats0 := qa.Stats()

	w.net.Partition(w.la.LocalAddr(), w.lb.LocalAddr())
	t0 := w.clock.Now()
	big := make([]byte, 64<<10)
	posted := []transport.WorkRequest{
		{Kind: transport.OpWrite, NSGE: 1, SGL: [transport.MaxSGE][]byte{big}, RemoteAddr: 0x9000, RemoteToken: 0x77, Context: 10},
		{Kind: transport.OpSend, NSGE: 1, SGL: [transport.MaxSGE][]byte{warm}, Context: 11},
		{Kind: transport.OpRead, NSGE: 1, SGL: [transport.MaxSGE][]byte{make([]byte, 9000)}, RemoteAddr: 0x9000, RemoteToken: 0x77, Context: 12},
		{Kind: transport.OpSend, NSGE: 1, SGL: [transport.MaxSGE][]byte{warm[:1]}, Context: 13},
		{Kind: transport.OpWrite, NSGE: 1, SGL: [transport.MaxSGE][]byte{warm[:1]}, RemoteAddr: 0x9000, RemoteToken: 0x77, Context: 14},
	}
	for i := range posted {
		if err := qa.PostSend(&posted[i]); err != nil {
			t.Fatal(err)
		}
	}
	lower, upper := partitionTimeout, partitionTimeout+partitionRTO.Max+100*time.Microsecond
	busy := w.runUntilExact(2*upper, "timeout under partition", func() bool { return w.rec.count(qa) >= before+len(posted)+1 })
	elapsed := time.Duration(w.clock.Now() - t0)
	if !busy {
		// Engine.Poll reports "whether it did anything"; a caller that sees idle sleeps or
		// moves its clock on, though completions were just delivered.
		t.Errorf("the Poll that failed the QP and completed %d requests reported itself idle", len(posted))
	}

	got := w.rec.of(qa)[before:]
	var reqs []transport.Completion
	recvOK := false
	for _, c := range got {
		if c.Op == transport.OpReceive {
			recvOK = c.Context == 900 && c.Status == transport.StatusCancelled
			continue
		}
		reqs = append(reqs, c)
	}
	if !recvOK {
		t.Errorf("A's posted receive did not complete cancelled: %s", statusOf(got))
	}
	if len(reqs) != len(posted) {
		t.Fatalf("%d request completions, want %d: %s", len(reqs), len(posted), statusOf(got))
	}
	for i, c := range reqs {
		want := transport.Completion{Context: posted[i].Context, Op: posted[i].Kind, Status: transport.StatusCancelled}
		if i == 0 {
			want.Status = transport.StatusTimeout
		}
		if c != want {
			t.Errorf("completion %d is %+v, want %+v", i, c, want)
		}
	}
	if qa.State() != transport.QPError {
		t.Errorf("A is %v after the timeout, want error", qa.State())
	}
	if !errors.Is(qa.Cause(), transport.ErrRetryTimeout) {
		t.Errorf("A's cause: %v, want ErrRetryTimeout", qa.Cause())
	}
	if elapsed > upper || elapsed < lower {
		t.Errorf("timed out after %v of virtual time, want within [RetryTimeout, RetryTimeout + RTO.Max] = [%v, %v]", elapsed, lower, upper)
	}
	st := qa.Stats()
	// Timeouts counts every expiry of the retransmission timer: all but the last resend the
	// oldest packet, the last finds the one made when the budget had run out unanswered.
	timeouts := st.Timeouts - stats0.Timeouts
	if timeouts < 6 {
		t.Errorf("%d retransmission timer expiries, want the backoff to the 4 ms cap and more", timeouts)
	}
	// Before the first expiry, tail loss probes (at most two) send the last packet again.
	probes := st.TailProbes - stats0.TailProbes
	if probes > 2 {
		t.Errorf("%d tail loss probes, want at most 2 before the timer", probes)
	}
	if n := st.RTORetransmits - stats0.RTORetransmits; n != timeouts-1 {
		t.Errorf("%d retransmissions sent by the timer, want one per expiry but the last, %d", n, timeouts-1)
	}
	if n := st.Retransmits - stats0.Retransmits; n != timeouts-1+probes {
		t.Errorf("%d retransmissions before failing, want %d by the timer + %d tail probes", n, timeouts-1, probes)
	}
	t.Logf("partition: failed after %v virtual (bounds [%v, %v]); retransmits %d, timeouts %d",
		elapsed, lower, upper, st.Retransmits-stats0.Retransmits, timeouts)

	// An errored QP takes new work and completes it cancelled, in order.
	n := w.rec.count(qa)
	for i := range 3 {
		wr := transport.WorkRequest{Kind: transport.OpSend, NSGE: 1, SGL: [transport.MaxSGE][]byte{warm[:10]}, Context: uint64(20 + i)}
		if err := qa.PostSend(&wr); err != nil {
			t.Fatalf("post on the errored QP: %v", err)
		}
	}
	if err := qa.PostReceive(&transport.Receive{NSGE: 1, SGL: [transport.MaxSGE][]byte{make([]byte, 10)}, Context: 901}); err != nil {
		t.Fatalf("post receive on the errored QP: %v", err)
	}
	w.runUntil(time.Second, "posts after the error", func() bool { return w.rec.count(qa) >= n+4 })
	after := w.rec.of(qa)[n:]
	var sends []transport.Completion
	for _, c := range after {
		if c.Op == transport.OpReceive {
			if c.Context != 901 || c.Status != transport.StatusCancelled {
				t.Errorf("receive posted after the error: %+v", c)
			}
			continue
		}
		sends = append(sends, c)
	}
	for i, c := range sends {
		if want := (transport.Completion{Context: uint64(20 + i), Op: transport.OpSend, Status: transport.StatusCancelled}); c != want {
			t.Errorf("post %d after the error: %+v, want %+v", i, c, want)
		}
	}
	w.runFor(100 * time.Millisecond)
	if got := w.rec.count(qa); got != n+4 {
		t.Errorf("%d completions after the error, want %d: %s", got-n, 4, statusOf(w.rec.of(qa)[n:]))
	}
	if qb.State() != transport.QPConnected {
		t.Errorf("B, which had nothing outstanding, is %v", qb.State())
	}
}

// TestPartitionRealClock is TestPartitionTimesOut with engines running on their own
// goroutines over a network in real time: the timeout arrives within a real-time bound
// and stopping the engines leaves no goroutine behind.
func TestPartitionRealClock(t *testing.T) {
	begin := time.Now()
	goroutines := runtime.NumGoroutine()
	net := simlink.NewNetwork(simlink.Config{Seed: 22, Default: simlink.Impairments{Latency: 5 * time.Microsecond}})
	defer net.Close()
	addr := func(last byte) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 0, last}), 4793)
	}
	la, err := net.AddHost(addr(1))
	if err != nil {
		t.Fatal(err)
	}
	lb, err := net.AddHost(addr(2))
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	memB := newTestMem()
	target := make([]byte, 64<<10)
	memB.add(0x77, 0, 0x9000, target, memreg.AccessRemoteRead|memreg.AccessRemoteWrite)
	mk := func(l link.Link, m transport.MemoryResolver) *transport.Engine {
		cfg := transport.DefaultConfig(l)
		cfg.Resolver = m
		cfg.RetryTimeout = partitionTimeout
		cfg.RTO = partitionRTO
		e, err := transport.NewEngine(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	ea, eb := mk(la, newTestMem()), mk(lb, memB)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	runErr := make(chan error, 2)
	for _, e := range []*transport.Engine{ea, eb} {
		wg.Go(func() { runErr <- e.Run(ctx, 64) })
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			t.Fatal("engines did not stop within 3 s of cancelling their context")
		}
		for range 2 {
			if err := <-runErr; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("Run: %v", err)
			}
		}
	}
	defer stop()

	tctx, tcancel := context.WithTimeout(ctx, 5*time.Second)
	defer tcancel()
	qa, err := ea.NewQP(transport.QPConfig{Sink: rec})
	if err != nil {
		t.Fatal(err)
	}
	qb, err := eb.NewQP(transport.QPConfig{Sink: rec})
	if err != nil {
		t.Fatal(err)
	}
	l, err := eb.Listen(7, 1)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := ea.Connect(qa, lb.LocalAddr(), 7, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	req, err := l.Next(tctx)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := req.Accept(qb, nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := conn.Wait(tctx); err != nil {
		t.Fatal(err)
	}
	if err := conn.Complete(); err != nil {
		t.Fatal(err)
	}
	if err := req.Wait(tctx); err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if tctx.Err() != nil {
				t.Fatalf("%s: not done within the real-time bound", what)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	waitFor("connected", func() bool { return qa.State() == transport.QPConnected })

	if err := qb.PostReceive(&transport.Receive{NSGE: 1, SGL: [transport.MaxSGE][]byte{make([]byte, 5000)}, Context: 100}); err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, 5000)
	pattern(msg, 9)
	if err := qa.PostSend(&transport.WorkRequest{Kind: transport.OpSend, NSGE: 1, SGL: [transport.MaxSGE][]byte{msg}, Context: 1}); err != nil {
		t.Fatal(err)
	}
	waitFor("warm-up", func() bool { return rec.count(qa) == 1 && rec.count(qb) == 1 })
	if c := rec.of(qa)[0]; c.Status != transport.StatusSuccess {
		t.Fatalf("warm-up send: %+v", c)
	}

	net.Partition(la.LocalAddr(), lb.LocalAddr())
	cut := time.Now()
	for i := range 4 {
		wr := transport.WorkRequest{Kind: transport.OpWrite, NSGE: 1, SGL: [transport.MaxSGE][]byte{msg}, RemoteAddr: 0x9000, RemoteToken: 0x77, Context: uint64(10 + i)}
		if i == 2 {
			wr = transport.WorkRequest{Kind: transport.OpRead, NSGE: 1, SGL: [transport.MaxSGE][]byte{make([]byte, 100)}, RemoteAddr: 0x9000, RemoteToken: 0x77, Context: uint64(10 + i)}
		}
		if err := qa.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	waitFor("timeout under partition", func() bool { return rec.count(qa) == 5 })
	took := time.Since(cut)
	for i, c := range rec.of(qa)[1:] {
		want := transport.StatusCancelled
		if i == 0 {
			want = transport.StatusTimeout
		}
		if c.Context != uint64(10+i) || c.Status != want {
			t.Errorf("completion %d: %+v, want context %d %v", i, c, 10+i, want)
		}
	}
	if qa.State() != transport.QPError {
		t.Errorf("A is %v after the timeout", qa.State())
	}
	if worst := partitionTimeout + partitionRTO.Max; took > worst+time.Second {
		t.Errorf("timed out %v after the partition; the configuration allows at most %v", took, worst)
	}
	if err := qa.PostSend(&transport.WorkRequest{Kind: transport.OpSend, NSGE: 1, SGL: [transport.MaxSGE][]byte{msg}, Context: 20}); err != nil {
		t.Fatal(err)
	}
	waitFor("post after the error", func() bool { return rec.count(qa) == 6 })
	if c := rec.of(qa)[5]; c.Context != 20 || c.Status != transport.StatusCancelled {
		t.Errorf("post after the error completed %+v", c)
	}

	stop()
	net.Close()
	for deadline := time.Now().Add(2 * time.Second); runtime.NumGoroutine() > goroutines; {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after stopping, %d before:\n%s", runtime.NumGoroutine(), goroutines, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
	total := time.Since(begin)
	if total > 5*time.Second {
		t.Errorf("the test took %v of real time, bound 5 s", total)
	}
	t.Logf("real clock: timed out %v after the partition (budget %v + RTO.Max %v); whole test %v",
		took, partitionTimeout, partitionRTO.Max, total)
}

// TestLostAcksKeepRTT loses the acknowledgement of a Write again and again. Each time the
// RTO retransmits and the repeated ack comes back, acknowledging packets sent an RTO ago;
// the receiver says in the ack's Delay field how long it held them. The RTT estimate must
// not take that wait for path delay: else every lost ack inflates the RTO, and a lossy ack
// path makes loss recovery ever slower (RFC 6298 §3: samples must measure the path).
func TestLostAcksKeepRTT(t *testing.T) {
	const lat = 5 * time.Microsecond
	var ackDelay time.Duration
	w := newWorld(t, simlink.Config{Seed: 31, Default: simlink.Impairments{Latency: lat}}, func(c *transport.Config) { ackDelay = c.AckDelay })
	qa, qb := w.connect(transport.QPConfig{})
	target := make([]byte, 8000)
	w.memB.add(9, 0, 0x1000, target, memreg.AccessRemoteWrite)
	data := make([]byte, 4000)
	fillRandom(data, rand.New(rand.NewPCG(31, 0)))
	write := func(ctx uint64) {
		t.Helper()
		if err := qa.PostSend(&transport.WorkRequest{Kind: transport.OpWrite, NSGE: 1, SGL: [transport.MaxSGE][]byte{data}, RemoteAddr: 0x1000, RemoteToken: 9, Context: ctx}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		write(uint64(i))
		w.runUntil(time.Second, "warm-up", func() bool { return w.rec.count(qa) == i+1 })
	}
	clean := qa.Stats()
	back := [2]netip.AddrPort{w.lb.LocalAddr(), w.la.LocalAddr()}
	const episodes = 12
	for i := range episodes {
		// Lose every ack of one Write, then let the RTO bring it home.
		if err := w.net.SetPath(back[0], back[1], simlink.Impairments{Latency: lat, Loss: 1}); err != nil {
			t.Fatal(err)
		}
		n0 := qb.Stats().AcksSent
		write(uint64(10 + i))
		w.runUntil(time.Second, "acked once", func() bool { return qb.Stats().AcksSent > n0 })
		w.net.ClearPath(back[0], back[1])
		w.runUntil(time.Second, "write after a lost ack", func() bool { return w.rec.count(qa) == 5+i })
	}
	for i, c := range w.rec.of(qa) {
		if c.Status != transport.StatusSuccess {
			t.Fatalf("completion %d: %+v", i, c)
		}
	}
	if !bytes.Equal(target[:len(data)], data) {
		t.Fatal("write data differs")
	}
	s := qa.Stats()
	// A sample of this path is at most its RTT plus the receiver's coalescing delay.
	bound := 2*lat + ackDelay
	t.Logf("%d lost acks: SRTT %v -> %v, RTTVar %v -> %v, RTO %v -> %v; timeouts %d",
		episodes, time.Duration(clean.SRTT), time.Duration(s.SRTT), time.Duration(clean.RTTVar), time.Duration(s.RTTVar),
		time.Duration(clean.RTO), time.Duration(s.RTO), s.Timeouts-clean.Timeouts)
	if time.Duration(s.SRTT) > bound {
		t.Errorf("after %d lost acks SRTT is %v; no sample of this path exceeds %v (latency %v each way, ack delay %v): the RTT estimator counted the lost ack's retransmission wait as path delay",
			episodes, time.Duration(s.SRTT), bound, lat, ackDelay)
	}
}
