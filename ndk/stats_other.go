//go:build !linux

package ndk

import "github.com/xdpndk/xdpndk/transport/link"

// queueStats: no AF_XDP links off Linux.
func queueStats(int, link.Link) ([]QueueStats, bool) { return nil, false }

// deviceStats: no AF_XDP device off Linux.
func (a *Adapter) deviceStats() (*SteeringStats, *NeighbourStats) { return nil, nil }
