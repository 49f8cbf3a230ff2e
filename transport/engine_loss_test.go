package transport_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/memreg"

	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/simlink"
)

// TestLossySendsAndWrites moves Sends and Writes over a network that loses, reorders and
// duplicates, and checks every byte and the completion order.
func TestLossySendsAndWrites(t *testing.T) {
	for _, tc := range []struct {
		name string
		imp  simlink.Impairments
	}{
		{"clean", simlink.Impairments{Latency: 5 * time.Microsecond}},
		{"loss1", simlink.Impairments{Latency: 5 * time.Microsecond, Loss: 0.01}},
		{"loss10", simlink.Impairments{Latency: 5 * time.Microsecond, Loss: 0.10}},
		{"reorder+dup", simlink.Impairments{Latency: 5 * time.Microsecond, Jitter: 20 * time.Microsecond, Duplicate: 0.05}},
		{"corrupt", simlink.Impairments{Latency: 5 * time.Microsecond, Corrupt: 0.02}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, simlink.Config{Seed: 7, MaxPayload: 1472}, nil)
			qa, qb := w.connect(transport.QPConfig{SendDepth: 64, RecvDepth: 64})
			if err := w.net.SetDefault(tc.imp); err != nil {
				t.Fatal(err)
			}
			const n = 200
			recvs := make([][]byte, n)
			msgs := make([][]byte, n)
			target := make([]byte, 64<<10)
			w.memB.add(9, 0, 0x1000, target, memreg.AccessRemoteWrite)
			wdata := make([]byte, 64<<10)
			pattern(wdata, 99)
			posted, sent := 0, 0
			w.runUntil(20*time.Second, "all", func() bool {
				for posted < n && posted-len(w.rec.of(qb)) < 32 {
					recvs[posted] = make([]byte, 4000)
					if err := qb.PostReceive(&transport.Receive{NSGE: 1, SGL: [transport.MaxSGE][]byte{recvs[posted]}, Context: uint64(posted)}); err != nil {
						t.Fatal(err)
					}
					posted++
				}
				for sent < n && sent-len(w.rec.of(qa)) < 32 {
					msgs[sent] = make([]byte, 1+sent*17%3999)
					pattern(msgs[sent], sent)
					wr := &transport.WorkRequest{Kind: transport.OpSend, NSGE: 1, SGL: [transport.MaxSGE][]byte{msgs[sent]}, Context: uint64(sent)}
					if sent%50 == 49 {
						wr = &transport.WorkRequest{Kind: transport.OpWrite, NSGE: 1, SGL: [transport.MaxSGE][]byte{wdata}, RemoteAddr: 0x1000, RemoteToken: 9, Context: uint64(sent)}
					}
					if err := qa.PostSend(wr); err != nil {
						t.Fatal(err)
					}
					sent++
				}
				return len(w.rec.of(qa)) == n
			})
			cs := w.rec.of(qa)
			for i, c := range cs {
				if c.Status != transport.StatusSuccess || c.Context != uint64(i) {
					t.Fatalf("completion %d: %+v", i, c)
				}
			}
			w.runUntil(5*time.Second, "receives", func() bool { return len(w.rec.of(qb)) == n-n/50 })
			j := 0
			for i := range n {
				if i%50 == 49 {
					continue
				}
				c := w.rec.of(qb)[j]
				j++
				if c.Status != transport.StatusSuccess || c.Context != uint64(j-1) || int(c.Bytes) != len(msgs[i]) || !bytes.Equal(recvs[c.Context][:c.Bytes], msgs[i]) {
					t.Fatalf("receive %d (msg %d): %+v", j-1, i, c)
				}
			}
			if !bytes.Equal(target, wdata) {
				t.Fatal("write data differs")
			}
			t.Logf("virtual %v A %+v", time.Duration(w.clock.Now()), qa.Stats())
		})
	}
}
