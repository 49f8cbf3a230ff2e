package xdp

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport/link"
)

// heapOf returns the UMEM heap of d (its Config.HeapSize must be non-zero).
func heapOf(t testing.TB, d *Device) *memreg.Heap {
	t.Helper()
	h, err := d.UMEM().NewHeap()
	if err != nil {
		t.Fatalf("umem heap: %v", err)
	}
	return h
}

// zcTrailer is the length of the trailer segment of test datagrams (the transport's CRC
// trailer is 4 bytes too).
const zcTrailer = 4

// zcPacket makes p a FlagZeroCopy datagram of the test pattern of seq, laid out as the
// engine lays out its packets: an 8-byte header segment in hdr, the payload in pay (UMEM
// heap memory, say) and a trailer segment in trl. pay must be len(datagram)-8-zcTrailer
// bytes long.
func zcPacket(p *link.Packet, to netip.AddrPort, seq, cookie uint64, scratch, hdr, pay, trl []byte) {
	size := 8 + len(pay) + zcTrailer
	b := scratch[:size]
	fillPayload(b, seq)
	copy(hdr[:8], b)
	copy(pay, b[8:size-zcTrailer])
	copy(trl[:zcTrailer], b[size-zcTrailer:])
	*p = link.Packet{Remote: to, Flags: link.FlagZeroCopy, Cookie: cookie}
	p.Segs[0], p.Segs[1], p.Segs[2] = hdr[:8], pay, trl[:zcTrailer]
	p.NSegs = 3
}

// zcStreamer sends count zero-copy datagrams whose payload lies in slots of a UMEM heap
// buffer and checks the datagrams it receives from its peer, on one goroutine as an engine
// would. A slot is written again only after TxDone has reported the cookie of the datagram
// that used it, and TxDone must report every cookie once, in send order.
type zcStreamer struct {
	link     *Link
	peer     netip.AddrPort
	sizes    []int // datagram sizes, cycled
	count    uint64
	slots    [][]byte // heap memory, one per datagram in flight
	received atomic.Uint64
	peerRecv *atomic.Uint64
	done     uint64 // cookies reported so far (cookie of seq is seq+cookieBase)
	err      error
}

const cookieBase = 1 << 40

func (s *zcStreamer) run(deadline time.Time) {
	var (
		out     [16]link.Packet
		in      [64]link.Packet
		cookies [64]uint64
		hdrs    = make([][8]byte, len(s.slots))
		trls    = make([][zcTrailer]byte, len(s.slots))
		scratch = make([]byte, 65536)
		ver     = newVerifier(s.count, s.sizes)
		sent    uint64
		window  = uint64(len(s.slots))
	)
	for (sent < s.count || s.received.Load() < s.count || s.done < s.count) && time.Now().Before(deadline) {
		// A slot is free again once its last datagram's cookie came back; the peer must
		// keep up too (nothing above this test retransmits).
		n := 0
		for sent+uint64(n) < s.count && n < len(out) && sent+uint64(n) < s.done+window && sent+uint64(n)-s.peerRecv.Load() < window {
			seq := sent + uint64(n)
			k := seq % window
			size := s.sizes[seq%uint64(len(s.sizes))]
			zcPacket(&out[n], s.peer, seq, seq+cookieBase, scratch, hdrs[k][:], s.slots[k][:size-8-zcTrailer], trls[k][:])
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
		nd := s.link.TxDone(cookies[:])
		for _, c := range cookies[:nd] {
			if c != s.done+cookieBase || s.done >= sent {
				s.err = fmt.Errorf("TxDone reported cookie %#x, want %#x (sent %d)", c, s.done+cookieBase, sent)
				return
			}
			s.done++
		}
		k, err := s.link.Receive(in[:])
		if err != nil {
			s.err = fmt.Errorf("receive: %w", err)
			return
		}
		for i := range in[:k] {
			p := &in[i]
			if s.err = ver.check(p); s.err != nil {
				return
			}
		}
		s.link.Release(in[:k])
		s.received.Add(uint64(k))
		if k == 0 && n == 0 && nd == 0 {
			if err := s.link.Wait(time.Millisecond); err != nil {
				s.err = err
				return
			}
		}
	}
	if sent < s.count || s.received.Load() < s.count || s.done < s.count {
		s.err = fmt.Errorf("deadline: sent %d of %d, received %d, cookies %d", sent, s.count, s.received.Load(), s.done)
		return
	}
	if n := s.link.TxDone(cookies[:]); n != 0 {
		s.err = fmt.Errorf("TxDone reported %d cookies more than were sent", n)
	}
}

// heapSlots carves n slots of size bytes out of a buffer from h, each starting at a
// different odd offset so that descriptors start anywhere and checksums see odd
// alignments.
func heapSlots(t testing.TB, h *memreg.Heap, n, size int) [][]byte {
	t.Helper()
	stride := size + 64
	buf, err := h.Alloc(n*stride, 0)
	if err != nil {
		t.Fatal(err)
	}
	slots := make([][]byte, n)
	for i := range slots {
		off := i*stride + (i%7)*9
		slots[i] = buf[off : off+size : off+size]
	}
	return slots
}

// TestZeroCopyExchange moves zero-copy datagrams whose payload lies in the UMEM heap both
// ways between two hosts, at MTU 1500 and at MTU 9000 (where one payload needs up to three
// descriptors), and checks every byte, every cookie (once, in send order, only after the
// kernel completed the datagram's descriptors) and that payloads went by reference.
func TestZeroCopyExchange(t *testing.T) {
	for _, tc := range []struct {
		mtu   int
		sizes []int
	}{
		// 300 is below the reference threshold: copied, but its cookie still comes back.
		{1500, []int{1472, 1100, 300, 8 + zcMinSegment + zcTrailer, 1471}},
		{9000, []int{8972, 8192 + 12, 5000, 4097, 1472, 300, 8971}},
	} {
		t.Run(fmt.Sprintf("mtu%d", tc.mtu), func(t *testing.T) {
			bed := testbed.NewT(t, testbed.Options{MTU: tc.mtu})
			const window = 128
			cfg := Config{RingSize: 512, Frames: 1024, HeapSize: window * (tc.mtu + 128)}
			a, b := openOn(t, bed.A, cfg), openOn(t, bed.B, cfg)
			la, lb := a.Links()[0], b.Links()[0]
			resolvePair(t, la, lb)
			if !la.Socket().Mode().MultiBuffer {
				t.Fatalf("socket without multi-buffer: %v", a.Mode())
			}
			count := uint64(4*512 + 37)
			sa := &zcStreamer{link: la, peer: lb.LocalAddr(), sizes: tc.sizes, count: count, slots: heapSlots(t, heapOf(t, a), window, tc.mtu)}
			sb := &zcStreamer{link: lb, peer: la.LocalAddr(), sizes: tc.sizes, count: count, slots: heapSlots(t, heapOf(t, b), window, tc.mtu)}
			sa.peerRecv, sb.peerRecv = &sb.received, &sa.received
			runStreams(t, sa, sb)
			for name, s := range map[string]*zcStreamer{"A": sa, "B": sb} {
				st := s.link.Stats()
				t.Logf("host %s link stats: %+v", name, st)
				if st.TxPackets != count || st.RxPackets != count {
					t.Errorf("host %s: tx %d rx %d packets, want %d each", name, st.TxPackets, st.RxPackets, count)
				}
				if st.RxDropped != 0 || st.TxDropped != 0 || st.TxErrors != 0 {
					t.Errorf("host %s: dropped rx %d tx %d, tx errors %d", name, st.RxDropped, st.TxDropped, st.TxErrors)
				}
				if st.TxZeroCopy == 0 {
					t.Errorf("host %s: no segment went by reference", name)
				}
				if s.link.zcPending() || s.link.zc.queue.n != 0 {
					t.Errorf("host %s: zero-copy records left: %d", name, s.link.zc.queue.n)
				}
			}
			// Every frame is back: in the pool or on the fill ring, none lost to a payload
			// descriptor's completion.
			for name, l := range map[string]*Link{"A": la, "B": lb} {
				end := time.Now().Add(time.Second)
				for (l.pool.Len()+fillHeld(l) != l.pool.Cap() || l.rx.owed != 0) && time.Now().Before(end) {
					l.reclaim() // a copied datagram sent last may complete after the last cookie
					if l.rx.owed != 0 {
						l.rx.repay() // a frame released while the fill ring looked full
					}
					time.Sleep(time.Millisecond)
				}
				if got, want := l.pool.Len()+fillHeld(l), l.pool.Cap(); got != want {
					t.Errorf("host %s: %d frames accounted for, want %d", name, got, want)
				}
				if l.rx.owed != 0 {
					t.Errorf("host %s: the fill ring is %d frames short", name, l.rx.owed)
				}
				if n := l.pool.Refused(); n != 0 {
					t.Errorf("host %s: the pool refused %d frames handed back twice or foreign", name, n)
				}
			}
		})
	}
}

// fillHeld is how many frames the kernel holds for receiving: the fill ring's entries not
// yet consumed plus those consumed but not yet received. With every received datagram
// released, that is the receive side's share of the frames.
func fillHeld(l *Link) int { return l.rx.share() }

// TestZeroCopyToKernelSocket sends zero-copy datagrams with payloads in the UMEM heap to a
// kernel UDP socket on the peer, where no XDP program runs: the kernel accepting them, byte
// for byte, and tshark's checksum verdicts prove the IPv4 and UDP checksums computed over
// referenced payload (ChecksumSoftware; the default sends none over IPv4, "not present" to
// tshark).
func TestZeroCopyToKernelSocket(t *testing.T) {
	for _, tc := range []struct {
		mtu   int
		sizes []int
	}{
		{1500, []int{1472, 1333, 8 + zcMinSegment + zcTrailer, 1471}},
		{9000, []int{8972, 8971, 4097, 5555}},
	} {
		t.Run(fmt.Sprintf("mtu%d", tc.mtu), func(t *testing.T) {
			bed := testbed.NewT(t, testbed.Options{MTU: tc.mtu})
			for _, m := range []struct {
				mode   UDPChecksum
				status string // tshark's udp.checksum.status: 1 good, 3 not present
			}{
				{ChecksumSoftware, "1"},
				{ChecksumAuto, "3"},
			} {
				t.Run(m.mode.String(), func(t *testing.T) {
					zeroCopyToKernel(t, bed, tc.mtu, tc.sizes, m.mode, m.status)
				})
			}
		})
	}
}

// zeroCopyToKernel is one case of TestZeroCopyToKernelSocket.
func zeroCopyToKernel(t *testing.T, bed *testbed.Bed, mtu int, sizes []int, mode UDPChecksum, status string) {
	a := openOn(t, bed.A, Config{RingSize: 256, Frames: 512, HeapSize: 1 << 20, UDPChecksum: mode})
	l := a.Links()[0]
	mustResolve(t, l, bed.B.Addr)
	srv := listenUDP(t, bed.B, testPort)
	slots := heapSlots(t, heapOf(t, a), len(sizes), mtu)
	tshark, lines := startTshark(t, bed.B, len(sizes))
	dst := netip.AddrPortFrom(bed.B.Addr, testPort)
	scratch := make([]byte, 65536)
	var hdr [8]byte
	var trl [zcTrailer]byte
	var done [4]uint64
	for i, size := range sizes {
		var p [1]link.Packet
		zcPacket(&p[0], dst, uint64(i), uint64(i), scratch, hdr[:], slots[i][:size-8-zcTrailer], trl[:])
		want := scratch[:size]
		before := l.Stats().TxZeroCopy
		if n, err := l.Send(p[:]); n != 1 || err != nil {
			t.Fatalf("send %d bytes: n=%d err=%v", size, n, err)
		}
		if l.Stats().TxZeroCopy == before {
			t.Fatalf("%d-byte datagram: payload not sent by reference", size)
		}
		got, _ := readUDP(t, srv)
		if !bytes.Equal(got, want) {
			t.Fatalf("kernel got %d bytes, want the %d sent", len(got), size)
		}
		if n := waitTxDone(t, l, done[:]); n != 1 || done[0] != uint64(i) {
			t.Fatalf("TxDone: %v, want cookie %d", done[:n], i)
		}
	}
	if err := tshark.Wait(); err != nil {
		t.Fatalf("tshark: %v\n%s", err, tshark.Stderr)
	}
	got := strings.Split(strings.TrimSpace(lines.String()), "\n")
	if len(got) != len(sizes) {
		t.Fatalf("tshark saw %d datagrams, want %d:\n%s", len(got), len(sizes), lines)
	}
	for i, line := range got {
		f := strings.Split(line, "\t")
		if len(f) != 3 || f[0] != "1" || f[1] != status || f[2] != fmt.Sprint(sizes[i]+8) {
			t.Errorf("tshark line %d %q: want ip checksum status 1 (good), udp checksum status %s and udp length %d", i, line, status, sizes[i]+8)
		}
	}
}

// waitTxDone polls TxDone until it reports something or 5 s pass.
func waitTxDone(t *testing.T, l *Link, dst []uint64) int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if n := l.TxDone(dst); n > 0 {
			return n
		}
		if err := l.Wait(time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("TxDone reported nothing within 5 s")
	return 0
}

// TestZeroCopyFallbacks checks the datagrams a zero-copy link copies instead of
// referencing: payload outside the UMEM, payload shorter than the threshold, a socket
// without XDP_USE_SG, a datagram that would need too many descriptors. Each arrives
// intact, nothing goes by reference, and its cookie is reported by the very next TxDone.
func TestZeroCopyFallbacks(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{MTU: 9000})
	cfg := Config{RingSize: 256, Frames: 512, HeapSize: 1 << 20}
	a, b := openOn(t, bed.A, cfg), openOn(t, bed.B, cfg)
	la, lb := a.Links()[0], b.Links()[0]
	resolvePair(t, la, lb)
	heap := heapSlots(t, heapOf(t, a), 1, 9000)[0]
	goMem := make([]byte, 9000)
	scratch := make([]byte, 65536)
	var hdr [8]byte
	var trl [zcTrailer]byte
	for i, tc := range []struct {
		name  string
		pay   []byte
		setup func() (undo func())
	}{
		{name: "outside umem", pay: goMem[:1400]},
		{name: "below threshold", pay: heap[:zcMinSegment-1]},
		{name: "no multi-buffer", pay: heap[:1400], setup: func() func() {
			la.zc.enabled = false // as for a socket bound without XDP_USE_SG
			return func() { la.zc.enabled = true }
		}},
		{name: "too many descriptors", pay: heap[:8192], setup: func() func() {
			old := la.zc.maxDescs
			la.zc.maxDescs = 3 // header, 8 KiB in two descriptors and the trailer is 4
			return func() { la.zc.maxDescs = old }
		}},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			if tc.setup != nil {
				defer tc.setup()()
			}
			var p [1]link.Packet
			zcPacket(&p[0], lb.LocalAddr(), uint64(i), uint64(500+i), scratch, hdr[:], tc.pay, trl[:])
			want := append([]byte(nil), scratch[:8+len(tc.pay)+zcTrailer]...)
			before := la.Stats().TxZeroCopy
			if n, err := la.Send(p[:]); n != 1 || err != nil {
				t.Fatalf("send: n=%d err=%v", n, err)
			}
			// Copied: the bytes may change at once, and the cookie is due now.
			for j := range tc.pay {
				tc.pay[j] = 0xee
			}
			var done [4]uint64
			if n := la.TxDone(done[:]); n != 1 || done[0] != uint64(500+i) {
				t.Fatalf("first TxDone after Send: %v, want [%d]", done[:n], 500+i)
			}
			if got := la.Stats().TxZeroCopy; got != before {
				t.Fatalf("TxZeroCopy moved from %d to %d for a copied datagram", before, got)
			}
			got, _ := receiveOne(t, lb)
			if !bytes.Equal(got, want) {
				t.Fatalf("peer got %d bytes, differing from the %d sent", len(got), len(want))
			}
		})
	}
}

// TestZeroCopyCookieWaitsForKernel checks that TxDone reports a referenced datagram's
// cookie only once the kernel has transmitted it: with the interface down the kernel
// takes nothing from the TX ring, so no cookie may come back (not even that of a copied
// datagram sent after it, which would break send order); once the interface is up again
// both arrive, in order, and the peer gets both datagrams.
func TestZeroCopyCookieWaitsForKernel(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	cfg := Config{RingSize: 256, Frames: 512, HeapSize: 1 << 20}
	a, b := openOn(t, bed.A, cfg), openOn(t, bed.B, cfg)
	la, lb := a.Links()[0], b.Links()[0]
	resolvePair(t, la, lb)
	heap := heapSlots(t, heapOf(t, a), 1, 1500)[0]
	scratch := make([]byte, 65536)
	var hdr, hdr2 [8]byte
	var trl, trl2 [zcTrailer]byte
	var done [8]uint64

	// Resolve the peer while the link is up.
	var p [2]link.Packet
	zcPacket(&p[0], lb.LocalAddr(), 0, 10, scratch, hdr[:], heap[:1400], trl[:])
	if n, err := la.Send(p[:1]); n != 1 || err != nil {
		t.Fatalf("send: %d %v", n, err)
	}
	if n := waitTxDone(t, la, done[:]); n != 1 || done[0] != 10 {
		t.Fatalf("TxDone %v, want [10]", done[:n])
	}
	receiveOne(t, lb)

	setLink := func(state string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if out, err := bed.A.Command(ctx, "ip", "link", "set", "dev", bed.A.Ifname, state).CombinedOutput(); err != nil {
			t.Fatalf("ip link set %s: %v\n%s", state, err, out)
		}
	}
	setLink("down")
	up := false
	defer func() {
		if !up {
			setLink("up")
		}
	}()
	zcPacket(&p[0], lb.LocalAddr(), 1, 11, scratch, hdr[:], heap[:1400], trl[:])
	goMem := make([]byte, 100)
	zcPacket(&p[1], lb.LocalAddr(), 2, 12, scratch[2000:], hdr2[:], goMem, trl2[:])
	if n, err := la.Send(p[:]); n != 2 || err != nil {
		t.Fatalf("send with the link down: %d %v", n, err)
	}
	for range 20 {
		if n := la.TxDone(done[:]); n != 0 {
			t.Fatalf("TxDone reported %v while the interface is down", done[:n])
		}
		time.Sleep(2 * time.Millisecond)
	}
	if st := la.Stats(); st.TxErrors == 0 {
		t.Errorf("no transmit error counted with the interface down: %+v", st)
	}
	setLink("up")
	up = true
	got := 0
	deadline := time.Now().Add(10 * time.Second)
	for got < 2 && time.Now().Before(deadline) {
		n := la.TxDone(done[got:])
		got += n
		if n == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if got != 2 || done[0] != 11 || done[1] != 12 {
		t.Fatalf("after the interface came up TxDone reported %v, want [11 12]", done[:got])
	}
	for _, seq := range []uint64{1, 2} {
		data, _ := receiveOne(t, lb)
		if len(data) < 8 || binary.LittleEndian.Uint64(data) != seq {
			t.Fatalf("peer got %d bytes, want datagram %d", len(data), seq)
		}
	}
}

// TestZeroCopySteadyStateNoAllocs checks that a steady stream of zero-copy datagrams (Send,
// the peer's Receive and Release, TxDone) allocates nothing.
func TestZeroCopySteadyStateNoAllocs(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	cfg := Config{RingSize: 256, Frames: 512, HeapSize: 1 << 20}
	a, b := openOn(t, bed.A, cfg), openOn(t, bed.B, cfg)
	la, lb := a.Links()[0], b.Links()[0]
	resolvePair(t, la, lb)
	slots := heapSlots(t, heapOf(t, a), 8, 1400)
	var out, in [8]link.Packet
	var hdr [8]byte
	var trl [zcTrailer]byte
	for i := range out {
		out[i] = link.Packet{Remote: lb.LocalAddr(), Flags: link.FlagZeroCopy}
		out[i].Segs[0], out[i].Segs[1], out[i].Segs[2] = hdr[:], slots[i], trl[:]
		out[i].NSegs = 3
	}
	var done [16]uint64
	var cookie uint64
	var lost, late int
	round := func() {
		for i := range out {
			cookie++
			out[i].Cookie = cookie
		}
		n, err := la.Send(out[:])
		if err != nil || n != len(out) {
			t.Fatalf("send: %d %v", n, err)
		}
		got, reported := 0, 0
		for tries := 0; (got < n || reported < n) && tries < 100000; tries++ {
			k, _ := lb.Receive(in[:])
			lb.Release(in[:k])
			got += k
			reported += la.TxDone(done[:])
		}
		lost += n - got
		late += n - reported
	}
	round() // resolves the peer and builds its template
	if allocs := testing.AllocsPerRun(200, round); allocs != 0 {
		t.Fatalf("zero-copy send+TxDone+receive+release of %d datagrams allocates %v times", len(out), allocs)
	}
	if lost != 0 || late != 0 {
		t.Fatalf("%d datagrams did not arrive, %d cookies did not come back", lost, late)
	}
	if la.Stats().TxZeroCopy == 0 {
		t.Fatal("nothing went by reference")
	}
}

// benchSend measures Send of datagrams whose payload (payload bytes, in the UMEM heap)
// follows an 8-byte header and precedes a 4-byte trailer, between the two hosts, with the
// peer receiving on another goroutine. With zeroCopy the datagrams carry FlagZeroCopy and
// segments of at least minSeg bytes go by reference; TxDone is collected as an engine
// would.
func benchSend(b *testing.B, la, lb *Link, heap []byte, payload, minSeg int, zeroCopy bool) {
	la.zc.minSeg = minSeg
	defer func() { la.zc.minSeg = zcMinSegment }()
	stop := make(chan struct{})
	var received atomic.Uint64
	var wg sync.WaitGroup
	wg.Go(func() {
		var in [64]link.Packet
		for {
			select {
			case <-stop:
				return
			default:
			}
			k, err := lb.Receive(in[:])
			if err != nil {
				return
			}
			lb.Release(in[:k])
			received.Add(uint64(k))
			if k == 0 {
				_ = lb.Wait(time.Millisecond)
			}
		}
	})
	defer func() { close(stop); lb.Wake(); wg.Wait() }()
	var out [32]link.Packet
	var hdr [8]byte
	var trl [zcTrailer]byte
	for i := range out {
		out[i] = link.Packet{Remote: lb.LocalAddr()}
		if zeroCopy {
			out[i].Flags = link.FlagZeroCopy
		}
		out[i].Segs[0], out[i].Segs[1], out[i].Segs[2] = hdr[:], heap[:payload], trl[:]
		out[i].NSegs = 3
	}
	var done [64]uint64
	drain := func() {
		for la.TxDone(done[:]) > 0 {
		}
	}
	// Warm up: resolve the peer.
	if n, err := la.Send(out[:1]); n != 1 || err != nil {
		b.Fatalf("send: %d %v", n, err)
	}
	drain()
	zc0, rx0 := la.Stats().TxZeroCopy, received.Load()
	b.SetBytes(int64(payload))
	b.ReportAllocs()
	b.ResetTimer()
	sent := 0
	deadline := time.Now().Add(2 * time.Minute)
	for sent < b.N {
		k, err := la.Send(out[:min(len(out), b.N-sent)])
		if err != nil {
			b.Fatal(err)
		}
		sent += k
		drain()
		if k == 0 {
			if time.Now().After(deadline) {
				b.Fatalf("stalled after %d of %d datagrams", sent, b.N)
			}
			_ = la.Wait(100 * time.Microsecond)
		}
	}
	b.StopTimer()
	end := time.Now().Add(time.Second)
	for la.zcPending() && time.Now().Before(end) {
		drain()
		time.Sleep(100 * time.Microsecond)
	}
	drain()
	b.ReportMetric(float64(la.Stats().TxZeroCopy-zc0)/float64(b.N), "zc-segs/op")
	b.ReportMetric(float64(received.Load()-rx0)/float64(b.N), "delivered/op")
}

// openOnTB is openOn for benchmarks.
func openOnTB(tb testing.TB, h *testbed.Host, cfg Config) *Device {
	tb.Helper()
	cfg.Interface, cfg.Port, cfg.Logger = h.Ifname, testPort, quietLogger
	var d *Device
	if err := h.Do(func() (err error) { d, err = Open(cfg); return err }); err != nil {
		tb.Fatalf("open xdp device on %s/%s: %v", h.NS, h.Ifname, err)
	}
	tb.Cleanup(func() {
		if err := d.Close(); err != nil {
			tb.Errorf("close device: %v", err)
		}
	})
	return d
}

// benchHosts opens both hosts at mtu with a UMEM heap on A and returns the links and a
// heap buffer.
func benchHosts(b *testing.B, mtu int) (la, lb *Link, heap []byte) {
	bed := testbed.NewT(b, testbed.Options{MTU: mtu})
	cfg := Config{RingSize: 2048, Frames: 4096, HeapSize: 1 << 20}
	a, d := openOnTB(b, bed.A, cfg), openOnTB(b, bed.B, cfg)
	h := heapOf(b, a)
	buf, err := h.Alloc(65536, 4096)
	if err != nil {
		b.Fatal(err)
	}
	for i := range buf {
		buf[i] = byte(i)
	}
	resolvePair(b, a.Links()[0], d.Links()[0])
	return a.Links()[0], d.Links()[0], buf
}

// BenchmarkZeroCopySend compares copying and zero-copy Send of datagrams with an 8 KiB
// payload at MTU 9000 between the two namespace hosts, in one run.
func BenchmarkZeroCopySend(b *testing.B) {
	la, lb, heap := benchHosts(b, 9000)
	for _, mode := range []string{"copy", "zerocopy"} {
		b.Run(mode, func(b *testing.B) {
			benchSend(b, la, lb, heap, 8192, zcMinSegment, mode == "zerocopy")
		})
	}
}

// BenchmarkZeroCopyThreshold sends datagrams of several payload sizes at MTU 1500 and
// 9000, copied and by reference, to find the payload size from which a descriptor pays
// (zcMinSegment).
func BenchmarkZeroCopyThreshold(b *testing.B) {
	for _, mtu := range []int{1500, 9000} {
		b.Run(fmt.Sprintf("mtu%d", mtu), func(b *testing.B) {
			la, lb, heap := benchHosts(b, mtu)
			for _, size := range []int{256, 512, 1024, 1400, 4096, 8192} {
				if size+8+zcTrailer > la.MaxPayload() {
					continue
				}
				for _, mode := range []string{"copy", "ref"} {
					b.Run(fmt.Sprintf("%d/%s", size, mode), func(b *testing.B) {
						benchSend(b, la, lb, heap, size, 1, mode == "ref")
					})
				}
			}
		})
	}
}
