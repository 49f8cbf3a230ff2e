//go:build linux && (amd64 || arm || arm64 || loong64 || mips || mips64 || mips64le || mipsle || ppc64 || ppc64le || riscv64 || s390x)

// asavie/xdp builds on these architectures; pair_asavie_unavailable_linux.go stands in on
// the others (linux/386, where it calls setsockopt, getsockopt and sendto by system call
// numbers the architecture does not have).

package linkbench

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/xdpndk/xdpndk/xdp/frame"

	axdp "github.com/asavie/xdp"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/bpf"
	"github.com/xdpndk/xdpndk/internal/testbed"
)

// errAsavieUnavailable is nil: asavie/xdp builds on this architecture.
var errAsavieUnavailable error

// asavie/xdp socket geometry: the same frames and rings our xdp.Device uses (Frames 8192
// of 4096 bytes, fill/completion/RX rings of 4096, TX ring of 2048), so that only the
// socket library differs.
var asavieOptions = axdp.SocketOptions{
	NumFrames:              8192,
	FrameSize:              4096,
	FillRingNumDescs:       4096,
	CompletionRingNumDescs: 4096,
	RxRingNumDescs:         4096,
	TxRingNumDescs:         2048,
}

// asavieMaxSize is the largest IP packet an asavie/xdp socket receives on the bed. It
// cannot bind with XDP_USE_SG, and veth hands XDP a frame above about 3.5 KB in several
// buffers, which the kernel then drops for a socket without it (docs/TESTBED.md, "MTU and
// XDP on the bed").
const asavieMaxSize = 3498

// asavieSide is an asavie/xdp socket on one veth end with our steering program, which
// redirects our port's datagrams arriving on the socket's queue to it.
type asavieSide struct {
	host     *testbed.Host
	xsk      *axdp.Socket
	prog     *bpf.Program
	enc      frame.Encap    // headers towards the other side
	local    netip.AddrPort // our address and port on this side
	attach   bpf.Mode       // native or generic XDP for the steering program
	attached bool
}

// asaviePair is asavie/xdp on both hosts. It is opened once per RunBed, because its
// Socket.Close leaves the rings mapped and so the socket bound to its queue (see the
// package documentation); each turn attaches the steering programs and close detaches
// them.
type asaviePair struct {
	queue      int
	sides      [2]*asavieSide
	attachMode bpf.Mode
	zeroCopy   bool
	txCalls    atomic.Uint64 // Transmit calls on A's side (each makes one sendto)
	leaked     bool
}

// openAsavie creates an asavie/xdp socket on the given queue of each veth end, with our
// steering program loaded (not yet attached) and pointing at it.
func openAsavie(bed *testbed.Bed, queue int, attach bpf.Mode) (p *asaviePair, err error) {
	p = &asaviePair{queue: queue}
	defer func() {
		if err != nil {
			p.release()
			p = nil
		}
	}()
	hosts := [2]*testbed.Host{bed.A, bed.B}
	for i, h := range hosts {
		s := &asavieSide{host: h, local: netip.AddrPortFrom(h.Addr, Port), attach: attach}
		p.sides[i] = s
		peer := hosts[1-i]
		s.enc = frame.Encap{
			SrcMAC: [6]byte(h.MAC), DstMAC: [6]byte(peer.MAC), Src: h.Addr, Dst: peer.Addr,
			SrcPort: Port, DstPort: Port,
		}
		if err := s.enc.Validate(); err != nil {
			return p, fmt.Errorf("asavie headers %s -> %s: %w", h.Addr, peer.Addr, err)
		}
		err := h.Do(func() error {
			prog, err := bpf.Load(bpf.Options{Port: Port})
			if err != nil {
				return err
			}
			s.prog = prog
			if s.xsk, err = newAsavieSocket(h.IfIndex, queue); err != nil {
				return err
			}
			p.leaked = true
			if err := prog.SetSocket(queue, s.xsk.FD()); err != nil {
				return err
			}
			s.xsk.Fill(s.xsk.GetDescs(s.xsk.NumFreeFillSlots()))
			return nil
		})
		if err != nil {
			return p, fmt.Errorf("open asavie/xdp socket on %s queue %d: %w", h.Ifname, queue, err)
		}
	}
	zc, err := socketZeroCopy(p.sides[0].xsk.FD())
	if err != nil {
		return p, err
	}
	p.zeroCopy = zc
	return p, nil
}

// newAsavieSocket binds an asavie/xdp socket, retrying for up to a second while the queue
// is still busy from a socket closed moments ago. asavie/xdp formats the errno into its
// error text (%v), so errors.Is cannot see it and the text is matched instead.
func newAsavieSocket(ifindex, queue int) (*axdp.Socket, error) {
	deadline := time.Now().Add(time.Second)
	for {
		opts := asavieOptions
		x, err := axdp.NewSocket(ifindex, queue, &opts)
		if err == nil {
			return x, nil
		}
		if !strings.Contains(err.Error(), syscall.EBUSY.Error()) || time.Now().After(deadline) {
			return nil, fmt.Errorf("asavie/xdp NewSocket: %w", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// socketZeroCopy asks the kernel whether an AF_XDP socket is bound in zero-copy mode
// (getsockopt SOL_XDP/XDP_OPTIONS, linux/if_xdp.h).
func socketZeroCopy(fd int) (bool, error) {
	const solXDP, xdpOptions, xdpOptionsZeroCopy = 283, 8, 1
	v, err := syscall.GetsockoptInt(fd, solXDP, xdpOptions)
	if err != nil {
		return false, fmt.Errorf("read af_xdp socket options: %w", err)
	}
	return v&xdpOptionsZeroCopy != 0, nil
}

// attach attaches the steering program to both veth ends for a turn.
func (p *asaviePair) attach() error {
	for _, s := range p.sides {
		if s.attached {
			continue
		}
		err := s.host.Do(func() error {
			m, err := s.prog.Attach(s.host.IfIndex, s.attach)
			if err != nil {
				return err
			}
			p.attachMode = m
			s.attached = true
			return nil
		})
		if err != nil {
			return errors.Join(fmt.Errorf("attach steering program for asavie on %s: %w", s.host.Ifname, err), p.close())
		}
	}
	return nil
}

// close ends a turn: it detaches the steering programs. The sockets stay.
func (p *asaviePair) close() error {
	var errs []error
	for _, s := range p.sides {
		if s != nil && s.attached {
			if err := s.prog.Detach(s.host.IfIndex); err != nil {
				errs = append(errs, err)
			}
			s.attached = false
		}
	}
	return errors.Join(errs...)
}

// release closes the programs and the sockets. asavie/xdp's Close unmaps only the UMEM:
// the ring mappings, and with them the bound kernel sockets, stay until the process exits
// or the veth pair is deleted.
func (p *asaviePair) release() {
	_ = p.close()
	for _, s := range p.sides {
		if s == nil {
			continue
		}
		if s.prog != nil {
			_ = s.prog.Close()
		}
		if s.xsk != nil {
			_ = s.xsk.Close()
		}
	}
}

// notes are the header notes about this system.
func (p *asaviePair) notes() []string {
	if !p.leaked {
		return nil
	}
	return []string{fmt.Sprintf("asavie: its sockets sit on queue %d of each veth end (xdpndk uses queue 0) and were opened once for the whole run: "+
		"asavie/xdp's Socket.Close leaves the four ring mappings (and so the bound socket) behind, so a queue it used cannot be bound again", p.queue)}
}

func (p *asaviePair) mode() string {
	bind := "copy"
	if p.zeroCopy {
		bind = "zerocopy"
	}
	return fmt.Sprintf("xdp=%v (our steering program) af_xdp=%s (bind flags 0: the kernel's choice) queue=%d frames=%dx%d, "+
		"no need_wakeup (sendto on every Transmit), no multi-buffer",
		p.attachMode, bind, p.queue, asavieOptions.NumFrames, asavieOptions.FrameSize)
}

func (p *asaviePair) maxSize() (int, string) {
	return asavieMaxSize, "asavie/xdp has no multi-buffer (XDP_USE_SG): a 4096-byte frame holds one packet, and veth splits frames above ~3.5 KB"
}

func (p *asaviePair) kicks() (uint64, bool) { return p.txCalls.Load(), true }

func (p *asaviePair) blocks() bool { return false }

func (p *asaviePair) unblock() {}

// frame writes one datagram with payload into the free frame of desc and sets its length.
func (s *asavieSide) frame(x *axdp.Socket, d *axdp.Desc, payload []byte) error {
	fr := x.GetFrame(*d)
	// The same UDP checksum as xdp.Link sends by default (xdp.ChecksumAuto): none over
	// IPv4, computed over IPv6.
	var sum frame.Checksum
	var psum *frame.Checksum
	if s.enc.IPv6() {
		sum.Add(payload)
		psum = &sum
	}
	hl, err := s.enc.Put(fr, len(payload), psum, 0)
	if err != nil {
		return fmt.Errorf("frame datagram: %w", err)
	}
	if hl+len(payload) > len(fr) {
		return fmt.Errorf("frame datagram: %d bytes do not fit a %d-byte frame", hl+len(payload), len(fr))
	}
	copy(fr[hl:], payload)
	d.Len = uint32(hl + len(payload))
	return nil
}

// flushTx kicks the kernel until every descriptor on the TX ring has been sent and
// completed, for up to timeout. asavie/xdp's Transmit makes one sendto, which in copy mode
// sends at most 32 descriptors (the kernel's default budget), so the last descriptors of a
// burst stay on the ring until the next Transmit.
func flushTx(x *axdp.Socket, timeout time.Duration) error {
	deadline := report.Now() + int64(timeout)
	for {
		reclaim(x)
		if x.NumTransmitted() == 0 {
			return nil
		}
		if report.Now() > deadline {
			return fmt.Errorf("%d TX descriptors still pending after %v", x.NumTransmitted(), timeout)
		}
		x.Transmit(nil)
	}
}

// reclaim takes completed TX frames back.
func reclaim(x *axdp.Socket) {
	if n := x.NumCompleted(); n > 0 {
		x.Complete(n)
	}
}

func (p *asaviePair) xmit(side int, payload []byte) error {
	s := p.sides[side]
	x := s.xsk
	deadline := time.Now().Add(time.Second)
	for {
		reclaim(x)
		if x.NumFreeTxSlots() > 0 {
			if descs := x.GetDescs(1); len(descs) == 1 {
				if err := s.frame(x, &descs[0], payload); err != nil {
					return err
				}
				x.Transmit(descs)
				if side == 0 {
					p.txCalls.Add(1)
				}
				return flushTx(x, time.Second)
			}
		}
		if time.Now().After(deadline) {
			return errors.New("no free frame or TX slot for a second")
		}
		x.Transmit(nil) // kick what is queued
		time.Sleep(time.Millisecond)
	}
}

func (p *asaviePair) recv(side int, buf []byte, timeout time.Duration) (int, error) {
	s := p.sides[side]
	x := s.xsk
	deadline := time.Now().Add(timeout)
	var dg frame.Datagram
	for {
		if x.NumReceived() > 0 {
			descs := x.Receive(1)
			fr := x.GetFrame(descs[0])
			err := frame.ParseUDP(fr, len(fr), &dg)
			n := 0
			if err == nil {
				n = copy(buf, dg.Payload(fr))
			}
			x.Fill(descs)
			if err == nil && dg.Dst == s.local {
				return n, nil
			}
			continue
		}
		if time.Now().After(deadline) {
			return 0, errors.New("nothing received")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// send is A's one-way loop in asavie/xdp's own idiom: reclaim completions, take free
// frames, write datagrams into them, Transmit (which always calls sendto).
func (p *asaviePair) send(f *flow) error {
	s := p.sides[0]
	x := s.xsk
	var sent, calls uint64
	defer func() { p.txCalls.Add(calls) }()
	for it := 0; ; it++ {
		if f.stopTx.Load() || sent >= f.maxPkts || (it&63 == 0 && report.Now() > f.deadline) {
			// Send what is still on the ring, as any application ending a burst must.
			return flushTx(x, time.Second)
		}
		reclaim(x)
		want := min(f.batch, x.NumFreeTxSlots(), int(min(f.maxPkts-sent, 1<<20)))
		descs := x.GetDescs(want)
		for i := range descs {
			if err := s.frame(x, &descs[i], f.payload); err != nil {
				return err
			}
		}
		n := x.Transmit(descs)
		calls++
		if n > 0 {
			sent += uint64(n)
			f.tx.add(n, n*len(f.payload))
		}
	}
}

// receive is B's one-way loop: spin on the RX ring, check each frame is a datagram to us,
// count it, and give the frames straight back to the fill ring.
func (p *asaviePair) receive(f *flow) error {
	s := p.sides[1]
	x := s.xsk
	var dg frame.Datagram
	for it := 0; ; it++ {
		avail := x.NumReceived()
		if avail == 0 {
			if f.idleDone(it) {
				return nil
			}
			continue
		}
		descs := x.Receive(min(avail, f.batch))
		pk, b := 0, 0
		for _, d := range descs {
			fr := x.GetFrame(d)
			if frame.ParseUDP(fr, len(fr), &dg) == nil && dg.Dst == s.local {
				pk++
				b += dg.PayloadLen
			}
		}
		x.Fill(descs)
		f.rx.add(pk, b)
		if it&1023 == 0 && f.stopping(&f.stopRx) {
			return nil
		}
	}
}

// ping is A's ping-pong loop: write one datagram, Transmit, spin on the RX ring.
func (p *asaviePair) ping(pg *pinger) error {
	s := p.sides[0]
	x := s.xsk
	payload := make([]byte, PingSize-IPUDPHeaderLen)
	fillPattern(payload, 0)
	var dg frame.Datagram
	for seq := uint64(1); seq <= uint64(pg.n); seq++ {
		if pg.stop.Load() || report.Now() > pg.deadline {
			return nil
		}
		putSeq(payload, seq)
		reclaim(x)
		t0 := report.Now()
		descs := x.GetDescs(1)
		if len(descs) != 1 || x.NumFreeTxSlots() == 0 {
			return errors.New("no free frame or TX slot")
		}
		if err := s.frame(x, &descs[0], payload); err != nil {
			return err
		}
		x.Transmit(descs)
		got := false
		for spin := 0; !got; spin++ {
			if avail := x.NumReceived(); avail > 0 {
				rd := x.Receive(avail)
				for _, d := range rd {
					fr := x.GetFrame(d)
					if frame.ParseUDP(fr, len(fr), &dg) == nil && dg.Dst == s.local && seqOf(dg.Payload(fr)) == seq {
						got = true
					}
				}
				x.Fill(rd)
			}
			if !got && spin&63 == 63 && report.Now()-t0 > int64(pg.timeout) {
				break
			}
		}
		pg.record(got, t0)
	}
	return nil
}

// echo is B's ping-pong loop. asavie/xdp marks received frames free as soon as Receive
// returns them, so the payloads are copied aside before the frames go back to the fill
// ring and new frames are taken for the replies.
func (p *asaviePair) echo(f *flow) error {
	s := p.sides[1]
	x := s.xsk
	const slot = 4096
	scratch := make([]byte, f.batch*slot)
	lens := make([]int, f.batch)
	var dg frame.Datagram
	for it := 0; ; it++ {
		avail := x.NumReceived()
		if avail == 0 {
			if f.idleDone(it) {
				return nil
			}
			continue
		}
		reclaim(x)
		rd := x.Receive(min(avail, f.batch))
		n := 0
		for _, d := range rd {
			fr := x.GetFrame(d)
			if frame.ParseUDP(fr, len(fr), &dg) == nil && dg.Dst == s.local {
				lens[n] = copy(scratch[n*slot:(n+1)*slot], dg.Payload(fr))
				n++
			}
		}
		x.Fill(rd)
		for done := 0; done < n; {
			td := x.GetDescs(min(n-done, x.NumFreeTxSlots()))
			for i := range td {
				j := done + i
				if err := s.frame(x, &td[i], scratch[j*slot:j*slot+lens[j]]); err != nil {
					return err
				}
			}
			done += x.Transmit(td)
			if done < n {
				if f.stopping(&f.stopRx) {
					break
				}
				reclaim(x)
			}
		}
	}
}
