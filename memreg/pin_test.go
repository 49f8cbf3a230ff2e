//go:build linux

package memreg

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// vmLckKB returns the process's locked memory (VmLck of /proc/self/status) in KiB.
func vmLckKB(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmLck:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatalf("VmLck line %q: %v", line, err)
			}
			return n
		}
	}
	t.Fatal("no VmLck in /proc/self/status")
	return 0
}

// quiesceLocks makes VmLck deltas meaningful: memory that other tests registered and then
// dropped without deregistering is still locked until the Go runtime scavenges it, which
// unlocks it at any moment. Collect and scavenge all garbage now, and stop the GC (so nothing
// new becomes free) until the test ends.
func quiesceLocks(t *testing.T) {
	t.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	old := debug.SetGCPercent(-1)
	t.Cleanup(func() { debug.SetGCPercent(old) })
}

// lockedPages reports, per page that mem touches, whether the kernel has it mlock'd: the
// VmFlags of its mapping in /proc/self/smaps contain "lo".
func lockedPages(t testing.TB, mem []byte) []bool {
	t.Helper()
	pFirst, pEnd := pages(bufVA(mem), uint64(len(mem)))
	lo, hi := pFirst*pageSize, pEnd*pageSize
	locked := make([]bool, pEnd-pFirst)
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var start, end uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if flags, ok := strings.CutPrefix(line, "VmFlags:"); ok {
			if end <= lo || start >= hi || !slices.Contains(strings.Fields(flags), "lo") {
				continue
			}
			for p := max(start, lo); p < min(end, hi); p += pageSize {
				locked[(p-lo)/pageSize] = true
			}
			continue
		}
		// A mapping's header: "start-end perms offset dev inode path".
		rng, _, _ := strings.Cut(line, " ")
		a, b, ok := strings.Cut(rng, "-")
		if !ok {
			continue
		}
		s, err1 := strconv.ParseUint(a, 16, 64)
		e, err2 := strconv.ParseUint(b, 16, 64)
		if err1 == nil && err2 == nil {
			start, end = s, e
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return locked
}

// unlockedGoBuf returns a Go buffer of n bytes none of whose pages is locked. Registrations
// that other tests dropped without deregistering leave pages locked that the Go heap hands
// out again; those would not add to VmLck when registered.
func unlockedGoBuf(t *testing.T, n int) []byte {
	t.Helper()
	var keep [][]byte // not handed out again while searching
	for range 100 {
		b := make([]byte, n)
		if !slices.Contains(lockedPages(t, b), true) {
			runtime.KeepAlive(keep)
			return b
		}
		keep = append(keep, b)
	}
	t.Fatal("no Go buffer without locked pages in 100 tries")
	return nil
}

// mmapPages maps n anonymous pages outside the Go heap and unmaps them at cleanup.
func mmapPages(t testing.TB, n int) []byte {
	t.Helper()
	mem, err := unix.Mmap(-1, 0, n*int(pageSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(mem) })
	return mem
}

// pinModel is the set of pages registrations cover, as counts.
type pinModel map[uint64]int

func (m pinModel) add(first, end uint64, d int) {
	for p := first; p < end; p++ {
		if m[p] += d; m[p] == 0 {
			delete(m, p)
		}
	}
}

// checkPins compares the registry's pin table, the kernel's locked pages of mem and the
// process's VmLck (as a delta from base) with the model. With kernel false it checks only
// the pin table.
func checkPins(t *testing.T, what string, r *Registry, mem []byte, model pinModel, baseKB int, kernel bool) {
	t.Helper()
	if got := r.pins.pinned(); got != len(model) {
		t.Fatalf("%s: pin table holds %d pages, model %d", what, got, len(model))
	}
	for p, n := range model {
		if got := r.pins.count[p]; got != int32(n) {
			t.Fatalf("%s: page %#x counted %d times, model %d", what, p, got, n)
		}
	}
	if !kernel {
		return
	}
	memFirst := bufVA(mem) / pageSize
	locked := lockedPages(t, mem)
	for i, l := range locked {
		if want := model[memFirst+uint64(i)] > 0; l != want {
			t.Fatalf("%s: page %d locked %v, want %v (model %v)", what, i, l, want, model)
		}
	}
	if got, want := vmLckKB(t)-baseKB, len(model)*int(pageSize/1024); got != want {
		t.Fatalf("%s: VmLck grew by %d kB, want %d", what, got, want)
	}
}

// TestPinOverlapping registers overlapping, nested and adjacent regions outside any UMEM in
// every order and deregisters them forwards and backwards: a page is locked exactly while
// some registration covers it.
func TestPinOverlapping(t *testing.T) {
	quiesceLocks(t)
	pg := int(pageSize)
	mem := mmapPages(t, 8)
	regions := [][2]int{ // [start, end) in bytes of mem
		{100, 2*pg + 100},         // pages 0-2
		{2*pg + 500, 4 * pg},      // pages 2-3: shares page 2 with the first
		{4 * pg, 5*pg + 10},       // pages 4-5: adjacent to the second
		{pg + 1, pg + 2},          // page 1: inside the first
		{5*pg + 20, 5*pg + 30},    // page 5: shares it with the third, other bytes
		{7 * pg, 8 * pg},          // page 7 exactly
		{6*pg + pg - 1, 7*pg + 1}, // pages 6-7: two bytes across a boundary
	}
	orders := permutations(len(regions))
	for n, order := range orders {
		// Every 7th order (720 of 5040, spread over all positions of every region) checks
		// the pin table; every 343rd and the last also the kernel's view (smaps and VmLck,
		// slow to read).
		if n%7 != 0 && n != len(orders)-1 {
			continue
		}
		kernel := n%343 == 0 || n == len(orders)-1
		for _, backwards := range []bool{false, true} {
			r := NewRegistry(16)
			pd := r.NewPD()
			base := vmLckKB(t)
			model := pinModel{}
			mrs := make([]*MR, len(regions))
			for _, i := range order {
				reg := regions[i]
				mr, err := r.RegisterMR(pd, mem[reg[0]:reg[1]], MRAllowRemoteWrite)
				if err != nil {
					t.Fatalf("RegisterMR %v: %v", reg, err)
				}
				if mr.InUMEM() {
					t.Fatal("region outside any UMEM reports InUMEM")
				}
				mrs[i] = mr
				model.addPages(pages(mr.VA(), mr.Len()))
				checkPins(t, fmt.Sprintf("order %v: register %v", order, reg), r, mem, model, base, kernel)
			}
			dereg := slices.Clone(order)
			if backwards {
				slices.Reverse(dereg)
			}
			for _, i := range dereg {
				if err := r.DeregisterMR(mrs[i]); err != nil {
					t.Fatal(err)
				}
				first, end := pages(mrs[i].VA(), mrs[i].Len())
				model.add(first, end, -1)
				checkPins(t, fmt.Sprintf("order %v: deregister %v", order, regions[i]), r, mem, model, base, kernel)
			}
		}
	}
}

func (m pinModel) addPages(first, end uint64) { m.add(first, end, 1) }

// permutations returns every order of 0..n-1.
func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := slices.Insert(slices.Clone(p), i, n-1)
			out = append(out, q)
		}
	}
	return out
}

// TestPinGoMemory: regions of ordinary Go memory are pinned too, and unpinned when the last
// registration covering a page goes.
func TestPinGoMemory(t *testing.T) {
	quiesceLocks(t)
	buf := unlockedGoBuf(t, 5*int(pageSize))
	r := NewRegistry(4)
	pd := r.NewPD()
	base := vmLckKB(t)
	a, err := r.RegisterMR(pd, buf[:3*pageSize], MRAllowRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.RegisterMR(pd, buf[2*pageSize:], MRAllowRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	model := pinModel{}
	model.addPages(pages(a.VA(), a.Len()))
	model.addPages(pages(b.VA(), b.Len()))
	checkPins(t, "two overlapping Go regions", r, buf, model, base, true)
	wantErr(t, "DeregisterMR", r.DeregisterMR(a), nil)
	first, end := pages(a.VA(), a.Len())
	model.add(first, end, -1)
	checkPins(t, "one left", r, buf, model, base, true)
	wantErr(t, "DeregisterMR", r.DeregisterMR(b), nil)
	checkPins(t, "none left", r, buf, pinModel{}, base, true)
}

// TestPinClose: closing the registry with regions still registered unlocks every page they
// pinned; deregistering them afterwards unlocks nothing twice.
func TestPinClose(t *testing.T) {
	quiesceLocks(t)
	buf := unlockedGoBuf(t, 5*int(pageSize))
	r := NewRegistry(4)
	pd := r.NewPD()
	base := vmLckKB(t)
	a, err := r.RegisterMR(pd, buf[:3*pageSize], MRAllowRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.RegisterMR(pd, buf[2*pageSize:], MRAllowRemoteRead); err != nil {
		t.Fatal(err)
	}
	r.Close()
	checkPins(t, "closed", r, buf, pinModel{}, base, true)
	wantErr(t, "DeregisterMR after Close", r.DeregisterMR(a), nil)
	checkPins(t, "deregistered after close", r, buf, pinModel{}, base, true)
}

// TestPinUMEM: regions inside an attached UMEM are not pinned again (the UMEM is pinned
// already) and report InUMEM; deregistering them leaves the UMEM locked. Memory outside is
// pinned as before.
func TestPinUMEM(t *testing.T) {
	quiesceLocks(t)
	u, h := newTestHeap(t, 8*ps)
	r := NewRegistry(8)
	pd := r.NewPD()
	wantErr(t, "AttachUMEM", r.AttachUMEM(u), nil)
	base := vmLckKB(t)
	umemLocked := func(what string) {
		t.Helper()
		for i, l := range lockedPages(t, u.Bytes()) {
			if !l {
				t.Fatalf("%s: UMEM page %d no longer locked", what, i)
			}
		}
	}
	umemLocked("before")
	hb, err := h.Alloc(3*ps, ps)
	if err != nil {
		t.Fatal(err)
	}
	frame := u.Bytes()[:100]
	whole := u.Bytes()
	var mrs []*MR
	for _, b := range [][]byte{hb, frame, whole, hb[ps:]} {
		mr, err := r.RegisterMR(pd, b, MRAllowRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		if !mr.InUMEM() {
			t.Fatal("region inside the UMEM does not report InUMEM")
		}
		mrs = append(mrs, mr)
	}
	if n := r.pins.pinned(); n != 0 {
		t.Fatalf("UMEM regions pinned %d pages", n)
	}
	if d := vmLckKB(t) - base; d != 0 {
		t.Fatalf("VmLck grew by %d kB for UMEM regions", d)
	}
	// A Go buffer beside them is pinned.
	goBuf := unlockedGoBuf(t, 2*int(pageSize))
	gmr, err := r.RegisterMR(pd, goBuf, MRAllowRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	if gmr.InUMEM() {
		t.Fatal("Go memory reports InUMEM")
	}
	model := pinModel{}
	model.addPages(pages(gmr.VA(), gmr.Len()))
	checkPins(t, "Go buffer beside the UMEM", r, goBuf, model, base, true)
	for _, mr := range mrs {
		wantErr(t, "DeregisterMR", r.DeregisterMR(mr), nil)
	}
	wantErr(t, "DeregisterMR", r.DeregisterMR(gmr), nil)
	checkPins(t, "all deregistered", r, goBuf, pinModel{}, base, true)
	umemLocked("after deregistration")
	// Fast-register MRs of a registry with a UMEM are UMEM memory.
	fr, _ := r.NewFastRegisterMR(pd, 1, true)
	if !fr.InUMEM() {
		t.Fatal("FR MR of a registry with a UMEM does not report InUMEM")
	}
	r2 := NewRegistry(1)
	fr2, _ := r2.NewFastRegisterMR(r2.NewPD(), 1, true)
	if fr2.InUMEM() {
		t.Fatal("FR MR of a registry without UMEM reports InUMEM")
	}
}

// holeyPages maps n pages and unmaps page hole, so that mlock of a range across it fails.
// The returned slice must not be read or written at the hole.
func holeyPages(t *testing.T, n, hole int) []byte {
	t.Helper()
	mem, err := unix.Mmap(-1, 0, n*int(pageSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	// Unmap the hole with the raw syscall: unix.Munmap would forget the whole mapping.
	if _, _, e := unix.Syscall(unix.SYS_MUNMAP, uintptr(bufVA(mem)+uint64(hole)*pageSize), uintptr(pageSize), 0); e != 0 {
		t.Fatal(e)
	}
	t.Cleanup(func() {
		for i := range n {
			if i != hole {
				_, _, _ = unix.Syscall(unix.SYS_MUNMAP, uintptr(bufVA(mem)+uint64(i)*pageSize), uintptr(pageSize), 0)
			}
		}
	})
	return mem
}

// TestPinFailure: when mlock fails (here: the range crosses an unmapped page; with
// RLIMIT_MEMLOCK in production, which root's CAP_IPC_LOCK bypasses) RegisterMR fails with
// ErrPin and changes nothing: no slot is taken, the pin table and the kernel's locked pages
// are as before, pages other registrations pinned stay locked.
func TestPinFailure(t *testing.T) {
	pg := int(pageSize)
	for _, tc := range []struct {
		name       string
		n, hole    int
		pre        [2]int // a registration made first ([0,0): none)
		start, end int    // the failing registration
	}{
		{"hole at the end", 3, 2, [2]int{}, 10, 3 * pg},
		{"hole in the middle", 3, 1, [2]int{}, 0, 3 * pg},
		{"hole at the start", 3, 0, [2]int{}, 0, 3 * pg},
		{"hole after a pinned page", 4, 2, [2]int{0, pg + 1}, 100, 4 * pg},
		{"hole after a partly pinned range", 4, 3, [2]int{pg, 2 * pg}, 0, 4*pg - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			quiesceLocks(t)
			mem := holeyPages(t, tc.n, tc.hole)
			r := NewRegistry(2)
			pd := r.NewPD()
			base := vmLckKB(t)
			model := pinModel{}
			if tc.pre[1] > 0 {
				mr, err := r.RegisterMR(pd, mem[tc.pre[0]:tc.pre[1]], MRAllowRemoteRead)
				if err != nil {
					t.Fatal(err)
				}
				model.addPages(pages(mr.VA(), mr.Len()))
			}
			// Only the mapped pages can be asked about.
			mapped := mem[:tc.hole*pg]
			if tc.hole == 0 {
				mapped = mem[pg:]
			}
			checkPins(t, "before", r, mapped, model, base, true)
			mr, err := r.RegisterMR(pd, mem[tc.start:tc.end], MRAllowRemoteRead)
			if !errors.Is(err, ErrPin) || mr != nil {
				t.Fatalf("RegisterMR across a hole: %v, want ErrPin", err)
			}
			checkPins(t, "after ErrPin", r, mapped, model, base, true)
			if tc.hole != 0 && tc.hole != tc.n-1 {
				tail := mem[(tc.hole+1)*pg:]
				for i, l := range lockedPages(t, tail) {
					if l {
						t.Fatalf("page %d after the hole left locked", tc.hole+1+i)
					}
				}
			}
			// The failure took no slot: the registry still has room for what it had room for.
			buf := bytes.Repeat([]byte{1}, 10)
			ok, err := r.RegisterMR(pd, buf, 0)
			if err != nil {
				t.Fatalf("RegisterMR after ErrPin: %v", err)
			}
			wantErr(t, "DeregisterMR", r.DeregisterMR(ok), nil)
		})
	}
}

// TestAttachUMEMRules: one UMEM, attached once; with it, FastRegister takes only its pages.
func TestAttachUMEMRules(t *testing.T) {
	u, h := newTestHeap(t, 4*ps)
	r := NewRegistry(8)
	pd := r.NewPD()
	wantErr(t, "AttachUMEM nil", r.AttachUMEM(nil), ErrInvalidParameter)
	closed, err := NewUMEM(UMEMOptions{FrameSize: 4096, Frames: 1, HugePages: HugeOff})
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Close", closed.Close(), nil)
	wantErr(t, "AttachUMEM closed", r.AttachUMEM(closed), ErrInvalidParameter)
	wantErr(t, "AttachUMEM", r.AttachUMEM(u), nil)
	wantErr(t, "AttachUMEM twice", r.AttachUMEM(u), ErrInvalidParameter)
	other, err := NewUMEM(UMEMOptions{FrameSize: 4096, Frames: 1, HugePages: HugeOff})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	wantErr(t, "AttachUMEM another", r.AttachUMEM(other), ErrInvalidParameter)

	hb, err := h.Alloc(2*ps, ps)
	if err != nil {
		t.Fatal(err)
	}
	umemPages := pagesOf(hb)
	goPage := make([]byte, ps)
	all := u.Bytes()
	fr, _ := r.NewFastRegisterMR(pd, 3, true)
	const base = 0x2000
	for _, tc := range []struct {
		name  string
		pages [][]byte
		want  error
	}{
		{"Go page", [][]byte{goPage}, ErrInvalidParameter},
		{"UMEM pages then a Go page", [][]byte{umemPages[0], umemPages[1], goPage}, ErrInvalidParameter},
		{"Go page first", [][]byte{goPage, umemPages[0]}, ErrInvalidParameter},
		{"page of another UMEM", [][]byte{other.Bytes()[:ps]}, ErrInvalidParameter},
		{"UMEM heap pages", [][]byte{umemPages[1], umemPages[0]}, nil},
		{"first UMEM page", [][]byte{all[:ps]}, nil},
		{"last UMEM page", [][]byte{all[len(all)-ps:]}, nil},
	} {
		err := r.FastRegister(fr, tc.pages, 0, ps, base, OpAllowRemoteRead)
		wantErr(t, tc.name, err, tc.want)
		if err != nil {
			if _, err := r.Acquire(pd, fr.RemoteToken(), base, 1, AccessRemoteRead); !errors.Is(err, ErrStale) {
				t.Fatalf("%s: refused FastRegister left a mapping: %v", tc.name, err)
			}
			continue
		}
		sp, err := r.Acquire(pd, fr.RemoteToken(), base, ps, AccessRemoteRead)
		if err != nil || &sp.Buf[0] != &tc.pages[0][0] {
			t.Fatalf("%s: Acquire: %v", tc.name, err)
		}
		sp.MR.Release()
		wantErr(t, "InvalidateMR", r.InvalidateMR(fr), nil)
	}
	// Without a UMEM any page is accepted.
	r2 := NewRegistry(1)
	pd2 := r2.NewPD()
	fr2, _ := r2.NewFastRegisterMR(pd2, 1, true)
	wantErr(t, "FastRegister of a Go page without a UMEM", r2.FastRegister(fr2, [][]byte{goPage}, 0, ps, base, 0), nil)
}
