//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package bpf

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
)

// Program is the loaded steering program and its maps, plus the interfaces it is attached
// to. It is safe for concurrent use. The caller owns it and must Close it; closing the
// process has the same effect, since every attachment is a bpf_link held by a file
// descriptor of this process.
type Program struct {
	port   uint16
	queues int

	prog        *ebpf.Program // owned by coll
	xsks        *ebpf.Map     // owned by coll
	counters    *ebpf.Map     // owned by coll
	faultConfig *ebpf.Map     // owned by coll

	// mu guards everything below. Methods that only use the kernel objects take it for
	// reading so they never race with Close; Attach, Detach, SetFaultDrop and Close take it
	// for writing.
	mu    sync.RWMutex
	coll  *ebpf.Collection // nil once closed
	links map[int]link.Link
}

// Load loads the steering program and its maps into the kernel with the port from opts. It
// does not attach it anywhere. It needs CAP_BPF (and CAP_NET_ADMIN for Attach), in practice
// root. Errors are wrapped: errors.Is(err, ErrInvalidOptions) for bad opts; a verifier
// rejection unwraps to *ebpf.VerifierError.
func Load(opts Options) (*Program, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("load xdp program: %w", err)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("load xdp program: remove memlock limit: %w", err)
	}
	spec, err := loadSteer()
	if err != nil {
		return nil, fmt.Errorf("load xdp program: %w", err)
	}
	port, ok := spec.Variables[steerVarSteerPort]
	if !ok {
		return nil, fmt.Errorf("load xdp program: object has no %s variable", steerVarSteerPort)
	}
	// Host byte order: the program compares it with ntohs(udp->dest).
	if err := port.Set(opts.Port); err != nil {
		return nil, fmt.Errorf("load xdp program: set port: %w", err)
	}
	xsks, ok := spec.Maps[steerMapXsks]
	if !ok {
		return nil, fmt.Errorf("load xdp program: object has no %s map", steerMapXsks)
	}
	xsks.MaxEntries = uint32(opts.QueueCount)

	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, fmt.Errorf("load xdp program: %w", err)
	}
	p := &Program{
		port:        opts.Port,
		queues:      opts.QueueCount,
		prog:        coll.Programs[steerProgSteer],
		xsks:        coll.Maps[steerMapXsks],
		counters:    coll.Maps[steerMapCounters],
		faultConfig: coll.Maps[steerMapFaultConfig],
		coll:        coll,
		links:       make(map[int]link.Link),
	}
	if p.prog == nil || p.xsks == nil || p.counters == nil || p.faultConfig == nil {
		coll.Close()
		return nil, errors.New("load xdp program: object lacks the steer program or one of its maps")
	}
	return p, nil
}

// Port returns our UDP destination port (host byte order) as given to Load.
func (p *Program) Port() uint16 { return p.port }

// QueueCount returns the number of XSKMAP slots: SetSocket accepts queues in
// [0, QueueCount).
func (p *Program) QueueCount() int { return p.queues }

// Attach attaches the program to the interface with index ifindex with a bpf_link, so it
// is detached when the link's last file descriptor closes, including when the process dies.
// ifindex is resolved in the network namespace of the calling OS thread. AttachAuto tries
// native mode first and generic mode if that fails (native fails on drivers without XDP
// support); veth supports native mode. It returns the mode in effect, or on failure the
// mode asked for. A Program can be attached to several interfaces but only once to each:
// a second Attach to the same ifindex fails with ErrAttached. It fails if the interface
// already has another XDP program in any mode.
//
// All interfaces a Program is attached to share its XSKMAP, whose key is only the RX queue
// index: a socket set for queue q is the redirect target for queue q of every one of them,
// and the kernel drops (without our counters seeing it) those from a device the socket is
// not bound to. Use one Program per interface that carries AF_XDP sockets.
func (p *Program) Attach(ifindex int, mode Mode) (Mode, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.coll == nil {
		return mode, fmt.Errorf("attach xdp program: %w", ErrClosed)
	}
	if ifindex <= 0 {
		return mode, fmt.Errorf("attach xdp program: invalid ifindex %d", ifindex)
	}
	if _, ok := p.links[ifindex]; ok {
		return mode, fmt.Errorf("attach xdp program to ifindex %d: %w", ifindex, ErrAttached)
	}

	var (
		l         link.Link
		effective = mode
		err       error
	)
	switch mode {
	case AttachNative, AttachGeneric:
		l, err = p.attach(ifindex, mode)
	case AttachAuto:
		effective = AttachNative
		l, err = p.attach(ifindex, effective)
		if err != nil {
			var errGeneric error
			effective = AttachGeneric
			l, errGeneric = p.attach(ifindex, effective)
			if errGeneric != nil {
				err = errors.Join(err, errGeneric)
			} else {
				err = nil
			}
		}
	default:
		return mode, fmt.Errorf("attach xdp program: invalid mode %v", mode)
	}
	if err != nil {
		return mode, fmt.Errorf("attach xdp program to ifindex %d: %w", ifindex, err)
	}
	p.links[ifindex] = l
	return effective, nil
}

func (p *Program) attach(ifindex int, mode Mode) (link.Link, error) {
	flags := link.XDPDriverMode
	if mode == AttachGeneric {
		flags = link.XDPGenericMode
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: p.prog, Interface: ifindex, Flags: flags})
	if err != nil {
		return nil, fmt.Errorf("%s mode: %w", mode, err)
	}
	return l, nil
}

// Detach removes the program from the interface with index ifindex, which must have been
// attached by this Program (ErrNotAttached otherwise).
func (p *Program) Detach(ifindex int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.coll == nil {
		return fmt.Errorf("detach xdp program: %w", ErrClosed)
	}
	l, ok := p.links[ifindex]
	if !ok {
		return fmt.Errorf("detach xdp program from ifindex %d: %w", ifindex, ErrNotAttached)
	}
	delete(p.links, ifindex)
	if err := l.Close(); err != nil {
		return fmt.Errorf("detach xdp program from ifindex %d: %w", ifindex, err)
	}
	return nil
}

// SetSocket makes fd, an AF_XDP socket, the target of our packets arriving on RX queue
// queue (XSKMAP[queue] = fd). The socket must be bound to this queue of the interface the
// program is attached to: the kernel accepts any AF_XDP socket here, even an unbound one,
// but drops redirected packets whose device and queue do not match the socket's binding
// (visible in the socket's XDP_STATISTICS, not in Counters). Frames larger than one buffer
// are dropped likewise unless the socket was bound with XDP_USE_SG. The map holds its own
// reference: closing the socket removes it from the map. SetSocket replaces a previous
// socket for the queue.
func (p *Program) SetSocket(queue int, fd int) error {
	if queue < 0 || queue >= p.queues {
		return fmt.Errorf("set xdp socket: queue %d not in [0, %d)", queue, p.queues)
	}
	if fd < 0 || int64(fd) > math.MaxInt32 {
		return fmt.Errorf("set xdp socket for queue %d: invalid fd %d", queue, fd)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.coll == nil {
		return fmt.Errorf("set xdp socket: %w", ErrClosed)
	}
	if err := p.xsks.Update(uint32(queue), uint32(fd), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("set xdp socket for queue %d: %w", queue, err)
	}
	return nil
}

// ClearSocket removes the socket of RX queue queue, if any: our packets arriving there are
// passed to the kernel and counted as NoSocket.
func (p *Program) ClearSocket(queue int) error {
	if queue < 0 || queue >= p.queues {
		return fmt.Errorf("clear xdp socket: queue %d not in [0, %d)", queue, p.queues)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.coll == nil {
		return fmt.Errorf("clear xdp socket: %w", ErrClosed)
	}
	if err := p.xsks.Delete(uint32(queue)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("clear xdp socket for queue %d: %w", queue, err)
	}
	return nil
}

// SetFaultDrop makes the program drop each of our packets that would be redirected with
// the given probability in [0, 1] (resolution 2^-32; 0 disables), using a per-CPU
// splitmix64 generator seeded from seed and the CPU number. Every call reseeds every CPU,
// even with an unchanged seed, so the same call followed by the same packets on the same
// CPU gives the same drops. Other traffic is never dropped.
func (p *Program) SetFaultDrop(probability float64, seed uint64) error {
	if math.IsNaN(probability) || probability < 0 || probability > 1 {
		return fmt.Errorf("set fault drop: probability %v not in [0, 1]", probability)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.coll == nil {
		return fmt.Errorf("set fault drop: %w", ErrClosed)
	}
	var cfg steerFaultConfig
	if err := p.faultConfig.Lookup(uint32(0), &cfg); err != nil {
		return fmt.Errorf("set fault drop: read config: %w", err)
	}
	cfg.Threshold = uint64(math.Round(probability * (1 << 32)))
	cfg.Seed = seed
	cfg.Generation++
	if err := p.faultConfig.Update(uint32(0), cfg, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("set fault drop: write config: %w", err)
	}
	return nil
}

// Counters returns the verdict counters summed over all CPUs. It allocates.
func (p *Program) Counters() (Counters, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.coll == nil {
		return Counters{}, fmt.Errorf("read counters: %w", ErrClosed)
	}
	var perCPU []steerCounters
	if err := p.counters.Lookup(uint32(0), &perCPU); err != nil {
		return Counters{}, fmt.Errorf("read counters: %w", err)
	}
	var c Counters
	for _, v := range perCPU {
		c.Redirected += v.Redirected
		c.RedirectedBytes += v.RedirectedBytes
		c.Passed += v.Passed
		c.NoSocket += v.NoSocket
		c.Malformed += v.Malformed
		c.FaultDropped += v.FaultDropped
	}
	return c, nil
}

// Run runs the program once on pkt with BPF_PROG_TEST_RUN and returns its XDP action
// (XDPPass, XDPRedirect, XDPDrop). It is meant for tests: the packet is not delivered
// anywhere, but counters, fault-injection state and XSKMAP lookups are the real ones. The
// packet appears to arrive on RX queue 0, and the program runs on the calling thread's
// current CPU (pin the thread for deterministic fault injection). pkt must be at least 14
// bytes (the kernel rejects shorter input); longer than about 3.5 KB it is split into
// fragments, like a multi-buffer frame.
func (p *Program) Run(pkt []byte) (uint32, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.coll == nil {
		return 0, fmt.Errorf("run xdp program: %w", ErrClosed)
	}
	verdict, err := p.prog.Run(&ebpf.RunOptions{Data: pkt})
	if err != nil {
		return 0, fmt.Errorf("run xdp program: %w", err)
	}
	return verdict, nil
}

// Close detaches the program from every interface and releases the program and its maps.
// Sockets set with SetSocket stay open (they belong to the caller). Calling Close again
// does nothing and returns nil.
func (p *Program) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.coll == nil {
		return nil
	}
	var errs []error
	for ifindex, l := range p.links {
		if err := l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach from ifindex %d: %w", ifindex, err))
		}
	}
	clear(p.links)
	p.coll.Close()
	p.coll = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close xdp program: %w", err)
	}
	return nil
}
