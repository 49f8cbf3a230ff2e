package memreg

import (
	"testing"
)

// newTestUMEM maps a small UMEM; small enough for the default RLIMIT_MEMLOCK of an
// unprivileged user.
func newTestUMEM(t testing.TB, opts UMEMOptions) *UMEM {
	t.Helper()
	u, err := NewUMEM(opts)
	if err != nil {
		t.Fatalf("NewUMEM(%+v): %v", opts, err)
	}
	t.Cleanup(func() {
		if err := u.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return u
}

func TestUMEMLayout(t *testing.T) {
	u := newTestUMEM(t, UMEMOptions{FrameSize: 2048, Frames: 16, HeapSize: 5000, HugePages: HugeOff})
	if u.FrameSize() != 2048 || u.Frames() != 16 {
		t.Fatalf("frame size %d frames %d, want 2048 and 16", u.FrameSize(), u.Frames())
	}
	if got := u.FrameAreaEnd(); got != 16*2048 {
		t.Fatalf("FrameAreaEnd = %d, want %d", got, 16*2048)
	}
	// The heap is rounded up to whole frames.
	if got := len(u.Heap()); got != 3*2048 {
		t.Fatalf("heap is %d bytes, want %d", got, 3*2048)
	}
	if u.Pages() != PagesNormal {
		t.Fatalf("HugeOff gave %v pages", u.Pages())
	}
	// The memory is writable end to end.
	b := u.Bytes()
	b[0], b[len(b)-1] = 1, 2
	if !u.InFrameArea(16*2048-1) || u.InFrameArea(16*2048) {
		t.Fatal("InFrameArea boundary wrong")
	}
	f := u.Frame(2048 + 100)
	if len(f) != 2048 || cap(f) != 2048 || &f[0] != &b[2048] {
		t.Fatal("Frame did not return the containing frame")
	}
}

func TestUMEMReportsPages(t *testing.T) {
	u := newTestUMEM(t, UMEMOptions{FrameSize: 4096, Frames: 1024, HugePages: HugeAuto})
	t.Logf("HugeAuto got %v pages", u.Pages())
	if u.Pages() != PagesHugeTLB && u.Pages() != PagesTransparentHuge && u.Pages() != PagesNormal {
		t.Fatalf("unknown page kind %v", u.Pages())
	}
	if u.Pages() == PagesHugeTLB && u.Size()%(2<<20) != 0 {
		t.Fatalf("hugetlb umem of %d bytes is not whole huge pages", u.Size())
	}
}

func TestUMEMOptionsRejected(t *testing.T) {
	for _, o := range []UMEMOptions{
		{FrameSize: 1000},
		{FrameSize: 8192},
		{Frames: -1},
		{HeapSize: -5},
		{HugePages: HugePages(7)},
		{Frames: 1 << 30, FrameSize: 4096},
	} {
		if u, err := NewUMEM(o); err == nil {
			u.Close()
			t.Errorf("NewUMEM(%+v) succeeded, want an error", o)
		}
	}
}

func TestFramePool(t *testing.T) {
	u := newTestUMEM(t, UMEMOptions{FrameSize: 2048, Frames: 8, HugePages: HugeOff})
	p1, err := u.NewFramePool(5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.NewFramePool(4); err == nil {
		t.Fatal("carving 4 frames of the 3 left succeeded")
	}
	p2, err := u.NewFramePool(3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.NewFramePool(0); err == nil {
		t.Fatal("an empty pool was carved")
	}
	seen := map[uint64]bool{}
	for range 5 {
		a, ok := p1.Get()
		if !ok || a%2048 != 0 || seen[a] || !p1.Owns(a) || p2.Owns(a) {
			t.Fatalf("Get gave %d ok=%v (seen %v)", a, ok, seen[a])
		}
		seen[a] = true
	}
	if _, ok := p1.Get(); ok {
		t.Fatal("Get from an empty pool succeeded")
	}
	// Put takes any offset inside one of its frames and stores the frame start.
	for a := range seen {
		if !p1.Put(a + 17) {
			t.Fatalf("Put(%d) refused", a+17)
		}
	}
	if p1.Len() != 5 || p1.Cap() != 5 {
		t.Fatalf("Len %d Cap %d, want 5 5", p1.Len(), p1.Cap())
	}
	// A double free and a foreign frame change nothing.
	if p1.Put(0) {
		t.Fatal("Put into a full pool succeeded")
	}
	a, _ := p2.Get()
	if p1.Put(a) {
		t.Fatal("p1 took a frame of p2")
	}
	for range 5 {
		b, _ := p1.Get()
		if b%2048 != 0 || !seen[b] {
			t.Fatalf("Get after Put gave %d", b)
		}
	}
	if p1.Refused() != 2 {
		t.Fatalf("Refused %d, want 2", p1.Refused())
	}
}

// TestFramePoolDoubleFree returns a frame twice while the pool has room: the second Put is
// refused and counted, and the frame is handed out once only.
func TestFramePoolDoubleFree(t *testing.T) {
	u := newTestUMEM(t, UMEMOptions{FrameSize: 4096, Frames: 70, HugePages: HugeOff})
	if _, err := u.NewFramePool(3); err != nil { // the pool under test starts at frame 3
		t.Fatal(err)
	}
	p, err := u.NewFramePool(67) // more than one word of free bits
	if err != nil {
		t.Fatal(err)
	}
	var taken []uint64
	for range 67 {
		a, ok := p.Get()
		if !ok {
			t.Fatal("pool ran dry early")
		}
		taken = append(taken, a)
	}
	for _, i := range []int{0, 1, 64, 66} {
		a := taken[i]
		if !p.Put(a + 5) {
			t.Fatalf("first Put(%d) refused", a+5)
		}
		if p.Put(a) || p.Put(a+4095) {
			t.Fatalf("frame %d taken back twice", a)
		}
	}
	if p.Len() != 4 || p.Refused() != 8 {
		t.Fatalf("Len %d Refused %d, want 4 and 8", p.Len(), p.Refused())
	}
	seen := map[uint64]bool{}
	for range 4 {
		a, _ := p.Get()
		if seen[a] {
			t.Fatalf("frame %d handed out twice", a)
		}
		seen[a] = true
	}
	if _, ok := p.Get(); ok {
		t.Fatal("a fifth frame came out of four returned")
	}
}

func TestFramePoolNoAllocs(t *testing.T) {
	u := newTestUMEM(t, UMEMOptions{FrameSize: 4096, Frames: 4, HugePages: HugeOff})
	p, err := u.NewFramePool(4)
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() {
		a, _ := p.Get()
		p.Put(a)
	}); n != 0 {
		t.Fatalf("Get+Put allocates %v times", n)
	}
}

func TestUMEMCloseIdempotent(t *testing.T) {
	u, err := NewUMEM(UMEMOptions{Frames: 2, HugePages: HugeOff})
	if err != nil {
		t.Fatal(err)
	}
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}
	if err := u.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestPageKindString(t *testing.T) {
	for k, want := range map[PageKind]string{PagesNormal: "normal", PagesTransparentHuge: "thp", PagesHugeTLB: "hugetlb", PageKind(9): "PageKind(9)"} {
		if got := k.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(k), got, want)
		}
	}
}

// BenchmarkFramePoolGetPut is the per-frame cost of the pool on the packet path (a frame
// taken for TX and returned at completion).
func BenchmarkFramePoolGetPut(b *testing.B) {
	u := newTestUMEM(b, UMEMOptions{FrameSize: 4096, Frames: 1024, HugePages: HugeOff})
	p, err := u.NewFramePool(1024)
	if err != nil {
		b.Fatal(err)
	}
	var held [32]uint64
	b.ReportAllocs()
	for b.Loop() {
		for i := range held {
			held[i], _ = p.Get()
		}
		for _, a := range held {
			p.Put(a)
		}
	}
}
