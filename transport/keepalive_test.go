package transport

import (
	"testing"
	"time"
)

// The keepalive alone, in virtual time: each case is a sequence of events (the peer heard,
// the engine's poll at a time, the link full) with what the keepalive must decide and the
// deadline it must report.
func TestKeepAliveDecisions(t *testing.T) {
	type ev struct {
		at       time.Duration
		heard    bool     // the peer was heard at at (else: the engine polls at at)
		full     bool     // the link takes nothing: a probe does not go
		run      bool     // first poll at every deadline before at, each a probe that goes
		want     kaAction // what due must say
		deadline time.Duration
	}
	s := time.Second
	ms := time.Millisecond
	cases := []struct {
		name   string
		period time.Duration
		events []ev
	}{{
		name:   "a peer heard keeps the probes away",
		period: 30 * s,
		events: []ev{
			{at: 0, want: kaNone, deadline: 10 * s},
			{at: 9 * s, heard: true},
			{at: 9 * s, want: kaNone, deadline: 19 * s},
			{at: 19*s - 1, want: kaNone, deadline: 19 * s},
		},
	}, {
		name:   "probes after a third, again with backoff, fails after the period",
		period: 30 * s,
		events: []ev{
			{at: 10 * s, want: kaProbe, deadline: 10*s + 125*ms},
			{at: 10*s + 125*ms, want: kaProbe, deadline: 10*s + 375*ms},
			{at: 10*s + 375*ms, want: kaProbe, deadline: 10*s + 875*ms},
			{at: 10*s + 875*ms, want: kaProbe, deadline: 11*s + 875*ms},
			{at: 11*s + 875*ms, want: kaProbe, deadline: 12*s + 875*ms}, // the interval's cap: answer, 1 s
			{at: 29*s + 875*ms, run: true, want: kaProbe, deadline: 30 * s},
			{at: 30 * s, want: kaFail},
		},
	}, {
		name:   "an answer ends the probing",
		period: 30 * s,
		events: []ev{
			{at: 10 * s, want: kaProbe, deadline: 10*s + 125*ms},
			{at: 10*s + 10*time.Microsecond, heard: true},
			{at: 10*s + 125*ms, want: kaNone, deadline: 20*s + 10*time.Microsecond},
		},
	}, {
		name:   "a probe the link cannot take is tried again at once",
		period: 30 * s,
		events: []ev{
			{at: 10 * s, full: true, want: kaProbe, deadline: 10 * s},
			{at: 10*s + time.Microsecond, want: kaProbe, deadline: 10*s + time.Microsecond + 125*ms},
		},
	}, {
		name:   "the engine did not run past the period: a probe, and the answer time, first",
		period: 30 * s,
		events: []ev{
			{at: 45 * s, want: kaProbe, deadline: 45*s + 125*ms},
			{at: 45*s + 125*ms, want: kaProbe, deadline: 45*s + 375*ms},
			{at: 45*s + 875*ms, run: true, want: kaProbe, deadline: 46 * s},
			{at: 46 * s, want: kaFail},
		},
	}, {
		name:   "the engine did not run while probing: the answer time starts again",
		period: 30 * s,
		events: []ev{
			{at: 10 * s, want: kaProbe, deadline: 10*s + 125*ms},
			// stopped from 10 s to 29.9 s: the probe due at 10.125 s goes late
			{at: 29*s + 900*ms, want: kaRestart, deadline: 30*s + 25*ms},
			{at: 30 * s, want: kaNone, deadline: 30*s + 25*ms},
			{at: 30*s + 25*ms, want: kaProbe, deadline: 30*s + 275*ms},
			{at: 30*s + 275*ms, want: kaProbe, deadline: 30*s + 775*ms},
			{at: 30*s + 775*ms, want: kaProbe, deadline: 30*s + 900*ms},
			{at: 30*s + 900*ms, want: kaFail},
		},
	}, {
		name:   "the failure deadline reached late restarts too",
		period: 3 * s,
		events: []ev{
			{at: 1 * s, want: kaProbe, deadline: 1*s + 125*ms},
			{at: 5 * s, want: kaRestart, deadline: 5*s + 125*ms},
			{at: 5*s + 875*ms, run: true, want: kaProbe, deadline: 6 * s},
			{at: 6 * s, want: kaFail},
		},
	}, {
		name:   "silent for two periods, a late deadline fails: an engine that keeps running late gives up",
		period: 3 * s,
		events: []ev{
			{at: 1 * s, want: kaProbe, deadline: 1*s + 125*ms},
			{at: 6 * s, want: kaFail},
		},
	}, {
		name:   "a short period: the answer time is a third of it",
		period: 30 * ms,
		events: []ev{
			{at: 10 * ms, want: kaProbe, deadline: 10*ms + 1250*time.Microsecond},
			{at: 30 * ms, want: kaFail},
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var k keepAlive
			k.start(0, c.period)
			for i, e := range c.events {
				now := int64(e.at)
				for e.run && k.deadline() < now {
					d := k.deadline()
					if a := k.due(d); a != kaProbe {
						t.Fatalf("event %d: at %v on the way to %v: due %d, want a probe", i, time.Duration(d), e.at, a)
					}
					k.probed(d, false)
				}
				if e.heard {
					k.onHeard(now)
					continue
				}
				got := k.due(now)
				if got != c.events[i].want {
					t.Fatalf("event %d at %v: due %d, want %d", i, e.at, got, e.want)
				}
				if got == kaFail {
					continue
				}
				if (got == kaProbe || got == kaRestart) && !e.full {
					k.probed(now, got == kaRestart)
				}
				if d := time.Duration(k.deadline()); d != e.deadline {
					t.Fatalf("event %d at %v: deadline %v, want %v", i, e.at, d, e.deadline)
				}
			}
		})
	}
	var off keepAlive
	off.start(0, -1)
	if off.due(int64(time.Hour)) != kaNone || off.deadline() != 0 {
		t.Fatal("a disabled keepalive acts")
	}
}

// TestKeepAliveAllocs: the keepalive's per-packet and per-poll work allocates nothing.
func TestKeepAliveAllocs(t *testing.T) {
	var k keepAlive
	k.start(0, 30*time.Second)
	now := int64(0)
	allocs := testing.AllocsPerRun(1000, func() {
		now += int64(time.Second)
		k.onHeard(now - 1)
		if a := k.due(now); a == kaProbe {
			k.probed(now, false)
		}
		_ = k.deadline()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per round", allocs)
	}
}
