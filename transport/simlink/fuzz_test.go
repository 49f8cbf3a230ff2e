package simlink

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"
)

// FuzzOperations decodes the input into a sequence of link and network operations (any
// packet shape, any impairments, closes and restarts, misused Release) and checks that
// nothing panics and that no buffer and no datagram is lost track of.
func FuzzOperations(f *testing.F) {
	f.Add([]byte{0, 0, 1, 40, 1, 0, 1, 1, 8, 3, 10, 1, 1, 8, 2, 1})
	f.Add([]byte{4, 0, 1, 200, 30, 60, 90, 120, 5, 9, 0, 0, 1, 255, 2, 7, 0, 2, 1, 100, 0, 3, 50, 1, 1, 16, 6, 1, 0, 0, 1, 9})
	f.Add([]byte{5, 0, 1, 0, 0, 1, 10, 1, 3, 200, 1, 1, 16, 5, 0, 1, 0, 1, 0, 10, 1, 3, 255, 1, 0, 16})
	f.Fuzz(func(t *testing.T, ops []byte) {
		clk := NewManualClock(0)
		n := NewNetwork(Config{Clock: clk, Seed: 3, Buffers: 2, RxQueue: 64, TxDoneQueue: 4, SplitRx: SplitRandom})
		defer n.Close()
		var hosts [3]*Link
		for i := range hosts {
			hosts[i], _ = n.AddHost(hostAddr(byte(i + 1)))
		}
		var held [3][]link.Packet
		data := make([]byte, 2*MaxMaxPayload)
		next := func() byte {
			if len(ops) == 0 {
				return 0
			}
			b := ops[0]
			ops = ops[1:]
			return b
		}
		for len(ops) > 0 {
			h := int(next()) % 3
			l := hosts[h]
			switch next() % 10 {
			case 0: // send
				var p [2]link.Packet
				for i := range p {
					to := hostAddr(1 + next()%4) // host 4 does not exist
					p[i] = link.Packet{Remote: to, LocalPort: uint16(next()) * 300,
						NSegs: next() % 6, Flags: link.PacketFlag(next() % 2), Cookie: uint64(i)}
					for j := 0; j < int(p[i].NSegs) && j < link.MaxSegments; j++ {
						length := int(next()) * int(next()) / 8
						p[i].Segs[j] = data[:length]
					}
				}
				_, _ = l.Send(p[:])
			case 1: // receive
				var p [4]link.Packet
				k, _ := l.Receive(p[:1+next()%4])
				held[h] = append(held[h], p[:k]...)
			case 2: // release, after mangling the segments as an engine might
				for i := range held[h] {
					p := &held[h][i]
					if s := p.Segs[0]; len(s) > 0 {
						p.Segs[0] = s[int(next())%len(s):]
					}
				}
				l.Release(held[h])
				held[h] = held[h][:0]
			case 3:
				clk.Advance(time.Duration(next()) * time.Microsecond)
			case 4:
				m := Impairments{
					Latency: time.Duration(next()) * time.Microsecond, Jitter: time.Duration(next()) * time.Microsecond,
					Loss: float64(next()) / 255, Duplicate: float64(next()) / 255, Corrupt: float64(next()) / 255,
					Burst:     Burst{GoodToBad: float64(next()) / 255, BadToGood: float64(next()) / 255, BadLoss: float64(next()) / 255},
					Bandwidth: int64(next()) * 1_000_000, QueueBytes: int(next()) * 100, MTU: int(next()) * 8,
				}
				_ = n.SetPath(l.LocalAddr(), hostAddr(1+next()%3), m)
			case 5:
				other := hostAddr(1 + next()%3)
				if next()%2 == 0 {
					n.Partition(l.LocalAddr(), other)
				} else {
					n.Heal(l.LocalAddr(), other)
				}
			case 6: // close, release what it held, restart
				_ = l.Close()
				if next()%2 == 0 {
					l.Release(held[h])
					held[h] = held[h][:0]
				}
				if nl, err := n.AddHost(l.LocalAddr()); err == nil {
					hosts[h] = nl
				}
			case 7:
				var done [3]uint64
				l.TxDone(done[:])
			case 8:
				_ = l.Wait(0)
				l.Wake()
			case 9: // releases that must be ignored
				var junk [3]link.Packet
				junk[0].SetData(data[:10])
				junk[1].NSegs = 255
				l.Release(junk[:])
				if o := (h + 1) % 3; len(held[o]) > 0 {
					cp := append([]link.Packet(nil), held[o]...)
					l.Release(cp)
				}
			}
		}
		checkBooks(t, n)
	})
}

// checkBooks verifies that every buffer is free, queued or lent exactly once, and that the
// counters of every path add up.
func checkBooks(t *testing.T, n *Network) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	var free, queued, lent int
	for _, o := range n.pool.owner {
		switch {
		case o == bufFree:
			free++
		case o == bufQueued:
			queued++
		default:
			lent++
		}
	}
	inQueues := 0
	for _, l := range n.links {
		inQueues += l.q.len()
	}
	if free != len(n.pool.free) || queued != inQueues {
		t.Fatalf("pool: %d free (list %d), %d queued (queues %d), %d lent", free, len(n.pool.free), queued, inQueues, lent)
	}
	perPath := make(map[*path]uint64)
	for _, l := range n.links {
		for _, q := range [][]entry{l.q.heap} {
			for i := range q {
				perPath[q[i].path]++
			}
		}
		for i := 0; i < l.q.rlen; i++ {
			perPath[l.q.ring[(l.q.rhead+i)&(len(l.q.ring)-1)].path]++
		}
	}
	for k, p := range n.paths {
		s := p.stats
		if s.Sent+s.Duplicated != s.Delivered+perPath[p]+s.Dropped() {
			t.Fatalf("path %v: sent %d + dup %d != delivered %d + queued %d + dropped %d",
				netip.AddrPort(k.from), s.Sent, s.Duplicated, s.Delivered, perPath[p], s.Dropped())
		}
	}
}
