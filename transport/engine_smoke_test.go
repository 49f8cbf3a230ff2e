package transport_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/memreg"

	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/simlink"
)

// TestSmokeVerbs connects two engines over a clean simulated network and moves one Send, one
// Write and one Read, each larger than a packet.
func TestSmokeVerbs(t *testing.T) {
	w := newWorld(t, simlink.Config{Seed: 1, MaxPayload: 1472, Default: simlink.Impairments{Latency: 5 * time.Microsecond}}, nil)
	qa, qb := w.connect(transport.QPConfig{})

	// Send 5000 bytes into a posted receive.
	rbuf := make([]byte, 8000)
	if err := qb.PostReceive(&transport.Receive{NSGE: 1, SGL: [transport.MaxSGE][]byte{rbuf}, Context: 11}); err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, 5000)
	pattern(msg, 1)
	if err := qa.PostSend(&transport.WorkRequest{Kind: transport.OpSend, NSGE: 1, SGL: [transport.MaxSGE][]byte{msg}, Context: 1}); err != nil {
		t.Fatal(err)
	}
	w.runUntil(time.Second, "send", func() bool { return len(w.rec.of(qa)) == 1 && len(w.rec.of(qb)) == 1 })
	if c := w.rec.of(qb)[0]; c.Status != transport.StatusSuccess || c.Bytes != 5000 || c.Context != 11 || !bytes.Equal(rbuf[:5000], msg) {
		t.Fatalf("receive completion %+v, data equal %v", c, bytes.Equal(rbuf[:5000], msg))
	}
	if c := w.rec.of(qa)[0]; c.Status != transport.StatusSuccess || c.Op != transport.OpSend {
		t.Fatalf("send completion %+v", c)
	}

	// Write 10000 bytes into B's memory, then read them back.
	target := make([]byte, 20000)
	w.memB.add(0x55, 0, 0x10000, target, memreg.AccessRemoteRead|memreg.AccessRemoteWrite)
	data := make([]byte, 10000)
	pattern(data, 2)
	if err := qa.PostSend(&transport.WorkRequest{Kind: transport.OpWrite, NSGE: 1, SGL: [transport.MaxSGE][]byte{data}, RemoteAddr: 0x10000 + 100, RemoteToken: 0x55, Context: 2}); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, 10000)
	if err := qa.PostSend(&transport.WorkRequest{Kind: transport.OpRead, NSGE: 1, SGL: [transport.MaxSGE][]byte{back}, RemoteAddr: 0x10000 + 100, RemoteToken: 0x55, Context: 3, Flags: transport.WRReadFence}); err != nil {
		t.Fatal(err)
	}
	w.runUntil(time.Second, "write+read", func() bool {
		if len(w.rec.of(qa)) == 3 {
			return true
		}
		t.Logf("%s | A %+v | B %+v | %+v", statusOf(w.rec.of(qa)), qa.Stats(), qb.Stats(), w.a.Stats())
		return false
	})
	cs := w.rec.of(qa)
	if cs[1].Status != transport.StatusSuccess || cs[2].Status != transport.StatusSuccess {
		t.Fatalf("completions %s", statusOf(cs))
	}
	if !bytes.Equal(target[100:10100], data) {
		t.Fatal("write did not land")
	}
	if !bytes.Equal(back, data) {
		t.Fatal("read returned other bytes")
	}
	t.Logf("A: %+v", qa.Stats())
	t.Logf("B: %+v", qb.Stats())
}
