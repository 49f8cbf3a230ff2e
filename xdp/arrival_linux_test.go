package xdp

import (
	"encoding/binary"
	"testing"
	"time"
)

// stampAt writes an arrival stamp for time at in front of addr, as the XDP program does.
func stampAt(mem []byte, addr uint64, at uint64) {
	binary.NativeEndian.PutUint64(mem[addr-16:], at)
	binary.NativeEndian.PutUint64(mem[addr-8:], at^arrivalCheck)
}

// TestTakeArrival: a stamp is read once (its check word is cleared), a frame without room
// in front of the data or with a wrong check word has none, and waits outside what a
// clock can show are refused.
func TestTakeArrival(t *testing.T) {
	const fsize = 4096
	mem := make([]byte, 4*fsize)
	addr := uint64(fsize + 256)
	stampAt(mem, addr, 12345)
	if at, ok := takeArrival(mem, addr, fsize); !ok || at != 12345 {
		t.Fatalf("takeArrival = %d, %v; want 12345, true", at, ok)
	}
	if _, ok := takeArrival(mem, addr, fsize); ok {
		t.Fatal("a stamp read twice")
	}
	stampAt(mem, addr, 777)
	mem[addr-1] ^= 1
	if _, ok := takeArrival(mem, addr, fsize); ok {
		t.Fatal("a stamp with a wrong check word taken")
	}
	stampAt(mem, 2*fsize+16, 5)
	if _, ok := takeArrival(mem, 2*fsize+8, fsize); ok {
		t.Fatal("a stamp across the frame's start taken")
	}
	if _, ok := takeArrival(mem, uint64(len(mem))+64, fsize); ok {
		t.Fatal("a stamp outside the memory taken")
	}
	stampAt(mem, addr, 0) // a zero time is no stamp
	if _, ok := takeArrival(mem, addr, fsize); ok {
		t.Fatal("a zero stamp taken")
	}
	now := int64(10 * time.Second)
	for _, c := range []struct {
		now, at, want int64
		ok            bool
	}{
		{now, now - 1000, 1000, true},
		{now, now, 0, true},
		{now, now + 5000, 0, true},                     // the clocks' skew
		{now, now + int64(time.Millisecond), 0, false}, // the future
		{now, now - 2*int64(time.Second), 0, false},    // too old to be one
		{0, 5, 0, false},                               // no clock
	} {
		if w, ok := waitedSince(c.now, c.at); w != c.want || ok != c.ok {
			t.Errorf("waitedSince(%d, %d) = %d, %v; want %d, %v", c.now, c.at, w, ok, c.want, c.ok)
		}
	}
}

// TestMonoClock: the clock the stamps are read against is CLOCK_MONOTONIC, which
// bpf_ktime_get_ns reads: it moves with Go's monotonic clock.
func TestMonoClock(t *testing.T) {
	c := newMonoClock()
	a := c.now()
	time.Sleep(2 * time.Millisecond)
	b := c.now()
	if a <= 0 || b-a < int64(2*time.Millisecond) || b-a > int64(time.Second) {
		t.Fatalf("CLOCK_MONOTONIC read %d then %d", a, b)
	}
}

// FuzzTakeArrival reads stamps from arbitrary frame bytes at arbitrary addresses: it never
// panics, takes a stamp at most once, and a wait it believes is within [0, maxWaited].
func FuzzTakeArrival(f *testing.F) {
	f.Add(uint64(272), int64(1e10), make([]byte, 512))
	seed := make([]byte, 512)
	stampAt(seed, 272, 9_999_000_000)
	f.Add(uint64(272), int64(1e10), seed)
	f.Add(uint64(8), int64(1), seed)
	f.Fuzz(func(t *testing.T, addr uint64, now int64, in []byte) {
		const fsize = 256
		mem := make([]byte, 2*fsize)
		copy(mem, in)
		at, ok := takeArrival(mem, addr, fsize)
		if !ok {
			return
		}
		if _, again := takeArrival(mem, addr, fsize); again {
			t.Fatal("a stamp taken twice")
		}
		if w, ok := waitedSince(now, at); ok && (w < 0 || w > maxWaited) {
			t.Fatalf("waited %d ns believed", w)
		}
	})
}
