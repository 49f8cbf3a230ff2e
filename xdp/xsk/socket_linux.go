package xsk

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpndk/xdpndk/memreg"
)

// NewSocket creates an AF_XDP socket bound to one queue of one interface, with its four rings
// mapped. The socket must be created in the network namespace of the interface; afterwards it
// may be used from any thread. The first socket of a UMEM registers it (cfg.Shared == nil);
// further sockets on other queues pass that first socket as cfg.Shared and get rings of
// their own.
//
// Binding tries zero-copy first and falls back to copy mode (BindAuto), and tries the
// requested multi-buffer and wakeup flags; Mode reports what is in effect. When every mode
// fails, the error is a *BindError; a queue bound by another AF_XDP socket makes it wrap
// ErrBusy (and EBUSY).
func NewSocket(u *memreg.UMEM, cfg SocketConfig) (*Socket, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	if u == nil || u.Size() == 0 {
		return nil, errors.New("xdp socket: umem is nil or closed")
	}
	deadline := time.Now().Add(cfg.BusyRetry)
	if cfg.Shared != nil {
		if cfg.Shared.umem != u {
			return nil, errors.New("xdp socket: shared socket uses another umem")
		}
		m := cfg.Shared.mode
		return bindModes(cfg, []SocketMode{m}, func(SocketMode) (*Socket, error) {
			return bindRetry(u, cfg, m, unix.XDP_SHARED_UMEM, deadline)
		})
	}
	var attempts []SocketMode
	for _, zc := range []bool{true, false} {
		if (zc && cfg.Bind == BindCopy) || (!zc && cfg.Bind == BindZeroCopy) {
			continue
		}
		if cfg.MultiBuffer != MultiBufferOff {
			attempts = append(attempts, SocketMode{ZeroCopy: zc, MultiBuffer: true, NeedWakeup: cfg.NeedWakeup})
		}
		if cfg.MultiBuffer != MultiBufferRequire {
			attempts = append(attempts, SocketMode{ZeroCopy: zc, NeedWakeup: cfg.NeedWakeup})
		}
	}
	return bindModes(cfg, attempts, func(m SocketMode) (*Socket, error) {
		var flags uint16
		if m.ZeroCopy {
			flags |= unix.XDP_ZEROCOPY
		} else {
			flags |= unix.XDP_COPY
		}
		if m.MultiBuffer {
			flags |= unix.XDP_USE_SG
		}
		if m.NeedWakeup {
			flags |= unix.XDP_USE_NEED_WAKEUP
		}
		return bindRetry(u, cfg, m, flags, deadline)
	})
}

// bindModes binds in the first of attempts the kernel takes, through bind. A refusal of the
// mode itself (EOPNOTSUPP, EINVAL, EPROTONOSUPPORT) moves on to the next mode, and so does
// EBUSY: the kernel checks whether the queue is taken before it looks at the mode, so on a
// busy queue every mode fails alike and the later ones fail at once (bindRetry's deadline
// has passed), while a driver that answers EBUSY for zero-copy alone still gets its copy
// mode. Any other failure ends the attempts. Failed attempts before a success become the
// socket's Fallbacks; if none succeeds, the *BindError names EBUSY as the cause if any
// attempt got it (not the mode it was tried in), else the last failure.
func bindModes(cfg SocketConfig, attempts []SocketMode, bind func(SocketMode) (*Socket, error)) (*Socket, error) {
	var tried, refused []error
	busy := false
	for _, m := range attempts {
		s, err := bind(m)
		if err == nil {
			s.fallbacks = tried
			return s, nil
		}
		tried = append(tried, fmt.Errorf("%v: %w", m, err))
		if errors.Is(err, unix.EBUSY) {
			busy = true
			continue
		}
		refused = append(refused, tried[len(tried)-1])
		if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EPROTONOSUPPORT) {
			break
		}
	}
	e := &BindError{IfIndex: cfg.IfIndex, Queue: cfg.Queue}
	switch {
	case busy:
		e.Err, e.Refused = fmt.Errorf("%w: %w", ErrBusy, unix.EBUSY), refused
	case len(tried) > 0:
		e.Err, e.Refused = tried[len(tried)-1], tried[:len(tried)-1]
	default:
		e.Err = errors.New("no bind mode to try")
	}
	return nil, e
}

// bindRetry creates and binds a socket with the given flags, retrying until deadline while
// the queue is still busy from a socket closed moments ago (the kernel releases it
// asynchronously, about 20 ms on veth).
func bindRetry(u *memreg.UMEM, cfg SocketConfig, m SocketMode, flags uint16, deadline time.Time) (*Socket, error) {
	for {
		s, err := newSocket(u, cfg, m, flags)
		if err == nil || !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return s, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newSocket(u *memreg.UMEM, cfg SocketConfig, m SocketMode, flags uint16) (s *Socket, err error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("create af_xdp socket: %w", err)
	}
	s = &Socket{fd: fd, umem: u, mode: m, cfg: cfg}
	defer func() {
		if err != nil {
			s.Close()
			s = nil
		}
	}()
	if cfg.Shared == nil {
		reg := unix.XDPUmemReg{
			Addr: uint64(uintptrOf(u.Bytes())),
			Len:  uint64(u.Size()),
			Size: uint32(u.FrameSize()),
		}
		if cfg.Unaligned {
			reg.Flags |= unix.XDP_UMEM_UNALIGNED_CHUNK_FLAG
		}
		if err := setsockoptUmemReg(fd, &reg); err != nil {
			return s, fmt.Errorf("register umem: %w", err)
		}
	}
	for _, o := range []struct {
		opt  int
		size uint32
	}{
		{unix.XDP_UMEM_FILL_RING, cfg.FillSize},
		{unix.XDP_UMEM_COMPLETION_RING, cfg.CompSize},
		{unix.XDP_RX_RING, cfg.RxSize},
		{unix.XDP_TX_RING, cfg.TxSize},
	} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, o.opt, int(o.size)); err != nil {
			return s, fmt.Errorf("set ring size (option %d) to %d: %w", o.opt, o.size, err)
		}
	}
	if err := s.mapRings(); err != nil {
		return s, err
	}
	sa := &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(cfg.IfIndex), QueueID: uint32(cfg.Queue)}
	if cfg.Shared != nil {
		sa.SharedUmemFD = uint32(cfg.Shared.fd)
	}
	if err := unix.Bind(fd, sa); err != nil {
		return s, fmt.Errorf("bind: %w", err)
	}
	// The kernel's own word on zero-copy beats our flags.
	if v, err := unix.GetsockoptInt(fd, unix.SOL_XDP, unix.XDP_OPTIONS); err == nil {
		s.mode.ZeroCopy = v&unix.XDP_OPTIONS_ZEROCOPY != 0
	}
	s.applyOptions()
	return s, nil
}

// rxMapIndex is the RX ring's place in Socket.maps (mapRings maps fill, completion, RX, TX).
const rxMapIndex = 2

func (s *Socket) mapRings() error {
	off, err := getsockoptMmapOffsets(s.fd)
	if err != nil {
		return fmt.Errorf("get ring offsets: %w", err)
	}
	type spec struct {
		pgoff int64
		off   unix.XDPRingOffset
		size  uint32
		desc  bool
	}
	specs := [4]spec{
		{unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, s.cfg.FillSize, false},
		{unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, s.cfg.CompSize, false},
		{unix.XDP_PGOFF_RX_RING, off.Rx, s.cfg.RxSize, true},
		{unix.XDP_PGOFF_TX_RING, off.Tx, s.cfg.TxSize, true},
	}
	rings := [4]*ring{&s.fill, &s.comp, &s.rx, &s.tx}
	for i, sp := range specs {
		entry := uintptr(8)
		if sp.desc {
			entry = 16
		}
		length := int(sp.off.Desc) + int(sp.size)*int(entry)
		mem, err := unix.Mmap(s.fd, sp.pgoff, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			return fmt.Errorf("map ring at page offset %#x: %w", sp.pgoff, err)
		}
		s.maps = append(s.maps, mem)
		r, entries, err := mapRing(mem, sp.off, sp.size, entry)
		if err != nil {
			return err
		}
		*rings[i] = r
		switch i {
		case 0:
			s.fillAddrs = addrEntries(entries, sp.size)
		case 1:
			s.compAddrs = addrEntries(entries, sp.size)
		case 2:
			s.rxDescs = descEntries(entries, sp.size)
		case 3:
			s.txDescs = descEntries(entries, sp.size)
		}
	}
	// The producer ring's cached consumer starts where the kernel's is.
	s.fill.cachedCons = *s.fill.consumer
	s.fill.cachedProd = *s.fill.producer
	s.tx.cachedCons = *s.tx.consumer
	s.tx.cachedProd = *s.tx.producer
	s.rx.cachedCons = *s.rx.consumer
	s.rx.cachedProd = *s.rx.producer
	s.comp.cachedCons = *s.comp.consumer
	s.comp.cachedProd = *s.comp.producer
	return nil
}

// applyOptions sets the optional socket options and records which the kernel took.
func (s *Socket) applyOptions() {
	if s.cfg.BusyPoll > 0 {
		us := int(s.cfg.BusyPoll / time.Microsecond)
		ok := unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_PREFER_BUSY_POLL, 1) == nil
		ok = unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_BUSY_POLL, us) == nil && ok
		if s.cfg.BusyPollBudget > 0 {
			ok = unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_BUSY_POLL_BUDGET, s.cfg.BusyPollBudget) == nil && ok
		}
		s.mode.BusyPoll = ok
	}
	if !s.mode.ZeroCopy && s.cfg.TxBudget > 0 {
		if unix.SetsockoptInt(s.fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, s.cfg.TxBudget) == nil {
			s.mode.TxBudget = s.cfg.TxBudget
		}
	}
}

// Close unmaps the rings and closes the socket. It is idempotent. The UMEM stays.
//
// The RX ring's mapping is not unmapped but replaced, in one mmap, by anonymous memory of
// the same size (its indices read 0), which is unmapped once the Socket is unreachable: a
// consumer that looks at the ring (RxReady) racing Close reads an index there instead of
// faulting, so its caller may peek without excluding Close, provided it checks afterwards
// that the socket is still open before it uses what it saw. Everything else stays excluded.
func (s *Socket) Close() error {
	var errs []error
	for i, m := range s.maps {
		if i == rxMapIndex && retireMapping(m) {
			runtime.AddCleanup(s, func(m []byte) { _ = unix.Munmap(m) }, m)
			continue
		}
		if err := unix.Munmap(m); err != nil {
			errs = append(errs, err)
		}
	}
	s.maps = nil
	s.fillAddrs, s.compAddrs, s.rxDescs, s.txDescs = nil, nil, nil, nil
	if s.fd >= 0 {
		if err := unix.Close(s.fd); err != nil {
			errs = append(errs, err)
		}
		s.fd = -1
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close af_xdp socket: %w", err)
	}
	return nil
}

// Statistics returns the kernel's counters for the socket (XDP_STATISTICS).
func (s *Socket) Statistics() (Statistics, error) {
	st, err := getsockoptStatistics(s.fd)
	if err != nil {
		return Statistics{}, fmt.Errorf("read af_xdp statistics: %w", err)
	}
	return Statistics{
		RxDropped:        st.Rx_dropped,
		RxInvalidDescs:   st.Rx_invalid_descs,
		TxInvalidDescs:   st.Tx_invalid_descs,
		RxRingFull:       st.Rx_ring_full,
		RxFillRingEmpty:  st.Rx_fill_ring_empty_descs,
		TxRingEmptyDescs: st.Tx_ring_empty_descs,
	}, nil
}

// Fill puts frames (UMEM offsets of their first byte) on the fill ring for the kernel to
// receive into and returns how many it put; the rest did not fit.
func (s *Socket) Fill(addrs []uint64) int {
	n := s.fill.free(uint32(len(addrs)))
	if n == 0 {
		return 0
	}
	idx := s.fill.reserve(n)
	for i := range n {
		s.fillAddrs[(idx+i)&s.fill.mask] = addrs[i]
	}
	s.fill.submit()
	return int(n)
}

// Receive copies up to len(descs) received descriptors, whole packets only, and returns how
// many it copied. Addresses are plain UMEM offsets of the first byte of data, also in
// unaligned-chunk mode. A packet of several descriptors (multi-buffer) has DescContinued in
// Options on all but its last descriptor; descs must be longer than the longest packet.
func (s *Socket) Receive(descs []Desc) int {
	n := s.rx.available(uint32(len(descs)))
	if n == 0 {
		return 0
	}
	idx := s.rx.peek(n)
	for i := range n {
		descs[i] = s.rxDescs[(idx+i)&s.rx.mask]
	}
	// Hand back a trailing packet whose last descriptor did not fit in this batch.
	keep := n
	for keep > 0 && descs[keep-1].Options&DescContinued != 0 {
		keep--
	}
	s.rx.unpeek(n - keep)
	if keep == 0 {
		return 0
	}
	s.rx.release()
	if s.cfg.Unaligned {
		for i := range keep {
			a := descs[i].Addr
			descs[i].Addr = a&unalignedAddrMask + a>>unalignedOffsetShift
		}
	}
	return int(keep)
}

// TxFree returns how many descriptors Transmit can take now, up to want.
func (s *Socket) TxFree(want int) int { return int(s.tx.free(uint32(want))) }

// Transmit puts descriptors on the TX ring and returns how many it put; the rest did not
// fit. Only whole packets should be passed when fewer than len(descs) may fit: check TxFree
// first. It does not make the kernel transmit: call Kick.
func (s *Socket) Transmit(descs []Desc) int {
	n := s.tx.free(uint32(len(descs)))
	if n == 0 {
		return 0
	}
	idx := s.tx.reserve(n)
	for i := range n {
		s.txDescs[(idx+i)&s.tx.mask] = descs[i]
	}
	s.tx.submit()
	return int(n)
}

// TxPending returns how many submitted TX descriptors the kernel has not taken yet.
func (s *Socket) TxPending() int { return int(s.tx.pending()) }

// FillPending returns how many frames on the fill ring the kernel has not taken yet.
func (s *Socket) FillPending() int { return int(s.fill.pending()) }

// Complete copies up to len(addrs) completed TX addresses (UMEM offsets as they were
// transmitted) and returns how many it copied.
func (s *Socket) Complete(addrs []uint64) int {
	n := s.comp.available(uint32(len(addrs)))
	if n == 0 {
		return 0
	}
	idx := s.comp.peek(n)
	for i := range n {
		addrs[i] = s.compAddrs[(idx+i)&s.comp.mask]
	}
	s.comp.release()
	return int(n)
}

// TxNeedsWakeup reports whether the kernel needs a Kick to transmit (always true without
// need_wakeup, and always in copy mode).
func (s *Socket) TxNeedsWakeup() bool { return !s.mode.NeedWakeup || s.tx.needWakeup() }

// FillNeedsWakeup reports whether the kernel needs a system call (a poll or recvfrom) to
// refill from the fill ring.
func (s *Socket) FillNeedsWakeup() bool { return s.mode.NeedWakeup && s.fill.needWakeup() }

// Kick makes the kernel transmit what is on the TX ring. Transient refusals (EAGAIN: the
// copy-mode budget per call was used; EBUSY, ENOBUFS: out of buffers) are not errors; call
// again later.
func (s *Socket) Kick() error {
	err := kick(s.fd)
	switch {
	case err == nil, errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EBUSY), errors.Is(err, unix.ENOBUFS), errors.Is(err, unix.EINTR):
		return nil
	}
	return fmt.Errorf("kick af_xdp tx: %w", err)
}

// WakeFill makes the kernel look at the fill ring again (a non-blocking recvfrom), for when
// FillNeedsWakeup says so.
func (s *Socket) WakeFill() { recvNonblock(s.fd) }

// BusyPoll runs the device's NAPI once from the calling thread (a non-blocking recvfrom)
// when the busy-poll options took (Mode().BusyPoll), and reports whether it made the call.
// Preferred busy polling (SO_PREFER_BUSY_POLL, the kernel's Documentation/networking/napi.rst)
// leaves the device's interrupts off while the application polls, so the application must
// make such a call whenever it finds its RX ring empty, or packets wait for the
// gro_flush_timeout timer. It never sleeps: the busy loop of a non-blocking call runs once.
func (s *Socket) BusyPoll() bool {
	if !s.mode.BusyPoll {
		return false
	}
	recvNonblock(s.fd)
	return true
}

// RxReady reports whether the RX ring holds a descriptor for Receive, without taking it.
func (s *Socket) RxReady() bool { return s.rx.available(1) > 0 }

// CompletionsReady reports whether the completion ring holds an address for Complete,
// without taking it.
func (s *Socket) CompletionsReady() bool { return s.comp.available(1) > 0 }

// Config returns the socket's configuration as NewSocket completed it (ring sizes with
// their defaults filled in).
func (s *Socket) Config() SocketConfig { return s.cfg }

// FD returns the socket's file descriptor (for the XSKMAP and for poll).
func (s *Socket) FD() int { return s.fd }

// Mode returns what the kernel granted when the socket was bound.
func (s *Socket) Mode() SocketMode { return s.mode }

// Fallbacks returns the bind attempts that failed before the one in effect (an attempt
// at zero-copy on veth, for example), so the fallback is never silent.
func (s *Socket) Fallbacks() []error { return s.fallbacks }
