package simlink

import (
	"testing"
	"time"
)

// fakePoller answers Poll with a fixed deadline and work flag and counts its polls.
type fakePoller struct {
	next  int64
	busy  bool
	polls int
	at    int64 // the now of the last poll
}

func (f *fakePoller) Poll(now int64) (int64, bool) {
	f.polls++
	f.at = now
	return f.next, f.busy
}

// TestPollAll checks one round of a virtual-time loop: every poller is polled at now; any
// work means "poll again" (next 0); otherwise the earliest of the pollers' future times and
// the next delivery comes back, a poller's time at or before now counting for nothing.
func TestPollAll(t *testing.T) {
	a, b, clk := manualPair(1, Impairments{Latency: 50 * time.Microsecond})
	defer a.Network().Close()
	n := a.Network()
	clk.Set(1000)
	p, q := &fakePoller{next: 9000}, &fakePoller{next: 7000}
	if next, busy := n.PollAll(1000, p, q); busy || next != 7000 || p.polls != 1 || q.polls != 1 || p.at != 1000 {
		t.Fatalf("idle: next %d busy %v (polls %d %d at %d), want 7000 false", next, busy, p.polls, q.polls, p.at)
	}
	// A delivery earlier than every poller's time wins.
	send(t, a, b.LocalAddr(), payload(1, 64))
	want := int64(1000 + 50*time.Microsecond)
	if d, _ := n.NextDelivery(); d != want {
		t.Fatalf("delivery at %d, want %d", d, want)
	}
	p.next, q.next = 80_000, 60_000
	if next, busy := n.PollAll(1000, p, q); busy || next != want {
		t.Fatalf("delivery first: next %d busy %v, want %d", next, busy, want)
	}
	// Work by any poller: poll again, nothing else is looked at.
	q.busy = true
	if next, busy := n.PollAll(1000, p, q); !busy || next != 0 || p.polls != 3 {
		t.Fatalf("busy: next %d busy %v polls %d, want 0 true 3", next, busy, p.polls)
	}
	// Times not after now are not scheduled work; with nothing queued nothing is due.
	q.busy, p.next, q.next = false, 1000, 0
	clk.Set(want)
	recvAll(t, b)
	if next, busy := n.PollAll(want, p, q); busy || next != 0 {
		t.Fatalf("nothing due: next %d busy %v, want 0 false", next, busy)
	}
	if allocs := testing.AllocsPerRun(100, func() { n.PollAll(want, p, q) }); allocs != 0 {
		t.Fatalf("PollAll allocates %v times per round", allocs)
	}
}
