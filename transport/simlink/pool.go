package simlink

// bufState values of pool.owner; a positive value is the id of the link a buffer is lent
// to (returned by its Receive, not yet Released).
const (
	bufFree   int32 = 0  // in the free list
	bufQueued int32 = -1 // holds a datagram in some host's queue
)

// pool is the network's datagram buffers: fixed-size byte slices carved from a few large
// slabs, handed out by index. It grows only when it runs dry (doubling), so in steady state
// getting and putting a buffer allocates nothing. Guarded by Network.mu.
type pool struct {
	size  int      // bytes per buffer (the network's MaxPayload)
	bufs  [][]byte // buffer i, with len and cap == size
	owner []int32  // bufFree, bufQueued, or the id of the link it is lent to
	free  []int32  // indices of free buffers (a stack)
	slabs []slab
	last  int // the slab the previous find hit
}

// slab is one allocation holding consecutive buffers first, first+1, ...
type slab struct {
	mem   []byte
	base  uintptr // address of mem[0]
	first int32
}

func newPool(size, n int) *pool {
	p := &pool{size: size}
	p.grow(n)
	return p
}

// grow adds n buffers in one slab.
func (p *pool) grow(n int) {
	n = max(n, 1)
	mem := make([]byte, n*p.size)
	first := int32(len(p.bufs))
	p.slabs = append(p.slabs, slab{mem: mem, base: addrOf(mem), first: first})
	for i := n - 1; i >= 0; i-- {
		p.free = append(p.free, first+int32(i))
	}
	for i := 0; i < n; i++ {
		p.bufs = append(p.bufs, mem[i*p.size:(i+1)*p.size:(i+1)*p.size])
		p.owner = append(p.owner, bufFree)
	}
}

// get takes a free buffer, growing the pool if there is none, and marks it queued.
func (p *pool) get() int32 {
	if len(p.free) == 0 {
		p.grow(len(p.bufs))
	}
	i := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	p.owner[i] = bufQueued
	return i
}

// put returns buffer i to the free list.
func (p *pool) put(i int32) {
	p.owner[i] = bufFree
	p.free = append(p.free, i)
}

// find returns the index of the buffer that b points into (b may be any view of it,
// trimmed to nothing, or split), or false if b is not in the pool. (Slicing a view down to
// capacity 0 keeps its old start address, so even that still finds its buffer.)
func (p *pool) find(b []byte) (int32, bool) {
	a := addrOf(b)
	if a == 0 {
		return 0, false
	}
	if s := &p.slabs[p.last]; a >= s.base && a-s.base < uintptr(len(s.mem)) {
		return s.first + int32((a-s.base)/uintptr(p.size)), true
	}
	for k := range p.slabs {
		if s := &p.slabs[k]; a >= s.base && a-s.base < uintptr(len(s.mem)) {
			p.last = k
			return s.first + int32((a-s.base)/uintptr(p.size)), true
		}
	}
	return 0, false
}
