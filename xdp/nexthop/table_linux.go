package nexthop

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Config configures a Table.
type Config struct {
	SrcMAC [6]byte    // the device's Ethernet address, the source of every template
	Src    netip.Addr // the device's address, the source of every template
	Port   uint16     // our UDP port, the source port of every template
	// Entries bounds the table (xdp's Config.NeighbourEntries).
	Entries int
	// MaxResolving bounds the peers being resolved at once (xdp.Config.NeighbourResolving).
	MaxResolving int
	// ResolveTimeout bounds a resolution; held datagrams without an entry are dropped a
	// second after it.
	ResolveTimeout time.Duration
	// NegativeTTL is how long a failed resolution is remembered.
	NegativeTTL time.Duration
	// Refresh is the period of re-validation of entries in use; unused for twice as long,
	// an entry is removed.
	Refresh time.Duration
	// Wake is called by the worker after a round that finished resolutions, so that links
	// holding datagrams send them.
	Wake func()

	// Resolve, when set, replaces the kernel as the source of next hops (tests): the
	// worker calls it on its own goroutines.
	Resolve func(ctx context.Context, peer netip.Addr) ([6]byte, error)
	// Resolver is the netlink socket the worker resolves through (Resolve unset); the
	// caller keeps it and closes it after the Table.
	Resolver *Resolver
	// IfIndex is the device's interface index (Resolve unset).
	IfIndex int
	// DevErr, when set, is the error every resolution fails with: the device cannot have
	// Ethernet next hops (loopback, NOARP).
	DevErr error
}

// Table is a device's next-hop table with its resolution worker. Lookups go through the
// links' Hops; ResolvePeer, Info and Stats are safe from any goroutine.
type Table struct {
	table   *neighTable
	worker  *neighWorker
	backend neighBackend
	started bool // the worker goroutine runs
}

// NewTable creates the table, its worker (not running until Start) and the worker's
// backend, subscribed to the kernel's neighbour events unless cfg.Resolve is set. Call it
// in the device's network namespace.
func NewTable(cfg Config) (*Table, error) {
	t := &Table{table: newNeighTable(cfg.Entries)}
	nc := neighConfig{
		srcMAC: cfg.SrcMAC, src: cfg.Src, port: cfg.Port, timeout: cfg.ResolveTimeout,
		negativeTTL: cfg.NegativeTTL, refresh: cfg.Refresh, idle: 2 * cfg.Refresh,
		maxResolving: cfg.MaxResolving,
	}
	if cfg.Resolve != nil {
		t.backend = funcBackend{fn: cfg.Resolve}
		t.worker = newNeighWorker(t.table, nc, t.backend, cfg.Wake)
		return t, nil
	}
	b, err := newNetlinkBackend(cfg.Resolver, cfg.IfIndex, cfg.DevErr)
	if err != nil {
		return t, err
	}
	t.backend = b
	t.worker = newNeighWorker(t.table, nc, b, cfg.Wake)
	return t, b.subscribe(t.worker)
}

// Start runs the worker goroutine. Call it once, after the links exist.
func (t *Table) Start() {
	t.started = true
	go t.worker.run()
}

// Running reports whether Start was called.
func (t *Table) Running() bool { return t.started }

// ResolvePeer has the worker resolve peer and waits for the result: nil once the peer is
// resolved, at once if it is already; the resolution's error (a recent failure's at once);
// or an error wrapping ctx.Err(). The caller has checked peer with CheckPeer.
func (t *Table) ResolvePeer(ctx context.Context, peer netip.Addr) error {
	return t.worker.resolvePeer(ctx, peer)
}

// Info returns the table's entry for peer, if it has one.
func (t *Table) Info(peer netip.Addr) (NeighbourInfo, bool) { return t.table.info(peer) }

// Stats returns the counters of the table and its worker.
func (t *Table) Stats() NeighbourStats {
	return t.table.snapshotStats(int(t.table.nResolving.Load()))
}

// Close stops the worker and releases the backend. It does not close cfg.Resolver.
func (t *Table) Close() {
	if t.worker != nil {
		t.worker.stop(t.started)
	}
	if t.backend != nil {
		t.backend.close()
	}
}

// CheckPeer refuses a peer address datagrams cannot be sent to from local.
func CheckPeer(peer, local netip.Addr) error {
	switch {
	case !peer.IsValid():
		return errors.New("xdp: invalid peer address")
	case peer.Is4In6():
		return fmt.Errorf("xdp: IPv4-mapped peer address %v: unmap it", peer)
	case peer.Is4() != local.Is4():
		return fmt.Errorf("xdp: peer %v and local address %v are of different IP versions", peer, local)
	case peer.IsUnspecified(), peer.IsMulticast(), peer == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return fmt.Errorf("xdp: peer address %v is not unicast", peer)
	}
	return nil
}
