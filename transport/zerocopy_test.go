package transport_test

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"

	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/simlink"
)

// zcLink is a Link that behaves like one transmitting zero-copy packets by reference: it
// reports a FlagZeroCopy packet's cookie only some TxDone calls after Send (a seeded random
// lag of 0-3 calls, so out of order), or not at all while held. When it reports a cookie it
// checks that the packet's payload bytes, which a real link would be reading until then,
// have not changed since Send: a change means the engine handed the memory back too early.
type zcLink struct {
	link.Link
	mu       sync.Mutex
	rng      *rand.Rand
	held     bool
	tick     int
	pending  []zcPacket
	inner    [64]uint64
	cookies  map[uint64]int // cookies sent and not yet reported, by count
	sent     int            // zero-copy packets sent
	reported int
	changed  []string // payloads changed before their cookie was reported
}

type zcPacket struct {
	cookie  uint64
	payload [][]byte
	sum     uint32
	at      int
}

func newZCLink(l link.Link, seed uint64) *zcLink {
	return &zcLink{Link: l, rng: rand.New(rand.NewPCG(seed, 7)), cookies: map[uint64]int{}}
}

func payloadSum(segs [][]byte) uint32 {
	var s uint32
	for _, b := range segs {
		s = crc32.Update(s, crc32.IEEETable, b)
	}
	return s
}

// Send implements link.Link.
func (z *zcLink) Send(pkts []link.Packet) (int, error) {
	n, err := z.Link.Send(pkts)
	z.mu.Lock()
	defer z.mu.Unlock()
	for i := range pkts[:n] {
		p := &pkts[i]
		if p.Flags&link.FlagZeroCopy == 0 {
			continue
		}
		// Segs[0] is the header and the last the trailer, both the engine's own buffers that
		// a real link copies at Send; the ones between are the caller's memory.
		pl := append([][]byte(nil), p.Segs[1:p.NSegs-1]...)
		z.pending = append(z.pending, zcPacket{cookie: p.Cookie, payload: pl, sum: payloadSum(pl), at: z.tick + z.rng.IntN(4)})
		z.cookies[p.Cookie]++
		z.sent++
	}
	return n, err
}

// TxDone implements link.Link.
func (z *zcLink) TxDone(dst []uint64) int {
	for z.Link.TxDone(z.inner[:]) == len(z.inner) { // the inner link's copies are done at once
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	z.tick++
	if z.held {
		return 0
	}
	n := 0
	keep := z.pending[:0]
	for _, p := range z.pending {
		if n == len(dst) || p.at > z.tick {
			keep = append(keep, p)
			continue
		}
		if payloadSum(p.payload) != p.sum {
			z.changed = append(z.changed, fmt.Sprintf("cookie %#x", p.cookie))
		}
		dst[n] = p.cookie
		n++
		z.reported++
		if z.cookies[p.cookie]--; z.cookies[p.cookie] == 0 {
			delete(z.cookies, p.cookie)
		}
	}
	z.pending = keep
	return n
}

func (z *zcLink) hold(on bool) {
	z.mu.Lock()
	z.held = on
	z.mu.Unlock()
}

func (z *zcLink) counts() (sent, reported, pending int) {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.sent, z.reported, len(z.pending)
}

func (z *zcLink) check(t *testing.T) {
	t.Helper()
	z.mu.Lock()
	defer z.mu.Unlock()
	if len(z.changed) > 0 {
		t.Errorf("%d zero-copy payloads changed before the link was done with them (first %s)", len(z.changed), z.changed[0])
	}
}

// newZCWorld is a world whose engines run with ZeroCopyTx on zcLinks.
func newZCWorld(t *testing.T, ncfg simlink.Config, seed uint64) (*world, *zcLink, *zcLink) {
	var za, zb *zcLink
	w := newWorldOn(t, ncfg, func(c *transport.Config) { c.ZeroCopyTx = true }, func(la, lb *simlink.Link) (link.Link, link.Link) {
		za, zb = newZCLink(la, seed), newZCLink(lb, seed+1)
		return za, zb
	})
	return w, za, zb
}

// TestZeroCopyCompletionWaitsForLink: a Send that the peer received and acknowledged does not
// complete while the link still holds one of its zero-copy packets; it completes once the
// link reports them all.
func TestZeroCopyCompletionWaitsForLink(t *testing.T) {
	w, za, _ := newZCWorld(t, simlink.Config{MaxPayload: 1472}, 1)
	qa, qb := w.connect(transport.QPConfig{})
	rbuf := make([]byte, 8000)
	if err := qb.PostReceive(&transport.Receive{NSGE: 1, SGL: [transport.MaxSGE][]byte{rbuf}, Context: 1}); err != nil {
		t.Fatal(err)
	}
	// Four full packets (MSS 1472-48): a smaller tail would be packed, a copy (bundle.go).
	msg := make([]byte, 4*1424)
	fillRandom(msg, rand.New(rand.NewPCG(3, 3)))
	za.hold(true)
	wr := transport.WorkRequest{Kind: transport.OpSend, NSGE: 1, Context: 9}
	wr.SGL[0] = msg
	if err := qa.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	w.runUntil(time.Second, "receive", func() bool { return w.rec.count(qb) == 1 })
	w.runFor(10 * time.Millisecond) // the acknowledgement arrives and is processed
	if got := qa.Stats(); got.TxPackets == 0 {
		t.Fatal("nothing sent")
	}
	if n := w.rec.count(qa); n != 0 {
		t.Fatalf("the Send completed while the link held its packets: %+v", w.rec.of(qa))
	}
	sent, _, pending := za.counts()
	if sent < 4 || pending != sent {
		t.Fatalf("zero-copy packets sent %d, held %d; want >= 4 (a Send of 4 full packets), all held", sent, pending)
	}
	za.hold(false)
	w.runUntil(time.Second, "send completion", func() bool { return w.rec.count(qa) == 1 })
	if c := w.rec.of(qa)[0]; c.Status != transport.StatusSuccess || c.Context != 9 || c.Bytes != uint32(len(msg)) {
		t.Fatalf("send completion %+v", c)
	}
	if got := w.rec.of(qb)[0]; got.Status != transport.StatusSuccess || !bytes.Equal(rbuf[:len(msg)], msg) {
		t.Fatalf("receive %+v, data equal %v", got, bytes.Equal(rbuf[:len(msg)], msg))
	}
	za.check(t)
}

// TestZeroCopyFlushKeepsOrder: a flushed QP completes its requests cancelled, in posting
// order, each only once the link is done with its packets, and requests posted after the
// flush complete after them.
func TestZeroCopyFlushKeepsOrder(t *testing.T) {
	w, za, _ := newZCWorld(t, simlink.Config{MaxPayload: 1472}, 2)
	qa, qb := w.connect(transport.QPConfig{})
	for i := range 2 {
		if err := qb.PostReceive(&transport.Receive{NSGE: 1, SGL: [transport.MaxSGE][]byte{make([]byte, 4000)}, Context: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	za.hold(true)
	for i := range 2 {
		wr := transport.WorkRequest{Kind: transport.OpSend, NSGE: 1, Context: uint64(10 + i)}
		wr.SGL[0] = make([]byte, 3000)
		if err := qa.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	w.runUntil(time.Second, "receives", func() bool { return w.rec.count(qb) == 2 })
	qa.Flush()
	late := transport.WorkRequest{Kind: transport.OpSend, NSGE: 1, Context: 12}
	late.SGL[0] = make([]byte, 10)
	if err := qa.PostSend(&late); err != nil {
		t.Fatal(err)
	}
	w.runFor(10 * time.Millisecond)
	if n := w.rec.count(qa); n != 0 {
		t.Fatalf("completions while the link held the packets: %+v", w.rec.of(qa))
	}
	za.hold(false)
	w.runUntil(time.Second, "flushed completions", func() bool { return w.rec.count(qa) == 3 })
	for i, c := range w.rec.of(qa) {
		if c.Context != uint64(10+i) || c.Status != transport.StatusCancelled {
			t.Errorf("completion %d: %+v, want context %d cancelled", i, c, 10+i)
		}
	}
	za.check(t)
}

// TestZeroCopyReadHoldsRegion: the region a peer's Read resolved stays held while its
// response packets are in the link, even after they were acknowledged; a deregistration
// in the meantime stops new accesses at once and WaitIdle returns only after the link is
// done. A Write's hold ends when its bytes are placed.
func TestZeroCopyReadHoldsRegion(t *testing.T) {
	reg := memreg.NewRegistry(64)
	pd := reg.NewPD()
	var zb *zcLink
	w := newWorldOn(t, simlink.Config{MaxPayload: 1472}, func(c *transport.Config) {
		c.ZeroCopyTx = true
		c.Resolver = reg
	}, func(la, lb *simlink.Link) (link.Link, link.Link) {
		zb = newZCLink(lb, 5)
		return newZCLink(la, 4), zb
	})
	qa, qb := w.connect(transport.QPConfig{PD: uint32(pd)})
	src := make([]byte, 6000)
	fillRandom(src, rand.New(rand.NewPCG(5, 5)))
	mr, err := reg.RegisterMR(pd, src, memreg.MRAllowRemoteRead|memreg.MRAllowRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}

	// A Write's hold ends with the Write.
	wr := transport.WorkRequest{Kind: transport.OpWrite, NSGE: 1, RemoteAddr: mr.VA() + 100, RemoteToken: mr.RemoteToken(), Context: 1}
	wr.SGL[0] = bytes.Repeat([]byte{7}, 3000)
	if err := qa.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	w.runUntil(time.Second, "write", func() bool { return w.rec.count(qa) == 1 })
	if c := w.rec.of(qa)[0]; c.Status != transport.StatusSuccess || mr.Refs() != 0 {
		t.Fatalf("write %+v, region holds %d after it", c, mr.Refs())
	}
	copy(src[100:], bytes.Repeat([]byte{7}, 3000)) // what the Write wrote, for the Read below

	zb.hold(true)
	dst := make([]byte, 6000)
	rd := transport.WorkRequest{Kind: transport.OpRead, NSGE: 1, RemoteAddr: mr.VA(), RemoteToken: mr.RemoteToken(), Context: 2}
	rd.SGL[0] = dst
	if err := qa.PostSend(&rd); err != nil {
		t.Fatal(err)
	}
	w.runUntil(time.Second, "read", func() bool { return w.rec.count(qa) == 2 })
	if c := w.rec.of(qa)[1]; c.Status != transport.StatusSuccess || !bytes.Equal(dst, src) {
		t.Fatalf("read %+v, data equal %v", c, bytes.Equal(dst, src))
	}
	w.runFor(10 * time.Millisecond) // the responses are acknowledged
	if mr.Refs() != 1 {
		t.Fatalf("region holds %d while the link still transmits the read responses, want 1", mr.Refs())
	}
	if err := reg.DeregisterMR(mr); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Acquire(pd, mr.RemoteToken(), mr.VA(), 1, memreg.AccessRemoteRead); err == nil {
		t.Fatal("a deregistered region resolved")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	if err := mr.WaitIdle(ctx); err == nil {
		t.Fatal("WaitIdle returned while the link held the region's packets")
	}
	cancel()
	zb.hold(false)
	w.runFor(time.Millisecond)
	if mr.Refs() != 0 {
		t.Fatalf("region holds %d after the link finished", mr.Refs())
	}
	if err := mr.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = qb
	zb.check(t)
}

// TestZeroCopyScenarios runs rows of the reliability table with ZeroCopyTx on links that
// report zero-copy packets done late and out of order, checking that no payload changes
// before its packet is done.
func TestZeroCopyScenarios(t *testing.T) {
	for _, sc := range scenarios() {
		switch sc.name {
		case "clean", "loss1", "reorder", "ackloss+reads", "combo":
		default:
			continue
		}
		sc.zeroCopy = true
		t.Run(sc.name, func(t *testing.T) { runScenario(t, sc) })
	}
}
