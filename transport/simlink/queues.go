package simlink

import (
	"fmt"
	"net/netip"
)

// Steer says on which queue of a host with several (Network.AddQueues) a datagram
// arrives, standing in for a NIC's receive-side steering.
type Steer int

const (
	// SteerSenderQueue delivers a datagram on the queue of the same index as the sender's
	// (modulo the queue count; a host of one queue sends from queue 0), as a veth pair
	// does with its TX and RX queues.
	SteerSenderQueue Steer = iota
	// SteerFlowHash delivers a datagram on the queue a hash of its sender's address and
	// source port picks, as a NIC's RSS does: where a flow lands is not the sender's
	// choice.
	SteerFlowHash
)

// queueSet is the queues of one host added by AddQueues.
type queueSet struct {
	links []*Link
	steer Steer
}

// AddQueues adds a host that receives at addr on n queues (1 to 64), each a Link of its
// own as AddHost's, for n engines of one host. Which queue a datagram to addr arrives on
// is steer's choice; every queue may send to anyone. The queues share addr's paths (their
// impairments and counters). Errors as AddHost's, and for n out of range.
func (n *Network) AddQueues(addr netip.AddrPort, queues int, steer Steer) ([]*Link, error) {
	if queues < 1 || queues > 64 || (steer != SteerSenderQueue && steer != SteerFlowHash) {
		return nil, fmt.Errorf("simlink: add %d queues with steering %d: need 1 to 64 and a known steering", queues, steer)
	}
	first, err := n.AddHost(addr)
	if err != nil {
		return nil, err
	}
	addr = canon(addr)
	n.mu.Lock()
	defer n.mu.Unlock()
	set := &queueSet{links: []*Link{first}, steer: steer}
	first.set = set
	for q := 1; q < queues; q++ {
		n.nextID++
		l := newLink(n, n.nextID, addr)
		l.set, l.queue = set, q
		set.links = append(set.links, l)
		n.links = append(n.links, l)
	}
	n.gen++
	return set.links, nil
}

// Queue is the link's queue index on its host (0 for a host of one queue).
func (l *Link) Queue() int { return l.queue }

// arrival returns the queue of host to (its first link, as the hosts table has it) that a
// datagram from link from with source port srcPort arrives on. Called with net.mu held.
func (to *Link) arrival(from *Link, srcPort uint16) *Link {
	s := to.set
	if s == nil {
		return to
	}
	k := from.queue
	if s.steer == SteerFlowHash {
		k = int(flowHash(from.addr.Addr(), srcPort))
	}
	return s.links[k%len(s.links)]
}

// queuesOf returns the open links of host h's queues (h alone when it has one).
func (h *Link) queuesOf() []*Link {
	if h.set == nil {
		return []*Link{h}
	}
	return h.set.links
}

// flowHash is FNV-1a of an address and a port.
func flowHash(a netip.Addr, port uint16) uint32 {
	b := a.As16()
	h := uint32(2166136261)
	for _, x := range b {
		h = (h ^ uint32(x)) * 16777619
	}
	h = (h ^ uint32(port&0xff)) * 16777619
	h = (h ^ uint32(port>>8)) * 16777619
	return h
}
