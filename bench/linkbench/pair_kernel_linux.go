//go:build linux

package linkbench

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/internal/testbed"
)

// kernelRecvBuffer is the SO_RCVBUF asked for on both kernel UDP sockets (the kernel caps
// it at net.core.rmem_max and doubles it).
const kernelRecvBuffer = 4 << 20

// kernelPair is a kernel UDP socket on each host, created inside its namespace, with no
// XDP program attached to either veth end.
type kernelPair struct {
	conns  [2]*net.UDPConn
	peers  [2]netip.AddrPort
	rcvbuf int
}

func openKernelUDP(bed *testbed.Bed) (p *kernelPair, err error) {
	p = &kernelPair{}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.close())
			p = nil
		}
	}()
	for i, h := range []*testbed.Host{bed.A, bed.B} {
		err := h.Do(func() error {
			c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(h.Addr, Port)))
			if err != nil {
				return err
			}
			p.conns[i] = c
			return c.SetReadBuffer(kernelRecvBuffer)
		})
		if err != nil {
			return p, fmt.Errorf("open udp socket on %s: %w", h.Addr, err)
		}
	}
	p.peers[0] = netip.AddrPortFrom(bed.B.Addr, Port)
	p.peers[1] = netip.AddrPortFrom(bed.A.Addr, Port)
	p.rcvbuf = recvBufferSize(p.conns[1])
	return p, nil
}

// recvBufferSize returns the socket's effective SO_RCVBUF, or 0 if it cannot be read.
func recvBufferSize(c *net.UDPConn) int {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	v := 0
	_ = rc.Control(func(fd uintptr) {
		v, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF)
	})
	return v
}

func (p *kernelPair) mode() string {
	return fmt.Sprintf("net.UDPConn, one sendto/recvfrom per datagram, blocking reads through the Go netpoller, "+
		"no XDP program attached, SO_RCVBUF=%d", p.rcvbuf)
}

func (p *kernelPair) maxSize() (int, string) { return BedMTU, "" }

func (p *kernelPair) kicks() (uint64, bool) { return 0, false }

func (p *kernelPair) blocks() bool { return true }

func (p *kernelPair) unblock() {
	for _, c := range p.conns {
		if c != nil {
			_ = c.SetReadDeadline(time.Now())
		}
	}
}

func (p *kernelPair) close() error {
	var errs []error
	for _, c := range p.conns {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

func (p *kernelPair) xmit(side int, payload []byte) error {
	_, err := p.conns[side].WriteToUDPAddrPort(payload, p.peers[side])
	return err
}

func (p *kernelPair) recv(side int, buf []byte, timeout time.Duration) (int, error) {
	c := p.conns[side]
	if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return 0, err
	}
	n, _, err := c.ReadFromUDPAddrPort(buf)
	return n, err
}

// transient reports whether a send error only means the datagram was dropped.
func transient(err error) bool {
	return errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.EAGAIN)
}

// send is A's one-way loop: one WriteTo per datagram.
func (p *kernelPair) send(f *flow) error {
	c, dst := p.conns[0], p.peers[0]
	var sent uint64
	for it := 0; ; it++ {
		if f.stopTx.Load() || sent >= f.maxPkts || (it&63 == 0 && report.Now() > f.deadline) {
			return nil
		}
		if _, err := c.WriteToUDPAddrPort(f.payload, dst); err != nil {
			if transient(err) {
				continue
			}
			return fmt.Errorf("write: %w", err)
		}
		sent++
		f.tx.add(1, len(f.payload))
	}
}

// armDeadline bounds blocking reads by the flow's time bound.
func armDeadline(c *net.UDPConn, deadline int64) error {
	return c.SetReadDeadline(time.Now().Add(time.Duration(deadline - report.Now())))
}

// receive is B's one-way loop: one blocking ReadFrom per datagram.
func (p *kernelPair) receive(f *flow) error {
	c := p.conns[1]
	if err := armDeadline(c, f.deadline); err != nil {
		return err
	}
	buf := make([]byte, 65536)
	for {
		n, _, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && f.stopping(&f.stopRx) {
				return nil
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				// unblock raced with a measurement that is not over: re-arm.
				if err := armDeadline(c, f.deadline); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("read: %w", err)
		}
		f.rx.add(1, n)
	}
}

// ping is A's ping-pong loop: WriteTo, then a blocking ReadFrom for the echo.
func (p *kernelPair) ping(pg *pinger) error {
	c, dst := p.conns[0], p.peers[0]
	payload := make([]byte, PingSize-IPUDPHeaderLen)
	fillPattern(payload, 0)
	buf := make([]byte, 65536)
	for seq := uint64(1); seq <= uint64(pg.n); seq++ {
		if pg.stop.Load() || report.Now() > pg.deadline {
			return nil
		}
		putSeq(payload, seq)
		if err := c.SetReadDeadline(time.Now().Add(pg.timeout)); err != nil {
			return err
		}
		t0 := report.Now()
		if _, err := c.WriteToUDPAddrPort(payload, dst); err != nil && !transient(err) {
			return fmt.Errorf("write: %w", err)
		}
		got := false
		for !got {
			n, _, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					break
				}
				return fmt.Errorf("read: %w", err)
			}
			got = seqOf(buf[:n]) == seq
		}
		pg.record(got, t0)
	}
	return nil
}

// echo is B's ping-pong loop: ReadFrom, WriteTo back to the sender.
func (p *kernelPair) echo(f *flow) error {
	c := p.conns[1]
	if err := armDeadline(c, f.deadline); err != nil {
		return err
	}
	buf := make([]byte, 65536)
	for {
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				if f.stopping(&f.stopRx) {
					return nil
				}
				if err := armDeadline(c, f.deadline); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("read: %w", err)
		}
		if _, err := c.WriteToUDPAddrPort(buf[:n], from); err != nil && !transient(err) {
			return fmt.Errorf("write: %w", err)
		}
	}
}
