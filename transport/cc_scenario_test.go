package transport_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/memreg"

	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/simlink"
)

// The congestion-control scenarios of bench/transportbench (one QP at RTTs from 10 µs to
// 10 ms with and without loss, 2 and 8 QPs with staggered starts on one bottleneck, 16:1
// incast), as table tests that assert delivery and state only, never timing: every Write
// completes successfully and lands exactly, no QP fails, and the counters agree with what
// the network did. Senders are engines on hosts of their own; each one's QP is connected to
// its own QP on one receiver engine, and every sender→receiver path feeds one shared
// simlink.Bottleneck at the receiver's ingress.

const ccWriteSize = 64 << 10

type ccCase struct {
	name    string
	senders int
	writes  int // Writes per sender, each to its own slot
	rtt     time.Duration
	loss    float64
	stagger time.Duration // sender i starts at i*stagger
	// quietAfter, if > 0: no bottleneck drop from the last start + quietAfter on.
	quietAfter time.Duration
}

func TestCongestionScenarios(t *testing.T) {
	var cases []ccCase
	for _, rtt := range []time.Duration{10 * time.Microsecond, 100 * time.Microsecond, time.Millisecond, 10 * time.Millisecond} {
		for _, loss := range []float64{0, 0.01} {
			cases = append(cases, ccCase{name: fmt.Sprintf("1QP/rtt=%v/loss=%g%%", rtt, loss*100), senders: 1, writes: 8, rtt: rtt, loss: loss})
		}
	}
	cases = append(cases,
		ccCase{name: "2QP/staggered", senders: 2, writes: 8, rtt: 100 * time.Microsecond, stagger: time.Millisecond, quietAfter: 10 * time.Millisecond},
		ccCase{name: "8QP/staggered", senders: 8, writes: 4, rtt: 100 * time.Microsecond, stagger: time.Millisecond, quietAfter: 10 * time.Millisecond},
		ccCase{name: "incast16:1", senders: 16, writes: 4, rtt: 100 * time.Microsecond},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runCCCase(t, c) })
	}
}

func ccHost(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 2, byte(i + 1)}), 4793)
}

func runCCCase(t *testing.T, c ccCase) {
	const bw = 10_000_000_000
	clock := simlink.NewManualClock(1)
	nw := simlink.NewNetwork(simlink.Config{Seed: 11, Clock: clock, RxQueue: 1 << 20})
	t.Cleanup(func() { _ = nw.Close() })
	bdp := int(float64(bw) / 8 * c.rtt.Seconds())
	bn, err := nw.NewBottleneck("rx", simlink.BottleneckConfig{Bandwidth: bw, QueueBytes: max(bdp, 64<<10)})
	if err != nil {
		t.Fatal(err)
	}
	window := 1024
	for window < 2*bdp/1472 && window < 1<<16 {
		window *= 2
	}
	mkEngine := func(l *simlink.Link, mem transport.MemoryResolver) *transport.Engine {
		cfg := transport.DefaultConfig(l)
		cfg.Now, cfg.Resolver, cfg.Window = clock.Now, mem, window
		e, err := transport.NewEngine(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	rxLink, err := nw.AddHost(ccHost(100))
	if err != nil {
		t.Fatal(err)
	}
	per := c.writes * ccWriteSize
	target := make([]byte, c.senders*per)
	mem := newTestMem()
	mem.add(1, 0, 0x10000, target, memreg.AccessRemoteWrite)
	rxEngine := mkEngine(rxLink, mem)
	engines := []simlink.Poller{rxEngine}
	rec := newRecorder()
	var txs, rxs []*transport.QP
	var txLinks []*simlink.Link
	// stepTo polls every engine; when none had work it moves the clock to the next thing
	// due, but not past limit (0: none).
	stepTo := func(limit int64) bool {
		now := clock.Now()
		next, busy := nw.PollAll(now, engines...)
		if busy {
			return true
		}
		if next == 0 && limit == 0 {
			return false
		}
		if limit > now && (next == 0 || next > limit) {
			next = limit
		}
		clock.Set(max(next, now+1))
		return true
	}
	r := stepRunner{t: t, clock: clock, step: func() bool { return stepTo(0) }}
	l, err := rxEngine.Listen(7, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.senders {
		link, err := nw.AddHost(ccHost(i))
		if err != nil {
			t.Fatal(err)
		}
		e := mkEngine(link, newTestMem())
		engines = append(engines, e)
		tx, err := e.NewQP(transport.QPConfig{Sink: rec})
		if err != nil {
			t.Fatal(err)
		}
		rx, err := rxEngine.NewQP(transport.QPConfig{Sink: rec})
		if err != nil {
			t.Fatal(err)
		}
		conn, err := e.Connect(tx, rxLink.LocalAddr(), 7, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		req := awaitRequest(t, r, "request", l)
		if err := req.Accept(rx, nil, 0); err != nil {
			t.Fatal(err)
		}
		finishConnect(t, r, conn, req, tx, nil)
		txs, rxs, txLinks = append(txs, tx), append(rxs, rx), append(txLinks, link)
	}
	l.Close()
	// The scenario's network from here on: latency, loss, the shared bottleneck.
	imp := simlink.Impairments{Latency: c.rtt / 2, Loss: c.loss}
	for _, tl := range txLinks {
		for _, err := range []error{
			nw.SetPath(tl.LocalAddr(), rxLink.LocalAddr(), imp),
			nw.SetPath(rxLink.LocalAddr(), tl.LocalAddr(), imp),
			nw.SetBottleneck(tl.LocalAddr(), rxLink.LocalAddr(), bn),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
	}

	srcs := make([][]byte, c.senders*c.writes)
	for i := range srcs {
		srcs[i] = make([]byte, ccWriteSize)
		pattern(srcs[i], i+1)
	}
	t0 := clock.Now()
	quietFrom := t0 + int64(c.senders-1)*int64(c.stagger) + int64(c.quietAfter)
	// With a quiet mark, senders keep their Writes posted (rewriting the same slots with
	// the same bytes) until 20 RTTs past it, so that traffic runs through the checked
	// interval whatever the controller's speed.
	repostUntil := quietFrom + 20*int64(c.rtt)
	started := 0
	posted := make([]int, c.senders)
	postOne := func(s int) {
		k := posted[s] % c.writes
		i := s*c.writes + k
		wr := transport.WorkRequest{Kind: transport.OpWrite, NSGE: 1, Context: uint64(i),
			RemoteAddr: 0x10000 + uint64(i*ccWriteSize), RemoteToken: 1}
		wr.SGL[0] = srcs[i]
		if err := txs[s].PostSend(&wr); err != nil {
			t.Fatalf("sender %d: post write %d: %v", s, posted[s], err)
		}
		posted[s]++
	}
	post := func() {
		for ; started < c.senders && clock.Now() >= t0+int64(started)*int64(c.stagger); started++ {
			for range c.writes {
				postOne(started)
			}
		}
		if c.quietAfter > 0 && clock.Now() < repostUntil {
			for s := range started {
				for posted[s]-len(rec.of(txs[s])) < c.writes {
					postOne(s)
				}
			}
		}
	}
	done := func() bool {
		if c.quietAfter > 0 && clock.Now() < repostUntil {
			return false
		}
		for s, q := range txs {
			if len(rec.of(q)) < posted[s] || posted[s] == 0 {
				return false
			}
		}
		return true
	}
	var dropsAtQuiet uint64
	quietSeen := false
	r.step = func() bool {
		post()
		if !quietSeen && c.quietAfter > 0 && clock.Now() >= quietFrom {
			dropsAtQuiet, quietSeen = bn.Stats().Dropped, true
		}
		limit := int64(0)
		switch {
		case started < c.senders:
			limit = t0 + int64(started)*int64(c.stagger)
		case c.quietAfter > 0 && !quietSeen:
			limit = quietFrom
		case c.quietAfter > 0 && clock.Now() < repostUntil:
			limit = repostUntil
		}
		return stepTo(limit)
	}
	r.runUntil(10*time.Minute, "every Write completes", done)

	for i, q := range txs {
		cs := rec.of(q)
		if len(cs) != posted[i] || posted[i] < c.writes {
			t.Errorf("sender %d: %d completions, want %d", i, len(cs), posted[i])
		}
		for _, comp := range cs {
			if comp.Status != transport.StatusSuccess || comp.Op != transport.OpWrite || comp.Bytes != ccWriteSize {
				t.Errorf("sender %d: completion %s", i, statusOf([]transport.Completion{comp}))
			}
		}
		if q.State() != transport.QPConnected || rxs[i].State() != transport.QPConnected {
			t.Errorf("QP %d: states %v / %v, want connected", i, q.State(), rxs[i].State())
		}
		ts, rs := q.Stats(), rxs[i].Stats()
		if want := uint64(posted[i] * ccWriteSize); rs.RxBytes != want {
			t.Errorf("QP %d: the receiver accepted %d new payload bytes, want exactly %d", i, rs.RxBytes, want)
		}
		if ts.TxBytes < rs.RxBytes || ts.Retransmits >= ts.TxPackets {
			t.Errorf("QP %d: sent %d bytes in %d packets (%d retransmitted) for %d accepted", i, ts.TxBytes, ts.TxPackets, ts.Retransmits, rs.RxBytes)
		}
	}
	for i := range srcs {
		if got := target[i*ccWriteSize : (i+1)*ccWriteSize]; !bytes.Equal(got, srcs[i]) {
			t.Fatalf("Write %d (sender %d) did not land exactly", i, i/c.writes)
		}
	}
	var lost, retx uint64
	for i, tl := range txLinks {
		ps := nw.PathStats(tl.LocalAddr(), rxLink.LocalAddr())
		lost += ps.DroppedLoss + ps.DroppedQueue
		retx += txs[i].Stats().Retransmits
	}
	bs := bn.Stats()
	if c.loss > 0 && (lost == 0 || retx == 0) {
		t.Errorf("%g%% loss: %d data datagrams lost, %d retransmissions", c.loss*100, lost, retx)
	}
	if lost > 0 && retx == 0 {
		t.Errorf("%d data datagrams lost but nothing retransmitted", lost)
	}
	if bs.Packets == 0 || bs.Delay.Count() != bs.Packets {
		t.Errorf("bottleneck: %d accepted, %d delays recorded", bs.Packets, bs.Delay.Count())
	}
	if c.quietAfter > 0 && !quietSeen {
		t.Errorf("the Writes finished before the last start + %v: the drop check saw nothing", c.quietAfter)
	}
	if c.quietAfter > 0 && bs.Dropped != dropsAtQuiet {
		t.Errorf("lossless, queue >= 1 BDP: %d bottleneck drops after the last start + %v", bs.Dropped-dropsAtQuiet, c.quietAfter)
	}
}

// stepRunner runs a step function in virtual time (the runner of awaitRequest and
// finishConnect).
type stepRunner struct {
	t     testing.TB
	clock *simlink.ManualClock
	step  func() bool
}

func (r stepRunner) runUntil(limit time.Duration, what string, cond func() bool) {
	r.t.Helper()
	runSteps(r.t, r.clock, limit, 50_000_000, what, cond, r.step)
}
