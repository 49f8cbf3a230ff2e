package pcaplink

import (
	"context"
	"net/netip"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"
)

// stub is an inner link under test control: Receive returns the packets of rx (once),
// Send accepts up to accept datagrams a call (-1: all). rxN and txN, when set, override
// the n they return (a misbehaving link).
type stub struct {
	local    netip.AddrPort
	rx       []link.Packet
	accept   int
	rxN, txN *int
	sent     int
	closed   bool
	watched  int
	resolved int
}

func (s *stub) Receive(pkts []link.Packet) (int, error) {
	if s.rxN != nil {
		return *s.rxN, nil
	}
	n := copy(pkts, s.rx)
	s.rx = s.rx[n:]
	return n, nil
}
func (s *stub) Release([]link.Packet) {}
func (s *stub) Send(pkts []link.Packet) (int, error) {
	if s.txN != nil {
		return *s.txN, nil
	}
	n := len(pkts)
	if s.accept >= 0 {
		n = min(n, s.accept)
	}
	s.sent += n
	return n, nil
}
func (s *stub) TxDone([]uint64) int       { return 0 }
func (s *stub) Wait(time.Duration) error  { return nil }
func (s *stub) Wake()                     {}
func (s *stub) MaxPayload() int           { return 8972 }
func (s *stub) LocalAddr() netip.AddrPort { return s.local }
func (s *stub) Stats() link.Stats         { return link.Stats{} }
func (s *stub) Close() error              { s.closed = true; return nil }

// fullStub has the optional methods too.
type fullStub struct{ stub }

func (s *fullStub) Watch(time.Duration) error { s.watched++; return nil }
func (s *fullStub) ResolvePeer(context.Context, netip.Addr) error {
	s.resolved++
	return nil
}
