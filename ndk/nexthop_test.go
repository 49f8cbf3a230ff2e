package ndk

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/xdp/nexthop"

	"github.com/xdpndk/xdpndk/transport/link"

	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/simlink"
)

// resolvingLink is a simlink that also implements link.PeerResolver with a result the
// test sets, and records the peers it was asked for.
type resolvingLink struct {
	link.Link
	mu    sync.Mutex
	err   error
	peers []netip.Addr
}

func (l *resolvingLink) ResolvePeer(ctx context.Context, peer netip.Addr) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.peers = append(l.peers, peer)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("resolve %v: %w", peer, err)
	}
	return l.err
}

func (l *resolvingLink) set(err error) {
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
}

// TestConnectResolvesPeerFirst checks that Connect asks a PeerResolver link for the peer
// before anything is sent, maps its failures (host unreachable, network unreachable,
// cancelled, other) to their statuses with the QP left idle and nothing sent, and that the
// same connector and QP then connect once the peer resolves.
func TestConnectResolvesPeerFirst(t *testing.T) {
	la, lb := simlink.Pair(simlink.Config{Seed: 1, MaxPayload: 8972})
	rl := &resolvingLink{Link: la}
	a := openT(t, rl, withUMEM(t, DefaultOptions()))
	b := openT(t, lb, withUMEM(t, DefaultOptions()))
	var sa, sb side
	for _, s := range []struct {
		side *side
		ad   *Adapter
	}{{&sa, a}, {&sb, b}} {
		s.side.a = s.ad
		var err error
		if s.side.pd, err = s.ad.NewPD(); err != nil {
			t.Fatal(err)
		}
		if s.side.rcq, err = s.ad.NewCQ(64, nil); err != nil {
			t.Fatal(err)
		}
		if s.side.qp, err = s.side.pd.NewQP(QPConfig{ReceiveCQ: s.side.rcq, InitiatorCQ: s.side.rcq}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	accepted := make(chan error, 1)
	l, err := b.NewListener(func(c *Connector) {
		go func() { accepted <- c.Accept(ctx, sb.qp, 4, 4, nil, nil) }()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(netip.AddrPortFrom(netip.Addr{}, 7)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	dest := netip.AddrPortFrom(b.LocalAddr().Addr(), 7)
	conn, err := a.NewConnector()
	if err != nil {
		t.Fatal(err)
	}
	cancelled, stop := context.WithCancel(ctx)
	stop()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want Status
	}{
		{"host unreachable", ctx, fmt.Errorf("next hop: %w", nexthop.ErrNextHopUnresolved), StatusHostUnreachable},
		{"no route", ctx, fmt.Errorf("next hop: %w", nexthop.ErrNoRoute), StatusNetworkUnreachable},
		{"not ethernet", ctx, fmt.Errorf("next hop: %w", nexthop.ErrNoEthernetNextHop), StatusNetworkUnreachable},
		{"cancelled", cancelled, nil, StatusCancelled},
		{"other", ctx, errors.New("netlink socket closed"), StatusUnsuccessful},
	} {
		rl.set(tc.err)
		tx := a.grp.Stats().TxPackets
		err := conn.Connect(tc.ctx, sa.qp, dest, 4, 4, nil)
		if got := StatusOf(err); got != tc.want {
			t.Errorf("%s: Connect = %v, want %v", tc.name, err, tc.want)
		}
		if st := sa.qp.tq.State(); st != transport.QPIdle {
			t.Errorf("%s: QP %v after the failed resolution, want idle", tc.name, st)
		}
		if n := a.grp.Stats().TxPackets; n != tx {
			t.Errorf("%s: %d packets sent despite the failed resolution", tc.name, n-tx)
		}
	}
	rl.set(nil)
	if err := conn.Connect(ctx, sa.qp, dest, 4, 4, nil); err != nil {
		t.Fatalf("Connect once the peer resolves: %v", err)
	}
	if err := conn.CompleteConnect(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if len(rl.peers) != 6 || rl.peers[5] != dest.Addr() {
		t.Fatalf("peers resolved: %v, want %v six times", rl.peers, dest.Addr())
	}
}
