package faultlink

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/xdpndk/xdpndk/transport/link"
)

// Datagram is one UDP payload with its addresses, as Inject takes it and a Recorder keeps
// it.
type Datagram struct {
	// Remote is the peer: the source of a received datagram.
	Remote netip.AddrPort
	// LocalPort is the port it was sent to.
	LocalPort uint16
	// Data is the UDP payload.
	Data []byte
}

// injector queues datagrams for Receive. Inject (any goroutine) and the engine share it
// under mu; the engine takes the lock only while ready says something waits, or to give
// back buffers it was handed.
type injector struct {
	mu    sync.Mutex
	arena []byte // n buffers of size bytes, contiguous so Release can recognise them
	size  int
	free  []int32
	ring  []int32 // queued buffers, FIFO
	head  int
	count int
	meta  []Datagram // Data is the buffer's used part
	ready atomic.Int32

	out int // engine goroutine: injected datagrams handed out and not released
}

func (j *injector) init(n, size int) {
	if n == 0 {
		return
	}
	j.arena = make([]byte, n*size)
	j.size = size
	j.free = make([]int32, n)
	j.ring = make([]int32, n)
	j.meta = make([]Datagram, n)
	for i := range j.free {
		j.free[i] = int32(i)
	}
}

// owns reports whether b is a view of an injection buffer, and which.
func (j *injector) owns(b []byte) (int32, bool) {
	if len(j.arena) == 0 || cap(b) == 0 {
		return 0, false
	}
	base, a := addrOf(j.arena), addrOf(b)
	if a < base || a-base >= uintptr(len(j.arena)) {
		return 0, false
	}
	return int32((a - base) / uintptr(j.size)), true
}

// Inject queues a copy of d to be returned by Receive ahead of the inner link's datagrams,
// as if it had arrived from d.Remote at d.LocalPort (0: the link's port). It wakes a
// waiting engine. Safe from any goroutine. Errors: ErrInjectDisabled, ErrInjectFull, and
// an error wrapping link.ErrTooLarge for an empty datagram or one over MaxPayload.
func (l *Link) Inject(d Datagram) error {
	j := &l.inj
	if len(j.arena) == 0 {
		return ErrInjectDisabled
	}
	if len(d.Data) == 0 || len(d.Data) > j.size {
		return fmt.Errorf("faultlink: inject %d bytes (max %d): %w", len(d.Data), j.size, link.ErrTooLarge)
	}
	if d.LocalPort == 0 {
		d.LocalPort = l.inner.LocalAddr().Port()
	}
	j.mu.Lock()
	if len(j.free) == 0 {
		j.mu.Unlock()
		return ErrInjectFull
	}
	b := j.free[len(j.free)-1]
	j.free = j.free[:len(j.free)-1]
	buf := j.arena[int(b)*j.size : int(b)*j.size+len(d.Data) : int(b)*j.size+len(d.Data)]
	copy(buf, d.Data)
	j.meta[b] = Datagram{Remote: d.Remote, LocalPort: d.LocalPort, Data: buf}
	j.ring[(j.head+j.count)%len(j.ring)] = b
	j.count++
	j.ready.Add(1)
	j.mu.Unlock()
	l.inner.Wake()
	return nil
}

// Receive implements link.Link: injected datagrams first, then the inner link's (which
// a Recorder, if any, copies). It also sends held datagrams that are due.
func (l *Link) Receive(pkts []link.Packet) (int, error) {
	l.flush(l.now(), l.inner, &l.ctr)
	k := 0
	if j := &l.inj; j.ready.Load() > 0 && len(pkts) > 0 {
		j.mu.Lock()
		for k < len(pkts) && j.count > 0 {
			b := j.ring[j.head]
			j.head = (j.head + 1) % len(j.ring)
			j.count--
			m := &j.meta[b]
			p := &pkts[k]
			*p = link.Packet{Remote: m.Remote, LocalPort: m.LocalPort, NSegs: 1}
			p.Segs[0] = m.Data
			k++
		}
		j.ready.Add(int32(-k))
		j.mu.Unlock()
		j.out += k
		l.ctr.injected.Add(uint64(k))
	}
	n, err := l.inner.Receive(pkts[k:])
	if err != nil {
		if k > 0 {
			return k, nil
		}
		return 0, err
	}
	if r := l.rec.Load(); r != nil && n > 0 {
		l.ctr.recorded.Add(uint64(r.add(pkts[k : k+n])))
	}
	return k + n, nil
}

// Release implements link.Link: injected datagrams' buffers go back to the injection
// queue, the others to the inner link.
func (l *Link) Release(pkts []link.Packet) {
	j := &l.inj
	if j.out == 0 {
		l.inner.Release(pkts)
		return
	}
	start := 0 // pkts[start:i] are the inner link's, released in runs
	for i := range pkts {
		p := &pkts[i]
		b, ok := j.owns(p.Segs[0])
		if p.NSegs == 0 || !ok {
			continue
		}
		if start < i {
			l.inner.Release(pkts[start:i])
		}
		start = i + 1
		j.mu.Lock()
		j.free = append(j.free, b)
		j.mu.Unlock()
		j.out--
		*p = link.Packet{}
	}
	if start < len(pkts) {
		l.inner.Release(pkts[start:])
	}
}

// Recorder keeps copies of datagrams the inner link received: every stride-th one, up to
// its capacity (later ones are not kept). It is armed by Link.Record. Len and Datagrams are
// safe from any goroutine while the engine records.
type Recorder struct {
	stride uint64
	slots  []Datagram // Data has capacity MaxPayload; published up to n
	n      atomic.Int32
	seen   uint64 // engine goroutine only
}

// Record arms a new Recorder of capacity datagrams, keeping every stride-th datagram the
// inner link receives from now on (stride < 1 means 1), and returns it. Its buffers are
// allocated here. It replaces the Recorder armed before, which keeps what it has. Safe from
// any goroutine.
func (l *Link) Record(capacity, stride int) *Recorder {
	r := &Recorder{stride: uint64(max(stride, 1)), slots: make([]Datagram, max(capacity, 0))}
	size := l.inner.MaxPayload()
	arena := make([]byte, len(r.slots)*size)
	for i := range r.slots {
		r.slots[i].Data = arena[i*size : i*size : (i+1)*size]
	}
	l.rec.Store(r)
	return r
}

// StopRecording disarms the current Recorder (it keeps what it has). Safe from any
// goroutine; a datagram being recorded concurrently may still be kept.
func (l *Link) StopRecording() { l.rec.Store(nil) }

// add copies what it keeps of pkts and returns how many. Engine goroutine.
func (r *Recorder) add(pkts []link.Packet) int {
	kept := 0
	n := int(r.n.Load())
	for i := range pkts {
		r.seen++
		if n >= len(r.slots) {
			break
		}
		if (r.seen-1)%r.stride != 0 {
			continue
		}
		p := &pkts[i]
		s := &r.slots[n]
		s.Remote, s.LocalPort = p.Remote, p.LocalPort
		s.Data = s.Data[:0]
		for k := 0; k < int(p.NSegs) && k < link.MaxSegments; k++ {
			s.Data = append(s.Data, p.Segs[k]...)
		}
		n++
		r.n.Store(int32(n))
		kept++
	}
	return kept
}

// Len returns how many datagrams the Recorder holds.
func (r *Recorder) Len() int { return int(r.n.Load()) }

// Datagrams returns copies of the datagrams the Recorder holds, oldest first.
func (r *Recorder) Datagrams() []Datagram {
	n := r.Len()
	out := make([]Datagram, n)
	for i := range out {
		s := &r.slots[i]
		out[i] = Datagram{Remote: s.Remote, LocalPort: s.LocalPort, Data: append([]byte(nil), s.Data...)}
	}
	return out
}
