package xdp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/transport/link"
)

// quietLogger keeps test output to what the tests print themselves.
var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// openOn opens a Device on h's veth end inside h's namespace, closed at cleanup.
func openOn(t testing.TB, h *testbed.Host, cfg Config) *Device {
	t.Helper()
	cfg.Interface = h.Ifname
	if cfg.Port == 0 {
		cfg.Port = testPort
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger
	}
	var d *Device
	if err := h.Do(func() (err error) { d, err = Open(cfg); return err }); err != nil {
		t.Fatalf("open xdp device on %s/%s: %v", h.NS, h.Ifname, err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("close device: %v", err)
		}
	})
	t.Logf("%s: %v", h.NS, d.Mode())
	return d
}

// fillPayload writes the test pattern of datagram seq into b: the sequence number, then
// bytes derived from it.
func fillPayload(b []byte, seq uint64) {
	binary.LittleEndian.PutUint64(b, seq)
	for i := 8; i < len(b); i++ {
		b[i] = byte(seq*31 + uint64(i)*7)
	}
}

// streamer sends count datagrams of cycling sizes to peer and checks those it receives from
// the peer, both on one goroutine as an engine would. It never has more than window
// datagrams in flight beyond what the peer reported received (so the test needs no
// transport above it to be lossless).
type streamer struct {
	t        *testing.T
	link     *Link
	peer     netip.AddrPort
	sizes    []int
	count    uint64
	received atomic.Uint64 // datagrams of the peer verified here
	peerRecv *atomic.Uint64
	window   uint64
	err      error
}

// verifier checks the datagrams a streamer receives: each sequence number below count
// once, with exactly the bytes fillPayload makes for it at its size from sizes.
type verifier struct {
	count        uint64
	sizes        []int
	seen         []bool
	gather, want []byte
}

func newVerifier(count uint64, sizes []int) *verifier {
	return &verifier{count: count, sizes: sizes, seen: make([]bool, count),
		gather: make([]byte, 65536), want: make([]byte, 65536)}
}

// check verifies one received datagram.
func (v *verifier) check(p *link.Packet) error {
	data := v.gather[:0]
	for j := range int(p.NSegs) {
		data = append(data, p.Segs[j]...)
	}
	if len(data) < 8 {
		return fmt.Errorf("datagram of %d bytes", len(data))
	}
	seq := binary.LittleEndian.Uint64(data)
	if seq >= v.count || v.seen[seq] {
		return fmt.Errorf("datagram seq %d unexpected or duplicated", seq)
	}
	w := v.want[:v.sizes[seq%uint64(len(v.sizes))]]
	fillPayload(w, seq)
	if !bytes.Equal(data, w) {
		return fmt.Errorf("datagram seq %d: %d bytes differ from the %d sent", seq, len(data), len(w))
	}
	v.seen[seq] = true
	return nil
}

func (s *streamer) run(deadline time.Time) {
	var (
		out  [32]link.Packet
		in   [64]link.Packet
		bufs = make([][]byte, len(out))
		sent uint64
		ver  = newVerifier(s.count, s.sizes)
	)
	maxSize := 0
	for _, n := range s.sizes {
		maxSize = max(maxSize, n)
	}
	for i := range bufs {
		bufs[i] = make([]byte, maxSize)
	}
	for (sent < s.count || s.received.Load() < s.count) && time.Now().Before(deadline) {
		// Transmit what the window allows, split into up to three segments.
		n := 0
		for sent+uint64(n) < s.count && n < len(out) && sent+uint64(n)-s.peerRecv.Load() < s.window {
			seq := sent + uint64(n)
			size := s.sizes[seq%uint64(len(s.sizes))]
			b := bufs[n][:size]
			fillPayload(b, seq)
			p := &out[n]
			*p = link.Packet{Remote: s.peer}
			switch {
			case size > 100 && seq%3 == 0:
				p.Segs[0], p.Segs[1], p.Segs[2] = b[:8], b[8:size/2], b[size/2:]
				p.NSegs = 3
			default:
				p.SetData(b)
			}
			n++
		}
		if n > 0 {
			k, err := s.link.Send(out[:n])
			if err != nil {
				s.err = fmt.Errorf("send: %w", err)
				return
			}
			sent += uint64(k)
		}
		// Receive and verify.
		k, err := s.link.Receive(in[:])
		if err != nil {
			s.err = fmt.Errorf("receive: %w", err)
			return
		}
		for i := range in[:k] {
			p := &in[i]
			if p.Remote != s.peer {
				s.err = fmt.Errorf("datagram from %v, want %v", p.Remote, s.peer)
				return
			}
			if s.err = ver.check(p); s.err != nil {
				return
			}
		}
		s.link.Release(in[:k])
		s.received.Add(uint64(k))
		if k == 0 && n == 0 {
			if err := s.link.Wait(time.Millisecond); err != nil {
				s.err = err
				return
			}
		}
	}
	if sent < s.count || s.received.Load() < s.count {
		s.err = fmt.Errorf("deadline: sent %d of %d, received %d of %d", sent, s.count, s.received.Load(), s.count)
	}
}

// stream is one side of a two-way exchange: it sends and verifies until deadline and then
// reports what went wrong, if anything.
type stream interface {
	run(deadline time.Time)
	failed() error
}

func (s *streamer) failed() error   { return s.err }
func (s *zcStreamer) failed() error { return s.err }

// runStreams runs A's and B's streams at once, for at most 30 s, and reports their errors.
func runStreams(t *testing.T, a, b stream) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var wg sync.WaitGroup
	for _, s := range []stream{a, b} {
		wg.Go(func() { s.run(deadline) })
	}
	wg.Wait()
	for name, s := range map[string]stream{"A": a, "B": b} {
		if err := s.failed(); err != nil {
			t.Errorf("host %s: %v", name, err)
		}
	}
}

// exchange runs two streamers, A to B and B to A at once, and checks both completed.
func exchange(t *testing.T, a, b *Device, sizes []int, count uint64) {
	t.Helper()
	la, lb := a.Links()[0], b.Links()[0]
	resolvePair(t, la, lb)
	window := uint64(256)
	sa := &streamer{t: t, link: la, peer: lb.LocalAddr(), sizes: sizes, count: count, window: window}
	sb := &streamer{t: t, link: lb, peer: la.LocalAddr(), sizes: sizes, count: count, window: window}
	sa.peerRecv, sb.peerRecv = &sb.received, &sa.received
	runStreams(t, sa, sb)
	for name, l := range map[string]*Link{"A": la, "B": lb} {
		st := l.Stats()
		t.Logf("host %s link stats: %+v", name, st)
		if st.RxPackets != count || st.TxPackets != count {
			t.Errorf("host %s: rx %d tx %d packets, want %d each", name, st.RxPackets, st.TxPackets, count)
		}
		if st.RxDropped != 0 || st.TxDropped != 0 {
			t.Errorf("host %s: dropped rx %d tx %d", name, st.RxDropped, st.TxDropped)
		}
		// The XDP program stamps every datagram it redirects with its arrival time.
		if st.RxStamped != count {
			t.Errorf("host %s: %d datagrams arrived stamped, want all %d", name, st.RxStamped, count)
		}
	}
	c, err := a.Program().Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c.Redirected != count {
		t.Errorf("host A program redirected %d packets, want %d (counters %+v)", c.Redirected, count, c)
	}
}

// TestExchange moves datagrams both ways between two hosts at MTU 1500 and at MTU 9000
// (multi-buffer: up to three 4 KiB frames a datagram), in bursts several times larger than
// the rings, and checks every byte.
func TestExchange(t *testing.T) {
	for _, tc := range []struct {
		mtu   int
		sizes []int
	}{
		{1500, []int{8, 9, 64, 333, 1000, 1472}},
		{9000, []int{8, 64, 1472, 3000, 3786, 4095, 4096, 5000, 8192, 8972}},
	} {
		t.Run(fmt.Sprintf("mtu%d", tc.mtu), func(t *testing.T) {
			bed := testbed.NewT(t, testbed.Options{MTU: tc.mtu})
			cfg := Config{RingSize: 512, Frames: 1024}
			a, b := openOn(t, bed.A, cfg), openOn(t, bed.B, cfg)
			if got, want := a.Links()[0].MaxPayload(), tc.mtu-28; got != want {
				t.Fatalf("MaxPayload = %d, want %d", got, want)
			}
			if tc.mtu > 4096 && !a.Mode().Socket.MultiBuffer {
				t.Fatalf("MTU %d without multi-buffer: %v", tc.mtu, a.Mode())
			}
			// Four times the ring size, so the rings wrap and refill many times.
			exchange(t, a, b, tc.sizes, 4*512+37)
		})
	}
}

// TestLinkSteadyStateNoAllocs sends, receives and releases datagrams between two hosts and
// checks that none of it allocates once the peer's header template exists, in both UDP
// checksum modes.
func TestLinkSteadyStateNoAllocs(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	for _, mode := range []UDPChecksum{ChecksumAuto, ChecksumSoftware} {
		t.Run(mode.String(), func(t *testing.T) {
			linkNoAllocs(t, bed, Config{RingSize: 256, Frames: 512, UDPChecksum: mode})
		})
	}
}

func linkNoAllocs(t *testing.T, bed *testbed.Bed, cfg Config) {
	la, lb := openOn(t, bed.A, cfg).Links()[0], openOn(t, bed.B, cfg).Links()[0]
	resolvePair(t, la, lb)
	var out, in [8]link.Packet
	payload := make([]byte, 1000)
	for i := range out {
		out[i] = link.Packet{Remote: lb.LocalAddr()}
		out[i].Segs[0], out[i].Segs[1] = payload[:10], payload[10:]
		out[i].NSegs = 2
	}
	var lost int
	round := func() {
		n, err := la.Send(out[:])
		if err != nil || n != len(out) {
			t.Fatalf("send: %d %v", n, err)
		}
		got := 0
		for tries := 0; got < n && tries < 1000; tries++ {
			k, _ := lb.Receive(in[:])
			lb.Release(in[:k])
			got += k
		}
		lost += n - got
	}
	round() // resolves the peer and builds its template
	if allocs := testing.AllocsPerRun(200, round); allocs != 0 {
		t.Fatalf("send+receive+release of %d datagrams allocates %v times", len(out), allocs)
	}
	if lost != 0 {
		t.Fatalf("%d datagrams did not arrive", lost)
	}
	if n := testing.AllocsPerRun(200, func() { _ = la.Wait(0) }); n != 0 {
		t.Fatalf("Wait allocates %v times", n)
	}
}

// TestLinkSendErrors checks that datagrams the link cannot send are refused with a clear
// error, that the ones before them go, and that nothing is half-sent.
func TestLinkSendErrors(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	cfg := Config{RingSize: 256, Frames: 512, ResolveTimeout: 500 * time.Millisecond}
	la := openOn(t, bed.A, cfg).Links()[0]
	lb := openOn(t, bed.B, cfg).Links()[0]
	resolvePair(t, la, lb)
	peer := lb.LocalAddr()
	ok := make([]byte, 100)
	big := make([]byte, la.MaxPayload()+1)
	pkts := make([]link.Packet, 3)
	for i := range pkts {
		pkts[i] = link.Packet{Remote: peer}
		pkts[i].SetData(ok)
	}
	pkts[1].SetData(big)
	n, err := la.Send(pkts)
	if n != 1 || !errors.Is(err, link.ErrTooLarge) {
		t.Fatalf("Send with an oversized second datagram: n=%d err=%v, want 1 and ErrTooLarge", n, err)
	}
	empty := []link.Packet{{Remote: peer}}
	if n, err := la.Send(empty); n != 0 || err == nil {
		t.Fatalf("Send of an empty datagram: n=%d err=%v", n, err)
	}
	tooMany := []link.Packet{{Remote: peer, NSegs: link.MaxSegments + 1}}
	if n, err := la.Send(tooMany); n != 0 || err == nil {
		t.Fatalf("Send with %d segments: n=%d err=%v", link.MaxSegments+1, n, err)
	}
	// A peer nobody answers ARP for (inside the bed's own subnet): the datagram is taken
	// and held at once, and dropped (counted) when the resolution fails.
	nobody := []link.Packet{{Remote: netip.AddrPortFrom(netip.MustParseAddr("198.18.0.99"), testPort)}}
	nobody[0].SetData(ok)
	if n, err := la.Send(nobody); n != 1 || err != nil {
		t.Fatalf("Send to an unresolvable peer: n=%d err=%v, want it taken (held)", n, err)
	}
	if st := la.Stats(); st.TxHeld != 1 {
		t.Fatalf("after Send to an unresolvable peer: %+v, want TxHeld 1", st)
	}
	end := time.Now().Add(5 * time.Second)
	for la.Stats().TxUnresolved == 0 && time.Now().Before(end) {
		_ = la.Wait(10 * time.Millisecond) // services the hold
	}
	if st := la.Stats(); st.TxUnresolved != 1 || st.TxDropped < 1 {
		t.Fatalf("held datagram to an unresolvable peer not dropped: %+v", st)
	}
	got, _ := receiveOne(t, lb)
	if !bytes.Equal(got, ok) {
		t.Fatalf("the datagram before the bad one arrived as %d bytes", len(got))
	}
}

// TestLinkZeroCopyCookies checks the FlagZeroCopy contract of a copying link: every cookie
// comes back from TxDone, once.
func TestLinkZeroCopyCookies(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	cfg := Config{RingSize: 256, Frames: 512}
	la := openOn(t, bed.A, cfg).Links()[0]
	lb := openOn(t, bed.B, cfg).Links()[0]
	resolvePair(t, la, lb)
	pkts := make([]link.Packet, 10)
	for i := range pkts {
		pkts[i] = link.Packet{Remote: lb.LocalAddr(), Flags: link.FlagZeroCopy, Cookie: uint64(100 + i)}
		pkts[i].SetData([]byte{byte(i)})
	}
	if n, err := la.Send(pkts); n != len(pkts) || err != nil {
		t.Fatalf("send: %d %v", n, err)
	}
	var done [16]uint64
	n := la.TxDone(done[:4])
	n += la.TxDone(done[n:])
	if n != len(pkts) {
		t.Fatalf("TxDone returned %d cookies, want %d", n, len(pkts))
	}
	for i := range n {
		if done[i] != uint64(100+i) {
			t.Fatalf("cookie %d = %d, want %d", i, done[i], 100+i)
		}
	}
	if la.TxDone(done[:]) != 0 {
		t.Fatal("cookies reported twice")
	}
}

// TestLinkWaitWake checks that Wait sleeps until its timeout with nothing to do, returns at
// once on Wake from another goroutine, and returns ErrClosed once the link is closed.
func TestLinkWaitWake(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	l := openOn(t, bed.A, Config{RingSize: 256, Frames: 512}).Links()[0]
	start := time.Now()
	if err := l.Wait(50 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 40*time.Millisecond {
		t.Fatalf("idle Wait(50ms) returned after %v", d)
	}
	done := make(chan error, 1)
	go func() { done <- l.Wait(10 * time.Second) }()
	time.Sleep(20 * time.Millisecond)
	l.Wake()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wake did not end Wait")
	}
	go func() { done <- l.Wait(10 * time.Second) }()
	time.Sleep(20 * time.Millisecond)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, link.ErrClosed) {
			t.Fatalf("Wait during Close returned %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end Wait")
	}
}

// TestMultiQueueSharedUMEM opens two queues on each host: one UMEM shared by two sockets
// (XDP_SHARED_UMEM with their own fill and completion rings). On veth a datagram sent on
// queue q arrives on the peer's queue q, so each queue pair carries its own stream.
func TestMultiQueueSharedUMEM(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{Queues: 2})
	cfg := Config{RingSize: 256, Frames: 512, BusyPoll: 20 * time.Microsecond}
	a, b := openOn(t, bed.A, cfg), openOn(t, bed.B, cfg)
	if len(a.Links()) != 2 || len(b.Links()) != 2 {
		t.Fatalf("links: %d and %d, want 2 each", len(a.Links()), len(b.Links()))
	}
	if !a.Mode().Socket.BusyPoll {
		t.Errorf("busy-poll options not reported as set: %v", a.Mode())
	}
	if got := a.UMEM().Frames(); got != 2*512 {
		t.Fatalf("shared umem has %d frames, want %d", got, 2*512)
	}
	for q := range 2 {
		la, lb := a.Links()[q], b.Links()[q]
		resolvePair(t, la, lb)
		if la.Queue() != q {
			t.Fatalf("link %d is on queue %d", q, la.Queue())
		}
		msg := []byte(fmt.Sprintf("queue %d", q))
		p := []link.Packet{{Remote: lb.LocalAddr()}}
		p[0].SetData(msg)
		if n, err := la.Send(p); n != 1 || err != nil {
			t.Fatalf("queue %d send: %d %v", q, n, err)
		}
		got, _ := receiveOne(t, lb)
		if !bytes.Equal(got, msg) {
			t.Fatalf("queue %d received %q, want %q", q, got, msg)
		}
	}
}

// TestModeReportsFallbacks checks that a fallback is never silent: on veth the zero-copy bind
// is refused, and the refusal is kept on the socket next to the copy mode in effect.
func TestModeReportsFallbacks(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	d := openOn(t, bed.A, Config{RingSize: 256, Frames: 512})
	m := d.Mode()
	if m.Attach.String() != "native" && m.Attach.String() != "generic" {
		t.Fatalf("attach mode %v", m.Attach)
	}
	s := d.Links()[0].Socket()
	// veth has no zero-copy AF_XDP: the bind must have fallen back, visibly.
	if m.Socket.ZeroCopy {
		t.Fatalf("zero-copy on veth: %v", m)
	}
	if len(s.Fallbacks()) == 0 {
		t.Fatalf("copy mode %v without a recorded zero-copy refusal", m)
	}
	t.Logf("mode %v after: %v", m, s.Fallbacks())
	if !m.Socket.NeedWakeup {
		t.Fatalf("need_wakeup not in effect: %v", m)
	}
	if _, err := s.Statistics(); err != nil {
		t.Fatalf("statistics: %v", err)
	}
}

// TestBusyPollOnEmptyRing: with busy polling on, a Receive that finds the RX ring empty
// makes the system call that runs the device's NAPI (preferred busy polling leaves the
// interrupts off while the application polls), counted in Kicks, and allocates nothing;
// without it, an empty Receive makes no system call. Datagrams still arrive either way.
func TestBusyPollOnEmptyRing(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	a := openOn(t, bed.A, Config{RingSize: 256, Frames: 512})
	b := openOn(t, bed.B, Config{RingSize: 256, Frames: 512, BusyPoll: 20 * time.Microsecond})
	la, lb := a.Links()[0], b.Links()[0]
	resolvePair(t, la, lb)
	if !lb.Socket().Mode().BusyPoll || la.Socket().Mode().BusyPoll {
		t.Fatalf("busy poll modes: a %v, b %v", la.Socket().Mode(), lb.Socket().Mode())
	}
	const calls = 100
	var pkts [4]link.Packet
	empty := func(l *Link) (kicks uint64) {
		k0 := l.Stats().Kicks
		for range calls {
			if n, err := l.Receive(pkts[:]); n != 0 || err != nil {
				t.Fatalf("receive on an idle link: %d %v", n, err)
			}
		}
		return l.Stats().Kicks - k0
	}
	if k := empty(lb); k < calls {
		t.Errorf("busy polling: %d system calls in %d empty receives, want one each", k, calls)
	}
	if k := empty(la); k != 0 {
		t.Errorf("no busy polling: %d system calls in %d empty receives, want none", k, calls)
	}
	if allocs := testing.AllocsPerRun(calls, func() { _, _ = lb.Receive(pkts[:]) }); allocs != 0 {
		t.Errorf("an empty busy-polling receive allocates %.1f times", allocs)
	}
	for i, pair := range [][2]*Link{{la, lb}, {lb, la}} {
		msg := []byte(fmt.Sprintf("busy poll %d", i))
		p := []link.Packet{{Remote: pair[1].LocalAddr()}}
		p[0].SetData(msg)
		if n, err := pair[0].Send(p); n != 1 || err != nil {
			t.Fatalf("send %d: %d %v", i, n, err)
		}
		if got, _ := receiveOne(t, pair[1]); !bytes.Equal(got, msg) {
			t.Fatalf("received %q, want %q", got, msg)
		}
	}
}

// TestLinkCloseWhilePolling closes a link while its poller spins through Receive, Release
// and TxDone (the empty round takes no guard: the RX ring's mapping stays readable across
// Close) and a peer keeps sending to it, so that Close meets both empty and busy rounds.
// The poller must end with ErrClosed, every later call must refuse, and a new link must
// bind the queue again (the old socket is gone).
func TestLinkCloseWhilePolling(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	cfg := Config{RingSize: 256, Frames: 512}
	lb := openOn(t, bed.B, cfg).Links()[0]
	for round := range 10 {
		d := openOn(t, bed.A, cfg)
		la := d.Links()[0]
		resolvePair(t, lb, la)
		stop := make(chan struct{})
		sent := make(chan struct{})
		go func() { // the peer
			defer close(sent)
			var out [4]link.Packet
			for i := range out {
				out[i] = link.Packet{Remote: la.LocalAddr()}
				out[i].SetData(make([]byte, 64))
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = lb.Send(out[:])
				var c [8]uint64
				lb.TxDone(c[:])
				time.Sleep(20 * time.Microsecond)
			}
		}()
		polled := make(chan error, 1)
		var rounds atomic.Int64
		go func() { // the poller
			var in [16]link.Packet
			var c [8]uint64
			for {
				n, err := la.Receive(in[:])
				if err != nil {
					polled <- err
					return
				}
				la.Release(in[:n])
				la.TxDone(c[:])
				rounds.Add(1)
			}
		}()
		for rounds.Load() < int64(100*(round%4+1)) {
			runtime.Gosched()
		}
		if err := la.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-polled:
			if !errors.Is(err, link.ErrClosed) {
				t.Fatalf("round %d: poller ended with %v, want ErrClosed", round, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: the poller did not see Close", round)
		}
		var in [4]link.Packet
		if n, err := la.Receive(in[:]); n != 0 || !errors.Is(err, link.ErrClosed) {
			t.Fatalf("Receive after Close: %d, %v", n, err)
		}
		var c [4]uint64
		if n := la.TxDone(c[:]); n != 0 {
			t.Fatalf("TxDone after Close: %d", n)
		}
		close(stop)
		<-sent
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
