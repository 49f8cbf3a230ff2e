package transport_test

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/simlink"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// Packing small requests (bundle.go): several small data packets of a QP that leave in one
// engine round go in one Bundle datagram, each keeping its PSN, completion and
// acknowledgement; a lone one leaves as a plain packet.

// packWorkload posts, before the engines run, nWrites small Writes (some gathered from
// three SGEs) to B's region and nSends small Sends to B's receives, and runs until every
// one completed. It checks the completions (success, posting order, bytes) and the memory,
// and returns A's and B's engine counters.
func packWorkload(t *testing.T, w *world, nWrites, nSends, size int) (a, b transport.EngineStats) {
	t.Helper()
	qa, qb := w.connect(transport.QPConfig{SendDepth: 1024, RecvDepth: 1024})
	const tok = 77
	dst := make([]byte, nWrites*size)
	w.memB.add(tok, 0, 0x10000, dst, memreg.AccessRemoteWrite)
	src := make([]byte, nWrites*size+nSends*size)
	fillRandom(src, rand.New(rand.NewPCG(5, 6)))
	rbufs := make([][]byte, nSends)
	for i := range rbufs {
		rbufs[i] = make([]byte, size)
		if err := qb.PostReceive(&transport.Receive{NSGE: 1, SGL: [transport.MaxSGE][]byte{rbufs[i]}, Context: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	w.runFor(time.Millisecond) // the receives' credits reach A
	for i := range nWrites {
		piece := src[i*size : (i+1)*size]
		wr := transport.WorkRequest{Kind: transport.OpWrite, RemoteAddr: 0x10000 + uint64(i*size), RemoteToken: tok, Context: uint64(i)}
		if i%3 == 0 && size >= 3 { // three SGEs: gathered into the batch's scratch
			wr.NSGE, wr.SGL[0], wr.SGL[1], wr.SGL[2] = 3, piece[:1], piece[1:2], piece[2:]
		} else {
			wr.NSGE, wr.SGL[0] = 1, piece
		}
		if err := qa.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	for i := range nSends {
		wr := transport.WorkRequest{Kind: transport.OpSend, NSGE: 1, Context: uint64(nWrites + i)}
		wr.SGL[0] = src[(nWrites+i)*size : (nWrites+i+1)*size]
		if err := qa.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	n := nWrites + nSends
	w.runUntil(10*time.Second, "every request", func() bool { return w.rec.count(qa) == n && w.rec.count(qb) == nSends })
	for i, c := range w.rec.of(qa) {
		if c.Status != transport.StatusSuccess || c.Context != uint64(i) || int(c.Bytes) != size {
			t.Fatalf("completion %d: %+v", i, c)
		}
	}
	if !bytes.Equal(dst, src[:nWrites*size]) {
		t.Fatal("written memory differs")
	}
	for i, c := range w.rec.of(qb) {
		if c.Status != transport.StatusSuccess || c.Context != uint64(i) || !bytes.Equal(rbufs[i], src[(nWrites+i)*size:(nWrites+i+1)*size]) {
			t.Fatalf("receive %d: %+v", i, c)
		}
	}
	return w.a.Stats(), w.b.Stats()
}

// TestPackSmallRequests: 96 Writes and 32 Sends of 64 bytes posted at once leave in bundles
// (far fewer datagrams than packets), all complete in order, byte-exact, and the peer takes
// exactly the entries that were sent.
func TestPackSmallRequests(t *testing.T) {
	w := newWorld(t, simlink.Config{MaxPayload: 8972, Default: simlink.Impairments{Latency: 5 * time.Microsecond}}, nil)
	a, b := packWorkload(t, w, 96, 32, 64)
	if a.BundlesSent == 0 || a.BundledSent < 2*a.BundlesSent {
		t.Fatalf("A sent %d bundles of %d packets: want packing", a.BundlesSent, a.BundledSent)
	}
	if b.BundlesReceived != a.BundlesSent || b.BundledReceived != a.BundledSent {
		t.Fatalf("B received %d bundles of %d packets, A sent %d of %d", b.BundlesReceived, b.BundledReceived, a.BundlesSent, a.BundledSent)
	}
	if a.TxPackets >= 128/2 {
		t.Fatalf("A handed %d datagrams to the link for 128 requests", a.TxPackets)
	}
	t.Logf("128 requests of 64 B: %d datagrams from A, %d bundles of %d packets", a.TxPackets, a.BundlesSent, a.BundledSent)
}

// TestPackLossy: the same under loss, reordering, duplication and corruption: every
// request completes, in order, byte-exact, and what was lost of a bundle is resent.
func TestPackLossy(t *testing.T) {
	imp := simlink.Impairments{Latency: 5 * time.Microsecond, Loss: 0.05, Jitter: 30 * time.Microsecond, Duplicate: 0.05, Corrupt: 0.02}
	w := newWorld(t, simlink.Config{Seed: 9, MaxPayload: 1472, Default: imp}, nil)
	a, _ := packWorkload(t, w, 300, 100, 48)
	if a.BundlesSent == 0 {
		t.Fatal("no bundle sent")
	}
}

// TestPackLoneRequest: a single small Write leaves at once as the plain packet it is.
func TestPackLoneRequest(t *testing.T) {
	w, tapA, _ := newTapWorld(t, simlink.Config{MaxPayload: 8972}, nil)
	a, _ := packWorkload(t, w, 1, 0, 64)
	if a.BundlesSent != 0 {
		t.Fatalf("%d bundles for one request", a.BundlesSent)
	}
	// The header, the RDMA extension, 64 payload bytes and the trailer: a plain Write.
	if got := tapA.lastOf(t, wire.OpWrite); len(got.Raw) != wire.HeaderLen+wire.RDMAExtLen+64+wire.TrailerLen {
		t.Fatalf("the Write left as a %d-byte datagram", len(got.Raw))
	}
}

// TestPackOff: a negative PackLimit packs nothing.
func TestPackOff(t *testing.T) {
	w := newWorld(t, simlink.Config{MaxPayload: 8972}, func(c *transport.Config) { c.PackLimit = -1 })
	a, _ := packWorkload(t, w, 64, 16, 64)
	if a.BundlesSent != 0 || a.TxPackets < 80 {
		t.Fatalf("PackLimit -1: %d bundles, %d datagrams for 80 requests", a.BundlesSent, a.TxPackets)
	}
}
