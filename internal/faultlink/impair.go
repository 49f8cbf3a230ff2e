package faultlink

import (
	"math"
	"sync/atomic"
)

// impairer holds the probabilities of the impairments, which any goroutine may change, and
// the seeded generator that draws the decisions, which is the engine goroutine's.
type impairer struct {
	p   [4]atomic.Uint64 // math.Float64bits of Drop, Reorder, Corrupt, Duplicate
	rng uint64
}

// store sets the probabilities.
func (m *impairer) store(im Impairments) {
	m.p[0].Store(math.Float64bits(im.Drop))
	m.p[1].Store(math.Float64bits(im.Reorder))
	m.p[2].Store(math.Float64bits(im.Corrupt))
	m.p[3].Store(math.Float64bits(im.Duplicate))
}

// load returns the probabilities.
func (m *impairer) load() Impairments {
	return Impairments{
		Drop: math.Float64frombits(m.p[0].Load()), Reorder: math.Float64frombits(m.p[1].Load()),
		Corrupt: math.Float64frombits(m.p[2].Load()), Duplicate: math.Float64frombits(m.p[3].Load()),
	}
}

// next returns the generator's next value (splitmix64).
func (m *impairer) next() uint64 {
	m.rng += 0x9e3779b97f4a7c15
	z := m.rng
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// chance draws one decision with impairment i's probability p (no draw for p == 0).
func (m *impairer) chance(i int) bool {
	p := math.Float64frombits(m.p[i].Load())
	return p > 0 && float64(m.next()>>11)/(1<<53) < p
}

// SetImpairments changes the probabilities from the next datagram Send is given. Safe from
// any goroutine.
func (l *Link) SetImpairments(m Impairments) error {
	if err := m.Validate(); err != nil {
		return err
	}
	l.imp.store(m)
	return nil
}

// Impairments returns the probabilities in effect. Safe from any goroutine.
func (l *Link) Impairments() Impairments { return l.imp.load() }
