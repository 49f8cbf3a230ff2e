package xdp

import (
	"fmt"
	"slices"
)

// Steering says how datagrams to our port reach the queues an adapter serves.
type Steering int

const (
	// SteerServeAll (the default) serves every RX queue of the interface: whatever queue RSS
	// hashes a datagram to, a socket is there. Config.Queues, if set, must then name every
	// queue; a subset is refused (its datagrams hashed elsewhere would be lost).
	SteerServeAll Steering = iota
	// SteerNtuple serves Config.Queues only and has Open install an n-tuple rule (`ethtool
	// -N IF flow-type udp4 dst-ip ADDR dst-port PORT action Q`) that steers our datagrams to
	// the first of them; Close removes it. Open fails if the driver takes no such rule.
	SteerNtuple
	// SteerExternal serves Config.Queues only and trusts that the administrator steers our
	// port to them (an ethtool -N rule, an RSS indirection table, one queue on the NIC).
	SteerExternal
)

// String names the steering mode.
func (s Steering) String() string {
	switch s {
	case SteerServeAll:
		return "serve-all"
	case SteerNtuple:
		return "ntuple"
	case SteerExternal:
		return "external"
	}
	return fmt.Sprintf("Steering(%d)", int(s))
}

// planQueues decides which queues Open binds: every one of the interface's rxQueues RX
// queues unless want names some, which must exist and, with SteerServeAll, be all of them.
// The error of a plan that would lose datagrams names the fixes.
func planQueues(ifname string, rxQueues int, want []int, steer Steering) ([]int, error) {
	rxQueues = max(rxQueues, 1)
	if len(want) == 0 {
		if steer != SteerServeAll {
			return nil, fmt.Errorf("steering %v needs Config.Queues: the queues to steer our port to", steer)
		}
		all := make([]int, rxQueues)
		for q := range all {
			all[q] = q
		}
		return all, nil
	}
	qs := slices.Clone(want)
	slices.Sort(qs)
	if len(slices.Compact(qs)) != len(want) {
		return nil, fmt.Errorf("queues %v: a queue is named twice", want)
	}
	if last := qs[len(qs)-1]; last >= rxQueues {
		return nil, fmt.Errorf("%s has %d RX queues (0-%d): there is no queue %d (ethtool -l %s shows them)",
			ifname, rxQueues, rxQueues-1, last, ifname)
	}
	if len(want) < rxQueues && steer == SteerServeAll {
		return nil, fmt.Errorf("%s has %d RX queues but Config.Queues serves only %v: datagrams RSS hashes to the "+
			"others would be lost. Serve every queue (leave Config.Queues empty), steer our port to the first of them "+
			"(Config.Steering = SteerNtuple, with `ethtool -K %s ntuple on`; or your own `ethtool -N %s flow-type udp4 "+
			"dst-port PORT action %d` and Config.Steering = SteerExternal), or give the NIC one queue: ethtool -L %s combined 1",
			ifname, rxQueues, want, ifname, ifname, want[0], ifname)
	}
	return slices.Clone(want), nil
}
