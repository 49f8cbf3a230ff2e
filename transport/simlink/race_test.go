package simlink

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"
)

// Two engines on their own goroutines exchange datagrams both ways on a real clock while a
// third goroutine reads counters, rings doorbells and changes an unrelated path. Run with
// -race. Without impairments each direction arrives complete and in order.
func TestConcurrentEngines(t *testing.T) {
	const total = 20000
	// Senders outrun receivers: let the whole exchange be in flight at once.
	a, b := Pair(Config{Buffers: 64, MaxPayload: 64, RxQueue: total})
	n := a.Network()
	defer n.Close()

	var wg sync.WaitGroup
	errs := make(chan string, 8)
	engine := func(self, peer *Link) {
		defer wg.Done()
		var tx [16]link.Packet
		var rx [32]link.Packet
		buf := make([]byte, 16*64)
		sent, next := 0, uint64(0)
		deadline := time.Now().Add(time.Minute)
		for next < total || sent < total {
			if time.Now().After(deadline) {
				errs <- fmt.Sprintf("timed out: sent %d, received %d", sent, next)
				return
			}
			if sent < total {
				k := min(len(tx), total-sent)
				for i := range tx[:k] {
					d := buf[i*64 : i*64+8+(sent+i)%56]
					fillPayload(d, uint64(sent+i))
					tx[i] = link.Packet{Remote: peer.LocalAddr()}
					tx[i].SetData(d)
				}
				m, err := self.Send(tx[:k])
				if err != nil || m != k {
					errs <- "send failed"
					return
				}
				sent += k
			} else if err := self.Wait(10 * time.Millisecond); err != nil {
				errs <- err.Error()
				return
			}
			m, err := self.Receive(rx[:])
			if err != nil {
				errs <- err.Error()
				return
			}
			for i := range rx[:m] {
				var data []byte
				for _, s := range rx[i].Segs[:rx[i].NSegs] {
					data = append(data, s...)
				}
				g := got{data: data}
				if rx[i].Remote != peer.LocalAddr() || g.seq() != next || !g.intact() {
					errs <- fmt.Sprintf("datagram from %v out of order or damaged: seq %d, want %d", rx[i].Remote, g.seq(), next)
					return
				}
				next++
			}
			self.Release(rx[:m])
		}
	}
	stop := make(chan struct{})
	var meddler sync.WaitGroup
	meddler.Add(1)
	go func() {
		defer meddler.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = a.Stats()
			_ = n.PathStats(a.LocalAddr(), b.LocalAddr())
			_ = n.Stats()
			_, _ = n.NextDelivery()
			b.Wake()
			_ = n.SetPath(hostAddr(7), hostAddr(8), Impairments{Loss: float64(i%10) / 10})
			time.Sleep(50 * time.Microsecond)
		}
	}()
	wg.Add(2)
	go engine(a, b)
	go engine(b, a)
	wg.Wait()
	close(stop)
	meddler.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if s := a.Stats(); s.RxPackets != total || s.TxPackets != total {
		t.Fatalf("a: %+v", s)
	}
}

// The same under impairments, for the race detector's sake: jitter, loss, duplication and
// corruption on a real clock, with Close racing the engines at the end.
func TestConcurrentImpaired(t *testing.T) {
	a, b := Pair(Config{Default: Impairments{Loss: 0.1, Duplicate: 0.1, Corrupt: 0.1,
		Jitter: 200 * time.Microsecond, Latency: 100 * time.Microsecond}, SplitRx: SplitRandom})
	var wg sync.WaitGroup
	run := func(self, peer *Link) {
		defer wg.Done()
		var tx [4]link.Packet
		var rx [8]link.Packet
		data := payload(1, 300)
		for i := 0; i < 5000; i++ {
			for j := range tx {
				tx[j] = link.Packet{Remote: peer.LocalAddr()}
				tx[j].SetData(data)
			}
			if _, err := self.Send(tx[:]); err != nil {
				return // closed
			}
			if err := self.Wait(100 * time.Microsecond); err != nil {
				return
			}
			m, err := self.Receive(rx[:])
			if err != nil {
				return
			}
			self.Release(rx[:m])
		}
	}
	wg.Add(2)
	go run(a, b)
	go run(b, a)
	time.Sleep(20 * time.Millisecond)
	_ = a.Network().Close()
	wg.Wait()
}
