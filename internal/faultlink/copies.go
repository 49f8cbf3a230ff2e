package faultlink

import (
	"net/netip"

	"github.com/xdpndk/xdpndk/transport/link"
)

// copies are the wrapper's copies of datagrams (Config.Buffers buffers): the free ones, the
// held (reordered) ones, the ones the inner link refused for now, and the staging array of
// one call of the inner link's Send. Engine goroutine only.
type copies struct {
	bufs    [][]byte // Buffers copies of up to MaxPayload bytes
	meta    []copyMeta
	free    []int32
	held    []int32 // reordered datagrams, oldest first
	pending []int32 // copies the inner link refused for now, to be sent first
	out     []link.Packet
	ent     []entry
}

// init allocates n buffers of size bytes, all free, and room to stage a chunk of datagrams
// (two entries each: a duplicate) and every buffer.
func (c *copies) init(n, size int) {
	c.bufs, c.meta = make([][]byte, n), make([]copyMeta, n)
	c.free = make([]int32, n)
	c.held = make([]int32, 0, n)
	c.pending = make([]int32, 0, n)
	c.out = make([]link.Packet, 0, 2*chunk+n)
	c.ent = make([]entry, 0, 2*chunk+n)
	arena := make([]byte, n*size)
	for i := range c.bufs {
		c.bufs[i] = arena[i*size : (i+1)*size : (i+1)*size]
		c.free[i] = int32(n - 1 - i)
	}
}

// entryKind says what an entry of the staging array carries.
type entryKind uint8

const (
	entryPrimary entryKind = iota // the delivery of input datagram owner (itself or its corrupted copy)
	entryDup                      // the second copy of input datagram owner
	entryExtra                    // a copy from an earlier call: refused then, or released from hold
	entryGone                     // a copy the inner link refused with an error: discarded
)

type entry struct {
	kind  entryKind
	owner int32 // input index (entryPrimary, entryDup)
	buf   int32 // buffer of the copy, -1 for the caller's own segments
}

// copyMeta describes the datagram held in one buffer.
type copyMeta struct {
	remote    netip.AddrPort
	localPort uint16
	n         int
	after     int   // held: datagrams still to go out before it is released
	deadline  int64 // held: release time
	wasHeld   bool  // a reordered datagram (FaultStats.Released when it goes out)
	dead      bool  // its input was not accepted: free it wherever it is found
}

// take returns a free buffer, or -1.
func (c *copies) take() int32 {
	if len(c.free) == 0 {
		return -1
	}
	b := c.free[len(c.free)-1]
	c.free = c.free[:len(c.free)-1]
	c.meta[b] = copyMeta{}
	return b
}

func (c *copies) put(b int32) { c.free = append(c.free, b) }

// copyIn copies datagram p of plen bytes into buffer b.
func (c *copies) copyIn(b int32, p *link.Packet, plen int) {
	buf := c.bufs[b]
	w := 0
	for i := 0; i < int(p.NSegs); i++ {
		w += copy(buf[w:], p.Segs[i])
	}
	m := &c.meta[b]
	m.remote, m.localPort, m.n = p.Remote, p.LocalPort, plen
}

// copyPacket returns the datagram in buffer b as a packet without flags.
func (c *copies) copyPacket(b int32) link.Packet {
	m := &c.meta[b]
	pk := link.Packet{Remote: m.remote, LocalPort: m.localPort, NSegs: 1}
	pk.Segs[0] = c.bufs[b][:m.n]
	return pk
}

func (c *copies) stage(pk *link.Packet, e entry) {
	c.out = append(c.out, *pk)
	c.ent = append(c.ent, e)
}

func (c *copies) stageCopy(b int32, kind entryKind, owner int32) {
	pk := c.copyPacket(b)
	c.stage(&pk, entry{kind: kind, owner: owner, buf: b})
}

// stageBacklog stages the copies refused earlier and the held datagrams due by now.
func (c *copies) stageBacklog(now int64) {
	for _, b := range c.pending {
		c.stageCopy(b, entryExtra, -1)
	}
	c.pending = c.pending[:0]
	k := 0
	for _, b := range c.held {
		if c.meta[b].deadline <= now {
			c.stageCopy(b, entryExtra, -1)
		} else {
			c.held[k] = b
			k++
		}
	}
	c.held = c.held[:k]
}

// wentOut counts one datagram sent after the held ones and stages those whose turn came.
func (c *copies) wentOut() {
	k := 0
	for _, b := range c.held {
		if c.meta[b].after--; c.meta[b].after <= 0 {
			c.stageCopy(b, entryExtra, -1)
		} else {
			c.held[k] = b
			k++
		}
	}
	c.held = c.held[:k]
}

// push hands the staged entries to the inner link. It returns how many were sent (entries
// before it that the inner link refused with an error are marked entryGone and freed), and
// the error of a primary entry the inner link refused (that entry is at the returned
// index).
func (c *copies) push(inner link.Link, ctr *counters) (int, error) {
	pos := 0
	for pos < len(c.out) {
		k, err := inner.Send(c.out[pos:])
		pos += k
		if err == nil || pos >= len(c.out) {
			return pos, nil
		}
		e := &c.ent[pos]
		if e.kind == entryPrimary {
			return pos, err
		}
		// A copy of ours the inner link cannot send: it is lost, like any fault.
		ctr.copyErrors.Add(1)
		c.meta[e.buf].dead = true
		e.kind = entryGone
		c.put(e.buf)
		pos++
	}
	return pos, nil
}

// unhold removes buffer b from the held datagrams and reports whether it was there.
func (c *copies) unhold(b int32) bool {
	for i, h := range c.held {
		if h == b {
			c.held = append(c.held[:i], c.held[i+1:]...)
			return true
		}
	}
	return false
}

// settleCopies frees the staged copies that were sent or are dead, and keeps those the
// inner link refused for now (a duplicate's second copy, a backlog copy) for the next
// call. pos is the number of staged entries sent.
func (c *copies) settleCopies(pos int, ctr *counters) {
	for j := range c.ent {
		e := &c.ent[j]
		if e.buf < 0 || e.kind == entryGone {
			continue
		}
		m := &c.meta[e.buf]
		switch {
		case m.dead:
			c.put(e.buf)
		case j < pos:
			if m.wasHeld {
				ctr.released.Add(1)
			}
			c.put(e.buf)
		default:
			c.pending = append(c.pending, e.buf)
		}
	}
	c.out = c.out[:0]
}

// flush sends through inner what waits without new datagrams: copies refused earlier and
// held datagrams due by now.
func (c *copies) flush(now int64, inner link.Link, ctr *counters) {
	if len(c.pending) == 0 && !c.holdDue(now) {
		return
	}
	c.out, c.ent = c.out[:0], c.ent[:0]
	c.stageBacklog(now)
	pos, _ := c.push(inner, ctr) // only copies are staged: push returns no error for them
	c.settleCopies(pos, ctr)
}

// holdDue reports whether a held datagram's time has come.
func (c *copies) holdDue(now int64) bool {
	for _, b := range c.held {
		if c.meta[b].deadline <= now {
			return true
		}
	}
	return false
}
