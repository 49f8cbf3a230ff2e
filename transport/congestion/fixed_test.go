package congestion

import (
	"errors"
	"testing"
)

func TestFixed(t *testing.T) {
	for _, w := range []int{0, -1} {
		if f, err := NewFixed(w); !errors.Is(err, ErrInvalidConfig) || f != nil {
			t.Errorf("NewFixed(%d) = %v, %v; want ErrInvalidConfig", w, f, err)
		}
	}
	f, err := NewFixed(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	f.OnSent(1, 1000)
	f.OnSent(1, -1)
	f.OnAck(2, 500, 30_000)
	f.OnAck(2, 500, -4)
	f.OnAck(2, 0, 7)
	f.OnLoss(3, 100)
	f.OnTimeout(4)
	if got := f.NextSendTime(9, 1000); got != 9 {
		t.Errorf("NextSendTime = %d, want now", got)
	}
	want := Stats{Window: 64 << 10, Cwnd: 64 << 10, LastDelay: 30_000, Timeouts: 1, LossEvents: 1,
		SentBytes: 1000, AckedBytes: 1000, LostBytes: 100}
	if got := f.Stats(); got != want || f.Window() != 64<<10 {
		t.Errorf("Stats = %+v, want %+v", got, want)
	}
	if a := testing.AllocsPerRun(100, func() { f.OnSent(1, 1); f.OnAck(1, 1, 1); _ = f.Window() }); a != 0 {
		t.Errorf("%v allocations, want 0", a)
	}
}
