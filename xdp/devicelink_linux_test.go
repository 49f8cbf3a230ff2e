package xdp

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/transport/link"
)

// A DeviceLink serves every queue of a 4-queue veth: datagrams of many flows leave A on the
// queue their flow hashes to (so every TX queue is used), arrive on B's queue of the same
// number (veth's mapping, standing in for a NIC's RSS), and B's DeviceLink receives all of
// them, in order per flow, from every queue, and gives every frame back to its queue.
func TestDeviceLinkAllQueues(t *testing.T) {
	const queues = 4
	bed := testbed.NewT(t, testbed.Options{Queues: queues})
	cfg := Config{RingSize: 256, Frames: 512}
	a, b := openOn(t, bed.A, cfg), openOn(t, bed.B, cfg)
	if len(a.Links()) != queues || len(b.Links()) != queues {
		t.Fatalf("links %d and %d, want %d each (every queue served by default)", len(a.Links()), len(b.Links()), queues)
	}
	la, lb := a.DeviceLink(), b.DeviceLink()
	resolvePair(t, a.Links()[0], b.Links()[0])

	// Source ports chosen so that every TX queue of A carries flows.
	var ports []uint16
	var used [queues]int
	for p := uint16(50000); len(ports) < 32 || min(used[0], used[1], used[2], used[3]) == 0; p++ {
		ports = append(ports, p)
		used[FlowHash(lb.LocalAddr(), p)%queues]++
	}
	const perFlow = 8
	next := make(map[uint16]int) // per source port: the next sequence number expected
	var pkts [64]link.Packet
	sent := 0
	for seq := range perFlow {
		for _, p := range ports {
			pk := []link.Packet{{Remote: lb.LocalAddr(), LocalPort: p}}
			pk[0].SetData([]byte(fmt.Sprintf("%d/%d", p, seq)))
			if n, err := la.Send(pk); n != 1 || err != nil {
				t.Fatalf("send: %d, %v", n, err)
			}
			sent++
		}
	}
	got := 0
	deadline := time.Now().Add(10 * time.Second)
	for got < sent && time.Now().Before(deadline) {
		n, err := lb.Receive(pkts[:])
		if err != nil {
			t.Fatal(err)
		}
		for i := range pkts[:n] {
			var port uint16
			var seq int
			if _, err := fmt.Sscanf(string(pkts[i].Segs[0]), "%d/%d", &port, &seq); err != nil {
				t.Fatalf("datagram %q: %v", pkts[i].Segs[0], err)
			}
			if pkts[i].Remote.Port() != port || seq != next[port] {
				t.Fatalf("flow %d: got %d from %v, want %d: a flow was reordered across queues", port, seq, pkts[i].Remote, next[port])
			}
			next[port]++
		}
		got += n
		if n > 0 {
			lb.Release(pkts[:n])
		} else if err := lb.Wait(10 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if got != sent {
		t.Fatalf("received %d of %d datagrams", got, sent)
	}
	for q, l := range b.Links() {
		st, sa := l.Stats(), a.Links()[q].Stats()
		t.Logf("queue %d: A sent %d, B received %d", q, sa.TxPackets, st.RxPackets)
		if st.RxPackets == 0 || sa.TxPackets == 0 {
			t.Errorf("queue %d unused: A sent %d, B received %d", q, sa.TxPackets, st.RxPackets)
		}
	}
	framesHome(t, b, cfg.Frames)
	if s := lb.Stats(); s.RxPackets != uint64(sent) {
		t.Errorf("DeviceLink stats: %d received, want %d", s.RxPackets, sent)
	}
}

// Released in another slice than Receive filled (or in parts), each frame still goes back to
// the queue it came from; a closed DeviceLink reports ErrClosed.
func TestDeviceLinkReleaseAnySlice(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{Queues: 2})
	cfg := Config{RingSize: 256, Frames: 512}
	a, b := openOn(t, bed.A, cfg), openOn(t, bed.B, cfg)
	la, lb := a.DeviceLink(), b.DeviceLink()
	resolvePair(t, a.Links()[0], b.Links()[0])
	const n = 40
	for i := range n {
		pk := []link.Packet{{Remote: lb.LocalAddr(), LocalPort: uint16(40000 + i)}}
		pk[0].SetData([]byte("x"))
		if k, err := la.Send(pk); k != 1 || err != nil {
			t.Fatalf("send: %d %v", k, err)
		}
	}
	var got []link.Packet
	var buf [64]link.Packet
	for deadline := time.Now().Add(10 * time.Second); len(got) < n && time.Now().Before(deadline); {
		k, err := lb.Receive(buf[:])
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:k]...) // copies: Release sees other slices
		if k == 0 {
			_ = lb.Wait(10 * time.Millisecond)
		}
	}
	if len(got) != n {
		t.Fatalf("received %d of %d", len(got), n)
	}
	for i := range got {
		// veth: a datagram sent on queue q arrives on the peer's queue q.
		want := int(FlowHash(lb.LocalAddr(), got[i].Remote.Port()) % 2)
		o := lb.owner(&got[i])
		if o == nil || o.Queue() != want {
			q := -1
			if o != nil {
				q = o.Queue()
			}
			t.Fatalf("datagram from port %d: owned by queue %d, want queue %d", got[i].Remote.Port(), q, want)
		}
	}
	lb.Release(got[:n/2])
	lb.Release(got[n/2:])
	framesHome(t, b, 512)
	if err := lb.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := lb.Receive(buf[:]); err != link.ErrClosed {
		t.Fatalf("Receive after Close: %v", err)
	}
	if err := lb.Wait(time.Millisecond); err != link.ErrClosed {
		t.Fatalf("Wait after Close: %v", err)
	}
}

// Serving fewer queues than the interface uses is refused with the fix named, and an
// n-tuple rule veth cannot take fails Open the same way; naming a queue that does not exist
// says how many there are.
func TestOpenQueueRules(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{Queues: 4})
	for _, c := range []struct {
		name string
		cfg  Config
		has  []string
	}{
		{"subset", Config{Queues: []int{0}}, []string{"4 RX queues", "ethtool -L " + bed.A.Ifname + " combined 1"}},
		{"ntuple on veth", Config{Queues: []int{2}, Steering: SteerNtuple}, []string{"ntuple", "ethtool -K " + bed.A.Ifname + " ntuple on"}},
		{"no such queue", Config{Queues: []int{0, 1, 2, 3, 4}}, []string{"no queue 4"}},
	} {
		cfg := c.cfg
		cfg.Interface, cfg.Port, cfg.Logger, cfg.RingSize, cfg.Frames = bed.A.Ifname, testPort, quietLogger, 256, 512
		err := bed.A.Do(func() error {
			d, err := Open(cfg)
			if err == nil {
				d.Close()
			}
			return err
		})
		if err == nil {
			t.Fatalf("%s: Open succeeded", c.name)
		}
		for _, s := range c.has {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: error %q lacks %q", c.name, err, s)
			}
		}
	}
	// Steered from outside, a subset is taken as asked.
	d := openOn(t, bed.A, Config{Queues: []int{1, 3}, Steering: SteerExternal, RingSize: 256, Frames: 512})
	if len(d.Links()) != 2 || d.Links()[0].Queue() != 1 || d.Links()[1].Queue() != 3 {
		t.Fatalf("external steering: links on %v", d.Links())
	}
}

// framesHome checks, on an idle device that received only, that every queue has all of its
// frames back: in its pool or on its own fill ring. A frame released to the wrong queue
// leaves one queue short and another over.
func framesHome(t *testing.T, d *Device, frames int) {
	t.Helper()
	for q, l := range d.Links() {
		if got := l.pool.Len() + l.sock.FillPending(); got != frames {
			t.Errorf("queue %d: %d frames in pool and fill ring, want %d", q, got, frames)
		}
	}
}

// Watch (link.Watcher) sleeps beside the engine: it returns when a datagram arrives on
// any queue or the doorbell rings, else at its timeout, and ErrClosed after Close; it runs
// while another goroutine receives (the race detector checks it touches nothing of theirs).
func TestDeviceLinkWatch(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{Queues: 2})
	cfg := Config{RingSize: 256, Frames: 512}
	a, b := openOn(t, bed.A, cfg), openOn(t, bed.B, cfg)
	la, lb := a.DeviceLink(), b.DeviceLink()
	resolvePair(t, a.Links()[0], b.Links()[0])
	// Nothing pending: the timeout ends it.
	t0 := time.Now()
	if err := lb.Watch(20 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < 20*time.Millisecond {
		t.Fatalf("idle Watch returned after %v", d)
	}
	// A doorbell ends it (an hour would fail the test by its timeout).
	go func() { time.Sleep(5 * time.Millisecond); lb.Wake() }()
	if err := lb.Watch(time.Hour); err != nil {
		t.Fatal(err)
	}
	// So does a datagram waiting on a queue, on each queue.
	var pkts [8]link.Packet
	for q := range 2 {
		p := uint16(20000)
		for int(FlowHash(lb.LocalAddr(), p)%2) != q {
			p++
		}
		pk := []link.Packet{{Remote: lb.LocalAddr(), LocalPort: p}}
		pk[0].SetData([]byte("q"))
		if n, err := la.Send(pk); n != 1 || err != nil {
			t.Fatalf("send: %d %v", n, err)
		}
		if err := lb.Watch(time.Hour); err != nil {
			t.Fatal(err)
		}
		n, err := lb.Receive(pkts[:])
		if n != 1 || err != nil || b.Links()[q].Stats().RxPackets == 0 {
			t.Fatalf("queue %d: Watch returned, Receive %d, %v", q, n, err)
		}
		lb.Release(pkts[:n])
	}
	// A datagram on either queue ends it, while the engine goroutine (here: this test's
	// receiving goroutine) polls the rings.
	stop := make(chan struct{})
	var got atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		var pkts [8]link.Packet
		for {
			select {
			case <-stop:
				return
			default:
			}
			k, _ := lb.Receive(pkts[:])
			if k > 0 {
				got.Add(int64(k))
				lb.Release(pkts[:k])
			}
		}
	}()
	for i := range 20 {
		pk := []link.Packet{{Remote: lb.LocalAddr(), LocalPort: uint16(30000 + i)}}
		pk[0].SetData([]byte("w"))
		if n, err := la.Send(pk); n != 1 || err != nil {
			t.Fatalf("send: %d %v", n, err)
		}
		if err := lb.Watch(10 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); got.Load() < 20 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	<-done
	if n := got.Load(); n != 20 {
		t.Fatalf("the receiver got %d of 20 datagrams", n)
	}
	if err := lb.Close(); err != nil {
		t.Fatal(err)
	}
	if err := lb.Watch(time.Millisecond); err != link.ErrClosed {
		t.Fatalf("Watch after Close: %v", err)
	}
}
