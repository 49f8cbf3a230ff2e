package delayline

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Batch sizes and waits of the forwarding loop.
const (
	rxBatch   = 32 // frames per recvmmsg
	rxRounds  = 8  // recvmmsg calls per wake-up before the queue is looked at again
	txBatch   = 32 // frames per sendmmsg
	idleWait  = 100 * time.Millisecond
	retryWait = 20 * time.Microsecond // after the egress socket said EAGAIN
	sockBuf   = 16 << 20              // SO_RCVBUF and SO_SNDBUF of each socket
	// rtPriority is the SCHED_FIFO priority of the forwarding threads: low among real-time
	// priorities (1 to 99), above every normal thread.
	rtPriority = 10
)

// Line is a running delay line between two ports: one goroutine per direction. Close
// stops it. Its methods are safe for concurrent use.
type Line struct {
	cfg   Config
	fds   [2]int // the ports' sockets
	evfd  int    // written by Close to wake both goroutines
	dirs  [2]*direction
	base  time.Time
	wg    sync.WaitGroup
	once  sync.Once
	errs  [2]error // a direction's loop error, set before its goroutine ends
	ended atomic.Bool
}

// direction is one direction's state, owned by its goroutine but for its counters.
type direction struct {
	l       *Line
	d       Dir
	in, out int // sockets
	inPort  Port
	outPort Port
	path    *Path
	lastAt  int64 // the latest arrival queued
	c       dirCounters
	rx, tx  *mmsgBatch
	rxBufs  [rxBatch][]byte
	pfd     [2]unix.PollFd
	ts      unix.Timespec
}

// Open opens an AF_PACKET socket on each port and starts forwarding between them with
// cfg applied to both directions (QueueBytes 0 means its default). It must run in the
// namespace that holds the ports (internal/testbed's Host.Do); the goroutines it starts
// may run anywhere, the sockets stay in that namespace. Close stops the line.
func Open(cfg Config, a, b Port) (*Line, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	for _, p := range []Port{a, b} {
		if p.IfIndex <= 0 || len(p.MAC) != 6 || len(p.PeerMAC) != 6 || !p.Addr.Is4() || !p.Prefix.Addr().Is4() {
			return nil, fmt.Errorf("%w: port %+v incomplete", ErrInvalidConfig, p)
		}
	}
	l := &Line{cfg: c, fds: [2]int{-1, -1}, evfd: -1, base: time.Now()}
	ok := false
	defer func() {
		if !ok {
			l.closeFDs()
		}
	}()
	for i, p := range []Port{a, b} {
		if l.fds[i], err = packetSocket(p.IfIndex); err != nil {
			return nil, fmt.Errorf("socket on interface %d: %w", p.IfIndex, err)
		}
	}
	if l.evfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	ports := [2]Port{a, b}
	for i := range l.dirs {
		path, err := NewPath(c)
		if err != nil {
			return nil, err
		}
		d := &direction{l: l, d: Dir(i), in: l.fds[i], out: l.fds[1-i], inPort: ports[i], outPort: ports[1-i],
			path: path, rx: newBatch(rxBatch), tx: newBatch(txBatch)}
		for k := range d.rxBufs {
			d.rxBufs[k] = make([]byte, MaxFrame)
			d.rx.set(k, d.rxBufs[k])
			d.rx.armRecv(k)
		}
		d.pfd = [2]unix.PollFd{{Fd: int32(d.in), Events: unix.POLLIN}, {Fd: int32(l.evfd), Events: unix.POLLIN}}
		l.dirs[i] = d
	}
	ok = true
	for i, d := range l.dirs {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			runtime.LockOSThread() // never unlocked: the thread's timer slack dies with it
			l.errs[i] = d.run()
		}()
	}
	return l, nil
}

// packetSocket opens an AF_PACKET raw socket that receives the IPv4 frames arriving on
// interface ifindex (not those sent from it) and sends on it.
func packetSocket(ifindex int) (int, error) {
	// Protocol 0 receives nothing until bind names the protocol and the interface, so no
	// frame of another interface slips in between.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return -1, err
	}
	fail := func(what string, err error) (int, error) {
		unix.Close(fd)
		return -1, fmt.Errorf("%s: %w", what, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
		return fail("PACKET_IGNORE_OUTGOING", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, sockBuf); err != nil {
		return fail("SO_RCVBUFFORCE", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sockBuf); err != nil {
		return fail("SO_SNDBUFFORCE", err)
	}
	// The kernel's receive timestamp is a frame's arrival: a forwarder that reads late
	// (descheduled) still queues what arrived at the time it arrived.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		return fail("SO_TIMESTAMPNS", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: ifindex}); err != nil {
		return fail("bind", err)
	}
	return fd, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// now returns the line's monotonic clock in ns.
func (l *Line) now() int64 { return int64(time.Since(l.base)) }

// Config returns the line's configuration, QueueBytes filled in.
func (l *Line) Config() Config { return l.cfg }

// Stats returns both directions' counters.
func (l *Line) Stats() Stats {
	return Stats{Config: l.cfg, Dir: [2]DirStats{l.dirs[0].c.snapshot(), l.dirs[1].c.snapshot()}}
}

// Close stops both directions, waits for their goroutines and closes the sockets; frames
// still held are discarded. It returns the error that stopped a direction early, if any.
// Further calls return nil.
func (l *Line) Close() error {
	var err error
	l.once.Do(func() {
		l.ended.Store(true)
		var one [8]byte
		one[0] = 1 // eventfd counters are host-endian; any non-zero value wakes
		_, werr := unix.Write(l.evfd, one[:])
		if werr != nil {
			err = fmt.Errorf("wake the delay line: %w", werr)
		}
		l.wg.Wait()
		l.closeFDs()
		err = errors.Join(err, l.errs[0], l.errs[1])
	})
	return err
}

func (l *Line) closeFDs() {
	for i, fd := range l.fds {
		if fd >= 0 {
			unix.Close(fd)
			l.fds[i] = -1
		}
	}
	if l.evfd >= 0 {
		unix.Close(l.evfd)
		l.evfd = -1
	}
}

// run is a direction's loop: send what is due, wait in ppoll until the next frame is due
// or one arrives, read what arrived.
func (d *direction) run() error {
	// A timer slack of 1 ns: ppoll's timeout is not rounded up by the default 50 µs.
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("%v: set timer slack: %w", d.d, err)
	}
	// Real-time priority (SCHED_FIFO) where allowed: on a busy machine a normal thread
	// waits for the CPU for milliseconds, and every frame it holds leaves that late. The
	// loop never spins (it waits in ppoll), so it takes only the CPU its frames need.
	if unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: rtPriority}, 0) == nil {
		d.c.realtime.Store(true)
	}
	l := d.l
	for !l.ended.Load() {
		wait := d.release()
		d.publish()
		d.ts = unix.NsecToTimespec(int64(wait))
		_, err := unix.Ppoll(d.pfd[:], &d.ts, nil)
		if err != nil && err != unix.EINTR {
			return fmt.Errorf("%v: ppoll: %w", d.d, err)
		}
		if d.pfd[1].Revents != 0 {
			return nil
		}
		if d.pfd[0].Revents&(unix.POLLERR|unix.POLLNVAL) != 0 {
			return fmt.Errorf("%v: socket error (poll events %#x)", d.d, d.pfd[0].Revents)
		}
		if d.pfd[0].Revents&unix.POLLIN != 0 {
			if err := d.receive(); err != nil {
				return err
			}
		}
	}
	return nil
}

// receive reads what arrived, in at most rxRounds batches, and queues what is to be
// forwarded.
func (d *direction) receive() error {
	for range rxRounds {
		n, err := recvmmsg(d.in, d.rx, rxBatch)
		if err == unix.EAGAIN || err == unix.EINTR {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%v: recvmmsg: %w", d.d, err)
		}
		wall := time.Now()
		now := int64(wall.Sub(d.l.base)) // monotonic
		wallToLine := wall.UnixNano() - now
		d.c.received.Add(uint64(n))
		for i := range n {
			h := &d.rx.hdrs[i]
			frame := d.rxBufs[i][:min(int(h.n), MaxFrame)]
			trunc := h.hdr.Flags&unix.MSG_TRUNC != 0
			at := now
			if ts, ok := d.rx.stamp(i); ok {
				// A stamp from another clock (a sender's departure time kept across
				// the veth) or older than the storage allows for is not an arrival.
				if a := ts - wallToLine; a <= now && a > now-int64(lateAllowance) {
					at = a
				} else {
					d.c.badStamps.Add(1)
				}
			}
			// Arrivals are queued in order: time never runs back for the queue.
			at = max(at, d.lastAt)
			d.lastAt = at
			d.rx.armRecv(i)
			if trunc || !forwardable(frame, &d.inPort, &d.outPort) {
				d.c.ignored.Add(1)
				continue
			}
			route(frame, &d.outPort)
			d.path.Push(at, frame)
		}
		if n < rxBatch {
			return nil
		}
	}
	return nil
}

// release sends the frames that are due, in batches, and returns how long to wait until
// the next is due (idleWait when none is held).
func (d *direction) release() time.Duration {
	for {
		now := d.l.now()
		k := d.path.Due(now, txBatch)
		if k == 0 {
			due, ok := d.path.Next()
			if !ok {
				return idleWait
			}
			return time.Duration(due - now)
		}
		for i := range k {
			f, _ := d.path.At(i)
			d.tx.set(i, f)
		}
		sent, err := sendmmsg(d.out, d.tx, k)
		t := d.l.now()
		for i := range sent {
			f, due := d.path.At(i)
			d.c.forwardedBytes.Add(uint64(len(f)))
			switch f[ipProtoOff] { // forwardable checked the header's length
			case protoTCP:
				d.c.forwardedTCP.Add(uint64(len(f)))
			case protoUDP:
				d.c.forwardedUDP.Add(uint64(len(f)))
			}
			late := t - due
			d.c.late[lateBucket(late)].Add(1)
			if late > 0 {
				d.c.lateSum.Add(uint64(late))
				if uint64(late) > d.c.lateMax.Load() {
					d.c.lateMax.Store(uint64(late))
				}
			}
		}
		d.c.forwarded.Add(uint64(sent))
		d.path.Release(sent)
		switch {
		case err == unix.EAGAIN:
			return retryWait
		case err != nil:
			// The egress refused the head frame (the peer's backlog is full, the link is
			// down): drop it, as a router's full transmit queue would.
			d.c.sendErrors.Add(1)
			d.path.Release(1)
		}
	}
}

// publish copies the path's counters to the published ones.
func (d *direction) publish() {
	p := d.path
	d.c.queued.Store(p.Accepted)
	d.c.dropped.Store(p.Dropped)
	d.c.overflow.Store(p.Overflow)
	f, b := p.Held()
	d.c.held.Store(uint64(f))
	d.c.heldBytes.Store(uint64(b))
	d.c.backlog.Store(uint64(p.Backlog(d.l.now())))
	d.c.maxBacklog.Store(uint64(p.MaxBacklog))
}
