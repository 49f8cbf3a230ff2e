package transport_test

import (
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"

	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/simlink"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// Helpers shared by scenario_test.go and forged_test.go. They build on harness_test.go.

// count returns how many completions qp has had, without copying them.
func (r *recorder) count(qp *transport.QP) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byQP[qp])
}

// total returns how many completions all QPs have had.
func (r *recorder) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, cs := range r.byQP {
		n += len(cs)
	}
	return n
}

// runFor runs the world for exactly d of virtual time (less if nothing at all is
// scheduled): the "let it settle" of a test that then checks what happened. Unlike step it
// never moves the clock past the end, so timers due later do not fire.
func (w *world) runFor(d time.Duration) {
	w.t.Helper()
	end := w.clock.Now() + int64(d)
	for steps := 0; ; steps++ {
		if steps > 50_000_000 {
			w.t.Fatalf("runFor(%v): still busy after %d steps", d, steps)
		}
		now := w.clock.Now()
		busy, next := w.poll(now)
		if busy {
			continue
		}
		if next == 0 || now >= end {
			return
		}
		w.clock.Set(min(next, end))
	}
}

// runUntilExact is runUntil that checks cond after every round of polls, before it moves
// the clock: the clock then reads the virtual time at which cond came true, even when the
// poll that made it true reported itself idle. It returns whether that round's polls
// reported work done.
func (w *world) runUntilExact(limit time.Duration, what string, cond func() bool) (busy bool) {
	w.t.Helper()
	end := w.clock.Now() + int64(limit)
	for steps := 0; ; steps++ {
		if steps > 50_000_000 {
			w.t.Fatalf("%s: not done after %d steps", what, steps)
		}
		now := w.clock.Now()
		busy, next := w.poll(now)
		if cond() {
			return busy
		}
		if busy {
			continue
		}
		if next == 0 {
			w.t.Fatalf("%s: nothing scheduled and not done (virtual time %v)", what, time.Duration(now))
		}
		if next > end {
			w.t.Fatalf("%s: not done after %v of virtual time", what, limit)
		}
		w.clock.Set(next)
	}
}

// mssFor is the payload of a full Send or Write packet on a network of the given
// MaxPayload (0: simlink's default): the MSS the engine derives at connect.
func mssFor(maxPayload int) int {
	if maxPayload == 0 {
		maxPayload = simlink.DefaultMaxPayload
	}
	return maxPayload - wire.HeaderLen - wire.SendExtLen - wire.TrailerLen
}

// fillRandom fills b with bytes from rng: data in which any misplaced or stale byte shows.
func fillRandom(b []byte, rng *rand.Rand) {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		v := rng.Uint64()
		b[i], b[i+1], b[i+2], b[i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		b[i+4], b[i+5], b[i+6], b[i+7] = byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56)
	}
	for ; i < len(b); i++ {
		b[i] = byte(rng.Uint32())
	}
}

// fillByte sets every byte of b to v.
func fillByte(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

// allByte reports whether every byte of b is v, and the offset of the first that is not.
func allByte(b []byte, v byte) (bool, int) {
	for i, x := range b {
		if x != v {
			return false, i
		}
	}
	return true, -1
}

// splitSGL cuts b into up to n non-empty consecutive pieces at points drawn from rng: the
// scatter/gather list of a request or receive whose bytes are b.
func splitSGL(b []byte, n int, rng *rand.Rand) (sgl [transport.MaxSGE][]byte, nsge uint8) {
	n = max(1, min(n, transport.MaxSGE, len(b)))
	rest := b
	for i := 0; i < n-1; i++ {
		// leave at least one byte for each piece still to come
		cut := 1 + rng.IntN(len(rest)-(n-1-i))
		sgl[i] = rest[:cut:cut]
		rest = rest[cut:]
	}
	sgl[n-1] = rest
	return sgl, uint8(n)
}

// tapLink is a link.Link that passes everything to a simlink link and remembers what
// its engine sent: the header fields and bytes an attacker on the path could observe, so
// forged-packet tests can craft datagrams that are right in every field but one.
type tapLink struct {
	*simlink.Link

	mu       sync.Mutex
	last     map[wire.Opcode]sniffed // the last datagram sent of each opcode
	maxPSN   wire.PSN                // the highest PSN of a data packet sent (serial order)
	anyData  bool
	dataPort uint16 // the source port of the engine's data packets
}

// sniffed is one datagram an engine sent, parsed, with its raw bytes.
type sniffed struct {
	wire.Packet // header and extensions (no payload views)
	Remote      netip.AddrPort
	LocalPort   uint16
	Raw         []byte
}

func newTap(l *simlink.Link) *tapLink {
	return &tapLink{Link: l, last: map[wire.Opcode]sniffed{}}
}

// Send implements link.Link.
func (t *tapLink) Send(pkts []link.Packet) (int, error) {
	n, err := t.Link.Send(pkts)
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range pkts[:n] {
		p := &pkts[i]
		raws, ports := unbundlePorts(p) // a Bundle's entries, each as a packet of its own
		for j, raw := range raws {
			var s sniffed
			if wire.Parse([][]byte{raw}, &s.Packet) != nil {
				continue // not ours to judge here; the receiver counts it
			}
			s.Payload, s.NPayload, s.PrivateData = [wire.MaxSegments][]byte{}, 0, nil
			s.Remote, s.LocalPort, s.Raw = p.Remote, ports[j], raw
			t.last[s.Opcode] = s
			if s.Opcode < wire.OpAck {
				if !t.anyData || t.maxPSN.Less(s.PSN) {
					t.maxPSN, t.anyData = s.PSN, true
				}
				t.dataPort = ports[j]
			}
			if s.Opcode == wire.OpAck {
				t.dataPort = p.LocalPort
			}
		}
	}
	return n, err
}

// lastOf returns the last datagram of opcode op the engine sent.
func (t *tapLink) lastOf(tb testing.TB, op wire.Opcode) sniffed {
	tb.Helper()
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.last[op]
	if !ok {
		tb.Fatalf("tap: no %v sent yet", op)
	}
	return s
}

// nextPSN returns the PSN after the highest data PSN the engine sent: where its peer's
// receive window starts once everything is acknowledged.
func (t *tapLink) nextPSN(tb testing.TB) wire.PSN {
	tb.Helper()
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.anyData {
		tb.Fatal("tap: no data packet sent yet")
	}
	return t.maxPSN.Add(1)
}

// port returns the UDP source port of the engine's QP traffic.
func (t *tapLink) port(tb testing.TB) uint16 {
	tb.Helper()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dataPort == 0 {
		tb.Fatal("tap: no QP traffic sent yet")
	}
	return t.dataPort
}

// newTapWorld is newWorld with both engines on tapLinks.
func newTapWorld(t testing.TB, ncfg simlink.Config, tweak func(*transport.Config)) (*world, *tapLink, *tapLink) {
	t.Helper()
	var ta, tb *tapLink
	w := newWorldOn(t, ncfg, tweak, func(la, lb *simlink.Link) (link.Link, link.Link) {
		ta, tb = newTap(la), newTap(lb)
		return ta, tb
	})
	return w, ta, tb
}
