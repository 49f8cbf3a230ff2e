// Package plumb lets this module's own commands, benchmarks and tests reach the protocol
// engine under an ndk adapter, which package ndk keeps out of its public API: the engine,
// its link and its QPs, and the options an adapter over a simulated link needs (a UMEM, a
// heap, an engine configuration with a virtual clock).
//
// Package ndk fills in the functions when it is initialised; they take and return ndk's
// types as any, because ndk imports this package and it cannot import ndk. Applications
// outside this module cannot import it (it is internal) and have no need to: everything an
// application uses is ndk's public API.
package plumb

import (
	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/link"
)

// Extra is what an adapter takes beyond ndk.Options, for tests and benchmarks that open
// one on a link of their own (ndk.OpenLink): ndk.Open sets UMEM and Heap from the AF_XDP
// device itself.
type Extra struct {
	// UMEM, if set, is the pinned memory the link transmits from: regions inside it leave
	// zero-copy, FastRegister takes its pages.
	UMEM *memreg.UMEM
	// Heap is UMEM's heap for Adapter.Alloc (nil: Alloc is not supported).
	Heap *memreg.Heap
	// Engine, if set, adjusts the engine's configuration last (a virtual clock, protocol
	// parameters a benchmark compares).
	Engine func(*transport.Config)
	// Links, if set, are the links of the adapter's engines, one engine each (several
	// queues of a simulated host, say); the link ndk.OpenLink is given is then the
	// adapter's own view (its address, limits and counters) and may be one of them.
	Links []link.Link
	// WrapLink, if set, is given the link of each engine that ndk.Open creates (engine
	// 0, 1, ... in order), before any engine runs on it, and returns the link the engine
	// runs on instead: a wrapper that records the datagrams (internal/pcaplink, ndkpeer
	// --pcap). The adapter's own view (its address, limits, counters, peer resolution)
	// stays the device's link. An error fails ndk.Open.
	WrapLink func(l link.Link, engine int) (link.Link, error)
}

// Set by package ndk when it is initialised; nil until then (a program that does not link
// ndk has no adapter to reach into).
var (
	// SetExtra records x in the ndk.Options that opts (a *ndk.Options) points to, for
	// ndk.OpenLink.
	SetExtra func(opts any, x Extra)
	// Engine returns the (first) engine of an *ndk.Adapter.
	Engine func(adapter any) *transport.Engine
	// Group returns the engines of an *ndk.Adapter.
	Group func(adapter any) *transport.Group
	// Link returns the link of an *ndk.Adapter.
	Link func(adapter any) link.Link
	// QP returns the engine's QP under an *ndk.QP.
	QP func(qp any) *transport.QP
)
