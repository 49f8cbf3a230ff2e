package testbed

import (
	"errors"
	"fmt"

	"github.com/xdpndk/xdpndk/internal/delayline"
)

// PathConfig is the path a routed bed's router emulates with a delay line
// (Options.Path): a one-way Delay, a Rate in bits per second and a drop-tail queue of
// QueueBytes, the same in both directions (package delayline).
type PathConfig = delayline.Config

// PathStats are the delay line's counters, per direction (delayline.Stats).
type PathStats = delayline.Stats

// offloads are the veth features a delay line's bed turns off on every veth end, so that
// the links carry MTU-sized frames with complete checksums, as a real path does: without
// it the kernel's TCP hands 64 KiB segments to the veth (TSO, GSO), the receiving side
// merges frames (GRO), and checksums are left for a device to fill in (tx).
var offloads = []string{"tso", "off", "gso", "off", "gro", "off", "tx", "off"}

// ethtoolPath finds ethtool(8) once.
var ethtoolPath = func() (string, error) { return findTool("ethtool") }

// startPath turns the router's kernel forwarding off, the offloads of every veth end off,
// and starts the delay line in the router's namespace. The caller holds no lock; Close
// stops the line.
func (b *Bed) startPath(cfg PathConfig) error {
	r := b.R
	if err := r.Do(func() error { return setForwarding(false, r.A.Ifname, r.B.Ifname) }); err != nil {
		return fmt.Errorf("turn forwarding off in %s: %w", r.NS, err)
	}
	et, err := ethtoolPath()
	if err != nil {
		return fmt.Errorf("%w (the delay line turns the veth offloads off)", err)
	}
	for _, h := range b.ends() {
		args := append([]string{"netns", "exec", h.NS, et, "-K", h.Ifname}, offloads...)
		if _, err := runIP(args...); err != nil {
			return fmt.Errorf("turn offloads off on %s in %s: %w", h.Ifname, h.NS, err)
		}
	}
	pa := delayline.Port{IfIndex: r.A.IfIndex, MAC: r.A.MAC, Addr: r.A.Addr, PeerMAC: b.A.MAC, Prefix: b.A.Prefix}
	pb := delayline.Port{IfIndex: r.B.IfIndex, MAC: r.B.MAC, Addr: r.B.Addr, PeerMAC: b.B.MAC, Prefix: b.B.Prefix}
	var line *delayline.Line
	if err := r.Do(func() (err error) { line, err = delayline.Open(cfg, pa, pb); return err }); err != nil {
		return fmt.Errorf("start the delay line: %w", err)
	}
	b.mu.Lock()
	b.line = line
	b.mu.Unlock()
	return nil
}

// PathStats returns the delay line's counters. It fails for a bed without one
// (Options.Path nil) or a closed bed.
func (b *Bed) PathStats() (PathStats, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.line == nil {
		return PathStats{}, errors.New("path stats: the bed has no delay line")
	}
	return b.line.Stats(), nil
}

// Path returns the delay line's configuration (QueueBytes filled in) and true, or false
// for a bed without one.
func (b *Bed) Path() (PathConfig, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.line == nil {
		return PathConfig{}, false
	}
	return b.line.Config(), true
}
