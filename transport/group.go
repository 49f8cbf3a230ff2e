package transport

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// Several engines of one host (docs/TRANSPORT.md, "Several engines"). A Group runs one
// Engine per link, each link a share of the NIC's queues, each engine on a goroutine of its
// own, with disjoint QPs: nothing on the per-packet path is shared between them. Which
// engine owns what is written in the numbers this side chooses and the peer echoes: the
// low bits of a QPN (a datagram's DestQPN) and of a connection attempt's ConnID name the
// engine that owns them. A datagram that arrives at another engine than its owner (a NIC's
// RSS hashes flows to queues we do not choose) is copied into the owner's inbox from that
// engine (inbox.go: bounded, single producer, single consumer; full: dropped and counted)
// and processed there. Placement makes that rare where the path allows: a QP is placed at
// NewQP (the active side), and an accepted QP moves to the engine its connection request
// arrived at, so that on a bed where a datagram sent from queue q arrives on the peer's
// queue q (veth) the two ends of a connection sit on the engines of the same index and
// nothing crosses.

// MaxEngines is the most engines a Group has.
const MaxEngines = 64

// Group is several engines of one host, one per link. Its methods are safe from any
// goroutine; each engine is polled by one goroutine at a time, as an Engine alone is.
type Group struct {
	engines []*Engine
	maxQPs  int

	mu      sync.Mutex // NewQP, NewSRQ, Listen: the bound on QPs, placement
	nextQP  int
	nextSRQ int
}

// groupState is an engine's part in its Group. The zero value is an engine alone.
type groupState struct {
	grp   *Group // nil: the engine is alone
	index int
	mask  uint64 // the low bits of a QPN or ConnID that name the engine

	// engine goroutine state
	out       []*inbox // out[j]: what this engine forwards to engine j (nil for itself)
	in        []*inbox // what the other engines forward to this one
	woken     uint64   // bit j: forwarded to engine j since its doorbell was last rung
	fromInbox bool     // input is handling a forwarded datagram: never forward it again
	pkt       link.Packet
	redirects []redirect

	forwarded, dropped, received atomic.Uint64
}

// redirect remembers a connection request handed to another engine (acceptOn, for a QP
// on a shared receive queue of another engine): later copies of the request, and a
// rejection of its reply, go there.
type redirect struct {
	peer   netip.Addr
	connID uint64
	to     int
	until  int64
}

// NewGroup creates one engine per link, each with cfg (cfg.Link is replaced; one clock is
// shared: cfg.Now, or time since the group's creation). With one link it is that engine
// alone. Config.MaxQPs bounds the group's QPs together; Config.MaxHalfOpen is per engine.
func NewGroup(cfg Config, links []link.Link) (*Group, error) {
	n := len(links)
	if n < 1 || n > MaxEngines {
		return nil, fmt.Errorf("%d links: a group has 1 to %d engines", n, MaxEngines)
	}
	if cfg.Now == nil {
		start := time.Now()
		cfg.Now = func() int64 { return int64(time.Since(start)) }
	}
	g := &Group{}
	size := 0
	for _, l := range links {
		c := cfg
		c.Link = l
		e, err := NewEngine(c)
		if err != nil {
			return nil, err
		}
		g.engines = append(g.engines, e)
		size = max(size, l.MaxPayload())
	}
	g.maxQPs = g.engines[0].cfg.MaxQPs
	if n == 1 {
		return g, nil
	}
	b := bits.Len(uint(n - 1))
	mask := uint64(1)<<b - 1
	slots := g.engines[0].cfg.InboxSlots
	boxes := make([][]inbox, n)
	for i := range boxes {
		boxes[i] = make([]inbox, n)
		for j := range boxes[i] {
			boxes[i][j].init(slots, size)
		}
	}
	for i, e := range g.engines {
		s := &e.g
		s.grp, s.index, s.mask = g, i, mask
		s.out = make([]*inbox, n)
		for j := range n {
			if j != i {
				s.out[j] = &boxes[i][j]
				s.in = append(s.in, &boxes[j][i])
			}
		}
		s.redirects = make([]redirect, 0, e.cfg.MaxHalfOpen)
		e.nextQPN = e.nextQPN&^uint32(mask) | uint32(i)
	}
	return g, nil
}

// Engines returns the group's engines, in link order.
func (g *Group) Engines() []*Engine { return g.engines }

// MaxQPs is the most QPs the group holds at once (Config.MaxQPs).
func (g *Group) MaxQPs() int { return g.maxQPs }

// Index is the engine's position in its Group (0 for an engine alone).
func (e *Engine) Index() int { return e.g.index }

// Group returns the engine's group (nil for an engine made by NewEngine).
func (e *Engine) Group() *Group { return e.g.grp }

// qpnStep is how far apart the QPNs of one engine are: the QPN's low bits name it.
func (g *groupState) qpnStep() uint32 { return uint32(g.mask) + 1 }

// newConnID returns a connection attempt's ConnID: random, never 0, its low bits naming
// the engine.
func (g *groupState) newConnID() uint64 {
	id := randUint64()&^g.mask | uint64(g.index)
	if id == 0 {
		id = g.mask + 1
	}
	return id
}

// owner returns the engine that a QPN or ConnID names, or -1 when it names none.
func (g *groupState) owner(id uint64) int {
	i := int(id & g.mask)
	if i >= len(g.grp.engines) {
		return -1
	}
	return i
}

// NewQP creates a QP on one of the engines: the engine of cfg.SRQ when it has one (a QP
// takes its receives from an SRQ of its own engine), else the engine with the fewest QPs
// (ties in turn). A QP accepted later may move to the engine its request arrived at
// (ConnRequest.Accept). It fails with ErrTooManyQPs when Config.MaxQPs exist in the group.
func (g *Group) NewQP(cfg QPConfig) (*QP, error) {
	if len(g.engines) == 1 {
		return g.engines[0].NewQP(cfg)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	total, best, least := 0, -1, 0
	n := len(g.engines)
	for k := range n {
		i := (g.nextQP + k) % n
		e := g.engines[i]
		e.mu.Lock()
		c := len(e.qps)
		e.mu.Unlock()
		total += c
		if best < 0 || c < least {
			best, least = i, c
		}
	}
	if total >= g.maxQPs {
		return nil, fmt.Errorf("%d queue pairs exist (Config.MaxQPs): %w", total, ErrTooManyQPs)
	}
	e := g.engines[best]
	if cfg.SRQ != nil {
		if cfg.SRQ.e.g.grp != g {
			return nil, errors.New("qp config: the srq belongs to another engine")
		}
		e = cfg.SRQ.e
	} else {
		g.nextQP = (best + 1) % n
	}
	return e.NewQP(cfg)
}

// NewSRQ creates a shared receive queue on one of the engines, in turn. The QPs that use
// it are placed on its engine (NewQP), and stay there: an accepted one whose request
// arrived at another engine has the request handed to the SRQ's engine instead, and its
// datagrams that arrive elsewhere are forwarded.
func (g *Group) NewSRQ(depth int) (*SRQ, error) {
	g.mu.Lock()
	e := g.engines[g.nextSRQ%len(g.engines)]
	g.nextSRQ++
	g.mu.Unlock()
	return e.NewSRQ(depth)
}

// Listen starts accepting connection requests for service on every engine (a request
// arrives at whichever engine its queue belongs to); at most backlog wait for Accept or
// Reject at a time, on all engines together. Closing the listener closes it on all.
func (g *Group) Listen(service uint64, backlog int) (*Listener, error) {
	if len(g.engines) == 1 {
		return g.engines[0].Listen(service, backlog)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	reqs := make(chan *ConnRequest, max(backlog, 1))
	ls := make([]*Listener, 0, len(g.engines))
	for _, e := range g.engines {
		l := &Listener{e: e, service: service, reqs: reqs}
		e.mu.Lock()
		taken := e.cm.listeners[service] != nil
		if !taken {
			e.cm.listeners[service] = l
		}
		e.mu.Unlock()
		if taken {
			for _, x := range ls {
				x.Close()
			}
			return nil, ErrListening
		}
		ls = append(ls, l)
	}
	ls[0].siblings = ls[1:]
	return ls[0], nil
}

// Connect starts connecting qp to the listener of service at peer from qp's engine, as
// Engine.Connect does.
func (g *Group) Connect(qp *QP, peer netip.AddrPort, service uint64, private []byte, timeout time.Duration) (*Connector, error) {
	e := qp.owner()
	if e.g.grp != g && (len(g.engines) != 1 || e != g.engines[0]) {
		return nil, fmt.Errorf("qp of another group: %w", ErrBadState)
	}
	return e.Connect(qp, peer, service, private, timeout)
}

// GroupStats are an engine's counters with its forwarding counters, or a group's summed.
type GroupStats struct {
	EngineStats
	// Forwarded counts datagrams an engine received for a QP or connection attempt of
	// another engine and put in that engine's inbox; ForwardDropped those it dropped
	// instead because the inbox was full (reliability resends them); ForwardReceived the
	// datagrams an engine took from its inboxes.
	Forwarded, ForwardDropped, ForwardReceived uint64
}

// GroupStats returns the engine's counters and its forwarding counters. Safe from any
// goroutine.
func (e *Engine) GroupStats() GroupStats {
	return GroupStats{EngineStats: e.Stats(), Forwarded: e.g.forwarded.Load(),
		ForwardDropped: e.g.dropped.Load(), ForwardReceived: e.g.received.Load()}
}

// Stats returns the sum of the engines' counters. Safe from any goroutine.
func (g *Group) Stats() GroupStats {
	var s GroupStats
	for _, e := range g.engines {
		s.add(e.GroupStats())
	}
	return s
}

// add adds every counter of x to s's: each uint64 field of GroupStats and of its
// EngineStats, whatever fields the engine's counters grow.
func (s *GroupStats) add(x GroupStats) {
	sumFields(reflect.ValueOf(s).Elem(), reflect.ValueOf(x))
}

func sumFields(dst, src reflect.Value) {
	for i := range dst.NumField() {
		switch f := dst.Field(i); f.Kind() {
		case reflect.Uint64:
			f.SetUint(f.Uint() + src.Field(i).Uint())
		case reflect.Array:
			if f.Type().Elem().Kind() == reflect.Uint64 {
				for j := range f.Len() {
					f.Index(j).SetUint(f.Index(j).Uint() + src.Field(i).Index(j).Uint())
				}
			}
		case reflect.Struct:
			sumFields(f, src.Field(i))
		}
	}
}

// Sync returns a channel that is closed once the engine has run every command posted to
// it before the call: from then on, what its goroutine does follows what the caller did
// before Sync. (ndk uses it before a CQ starts taking completions from a second engine.)
func (e *Engine) Sync() <-chan struct{} {
	ch := make(chan struct{})
	e.command(func(int64) { close(ch) })
	return ch
}

// Engine returns the engine the QP is on now. It changes at most once, when an accepted
// QP moves to the engine its connection request arrived at (ConnRequest.Accept).
func (q *QP) Engine() *Engine { return q.owner() }

// owner is the engine the QP is on. Safe from any goroutine.
func (q *QP) owner() *Engine { return q.home.Load() }

// wake rings the doorbell of the QP's engine, if it sleeps.
func (q *QP) wake() { q.owner().wake() }

// post queues fn for the engine goroutine of the engine the QP is on when fn runs: a QP
// that moved meanwhile has fn follow it.
func (q *QP) post(fn func(now int64)) {
	e := q.owner()
	e.command(func(now int64) {
		if q.owner() != e {
			q.post(fn)
			return
		}
		fn(now)
	})
}

// Engine returns the engine the SRQ belongs to: the QPs that use it are on it.
func (s *SRQ) Engine() *Engine { return s.e }

// Engine returns the engine the request is handled by: the one it arrived at, or the one
// it was handed to when it was accepted with a QP on an SRQ of another engine.
func (r *ConnRequest) Engine() *Engine { return r.engine() }

func (r *ConnRequest) engine() *Engine {
	if e := r.at.Load(); e != nil {
		return e
	}
	return r.l.e
}

// hosts reports whether qp may be accepted on a request of engine e: it is on e, or on
// another engine of e's group.
func (e *Engine) hosts(qp *QP) bool {
	o := qp.owner()
	return o == e || (e.g.grp != nil && o.g.grp == e.g.grp)
}

// place runs the work of accepting r with qp, body, on the engine that will own the
// connection. A QP on the request's engine is accepted there; one on another engine moves
// there first (it is idle, claimed by Accept: it has sent nothing, and nothing of it runs
// on its old engine any more); one on a shared receive queue cannot move, so the request
// is handed to the QP's engine instead, and its later copies (and a rejection of its
// reply) are forwarded there.
func (r *ConnRequest) place(qp *QP, body func(e *Engine, now int64)) {
	e := r.engine()
	src := qp.owner()
	switch {
	case src == e:
		e.command(func(now int64) { body(e, now) })
	case qp.srq == nil:
		src.command(func(int64) { e.adopt(src, qp, func(now int64) { body(e, now) }) })
	default:
		e.command(func(now int64) { e.handOver(now, r, src, func(now int64) { body(src, now) }) })
	}
}

// adopt moves qp from engine src to e and then runs then on e. It runs on src's
// goroutine, which owns qp until it is published on e with its new QPN; from then on e's
// goroutine does (commands posted for it meanwhile follow it: QP.post). A QP closed
// meanwhile is not moved; then still runs on e (the accept answers the peer, whose
// connection then fails as on one engine).
func (e *Engine) adopt(src *Engine, qp *QP, then func(now int64)) {
	old := qp.qpn
	src.mu.Lock()
	live := src.qps[old] == qp
	src.mu.Unlock()
	if !live {
		e.command(then)
		return
	}
	e.mu.Lock()
	qpn := e.nextQPN
	for {
		qpn += e.g.qpnStep()
		if qpn != 0 && e.qps[qpn] == nil {
			break
		}
	}
	e.nextQPN = qpn
	oldSlot := qp.schedSlot()
	qp.setBell(e, e.sched.alloc())
	qp.e, qp.qpn, qp.conn.qpn, qp.conn.tx = e, qpn, qpn, &e.tx
	e.qps[qpn] = qp
	e.publishQPs()
	qp.home.Store(e)
	e.cmds = append(e.cmds, then) // before anything posted for qp on e from now on
	e.hasCmd.Store(true)
	e.mu.Unlock()
	e.wake()
	src.mu.Lock()
	delete(src.qps, old)
	src.sched.release(oldSlot)
	src.publishQPs()
	src.mu.Unlock()
}

// handOver gives the half-open request r of this engine to engine k, where the QP that
// accepts it must stay, and then runs then there. Later copies of the request, and a
// rejection of its reply, are forwarded to k while they come (a redirect, kept cmQuiet
// past the latest). Engine goroutine.
func (e *Engine) handOver(now int64, r *ConnRequest, k *Engine, then func(now int64)) {
	found := e.cm.removeHalfOpen(r)
	if found {
		e.g.redirect(now, r.Peer.Addr(), r.connID, k.g.index)
	}
	r.at.Store(k)
	k.command(func(now int64) {
		if found {
			k.cm.halfOpen = append(k.cm.halfOpen, r)
		}
		then(now)
	})
}

// redirect records that the request connID from peer is handled by engine to.
func (g *groupState) redirect(now int64, peer netip.Addr, connID uint64, to int) {
	if len(g.redirects) == cap(g.redirects) {
		oldest := 0
		for i := range g.redirects {
			if g.redirects[i].until < g.redirects[oldest].until {
				oldest = i
			}
		}
		g.redirects = append(g.redirects[:oldest], g.redirects[oldest+1:]...)
	}
	g.redirects = append(g.redirects, redirect{peer: peer, connID: connID, to: to, until: now + int64(cmQuiet)})
}

// redirected returns the engine a request connID from peer was handed to (-1: none), and
// keeps the redirect cmQuiet past now.
func (g *groupState) redirected(now int64, peer netip.Addr, connID uint64) int {
	for i := range g.redirects {
		if x := &g.redirects[i]; x.connID == connID && x.peer == peer {
			x.until = max(x.until, now+int64(cmQuiet))
			return x.to
		}
	}
	return -1
}

// holdsRequest reports whether the connection manager has the half-open request connID
// from peer.
func (c *cmState) holdsRequest(peer netip.Addr, connID uint64) bool {
	for _, r := range c.halfOpen {
		if r.connID == connID && r.Peer.Addr() == peer {
			return true
		}
	}
	return false
}

// forward hands a datagram that another engine of the group owns to that engine's inbox,
// and reports whether it did (the datagram is then this engine's no more: forwarded or,
// when the inbox is full, dropped and counted). The owner is the engine the header's
// DestQPN names, for a reply or rejection of our connection attempt the one its ConnID
// names; a connection request goes to the engine that took it over (redirect), if any, and
// otherwise stays, as does a rejection of a request this engine holds. Engine goroutine.
func (e *Engine) forward(now int64, pkt *link.Packet, p *wire.Packet) bool {
	g := &e.g
	if g.fromInbox {
		return false
	}
	to := -1
	switch p.Opcode {
	case wire.OpMultiBundle:
		return e.forwardMulti(pkt, p)
	case wire.OpConnRequest:
		to = g.redirected(now, pkt.Remote.Addr(), p.CM.ConnID)
	case wire.OpConnReject:
		to = g.redirected(now, pkt.Remote.Addr(), p.CM.ConnID)
		if to < 0 && !e.cm.holdsRequest(pkt.Remote.Addr(), p.CM.ConnID) {
			to = g.owner(p.CM.ConnID)
		}
	case wire.OpConnReply:
		to = g.owner(p.CM.ConnID)
	default:
		to = g.owner(uint64(p.DestQPN))
	}
	if to < 0 || to == g.index {
		return false
	}
	g.send(to, pkt)
	return true
}

// send puts a copy of pkt in engine to's inbox, or counts it dropped when the inbox is
// full (reliability resends it), and has to's doorbell rung at the end of the round.
func (g *groupState) send(to int, pkt *link.Packet) {
	if !g.out[to].push(pkt) {
		g.dropped.Add(1)
		return
	}
	g.forwarded.Add(1)
	g.woken |= 1 << to
}

// forwardMulti is forward of a multi-QP Bundle, whose groups may belong to several
// engines: it hands the datagram to every other engine that owns one of its groups (each
// takes only its own entries, inputMulti) and reports whether none is this engine's.
func (e *Engine) forwardMulti(pkt *link.Packet, p *wire.Packet) bool {
	g := &e.g
	var owners uint64
	var it wire.Entries
	it.Reset(p)
	for it.Next(&e.entry) {
		if it.GroupStart() {
			if o := g.owner(uint64(e.entry.DestQPN)); o >= 0 {
				owners |= 1 << o
			} else {
				owners |= 1 << g.index // no engine's: this one drops and counts it
			}
		}
	}
	self := owners&(1<<g.index) != 0
	for w := owners &^ (1 << g.index); w != 0; w &= w - 1 {
		g.send(bits.TrailingZeros64(w), pkt)
	}
	return !self
}

// owns reports whether this engine owns QP qpn: always when alone; in a group when the
// QPN's low bits name it, or name no engine (the datagram stays where it arrived, and is
// dropped there).
func (g *groupState) owns(qpn uint32) bool {
	if g.grp == nil {
		return true
	}
	o := g.owner(uint64(qpn))
	return o < 0 || o == g.index
}

// groupPoll rings the doorbells of the engines forwarded to since the last round, takes
// what the other engines forwarded to this one, and expires redirects. It reports whether
// it took anything. Engine goroutine.
func (e *Engine) groupPoll(now int64) bool {
	g := &e.g
	for w := g.woken; w != 0; w &= w - 1 {
		g.grp.engines[bits.TrailingZeros64(w)].wake()
	}
	g.woken = 0
	busy := false
	for _, b := range g.in {
		from, to := b.peek()
		if from == to {
			continue
		}
		g.fromInbox = true
		for i := from; i < to; i++ {
			s := b.slot(i)
			pk := &g.pkt
			*pk = link.Packet{Remote: s.remote, LocalPort: s.localPort, NSegs: 1}
			pk.Segs[0] = s.buf[:s.n]
			e.input(now, pk)
		}
		g.fromInbox = false
		b.release(to)
		g.received.Add(to - from)
		busy = true
	}
	for i := 0; i < len(g.redirects); i++ {
		if now >= g.redirects[i].until {
			g.redirects = append(g.redirects[:i], g.redirects[i+1:]...)
			i--
		}
	}
	return busy
}

// pending reports whether another engine forwarded something this one has not taken.
// Safe from any goroutine (Park and Sleep ask before sleeping).
func (g *groupState) pending() bool {
	for _, b := range g.in {
		if b.pending() {
			return true
		}
	}
	return false
}
