//go:build linux

package ndkbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/internal/testbed"
)

// tcpPingPong runs o.PingPongN round trips of MsgSize-byte messages over a kernel TCP
// connection from A to a listener on B (TCP_NODELAY on both ends, no XDP program on the
// bed), bounded by o.Bound, and returns the round-trip times after the warm-up. Its
// goroutines are not locked to threads: they block in the Go netpoller, and waking a
// locked goroutine costs a thread hand-off (bench/linkbench measured six times the RTT).
func tcpPingPong(ctx context.Context, bed *testbed.Bed, o Options) (rtts []int64, err error) {
	var ln *net.TCPListener
	addr := netip.AddrPortFrom(bed.B.Addr, TCPPort)
	if err := bed.B.Do(func() (err error) {
		ln, err = net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(addr))
		return err
	}); err != nil {
		return nil, fmt.Errorf("listen on B: %w", err)
	}
	defer ln.Close()
	deadline := time.Now().Add(o.Bound + time.Second)
	if err := ln.SetDeadline(deadline); err != nil {
		return nil, err
	}
	type accepted struct {
		c   *net.TCPConn
		err error
	}
	acc := make(chan accepted, 1)
	go func() {
		c, err := ln.AcceptTCP()
		acc <- accepted{c, err}
	}()
	var ca *net.TCPConn
	if err := bed.A.Do(func() (err error) {
		d := net.Dialer{Timeout: 2 * time.Second}
		c, err := d.Dial("tcp4", addr.String())
		if err != nil {
			return err
		}
		ca = c.(*net.TCPConn)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("dial from A: %w", err)
	}
	defer ca.Close()
	a := <-acc
	if a.err != nil {
		return nil, fmt.Errorf("accept on B: %w", a.err)
	}
	cb := a.c
	defer cb.Close()
	for _, c := range []*net.TCPConn{ca, cb} {
		if err := c.SetNoDelay(true); err != nil {
			return nil, err
		}
		if err := c.SetDeadline(deadline); err != nil {
			return nil, err
		}
	}
	stopOnCancel := context.AfterFunc(ctx, func() {
		_ = ca.SetDeadline(time.Now())
		_ = cb.SetDeadline(time.Now())
	})
	defer stopOnCancel()

	echoDone := make(chan error, 1)
	go func() {
		buf := make([]byte, MsgSize)
		for {
			if _, err := io.ReadFull(cb, buf); err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				echoDone <- err
				return
			}
			if _, err := cb.Write(buf); err != nil {
				echoDone <- err
				return
			}
		}
	}()
	out := make([]byte, MsgSize)
	in := make([]byte, MsgSize)
	rtts = make([]int64, 0, o.PingPongN)
	end := report.Now() + int64(o.Bound)
	var pingErr error
	for i := 0; i < o.PingPongN && report.Now() < end; i++ {
		out[0] = byte(i)
		t0 := report.Now()
		if _, err := ca.Write(out); err != nil {
			pingErr = fmt.Errorf("write: %w", err)
			break
		}
		if _, err := io.ReadFull(ca, in); err != nil {
			pingErr = fmt.Errorf("read: %w", err)
			break
		}
		t1 := report.Now()
		if in[0] != byte(i) {
			pingErr = fmt.Errorf("round trip %d: echo of %d", i, in[0])
			break
		}
		if i >= o.PingPongWarmup {
			rtts = append(rtts, t1-t0)
		}
	}
	_ = ca.CloseWrite()
	echoErr := <-echoDone
	if err := errors.Join(pingErr, echoErr); err != nil {
		return rtts, err
	}
	return rtts, ctx.Err()
}
