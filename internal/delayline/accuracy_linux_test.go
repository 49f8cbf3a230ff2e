package delayline_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/delayline"
	"github.com/xdpndk/xdpndk/internal/racebuild"
	"github.com/xdpndk/xdpndk/internal/testbed"
)

// The delay line is an instrument: its accuracy is its correctness. These bounds are what
// it must hold on a shared 2-CPU machine.
const (
	// rttSlack is how far above the configured round trip the median ping may be (the
	// hosts' and the forwarder's own latency, the release timer's lateness).
	rttSlack = time.Millisecond
	// rateTolerance is how far the received rate may be from the configured one.
	rateTolerance = 0.10
)

// quantile returns the nearest-rank q-quantile of sorted d.
func quantile(d []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(d))+0.5) - 1
	return d[min(max(i, 0), len(d)-1)]
}

// TestDelayLineRTT pings across delay lines of 1 ms and 5 ms one way (rate 1 Gbit/s): 100
// pings 10 ms apart; the median round trip must lie within [2 x delay, 2 x delay + 1 ms].
func TestDelayLineRTT(t *testing.T) {
	for _, d := range []time.Duration{time.Millisecond, 5 * time.Millisecond} {
		t.Run(d.String(), func(t *testing.T) {
			bed := testbed.NewT(t, testbed.Options{Routed: true, Name: "dlrtt", Path: &testbed.PathConfig{Delay: d, Rate: 1e9}})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// One ping first so that ARP is done before the measured ones.
			if _, err := bed.A.Ping(ctx, bed.B.Addr, 1, 10*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			rtts, err := bed.A.Ping(ctx, bed.B.Addr, 100, 10*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if len(rtts) < 95 {
				t.Fatalf("%d of 100 pings answered", len(rtts))
			}
			slices.Sort(rtts)
			want := 2 * d
			med, p99 := quantile(rtts, 0.5), quantile(rtts, 0.99)
			st, err := bed.PathStats()
			if err != nil {
				t.Fatal(err)
			}
			ab := st.Dir[delayline.AtoB]
			t.Logf("configured RTT %v: min %v median %v p99 %v max %v; release late p50 <= %v p99 <= %v max %v",
				want, rtts[0], med, p99, rtts[len(rtts)-1], ab.LateQuantile(0.5), ab.LateQuantile(0.99), time.Duration(ab.LateMax))
			if med < want || med > want+rttSlack {
				t.Errorf("median RTT %v outside [%v, %v]", med, want, want+rttSlack)
			}
			if rtts[0] < want {
				t.Errorf("minimum RTT %v below the configured %v", rtts[0], want)
			}
			// The tail of 100 pings is the machine's, not the line's: a vCPU stall of a few
			// ms (seen: p99 18.9 ms on a 10 ms line while other tests ran) delays a ping
			// wherever it is. The line's own precision is how late it releases frames,
			// which it measures itself: its median is what the line adds.
			if late := ab.LateQuantile(0.5); late > rttSlack {
				t.Errorf("the line released frames late by %v at the median (over %v)", late, rttSlack)
			}
			if ab.Forwarded < 100 || st.Dir[delayline.BtoA].Forwarded < 100 {
				t.Errorf("forwarded %d / %d frames, want at least 100 each way", ab.Forwarded, st.Dir[delayline.BtoA].Forwarded)
			}
		})
	}
}

// TestDelayLineRate blasts UDP from A to B through a 1 Gbit/s line (1 ms delay, a 4 MiB
// queue: 33 ms, which a sender descheduled for a while does not drain) at 1.3 times its
// rate and checks the rate of what B receives (Ethernet frames: payload + 42
// bytes of headers) within ±10% of the line's rate, and that the queue dropped the excess.
// Under the race detector the forwarder costs several times more per frame and stalls for
// tens of milliseconds (81 ms seen in CI, where the 4 MiB queue overflowed at 0.95 Gbit/s
// offered; at 200 Mbit/s, 90 ms stalls that filled the 168 ms queue with an offer at the
// rate): its rate there says nothing of the line's. The race pass runs one blast at 200
// Mbit/s, for the races the forwarder's goroutines might have under load, and checks what
// holds at any speed; the plain pass judges the rate.
func TestDelayLineRate(t *testing.T) {
	rate := 1e9
	if racebuild.Enabled {
		rate = 2e8
	}
	const queueBytes = 4 << 20
	bed := testbed.NewT(t, testbed.Options{Routed: true, Name: "dlrate", StaticNeighbors: true,
		Path: &testbed.PathConfig{Delay: time.Millisecond, Rate: uint64(rate), QueueBytes: queueBytes}})
	const payload, port = 1472, 9
	if racebuild.Enabled {
		got, err := blast(bed, port, payload, 1.3*rate, 1500*time.Millisecond, 400_000)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := bed.PathStats()
		ab := st.Dir[delayline.AtoB]
		t.Logf("race pass: sent %d datagrams (%.3f Gbit/s offered), received %d (%.3f Gbit/s); line: queued %d dropped %d overflow %d send errors %d; the rate is judged in the plain pass",
			got.sent, got.offered/1e9, got.frames, got.rate/1e9, ab.Queued, ab.Dropped, ab.Overflow, ab.SendErrors)
		if got.frames > got.sent || uint64(got.frames) > ab.Queued || ab.SendErrors != 0 {
			t.Errorf("received %d of %d sent, the line queued %d, send errors %d", got.frames, got.sent, ab.Queued, ab.SendErrors)
		}
		return
	}
	// The machine is shared: a forwarder descheduled for milliseconds reads a burst late
	// and its queue drops it (CI: 0.874 Gbit/s of 0.973 offered while the other packages'
	// tests ran, and the next two attempts offered half the rate). Up to five attempts,
	// about 2 s each; one within the tolerance passes, as a line that cannot keep its rate
	// would pass none.
	var worst error
	rateHeld := false // an attempt kept to the rate but did not overflow the queue
	for attempt := range 5 {
		st0, _ := bed.PathStats()
		got, err := blast(bed, port, payload, 1.3*rate, 1500*time.Millisecond, 400_000)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := bed.PathStats()
		ab := st.Dir[delayline.AtoB]
		dropped := ab.Dropped - st0.Dir[delayline.AtoB].Dropped
		t.Logf("attempt %d: sent %d datagrams (%.3f Gbit/s offered), received %d over %v: %.3f Gbit/s; line so far: queued %d dropped %d overflow %d send errors %d, late p50 <= %v p99 <= %v max %v, realtime %v, bad stamps %d, max backlog %d",
			attempt+1, got.sent, got.offered/1e9, got.frames, got.span, got.rate/1e9, ab.Queued, ab.Dropped, ab.Overflow, ab.SendErrors,
			ab.LateQuantile(0.5), ab.LateQuantile(0.99), time.Duration(ab.LateMax), ab.Realtime, ab.BadStamps, ab.MaxBacklog)
		if got.offered < 1.1*rate {
			// A busy machine could not offer clearly more than the rate: then the line must
			// carry what was offered up to its rate, no less (it may not limit below its
			// rate; an offer just above the rate it cuts to the rate), and this attempt says
			// nothing of the rate itself: try again.
			if d := got.rate/min(got.offered, rate) - 1; d < -rateTolerance {
				worst = fmt.Errorf("offered %.3f Gbit/s, not clearly above the rate, received %.3f", got.offered/1e9, got.rate/1e9)
			} else if worst == nil {
				worst = errBusy
			}
			continue
		}
		if d := got.rate/rate - 1; d < -rateTolerance || d > rateTolerance {
			worst = fmt.Errorf("received %.3f Gbit/s, want %.3f ± %.0f%%", got.rate/1e9, rate/1e9, 100*rateTolerance)
			continue
		}
		// When the last datagram was sent, the queue held at least what was sent beyond what
		// the line can have carried meanwhile (at its rate, plus the tolerance). An offer
		// whose excess the queue could hold need not have lost anything: the rate is checked,
		// the drops are judged by an attempt that overflowed the queue.
		if excess := got.sentBytes - rate/8*got.elapsed.Seconds()*(1+rateTolerance); excess <= queueBytes {
			rateHeld = true
			continue
		}
		if dropped == 0 {
			t.Errorf("the queue dropped nothing of an offer whose excess over the rate (%.0f bytes sent in %v) overflowed its %d bytes", got.sentBytes, got.elapsed, queueBytes)
		}
		return
	}
	if rateHeld {
		// An attempt kept to the rate, and none sent enough beyond it to overflow the queue
		// (a busy machine offered barely more than the rate): the drops were not judged.
		// Said, not skipped.
		t.Log("no attempt offered enough above the rate to overflow the queue: the rate was checked, the drops were not")
		return
	}
	if worst == errBusy {
		// Every attempt offered less than the rate, and the line carried it: it did not
		// limit below its rate, which is all that can be judged then. Said, not skipped.
		t.Log("the sender could not offer 1.1 times the rate in any attempt (a busy machine): only that the line carries less than its rate whole was checked")
		return
	}
	t.Error(worst)
}

// errBusy is a rate attempt whose sender could not offer more than the line's rate.
var errBusy = errors.New("the sender could not offer more than the line's rate")

// blastResult is what blast measured.
type blastResult struct {
	sent, frames int
	sentBytes    float64       // bytes of Ethernet frames the sender sent
	elapsed      time.Duration // from the first send to the last
	offered      float64       // bit/s of Ethernet frames the sender sent
	rate         float64       // bit/s of Ethernet frames received, first to last arrival
	span         time.Duration
}

// blast sends payload-byte UDP datagrams from A to B's port at offer bit/s (Ethernet
// frames) for d (at most max datagrams) and measures what B receives.
func blast(bed *testbed.Bed, port, payload int, offer float64, d time.Duration, max int) (blastResult, error) {
	var res blastResult
	const frame = 42 // Ethernet 14 + IPv4 20 + UDP 8
	var rc *net.UDPConn
	err := bed.B.Do(func() (err error) {
		rc, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(bed.B.Addr, uint16(port))))
		if err == nil {
			err = rc.SetReadBuffer(8 << 20)
		}
		return err
	})
	if err != nil {
		return res, err
	}
	defer rc.Close()
	var frames atomic.Int64
	var first, last atomic.Int64
	base := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			_ = rc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			n, err := rc.Read(buf)
			if err != nil {
				return
			}
			t := int64(time.Since(base))
			if frames.Add(1) == 1 {
				first.Store(t)
			}
			last.Store(t)
			_ = n
		}
	}()
	var sc *net.UDPConn
	err = bed.A.Do(func() (err error) {
		sc, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(bed.B.Addr, uint16(port))))
		return err
	})
	if err != nil {
		return res, err
	}
	defer sc.Close()
	msg := make([]byte, payload)
	start := time.Now()
	perMS := int(offer / 8 / float64(payload+frame) / 1000)
	round := 0
	for res.sent < max && time.Since(start) < d {
		// Paced in 1 ms rounds at the offered rate: a sender spinning flat out takes the
		// CPU the forwarder needs on a 2-CPU machine.
		due := start.Add(time.Duration(round) * time.Millisecond)
		if w := time.Until(due); w > 0 {
			time.Sleep(w)
		} else if w < -2*time.Millisecond {
			// Descheduled: go on from now rather than catch up with a burst.
			round = int(time.Since(start) / time.Millisecond)
		}
		round++
		for range perMS {
			if _, err := sc.Write(msg); err == nil {
				res.sent++
			}
		}
	}
	res.elapsed = time.Since(start)
	res.sentBytes = float64(res.sent * (payload + frame))
	res.offered = res.sentBytes * 8 / res.elapsed.Seconds()
	<-done
	res.frames = int(frames.Load())
	res.span = time.Duration(last.Load() - first.Load())
	if res.frames < 2 || res.span <= 0 {
		return res, fmt.Errorf("B received %d datagrams", res.frames)
	}
	res.rate = float64((res.frames-1)*(payload+frame)*8) / res.span.Seconds()
	return res, nil
}

// TestDelayLineNoAllocs forwards a flood of pings (1000, each waiting for its reply: about
// 2 s) and checks that the process allocated far fewer objects than the frames forwarded:
// the forwarder allocates nothing per frame (the few left are exec's and the test's).
func TestDelayLineNoAllocs(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{Routed: true, Name: "dlallocs", StaticNeighbors: true,
		Path: &testbed.PathConfig{Delay: 500 * time.Microsecond, Rate: 1e9}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := bed.A.Ping(ctx, bed.B.Addr, 3, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	cmd := bed.A.Command(ctx, "ping", "-n", "-q", "-f", "-c", "1000", "-W", "2", bed.B.Addr.String())
	s0, err := bed.PathStats()
	if err != nil {
		t.Fatal(err)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ping -f: %v: %s", err, out)
	}
	runtime.ReadMemStats(&m1)
	s1, _ := bed.PathStats()
	frames := s1.Dir[0].Forwarded + s1.Dir[1].Forwarded - s0.Dir[0].Forwarded - s0.Dir[1].Forwarded
	mallocs := m1.Mallocs - m0.Mallocs
	t.Logf("forwarded %d frames; the process allocated %d objects meanwhile", frames, mallocs)
	if frames < 1900 {
		t.Fatalf("forwarded %d frames, want about 2000", frames)
	}
	if mallocs > frames/10 {
		t.Errorf("%d allocations for %d frames forwarded", mallocs, frames)
	}
}
