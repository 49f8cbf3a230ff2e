package xdp

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/transport/link"
)

// BenchmarkKick measures what a TX kick costs in copy mode on veth, against framing the
// batch it sends: batches of 32 datagrams (IP length 64, 1500 and 9000) are framed and
// staged on the TX ring (Link.transmit, flushTx), then kicked (kickTx: sendto until the
// ring is drained, which on veth also runs the peer's XDP program and its copy into the
// peer's UMEM before it returns), each phase timed on its own. The peer receives on a
// goroutine of its own, as its engine would. Reported per datagram: build-ns and kick-ns.
func BenchmarkKick(b *testing.B) {
	bed := testbed.NewT(b, testbed.Options{MTU: 9000})
	cfg := Config{RingSize: 2048, Frames: 4096}
	a, d := openOnTB(b, bed.A, cfg), openOnTB(b, bed.B, cfg)
	la, lb := a.Links()[0], d.Links()[0]
	resolvePair(b, la, lb)
	stop := make(chan struct{})
	var received atomic.Uint64
	var wg sync.WaitGroup
	wg.Go(func() { drainPeer(lb, stop, &received) })
	defer func() { close(stop); wg.Wait() }()
	const batch = 32
	for _, size := range []int{64, 1500, 9000} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			plen := size - 28
			data := make([]byte, plen)
			var p link.Packet
			p.Remote = lb.LocalAddr()
			p.SetData(data)
			s := la.hops.Lookup(p.Remote.Addr())
			if s == nil || !s.Resolved() {
				b.Fatal("peer not resolved")
			}
			var build, kick time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			deadline := time.Now().Add(time.Minute)
			for sent := 0; sent < b.N; {
				t0 := time.Now()
				k := 0
				for ; k < batch && sent+k < b.N; k++ {
					ok, err := la.transmit(&p, s.Encap(), plen)
					if err != nil {
						b.Fatal(err)
					}
					if !ok {
						break
					}
				}
				la.flushTx()
				t1 := time.Now()
				la.kickTx()
				t2 := time.Now()
				build += t1.Sub(t0)
				kick += t2.Sub(t1)
				sent += k
				if k == 0 {
					la.reclaim()
					if time.Now().After(deadline) {
						b.Fatalf("stalled after %d of %d datagrams", sent, b.N)
					}
				}
			}
			b.StopTimer()
			la.reclaim()
			b.ReportMetric(float64(build.Nanoseconds())/float64(b.N), "build-ns")
			b.ReportMetric(float64(kick.Nanoseconds())/float64(b.N), "kick-ns")
		})
	}
}

// drainPeer receives and releases on l until stop is closed, counting the datagrams,
// spinning on an OS thread of its own as an engine with inline progress polls.
func drainPeer(l *Link, stop <-chan struct{}, received *atomic.Uint64) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var in [64]link.Packet
	for {
		select {
		case <-stop:
			return
		default:
		}
		k, err := l.Receive(in[:])
		if err != nil {
			return
		}
		l.Release(in[:k])
		received.Add(uint64(k))
	}
}
