package delayline

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

func mustPath(t *testing.T, c Config) *Path {
	t.Helper()
	p, err := NewPath(c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A burst at 1 Gbit/s leaves one serialization time apart, each Delay after its
// serialization ends.
func TestPathSerialization(t *testing.T) {
	p := mustPath(t, Config{Delay: 5 * time.Millisecond, Rate: 1e9, QueueBytes: 1 << 20})
	frame := make([]byte, 1514)
	for range 100 {
		if !p.Push(1000, frame) {
			t.Fatal("dropped below the queue's size")
		}
	}
	const ser = 12112 // ns: 1514 bytes x 8 / 1 Gbit/s
	for i := range 100 {
		_, due := p.At(i)
		if want := int64(1000 + (i+1)*ser + 5_000_000); due != want {
			t.Fatalf("frame %d due %d, want %d", i, due, want)
		}
	}
	if got := p.Backlog(1000); got != 100*1514 {
		t.Errorf("backlog at arrival %d, want %d", got, 100*1514)
	}
	if got := p.Backlog(1000 + 50*ser); got != 50*1514 {
		t.Errorf("backlog after 50 frame times %d, want %d", got, 50*1514)
	}
	// A frame that arrives after the line went idle starts at once.
	late := int64(1000 + 200*ser)
	p.Push(late, frame)
	if _, due := p.At(100); due != late+ser+5_000_000 {
		t.Errorf("idle line: due %d, want %d", due, late+ser+5_000_000)
	}
}

// The queue drops what does not fit behind the backlog, and admits again as it drains.
func TestPathDropTail(t *testing.T) {
	p := mustPath(t, Config{Delay: time.Millisecond, Rate: 1e9, QueueBytes: 10_000})
	frame := make([]byte, 1514)
	acc := 0
	for range 20 {
		if p.Push(0, frame) {
			acc++
		}
	}
	if acc != 6 || p.Dropped != 14 || p.Accepted != 6 { // 6 x 1514 = 9084 <= 10000 < 7 x 1514
		t.Fatalf("accepted %d dropped %d, want 6 and 14", acc, p.Dropped)
	}
	// Two frame times later two frames left the queue: two more fit.
	var got [3]bool
	for i := range got {
		got[i] = p.Push(2*12112, frame)
	}
	if got != [3]bool{true, true, false} {
		t.Errorf("after two frame times: admitted %v, want two more admitted and the third dropped", got)
	}
	if p.MaxBacklog < 9084 {
		t.Errorf("MaxBacklog %d, want at least 9084", p.MaxBacklog)
	}
}

// Without a rate every frame leaves Delay after it arrived, and nothing is dropped by a
// queue.
func TestPathDelayOnly(t *testing.T) {
	p := mustPath(t, Config{Delay: 2 * time.Millisecond})
	for i := range 1000 {
		if !p.Push(int64(i*100), make([]byte, 1514)) {
			t.Fatalf("frame %d dropped", i)
		}
	}
	for i := range 1000 {
		if _, due := p.At(i); due != int64(i*100)+2_000_000 {
			t.Fatalf("frame %d due %d", i, due)
		}
	}
	if n := p.Due(2_000_000+550, 1000); n != 6 {
		t.Errorf("Due = %d, want 6", n)
	}
}

// Frames of random sizes pushed and released in random batches come out intact and in
// order, across many wraps of the ring, and the ring refuses what it cannot hold.
func TestPathRingIntegrity(t *testing.T) {
	p := mustPath(t, Config{Delay: 0, Rate: 1e9, QueueBytes: MinQueueBytes * 40})
	rng := rand.New(rand.NewPCG(1, 2))
	var want [][]byte // held frames, oldest first
	seq := byte(0)
	now := int64(0)
	for step := range 200_000 {
		if rng.IntN(2) == 0 {
			n := 34 + rng.IntN(1514-34+1)
			f := make([]byte, n)
			for i := range f {
				f[i] = seq + byte(i)
			}
			seq++
			if p.Push(now, f) {
				want = append(want, f)
			}
		} else {
			k := rng.IntN(len(want) + 1)
			for i := range k {
				got, _ := p.At(i)
				if !bytes.Equal(got, want[i]) {
					t.Fatalf("step %d: frame %d corrupted", step, i)
				}
			}
			p.Release(k)
			want = want[k:]
		}
		now += int64(rng.IntN(20_000))
		if f, b := p.Held(); f != len(want) || b != sumLen(want) {
			t.Fatalf("step %d: held %d frames %d bytes, want %d and %d", step, f, b, len(want), sumLen(want))
		}
	}
	if p.Overflow != 0 {
		t.Errorf("%d overflows in a ring sized for the queue", p.Overflow)
	}
}

func sumLen(fs [][]byte) int {
	n := 0
	for _, f := range fs {
		n += len(f)
	}
	return n
}

// Pushing and releasing allocates nothing.
func TestPathAllocs(t *testing.T) {
	p := mustPath(t, Config{Delay: time.Millisecond, Rate: 1e9})
	frame := make([]byte, 1514)
	now := int64(0)
	allocs := testing.AllocsPerRun(1000, func() {
		now += 12112
		p.Push(now, frame)
		if k := p.Due(now, 64); k > 0 {
			p.At(0)
			p.Release(k)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per frame, want 0", allocs)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{
		{Delay: -1}, {Delay: 2 * time.Second}, {Rate: 10}, {Rate: 1e12},
		{Rate: 1e9, QueueBytes: 100}, {Rate: 100e9, Delay: time.Second},
	} {
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: got %v, want ErrInvalidConfig", c, err)
		}
	}
	p := mustPath(t, Config{Delay: 5 * time.Millisecond, Rate: 1e9})
	if q := p.Config().QueueBytes; q != 1_250_001 {
		t.Errorf("default queue %d, want one round trip's BDP (1250001)", q)
	}
}
