// Package fakeresolver is a next-hop resolve function whose answers a test controls, for
// the tests of package xdp/nexthop (its worker) and package xdp (a Device with
// Config.resolve): no kernel, no privileges.
package fakeresolver

import (
	"context"
	"net/netip"
	"sync"
)

// Answer is what a Resolver answers for one peer: a MAC address or an error.
type Answer struct {
	MAC [6]byte
	Err error
}

// Resolver is a resolve function (Resolve) whose answers the test controls: for a peer
// with a gate, the call blocks until the test sends the answer on it (or the context
// ends); otherwise it answers with Auto at once. Safe from any goroutine.
type Resolver struct {
	mu    sync.Mutex
	gates map[netip.Addr]chan Answer
	calls map[netip.Addr]int
	// Auto answers a call for a peer without a gate; call counts the calls for the peer
	// from 1. Set it before the first call.
	Auto func(ip netip.Addr, call int) Answer
}

// New returns a Resolver without gates and without Auto.
func New() *Resolver {
	return &Resolver{gates: map[netip.Addr]chan Answer{}, calls: map[netip.Addr]int{}}
}

// Gate makes calls for ip block until Release.
func (r *Resolver) Gate(ip netip.Addr) {
	r.mu.Lock()
	r.gates[ip] = make(chan Answer, 1)
	r.mu.Unlock()
}

// Release answers the blocked call for ip.
func (r *Resolver) Release(ip netip.Addr, a Answer) {
	r.mu.Lock()
	g := r.gates[ip]
	r.mu.Unlock()
	g <- a
}

// Calls returns how many times ip was resolved.
func (r *Resolver) Calls(ip netip.Addr) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[ip]
}

// Resolve is the resolve function: it answers ip's call as the test set up.
func (r *Resolver) Resolve(ctx context.Context, ip netip.Addr) ([6]byte, error) {
	r.mu.Lock()
	r.calls[ip]++
	call := r.calls[ip]
	g := r.gates[ip]
	auto := r.Auto
	r.mu.Unlock()
	if g == nil {
		a := auto(ip, call)
		return a.MAC, a.Err
	}
	select {
	case a := <-g:
		return a.MAC, a.Err
	case <-ctx.Done():
		return [6]byte{}, ctx.Err()
	}
}
