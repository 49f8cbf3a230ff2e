package ndk

import (
	"github.com/xdpndk/xdpndk/bpf"
	"github.com/xdpndk/xdpndk/transport/link"
	"github.com/xdpndk/xdpndk/xdp"
	"github.com/xdpndk/xdpndk/xdp/nexthop"
	"github.com/xdpndk/xdpndk/xdp/xsk"
)

// queueStats returns the queues of engine i's link l when it is an AF_XDP link (an
// adapter from Open): each queue's link counters and its socket's.
func queueStats(i int, l link.Link) ([]QueueStats, bool) {
	var links []*xdp.Link
	switch x := l.(type) {
	case *xdp.DeviceLink:
		links = x.Links()
	case *xdp.Link:
		links = []*xdp.Link{x}
	default:
		return nil, false
	}
	out := make([]QueueStats, len(links))
	for k, q := range links {
		out[k] = QueueStats{Queue: q.Queue(), Engine: i, Link: linkStats(q.Stats())}
		if ks, err := q.SocketStatistics(); err == nil {
			s := socketStats(ks)
			out[k].Socket = &s
		}
	}
	return out, true
}

// deviceStats returns the XDP program's verdicts and the next-hop table of an adapter
// from Open (nil, nil for another).
func (a *Adapter) deviceStats() (*SteeringStats, *NeighbourStats) {
	d := a.Device()
	if d == nil {
		return nil, nil
	}
	var steer *SteeringStats
	if p := d.Program(); p != nil {
		if c, err := p.Counters(); err == nil {
			s := steeringStats(c)
			steer = &s
		}
	}
	n := neighbourStats(d.NeighbourStats())
	return steer, &n
}

// steeringStats maps the XDP program's counters.
func steeringStats(c bpf.Counters) SteeringStats {
	return SteeringStats{Redirected: c.Redirected, RedirectedBytes: c.RedirectedBytes, Passed: c.Passed,
		NoSocket: c.NoSocket, Malformed: c.Malformed, FaultDropped: c.FaultDropped}
}

// socketStats maps an AF_XDP socket's counters.
func socketStats(x xsk.Statistics) SocketStats {
	return SocketStats{RxDropped: x.RxDropped, RxInvalidDescs: x.RxInvalidDescs, TxInvalidDescs: x.TxInvalidDescs,
		RxRingFull: x.RxRingFull, RxFillRingEmpty: x.RxFillRingEmpty, TxRingEmptyDescs: x.TxRingEmptyDescs}
}

// neighbourStats maps the next-hop table's counters.
func neighbourStats(x nexthop.NeighbourStats) NeighbourStats {
	return NeighbourStats{Entries: x.Entries, Pending: x.Pending, Failed: x.Failed, Resolved: x.Resolved,
		Resolving: x.Resolving, Requests: x.Requests, RequestsDropped: x.RequestsDropped,
		Resolutions: x.Resolutions, Failures: x.Failures, Refreshes: x.Refreshes, Changes: x.Changes,
		Evictions: x.Evictions, Expired: x.Expired, EventsLost: x.EventsLost}
}
