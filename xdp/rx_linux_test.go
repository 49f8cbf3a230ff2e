package xdp

import "testing"

// lagRing is a fill ring of size entries whose consumer publishes lazily, as the kernel's
// does: frames it has taken (and delivered) still count as occupying the ring until
// publish.
type lagRing struct {
	size    int
	ring    []uint64 // entries not yet taken
	lag     int      // entries taken but not yet published as consumed
	wakeups int
	wake    bool
}

func (f *lagRing) Fill(addrs []uint64) int {
	n := min(len(addrs), f.size-len(f.ring)-f.lag)
	f.ring = append(f.ring, addrs[:n]...)
	return n
}

func (f *lagRing) FillNeedsWakeup() bool { return f.wake }

func (f *lagRing) WakeFill() { f.wakeups++ }

// take has the kernel take n frames from the ring and deliver them, without publishing.
func (f *lagRing) take(n int) []uint64 {
	got := append([]uint64(nil), f.ring[:n]...)
	f.ring = f.ring[n:]
	f.lag += n
	return got
}

func (f *lagRing) publish() { f.lag = 0 }

// TestRxRepaysFillRing checks that frames handed back while the fill ring looks full (its
// consumer index lags) are repaid to it once it has room, also after the pool ran dry,
// and that the frames stay accounted for throughout: pool + ring share = all frames.
func TestRxRepaysFillRing(t *testing.T) {
	_, pool := testPool(t, 16, 12)
	f := &lagRing{size: 8, wake: true}
	r := startRx(rxState{fill: f, pool: pool, fsize: 4096, target: 8})
	check := func(step string, wantOwed int) {
		t.Helper()
		if r.owed != wantOwed {
			t.Errorf("%s: owed %d, want %d", step, r.owed, wantOwed)
		}
		if got := pool.Len() + r.share(); got != pool.Cap() {
			t.Errorf("%s: pool %d + share %d = %d frames, want %d", step, pool.Len(), r.share(), got, pool.Cap())
		}
		if len(f.ring) != r.share() {
			t.Errorf("%s: the kernel holds %d frames, the share says %d", step, len(f.ring), r.share())
		}
	}
	if len(f.ring) != 8 {
		t.Fatalf("start: ring holds %d frames, want 8", len(f.ring))
	}
	check("start", 0)

	// The kernel takes 5 and publishes none: the 5 received frames find no room.
	for _, a := range f.take(5) {
		r.recycleFrame(a + 100) // any offset inside the frame
	}
	r.flushRecycle()
	check("lagging consumer", 5)

	// It publishes: the next Receive or Wait repays from the pool.
	f.publish()
	w := f.wakeups
	r.repay()
	check("published", 0)
	if len(f.ring) != 8 {
		t.Errorf("published: ring holds %d frames, want 8", len(f.ring))
	}
	if f.wakeups == w {
		t.Error("published: repay did not wake the kernel's fill processing")
	}

	// Again, but the pool is empty when room appears (frames out on TX, say).
	for _, a := range f.take(3) {
		r.recycleFrame(a)
	}
	r.flushRecycle()
	check("lagging again", 3)
	var tx []uint64
	for {
		a, ok := pool.Get()
		if !ok {
			break
		}
		tx = append(tx, a)
	}
	f.publish()
	r.repay()
	if r.owed != 3 {
		t.Errorf("empty pool: owed %d, want 3", r.owed)
	}
	for _, a := range tx {
		pool.Put(a)
	}
	r.repay()
	check("pool refilled", 0)
	if len(f.ring) != 8 {
		t.Errorf("pool refilled: ring holds %d frames, want 8", len(f.ring))
	}

	// A flush that finds room for some repays the older debt as well.
	for _, a := range f.take(4) {
		r.recycleFrame(a)
	}
	r.flushRecycle()
	check("third lag", 4)
	f.lag = 2 // half of it published
	for _, a := range f.take(2) {
		r.recycleFrame(a)
	}
	r.flushRecycle()
	f.publish()
	r.repay()
	check("settled", 0)
	if len(f.ring) != 8 {
		t.Errorf("settled: ring holds %d frames, want 8", len(f.ring))
	}
}
