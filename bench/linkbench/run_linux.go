//go:build linux

package linkbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/internal/testbed"
)

// BedOptions returns the test bed options the benchmark runs on, with name as the tag in
// the namespace names: MTU BedMTU, two queues per veth end (our link binds queue 0, the
// asavie/xdp socket queue 1), and static neighbour entries so that no ARP traffic runs
// during a measurement.
func BedOptions(name string) testbed.Options {
	return testbed.Options{MTU: BedMTU, Queues: 2, Name: name, StaticNeighbors: true}
}

// Run creates a test bed (BedOptions("bench")), measures every selected system on it, and
// removes the bed, also when ctx is cancelled or a measurement fails. It needs root.
//
// It returns the results gathered even when err is not nil: a failed system is recorded in
// the header's notes and the others are still measured.
func Run(ctx context.Context, opts Options) (*Results, error) {
	if _, err := opts.normalize(); err != nil {
		return nil, err
	}
	return testbed.With(BedOptions("bench"), func(bed *testbed.Bed) (*Results, error) { return RunBed(ctx, bed, opts) })
}

// RunBed measures every selected system on bed, which the caller owns and closes. The bed
// must have an MTU of at least the largest size and, for the asavie system, two queues per
// veth end (see BedOptions); no XDP program may be attached to it. Everything RunBed opens
// on the bed is closed before it returns, except that the asavie/xdp sockets leave their
// ring mappings behind (see the package documentation): their kernel sockets go away with
// the bed's veth pair or when the process exits.
//
// Each run measures the systems one after the other (one-way at every size, then
// ping-pong), so that the runs of different systems interleave in time. A cancelled ctx
// stops the measurement in progress within milliseconds.
func RunBed(ctx context.Context, bed *testbed.Bed, opts Options) (*Results, error) {
	o, err := opts.normalize()
	if err != nil {
		return nil, err
	}
	res := &Results{Header: machineHeader()}
	res.Header.MTU = bed.MTU()
	res.Header.Config = Config{
		DurationMS: o.Duration.Milliseconds(), WarmupMS: o.Warmup.Milliseconds(), Runs: o.Runs,
		PingPongN: o.PingPongN, PingPongWarmup: o.PingPongWarmup, Sizes: o.Sizes, Systems: o.Systems,
		Batch: o.Batch, AsavieQueue: o.AsavieQueue,
	}
	res.Header.Notes = append(res.Header.Notes, definitionNotes(o)...)
	for _, s := range o.Sizes {
		if s > res.Header.MTU {
			return nil, fmt.Errorf("%w: size %d above the bed's MTU %d", ErrInvalidOptions, s, res.Header.MTU)
		}
	}
	queues, err := queueCount(bed.B)
	if err != nil {
		return nil, err
	}
	res.Header.Queues = queues
	r := &runner{bed: bed, o: o, res: res, col: newCollector(), queues: queues}
	defer r.closeAsavie()
	var errs []error
	for run := 0; run < o.Runs; run++ {
		for _, sys := range o.Systems {
			err := ctx.Err()
			if err == nil {
				err = r.turn(ctx, run, sys)
			}
			if ctx.Err() != nil {
				res.Records = r.col.records()
				return res, fmt.Errorf("linkbench interrupted: %w", ctx.Err())
			}
			if err != nil {
				err = fmt.Errorf("%s, run %d: %w", sys, run+1, err)
				res.Header.Notes = append(res.Header.Notes, report.FailedNote(err))
				errs = append(errs, err)
			}
		}
	}
	if ap := r.asavie; ap != nil {
		res.Header.Notes = append(res.Header.Notes, ap.notes()...)
	}
	res.Records = r.col.records()
	return res, errors.Join(errs...)
}

// runner holds the state of one RunBed.
type runner struct {
	bed    *testbed.Bed
	o      Options
	res    *Results
	col    *collector
	queues int
	asavie asavieRun // opened on first use, kept for the whole run
}

// asavieRun is the asavie/xdp baseline open for a whole run (*asaviePair where the
// library builds): a pair that is attached for each turn and released at the end.
type asavieRun interface {
	pair
	// attach attaches the steering programs for a turn; close detaches them.
	attach() error
	// release closes the programs and the sockets.
	release()
	// notes are the header notes about this system.
	notes() []string
}

// turn measures one system once: opens it, checks it carries datagrams both ways, runs
// the one-way sizes and the ping-pong, and closes it.
func (r *runner) turn(ctx context.Context, run int, sys string) (err error) {
	p, err := r.open(sys)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := p.close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close: %w", cerr))
		}
	}()
	r.res.Header.Modes[sys] = p.mode()
	maxSize, why := p.maxSize()
	if err := checkPair(p, min(maxSize, r.res.Header.MTU)); err != nil {
		return err
	}
	for _, size := range r.o.Sizes {
		if size > maxSize {
			r.col.unsupported(BenchOneWay, sys, OpSend, size, why)
			r.progress("run %d %-16s one-way %5d B: unsupported (%s)", run+1, sys, size, why)
			continue
		}
		m, err := oneWay(ctx, p, size, r.o)
		if err != nil {
			return fmt.Errorf("one-way %d B: %w", size, err)
		}
		r.col.add(BenchOneWay, sys, OpSend, size, MetricPPS, UnitPPS, m.rxPPS)
		r.col.add(BenchOneWay, sys, OpSend, size, MetricGbps, UnitGbps, m.rxGbps)
		r.col.add(BenchOneWay, sys, OpSend, size, MetricTxPPS, UnitPPS, m.txPPS)
		r.col.add(BenchOneWay, sys, OpSend, size, MetricLoss, UnitPercent, m.lossPct)
		if m.kicksOK {
			r.col.add(BenchOneWay, sys, OpSend, size, MetricKicksPerPkt, UnitRatio, m.kicksPerPkt)
		}
		r.col.add(BenchOneWay, sys, OpSend, size, MetricAllocs, UnitObjects, float64(m.allocs))
		if m.cpuOK {
			r.col.add(BenchOneWay, sys, OpSend, size, MetricCPUMsg, UnitCPUMsg, m.cpuUSPerPkt)
			r.col.add(BenchOneWay, sys, OpSend, size, MetricCores, UnitCores, m.cores)
		}
		if m.countBound {
			r.res.Header.Notes = append(r.res.Header.Notes, fmt.Sprintf(
				"%s run %d one-way %d B: the sender hit the packet-count bound before the window ended", sys, run+1, size))
		}
		r.progress("run %d %-16s one-way %5d B: rx %.3f Mpps %.2f Gbit/s, tx %.3f Mpps, loss %.2f%%",
			run+1, sys, size, m.rxPPS/1e6, m.rxGbps, m.txPPS/1e6, m.lossPct)
	}
	if r.o.PingPongN > 0 {
		st, lost, cpu, err := pingPong(ctx, p, r.o)
		if err != nil {
			return fmt.Errorf("ping-pong: %w", err)
		}
		if st.N == 0 {
			return fmt.Errorf("ping-pong: no round trip completed (%d lost)", lost)
		}
		r.col.add(BenchPingPong, sys, OpRTT, PingSize, MetricRTTP50, UnitMicros, st.P50)
		r.col.add(BenchPingPong, sys, OpRTT, PingSize, MetricRTTP90, UnitMicros, st.P90)
		r.col.add(BenchPingPong, sys, OpRTT, PingSize, MetricRTTP99, UnitMicros, st.P99)
		r.col.add(BenchPingPong, sys, OpRTT, PingSize, MetricRTTMean, UnitMicros, st.Mean)
		r.col.add(BenchPingPong, sys, OpRTT, PingSize, MetricRTTLost, UnitCount, float64(lost))
		if cpu.ok {
			r.col.add(BenchPingPong, sys, OpRTT, PingSize, MetricCPUMsg, UnitCPUMsg, cpu.usPerMsg)
			r.col.add(BenchPingPong, sys, OpRTT, PingSize, MetricCores, UnitCores, cpu.cores)
		}
		r.progress("run %d %-16s ping-pong %d B: p50 %.2f us, p99 %.2f us, mean %.2f us (%d samples, %d lost)",
			run+1, sys, PingSize, st.P50, st.P99, st.Mean, st.N, lost)
	}
	return nil
}

// open sets a system up on the bed for one turn.
func (r *runner) open(sys string) (pair, error) {
	switch sys {
	case SystemXDPNDK, SystemXDPNDKNoWakeup:
		return openXDPNDK(r.bed, sys, sys == SystemXDPNDKNoWakeup, r.o.Attach, r.o.Logger)
	case SystemAsavie:
		if r.queues <= r.o.AsavieQueue {
			return nil, fmt.Errorf("asavie/xdp needs its own queue: the bed has %d queue(s) per veth end, queue %d is asked for (see BedOptions and Options.AsavieQueue)", r.queues, r.o.AsavieQueue)
		}
		if r.asavie == nil {
			ap, err := openAsavie(r.bed, r.o.AsavieQueue, r.o.Attach)
			if err != nil {
				return nil, err
			}
			r.asavie = ap
		}
		if err := r.asavie.attach(); err != nil {
			return nil, err
		}
		return r.asavie, nil
	case SystemKernelUDP:
		return openKernelUDP(r.bed)
	}
	return nil, fmt.Errorf("unknown system %q", sys)
}

func (r *runner) closeAsavie() {
	if r.asavie != nil {
		r.asavie.release()
		r.asavie = nil
	}
}

func (r *runner) progress(format string, args ...any) {
	if r.o.Progress != nil {
		fmt.Fprintf(r.o.Progress, format+"\n", args...)
	}
}

// definitionNotes are the header notes that define the figures.
func definitionNotes(o Options) []string {
	return []string{
		"size is the IP packet length in bytes: UDP payload = size - 28, Ethernet frame = size + 14",
		fmt.Sprintf("one-way: A sends size-byte datagrams in batches of %d for %v after a %v warm-up (bounded also by packet count); "+
			"msg_per_s and gbit_per_s are what B received in that window (gbit_per_s counts IP packet bytes); tx_msg_per_s is what A handed to the link; "+
			"loss_pct is 1 - received/sent over the whole measurement after B drained", o.Batch, o.Duration, o.Warmup),
		fmt.Sprintf("pingpong: %d-byte IP packets, A stamps a monotonic clock before sending and after seeing the echo; "+
			"AF_XDP systems spin on the RX ring, kernel-udp blocks in ReadFrom; the first %d of %d round trips are warm-up; "+
			"a round trip without echo within 100 ms counts as lost", PingSize, o.PingPongWarmup, o.PingPongN),
		fmt.Sprintf("value is the median of %d runs, systems interleaved within each run; runs holds every run", o.Runs),
		"kicks_per_msg: TX system calls per datagram sent (raw-xdpndk: Link.Stats().Kicks; raw-asavie: Transmit calls, each one sendto); kernel-udp makes one sendto per datagram",
		"allocs: heap objects the whole process allocated during the measured window (runtime/metrics /gc/heap/allocs:objects)",
		"cpu_us_per_msg and cpu_cores: the process's user+system CPU (getrusage; both hosts run in this process, their loops and the kernel work of their system calls) over the one-way window per datagram B received, and over the whole ping-pong (warm-up included) per datagram each way; the AF_XDP systems' loops spin, a whole core per side whatever the rate",
		"senders and the spinning AF_XDP receivers, pingers and echoes run on goroutines locked to their OS thread (runtime.LockOSThread); " +
			"kernel-udp's blocking receiver, pinger and echo do not, since waking a locked goroutine from the netpoller costs a thread hand-off " +
			"(it made kernel-udp's 64 B RTT p50 about 130 us instead of about 22 us here)",
	}
}

// queueCount returns the number of RX queues of h's veth end.
func queueCount(h *testbed.Host) (int, error) {
	n := 0
	err := h.Do(func() error {
		l, err := netlink.LinkByName(h.Ifname)
		if err != nil {
			return err
		}
		n = l.Attrs().NumRxQueues
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("read queue count of %s: %w", h.Ifname, err)
	}
	return max(n, 1), nil
}

// pair is one system's endpoints on both hosts of the bed: side A (the sender and pinger)
// and side B (the receiver and echo). The hot-path methods run on their own locked
// goroutines: send and ping on A, receive and echo on B; at most one method per side runs
// at a time.
type pair interface {
	// mode describes what the system runs with, for the header.
	mode() string
	// maxSize returns the largest IP packet the system can carry on the bed and, if that
	// is below the bed's MTU, why.
	maxSize() (int, string)
	// xmit sends one datagram with the given UDP payload from side (0 = A, 1 = B) to the
	// other side. Control path: it may allocate and block (bounded).
	xmit(side int, payload []byte) error
	// recv waits up to timeout for one datagram on side and copies its UDP payload into
	// buf; it returns the payload length and the sender. Control path.
	recv(side int, buf []byte, timeout time.Duration) (int, error)
	// send runs A's one-way sender until f says stop.
	send(f *flow) error
	// receive runs B's one-way receiver until f says stop.
	receive(f *flow) error
	// ping runs A's side of the ping-pong.
	ping(pg *pinger) error
	// echo runs B's side of the ping-pong until f says stop.
	echo(f *flow) error
	// unblock makes a receive or echo blocked in a system call look at f's stop flag.
	unblock()
	// blocks reports whether receive, echo and ping block in the Go netpoller rather than
	// spin. Those run on goroutines not locked to a thread: waking a locked goroutine
	// takes a thread hand-off, which here multiplied kernel UDP's round-trip time by six.
	blocks() bool
	// kicks returns the TX system calls A's side has made so far, if the system counts
	// them.
	kicks() (uint64, bool)
	// close ends the system's turn on the bed.
	close() error
}

// counter counts datagrams and payload bytes; it fills a cache line so that the sender's
// and the receiver's counters never share one.
type counter struct {
	pkts, bytes atomic.Uint64
	_           [48]byte
}

func (c *counter) add(pkts, bytes int) {
	c.pkts.Add(uint64(pkts))
	c.bytes.Add(uint64(bytes))
}

// flow is the shared state of one measurement: what to send, when to stop, and the
// counters both sides publish once per batch.
type flow struct {
	size     int    // IP packet length
	payload  []byte // UDP payload of every datagram, size - IPUDPHeaderLen bytes
	batch    int
	maxPkts  uint64 // bound on datagrams sent
	deadline int64  // report.Now() after which every loop stops by itself
	stopTx   atomic.Bool
	stopRx   atomic.Bool
	_        [48]byte
	tx, rx   counter
}

func newFlow(size int, o Options, bound time.Duration) *flow {
	f := &flow{size: size, batch: o.Batch, maxPkts: o.MaxPackets, deadline: report.Now() + int64(bound)}
	f.payload = make([]byte, size-IPUDPHeaderLen)
	fillPattern(f.payload, 0)
	return f
}

// stopping reports whether a loop should end: told to, or past the time bound.
func (f *flow) stopping(stop *atomic.Bool) bool {
	return stop.Load() || report.Now() > f.deadline
}

// idleDone reports whether a receive loop that found nothing on iteration it should end:
// told to, or (checked every 1024 iterations, to keep the clock off the spin) past the
// time bound.
func (f *flow) idleDone(it int) bool {
	return f.stopRx.Load() || (it&1023 == 0 && report.Now() > f.deadline)
}

// pinger is A's state in a ping-pong measurement.
type pinger struct {
	n        int           // round trips to make
	timeout  time.Duration // per round trip
	deadline int64         // report.Now() after which no round trip starts
	stop     atomic.Bool
	rtts     []int64 // nanoseconds, preallocated to n
	lost     int
}

// record ends one round trip started at t0: its time if the echo came back, else a loss.
func (pg *pinger) record(got bool, t0 int64) {
	if got {
		pg.rtts = append(pg.rtts, report.Now()-t0)
	} else {
		pg.lost++
	}
}

// pingTimeout is how long A waits for one echo before counting the round trip as lost.
const pingTimeout = 100 * time.Millisecond

// checkPair sends datagrams of 64 bytes, 1500 bytes and maxSize each way and checks that
// they arrive intact from the right peer. It also makes every system resolve its next hop
// before anything is timed.
func checkPair(p pair, maxSize int) error {
	sizes := []int{64, min(1500, maxSize), maxSize}
	buf := make([]byte, 65536)
	seq := uint64(1 << 40)
	for side := range 2 {
		for _, size := range sizes {
			seq++
			want := make([]byte, size-IPUDPHeaderLen)
			fillPattern(want, seq)
			if err := p.xmit(side, want); err != nil {
				return fmt.Errorf("check: send %d B from %c: %w", size, "AB"[side], err)
			}
			deadline := time.Now().Add(2 * time.Second)
			for {
				left := time.Until(deadline)
				if left <= 0 {
					return fmt.Errorf("check: %d B datagram from %c did not arrive within 2 s", size, "AB"[side])
				}
				n, err := p.recv(1-side, buf, left)
				if err != nil {
					return fmt.Errorf("check: receive %d B on %c: %w", size, "AB"[1-side], err)
				}
				if seqOf(buf[:n]) != seq {
					continue // a straggler of an earlier measurement
				}
				if !bytes.Equal(buf[:n], want) {
					return fmt.Errorf("check: %d B datagram from %c arrived with %d payload bytes that differ", size, "AB"[side], n)
				}
				break
			}
		}
	}
	return nil
}

// oneWayResult is one one-way measurement.
type oneWayResult struct {
	rxPPS, rxGbps, txPPS, lossPct float64
	kicksPerPkt                   float64
	kicksOK                       bool
	allocs                        uint64
	countBound                    bool
	// the process's CPU over the window: per datagram B received, in µs, and in cores
	cpuUSPerPkt, cores float64
	cpuOK              bool
}

// snapshot is the counters at one instant.
type snapshot struct {
	t                      int64
	txPkts, rxPkts, rxByte uint64
	allocs                 uint64
	cpu                    time.Duration // the process's user+system CPU time; -1 if unknown
}

func take(f *flow) snapshot {
	allocs := report.HeapObjects()
	cpu := processCPU()
	return snapshot{
		t: report.Now(), txPkts: f.tx.pkts.Load(), rxPkts: f.rx.pkts.Load(), rxByte: f.rx.bytes.Load(), allocs: allocs, cpu: cpu,
	}
}

// processCPU returns the user and system CPU time of the whole process (getrusage
// RUSAGE_SELF: every thread, so both hosts' loops and the kernel work of their system
// calls), or -1 if it cannot be read.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuFigures is the process's CPU over a measurement.
type cpuFigures struct {
	usPerMsg, cores float64
	ok              bool
}

// cpuOver returns the CPU from c0 to c1 over wall nanoseconds, per message.
func cpuOver(c0, c1 time.Duration, wall int64, msgs uint64) cpuFigures {
	if c0 < 0 || c1 < c0 || wall <= 0 || msgs == 0 {
		return cpuFigures{}
	}
	d := float64(c1 - c0)
	return cpuFigures{usPerMsg: d / 1e3 / float64(msgs), cores: d / float64(wall), ok: true}
}

// oneWay runs one one-way measurement of size-byte datagrams from A to B.
func oneWay(ctx context.Context, p pair, size int, o Options) (res oneWayResult, err error) {
	f := newFlow(size, o, o.Warmup+o.Duration+5*time.Second)
	k0, kicksOK := p.kicks()
	rxDone := report.Worker(!p.blocks(), func() error { return p.receive(f) })
	txDone := report.Worker(true, func() error { return p.send(f) })
	var txErr, rxErr error
	txEnded, rxEnded := false, false
	defer func() {
		// However we leave, both loops have ended.
		f.stopTx.Store(true)
		if !txEnded {
			txErr = <-txDone
		}
		f.stopRx.Store(true)
		p.unblock()
		if !rxEnded {
			rxErr = <-rxDone
		}
		if err == nil && txErr != nil {
			err = fmt.Errorf("sender: %w", txErr)
		}
		if err == nil && rxErr != nil {
			err = fmt.Errorf("receiver: %w", rxErr)
		}
	}()

	wait := func(d time.Duration) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case txErr = <-txDone:
			txEnded = true
			if txErr != nil {
				return fmt.Errorf("sender: %w", txErr)
			}
			return nil // count bound reached: measure up to now
		case rxErr = <-rxDone:
			rxEnded = true
			if rxErr != nil {
				return fmt.Errorf("receiver: %w", rxErr)
			}
			return errors.New("receiver ended early")
		case <-t.C:
			return nil
		}
	}
	if err := wait(o.Warmup); err != nil {
		return res, err
	}
	if txEnded {
		return res, errors.New("sender ended during warm-up (count bound too low?)")
	}
	s0 := take(f)
	if err := wait(o.Duration); err != nil {
		return res, err
	}
	s1 := take(f)
	res.countBound = txEnded
	f.stopTx.Store(true)
	if !txEnded {
		txErr, txEnded = <-txDone, true
		if txErr != nil {
			return res, fmt.Errorf("sender: %w", txErr)
		}
	}
	k1, _ := p.kicks()

	// Let B drain what is in flight: until it has everything A sent, or its count stops
	// moving for 30 ms, for at most a second.
	sent := f.tx.pkts.Load()
	last, still := f.rx.pkts.Load(), 0
	for t := 0; t < 100 && last < sent && still < 3; t++ {
		time.Sleep(10 * time.Millisecond)
		if n := f.rx.pkts.Load(); n == last {
			still++
		} else {
			last, still = n, 0
		}
	}
	received := f.rx.pkts.Load()

	secs := float64(s1.t-s0.t) / 1e9
	dRx := float64(s1.rxPkts - s0.rxPkts)
	dBytes := float64(s1.rxByte-s0.rxByte) + IPUDPHeaderLen*dRx
	res.rxPPS = dRx / secs
	res.rxGbps = dBytes * 8 / secs / 1e9
	res.txPPS = float64(s1.txPkts-s0.txPkts) / secs
	if sent > 0 && received < sent {
		res.lossPct = 100 * float64(sent-received) / float64(sent)
	}
	if kicksOK && sent > 0 {
		res.kicksOK = true
		res.kicksPerPkt = float64(k1-k0) / float64(sent)
	}
	res.allocs = s1.allocs - s0.allocs
	if c := cpuOver(s0.cpu, s1.cpu, s1.t-s0.t, s1.rxPkts-s0.rxPkts); c.ok {
		res.cpuUSPerPkt, res.cores, res.cpuOK = c.usPerMsg, c.cores, true
	}
	if dRx == 0 {
		return res, fmt.Errorf("the receiver on B got nothing in the window (A sent %d)", s1.txPkts-s0.txPkts)
	}
	return res, nil
}

// pingPong runs one ping-pong measurement and returns the statistics of the round trips
// after the warm-up ones, the number of round trips lost, and the process's CPU over the
// whole ping-pong (warm-up included) per datagram each way.
func pingPong(ctx context.Context, p pair, o Options) (RTTStats, int, cpuFigures, error) {
	f := newFlow(PingSize, o, o.PingPongTimeout+5*time.Second)
	pg := &pinger{
		n: o.PingPongN, timeout: pingTimeout, deadline: report.Now() + int64(o.PingPongTimeout),
		rtts: make([]int64, 0, o.PingPongN),
	}
	t0, c0 := report.Now(), processCPU()
	echoDone := report.Worker(!p.blocks(), func() error { return p.echo(f) })
	pingDone := report.Worker(!p.blocks(), func() error { return p.ping(pg) })
	var pingErr error
	select {
	case pingErr = <-pingDone:
	case <-ctx.Done():
		pg.stop.Store(true)
		<-pingDone
		pingErr = ctx.Err()
	}
	t1, c1 := report.Now(), processCPU()
	f.stopRx.Store(true)
	p.unblock()
	echoErr := <-echoDone
	if pingErr != nil {
		return RTTStats{}, pg.lost, cpuFigures{}, fmt.Errorf("pinger: %w", pingErr)
	}
	if echoErr != nil {
		return RTTStats{}, pg.lost, cpuFigures{}, fmt.Errorf("echo: %w", echoErr)
	}
	cpu := cpuOver(c0, c1, t1-t0, 2*uint64(len(pg.rtts)))
	warm := min(o.PingPongWarmup, len(pg.rtts)/2)
	return report.Summarize(pg.rtts[warm:]), pg.lost, cpu, nil
}
