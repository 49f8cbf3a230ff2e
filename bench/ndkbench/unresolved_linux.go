package ndkbench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/xdpndk/xdpndk/xdp/nexthop"

	"github.com/xdpndk/xdpndk/xdp/frame"

	"golang.org/x/sys/unix"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/internal/plumb"
	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/ndk"
	"github.com/xdpndk/xdpndk/transport/wire"
	"github.com/xdpndk/xdpndk/xdp"
)

// The send/recv+unresolved figure: the ping-pong while A's device resolves two peers nobody
// answers for. Before next hops were resolved off the engine, either one stalled every
// connection of the adapter for the resolve timeout.

// unresolvedService is the service of the injected connection request: A listens on none,
// so A answers it with a rejection, which needs the spoofed source's next hop.
const unresolvedService = ServicePort + 1

// unresolvedPeers is the pair of resolutions in progress on A's device.
type unresolvedPeers struct {
	dev         *xdp.Device
	spoof, dead netip.Addr
	connErr     chan error
	connDone    atomic.Bool
	held0       uint64 // A's LinkStats.TxHeld before the injection
}

// unresolvedAddrs returns two host addresses of the bed's subnet that no host has: the
// last two before the broadcast address.
func unresolvedAddrs(bed *testbed.Bed) (spoof, dead netip.Addr, err error) {
	p := bed.Prefix
	if !p.Addr().Is4() || p.Bits() > 29 {
		return spoof, dead, fmt.Errorf("bed subnet %v has no room for two unused addresses", p)
	}
	a := p.Addr().As4()
	n := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	last := n | (1<<(32-p.Bits()) - 1) // the broadcast address
	at := func(v uint32) netip.Addr {
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	return at(last - 1), at(last - 2), nil
}

// startUnresolved injects into A, from B's namespace through an AF_PACKET socket, one
// connection request whose source is an unused address of the bed's subnet, and starts a
// Connect of a spare QP of A to another unused address.
func (p *ndkPair) startUnresolved(bed *testbed.Bed) (*unresolvedPeers, error) {
	dev := p.A.a.Device()
	if dev == nil {
		return nil, errors.New("adapter A has no AF_XDP device")
	}
	spoof, dead, err := unresolvedAddrs(bed)
	if err != nil {
		return nil, err
	}
	u := &unresolvedPeers{dev: dev, spoof: spoof, dead: dead, connErr: make(chan error, 1), held0: plumb.Link(p.A.a).Stats().TxHeld}
	frame, err := connRequestFrame(bed, netip.AddrPortFrom(spoof, NDKPort), netip.AddrPortFrom(bed.A.Addr, NDKPort))
	if err != nil {
		return nil, err
	}
	if err := injectFrame(bed.B, frame); err != nil {
		return nil, err
	}
	// A answers the request at once; its reply needs the spoofed source's next hop.
	deadline := time.Now().Add(2 * time.Second)
	for {
		if info, _ := dev.Neighbour(spoof); info.State == nexthop.NeighbourPending {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("host A did not start resolving the injected request's source %v within 2 s", spoof)
		}
		p.A.a.Poll() // ProgressInline: nobody else runs A's engine now
		time.Sleep(100 * time.Microsecond)
	}
	qp, err := p.A.pd.NewQP(ndk.QPConfig{ReceiveCQ: p.A.cq, InitiatorCQ: p.A.cq})
	if err != nil {
		return nil, fmt.Errorf("new QP: %w", err)
	}
	c, err := p.A.a.NewConnector()
	if err != nil {
		return nil, fmt.Errorf("new connector: %w", err)
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := c.Connect(ctx, qp, netip.AddrPortFrom(dead, ServicePort), 4, 4, nil)
		u.connDone.Store(true)
		u.connErr <- err
	}()
	return u, nil
}

// pending reports whether both resolutions are still in progress.
func (u *unresolvedPeers) pending() bool {
	if u.connDone.Load() {
		return false
	}
	info, _ := u.dev.Neighbour(u.spoof)
	return info.State == nexthop.NeighbourPending
}

// finish waits for both resolutions to end (poll runs A's engine meanwhile, which
// ProgressInline needs) and checks they did what the figure claims:
// the reply to the spoofed source was held and its peer failed; the Connect failed with
// STATUS_HOST_UNREACHABLE.
func (u *unresolvedPeers) finish(link func() uint64, poll func() bool) error {
	var cerr error
	select {
	case cerr = <-u.connErr:
	case <-time.After(30 * time.Second):
		return errors.New("the Connect to a dead host did not return within 30 s")
	}
	if ndk.StatusOf(cerr) != ndk.StatusHostUnreachable {
		return fmt.Errorf("the Connect to dead host %v returned %v, want STATUS_HOST_UNREACHABLE", u.dead, cerr)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if info, _ := u.dev.Neighbour(u.spoof); info.State == nexthop.NeighbourFailed {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the spoofed source %v did not fail to resolve within 30 s", u.spoof)
		}
		poll()
		time.Sleep(time.Millisecond)
	}
	if link() == u.held0 {
		return errors.New("host A did not answer the injected connection request (nothing held)")
	}
	return nil
}

// connRequestFrame builds the Ethernet frame of a connection request from src to dst, as
// B would send it (B's MAC to A's).
func connRequestFrame(bed *testbed.Bed, src, dst netip.AddrPort) ([]byte, error) {
	p := wire.Packet{Header: wire.Header{Opcode: wire.OpConnRequest}}
	p.CM = wire.CMExt{ServiceID: unresolvedService, ConnID: uint64(report.Now()) | 1, SrcQPN: 1, InitialPSN: 1,
		MaxPayload: 1400, IRD: 4, ORD: 4, DataPort: src.Port()}
	payload := make([]byte, wire.HeaderLen+wire.CMExtLen+wire.TrailerLen)
	n, err := wire.Encode(payload, &p)
	if err != nil {
		return nil, fmt.Errorf("encode connection request: %w", err)
	}
	wire.PutTrailer(payload[n:], wire.UpdateCRC(0, payload[:n]))
	payload = payload[:n+wire.TrailerLen]
	e := frame.Encap{SrcMAC: [6]byte(bed.B.MAC), DstMAC: [6]byte(bed.A.MAC), Src: src.Addr(), Dst: dst.Addr(),
		SrcPort: src.Port(), DstPort: dst.Port()}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	var sum frame.Checksum
	sum.Add(payload)
	frame := make([]byte, e.HeaderLen()+len(payload))
	hl, err := e.Put(frame, len(payload), &sum, 0)
	if err != nil {
		return nil, err
	}
	copy(frame[hl:], payload)
	return frame, nil
}

// injectFrame sends frame out of h's veth end through an AF_PACKET socket opened in h's
// namespace, on TX queue 0, so that it arrives on the peer's RX queue 0, the one the
// adapter's socket is bound to: with PACKET_QDISC_BYPASS the kernel picks the TX queue as
// the sending CPU modulo the queue count (net/packet/af_packet.c packet_pick_tx_queue;
// veth delivers on the peer's queue of the same index), so the sending thread (Do's,
// which ends with it) runs on CPU 0.
func injectFrame(h *testbed.Host, frame []byte) error {
	return h.Do(func() error {
		var cpus unix.CPUSet
		cpus.Set(0)
		if err := unix.SchedSetaffinity(0, &cpus); err != nil {
			return fmt.Errorf("pin the injecting thread to CPU 0: %w", err)
		}
		// Protocol 0: the socket only sends.
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("AF_PACKET socket: %w", err)
		}
		defer unix.Close(fd)
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
			return fmt.Errorf("PACKET_QDISC_BYPASS: %w", err)
		}
		to := &unix.SockaddrLinklayer{Ifindex: h.IfIndex, Protocol: unix.ETH_P_IP<<8&0xFF00 | unix.ETH_P_IP>>8, Halen: 6}
		if err := unix.Sendto(fd, frame, 0, to); err != nil {
			return fmt.Errorf("send injected frame: %w", err)
		}
		return nil
	})
}

// unresolvedPingPong measures the ping-pong while unresolvedPeers are pending, on the pair
// whose plain ping-pong was just measured.
func (r *runner) unresolvedPingPong(ctx context.Context, rep int, p *ndkPair) error {
	sys := SystemNDK(p.mode)
	u, err := p.startUnresolved(r.bed)
	if err != nil {
		return err
	}
	var rtts []int64
	labeled(ctx, "pingpong-unresolved", func() { rtts, _, err = p.pingPong(ctx, r.o, u.pending) })
	ended := !u.pending()
	ferr := u.finish(func() uint64 { return plumb.Link(p.A.a).Stats().TxHeld }, p.A.a.Poll)
	if len(rtts) > 0 {
		st := report.Summarize(rtts)
		r.col.addLatency(BenchPingPong, sys, OpSendRecvUnresolved, MsgSize, rep, st, 0)
		stopped := ""
		if ended {
			stopped = " (a resolution ended first)"
		}
		r.progress("rep %d %-13s ping-pong p50 %.2f us, p99 %.2f us (%d samples) while %v and %v resolve%s",
			rep+1, sys, st.P50, st.P99, st.N, u.spoof, u.dead, stopped)
	}
	return errors.Join(err, ferr)
}
