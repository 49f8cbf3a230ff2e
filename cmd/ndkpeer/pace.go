//go:build linux

package main

import "time"

// pacer spaces posts to hold a rate (--rate): post k is due at the start plus k periods,
// with the period's remainder carried (Bresenham) so that no rounding drifts the rate.
// A poster that falls behind (a full window, a descheduled thread, a slow round trip)
// catches up, back to back, on up to slack (a second) of missed posts, so that the rate
// holds over a stall; past that the schedule moves on (what it could not send is not sent
// later), the achieved rate falls below the one asked, and the result says so.
type pacer struct {
	rate  int64 // messages per second; 0: unpaced
	q, r  int64 // 1e9 ns = q*rate + r
	acc   int64 // remainder carried, in [0, rate)
	next  int64 // clock of the next post
	slack int64 // ns
}

// pacerSlack is how far behind its schedule a pacer catches up.
const pacerSlack = time.Second

// newPacer returns a pacer of rate messages per second (0: every post is due at once)
// starting at now.
func newPacer(rate, now int64) pacer {
	if rate <= 0 {
		return pacer{}
	}
	p := pacer{rate: rate, q: 1e9 / rate, r: 1e9 % rate, next: now}
	p.slack = max(int64(pacerSlack), 2*p.q) // or two periods at rates under 2/s
	return p
}

// due reports whether a post may go at now.
func (p *pacer) due(now int64) bool { return p.rate == 0 || now >= p.next }

// took accounts one post made at now.
func (p *pacer) took(now int64) {
	if p.rate == 0 {
		return
	}
	if now-p.next > p.slack {
		p.next = now - p.slack
	}
	p.next += p.q
	p.acc += p.r
	if p.acc >= p.rate {
		p.acc -= p.rate
		p.next++
	}
}
