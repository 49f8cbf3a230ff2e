//go:build linux

// Command rawdemo shows the raw AF_XDP link at work on a two-host test bed: it creates two
// network namespaces joined by a veth pair (MTU 9000), opens our xdp device on both, prints
// what the kernel granted, exchanges a few datagrams both ways (one of them multi-buffer),
// shows the steering program's counters around a ping that the kernel answers, and runs the
// link benchmark in quick mode, then a quick pass of the NDK verbs benchmark (bench/ndkbench:
// package ndk's Send/Receive, Write and Read between the hosts, next to the raw link and
// kernel TCP). Everything it creates is removed when it ends, also on Ctrl-C. It needs root
// and takes about 25 seconds.
//
//	go run ./bench/cmd/rawdemo
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/xdpndk/xdpndk/xdp/nexthop"

	"github.com/xdpndk/xdpndk/xdp/frame"

	"github.com/xdpndk/xdpndk/transport/link"

	"github.com/xdpndk/xdpndk/bench/linkbench"
	"github.com/xdpndk/xdpndk/bench/ndkbench"
	"github.com/xdpndk/xdpndk/bpf"
	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/xdp"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "rawdemo:", err)
		os.Exit(1)
	}
}

func heading(s string) { fmt.Printf("\n== %s\n", s) }

func run() (err error) {
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespaces, XDP programs, AF_XDP sockets)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()

	heading("Test bed: two network namespaces joined by a veth pair")
	opts := linkbench.BedOptions("demo")
	opts.StaticNeighbors = false // let the kernel resolve neighbours with ARP, as on a LAN
	bed, err := testbed.New(opts)
	if err != nil {
		return fmt.Errorf("create test bed: %w", err)
	}
	defer func() {
		if cerr := bed.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("remove test bed: %w", cerr))
		} else {
			fmt.Println("\ntest bed removed (namespaces, veth pair); total time", time.Since(start).Round(100*time.Millisecond))
		}
	}()
	for _, h := range []struct {
		name string
		h    *testbed.Host
	}{{"A", bed.A}, {"B", bed.B}} {
		fmt.Printf("host %s  netns %s  dev %s  %s  mac %s\n", h.name, h.h.NS, h.h.Ifname, h.h.Addr, h.h.MAC)
	}
	fmt.Printf("MTU %d on both ends, %d queues each, IPv6 off\n", bed.MTU(), opts.Queues)

	heading("Our AF_XDP device on each host (UDP port 4793, queue 0)")
	var devs [2]*xdp.Device
	defer func() {
		for _, d := range devs {
			if d != nil {
				if cerr := d.Close(); cerr != nil {
					err = errors.Join(err, cerr)
				}
			}
		}
	}()
	quiet := slog.New(slog.DiscardHandler)
	for i, h := range []*testbed.Host{bed.A, bed.B} {
		err := h.Do(func() error {
			d, err := xdp.Open(xdp.Config{Interface: h.Ifname, Port: linkbench.Port, Queues: []int{0}, Steering: xdp.SteerExternal, Logger: quiet})
			devs[i] = d
			return err
		})
		if err != nil {
			return fmt.Errorf("open xdp device on host %c: %w", "AB"[i], err)
		}
	}
	showModes(devs[0], "A")
	fmt.Printf("host B: %v\n", devs[1].Mode())
	la, lb := devs[0].Links()[0], devs[1].Links()[0]
	fmt.Printf("largest datagram: %d bytes of UDP payload (MTU %d - 20 IP - 8 UDP)\n", la.MaxPayload(), bed.MTU())

	heading("Next hop: the kernel resolves B's MAC for A (ARP), we read its neighbour table")
	if err := bed.A.Do(func() error {
		r, err := nexthop.NewResolver()
		if err != nil {
			return err
		}
		defer r.Close()
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		t0 := time.Now()
		nh, err := r.NextHop(rctx, bed.B.Addr)
		if err != nil {
			return err
		}
		fmt.Printf("A -> %s: out of ifindex %d from %s, next hop MAC %s (%v)\n",
			bed.B.Addr, nh.IfIndex, nh.Src, net.HardwareAddr(nh.MAC[:]), time.Since(t0).Round(time.Microsecond))
		return nil
	}); err != nil {
		return fmt.Errorf("resolve next hop: %w", err)
	}
	// The links take their next hops from their device's table, which a worker fills off
	// the sending path (a datagram to a peer not resolved yet is held until the link's next
	// call): resolve each peer there first, as ndk's Connect does.
	if err := la.ResolvePeer(ctx, bed.B.Addr); err != nil {
		return fmt.Errorf("resolve %v on A's device: %w", bed.B.Addr, err)
	}
	if err := lb.ResolvePeer(ctx, bed.A.Addr); err != nil {
		return fmt.Errorf("resolve %v on B's device: %w", bed.A.Addr, err)
	}

	heading("Datagrams both ways (payloads checked byte for byte)")
	toB := netip.AddrPortFrom(bed.B.Addr, linkbench.Port)
	toA := netip.AddrPortFrom(bed.A.Addr, linkbench.Port)
	seq := byte(0)
	for _, x := range []struct {
		from, to *xdp.Link
		name     string
		dst      netip.AddrPort
		sizes    []int
	}{
		{la, lb, "A -> B", toB, []int{36, 1472, 8972}},
		{lb, la, "B -> A", toA, []int{100, 8972}},
	} {
		for _, n := range x.sizes {
			seq++
			if err := exchange(ctx, x.name, x.from, x.to, x.dst, n, seq); err != nil {
				return err
			}
		}
	}
	for _, s := range []struct {
		name string
		l    *xdp.Link
	}{{"A", la}, {"B", lb}} {
		st := s.l.Stats()
		fmt.Printf("link %s stats: rx %d datagrams / %d B, tx %d / %d B, kicks %d, dropped rx %d tx %d\n",
			s.name, st.RxPackets, st.RxBytes, st.TxPackets, st.TxBytes, st.Kicks, st.RxDropped, st.TxDropped)
	}

	heading("Steering on host A: our port goes to the socket, the rest to the kernel")
	before, err := devs[0].Program().Counters()
	if err != nil {
		return err
	}
	printCounters("before the ping", before)
	if err := ping(ctx, bed.B, bed.A.Addr); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	after, err := devs[0].Program().Counters()
	if err != nil {
		return err
	}
	printCounters("after the ping ", after)
	fmt.Printf("the ping added %d passed packet(s) and %d redirected: the kernel answered it, not us\n",
		after.Passed-before.Passed, after.Redirected-before.Redirected)

	for i, d := range devs {
		if err := d.Close(); err != nil {
			return fmt.Errorf("close device: %w", err)
		}
		devs[i] = nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	heading("Link benchmark, quick mode (a few seconds; `make bench` runs the full one)")
	fmt.Println("xdpndk = our link, asavie = github.com/asavie/xdp, kernel-udp = net.UDPConn; size = IP packet length")
	o := linkbench.QuickOptions()
	o.Systems = []string{linkbench.SystemXDPNDK, linkbench.SystemAsavie, linkbench.SystemKernelUDP}
	o.Progress = os.Stdout
	res, err := linkbench.RunBed(ctx, bed, o)
	if ctx.Err() != nil {
		fmt.Println("interrupted")
		return nil
	}
	if res != nil {
		fmt.Println()
		if werr := res.WriteTable(os.Stdout); werr != nil {
			err = errors.Join(err, werr)
		}
		fmt.Println("(one run of 300 ms per figure on a noisy 2-CPU machine: indicative only)")
	}
	if err != nil {
		return err
	}

	heading("NDK verbs between the hosts, quick pass (ndkbench; `make bench` runs the full one)")
	fmt.Println("package ndk on both hosts (ndk.Open, ProgressInline), one connected QP each: Send/Receive, Write, Read,")
	fmt.Println("pipelined Writes; raw-xdp (our link alone) and kernel-tcp measured on the same bed right before")
	no := ndkbench.QuickOptions()
	no.Progress = os.Stdout
	nres, err := ndkbench.RunBed(ctx, bed, no)
	if ctx.Err() != nil {
		fmt.Println("interrupted")
		return nil
	}
	if nres != nil {
		fmt.Println()
		if werr := nres.WriteTable(os.Stdout); werr != nil {
			err = errors.Join(err, werr)
		}
		fmt.Println("(one repetition of 300 ms windows: indicative only)")
	}
	return err
}

// showModes prints what the kernel granted the device, one fact a line.
func showModes(d *xdp.Device, name string) {
	m := d.Mode()
	l := d.Links()[0]
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	attach := "generic (SKB) XDP"
	if m.Attach == bpf.AttachNative {
		attach = "native (driver) XDP"
	}
	fmt.Printf("host %s: %v\n", name, m)
	fmt.Printf("  steering program:  %s\n", attach)
	fmt.Printf("  zero-copy:         %s\n", yes(m.Socket.ZeroCopy))
	fmt.Printf("  multi-buffer:      %s (XDP_USE_SG: a 9000-byte packet spans 3 frames of 4 KiB)\n", yes(m.Socket.MultiBuffer))
	fmt.Printf("  need_wakeup:       %s\n", yes(m.Socket.NeedWakeup))
	fmt.Printf("  UMEM pages:        %v\n", m.Pages)
	for _, f := range l.Socket().Fallbacks() {
		fmt.Printf("  refused first:     %v\n", f)
	}
	if !m.Socket.ZeroCopy {
		fmt.Println("  why copy mode:     veth has no AF_XDP zero-copy support, so the kernel refuses XDP_ZEROCOPY (EOPNOTSUPP) and the socket binds in copy mode")
	}
}

// exchange sends one datagram of n payload bytes from one link and waits for it on the
// other, checking every byte.
func exchange(ctx context.Context, name string, from, to *xdp.Link, dst netip.AddrPort, n int, seq byte) error {
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = seq + byte(i*7)
	}
	var out [1]link.Packet
	out[0].Remote = dst
	out[0].SetData(payload)
	deadline := time.Now().Add(2 * time.Second)
	for {
		k, err := from.Send(out[:])
		if err != nil {
			return fmt.Errorf("%s: send %d bytes: %w", name, n, err)
		}
		if k == 1 {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: no room to send", name)
		}
		_ = from.Wait(time.Millisecond)
	}
	var in [1]link.Packet
	for {
		k, err := to.Receive(in[:])
		if err != nil {
			return fmt.Errorf("%s: receive: %w", name, err)
		}
		if k == 1 {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: the %d-byte datagram did not arrive", name, n)
		}
		if err := to.Wait(10 * time.Millisecond); err != nil {
			return err
		}
	}
	p := &in[0]
	nsegs, src := p.NSegs, p.Remote
	var got []byte
	segs := ""
	for i, s := range p.Segs[:p.NSegs] {
		got = append(got, s...)
		if i > 0 {
			segs += "+"
		}
		segs += fmt.Sprint(len(s))
	}
	to.Release(in[:])
	verdict := "payload verified"
	if !bytes.Equal(got, payload) {
		verdict = "PAYLOAD DIFFERS"
	}
	fmt.Printf("%s  %v -> %v  %5d bytes in %d segment(s) (%s)  %s\n", name, src, to.LocalAddr(), len(got), nsegs, segs, verdict)
	if verdict != "payload verified" {
		return fmt.Errorf("%s: %d-byte datagram arrived altered", name, n)
	}
	return nil
}

func printCounters(label string, c bpf.Counters) {
	fmt.Printf("%s: redirected %d (%d B), passed %d, no socket %d, malformed %d\n",
		label, c.Redirected, c.RedirectedBytes, c.Passed, c.NoSocket, c.Malformed)
}

// ping sends one ICMP echo request from host h to dst over a raw socket and waits for the
// reply; the kernel on the other host answers it.
func ping(ctx context.Context, h *testbed.Host, dst netip.Addr) error {
	return h.Do(func() error {
		c, err := net.ListenPacket("ip4:icmp", h.Addr.String())
		if err != nil {
			return err
		}
		defer c.Close()
		const id, seq = 0x7864, 1 // "xd"
		msg := []byte{8, 0, 0, 0, id >> 8, id & 0xff, 0, seq, 'x', 'd', 'p', 'n', 'd', 'k'}
		var sum frame.Checksum
		sum.Add(msg)
		ck := sum.Fold()
		msg[2], msg[3] = byte(ck>>8), byte(ck)
		t0 := time.Now()
		if _, err := c.WriteTo(msg, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
			return err
		}
		buf := make([]byte, 1500)
		for {
			if err := c.SetReadDeadline(time.Now().Add(time.Second)); err != nil {
				return err
			}
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// Go strips the IPv4 header: buf holds the ICMP message. Type 0 is echo reply.
			if n >= 8 && buf[0] == 0 && buf[4] == id>>8 && buf[5] == id&0xff {
				fmt.Printf("ping %s -> %s: echo reply from %v in %v\n", h.Addr, dst, from, time.Since(t0).Round(time.Microsecond))
				return nil
			}
		}
	})
}
