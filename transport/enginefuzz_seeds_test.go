package transport_test

import (
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

var fzUpdateCorpus = flag.Bool("update-corpus", false, "rewrite the committed FuzzEnginePair seeds in testdata/fuzz")

// fzSeed is a named FuzzEnginePair input.
type fzSeed struct {
	name string
	data []byte
}

// fzProg builds an input record by record.
type fzProg struct{ b []byte }

// rec appends an operation: op, then the argument bytes set by set.
func (p *fzProg) rec(op byte, set func(r *fzRecord)) *fzProg {
	var r fzRecord
	r[0] = op
	if set != nil {
		set(&r)
	}
	p.b = append(p.b, r[:]...)
	return p
}

func (r *fzRecord) put16(i int, v uint16) { binary.BigEndian.PutUint16(r[i:], v) }
func (r *fzRecord) put32(i int, v uint32) { binary.BigEndian.PutUint32(r[i:], v) }
func (r *fzRecord) put64(i int, v uint64) { binary.BigEndian.PutUint64(r[i:], v) }

// Engines and sources of the records' byte 1.
const (
	fzA       = 0
	fzB       = 1
	fzSrcPeer = 0 << 1 // the peer's CM address
	fzSrcData = 1 << 1 // a data address the peer sends from
	fzSrc3rd  = 2 << 1 // the third host
	fzSrcAny  = 5 << 1 // 0.0.0.0
)

// qpArg is byte 1 of an operation on engine side's QP number i.
func qpArg(side, i byte) byte { return side | i<<1 }

// connRequest forges, to side, a ConnRequest for the listener with MaxPayload index mp (in
// fzMaxPayloads) and otherwise valid fields, from the peer's CM address.
func (p *fzProg) connRequest(side byte, mp byte, connID uint64) *fzProg {
	return p.rec(fzOpCM, func(r *fzRecord) {
		r[1] = side | fzSrcPeer
		r[2] = 0  // ConnRequest
		r[5] = 1  // ConnID: random (below)
		r[6] = 1  // SrcQPN: random
		r[8] = mp // MaxPayload
		r[9] = 1  // DataPort: random
		r[10] = 0 // the listener's service
		r[11], r[12] = 4, 4
		r.put64(16, connID)
		r.put32(24, 77)
		r.put16(28, 50000)
	})
}

// connReply forges, to side, a ConnReply from the third host for side's latest attempt
// (its latest QP, the latest ConnID seen) with MaxPayload index mp and otherwise valid
// fields.
func (p *fzProg) connReply(side byte, mp byte) *fzProg {
	return p.rec(fzOpCM, func(r *fzRecord) {
		r[1] = side | fzSrc3rd
		r[2] = 1 // ConnReply
		r[3] = 2 // DestQPN: side's latest QP
		r[4] = 1 // header cookie: random
		r[5] = 2 // ConnID: the latest seen
		r[6] = 1 // SrcQPN: random
		r[7] = 2 // CM cookie: the header's
		r[8] = mp
		r[9] = 1 // DataPort: random
		r[11], r[12] = 4, 4
		r.put64(16, 0xc00c1e)
		r.put32(24, 9)
		r.put16(28, 50001)
	})
}

func (p *fzProg) post(op, side, qp byte, size uint16, target byte) *fzProg {
	return p.rec(op, func(r *fzRecord) {
		r[1] = qpArg(side, qp)
		r.put16(2, size)
		r[7] = target
		r.put32(8, 100)
	})
}

func (p *fzProg) advance(us uint32) *fzProg {
	return p.rec(fzOpAdvance, func(r *fzRecord) { r.put32(2, us) })
}

// rdma forges, to side on the first flow into it, a Write or ReadRequest at region 1 with
// length palette index li.
func (p *fzProg) rdma(side byte, op byte, plen uint16, li byte) *fzProg {
	return p.rec(fzOpData, func(r *fzRecord) {
		r[1] = side
		r[3] = op // index in fzDataOps
		r[5] = 8  // AckReq
		r.put16(8, plen)
		r.put32(10, 64)
		r[26] = 0 // region 1
		r[27] = li
	})
}

// fzSeeds are the committed starting points of FuzzEnginePair.
func fzSeeds() []fzSeed {
	var s []fzSeed
	add := func(name string, p *fzProg) { s = append(s, fzSeed{name, p.b}) }

	// The reported crash, request side: B's listener is offered MaxPayload 48 (index 1),
	// accepts it on a new QP and sends on it; the peer's Read follows.
	for _, mp := range []struct {
		name string
		i    byte
	}{{"48", 1}, {"0", 0}, {"floor-1", 2}, {"65535", 9}} {
		add("cm-request-maxpayload-"+mp.name, new(fzProg).
			connRequest(fzB, mp.i, 0x1234).
			rec(fzOpAnswer, func(r *fzRecord) { r[1] = fzB }).
			post(fzOpSend, fzB, 1, 2000, 0).
			post(fzOpRead, fzB, 1, 2000, 0).
			advance(100000))
	}
	// Reply side: A connects a new QP to the third host, which answers MaxPayload 48; A
	// completes and sends.
	for _, mp := range []struct {
		name string
		i    byte
	}{{"48", 1}, {"0", 0}, {"floor-1", 2}, {"ceiling+1", 8}} {
		add("cm-reply-maxpayload-"+mp.name, new(fzProg).
			rec(fzOpConnect, func(r *fzRecord) { r[1], r[2] = fzA, 2 }).
			connReply(fzA, mp.i).
			rec(fzOpConnector, nil).
			post(fzOpSend, fzA, 1, 2000, 0).
			post(fzOpRecv, fzA, 1, 2000, 0).
			advance(100000))
	}
	// A second connection from A to B with the MaxPayload of A's request or of B's reply
	// rewritten on the way: 48 and 0 are refused (a reject; ErrPeerInvalid), the floor
	// connects and moves multi-packet Sends and a Read both ways.
	for _, c := range []struct {
		name     string
		side, op byte // whose message (fzAllOps: 0 request, 1 reply)
		v        uint32
	}{{"request-48", fzA, 0, 48}, {"request-0", fzA, 0, 0}, {"request-floor", fzA, 0, 266},
		{"reply-48", fzB, 1, 48}, {"reply-floor", fzB, 1, 266}} {
		add("cm-rewritten-"+c.name, new(fzProg).
			rec(fzOpRewrite, func(r *fzRecord) { r[1], r[2], r[3] = c.side, c.op, 0; r.put32(4, c.v) }).
			rec(fzOpConnect, func(r *fzRecord) { r[1] = fzA }).
			advance(100).
			rec(fzOpAnswer, func(r *fzRecord) { r[1] = fzB }).
			advance(100).
			rec(fzOpConnector, nil).
			advance(100).
			post(fzOpRecv, fzA, 1, 3000, 0).
			post(fzOpRecv, fzB, 1, 3000, 0).
			post(fzOpSend, fzB, 1, 3000, 0).
			post(fzOpSend, fzA, 1, 3000, 0).
			post(fzOpRead, fzB, 1, 3000, 0).
			post(fzOpRead, fzA, 1, 3000, 0).
			advance(100000))
	}
	// A request from an address nothing may answer.
	add("cm-request-unspecified-source", new(fzProg).rec(fzOpCM, func(r *fzRecord) {
		r[1] = fzB | fzSrcAny
		r[5], r[6], r[8], r[9] = 1, 1, 5, 1
		r.put64(16, 99)
		r.put32(24, 5)
		r.put16(28, 40000)
	}).advance(1000))
	// More requests than the half-open table takes.
	flood := new(fzProg)
	for i := range 6 {
		flood.connRequest(fzB, 5, uint64(0x100+i))
	}
	add("cm-half-open-flood", flood.advance(50000))

	// Data packets the responder must refuse: a ReadRequest near 4 GiB, one over 2^31, a
	// Write over 2^31 (fzDataOps: 6 Write, 7 ReadRequest; lengths: 3 2^31+1, 5 2^32-256).
	add("read-near-4GiB", new(fzProg).rdma(fzB, 7, 0, 5).advance(10000))
	add("read-over-2^31", new(fzProg).rdma(fzB, 7, 0, 3).advance(10000))
	add("write-over-2^31", new(fzProg).rdma(fzB, 6, 100, 3).advance(10000))
	// An RNR NAK with the largest Value for a Send of A waiting for a receive.
	add("rnr-nak-max", new(fzProg).
		post(fzOpSend, fzA, 0, 1000, 0).
		advance(6000).
		rec(fzOpData, func(r *fzRecord) {
			r[1] = fzA
			r[3] = 9 // Ack
			r.put16(28, 0xffff)
			r[30] = 2 // NakRNR
			r[26] = 1 // NakPSN: the latest packet of A
		}).
		advance(2000).
		post(fzOpRecv, fzB, 0, 1000, 0).
		advance(3000000))
	// Ordinary traffic both ways, then replays of what was sent with fields changed.
	traffic := new(fzProg).
		post(fzOpRecv, fzB, 0, 3000, 0).
		post(fzOpRecv, fzA, 0, 3000, 0).
		post(fzOpSend, fzA, 0, 2500, 0).
		post(fzOpWrite, fzA, 0, 2000, 0).
		post(fzOpRead, fzA, 0, 2000, 1).
		post(fzOpSend, fzB, 0, 100, 0).
		advance(2000)
	add("traffic", &fzProg{b: append([]byte(nil), traffic.b...)})
	replay := &fzProg{b: append([]byte(nil), traffic.b...)}
	for i := range 8 {
		replay.rec(fzOpReplay, func(r *fzRecord) {
			r[1] = byte(3 * i)
			r[2] = 1
			r.put16(3, uint16(24+4*i))
			r[5] = 3
			r.put32(6, 0xffffff00)
			r.put16(10, 36)
			r[12] = 2
			r.put32(13, 0)
		})
	}
	add("traffic-replayed", replay.advance(100000))
	// A second connection, accepted and completed, used, and disconnected; a flush.
	add("connect-accept-disconnect", new(fzProg).
		rec(fzOpConnect, func(r *fzRecord) { r[1] = fzB }).
		advance(100).
		rec(fzOpAnswer, func(r *fzRecord) { r[1] = fzA }).
		advance(100).
		rec(fzOpConnector, nil).
		advance(100).
		post(fzOpRecv, fzA, 1, 1000, 0).
		post(fzOpSend, fzB, 1, 1000, 0).
		advance(1000).
		rec(fzOpDisconnect, func(r *fzRecord) { r[1] = qpArg(fzB, 1) }).
		rec(fzOpFlush, func(r *fzRecord) { r[1] = qpArg(fzA, 0) }).
		advance(10000))
	// Loss, duplication and reordering under traffic.
	add("impaired-traffic", (&fzProg{b: append([]byte(nil), traffic.b...)}).
		rec(fzOpImpair, func(r *fzRecord) { r[1], r[2], r[3], r[4] = fzA, 60, 30, 20 }).
		post(fzOpSend, fzA, 0, 3000, 0).
		post(fzOpRecv, fzB, 0, 3000, 0).
		advance(500000))
	return s
}

// TestWriteEnginePairCorpus rewrites testdata/fuzz/FuzzEnginePair/seed-* from fzSeeds when
// run with -update-corpus; otherwise it checks the committed seeds are what fzSeeds builds.
func TestWriteEnginePairCorpus(t *testing.T) {
	for _, s := range fzSeeds() {
		path := filepath.Join("testdata", "fuzz", "FuzzEnginePair", "seed-"+s.name)
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s.data)
		if *fzUpdateCorpus {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("seed corpus: %v (regenerate with go test -run TestWriteEnginePairCorpus -update-corpus)", err)
		}
		if string(got) != content {
			t.Errorf("%s is stale (regenerate with go test -run TestWriteEnginePairCorpus -update-corpus)", path)
		}
	}
}
