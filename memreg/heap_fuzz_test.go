package memreg

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// fuzzHeapSize is the heap of each FuzzHeap input: small, so exhaustion is common.
const fuzzHeapSize = 64 << 10

// FuzzHeap decodes the input into a sequence of Alloc and Free calls (valid and invalid) and
// checks the heap against a model after each: live buffers in bounds, aligned, disjoint and
// holding their fill pattern; Stats matching the model; the allocator's internal invariants
// (checkHeap); bad calls changing nothing; and exhaustion reported only when no gap between
// live buffers could hold the request.
func FuzzHeap(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 0, 2, 2, 0, 0})
	f.Add([]byte{0, 255, 255, 0, 255, 255, 2, 1, 0, 3, 0, 0, 0, 16, 0})
	f.Add([]byte{0x60, 0, 4, 0x80, 0, 8, 2, 0, 0, 0xa8, 0, 0x10, 3, 1, 0, 7, 0, 0})
	f.Add([]byte{0xb0, 0xff, 0x3f, 0xb8, 0, 1, 1, 0, 0, 0x50, 1, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		u, err := NewUMEM(UMEMOptions{FrameSize: 4096, Frames: 1, HeapSize: fuzzHeapSize, HugePages: HugeOff})
		if err != nil {
			t.Fatalf("NewUMEM: %v", err)
		}
		defer func() { _ = u.Close() }()
		h, err := u.NewHeap()
		if err != nil {
			t.Fatal(err)
		}
		if err := runHeapOps(h, data); err != nil {
			t.Fatal(err)
		}
	})
}

type modelBuf struct {
	b     []byte
	align int
	tag   byte
}

func runHeapOps(h *Heap, data []byte) error {
	var live []modelBuf
	var freed [][]byte // recently freed buffers, for double frees
	tag := byte(0)
	for i := 0; i+3 <= len(data) && i < 3*2000; i += 3 {
		op, arg := data[i], int(data[i+1])|int(data[i+2])<<8
		switch op & 3 {
		case 0, 1: // Alloc
			size := arg%(fuzzHeapSize+256) - 8 // a few invalid sizes, a few too large
			var align int
			switch a := int(op >> 2); {
			case a < 22:
				align = 1 << a
			case a == 22:
				align = 0
			case a == 23:
				align = 3 * HeapGranule
			default:
				align = 1 << a // too large
			}
			valid := size > 0 && align >= 0 && align <= HeapMaxAlign && align&(align-1) == 0
			fits := valid && modelFits(h, live, size, max(align, HeapGranule))
			b, err := h.Alloc(size, align)
			switch {
			case !valid:
				if !errors.Is(err, ErrInvalid) {
					return fmt.Errorf("Alloc(%d, %d): %v, want ErrInvalid", size, align, err)
				}
			case err == nil:
				if len(b) != size || cap(b) != size {
					return fmt.Errorf("Alloc(%d, %d): len %d cap %d", size, align, len(b), cap(b))
				}
				if addrOf(b)%uintptr(max(align, HeapGranule)) != 0 {
					return fmt.Errorf("Alloc(%d, %d) at %#x: misaligned", size, align, addrOf(b))
				}
				tag++
				fill(b, tag)
				live = append(live, modelBuf{b, align, tag})
			case errors.Is(err, ErrHeapExhausted):
				if fits {
					return fmt.Errorf("Alloc(%d, %d): %v, but a gap fits it", size, align, err)
				}
			default:
				return fmt.Errorf("Alloc(%d, %d): %v", size, align, err)
			}
		case 2: // Free a live buffer
			if len(live) == 0 {
				continue
			}
			j := arg % len(live)
			if err := h.Free(live[j].b); err != nil {
				return fmt.Errorf("Free(live %d): %v", j, err)
			}
			freed = append(freed, live[j].b)
			if len(freed) > 8 {
				freed = freed[1:]
			}
			live = slices.Delete(live, j, j+1)
		case 3: // a bad Free, which must change nothing
			var bad []byte
			switch k := int(op>>2) % 4; {
			case k == 0 && len(freed) > 0:
				bad = freed[arg%len(freed)] // double free (unless reallocated identically)
				if slices.ContainsFunc(live, func(m modelBuf) bool {
					return addrOf(m.b) == addrOf(bad) && len(m.b) == len(bad)
				}) {
					continue
				}
			case k == 1 && len(live) > 0 && len(live[arg%len(live)].b) > 1:
				bad = live[arg%len(live)].b[1:]
			case k == 2 && len(live) > 0 && len(live[arg%len(live)].b) > 1:
				bad = live[arg%len(live)].b[:len(live[arg%len(live)].b)-1]
			default:
				bad = h.mem[(arg*HeapGranule)%len(h.mem):][:1]
				if slices.ContainsFunc(live, func(m modelBuf) bool {
					return addrOf(m.b) == addrOf(bad) && len(m.b) == 1
				}) {
					continue
				}
			}
			before := h.Stats()
			if err := h.Free(bad); !errors.Is(err, ErrInvalid) {
				return fmt.Errorf("bad Free (kind %d): %v, want ErrInvalid", op>>2, err)
			}
			if st := h.Stats(); st != before {
				return fmt.Errorf("bad Free changed stats %+v -> %+v", before, st)
			}
		}
		if err := checkModel(h, live); err != nil {
			return fmt.Errorf("after op %d (%#x %d): %v", i/3, op, arg, err)
		}
	}
	for _, m := range live {
		if err := h.Free(m.b); err != nil {
			return err
		}
	}
	if st := h.Stats(); st.Allocs != 0 || st.InUse != 0 || st.LargestFree != st.Size {
		return fmt.Errorf("after freeing everything: %+v", st)
	}
	return checkHeap(h)
}

// modelGaps returns the heap-relative [start, end) gaps between the model's live buffers
// (each rounded up to HeapGranule).
func modelGaps(h *Heap, live []modelBuf) [][2]int {
	type iv struct{ off, end int }
	var ivs []iv
	for _, m := range live {
		off := int(addrOf(m.b) - h.base)
		ivs = append(ivs, iv{off, off + roundGranule(len(m.b))})
	}
	slices.SortFunc(ivs, func(a, b iv) int { return a.off - b.off })
	var gaps [][2]int
	next := 0
	for _, v := range ivs {
		if v.off > next {
			gaps = append(gaps, [2]int{next, v.off})
		}
		next = v.end
	}
	if next < len(h.mem) {
		gaps = append(gaps, [2]int{next, len(h.mem)})
	}
	return gaps
}

// modelFits reports whether some gap of the model could hold size bytes at alignment align.
func modelFits(h *Heap, live []modelBuf, size, align int) bool {
	for _, g := range modelGaps(h, live) {
		start := int(alignUp(h.base+uintptr(g[0]), uintptr(align)) - h.base)
		if start <= g[1] && roundGranule(size) <= g[1]-start {
			return true
		}
	}
	return false
}

// checkModel compares the heap with the model's live buffers.
func checkModel(h *Heap, live []modelBuf) error {
	if err := checkHeap(h); err != nil {
		return err
	}
	inUse := 0
	for _, m := range live {
		if !h.Contains(m.b) {
			return fmt.Errorf("live %d-byte buffer outside the heap", len(m.b))
		}
		if err := verify(m.b, m.tag); err != nil {
			return err
		}
		inUse += roundGranule(len(m.b))
	}
	// Disjointness: sorted by address, each buffer ends before the next begins.
	sorted := slices.Clone(live)
	slices.SortFunc(sorted, func(a, b modelBuf) int { return int(addrOf(a.b)) - int(addrOf(b.b)) })
	for i := 1; i < len(sorted); i++ {
		if addrOf(sorted[i-1].b)+uintptr(len(sorted[i-1].b)) > addrOf(sorted[i].b) {
			return fmt.Errorf("live buffers overlap")
		}
	}
	st := h.Stats()
	if st.Allocs != len(live) || st.InUse != inUse || st.Free != st.Size-inUse {
		return fmt.Errorf("stats %+v, model has %d buffers of %d bytes", st, len(live), inUse)
	}
	gapMax := 0
	for _, g := range modelGaps(h, live) {
		gapMax = max(gapMax, g[1]-g[0])
	}
	if st.LargestFree != gapMax {
		return fmt.Errorf("LargestFree %d, model's largest gap %d", st.LargestFree, gapMax)
	}
	return nil
}
