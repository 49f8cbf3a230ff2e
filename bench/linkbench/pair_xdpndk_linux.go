//go:build linux

package linkbench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/bpf"
	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/xdp"
)

// xdpndkPair is our AF_XDP link on both hosts: one xdp.Device per veth end, bound to
// queue 0, used through its link.Link.
type xdpndkPair struct {
	name  string
	devs  [2]*xdp.Device
	links [2]*xdp.Link
	peers [2]netip.AddrPort // peers[i]: where side i sends to
}

// openXDPNDK opens an xdp.Device on each veth end (inside its namespace).
func openXDPNDK(bed *testbed.Bed, name string, noWakeup bool, attach bpf.Mode, log *slog.Logger) (p *xdpndkPair, err error) {
	p = &xdpndkPair{name: name}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.close())
			p = nil
		}
	}()
	for i, h := range []*testbed.Host{bed.A, bed.B} {
		cfg := xdp.Config{
			// Queue 0 only: both sides transmit from it, and veth delivers to the peer's.
			Interface: h.Ifname, Port: Port, Queues: []int{0}, Steering: xdp.SteerExternal, RingSize: 4096, Frames: 8192,
			DisableNeedWakeup: noWakeup, Attach: attach, Logger: log,
		}
		err := h.Do(func() error {
			d, err := xdp.Open(cfg)
			if err != nil {
				return err
			}
			p.devs[i] = d
			return nil
		})
		if err != nil {
			return p, fmt.Errorf("open xdp device on %s: %w", h.Ifname, err)
		}
		if len(p.devs[i].Links()) != 1 {
			return p, fmt.Errorf("xdp device on %s has %d links, want 1", h.Ifname, len(p.devs[i].Links()))
		}
		p.links[i] = p.devs[i].Links()[0]
	}
	p.peers[0] = netip.AddrPortFrom(bed.B.Addr, Port)
	p.peers[1] = netip.AddrPortFrom(bed.A.Addr, Port)
	// Learn each peer's next hop now, so that the first datagram leaves at once rather than
	// being held until the link's next call.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, l := range p.links {
		if err := l.ResolvePeer(ctx, p.peers[i].Addr()); err != nil {
			return p, fmt.Errorf("resolve %v: %w", p.peers[i].Addr(), err)
		}
	}
	return p, nil
}

func (p *xdpndkPair) mode() string {
	a, b := p.devs[0].Mode().String(), p.devs[1].Mode().String()
	if a == b {
		return a
	}
	return "A: " + a + "; B: " + b
}

func (p *xdpndkPair) maxSize() (int, string) {
	return p.links[0].MaxPayload() + IPUDPHeaderLen, "above the link's MTU"
}

func (p *xdpndkPair) kicks() (uint64, bool) { return p.links[0].Stats().Kicks, true }

func (p *xdpndkPair) blocks() bool { return false }

func (p *xdpndkPair) unblock() {}

func (p *xdpndkPair) close() error {
	var errs []error
	for _, d := range p.devs {
		if d != nil {
			errs = append(errs, d.Close())
		}
	}
	return errors.Join(errs...)
}

// sendOne sends pkts[:1], waiting (bounded by timeout) while the link is out of room.
func sendOne(l *xdp.Link, pkts []link.Packet, timeout time.Duration) error {
	t0 := report.Now()
	for {
		n, err := l.Send(pkts[:1])
		if err != nil {
			return err
		}
		if n == 1 {
			return nil
		}
		if report.Now()-t0 > int64(timeout) {
			return fmt.Errorf("link had no room to send for %v", timeout)
		}
		if err := l.Wait(0); err != nil {
			return err
		}
	}
}

func (p *xdpndkPair) xmit(side int, payload []byte) error {
	var pkt [1]link.Packet
	pkt[0].Remote = p.peers[side]
	pkt[0].SetData(payload)
	return sendOne(p.links[side], pkt[:], time.Second)
}

func (p *xdpndkPair) recv(side int, buf []byte, timeout time.Duration) (int, error) {
	l := p.links[side]
	var pkt [1]link.Packet
	deadline := time.Now().Add(timeout)
	for {
		n, err := l.Receive(pkt[:])
		if err != nil {
			return 0, err
		}
		if n == 1 {
			m := 0
			for _, s := range pkt[0].Segs[:pkt[0].NSegs] {
				m += copy(buf[m:], s)
			}
			l.Release(pkt[:])
			return m, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return 0, errors.New("nothing received")
		}
		if err := l.Wait(min(left, 10*time.Millisecond)); err != nil {
			return 0, err
		}
	}
}

// send is A's one-way loop: Send batches of the same datagram until told to stop.
func (p *xdpndkPair) send(f *flow) error {
	l := p.links[0]
	pkts := make([]link.Packet, f.batch)
	for i := range pkts {
		pkts[i].Remote = p.peers[0]
		pkts[i].SetData(f.payload)
	}
	var sent uint64
	for it := 0; ; it++ {
		if f.stopTx.Load() || sent >= f.maxPkts || (it&63 == 0 && report.Now() > f.deadline) {
			return nil
		}
		want := min(uint64(len(pkts)), f.maxPkts-sent)
		n, err := l.Send(pkts[:want])
		if err != nil {
			return fmt.Errorf("send: %w", err)
		}
		if n > 0 {
			sent += uint64(n)
			f.tx.add(n, n*len(f.payload))
		}
		if uint64(n) < want {
			// Out of frames or TX ring space: let the kernel make progress (Wait kicks
			// the TX ring if descriptors are pending).
			if err := l.Wait(0); err != nil {
				return fmt.Errorf("wait: %w", err)
			}
		}
	}
}

// receive is B's one-way loop: spin on Receive, count, Release.
func (p *xdpndkPair) receive(f *flow) error {
	l := p.links[1]
	pkts := make([]link.Packet, f.batch)
	for it := 0; ; it++ {
		n, err := l.Receive(pkts)
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		if n == 0 {
			if f.idleDone(it) {
				return nil
			}
			continue
		}
		b := 0
		for i := range pkts[:n] {
			b += pkts[i].Len()
		}
		l.Release(pkts[:n])
		f.rx.add(n, b)
		if it&1023 == 0 && f.stopping(&f.stopRx) {
			return nil
		}
	}
}

// ping is A's ping-pong loop: send one datagram, spin on Receive until its echo is back.
func (p *xdpndkPair) ping(pg *pinger) error {
	l := p.links[0]
	payload := make([]byte, PingSize-IPUDPHeaderLen)
	fillPattern(payload, 0)
	var out [1]link.Packet
	out[0].Remote = p.peers[0]
	out[0].SetData(payload)
	var in [16]link.Packet
	for seq := uint64(1); seq <= uint64(pg.n); seq++ {
		if pg.stop.Load() || report.Now() > pg.deadline {
			return nil
		}
		putSeq(payload, seq)
		t0 := report.Now()
		if err := sendOne(l, out[:], pg.timeout); err != nil {
			return fmt.Errorf("send: %w", err)
		}
		got := false
		for spin := 0; !got; spin++ {
			n, err := l.Receive(in[:])
			if err != nil {
				return fmt.Errorf("receive: %w", err)
			}
			for i := range in[:n] {
				if in[i].NSegs > 0 && seqOf(in[i].Segs[0]) == seq {
					got = true
				}
			}
			if n > 0 {
				l.Release(in[:n])
			}
			if !got && spin&63 == 63 && report.Now()-t0 > int64(pg.timeout) {
				break
			}
		}
		pg.record(got, t0)
	}
	return nil
}

// echo is B's ping-pong loop: send every datagram back where it came from.
func (p *xdpndkPair) echo(f *flow) error {
	l := p.links[1]
	in := make([]link.Packet, f.batch)
	out := make([]link.Packet, f.batch)
	for it := 0; ; it++ {
		n, err := l.Receive(in)
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		if n == 0 {
			if f.idleDone(it) {
				return nil
			}
			continue
		}
		for i := range in[:n] {
			out[i] = in[i]
			out[i].LocalPort = 0
		}
		for done := 0; done < n; {
			k, err := l.Send(out[done:n])
			if err != nil {
				l.Release(in[:n])
				return fmt.Errorf("send: %w", err)
			}
			done += k
			if done < n {
				if f.stopping(&f.stopRx) {
					break
				}
				if err := l.Wait(0); err != nil {
					l.Release(in[:n])
					return fmt.Errorf("wait: %w", err)
				}
			}
		}
		l.Release(in[:n])
	}
}
