package xsk

import "sync/atomic"

// ring is one of an AF_XDP socket's four single-producer/single-consumer rings, shared with
// the kernel through mmap'd memory (the kernel's Documentation/networking/af_xdp.rst).
//
// We are the producer of the fill and TX rings and the consumer of the RX and completion
// rings. The shared producer and consumer indices are free-running uint32 counters; only the
// side that owns an index writes it, with an atomic store after the entries are written (or
// read), and the other side's index is read with an atomic load. Both are read at most once
// per batch: cachedProd and cachedCons are our private copies, refreshed only when the cached
// view cannot satisfy the batch asked for.
type ring struct {
	producer *uint32 // shared; written by the producer side only
	consumer *uint32 // shared; written by the consumer side only
	flags    *uint32 // shared; written by the kernel (XDP_RING_NEED_WAKEUP)
	mask     uint32  // size-1; size is a power of two
	size     uint32

	// cachedProd and cachedCons are our copies of the indices. The one for the index we own
	// runs ahead of the shared value between reserve/peek and submit/release.
	cachedProd uint32
	cachedCons uint32
}

// free returns how many entries can be reserved, up to want, refreshing the consumer index
// from shared memory only if the cached view has fewer than want. Producer side.
func (r *ring) free(want uint32) uint32 {
	n := r.size - (r.cachedProd - r.cachedCons)
	if n >= want {
		return want
	}
	r.cachedCons = atomic.LoadUint32(r.consumer)
	n = r.size - (r.cachedProd - r.cachedCons)
	return min(n, want)
}

// reserve takes n entries (n <= free(n)) and returns the index of the first. Producer side.
func (r *ring) reserve(n uint32) uint32 {
	i := r.cachedProd
	r.cachedProd += n
	return i
}

// submit publishes every reserved entry to the kernel. Producer side.
func (r *ring) submit() { atomic.StoreUint32(r.producer, r.cachedProd) }

// pending returns how many submitted entries the kernel has not consumed yet. Producer side.
func (r *ring) pending() uint32 {
	r.cachedCons = atomic.LoadUint32(r.consumer)
	return r.cachedProd - r.cachedCons
}

// available returns how many entries can be read, up to want, refreshing the producer index
// from shared memory only if the cached view has fewer than want. Consumer side.
func (r *ring) available(want uint32) uint32 {
	n := r.cachedProd - r.cachedCons
	if n < want {
		r.cachedProd = atomic.LoadUint32(r.producer)
		n = r.cachedProd - r.cachedCons
	}
	return min(n, want)
}

// peek takes n entries (n <= available(n)) and returns the index of the first. Consumer side.
func (r *ring) peek(n uint32) uint32 {
	i := r.cachedCons
	r.cachedCons += n
	return i
}

// unpeek gives back the last n entries taken by peek and not yet released. Consumer side.
func (r *ring) unpeek(n uint32) { r.cachedCons -= n }

// release tells the kernel that every peeked entry has been read. Consumer side.
func (r *ring) release() { atomic.StoreUint32(r.consumer, r.cachedCons) }

// needWakeup reports whether the kernel asks for a system call to make progress on this ring
// (XDP_USE_NEED_WAKEUP).
func (r *ring) needWakeup() bool { return atomic.LoadUint32(r.flags)&ringNeedWakeup != 0 }

// ringNeedWakeup is XDP_RING_NEED_WAKEUP from linux/if_xdp.h.
const ringNeedWakeup = 1 << 0
