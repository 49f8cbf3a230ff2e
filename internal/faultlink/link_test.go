package faultlink

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"
)

var peer = netip.MustParseAddrPort("198.18.0.2:4793")

// datagram returns test datagram id: its length depends on id, it starts and ends with
// id, and the bytes between are a function of id.
func datagram(id uint64) []byte {
	n := 24 + int(id%300)
	b := make([]byte, n)
	binary.LittleEndian.PutUint64(b, id)
	binary.LittleEndian.PutUint64(b[n-8:], id)
	h := id*0x9e3779b97f4a7c15 + 1
	h ^= h >> 29
	for i := 8; i < n-8; i++ {
		b[i] = byte(h>>(8*(i%8))) + byte(i)
	}
	return b
}

// identify returns the id of a delivered datagram and how many bytes differ from it.
func identify(b []byte) (uint64, int) {
	if len(b) < 24 {
		return 0, math.MaxInt
	}
	best, bestDiff := uint64(0), math.MaxInt
	for _, id := range []uint64{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[len(b)-8:])} {
		want := datagram(id)
		if len(want) != len(b) {
			continue
		}
		d := 0
		for i := range b {
			if b[i] != want[i] {
				d++
			}
		}
		if d < bestDiff {
			best, bestDiff = id, d
		}
	}
	return best, bestDiff
}

// packet makes a packet of datagram id; odd ids come in two segments, ids divisible by 3
// are zero-copy with cookie 1000+id (all ids when allZeroCopy is set).
func packet(id uint64) link.Packet {
	d := datagram(id)
	p := link.Packet{Remote: peer, LocalPort: uint16(50000 + id%7)}
	if id%2 == 1 {
		p.Segs[0], p.Segs[1], p.NSegs = d[:5], d[5:], 2
	} else {
		p.SetData(d)
	}
	if id%3 == 0 || allZeroCopy {
		p.Flags, p.Cookie = link.FlagZeroCopy, 1000+id
	}
	return p
}

// allZeroCopy makes every test packet zero-copy (TestReorderBounded: a held copy is then
// told from a datagram sent as given by its flags).
var allZeroCopy bool

// driver offers datagrams to a Link the way the engine does: a batch of at most 64, the
// refused rest kept at the front, cookies collected after every call; a datagram the link
// refuses with an error is dropped and its cookie accounted by the driver.
type driver struct {
	l        *Link
	stub     *stubLink
	cookies  map[uint64]int // cookie -> times reported (TxDone or accounted on error)
	refused  []uint64       // ids refused with an error
	accepted []uint64       // ids accepted, in order
}

func newDriver(t *testing.T, cfg Config) *driver {
	t.Helper()
	s := newStub()
	l, err := Wrap(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &driver{l: l, stub: s, cookies: map[uint64]int{}}
}

func (d *driver) collect() {
	var buf [16]uint64
	for {
		n := d.l.TxDone(buf[:])
		for _, c := range buf[:n] {
			d.cookies[c]++
		}
		if n < len(buf) {
			return
		}
	}
}

// run offers ids in batches of batch; refill, if not nil, is called after a Send that
// stopped short (back-pressure) and must make room.
func (d *driver) run(t *testing.T, ids []uint64, batch int, refill func()) {
	t.Helper()
	queue := make([]link.Packet, 0, batch)
	qid := make([]uint64, 0, batch)
	next := 0
	for stalls := 0; next < len(ids) || len(queue) > 0; {
		for len(queue) < batch && next < len(ids) {
			queue = append(queue, packet(ids[next]))
			qid = append(qid, ids[next])
			next++
		}
		n, err := d.l.Send(queue)
		d.accepted = append(d.accepted, qid[:n]...)
		if err != nil {
			p := &queue[n]
			if p.Flags&link.FlagZeroCopy != 0 {
				d.cookies[p.Cookie]++
			}
			d.refused = append(d.refused, qid[n])
			n++
		}
		queue = append(queue[:0], queue[n:]...)
		qid = append(qid[:0], qid[n:]...)
		d.collect()
		if n == 0 && err == nil {
			if refill == nil || stalls > 1000 {
				t.Fatalf("link accepts nothing (%d queued)", len(queue))
			}
			stalls++
			refill()
		}
	}
}

// drain releases every held datagram by time and sends what waits.
func (d *driver) drain(t *testing.T, now *int64) {
	t.Helper()
	*now += int64(time.Hour)
	for i := 0; i < 100 && (len(d.l.held) > 0 || len(d.l.pending) > 0); i++ {
		if d.stub.room == 0 {
			d.stub.room = 1000
		}
		if err := d.l.Wait(0); err != nil {
			t.Fatal(err)
		}
	}
	if len(d.l.held) > 0 || len(d.l.pending) > 0 {
		t.Fatalf("%d held and %d pending copies after draining", len(d.l.held), len(d.l.pending))
	}
	d.collect()
}

func seq(n int) []uint64 {
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = uint64(i)
	}
	return ids
}

func manualClock() (*int64, func() int64) {
	var t int64
	return &t, func() int64 { return t }
}

// checkCookies asserts that every zero-copy datagram's cookie was reported exactly once.
func (d *driver) checkCookies(t *testing.T, ids []uint64) {
	t.Helper()
	want := 0
	for _, id := range ids {
		if id%3 != 0 && !allZeroCopy {
			continue
		}
		want++
		if n := d.cookies[1000+id]; n != 1 {
			t.Fatalf("cookie of datagram %d reported %d times", id, n)
		}
	}
	if len(d.cookies) != want {
		t.Fatalf("%d distinct cookies reported, want %d", len(d.cookies), want)
	}
}

func TestPassThrough(t *testing.T) {
	d := newDriver(t, Config{Seed: 1})
	ids := seq(500)
	d.run(t, ids, 64, nil)
	if len(d.stub.sent) != len(ids) {
		t.Fatalf("inner got %d datagrams, want %d", len(d.stub.sent), len(ids))
	}
	for i, s := range d.stub.sent {
		if !bytes.Equal(s.data, datagram(uint64(i))) {
			t.Fatalf("datagram %d changed", i)
		}
		p := packet(uint64(i))
		if s.flags != p.Flags || s.remote != p.Remote || s.lport != p.LocalPort {
			t.Fatalf("datagram %d: flags %v from port %d to %v, want %v %d %v", i, s.flags, s.lport, s.remote, p.Flags, p.LocalPort, p.Remote)
		}
	}
	d.checkCookies(t, ids)
	if st := d.l.FaultStats(); st.Passed != uint64(len(ids)) || st.Dropped+st.Reordered+st.Corrupted+st.Duplicated != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestDropAll(t *testing.T) {
	d := newDriver(t, Config{Impairments: Impairments{Drop: 1}})
	ids := seq(300)
	d.run(t, ids, 64, nil)
	if len(d.stub.sent) != 0 {
		t.Fatalf("inner got %d datagrams", len(d.stub.sent))
	}
	d.checkCookies(t, ids)
	if st := d.l.FaultStats(); st.Dropped != 300 {
		t.Fatalf("stats %+v", st)
	}
}

func TestDuplicateAll(t *testing.T) {
	d := newDriver(t, Config{Impairments: Impairments{Duplicate: 1}})
	ids := seq(300)
	d.run(t, ids, 64, nil)
	if len(d.stub.sent) != 600 {
		t.Fatalf("inner got %d datagrams, want 600", len(d.stub.sent))
	}
	for i := range ids {
		a, b := d.stub.sent[2*i], d.stub.sent[2*i+1]
		if !bytes.Equal(a.data, datagram(uint64(i))) || !bytes.Equal(b.data, a.data) {
			t.Fatalf("datagram %d and its copy differ from the original", i)
		}
		if a.flags != packet(uint64(i)).Flags || b.flags != 0 || b.remote != peer || b.lport != a.lport {
			t.Fatalf("datagram %d: original flags %v, copy flags %v to %v from %d", i, a.flags, b.flags, b.remote, b.lport)
		}
	}
	d.checkCookies(t, ids) // the originals' cookies, reported by the inner link
	if st := d.l.FaultStats(); st.Duplicated != 300 {
		t.Fatalf("stats %+v", st)
	}
}

func TestCorruptAll(t *testing.T) {
	d := newDriver(t, Config{Seed: 7, Impairments: Impairments{Corrupt: 1}})
	ids := seq(300)
	d.run(t, ids, 64, nil)
	if len(d.stub.sent) != 300 {
		t.Fatalf("inner got %d datagrams, want 300", len(d.stub.sent))
	}
	for i, s := range d.stub.sent {
		id, diff := identify(s.data)
		if id != uint64(i) || diff != 1 {
			t.Fatalf("datagram %d arrived as %d with %d bytes changed, want 1", i, id, diff)
		}
		if s.flags != 0 {
			t.Fatalf("corrupted copy carries flags %v", s.flags)
		}
	}
	d.checkCookies(t, ids) // reported by the wrapper: the inner link never saw them
	if st := d.l.FaultStats(); st.Corrupted != 300 {
		t.Fatalf("stats %+v", st)
	}
}

func TestReorderBounded(t *testing.T) {
	now, clock := manualClock()
	const maxHold = 3
	allZeroCopy = true
	defer func() { allZeroCopy = false }()
	d := newDriver(t, Config{Seed: 3, Impairments: Impairments{Reorder: 0.3}, MaxHold: maxHold, Now: clock})
	ids := seq(2000)
	d.run(t, ids, 64, nil)
	d.drain(t, now)
	if len(d.stub.sent) != len(ids) {
		t.Fatalf("inner got %d datagrams, want %d", len(d.stub.sent), len(ids))
	}
	pos := make([]int, len(ids))
	seen := make([]bool, len(ids))
	for i, s := range d.stub.sent {
		id, diff := identify(s.data)
		if diff != 0 || seen[id] {
			t.Fatalf("delivery %d: datagram %d (diff %d, seen before %v)", i, id, diff, seen[id])
		}
		seen[id], pos[id] = true, i
	}
	st := d.l.FaultStats()
	held := 0
	for id := range ids {
		if d.stub.sent[pos[id]].flags == 0 {
			held++ // a held copy goes without flags
		}
	}
	if st.Reordered == 0 || st.Released != st.Reordered || uint64(held) != st.Reordered {
		t.Fatalf("%d held copies arrived, stats %+v", held, st)
	}
	// A held datagram waits behind at most maxHold datagrams that were not held themselves.
	for id := range ids {
		overtook := 0
		for later := id + 1; later < len(ids) && later <= id+4*maxHold+64; later++ {
			if pos[later] < pos[id] && d.stub.sent[pos[later]].flags != 0 {
				overtook++
			}
		}
		if overtook > maxHold {
			t.Fatalf("datagram %d overtaken by %d datagrams sent after it, MaxHold %d", id, overtook, maxHold)
		}
	}
	d.checkCookies(t, ids)
}

func TestHoldTimeReleases(t *testing.T) {
	now, clock := manualClock()
	d := newDriver(t, Config{Impairments: Impairments{Reorder: 1}, MaxHold: 5, HoldTime: time.Millisecond, Now: clock})
	d.run(t, []uint64{0}, 1, nil)
	if len(d.stub.sent) != 0 {
		t.Fatal("a held datagram was sent at once")
	}
	if err := d.l.Wait(time.Second); err != nil {
		t.Fatal(err)
	}
	if w := d.stub.waits[0]; w != time.Millisecond {
		t.Fatalf("Wait slept %v with a datagram due in 1 ms", w)
	}
	*now += int64(999 * time.Microsecond)
	var rx [4]link.Packet
	if _, err := d.l.Receive(rx[:]); err != nil || len(d.stub.sent) != 0 {
		t.Fatalf("released early (%d sent, err %v)", len(d.stub.sent), err)
	}
	*now += int64(time.Microsecond)
	if _, err := d.l.Receive(rx[:]); err != nil || len(d.stub.sent) != 1 || !bytes.Equal(d.stub.sent[0].data, datagram(0)) {
		t.Fatalf("not released by Receive at its time (%d sent, err %v)", len(d.stub.sent), err)
	}
}

// Every fault at once, with the inner link out of room every few datagrams and refusing
// some outright: each datagram handed in is accounted once, its cookie reported once, and
// what reaches the inner link is exactly what the counters say.
// Wait does not sleep while the wrapper owes TxDone a cookie.
func TestWaitWithCookies(t *testing.T) {
	d := newDriver(t, Config{Impairments: Impairments{Drop: 1}})
	p := packet(3) // zero-copy
	if n, err := d.l.Send([]link.Packet{p}); n != 1 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	if err := d.l.Wait(time.Second); err != nil || d.stub.waits[0] != 0 {
		t.Fatalf("Wait slept %v with a cookie to report (err %v)", d.stub.waits[0], err)
	}
	d.collect()
	if err := d.l.Wait(time.Second); err != nil || d.stub.waits[1] != time.Second {
		t.Fatalf("Wait slept %v with nothing to do (err %v)", d.stub.waits[1], err)
	}
	d.checkCookies(t, []uint64{3})
}

func TestBackPressureAndErrors(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		now, clock := manualClock()
		d := newDriver(t, Config{Seed: seed, Buffers: 8,
			Impairments: Impairments{Drop: 0.15, Reorder: 0.15, Corrupt: 0.15, Duplicate: 0.15}, Now: clock})
		d.stub.failLen = 24 + 77 // datagrams whose id%300 == 77 are refused outright
		d.stub.room = 5
		ids := seq(3000)
		d.run(t, ids, 64, func() { d.stub.room = 1 + int(seed*7)%9 })
		d.stub.room = -1
		d.drain(t, now)

		refused := map[uint64]bool{}
		for _, id := range d.refused {
			refused[id] = true
		}
		// Every datagram is accepted or refused once; the refused ones are those of the
		// failing length that the inner link saw as primaries.
		if len(d.accepted)+len(d.refused) != len(ids) {
			t.Fatalf("seed %d: %d accepted + %d refused, want %d", seed, len(d.accepted), len(d.refused), len(ids))
		}
		for i, id := range d.accepted {
			if i > 0 && id <= d.accepted[i-1] {
				t.Fatalf("seed %d: accepted out of order", seed)
			}
		}
		for _, id := range d.refused {
			if len(datagram(id)) != d.stub.failLen {
				t.Fatalf("seed %d: datagram %d refused", seed, id)
			}
		}
		d.checkCookies(t, ids)

		got := map[uint64]int{}
		corrupted := 0
		for _, s := range d.stub.sent {
			id, diff := identify(s.data)
			switch {
			case diff == 1:
				corrupted++
			case diff != 0:
				t.Fatalf("seed %d: a datagram with %d bytes changed", seed, diff)
			}
			got[id]++
			if refused[id] {
				t.Fatalf("seed %d: refused datagram %d reached the inner link", seed, id)
			}
		}
		st := d.l.FaultStats()
		if st.Passed+st.Dropped+st.Reordered+st.Corrupted+st.Duplicated != uint64(len(d.accepted)) {
			t.Fatalf("seed %d: stats %+v do not add up to %d accepted", seed, st, len(d.accepted))
		}
		// Copies refused outright are held ones of the refused length (a duplicate's
		// original is refused before its copy is tried).
		if uint64(corrupted) != st.Corrupted || st.Released+st.CopyErrors != st.Reordered {
			t.Fatalf("seed %d: %d corrupted arrived, stats %+v", seed, corrupted, st)
		}
		want := st.Passed + st.Reordered + st.Corrupted + 2*st.Duplicated - st.CopyErrors
		if uint64(len(d.stub.sent)) != want {
			t.Fatalf("seed %d: inner got %d datagrams, stats %+v say %d", seed, len(d.stub.sent), st, want)
		}
		for id, n := range got {
			if n > 2 {
				t.Fatalf("seed %d: datagram %d arrived %d times", seed, id, n)
			}
		}
		if st.Dropped == 0 || st.Reordered == 0 || st.Corrupted == 0 || st.Duplicated == 0 || st.Skipped == 0 {
			t.Fatalf("seed %d: a fault never happened (or never lacked a buffer): %+v", seed, st)
		}
		if len(d.l.free) != 8 {
			t.Fatalf("seed %d: %d of 8 buffers free after draining", seed, len(d.l.free))
		}
	}
}

// A copy the inner link refuses outright is lost (counted) and the datagram it belongs
// to stays accepted.
func TestCopyRefused(t *testing.T) {
	d := newDriver(t, Config{Impairments: Impairments{Duplicate: 1}})
	calls := 0
	inner := d.stub
	d.l.inner = &refuseSecond{stubLink: inner, calls: &calls}
	n, err := d.l.Send([]link.Packet{packet(1)})
	if n != 1 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	if st := d.l.FaultStats(); st.CopyErrors != 1 || st.Duplicated != 1 || len(inner.sent) != 1 || len(d.l.free) != DefaultBuffers {
		t.Fatalf("stats %+v, %d sent, %d buffers free", st, len(inner.sent), len(d.l.free))
	}
}

// refuseSecond refuses the second datagram of every Send.
type refuseSecond struct {
	*stubLink
	calls *int
}

func (r *refuseSecond) Send(pkts []link.Packet) (int, error) {
	*r.calls++
	if len(pkts) >= 2 && *r.calls == 1 {
		n, _ := r.stubLink.Send(pkts[:1])
		return n, errTooBig
	}
	return r.stubLink.Send(pkts)
}

func TestRates(t *testing.T) {
	now, clock := manualClock()
	m := Impairments{Drop: 0.02, Reorder: 0.05, Corrupt: 0.03, Duplicate: 0.04}
	d := newDriver(t, Config{Seed: 11, Impairments: m, Now: clock})
	const n = 40000
	d.run(t, seq(n), 64, nil)
	d.drain(t, now)
	st := d.l.FaultStats()
	// Each fault is tried only if the ones before it were not chosen.
	check := func(name string, got uint64, p float64) {
		mean := n * p
		sd := math.Sqrt(n * p * (1 - p))
		if math.Abs(float64(got)-mean) > 5*sd {
			t.Errorf("%s: %d, want %.0f ± %.0f", name, got, mean, 5*sd)
		}
	}
	check("dropped", st.Dropped, m.Drop)
	check("reordered", st.Reordered, (1-m.Drop)*m.Reorder)
	check("corrupted", st.Corrupted, (1-m.Drop)*(1-m.Reorder)*m.Corrupt)
	check("duplicated", st.Duplicated, (1-m.Drop)*(1-m.Reorder)*(1-m.Corrupt)*m.Duplicate)
	if st.Skipped != 0 {
		t.Errorf("%d faults skipped", st.Skipped)
	}
}

func TestDeterministic(t *testing.T) {
	run := func(seed uint64) [][]byte {
		now, clock := manualClock()
		d := newDriver(t, Config{Seed: seed, Now: clock,
			Impairments: Impairments{Drop: 0.1, Reorder: 0.1, Corrupt: 0.1, Duplicate: 0.1}})
		d.run(t, seq(1000), 17, nil)
		d.drain(t, now)
		out := make([][]byte, len(d.stub.sent))
		for i, s := range d.stub.sent {
			out[i] = s.data
		}
		return out
	}
	a, b, c := run(5), run(5), run(6)
	same := func(x, y [][]byte) bool {
		if len(x) != len(y) {
			return false
		}
		for i := range x {
			if !bytes.Equal(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	if !same(a, b) {
		t.Fatal("the same seed gave different transmissions")
	}
	if same(a, c) {
		t.Fatal("different seeds gave the same transmissions")
	}
}

func TestSetImpairments(t *testing.T) {
	d := newDriver(t, Config{})
	if err := d.l.SetImpairments(Impairments{Drop: 1.5}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("probability 1.5 accepted: %v", err)
	}
	if err := d.l.SetImpairments(Impairments{Drop: math.NaN()}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("NaN accepted: %v", err)
	}
	d.run(t, seq(10), 10, nil)
	if err := d.l.SetImpairments(Impairments{Drop: 1}); err != nil {
		t.Fatal(err)
	}
	if got := d.l.Impairments(); got != (Impairments{Drop: 1}) {
		t.Fatalf("Impairments() = %+v", got)
	}
	d.run(t, []uint64{10, 11, 12}, 10, nil)
	if len(d.stub.sent) != 10 {
		t.Fatalf("inner got %d datagrams after dropping everything from the 11th", len(d.stub.sent))
	}
}

func TestWrapValidates(t *testing.T) {
	bad := []Config{
		{Impairments: Impairments{Corrupt: -0.1}},
		{MaxHold: MaxMaxHold + 1},
		{MaxHold: -1},
		{HoldTime: -1},
		{Buffers: MaxBuffers + 1},
		{InjectBuffers: -1},
		{CookieQueue: -1},
	}
	for _, c := range bad {
		if _, err := Wrap(newStub(), c); !errors.Is(err, ErrInvalid) {
			t.Errorf("Wrap(%+v) = %v, want ErrInvalid", c, err)
		}
	}
	if _, err := Wrap(nil, Config{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Wrap(nil) = %v", err)
	}
}
