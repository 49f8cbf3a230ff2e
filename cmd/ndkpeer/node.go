//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/xdpndk/xdpndk/xdp/xsk"

	"golang.org/x/sys/unix"

	"github.com/xdpndk/xdpndk/bpf"
	"github.com/xdpndk/xdpndk/cmd/ndkpeer/internal/proto"
	"github.com/xdpndk/xdpndk/internal/pcaplink"
	"github.com/xdpndk/xdpndk/internal/plumb"
	"github.com/xdpndk/xdpndk/ndk"
	"github.com/xdpndk/xdpndk/xdp"
)

// adapterConfig is what openNode opens.
type adapterConfig struct {
	iface         string
	port, service uint16
	queue         int          // the one queue served (with steer), or -1: every RX queue
	steer         xdp.Steering // how our port reaches the queue served
	progress      ndk.Progress
	attach        bpf.Mode
	bind          xsk.BindMode
	busyPoll      time.Duration
	heap          int // UMEM heap for test buffers, bytes
	packLimit     int // ndk.Options.PackLimit
	engines       int // ndk.Options.Engines (0: ndk's default)
	// log, if set, receives the adapter's events too (ndk.Options.Logger): serve's log.
	log *slog.Logger

	pcap pcapConfig // --pcap (pcap.go)
}

// UMEM geometry of ndkpeer's adapters: xdp's defaults, frames of 4 KiB, as many per queue
// as xdp.DefaultQueueSizes gives for the queues served.
const (
	umemFrameSize = 4096
)

// umemBytes is how much memory an adapter serving queues queues with a heap of heap bytes
// pins.
func umemBytes(queues, heap int) uint64 {
	frames, _ := xdp.DefaultQueueSizes(queues)
	return uint64(queues*frames)*umemFrameSize + uint64(heap+umemFrameSize-1)/umemFrameSize*umemFrameSize
}

// node is an open adapter and what it got from the kernel.
type node struct {
	cfg    adapterConfig
	a      *ndk.Adapter
	dev    *xdp.Device
	ifi    *net.Interface
	queues int        // RX queues of the interface
	mode   proto.Mode // what the adapter runs with
	pages  string     // what backs the UMEM
	notes  []string   // what the kernel refused or limited on the way: never a silent fallback

	capture *pcaplink.Capture // --pcap (pcap.go): closed after the adapter
}

// openNode checks the host (privileges, interface, memlock, a free XDP hook) and opens an
// adapter. Its errors are cliErrors with the exit code of the problem.
func openNode(cfg adapterConfig) (*node, error) {
	if err := checkPrivileges(); err != nil {
		return nil, err
	}
	queues := rxQueues(cfg.iface)
	served := queues
	if cfg.queue >= 0 {
		served = 1
	}
	if err := checkMemlock(umemBytes(served, cfg.heap)); err != nil {
		return nil, err
	}
	ifi, err := lookupInterface(cfg.iface)
	if err != nil {
		return nil, err
	}
	n := &node{cfg: cfg, ifi: ifi, queues: queues}
	if cfg.queue >= n.queues {
		return nil, fail(exitUsage, "--queue %d: %s has %d RX queue(s), numbered from 0", cfg.queue, cfg.iface, n.queues)
	}
	if err := checkXDPFree(cfg.iface); err != nil {
		return nil, err
	}
	rec := &logRecorder{}
	var h slog.Handler = rec
	if cfg.log != nil {
		h = teeHandler{rec, cfg.log.Handler()}
	}
	xc := xdp.Config{
		Interface: cfg.iface, Port: cfg.port, Steering: cfg.steer,
		FrameSize: umemFrameSize, HeapSize: cfg.heap,
		Attach: cfg.attach, Bind: cfg.bind, BusyPoll: cfg.busyPoll, Logger: slog.New(h),
	}
	if cfg.queue >= 0 {
		xc.Queues = []int{cfg.queue}
	}
	opts := ndk.DefaultOptions()
	opts.Progress = cfg.progress
	opts.PackLimit = cfg.packLimit
	opts.Engines = cfg.engines
	if err := n.startCapture(&opts); err != nil {
		return nil, err
	}
	if cfg.log != nil {
		opts.Logger = xc.Logger // the adapter's events too (xdp.Open's then come through it)
	}
	a, err := ndk.Open(xc, opts)
	if err != nil {
		n.stopCapture()
		return nil, openError(err, cfg)
	}
	n.a, n.dev = a, a.Device()
	m := n.dev.Mode()
	n.pages = m.Pages.String()
	n.mode = proto.Mode{
		Attach: proto.AttachGeneric, Progress: progressOf(cfg.progress),
		ZeroCopy: m.Socket.ZeroCopy, MultiBuffer: m.Socket.MultiBuffer, NeedWakeup: m.Socket.NeedWakeup,
		BusyPoll: m.Socket.BusyPoll, MTU: uint32(ifi.MTU), MaxPayload: uint32(plumb.Link(a).MaxPayload()),
		Served: uint16(min(len(n.dev.Queues()), 65535)), Queues: uint16(min(n.dev.InterfaceQueues(), 65535)),
	}
	if m.Attach == bpf.AttachNative {
		n.mode.Attach = proto.AttachNative
	}
	if cfg.attach == bpf.AttachAuto && m.Attach == bpf.AttachGeneric {
		n.notes = append(n.notes, "native XDP refused by the driver: the program runs in generic (SKB) mode, which is slower")
	}
	n.notes = append(n.notes, rec.notes()...)
	if !m.Socket.NeedWakeup {
		n.notes = append(n.notes, "need_wakeup not granted: every transmit batch makes a system call")
	}
	if cfg.busyPoll > 0 && !m.Socket.BusyPoll {
		n.notes = append(n.notes, "busy polling (--busy-poll) refused by the kernel: the socket does not busy-poll")
	}
	if cfg.queue >= 0 && n.dev.InterfaceQueues() > 1 {
		n.notes = append(n.notes, fmt.Sprintf("only queue %d of %d is served: our port reaches it by %v steering", cfg.queue, n.dev.InterfaceQueues(), cfg.steer))
	}
	return n, nil
}

// close closes the adapter (which detaches the XDP program and frees the UMEM).
func (n *node) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = n.a.Close(ctx)
	n.stopCapture()
}

// openError explains why ndk.Open failed.
func openError(err error, cfg adapterConfig) error {
	var busy *xdp.BusyError
	switch {
	case errors.As(err, &busy):
		// The device names who holds the interface: say that, and what to do.
		return failWrap(exitBusy, err, "%v: stop that process, or use another interface", busy)
	case errors.Is(err, unix.EBUSY), errors.Is(err, unix.EEXIST):
		if e := checkXDPFree(cfg.iface); e != nil {
			return e
		}
		return failWrap(exitBusy, err, "queue %d of %s is busy: another AF_XDP socket (another xdpndk process?) is bound to it: stop that process or use another --queue or interface (%v)", cfg.queue, cfg.iface, err)
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		if strings.Contains(err.Error(), "mlock") {
			return failWrap(exitMemlock, err, "the kernel refused to pin the UMEM (%v): raise RLIMIT_MEMLOCK (ulimit -l unlimited) or grant CAP_IPC_LOCK", err)
		}
		return failWrap(exitPrivilege, err, "permission denied opening the adapter on %s (%v): run it as root", cfg.iface, err)
	case errors.Is(err, unix.ENOMEM) && strings.Contains(err.Error(), "mlock"):
		return failWrap(exitMemlock, err, "the kernel refused to pin the UMEM (%v): raise RLIMIT_MEMLOCK (ulimit -l unlimited) or grant CAP_IPC_LOCK", err)
	}
	return fmt.Errorf("open the adapter on %s: %w", cfg.iface, err)
}

// progressOf names a progress mode for the protocol.
func progressOf(p ndk.Progress) proto.Progress {
	switch p {
	case ndk.ProgressInline:
		return proto.ProgressInline
	case ndk.ProgressBusy:
		return proto.ProgressBusy
	}
	return proto.ProgressAdaptive
}

// modeLine describes a side's mode in one line: what every result's header states.
func modeLine(m proto.Mode) string {
	onOff := func(b bool) string {
		if b {
			return "on"
		}
		return "off"
	}
	zc := "copy mode (no zero-copy)"
	if m.ZeroCopy {
		zc = "zero-copy"
	}
	return fmt.Sprintf("XDP %s, AF_XDP %s, multi-buffer %s, need_wakeup %s, busy-poll %s, MTU %d (payload %d), queues served %d of %d, progress %s",
		m.Attach, zc, onOff(m.MultiBuffer), onOff(m.NeedWakeup), onOff(m.BusyPoll), m.MTU, m.MaxPayload, m.Served, m.Queues, m.Progress)
}

// modeJSON is a side's mode in JSON documents.
type modeJSON struct {
	XDP         string   `json:"xdp"`
	ZeroCopy    bool     `json:"zero_copy"`
	MultiBuffer bool     `json:"multi_buffer"`
	NeedWakeup  bool     `json:"need_wakeup"`
	BusyPoll    bool     `json:"busy_poll"`
	MTU         uint32   `json:"mtu"`
	MaxPayload  uint32   `json:"max_payload"`
	Served      uint16   `json:"queues_served"`
	Queues      uint16   `json:"queues"`
	Progress    string   `json:"progress"`
	Pages       string   `json:"pages,omitempty"`
	Interface   string   `json:"interface,omitempty"`
	Address     string   `json:"address,omitempty"`
	Notes       []string `json:"notes,omitempty"`
}

func toModeJSON(m proto.Mode) modeJSON {
	return modeJSON{XDP: m.Attach.String(), ZeroCopy: m.ZeroCopy, MultiBuffer: m.MultiBuffer, NeedWakeup: m.NeedWakeup,
		BusyPoll: m.BusyPoll, MTU: m.MTU, MaxPayload: m.MaxPayload, Served: m.Served, Queues: m.Queues, Progress: m.Progress.String()}
}

// localJSON is this node's mode for JSON documents.
func (n *node) localJSON() modeJSON {
	j := toModeJSON(n.mode)
	j.Pages, j.Interface, j.Address, j.Notes = n.pages, n.cfg.iface, n.a.LocalAddr().String(), n.notes
	return j
}

// logRecorder is a slog.Handler that keeps what xdp.Open reports about refusals and
// limits, so that the header can state them.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	var note string
	switch rec.Message {
	case "xdp bind fallback":
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "refused" {
				note = "the kernel refused " + a.Value.String()
			}
			return true
		})
	case "xdp payload limited by the zero-copy segment limit", "xdp zero-copy segment limit not reported; assuming":
		var kv []string
		rec.Attrs(func(a slog.Attr) bool { kv = append(kv, a.Key+"="+a.Value.String()); return true })
		note = rec.Message + " (" + strings.Join(kv, ", ") + ")"
	}
	if note != "" {
		r.mu.Lock()
		r.lines = append(r.lines, note)
		r.mu.Unlock()
	}
	return nil
}

func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }

func (r *logRecorder) WithGroup(string) slog.Handler { return r }

// teeHandler hands every record to each of its handlers that takes its level.
type teeHandler []slog.Handler

func (t teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	for _, h := range t {
		if h.Enabled(ctx, l) {
			return true
		}
	}
	return false
}

func (t teeHandler) Handle(ctx context.Context, rec slog.Record) error {
	var err error
	for _, h := range t {
		if h.Enabled(ctx, rec.Level) {
			err = errors.Join(err, h.Handle(ctx, rec.Clone()))
		}
	}
	return err
}

func (t teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	u := make(teeHandler, len(t))
	for i, h := range t {
		u[i] = h.WithAttrs(as)
	}
	return u
}

func (t teeHandler) WithGroup(name string) slog.Handler {
	u := make(teeHandler, len(t))
	for i, h := range t {
		u[i] = h.WithGroup(name)
	}
	return u
}

func (r *logRecorder) notes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}
