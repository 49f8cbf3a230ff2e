package xdp

import "github.com/xdpndk/xdpndk/memreg"

// rxState is a Link's receive side at the ring level: the descriptors taken from the RX
// ring and not handed out yet (Receive walks them, one packet at a time, and parses each
// with unwrap), and the received frames on their way back to the fill ring. Engine
// goroutine only.
type rxState struct {
	sock  *Socket
	pool  *memreg.FramePool
	fsize uint64

	descs    [rxBatch]Desc
	head     int // next unprocessed descriptor in descs
	tail     int // end of the descriptors taken from the ring
	recycle  [rxBatch]uint64
	nrecycle int
}

// newRxState gives the kernel every frame the fill ring of s holds, before any traffic
// arrives, and returns the receive side of s.
func newRxState(s *Socket, pool *memreg.FramePool, fsize uint64) rxState {
	var addrs [rxBatch]uint64
	for left := int(s.Config().FillSize); left > 0; {
		n := 0
		for n < len(addrs) && n < left {
			a, ok := pool.Get()
			if !ok {
				break
			}
			addrs[n] = a
			n++
		}
		if n == 0 {
			break
		}
		if put := s.Fill(addrs[:n]); put != n {
			for _, a := range addrs[put:n] {
				pool.Put(a)
			}
			break
		}
		left -= n
	}
	return rxState{sock: s, pool: pool, fsize: fsize}
}

// buffered reports whether descriptors taken from the ring wait to be handed out.
func (r *rxState) buffered() bool { return r.head != r.tail }

// recycleFrame queues the frame holding offset addr for the fill ring.
func (r *rxState) recycleFrame(addr uint64) {
	if r.nrecycle == len(r.recycle) {
		r.flushRecycle()
	}
	r.recycle[r.nrecycle] = addr &^ (r.fsize - 1)
	r.nrecycle++
}

// flushRecycle puts the queued frames on the fill ring (those it has no room for go back to
// the pool) and wakes the kernel's fill processing when it asks for it.
func (r *rxState) flushRecycle() {
	if r.nrecycle == 0 {
		return
	}
	put := r.sock.Fill(r.recycle[:r.nrecycle])
	for _, a := range r.recycle[put:r.nrecycle] {
		r.pool.Put(a)
	}
	r.nrecycle = 0
	if r.sock.FillNeedsWakeup() {
		r.sock.WakeFill()
	}
}
