package faultlink

import (
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"
)

// chunk is the most datagrams of one Send handled per call of the inner link's Send:
// the staging array holds two entries per datagram (a duplicate) plus every buffer.
const chunk = 64

// pendingPoll bounds a Wait while copies refused by the inner link wait to be sent.
const pendingPoll = 50 * time.Microsecond

// action is what the wrapper does to one datagram.
type action uint8

const (
	actPass action = iota
	actDrop
	actHold
	actCorrupt
	actDup
)

type plan struct {
	act action
	zc  bool
	buf int32
}

// Link is a link.Link that impairs the datagrams it transmits through an inner link
// (see the package documentation). Like every Link, Receive, Release, Send, TxDone and Wait
// belong to one engine goroutine; Wake, Stats, Close, SetImpairments, Impairments,
// FaultStats, Inject, Record and StopRecording are safe from any goroutine.
type Link struct {
	inner link.Link
	cfg   Config
	now   func() int64

	imp impairer

	// engine goroutine state
	copies  // the datagram copies (embedded: their fields read as the Link's)
	cookies link.CookieQueue
	planned int // cookies the current chunk pushes if its datagrams are accepted
	plans   [chunk]plan

	inj injector
	rec atomic.Pointer[Recorder]
	ctr counters
}

var _ link.Link = (*Link)(nil)

// Wrap returns a Link that impairs inner's transmissions as cfg says. The wrapper owns
// inner from now on: Close closes it. Its buffers are allocated here, so nothing allocates
// per datagram later.
func Wrap(inner link.Link, cfg Config) (*Link, error) {
	if inner == nil {
		return nil, fmt.Errorf("%w: nil inner link", ErrInvalid)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	size := inner.MaxPayload()
	if size <= 0 {
		return nil, fmt.Errorf("%w: inner link max payload %d", ErrInvalid, size)
	}
	l := &Link{inner: inner, cfg: cfg, now: cfg.Now, imp: impairer{rng: cfg.Seed},
		cookies: link.NewCookieQueue(cfg.CookieQueue),
	}
	l.copies.init(cfg.Buffers, size)
	l.inj.init(cfg.InjectBuffers, size)
	l.imp.store(cfg.Impairments)
	return l, nil
}

// Inner returns the wrapped link.
func (l *Link) Inner() link.Link { return l.inner }

// Send implements link.Link: it decides each datagram's fate and hands the inner
// link what is to be sent now, in batches. It returns as the inner link would have for
// pkts: n < len(pkts) with a nil error when the inner link is out of room for the rest,
// and the inner link's error for a datagram it refuses (the caller accounts that
// datagram's cookie, as with any link).
func (l *Link) Send(pkts []link.Packet) (int, error) {
	now := l.now()
	if len(pkts) == 0 {
		l.flush(now, l.inner, &l.ctr)
		return 0, nil
	}
	total := 0
	for total < len(pkts) {
		in := pkts[total:min(total+chunk, len(pkts))]
		n, err := l.sendChunk(in, now)
		total += n
		if err != nil || n < len(in) {
			return total, err
		}
	}
	return total, nil
}

// decide draws the fate of p, taking the buffer and cookie room it needs; a fault that
// cannot have them is skipped (the datagram passes).
func (l *Link) decide(p *link.Packet) plan {
	pl := plan{act: actPass, buf: -1, zc: p.Flags&link.FlagZeroCopy != 0}
	plen := p.Len()
	if p.NSegs == 0 || int(p.NSegs) > link.MaxSegments || plen == 0 || plen > len(l.bufs[0]) {
		return pl // the inner link refuses it
	}
	act := actPass
	switch {
	case l.imp.chance(0):
		act = actDrop
	case l.imp.chance(1):
		act = actHold
	case l.imp.chance(2):
		act = actCorrupt
	case l.imp.chance(3):
		act = actDup
	default:
		return pl
	}
	// A datagram the inner link never sees by reference needs its cookie reported here.
	needCookie := pl.zc && act != actDup
	if needCookie && l.cookies.Len()+l.planned >= l.cookieCap() {
		l.ctr.skipped.Add(1)
		return pl
	}
	if act != actDrop {
		if pl.buf = l.take(); pl.buf < 0 {
			l.ctr.skipped.Add(1)
			return pl
		}
		l.copyIn(pl.buf, p, plen)
	}
	if needCookie {
		l.planned++
	}
	pl.act = act
	return pl
}

func (l *Link) cookieCap() int { return l.cfg.CookieQueue }

// sendChunk plans, transmits and accounts up to chunk datagrams.
func (l *Link) sendChunk(in []link.Packet, now int64) (int, error) {
	l.out, l.ent, l.planned = l.out[:0], l.ent[:0], 0
	l.stageBacklog(now)
	for i := range in {
		p := &in[i]
		pl := l.decide(p)
		l.plans[i] = pl
		owner := int32(i)
		switch pl.act {
		case actPass:
			l.stage(p, entry{kind: entryPrimary, owner: owner, buf: -1})
		case actDrop:
			continue
		case actHold:
			m := &l.meta[pl.buf]
			m.after = 1 + int(l.imp.next()%uint64(l.cfg.MaxHold))
			m.deadline = now + int64(l.cfg.HoldTime)
			m.wasHeld = true
			l.held = append(l.held, pl.buf)
			continue
		case actCorrupt:
			r := l.imp.next()
			n := l.meta[pl.buf].n
			l.bufs[pl.buf][r%uint64(n)] ^= byte(1 + (r>>32)%255)
			l.stageCopy(pl.buf, entryPrimary, owner)
		case actDup:
			l.stage(p, entry{kind: entryPrimary, owner: owner, buf: -1})
			l.stageCopy(pl.buf, entryDup, owner)
		}
		l.wentOut()
	}
	pos, err := l.push(l.inner, &l.ctr)
	// The first datagram not accepted: the owner of the first primary entry not sent.
	boundary := len(in)
	for j := pos; j < len(l.ent); j++ {
		if l.ent[j].kind == entryPrimary {
			boundary = int(l.ent[j].owner)
			break
		}
	}
	for i := range in {
		l.settle(&in[i], &l.plans[i], i < boundary)
	}
	l.settleCopies(pos, &l.ctr)
	return boundary, err
}

// settle accounts one input datagram: its fault happened (accepted), or is undone. An
// undone datagram's copy is marked dead: freed here if it is still held, by settleCopies
// if it was staged.
func (l *Link) settle(p *link.Packet, pl *plan, accepted bool) {
	if !accepted {
		if pl.buf >= 0 {
			l.meta[pl.buf].dead = true
			if pl.act == actHold && l.unhold(pl.buf) {
				l.put(pl.buf)
			}
		}
		return
	}
	switch pl.act {
	case actPass:
		l.ctr.passed.Add(1)
		return
	case actDrop:
		l.ctr.dropped.Add(1)
	case actHold:
		l.ctr.reordered.Add(1)
	case actCorrupt:
		l.ctr.corrupted.Add(1)
	case actDup:
		l.ctr.duplicated.Add(1)
		return // the original went to the inner link with its flags and cookie
	}
	if pl.zc {
		l.cookies.Push(p.Cookie)
	}
}

// TxDone implements link.Link: the cookies of zero-copy datagrams the wrapper dropped,
// held or replaced by a copy first, then the inner link's.
func (l *Link) TxDone(dst []uint64) int {
	n := l.cookies.Pop(dst)
	if n < len(dst) {
		n += l.inner.TxDone(dst[n:])
	}
	return n
}

// Wait implements link.Link. It first sends held datagrams that are due and copies
// waiting for room, and waits no longer than until the next held datagram is due (or
// briefly while copies wait for room). It returns at once when TxDone has cookies of the
// wrapper's to report or injected datagrams wait for Receive.
func (l *Link) Wait(timeout time.Duration) error {
	now := l.now()
	l.flush(now, l.inner, &l.ctr)
	if l.cookies.Len() > 0 || l.inj.ready.Load() > 0 {
		timeout = 0
	}
	for _, b := range l.held {
		timeout = min(timeout, time.Duration(max(l.meta[b].deadline-now, 0)))
	}
	if len(l.pending) > 0 {
		timeout = min(timeout, pendingPoll)
	}
	return l.inner.Wait(timeout)
}

// Wake implements link.Link.
func (l *Link) Wake() { l.inner.Wake() }

// MaxPayload implements link.Link: the inner link's.
func (l *Link) MaxPayload() int { return l.inner.MaxPayload() }

// LocalAddr implements link.Link: the inner link's.
func (l *Link) LocalAddr() netip.AddrPort { return l.inner.LocalAddr() }

// Stats implements link.Link: the inner link's counters (what it was given and
// received); FaultStats counts what the wrapper did.
func (l *Link) Stats() link.Stats { return l.inner.Stats() }

// Close implements link.Link: it closes the inner link. Idempotent as the inner
// link's Close is.
func (l *Link) Close() error { return l.inner.Close() }
