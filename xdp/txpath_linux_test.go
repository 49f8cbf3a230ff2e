package xdp

import (
	"fmt"
	"hash/crc32"
	"net/netip"
	"testing"

	"github.com/xdpndk/xdpndk/xdp/frame"
	"github.com/xdpndk/xdpndk/xdp/xsk"

	"github.com/xdpndk/xdpndk/transport/link"
)

// txPathSizes are the IP packet lengths the transmit-path benchmarks frame (linkbench's
// sizes): UDP payload = size - 28.
var txPathSizes = []int{64, 1500, 9000}

// txPathHeader is the transport header segment of the benchmarks' datagrams (a Write's
// header and RDMA extension are 40 bytes); the rest of the payload but the trailer is data.
const txPathHeader = 40

// txPathFixture is the part of a Link that frames datagrams in copy mode: a zcState over
// a UMEM whose pool holds every frame, and a header template to a peer.
type txPathFixture struct {
	z   zcState
	e   frame.Encap
	tx  [8]xsk.Desc
	src []byte // the caller's memory the payloads come from (a Go heap buffer)
	// inFlight are the frames of the datagrams "on the TX ring": a frame goes back to the
	// pool only when inFlight's ring comes round, as completions would give it back, so
	// that framing writes to frames that are not all hot in the cache.
	inFlight []uint64
	next     int
}

// The caller's memory the benchmark cycles through: src=hot is 1 MiB, as 16 outstanding
// 64 KiB Writes from a Go heap buffer are (it stays in the caches), src=cold 512 MiB, which
// they do not hold (an application streaming data it has not touched lately).
const (
	txPathHot  = 1 << 20
	txPathCold = 512 << 20
)

// txPathSources are the source buffers by size, made once (src=cold is large).
var txPathSources = map[int][]byte{}

// txPathSourceOf returns the source buffer of n bytes (and 64 KiB of slack), filled.
func txPathSourceOf(n int) []byte {
	if b, ok := txPathSources[n]; ok {
		return b
	}
	b := make([]byte, n+65536)
	for i := range b {
		b[i] = byte(i * 7)
	}
	txPathSources[n] = b
	return b
}

func newTxPathFixture(tb testing.TB, src int) *txPathFixture {
	tb.Helper()
	u, pool := testPool(tb, 4096, 4096)
	f := &txPathFixture{
		z: zcState{mem: u.Bytes(), fsize: 4096, pool: pool, minSeg: zcMinSegment,
			maxDescs: maxCopyModeDescs, heapLo: u.FrameAreaEnd()},
		e: frame.Encap{
			SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2},
			Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("198.18.0.2"),
			SrcPort: 40000, DstPort: testPort,
		},
		src:      txPathSourceOf(src),
		inFlight: make([]uint64, 2048),
	}
	f.z.queue = newZCQueue(64)
	f.z.frameRec = make([]uint32, u.Frames())
	if err := f.e.Validate(); err != nil {
		tb.Fatal(err)
	}
	for i := range f.inFlight {
		f.inFlight[i] = ^uint64(0)
	}
	return f
}

// retire puts the frames of the datagram just built (descs of them in f.tx) "on the ring",
// returning the oldest ones to the pool.
func (f *txPathFixture) retire(descs int) {
	for _, d := range f.tx[:descs] {
		if old := f.inFlight[f.next]; old != ^uint64(0) {
			f.z.pool.Put(old)
		}
		f.inFlight[f.next] = d.Addr
		f.next = (f.next + 1) % len(f.inFlight)
	}
}

// txPathVariant is one way of transmitting in BenchmarkTxPath.
type txPathVariant struct {
	name   string
	omitV4 bool // no UDP checksum over IPv4 (ChecksumAuto)
}

var txPathVariants = []txPathVariant{
	{name: "csum=software"},
	{name: "csum=omit", omitV4: true},
}

// BenchmarkTxPath measures the user-space work of transmitting one datagram in copy mode,
// the path veth takes: the CRC32C trailer the engine computes over the header and payload
// (txBatch.emit), then the link's framing (zcState.plan and build: the headers, the copy
// into UMEM frames and, unless left out, the UDP checksum). The payload comes from a 1 MiB
// Go heap buffer (src=hot) or a 512 MiB one (src=cold), walked through; the frames go back
// to the pool 2048 frames later, as completions would give them back. Nothing here reaches
// the kernel.
func BenchmarkTxPath(b *testing.B) {
	for _, src := range []struct {
		name string
		size int
	}{{"hot", txPathHot}, {"cold", txPathCold}} {
		for _, size := range txPathSizes {
			for _, v := range txPathVariants {
				b.Run(fmt.Sprintf("src=%s/%d/%s", src.name, size, v.name), func(b *testing.B) {
					f := newTxPathFixture(b, src.size)
					f.z.omitV4 = v.omitV4
					f.run(b, size)
				})
			}
		}
	}
}

// txPathBatch is how many datagrams run emits before it frames them, as the engine's
// txBatch queues up to 64 before it hands them to the link.
const txPathBatch = 64

// run frames b.N datagrams of IP length size, in batches of txPathBatch, as the engine
// and the link do: the batch's packets are laid out first, with their CRC32C, then framed
// one after the other.
func (f *txPathFixture) run(b *testing.B, size int) {
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	plen := size - 28
	data := max(plen-txPathHeader-4, 0)
	var (
		pkts [txPathBatch]link.Packet
		hdr  [txPathBatch][txPathHeader]byte
		trl  [txPathBatch][4]byte
	)
	hl := f.e.HeaderLen()
	off := 0
	to := netip.AddrPortFrom(f.e.Dst, testPort)
	b.SetBytes(int64(plen))
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		k := min(txPathBatch, b.N-done)
		for i := range k {
			p := &pkts[i]
			*p = link.Packet{Remote: to}
			h := hdr[i][:min(plen-4, txPathHeader)]
			p.Segs[0] = h
			n := 1
			if data > 0 {
				p.Segs[n] = f.src[off : off+data]
				off = (off + data + 64) % (len(f.src) - 65536)
				n++
			}
			crc := crc32.Update(0, castagnoli, h)
			if data > 0 {
				crc = crc32.Update(crc, castagnoli, p.Segs[1])
			}
			t := &trl[i]
			t[0], t[1], t[2], t[3] = byte(crc>>24), byte(crc>>16), byte(crc>>8), byte(crc)
			p.Segs[n] = trl[i][:]
			p.NSegs = uint8(n + 1)
		}
		for i := range k {
			p := &pkts[i]
			descs, _, refs := f.z.plan(p, hl, plen)
			if _, err := f.z.build(p, &f.e, plen, descs, refs, f.tx[:]); err != nil {
				b.Fatal(err)
			}
			f.retire(descs)
		}
		done += k
	}
}
