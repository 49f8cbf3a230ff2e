package ack

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/xdpndk/xdpndk/transport/wire"
)

// receiveModel is the obvious implementation of a receive window: a set of the PSNs that
// arrived beyond the cumulative point.
type receiveModel struct {
	cum     wire.PSN
	window  uint32
	arrived map[wire.PSN]bool
	high    wire.PSN // one past the highest PSN received (cum at first)
	last    wire.PSN // one past the PSN received last (new arrivals only)
}

func (m *receiveModel) check(p wire.PSN) Verdict {
	if p.Less(m.cum) {
		if m.cum.Sub(p) <= m.window {
			return Duplicate
		}
		return TooOld
	}
	if m.cum.Add(m.window).LessEq(p) {
		return TooNew
	}
	if m.arrived[p] {
		return Duplicate
	}
	return New
}

func (m *receiveModel) receive(p wire.PSN) Verdict {
	if v := m.check(p); v != New {
		return v
	}
	m.arrived[p] = true
	m.last = p.Add(1)
	if m.high.LessEq(p) {
		m.high = p.Add(1)
	}
	for m.arrived[m.cum] {
		delete(m.arrived, m.cum)
		m.cum = m.cum.Add(1)
	}
	return New
}

// highBlock is the block of the most recent arrivals: a, one past the latest arrival if
// that lies past the cumulative point (and below the highest), else one past the highest;
// and bit i for PSN a-1-i arrived beyond the cumulative point.
func (m *receiveModel) highBlock() (wire.PSN, uint64) {
	if len(m.arrived) == 0 {
		return m.cum, 0
	}
	a := m.high
	if m.cum.Less(m.last) && m.last.Less(m.high) {
		a = m.last
	}
	var s uint64
	for i := uint32(0); i < 64; i++ {
		if m.arrived[a-1-wire.PSN(i)] {
			s |= 1 << i
		}
	}
	return a, s
}

func (m *receiveModel) sack() uint64 {
	var s uint64
	for i := uint32(0); i < 64; i++ {
		if m.arrived[m.cum.Add(1+i)] {
			s |= 1 << i
		}
	}
	return s
}

// FuzzReceiveTracker decodes the input into a tracker (initial PSN, window) and a sequence
// of Check+Receive calls at PSNs near the interesting places of the window, and compares
// every verdict, Cumulative, SACK, High and HasGap with receiveModel.
//
// Input: byte 0 picks the window (64 << (b&3)) and how the initial PSN is made (bit 2 set:
// from bytes 1-4; else just below 2^32, minus byte 1, so the stream wraps early); then
// each pair of bytes (kind, arg) is one Receive:
//
//	kind&7 0-2: cum + arg%72          (the SACK range, holes and fills)
//	       3:   cum + window - 8 + arg%16 (the window's end)
//	       4:   cum - 1 - arg         (duplicates behind)
//	       5:   cum - window - 8 + arg%16 (the Duplicate/TooOld edge)
//	       6:   cum + arg*(window/64) (anywhere in and a bit past the window)
//	       7:   cum + 2^31 - 8 + arg%16 (half the PSN space away)
func FuzzReceiveTracker(f *testing.F) {
	f.Add([]byte{0x00, 0x03, 0, 0, 0, 1, 0, 2, 0, 3})
	f.Add([]byte{0x01, 0x10, 0, 5, 0, 3, 1, 1, 0, 0, 2, 2, 4, 9, 3, 0, 5, 8})
	f.Add([]byte{0x04, 0xff, 0xff, 0xff, 0xf0, 6, 10, 6, 63, 6, 64, 0, 0, 7, 7, 7, 8})
	f.Add([]byte{0x02, 0x00, 3, 15, 3, 7, 3, 8, 0, 1, 0, 2, 0, 0, 4, 0, 5, 7, 5, 8})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		window := 64 << (data[0] & 3)
		var initial wire.PSN
		if data[0]&4 != 0 && len(data) >= 5 {
			initial = wire.PSN(binary.BigEndian.Uint32(data[1:5]))
			data = data[5:]
		} else {
			initial = wire.PSN(math.MaxUint32 - uint32(data[1]))
			data = data[2:]
		}
		r := NewReceiveTracker(initial, window)
		m := &receiveModel{cum: initial, window: uint32(r.Window()), arrived: map[wire.PSN]bool{}, high: initial, last: initial}
		if r.Window() != window {
			t.Fatalf("window %d, want %d", r.Window(), window)
		}
		w := uint32(window)
		for i := 0; i+1 < len(data); i += 2 {
			kind, arg := data[i]&7, uint32(data[i+1])
			cum := m.cum
			var p wire.PSN
			switch kind {
			case 0, 1, 2:
				p = cum.Add(arg % 72)
			case 3:
				p = cum.Add(w - 8 + arg%16)
			case 4:
				p = cum - 1 - wire.PSN(arg)
			case 5:
				p = cum - wire.PSN(w+8) + wire.PSN(arg%16)
			case 6:
				p = cum.Add(arg * (w / 64))
			case 7:
				p = cum.Add(1<<31 - 8 + arg%16)
			}
			if got, want := r.Check(p), m.check(p); got != want {
				t.Fatalf("op %d: Check(%d) with cum %d = %v, model %v", i/2, p, cum, got, want)
			}
			want := m.receive(p)
			if got := r.Receive(p); got != want {
				t.Fatalf("op %d: Receive(%d) with cum %d = %v, model %v", i/2, p, cum, got, want)
			}
			if r.Cumulative() != m.cum {
				t.Fatalf("op %d: Cumulative %d, model %d", i/2, r.Cumulative(), m.cum)
			}
			if s := m.sack(); r.SACK() != s {
				t.Fatalf("op %d: SACK %#x, model %#x", i/2, r.SACK(), s)
			}
			hp, hs := r.High()
			if mp, ms := m.highBlock(); hp != mp || hs != ms {
				t.Fatalf("op %d: High %d %#x, model %d %#x", i/2, hp, hs, mp, ms)
			}
			if r.HasGap() != (len(m.arrived) > 0) || r.Pending() != len(m.arrived) {
				t.Fatalf("op %d: HasGap %v Pending %d, model %d arrived", i/2, r.HasGap(), r.Pending(), len(m.arrived))
			}
		}
	})
}
