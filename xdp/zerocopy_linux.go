package xdp

import (
	"time"

	"github.com/xdpndk/xdpndk/xdp/frame"
	"github.com/xdpndk/xdpndk/xdp/xsk"

	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport/link"
)

// Zero-copy transmit: a FlagZeroCopy datagram's large segments that lie in the UMEM beyond
// the frame area (the heap of registrable application buffers) go on the TX ring as
// descriptors pointing straight at them; the Ethernet/IP/UDP headers, small segments and
// segments elsewhere are copied into frames from the link's pool. A typical packet is
//
//	header frame (XDP_PKT_CONTD) → payload descriptor(s) (XDP_PKT_CONTD) → trailer frame
//
// Kernel rules this follows (net/xdp/xsk_queue.h, net/xdp/xsk.c, include/net/xsk_buff_pool.h;
// docs/DATAPATH.md has the details):
//   - a descriptor's length is 1..chunk size (unaligned mode) and it must not cross a chunk
//     boundary (aligned mode), so a large segment becomes several descriptors;
//   - in zero-copy (driver) mode a descriptor must not cross a page boundary unless the pages
//     are DMA-contiguous; in copy mode it may;
//   - in copy mode one packet has at most MAX_SKB_FRAGS+1 descriptors (the first becomes the
//     skb's linear part, each further one a page fragment); more is -EOVERFLOW, and the
//     kernel drops the packet, counts its descriptors as invalid and never completes them;
//   - multi-buffer TX needs the socket bound with XDP_USE_SG;
//   - the completion ring returns every descriptor's address; the addresses of one packet
//     are contiguous and in descriptor order, but packets complete in the order the kernel
//     frees their skbs (copy mode, since Linux 6.17), which need not be TX order.

// zcMinSegment is the shortest segment transmitted by reference. Shorter ones are copied:
// a descriptor costs the kernel more (in copy mode a page allocation and a fragment) than
// copying a few hundred bytes costs us. Measured with BenchmarkZeroCopyThreshold; see
// docs/DATAPATH.md.
const zcMinSegment = 1024

// maxCopyModeDescs is the most descriptors one packet may have in copy mode:
// MAX_SKB_FRAGS (17 unless the kernel is built with a larger CONFIG_MAX_SKB_FRAGS, never
// smaller) fragments plus the linear part.
const maxCopyModeDescs = 17 + 1

// assumedZeroCopySegs is the descriptors per packet assumed in zero-copy (driver) mode when
// the kernel does not report the driver's limit (net_device.xdp_zc_max_segs, read over
// netlink as NETDEV_A_DEV_XDP_ZC_MAX_SEGS since Linux 6.6; 1 for drivers without
// multi-buffer zero-copy, more for those with): 4, header, two payload pieces, trailer.
const assumedZeroCopySegs = 4

// zcWaitPoll bounds Wait's sleep while zero-copy datagrams await completion: the kernel
// completes TX descriptors without waking poll() on the socket, so Wait polls for them.
const zcWaitPoll = 100 * time.Microsecond

// pageSize is the kernel page size that zero-copy descriptors must not cross.
const pageSize = 4096

// zcRecord is one FlagZeroCopy datagram waiting for TxDone: its cookie and how many of its
// descriptors the kernel has not completed yet (0: done, TxDone may report it).
type zcRecord struct {
	cookie uint64
	left   uint32
}

// zcQueue is a fixed-capacity FIFO of zcRecords in send order. Records of datagrams copied
// outright are pushed already done; those with referenced segments are done when their
// last descriptor completes. TxDone pops done records from the head only, so cookies are
// reported once each, in send order. Engine goroutine only; no allocation after creation.
type zcQueue struct {
	recs    []zcRecord // len is a power of two
	mask    uint32
	head    uint32 // free-running index of the oldest record
	n       uint32 // records queued
	pending uint32 // records with left > 0
}

func newZCQueue(capacity int) zcQueue {
	size := 1
	for size < capacity {
		size <<= 1
	}
	return zcQueue{recs: make([]zcRecord, size), mask: uint32(size - 1)}
}

func (q *zcQueue) full() bool { return q.n == uint32(len(q.recs)) }

// push appends a record and returns its slot (stable until it is popped). The caller
// checks full first.
func (q *zcQueue) push(cookie uint64, left uint32) uint32 {
	slot := (q.head + q.n) & q.mask
	q.recs[slot] = zcRecord{cookie: cookie, left: left}
	q.n++
	if left > 0 {
		q.pending++
	}
	return slot
}

// complete accounts one completed descriptor of the record in slot.
func (q *zcQueue) complete(slot uint32) {
	r := &q.recs[slot&q.mask]
	if r.left == 0 {
		return
	}
	if r.left--; r.left == 0 {
		q.pending--
	}
}

// pop moves the cookies of done records at the head into dst, oldest first, and returns
// how many.
func (q *zcQueue) pop(dst []uint64) int {
	k := 0
	for k < len(dst) && q.n > 0 {
		r := &q.recs[q.head&q.mask]
		if r.left > 0 {
			break
		}
		dst[k] = r.cookie
		k++
		q.head++
		q.n--
	}
	return k
}

// headDone reports whether pop would return a cookie.
func (q *zcQueue) headDone() bool { return q.n > 0 && q.recs[q.head&q.mask].left == 0 }

// zcState is a Link's transmit layout: how a datagram is laid out in frames and descriptors
// (plan), framing it so (build), and the zero-copy records that turn completed descriptors
// into TxDone cookies (track, completed). It shares the link's UMEM and frame pool, and
// writes descriptors into the staging array the link hands it. Engine goroutine only.
type zcState struct {
	mem   []byte            // the UMEM
	fsize uint64            // frame (chunk) size, a power of two
	pool  *memreg.FramePool // the link's frames

	enabled  bool   // the socket is bound with XDP_USE_SG, so a packet may have several descriptors
	omitV4   bool   // IPv4 datagrams go without UDP checksum (Config.UDPChecksum)
	minSeg   int    // shortest segment sent by reference (zcMinSegment; benchmarks vary it)
	maxDescs int    // descriptors one packet may have
	align    uint64 // payload descriptors must not cross a multiple of this (0: no constraint)
	heapLo   uint64 // first UMEM offset beyond the frame area

	queue zcQueue
	// frameRec maps a frame (by its index in the frame area) that heads a packet with
	// referenced segments to its record's slot + 1; 0 for every other frame.
	frameRec []uint32
	// cur is the slot of the packet whose descriptors are being completed and left how many
	// of them are still to come on the completion ring.
	cur  uint32
	left uint32
}

// newZCState sets up the transmit layout of socket s (with its frame pool and its TX
// staging array of txSize descriptors) on the device's UMEM.
func newZCState(d *Device, s *xsk.Socket, pool *memreg.FramePool, txSize int) zcState {
	m := s.Mode()
	z := zcState{mem: d.umem.Bytes(), fsize: uint64(d.umem.FrameSize()), pool: pool}
	z.enabled = m.MultiBuffer
	z.omitV4 = d.cfg.UDPChecksum.omitIPv4()
	z.minSeg = zcMinSegment
	z.maxDescs = min(maxCopyModeDescs, txSize)
	if m.ZeroCopy {
		z.maxDescs = min(max(d.zcMaxSegs, 1), txSize)
		z.align = min(z.fsize, pageSize)
	}
	if !s.Config().Unaligned {
		// Aligned chunks: a descriptor stays inside one chunk.
		z.align = z.fsize
	}
	z.heapLo = d.umem.FrameAreaEnd()
	z.queue = newZCQueue(txSize)
	z.frameRec = make([]uint32, d.umem.Frames())
	return z
}

// refOffset returns the UMEM offset of seg if it may be transmitted by reference: long
// enough, and wholly inside the UMEM beyond the frame area (frames belong to the pools).
func (z *zcState) refOffset(seg []byte) (uint64, bool) {
	if len(seg) < z.minSeg || len(seg) == 0 {
		return 0, false
	}
	off, ok := offsetIn(z.mem, seg)
	if !ok || off < z.heapLo || uint64(len(seg)) > uint64(len(z.mem))-off {
		return 0, false
	}
	return off, true
}

// refSplit decides how a referenced segment of n bytes at UMEM offset off is sent: its
// first ref bytes as descs descriptors (at most one chunk each, split at alignment
// boundaries when the mode needs it), and the rest, a last piece shorter than the
// threshold, copied into the frame that follows (with the trailer, typically), which saves
// a descriptor.
func (z *zcState) refSplit(off, n uint64) (descs int, ref uint64) {
	for ref < n {
		k := z.refPiece(off+ref, n-ref)
		if descs > 0 && ref+k == n && k < uint64(z.minSeg) {
			break
		}
		ref += k
		descs++
	}
	return descs, ref
}

// refPiece is how many of the left bytes at UMEM offset off one payload descriptor takes:
// at most a chunk, and not across an alignment boundary when the mode has one.
func (z *zcState) refPiece(off, left uint64) uint64 {
	k := min(left, z.fsize)
	if a := z.align; a != 0 {
		k = min(k, a-off%a)
	}
	return k
}

// plan decides how datagram p (hl header bytes, plen payload bytes) is laid out: which
// segments go by reference (a bit per segment in refs), how many descriptors and frames it
// takes. Without references it is the plain copy: the headers and payload packed into
// whole frames.
func (z *zcState) plan(p *link.Packet, hl, plen int) (descs, frames int, refs uint8) {
	fs := int(z.fsize)
	if p.Flags&link.FlagZeroCopy != 0 && z.enabled {
		run := hl // bytes of the copy run in progress
		for j := 0; j < int(p.NSegs); j++ {
			seg := p.Segs[j]
			off, ok := z.refOffset(seg)
			if !ok {
				run += len(seg)
				continue
			}
			if run > 0 {
				f := (run + fs - 1) / fs
				frames += f
				descs += f
				run = 0
			}
			d, ref := z.refSplit(off, uint64(len(seg)))
			descs += d
			refs |= 1 << j
			run += len(seg) - int(ref)
		}
		if run > 0 {
			f := (run + fs - 1) / fs
			frames += f
			descs += f
		}
		if refs != 0 && descs <= z.maxDescs {
			return descs, frames, refs
		}
	}
	frames = (hl + plen + fs - 1) / fs
	return frames, frames, 0
}

// build frames datagram p as planned: headers and copied segments into frames from the
// pool, segments in refs as descriptors pointing at them. The UDP checksum is computed over
// the segments unless omitV4 leaves it out of an IPv4 datagram. It writes the descriptors (descs
// of them) to the start of tx and returns the offset of the first frame. The pool holds
// enough frames and tx enough room (Send checked).
func (z *zcState) build(p *link.Packet, e *frame.Encap, plen, descs int, refs uint8, tx []xsk.Desc) (uint64, error) {
	var sum frame.Checksum
	psum := &sum
	if z.omitV4 && !e.IPv6() {
		psum = nil // no UDP checksum: the CRC32C trailer covers the datagram
	} else {
		for j := 0; j < int(p.NSegs); j++ {
			sum.Add(p.Segs[j])
		}
	}
	first, _ := z.pool.Get()
	addr := first
	buf := z.mem[addr : addr+z.fsize]
	hl, err := e.PutTo(buf, plen, psum, p.LocalPort, p.Remote.Port())
	if err != nil {
		z.pool.Put(addr)
		return 0, err
	}
	pos := hl
	open := true // buf holds pos > 0 bytes not yet queued
	ntx := 0
	for j := 0; j < int(p.NSegs); j++ {
		seg := p.Segs[j]
		if refs&(1<<j) != 0 {
			if open {
				tx[ntx] = xsk.Desc{Addr: addr, Len: uint32(pos), Options: xsk.DescContinued}
				ntx++
				open = false
			}
			off, _ := offsetIn(z.mem, seg)
			_, ref := z.refSplit(off, uint64(len(seg)))
			for n := ref; n > 0; {
				k := z.refPiece(off, n)
				tx[ntx] = xsk.Desc{Addr: off, Len: uint32(k), Options: xsk.DescContinued}
				ntx++
				off += k
				n -= k
			}
			seg = seg[ref:] // a short last piece is copied
		}
		for len(seg) > 0 {
			if !open || pos == len(buf) {
				if open {
					tx[ntx] = xsk.Desc{Addr: addr, Len: uint32(pos), Options: xsk.DescContinued}
					ntx++
				}
				addr, _ = z.pool.Get()
				buf = z.mem[addr : addr+z.fsize]
				pos = 0
				open = true
			}
			c := copy(buf[pos:], seg)
			pos += c
			seg = seg[c:]
		}
	}
	if open {
		tx[ntx] = xsk.Desc{Addr: addr, Len: uint32(pos)}
		ntx++
	}
	tx[ntx-1].Options &^= xsk.DescContinued
	if ntx != descs {
		panic("xdp: descriptor count mismatch") // broken internal invariant, not input
	}
	return first, nil
}

// track records a FlagZeroCopy datagram for TxDone: done at once if it was copied, else
// when the kernel has completed all descs of its descriptors, the first being the frame
// at first. Send checked that the queue has room.
func (z *zcState) track(cookie uint64, first uint64, descs int, refs uint8) {
	if refs == 0 {
		z.queue.push(cookie, 0)
		return
	}
	slot := z.queue.push(cookie, uint32(descs))
	z.frameRec[first/z.fsize] = slot + 1
}

// completed accounts one address from the completion ring: frames go back to the pool;
// descriptors of a packet with referenced segments count towards its record. A packet's
// addresses arrive together, its header frame first.
func (z *zcState) completed(a uint64) {
	if z.pool.Owns(a) {
		if i := a / z.fsize; i < uint64(len(z.frameRec)) && z.frameRec[i] != 0 {
			if z.left > 0 {
				// The previous packet's descriptors did not all come back (cannot happen:
				// the kernel completes a packet whole). Finish it so TxDone is not stuck.
				for ; z.left > 0; z.left-- {
					z.queue.complete(z.cur)
				}
			}
			z.cur, z.left = z.frameRec[i]-1, 0
			z.frameRec[i] = 0
			if r := z.queue.recs[z.cur&z.queue.mask].left; r > 0 {
				z.left = r
			}
		}
		z.pool.Put(a)
	}
	if z.left > 0 {
		z.left--
		z.queue.complete(z.cur)
	}
}

// pending reports whether datagrams with referenced segments await completion.
func (z *zcState) pending() bool { return z.queue.pending > 0 }
