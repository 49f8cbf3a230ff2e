package pcaplink

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/pcapng"
	"github.com/xdpndk/xdpndk/transport/link"
)

// Addresses of the tests' datagrams (198.18.0.0/15 and RFC 5180's 2001:2::/48; they only
// ever exist in memory and in files).
var (
	local4  = netip.MustParseAddrPort("198.18.0.1:4793")
	remote4 = netip.MustParseAddrPort("198.18.0.2:4793")
	local6  = netip.MustParseAddrPort("[2001:2::1]:4793")
	remote6 = netip.MustParseAddrPort("[2001:2::2]:50000")
)

// pattern returns n bytes starting at b, counting up.
func pattern(n int, b byte) []byte {
	s := make([]byte, n)
	for i := range s {
		s[i] = b + byte(i)
	}
	return s
}

// pkt is a datagram to or from remote in the given segments.
func pkt(remote netip.AddrPort, localPort uint16, segs ...[]byte) link.Packet {
	p := link.Packet{Remote: remote, LocalPort: localPort, NSegs: uint8(len(segs))}
	copy(p.Segs[:], segs)
	return p
}

// capture runs f on a link wrapped in a capture into a buffer, closes it and returns the
// file's blocks and the capture's counters.
func capture(t *testing.T, cfg Config, inner link.Link, f func(l link.Link)) ([]pcapng.Block, Stats) {
	t.Helper()
	var file bytes.Buffer
	c, err := New(&file, cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.Wrap(inner, "test0")
	if err != nil {
		t.Fatal(err)
	}
	f(l)
	st, err := c.Close()
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := pcapng.Read(file.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return blocks, st
}

// packets returns the EPBs of blocks.
func packets(blocks []pcapng.Block) []pcapng.Block {
	var out []pcapng.Block
	for _, b := range blocks {
		if b.Type == pcapng.BlockEPB {
			out = append(out, b)
		}
	}
	return out
}

// decoded is a record's IP and UDP headers as read back.
type decoded struct {
	src, dst netip.AddrPort
	ipLen    int // IPv4 total length or IPv6 payload length
	udpLen   int
	csum     uint16
	ttl      byte
	payload  []byte
	hdr      int
}

// decode reads the made-up headers of an EPB's data, checking the IPv4 header checksum.
func decode(t *testing.T, d []byte) decoded {
	t.Helper()
	be := binary.BigEndian
	var x decoded
	switch d[0] >> 4 {
	case 4:
		if d[0] != 0x45 || d[9] != 17 || be.Uint16(d[6:]) != 0x4000 {
			t.Fatalf("IPv4 header % x", d[:20])
		}
		if s, _ := onesSum(0, d[:20], false); fold(s) != 0xffff {
			t.Errorf("IPv4 header checksum wrong: % x", d[:20])
		}
		src, dst := netip.AddrFrom4([4]byte(d[12:16])), netip.AddrFrom4([4]byte(d[16:20]))
		x.ipLen, x.ttl, x.hdr = int(be.Uint16(d[2:])), d[8], 28
		x.src, x.dst = netip.AddrPortFrom(src, be.Uint16(d[20:])), netip.AddrPortFrom(dst, be.Uint16(d[22:]))
	case 6:
		if be.Uint32(d) != 6<<28 || d[6] != 17 {
			t.Fatalf("IPv6 header % x", d[:40])
		}
		src, dst := netip.AddrFrom16([16]byte(d[8:24])), netip.AddrFrom16([16]byte(d[24:40]))
		x.ipLen, x.ttl, x.hdr = int(be.Uint16(d[4:])), d[7], 48
		x.src, x.dst = netip.AddrPortFrom(src, be.Uint16(d[40:])), netip.AddrPortFrom(dst, be.Uint16(d[42:]))
	default:
		t.Fatalf("not IP: % x", d[:min(len(d), 20)])
	}
	x.udpLen, x.csum = int(be.Uint16(d[x.hdr-4:])), be.Uint16(d[x.hdr-2:])
	x.payload = d[x.hdr:]
	return x
}

// udp6Checksum is the UDP checksum of payload from src to dst over IPv6, computed
// independently of the package's incremental sums.
func udp6Checksum(src, dst netip.AddrPort, payload []byte) uint16 {
	var b []byte
	s16, d16 := src.Addr().As16(), dst.Addr().As16()
	b = append(b, s16[:]...)
	b = append(b, d16[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(8+len(payload)))
	b = append(b, 0, 0, 0, 17)
	b = binary.BigEndian.AppendUint16(b, src.Port())
	b = binary.BigEndian.AppendUint16(b, dst.Port())
	b = binary.BigEndian.AppendUint16(b, uint16(8+len(payload)))
	b = append(b, 0, 0)
	b = append(b, payload...)
	if len(b)%2 == 1 {
		b = append(b, 0)
	}
	var s uint32
	for i := 0; i < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	c := ^uint16(s)
	if c == 0 {
		c = 0xffff
	}
	return c
}

// What the link sends (only what the inner link accepts) and receives is recorded, in
// order, with its direction, addresses, ports and a timestamp of the call; a datagram in
// several segments is recorded whole.
func TestRecordsBothDirections(t *testing.T) {
	in := &stub{local: local4, accept: 2, rx: []link.Packet{
		pkt(remote4, 0, pattern(40, 1)),
		pkt(remote4, 50001, pattern(7, 2), pattern(9, 3), pattern(1, 4)),
	}}
	out := []link.Packet{
		pkt(remote4, 0, pattern(33, 5)),
		pkt(remote4, 49152, pattern(16, 6), pattern(1400, 7)),
		pkt(remote4, 0, pattern(10, 8)), // refused by the inner link: not recorded
	}
	out[1].Flags, out[1].Cookie = link.FlagZeroCopy, 99
	var before, after int64
	blocks, st := capture(t, Config{}, in, func(l link.Link) {
		before = time.Now().UnixNano()
		if n, err := l.Send(out); n != 2 || err != nil {
			t.Fatalf("Send: %d, %v", n, err)
		}
		var rx [4]link.Packet
		if n, err := l.Receive(rx[:]); n != 2 || err != nil {
			t.Fatalf("Receive: %d, %v", n, err)
		}
		after = time.Now().UnixNano()
	})
	if st.Packets != 4 || st.Dropped != 0 || st.Bytes != 33+1416+40+17 {
		t.Errorf("stats %+v", st)
	}
	if blocks[1].Type != pcapng.BlockIDB || blocks[1].LinkType != pcapng.LinkTypeRaw || blocks[1].TsResol != 9 || blocks[1].SnapLen != 0 {
		t.Fatalf("interface %+v", blocks[1])
	}
	if v, _ := blocks[1].Find(2); string(v) != "test0" {
		t.Errorf("if_name %q", v)
	}
	eps := packets(blocks)
	want := []struct {
		dir      uint32
		src, dst netip.AddrPort
		payload  []byte
	}{
		{pcapng.DirOutbound, local4, remote4, out[0].Segs[0]},
		{pcapng.DirOutbound, netip.AddrPortFrom(local4.Addr(), 49152), remote4, append(pattern(16, 6), pattern(1400, 7)...)},
		{pcapng.DirInbound, remote4, local4, pattern(40, 1)},
		{pcapng.DirInbound, remote4, netip.AddrPortFrom(local4.Addr(), 50001), append(append(pattern(7, 2), pattern(9, 3)...), pattern(1, 4)...)},
	}
	if len(eps) != len(want) {
		t.Fatalf("%d packets recorded, want %d", len(eps), len(want))
	}
	for i, w := range want {
		b := eps[i]
		x := decode(t, b.Data)
		if x.src != w.src || x.dst != w.dst || !bytes.Equal(x.payload, w.payload) {
			t.Errorf("packet %d: %v -> %v % x; want %v -> %v % x", i, x.src, x.dst, x.payload, w.src, w.dst, w.payload)
		}
		if x.ipLen != 28+len(w.payload) || x.udpLen != 8+len(w.payload) || x.csum != 0 || x.ttl != 64 {
			t.Errorf("packet %d: lengths IP %d UDP %d, checksum %#x, TTL %d", i, x.ipLen, x.udpLen, x.csum, x.ttl)
		}
		if int(b.OrigLen) != 28+len(w.payload) || int(b.CapLen) != 28+len(w.payload) {
			t.Errorf("packet %d: %d of %d bytes", i, b.CapLen, b.OrigLen)
		}
		if v, ok := b.Find(2); !ok || binary.LittleEndian.Uint32(v) != w.dir {
			t.Errorf("packet %d: epb_flags %x, want direction %d", i, v, w.dir)
		}
		if b.Timestamp < before || b.Timestamp > after {
			t.Errorf("packet %d: timestamp %d outside the calls [%d, %d]", i, b.Timestamp, before, after)
		}
	}
	var isb *pcapng.Block
	for i := range blocks {
		if blocks[i].Type == pcapng.BlockISB {
			isb = &blocks[i]
		}
	}
	if isb == nil {
		t.Fatal("no interface statistics")
	}
	if v, _ := isb.Find(4); binary.LittleEndian.Uint64(v) != 4 {
		t.Errorf("isb_ifrecv %x, want 4", v)
	}
}

// IPv6: the UDP checksum is the one the wire carries, also when the snap length cuts the
// record (then from the sum the engine side took of what was not copied); the snap
// length is the interface's and each record's captured length, the original length
// stays.
func TestIPv6AndSnapLength(t *testing.T) {
	for _, snap := range []int{0, 64, 65, 101, 1000} {
		t.Run(fmt.Sprint(snap), func(t *testing.T) {
			in := &stub{local: local6, accept: -1}
			var sent [][]byte
			blocks, _ := capture(t, Config{SnapLen: snap}, in, func(l link.Link) {
				for _, sizes := range [][]int{{1}, {20}, {17, 33}, {3, 4, 1001}, {700, 1}, {0, 65, 0}} {
					var segs [][]byte
					var whole []byte
					for k, n := range sizes {
						s := pattern(n, byte(17*k+n))
						segs, whole = append(segs, s), append(whole, s...)
					}
					sent = append(sent, whole)
					p := [1]link.Packet{pkt(remote6, 0, segs...)}
					if n, err := l.Send(p[:]); n != 1 || err != nil {
						t.Fatalf("Send: %d %v", n, err)
					}
				}
			})
			if blocks[1].SnapLen != uint32(snap) {
				t.Errorf("interface snap length %d, want %d", blocks[1].SnapLen, snap)
			}
			eps := packets(blocks)
			if len(eps) != len(sent) {
				t.Fatalf("%d packets, want %d", len(eps), len(sent))
			}
			for i, b := range eps {
				full := 48 + len(sent[i])
				capLen := full
				if snap > 0 {
					capLen = min(full, snap)
				}
				if int(b.OrigLen) != full || int(b.CapLen) != capLen {
					t.Errorf("packet %d: %d of %d bytes, want %d of %d", i, b.CapLen, b.OrigLen, capLen, full)
				}
				x := decode(t, b.Data)
				if x.src != local6 || x.dst != remote6 || x.ipLen != 8+len(sent[i]) || x.udpLen != 8+len(sent[i]) {
					t.Errorf("packet %d: %v -> %v, lengths %d %d", i, x.src, x.dst, x.ipLen, x.udpLen)
				}
				if !bytes.Equal(x.payload, sent[i][:capLen-48]) {
					t.Errorf("packet %d: payload % x, want % x", i, x.payload, sent[i][:capLen-48])
				}
				if w := udp6Checksum(local6, remote6, sent[i]); x.csum != w {
					t.Errorf("packet %d (%d bytes, %d captured): UDP checksum %#04x, want %#04x", i, len(sent[i]), capLen, x.csum, w)
				}
			}
		})
	}
}

// A link of IPv4 address with an IPv6 peer (or the reverse) and a peer with no address
// are recorded without a panic, in IPv6 (IPv4 mapped) or with a zero address.
func TestMixedAndInvalidAddresses(t *testing.T) {
	for _, c := range []struct {
		local, remote netip.AddrPort
		src, dst      string
	}{
		{local4, remote6, "[::ffff:198.18.0.1]:4793", remote6.String()},
		{local6, remote4, local6.String(), "[::ffff:198.18.0.2]:4793"},
		{local4, netip.AddrPort{}, local4.String(), "0.0.0.0:0"},
		{netip.AddrPort{}, remote4, "0.0.0.0:0", remote4.String()},
		{netip.AddrPort{}, netip.AddrPort{}, "0.0.0.0:0", "0.0.0.0:0"},
	} {
		in := &stub{local: c.local, accept: -1}
		blocks, _ := capture(t, Config{}, in, func(l link.Link) {
			p := [1]link.Packet{pkt(c.remote, 0, pattern(30, 0))}
			_, _ = l.Send(p[:])
		})
		eps := packets(blocks)
		if len(eps) != 1 {
			t.Fatalf("%v -> %v: %d packets", c.local, c.remote, len(eps))
		}
		x := decode(t, eps[0].Data)
		if x.src.String() != c.src || x.dst.String() != c.dst {
			t.Errorf("%v -> %v recorded as %v -> %v, want %s -> %s", c.local, c.remote, x.src, x.dst, c.src, c.dst)
		}
	}
}

// Bad input never panics: more segments than a packet has, nil segments, an inner link
// that claims more (or fewer) datagrams than it was given, a closed capture.
func TestBadInput(t *testing.T) {
	for _, n := range []int{-5, 0, 3, 1 << 20} {
		n := n
		in := &stub{local: local4, rxN: &n, txN: &n}
		capture(t, Config{}, in, func(l link.Link) {
			p := []link.Packet{{Remote: remote4, NSegs: 200}, {NSegs: 3}, {Remote: remote6, NSegs: 1}}
			p[0].Segs[3] = pattern(10, 0)
			_, _ = l.Send(p)
			_, _ = l.Receive(p)
			_, _ = l.Send(nil)
			_, _ = l.Receive(nil)
		})
	}
	var file bytes.Buffer
	c, err := New(&file, Config{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.Wrap(&stub{local: local4, accept: -1}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Close(); err != nil {
		t.Fatal(err)
	}
	p := [1]link.Packet{pkt(remote4, 0, pattern(30, 0))}
	if n, err := l.Send(p[:]); n != 1 || err != nil {
		t.Errorf("Send after the capture closed: %d %v", n, err)
	}
	if _, err := c.Wrap(&stub{}, ""); err != ErrClosed {
		t.Errorf("Wrap after Close: %v", err)
	}
	if _, err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := c.Wrap(nil, ""); err == nil {
		t.Error("nil link wrapped")
	}
	for _, cfg := range []Config{{SnapLen: 10}, {SnapLen: -1}, {Buffer: 100}, {Buffer: MaxBuffer + 1}, {Interval: -1}} {
		if _, err := New(&file, cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}

// A full ring drops and counts; the file's statistics say so, and what was recorded is
// intact.
func TestDropsWhenFull(t *testing.T) {
	in := &stub{local: local4, accept: -1}
	const sent = 200
	blocks, st := capture(t, Config{Buffer: MinBuffer, Interval: time.Second}, in, func(l link.Link) {
		for i := range sent {
			p := [1]link.Packet{pkt(remote4, 0, pattern(1400, byte(i)))}
			_, _ = l.Send(p[:])
		}
	})
	// The writer wakes at half full, so how many fit depends on the scheduler; but 200
	// datagrams of 1400 bytes are 4 rings of 64 KiB sent in far less than the interval.
	if st.Dropped == 0 || st.Packets+st.Dropped != sent {
		t.Fatalf("stats %+v: want drops, and %d recorded or dropped", st, sent)
	}
	eps := packets(blocks)
	if uint64(len(eps)) != st.Packets {
		t.Errorf("%d packets in the file, stats say %d", len(eps), st.Packets)
	}
	for i, b := range eps {
		x := decode(t, b.Data)
		first := x.payload[0]
		if !bytes.Equal(x.payload, pattern(1400, first)) {
			t.Fatalf("packet %d corrupted", i)
		}
	}
	for _, b := range blocks {
		if b.Type == pcapng.BlockISB {
			if v, _ := b.Find(5); binary.LittleEndian.Uint64(v) != st.Dropped {
				t.Errorf("isb_ifdrop %x, want %d", v, st.Dropped)
			}
			if v, _ := b.Find(4); binary.LittleEndian.Uint64(v) != sent {
				t.Errorf("isb_ifrecv %x, want %d", v, sent)
			}
		}
	}
}

// The engine and the writer run at once (the ring wraps many times): every datagram is
// either recorded intact and in order or counted as dropped. (Run with -race.)
func TestConcurrentWriter(t *testing.T) {
	in := &stub{local: local4, accept: -1}
	const sent = 20000
	blocks, st := capture(t, Config{Buffer: MinBuffer, Interval: 100 * time.Microsecond}, in, func(l link.Link) {
		var p [4]link.Packet
		for i := 0; i < sent; i += len(p) {
			for k := range p {
				n := (i + k) % 1500
				b := pattern(4+n, byte(i+k))
				binary.BigEndian.PutUint32(b, uint32(i+k))
				p[k] = pkt(remote4, 0, b[:2], b[2:])
			}
			_, _ = l.Send(p[:])
			if i%256 == 0 {
				time.Sleep(10 * time.Microsecond)
			}
		}
	})
	eps := packets(blocks)
	if uint64(len(eps)) != st.Packets || st.Packets+st.Dropped != sent || st.Packets == 0 {
		t.Fatalf("stats %+v, %d in the file", st, len(eps))
	}
	last := -1
	for _, b := range eps {
		x := decode(t, b.Data)
		seq := int(binary.BigEndian.Uint32(x.payload))
		b := pattern(4+seq%1500, byte(seq))
		binary.BigEndian.PutUint32(b, uint32(seq))
		if seq <= last || !bytes.Equal(x.payload, b) {
			t.Fatalf("record of datagram %d (after %d) wrong", seq, last)
		}
		last = seq
	}
	t.Logf("%d recorded, %d dropped", st.Packets, st.Dropped)
}

// Several links into one file: an interface each, each packet on its own.
func TestSeveralLinks(t *testing.T) {
	var file bytes.Buffer
	c, err := New(&file, Config{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for k := range 3 {
		l, err := c.Wrap(&stub{local: local4, accept: -1}, fmt.Sprintf("q%d", k))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				p := [1]link.Packet{pkt(remote4, uint16(1000*k+i+1), pattern(50, byte(k)))}
				_, _ = l.Send(p[:])
			}
		}()
	}
	wg.Wait()
	if _, err := c.Close(); err != nil {
		t.Fatal(err)
	}
	blocks, err := pcapng.Read(file.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	per := map[uint32]int{}
	for _, b := range packets(blocks) {
		x := decode(t, b.Data)
		if want := uint16(1000*int(b.Interface) + per[b.Interface] + 1); x.src.Port() != want {
			t.Errorf("interface %d: port %d, want %d", b.Interface, x.src.Port(), want)
		}
		per[b.Interface]++
	}
	if per[0] != 100 || per[1] != 100 || per[2] != 100 {
		t.Errorf("packets per interface %v", per)
	}
}

// The wrapper has the inner link's optional methods, and only those, and passes the
// rest through.
func TestOptionalMethods(t *testing.T) {
	c, err := New(&bytes.Buffer{}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	full := &fullStub{stub{local: local4}}
	l, _ := c.Wrap(full, "")
	w, okW := l.(link.Watcher)
	r, okR := l.(link.PeerResolver)
	if !okW || !okR {
		t.Fatalf("wrapper of a watcher and resolver: Watcher %v, PeerResolver %v", okW, okR)
	}
	_ = w.Watch(0)
	_ = r.ResolvePeer(t.Context(), remote4.Addr())
	if full.watched != 1 || full.resolved != 1 {
		t.Errorf("watched %d, resolved %d", full.watched, full.resolved)
	}
	plain, _ := c.Wrap(&stub{local: local4}, "")
	if _, ok := plain.(link.Watcher); ok {
		t.Error("wrapper of a plain link is a Watcher")
	}
	if _, ok := plain.(link.PeerResolver); ok {
		t.Error("wrapper of a plain link is a PeerResolver")
	}
	if plain.LocalAddr() != local4 || plain.MaxPayload() != 8972 {
		t.Errorf("pass-through: %v %d", plain.LocalAddr(), plain.MaxPayload())
	}
	_ = l.Close()
	if !full.closed {
		t.Error("Close not passed through")
	}
}

// Recording allocates nothing per datagram, in either direction.
func TestNoAllocations(t *testing.T) {
	c, err := New(&bytes.Buffer{}, Config{Interval: 100 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	in := &stub{local: local6, accept: -1}
	l, _ := c.Wrap(in, "")
	rx := [8]link.Packet{}
	tx := [8]link.Packet{}
	for i := range tx {
		tx[i] = pkt(remote6, 0, pattern(64, 0), pattern(1400, 0))
	}
	if n := testing.AllocsPerRun(2000, func() {
		in.rx = tx[:4]
		_, _ = l.Send(tx[:])
		_, _ = l.Receive(rx[:])
	}); n != 0 {
		t.Errorf("%v allocations per Send and Receive of 8 and 4 datagrams", n)
	}
}

// BenchmarkRecord is what recording costs the engine per datagram (Send of 16 through
// the wrapper of a link that does nothing), sizes 64 B and 1 KiB, without the writer: the
// ring is emptied after each batch as a writer that keeps up would, so no datagram takes
// the cheaper drop path.
func BenchmarkRecord(b *testing.B) {
	for _, size := range []int{64, 1024} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			c := &Capture{wake: make(chan struct{}, 1)}
			tp := newTap(c, 0, local4, 0, DefaultBuffer)
			l := &Link{Link: &stub{local: local4, accept: -1}, t: tp}
			var tx [16]link.Packet
			for i := range tx {
				tx[i] = pkt(remote4, 0, pattern(32, 0), pattern(size-32, 0))
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(tx) * size))
			for b.Loop() {
				_, _ = l.Send(tx[:])
				tp.head.Store(tp.tail.Load())
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(tx)), "ns/datagram")
		})
	}
}

// BenchmarkWriter is the writer goroutine's cost per datagram: draining a ring of 1 KiB
// records into pcapng blocks (headers made up) in a discarded file.
func BenchmarkWriter(b *testing.B) {
	c, err := New(discard{}, Config{Interval: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	c.mu.Lock()
	t := newTap(c, 0, local6, 0, DefaultBuffer)
	id, _ := c.w.AddInterface(pcapng.Interface{LinkType: pcapng.LinkTypeRaw, TsResol: 9})
	t.ifc = id
	c.mu.Unlock()
	l := &Link{Link: &stub{local: local6, accept: -1}, t: t}
	var tx [16]link.Packet
	for i := range tx {
		tx[i] = pkt(remote6, 0, pattern(1024, 0))
	}
	b.SetBytes(int64(len(tx) * 1024))
	for b.Loop() {
		_, _ = l.Send(tx[:])
		c.mu.Lock()
		t.drain(c)
		c.mu.Unlock()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(tx)), "ns/datagram")
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }
