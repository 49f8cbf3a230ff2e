package simlink

import (
	"math/bits"
	"math/rand/v2"
	"net/netip"
)

// pathKey names a path: one direction between two host addresses.
type pathKey struct {
	from, to netip.AddrPort
}

// path is the state of one direction between two hosts: its impairments, its generator,
// its Gilbert–Elliott state, its serialization clock and its counters. Paths are keyed by
// address, so they outlive the links at their ends (a host closed and added again keeps
// its paths). Guarded by Network.mu.
type path struct {
	key          pathKey
	seed0, seed1 uint64   // this path's generator seeds, from Config.Seed and the addresses
	pcg          rand.PCG // reseeded for every datagram: see reseed
	next         uint64   // index of the next datagram Send accepts for the path

	own         Impairments // used instead of the network default when hasOwn
	hasOwn      bool
	partitioned bool
	bn          *Bottleneck // the shared queue the path feeds, or nil (its own bandwidth)

	bad       bool   // Gilbert–Elliott chain is in the bad state
	busyUntil int64  // when the bandwidth-limited wire finishes what it was given
	busyRem   uint64 // bit·ns of serialization not yet counted in busyUntil (< Bandwidth)
	maxAt     int64  // the latest delivery time queued so far (for Reordered)

	stats PathStats
}

func newPath(key pathKey, seed uint64) *path {
	h := uint64(14695981039346656037) // FNV-1a over both addresses, then mixed with the seed
	for _, ap := range [...]netip.AddrPort{key.from, key.to} {
		a := ap.Addr().As16()
		for _, b := range a {
			h = (h ^ uint64(b)) * 1099511628211
		}
		h = (h ^ uint64(ap.Port()>>8)) * 1099511628211
		h = (h ^ uint64(ap.Port()&0xff)) * 1099511628211
	}
	p := &path{key: key, maxAt: -1 << 63}
	p.seed0 = splitmix64(seed ^ h)
	p.seed1 = splitmix64(p.seed0 ^ 0x6a09e667f3bcc909)
	return p
}

// splitmix64 is the finalizer of Steele, Lea and Flood's SplittableRandom: a bijective
// 64-bit mix used to derive well-spread generator seeds from structured inputs.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// impairments returns what the path applies: its own settings or the network default.
func (p *path) impairments(def *Impairments) *Impairments {
	if p.hasOwn {
		return &p.own
	}
	return def
}

// reseed points the generator at datagram k's own stream, so that each datagram's draws
// depend on (seed, path, k) alone and never on how many draws earlier datagrams made.
func (p *path) reseed(k uint64) {
	p.pcg.Seed(splitmix64(p.seed0+k), splitmix64(p.seed1^k))
}

// float returns a uniform draw in [0, 1).
func (p *path) float() float64 {
	return float64(p.pcg.Uint64()>>11) * 0x1p-53
}

// uintn returns a uniform draw in [0, n) for n > 0 (Lemire's multiply-shift, unbiased).
func (p *path) uintn(n uint64) uint64 {
	hi, lo := bits.Mul64(p.pcg.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(p.pcg.Uint64(), n)
		}
	}
	return hi
}

// dropReason says why a datagram was dropped at Send; 0 means it was not.
type dropReason uint8

const (
	keep dropReason = iota
	dropMTU
	dropPartition
	dropQueue
	dropLoss
	dropBurst
)

// count adds one drop for r to the path's counters.
func (p *path) count(r dropReason) {
	switch r {
	case dropMTU:
		p.stats.DroppedMTU++
	case dropPartition:
		p.stats.DroppedPartition++
	case dropQueue:
		p.stats.DroppedQueue++
	case dropLoss:
		p.stats.DroppedLoss++
	case dropBurst:
		p.stats.DroppedBurst++
	}
}

// maxFlips is the most bits corruption flips in one copy.
const maxFlips = 3

// fate is what the path does to one datagram.
type fate struct {
	drop   dropReason
	copies int               // 1, or 2 when duplicated
	at     [2]int64          // delivery time of each copy
	split  [2]int32          // first segment length of each copy on receive (0: one segment)
	nflip  [2]int            // bits to flip in each copy (0: not corrupted)
	flip   [2][maxFlips]uint // distinct bit positions to flip, bit i of byte i/8 (LSB first)
}

// decide draws the fate of the next datagram of length n (1 <= n) sent at time now, and
// advances the path's burst and serialization state. It is the only place randomness is
// drawn. While any random impairment is on, draws happen in a fixed order, each made
// whether or not its own impairment is on:
//
//	loss, burst transition, burst loss, [drops], duplicate, corrupt×2, jitter×2, split×2,
//	then the bit positions of the corrupted copies
//
// so switching one impairment on or off does not change what the others decide. With none
// on, nothing is drawn at all.
func (p *path) decide(m *Impairments, n int, now int64, splitRx int, f *fate) {
	*f = fate{}
	// A path that draws nothing (no random impairment on) skips the generator: each
	// datagram has a stream of its own, so skipping one disturbs no other.
	random := m.Loss > 0 || m.Burst.GoodToBad > 0 || m.Duplicate > 0 || m.Corrupt > 0 ||
		m.Jitter > 0 || splitRx == SplitRandom
	var uLoss, uStep, uBad float64
	if random {
		p.reseed(p.next)
		uLoss, uStep, uBad = p.float(), p.float(), p.float()
	}
	p.next++

	// The Gilbert–Elliott chain steps once per datagram, before its state decides.
	switch b := &m.Burst; {
	case b.GoodToBad == 0:
		p.bad = false
	case p.bad:
		p.bad = uStep >= b.BadToGood
	default:
		p.bad = uStep < b.GoodToBad
	}

	if m.MTU > 0 && n > m.MTU {
		f.drop = dropMTU
		return
	}
	if p.partitioned {
		f.drop = dropPartition
		return
	}
	depart := now
	if b := p.bn; b != nil {
		end, ok := b.admit(n, now)
		if !ok {
			f.drop = dropQueue
			return
		}
		depart = end
	} else if bw := m.Bandwidth; bw > 0 {
		if now > p.busyUntil {
			p.busyUntil, p.busyRem = now, 0 // the wire was idle
		}
		if m.QueueBytes > 0 {
			backlog := float64(p.busyUntil-now) * float64(bw) / 8e9 // bytes not yet on the wire
			if backlog+float64(n) > float64(m.QueueBytes) {
				f.drop = dropQueue
				return
			}
		}
		// n*8 bits take n*8e9/bw ns; the remainder carries over so that a run of
		// datagrams takes exactly its total bits' time, without per-datagram rounding.
		work := uint64(n)*8e9 + p.busyRem
		p.busyUntil = addSat(p.busyUntil, int64(work/uint64(bw)))
		p.busyRem = work % uint64(bw)
		depart = p.busyUntil
	}
	// Loss happens on the wire, after the datagram took its share of the bandwidth.
	if uLoss < m.Loss {
		f.drop = dropLoss
		return
	}
	if p.bad && uBad < m.Burst.BadLoss {
		f.drop = dropBurst
		return
	}

	uDup := 1.0
	uCorrupt := [2]float64{1, 1}
	var jitter, split [2]uint64
	if random {
		uDup = p.float()
		uCorrupt = [2]float64{p.float(), p.float()}
		for c := range jitter {
			jitter[c] = p.uintn(uint64(m.Jitter) + 1)
		}
		for c := range split {
			split[c] = 1 + p.uintn(uint64(max(n-1, 1)))
		}
	}

	f.copies = 1
	if uDup < m.Duplicate {
		f.copies = 2
	}
	arrive := addSat(depart, int64(m.Latency))
	for c := 0; c < f.copies; c++ {
		f.at[c] = addSat(arrive, int64(jitter[c]))
		switch {
		case splitRx == SplitRandom && n >= 2:
			f.split[c] = int32(split[c])
		case splitRx > 0 && n > splitRx:
			f.split[c] = int32(splitRx)
		}
	}
	for c := 0; c < f.copies; c++ {
		if uCorrupt[c] < m.Corrupt {
			p.pickFlips(n, f, c)
		}
	}
}

// pickFlips chooses 1 to maxFlips distinct bit positions in an n-byte datagram for copy c.
func (p *path) pickFlips(n int, f *fate, c int) {
	nbits := uint64(n) * 8
	want := 1 + int(p.uintn(maxFlips))
	for tries := 0; f.nflip[c] < want && tries < 8*maxFlips; tries++ {
		pos := uint(p.uintn(nbits))
		fresh := true
		for _, q := range f.flip[c][:f.nflip[c]] {
			fresh = fresh && q != pos
		}
		if fresh {
			f.flip[c][f.nflip[c]] = pos
			f.nflip[c]++
		}
	}
}

// applyFlips flips copy c's chosen bits in b.
func (f *fate) applyFlips(b []byte, c int) {
	for _, pos := range f.flip[c][:f.nflip[c]] {
		if i := pos / 8; i < uint(len(b)) {
			b[i] ^= 1 << (pos % 8)
		}
	}
}
