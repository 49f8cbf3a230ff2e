package memreg

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// newTestHeap maps a small UMEM (normal pages, fine for an unprivileged user) with heapSize
// heap bytes and returns its heap.
func newTestHeap(t testing.TB, heapSize int) (*UMEM, *Heap) {
	t.Helper()
	u, err := NewUMEM(UMEMOptions{FrameSize: 4096, Frames: 4, HeapSize: heapSize, HugePages: HugeOff})
	if err != nil {
		t.Fatalf("NewUMEM: %v", err)
	}
	t.Cleanup(func() { _ = u.Close() })
	h, err := u.NewHeap()
	if err != nil {
		t.Fatalf("NewHeap: %v", err)
	}
	return u, h
}

// checkHeap verifies the heap's internal invariants: free runs sorted, in bounds, granular,
// never adjacent (fully coalesced), disjoint from live buffers, and with live buffers tiling
// the rest exactly; and that Stats agrees.
func checkHeap(h *Heap) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	size := len(h.mem)
	type run struct {
		off, size int
		free      bool
	}
	var runs []run
	freeBytes, largest := 0, 0
	for i, s := range h.free {
		if s.size <= 0 || s.off < 0 || s.off+s.size > size || s.off%HeapGranule != 0 || s.size%HeapGranule != 0 {
			return fmt.Errorf("bad free run %d %+v in heap of %d", i, s, size)
		}
		if i > 0 && h.free[i-1].off+h.free[i-1].size >= s.off {
			return fmt.Errorf("free runs %+v and %+v overlap, touch or are unsorted", h.free[i-1], s)
		}
		freeBytes += s.size
		largest = max(largest, s.size)
		runs = append(runs, run{s.off, s.size, true})
	}
	inUse := 0
	for off, n := range h.live {
		r := roundGranule(n)
		if n <= 0 || off < 0 || off+r > size || off%HeapGranule != 0 {
			return fmt.Errorf("bad live buffer at %d of %d bytes", off, n)
		}
		inUse += r
		runs = append(runs, run{off, r, false})
	}
	if inUse != h.inUse || inUse+freeBytes != size {
		return fmt.Errorf("in use %d (counter %d) + free %d != size %d", inUse, h.inUse, freeBytes, size)
	}
	// Sorted by offset, the runs must tile [0, size) exactly.
	sortRuns := func(a, b run) int { return a.off - b.off }
	slices.SortFunc(runs, sortRuns)
	next := 0
	for _, r := range runs {
		if r.off != next {
			return fmt.Errorf("run at %d, expected %d (overlap or leak)", r.off, next)
		}
		next = r.off + r.size
	}
	if next != size {
		return fmt.Errorf("runs end at %d, heap is %d", next, size)
	}
	if largest != h.largestFree() {
		return fmt.Errorf("largest free %d vs %d", largest, h.largestFree())
	}
	return nil
}

func fill(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

func verify(b []byte, v byte) error {
	for i, c := range b {
		if c != v {
			return fmt.Errorf("byte %d of %d-byte buffer is %d, want %d (overlap)", i, len(b), c, v)
		}
	}
	return nil
}

func TestHeapNew(t *testing.T) {
	u, h := newTestHeap(t, 1<<20)
	if _, err := u.NewHeap(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("second NewHeap: %v, want ErrInvalid", err)
	}
	st := h.Stats()
	if st.Size != 1<<20 || st.Free != 1<<20 || st.LargestFree != 1<<20 || st.InUse != 0 || st.Allocs != 0 {
		t.Fatalf("fresh stats %+v", st)
	}
	noHeap, err := NewUMEM(UMEMOptions{FrameSize: 4096, Frames: 4, HugePages: HugeOff})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = noHeap.Close() }()
	if _, err := noHeap.NewHeap(); err == nil {
		t.Fatal("NewHeap on a umem without a heap region succeeded")
	}
	var nilU *UMEM
	if _, err := nilU.NewHeap(); err == nil {
		t.Fatal("NewHeap on nil umem succeeded")
	}
	closed, err := NewUMEM(UMEMOptions{FrameSize: 4096, Frames: 4, HeapSize: 4096, HugePages: HugeOff})
	if err != nil {
		t.Fatal(err)
	}
	_ = closed.Close()
	if _, err := closed.NewHeap(); err == nil {
		t.Fatal("NewHeap on closed umem succeeded")
	}
}

func TestHeapAllocBasics(t *testing.T) {
	u, h := newTestHeap(t, 1<<20)
	for _, size := range []int{1, 63, 64, 65, 1000, 4096, 70000} {
		b, err := h.Alloc(size, 0)
		if err != nil {
			t.Fatalf("Alloc(%d): %v", size, err)
		}
		if len(b) != size || cap(b) != size {
			t.Fatalf("Alloc(%d) len %d cap %d", size, len(b), cap(b))
		}
		if !h.Contains(b) {
			t.Fatalf("Alloc(%d) not contained", size)
		}
		off, ok := h.Offset(b)
		if !ok || off < u.FrameAreaEnd() || off+uint64(size) > uint64(u.Size()) || &u.Bytes()[off] != &b[0] {
			t.Fatalf("Offset(%d-byte buffer) = %d, %v", size, off, ok)
		}
		if addrOf(b)%HeapGranule != 0 {
			t.Fatalf("default alignment not %d", HeapGranule)
		}
	}
	if err := checkHeap(h); err != nil {
		t.Fatal(err)
	}
	// Bad arguments.
	for _, c := range []struct{ size, align int }{{0, 64}, {-1, 64}, {64, 3}, {64, -64}, {64, HeapMaxAlign * 2}, {64, 96}} {
		if _, err := h.Alloc(c.size, c.align); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Alloc(%d, %d): %v, want ErrInvalid", c.size, c.align, err)
		}
	}
	if _, err := h.Alloc(2<<20, 0); !errors.Is(err, ErrHeapExhausted) {
		t.Fatalf("oversized Alloc: %v, want ErrHeapExhausted", err)
	}
	if _, err := h.Alloc(int(^uint(0)>>1), 1); !errors.Is(err, ErrHeapExhausted) {
		t.Fatalf("max-int Alloc: %v, want ErrHeapExhausted", err)
	}
	// Contains/Offset on foreign and frame-area memory.
	if h.Contains(make([]byte, 10)) || h.Contains(nil) || h.Contains(u.Bytes()[:10]) || h.Contains(u.Bytes()) {
		t.Fatal("Contains true for memory outside the heap")
	}
	if _, ok := h.Offset(u.Bytes()[u.Size()-1:]); !ok {
		t.Fatal("Offset false for last heap byte")
	}
	if _, ok := h.Offset(u.Bytes()[u.FrameAreaEnd()-1 : u.FrameAreaEnd()+1]); ok {
		t.Fatal("Offset true for a slice straddling the heap start")
	}
}

func TestHeapAlignment(t *testing.T) {
	_, h := newTestHeap(t, 8<<20-16<<10) // stays within the default 8 MiB RLIMIT_MEMLOCK
	var bufs [][]byte
	for _, align := range []int{1, 2, 64, 128, 4096, 8192, 1 << 16, 1 << 20, 1 << 21} {
		for _, size := range []int{1, 100, 5000} {
			// Misalign the next free run first.
			pad, err := h.Alloc(64, 0)
			if err != nil {
				t.Fatal(err)
			}
			bufs = append(bufs, pad)
			b, err := h.Alloc(size, align)
			if errors.Is(err, ErrHeapExhausted) && align == 1<<21 {
				// The region may hold no 2 MiB-aligned address past the pads; fine.
				continue
			}
			if err != nil {
				t.Fatalf("Alloc(%d, %d): %v", size, align, err)
			}
			if addrOf(b)%uintptr(max(align, HeapGranule)) != 0 {
				t.Fatalf("Alloc(%d, %d) at %#x", size, align, addrOf(b))
			}
			bufs = append(bufs, b)
		}
	}
	if err := checkHeap(h); err != nil {
		t.Fatal(err)
	}
	for _, b := range bufs {
		if err := h.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	if st := h.Stats(); st.InUse != 0 || st.LargestFree != st.Size || st.Allocs != 0 {
		t.Fatalf("after freeing all: %+v", st)
	}
}

func TestHeapNoOverlap(t *testing.T) {
	_, h := newTestHeap(t, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	type buf struct {
		b []byte
		v byte
	}
	var live []buf
	for i := range 20000 {
		if len(live) > 0 && (rng.IntN(2) == 0 || len(live) > 200) {
			j := rng.IntN(len(live))
			if err := verify(live[j].b, live[j].v); err != nil {
				t.Fatalf("op %d: %v", i, err)
			}
			if err := h.Free(live[j].b); err != nil {
				t.Fatalf("op %d: Free: %v", i, err)
			}
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
			continue
		}
		size := 1 + rng.IntN(1<<rng.IntN(15))
		align := 1 << rng.IntN(13)
		b, err := h.Alloc(size, align)
		if errors.Is(err, ErrHeapExhausted) {
			continue
		}
		if err != nil {
			t.Fatalf("op %d: Alloc(%d, %d): %v", i, size, align, err)
		}
		v := byte(i)
		fill(b, v)
		live = append(live, buf{b, v})
		if i%1000 == 0 {
			if err := checkHeap(h); err != nil {
				t.Fatalf("op %d: %v", i, err)
			}
		}
	}
	for _, l := range live {
		if err := verify(l.b, l.v); err != nil {
			t.Fatal(err)
		}
	}
	if err := checkHeap(h); err != nil {
		t.Fatal(err)
	}
}

func TestHeapExhaustion(t *testing.T) {
	_, h := newTestHeap(t, 64<<10)
	var bufs [][]byte
	for {
		b, err := h.Alloc(4096, 0)
		if errors.Is(err, ErrHeapExhausted) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, b)
	}
	if len(bufs) != 16 {
		t.Fatalf("%d 4 KiB buffers from a 64 KiB heap", len(bufs))
	}
	_, err := h.Alloc(1, 1)
	if !errors.Is(err, ErrHeapExhausted) {
		t.Fatalf("Alloc on a full heap: %v", err)
	}
	t.Logf("exhaustion error: %v", err)
	if st := h.Stats(); st.Free != 0 || st.LargestFree != 0 || st.Allocs != 16 || st.InUse != 64<<10 {
		t.Fatalf("full stats %+v", st)
	}
	if err := h.Free(bufs[7]); err != nil {
		t.Fatal(err)
	}
	b, err := h.Alloc(4096, 4096)
	if err != nil {
		t.Fatalf("Alloc after Free: %v", err)
	}
	if &b[0] != &bufs[7][0] {
		t.Fatal("Alloc after Free did not reuse the freed buffer")
	}
}

func TestHeapCoalescing(t *testing.T) {
	for seed := range uint64(10) {
		_, h := newTestHeap(t, 1<<20)
		rng := rand.New(rand.NewPCG(seed, 7))
		// Carve the whole heap into pieces of random sizes.
		var bufs [][]byte
		left := h.Stats().Size
		for left > 0 {
			n := min(left, HeapGranule*(1+rng.IntN(64)))
			b, err := h.Alloc(n, 0)
			if err != nil {
				t.Fatalf("seed %d: Alloc(%d) with %d left: %v", seed, n, left, err)
			}
			bufs = append(bufs, b)
			left -= n
		}
		if st := h.Stats(); st.Free != 0 || st.Allocs != len(bufs) {
			t.Fatalf("seed %d: full stats %+v", seed, st)
		}
		rng.Shuffle(len(bufs), func(i, j int) { bufs[i], bufs[j] = bufs[j], bufs[i] })
		for _, b := range bufs {
			if err := h.Free(b); err != nil {
				t.Fatal(err)
			}
			if err := checkHeap(h); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
		}
		if len(h.free) != 1 {
			t.Fatalf("seed %d: %d free runs after freeing all", seed, len(h.free))
		}
		whole, err := h.Alloc(h.Stats().Size, 0)
		if err != nil {
			t.Fatalf("seed %d: whole-heap Alloc after coalescing: %v", seed, err)
		}
		if err := h.Free(whole); err != nil {
			t.Fatal(err)
		}
	}
}

func TestHeapFreeErrors(t *testing.T) {
	u, h := newTestHeap(t, 1<<20)
	a, err := h.Alloc(1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.Alloc(200, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Free(b); err != nil {
		t.Fatal(err)
	}
	before := h.Stats()
	freeBefore := append([]heapSpan(nil), h.free...)
	bad := map[string][]byte{
		"double":           b,
		"foreign":          make([]byte, 1000),
		"nil":              nil,
		"empty":            a[:0],
		"sub-slice start":  a[64:],
		"sub-slice length": a[:999],
		"longer":           a[:1000:1000][:0:0],
		"frame area":       u.Bytes()[:1000],
		"free heap bytes":  h.mem[len(h.mem)-100:],
		"extended":         h.mem[0:2000],
	}
	for name, s := range bad {
		if err := h.Free(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("Free(%s): %v, want ErrInvalid", name, err)
		}
		if st := h.Stats(); st != before {
			t.Fatalf("Free(%s) changed stats %+v -> %+v", name, before, st)
		}
		if fmt.Sprint(h.free) != fmt.Sprint(freeBefore) {
			t.Fatalf("Free(%s) changed the free list", name)
		}
	}
	if err := h.Free(a); err != nil {
		t.Fatal(err)
	}
	if err := h.Free(a); !errors.Is(err, ErrInvalid) {
		t.Fatalf("double Free: %v", err)
	}
	if err := checkHeap(h); err != nil {
		t.Fatal(err)
	}
}

func TestHeapStats(t *testing.T) {
	_, h := newTestHeap(t, 1<<20)
	a, _ := h.Alloc(1, 0)
	b, _ := h.Alloc(100, 0)
	c, _ := h.Alloc(4096, 4096)
	st := h.Stats()
	if st.Allocs != 3 || st.InUse != 64+128+4096 || st.Free != st.Size-st.InUse {
		t.Fatalf("stats %+v", st)
	}
	for _, x := range [][]byte{a, b, c} {
		if err := h.Free(x); err != nil {
			t.Fatal(err)
		}
	}
	if st := h.Stats(); st.Allocs != 0 || st.InUse != 0 || st.LargestFree != st.Size {
		t.Fatalf("stats after free %+v", st)
	}
}

func TestHeapAfterClose(t *testing.T) {
	u, h := newTestHeap(t, 4096)
	_ = u.Close()
	if _, err := h.Alloc(64, 0); err == nil {
		t.Fatal("Alloc after umem Close succeeded")
	}
}

func TestHeapConcurrent(t *testing.T) {
	_, h := newTestHeap(t, 1<<20)
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			var mine [][]byte
			for i := range 3000 {
				if len(mine) > 0 && rng.IntN(3) == 0 {
					j := rng.IntN(len(mine))
					if err := verify(mine[j], byte(g)); err != nil {
						errc <- err
						return
					}
					if err := h.Free(mine[j]); err != nil {
						errc <- err
						return
					}
					mine[j] = mine[len(mine)-1]
					mine = mine[:len(mine)-1]
					continue
				}
				b, err := h.Alloc(1+rng.IntN(4000), 1<<rng.IntN(10))
				if errors.Is(err, ErrHeapExhausted) {
					continue
				}
				if err != nil {
					errc <- err
					return
				}
				fill(b, byte(g))
				mine = append(mine, b)
				if i%500 == 0 {
					_ = h.Stats()
				}
			}
			for _, b := range mine {
				if err := verify(b, byte(g)); err != nil {
					errc <- err
					return
				}
				if err := h.Free(b); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if st := h.Stats(); st.Allocs != 0 || st.LargestFree != st.Size {
		t.Fatalf("after concurrent run: %+v", st)
	}
	if err := checkHeap(h); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkHeapAllocFree(b *testing.B) {
	for _, live := range []int{0, 100} {
		b.Run(fmt.Sprintf("live=%d", live), func(b *testing.B) {
			_, h := newTestHeap(b, 1<<20)
			// Keep some buffers live with holes between them, so the free list is not trivial.
			var keep [][]byte
			for range live * 2 {
				x, err := h.Alloc(256, 0)
				if err != nil {
					b.Fatal(err)
				}
				keep = append(keep, x)
			}
			for i := 0; i < len(keep); i += 2 {
				_ = h.Free(keep[i])
			}
			b.ReportAllocs()
			for b.Loop() {
				x, err := h.Alloc(1500, 64)
				if err != nil {
					b.Fatal(err)
				}
				if err := h.Free(x); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
