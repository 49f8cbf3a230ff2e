//go:build linux

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/xdpndk/xdpndk/xdp/xsk"

	"github.com/xdpndk/xdpndk/bpf"
	"github.com/xdpndk/xdpndk/ndk"
	"github.com/xdpndk/xdpndk/xdp"
)

// adapterFlags are the options of every command that opens an adapter.
type adapterFlags struct {
	iface    string
	port     uint
	queue    int
	steer    string
	service  uint
	progress string
	xdpMode  string
	bindMode string
	busyPoll time.Duration
	pack     int
	engines  int
	pcap     pcapFlags // pcap.go
}

// define adds the adapter options to fs; progress is the default progress mode.
func (f *adapterFlags) define(fs *flag.FlagSet, progress string) {
	fs.StringVar(&f.iface, "i", "", "the `IFACE` to run on (required)")
	fs.StringVar(&f.iface, "interface", "", "same as -i")
	fs.UintVar(&f.port, "port", xdp.DefaultPort, "our UDP `PORT`, the same on both hosts")
	fs.UintVar(&f.service, "service", ServiceID, "the NDK `SERVICE` the server listens on")
	fs.IntVar(&f.queue, "queue", -1, "serve only `QUEUE` (with --steer); default: every RX queue of the interface")
	fs.StringVar(&f.steer, "steer", "", "with --queue, how our port reaches the queue: `HOW` is ntuple (ndkpeer installs an ethtool -N rule) or external (you steer it)")
	fs.StringVar(&f.progress, "progress", progress, "progress `MODE`: inline (ndk's default: our polling loop drives the engine, the adapter's own goroutine while we sleep), busy or adaptive (an engine goroutine)")
	fs.StringVar(&f.xdpMode, "xdp-mode", "auto", "XDP attach `MODE`: auto (native, else generic), native or generic")
	fs.StringVar(&f.bindMode, "bind-mode", "auto", "AF_XDP bind `MODE`: auto (zero-copy, else copy), zerocopy or copy")
	fs.DurationVar(&f.busyPoll, "busy-poll", 0, "ask for busy polling on the socket for this `DURATION` (SO_BUSY_POLL; 0 off)")
	fs.IntVar(&f.pack, "pack-limit", 0, "pack packets of at most `BYTES` of payload with the QP's other small ones into one datagram (0: ndk's default, 1024; -1: never)")
	fs.IntVar(&f.engines, "engines", 0, "run `N` protocol engines, each on its share of the queues served (ndk.Options.Engines; 0: ndk's default, one)")
	f.pcap.define(fs)
}

// config validates the options and returns the adapter configuration.
func (f *adapterFlags) config() (adapterConfig, error) {
	c := adapterConfig{iface: f.iface, queue: f.queue, busyPoll: f.busyPoll, packLimit: f.pack, engines: f.engines}
	if f.iface == "" {
		return c, errors.New("-i IFACE is required")
	}
	if f.port == 0 || f.port > math.MaxUint16 {
		return c, fmt.Errorf("--port %d: not a UDP port", f.port)
	}
	if f.service == 0 || f.service > math.MaxUint16 {
		return c, fmt.Errorf("--service %d: not in [1, 65535]", f.service)
	}
	if f.queue < -1 || f.queue > 4095 {
		return c, fmt.Errorf("--queue %d: not in [0, 4095]", f.queue)
	}
	switch f.steer {
	case "":
		c.steer = xdp.SteerServeAll
	case "ntuple":
		c.steer = xdp.SteerNtuple
	case "external":
		c.steer = xdp.SteerExternal
	default:
		return c, fmt.Errorf("--steer %q: ntuple or external", f.steer)
	}
	if (f.queue >= 0) != (c.steer != xdp.SteerServeAll) {
		return c, errors.New("--queue and --steer go together: serve one queue and say how our port reaches it, or give neither to serve every queue")
	}
	if f.engines < 0 || f.engines > 64 {
		return c, fmt.Errorf("--engines %d: not in [0, 64]", f.engines)
	}
	if f.busyPoll < 0 || f.busyPoll > time.Second {
		return c, fmt.Errorf("--busy-poll %v: not in [0, 1s]", f.busyPoll)
	}
	c.port, c.service = uint16(f.port), uint16(f.service)
	var err error
	if c.pcap, err = f.pcap.config(); err != nil {
		return c, err
	}
	var ok bool
	if c.progress, ok = parseProgress(f.progress); !ok {
		return c, fmt.Errorf("--progress %q: inline, busy or adaptive", f.progress)
	}
	switch f.xdpMode {
	case "auto":
		c.attach = bpf.AttachAuto
	case "native":
		c.attach = bpf.AttachNative
	case "generic":
		c.attach = bpf.AttachGeneric
	default:
		return c, fmt.Errorf("--xdp-mode %q: auto, native or generic", f.xdpMode)
	}
	switch f.bindMode {
	case "auto":
		c.bind = xsk.BindAuto
	case "zerocopy":
		c.bind = xsk.BindZeroCopy
	case "copy":
		c.bind = xsk.BindCopy
	default:
		return c, fmt.Errorf("--bind-mode %q: auto, zerocopy or copy", f.bindMode)
	}
	return c, nil
}

// parseProgress returns the progress mode of a name.
func parseProgress(s string) (ndk.Progress, bool) {
	switch s {
	case "inline":
		return ndk.ProgressInline, true
	case "busy":
		return ndk.ProgressBusy, true
	case "adaptive":
		return ndk.ProgressAdaptive, true
	}
	return 0, false
}

// parseArgs parses args with fs, allowing flags after positional arguments
// ("send-lat HOST -s 64"), and returns the positional arguments.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// newFlagSet returns a flag set that reports errors instead of exiting, with a usage line.
func newFlagSet(name, usage string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("ndkpeer "+name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "usage: ndkpeer %s %s\n\noptions (-x and --x are the same):\n", name, usage)
		fs.PrintDefaults()
	}
	return fs
}

// sizeFlag is a byte size: a number with an optional suffix K, M, G (powers of 1024; KiB,
// MiB, GiB, KB, MB and GB mean the same).
type sizeFlag struct{ n int64 }

func (s *sizeFlag) String() string { return formatSize(s.n) }

func (s *sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	s.n = n
	return nil
}

// parseSize parses a byte size ("64", "64K", "8MiB").
func parseSize(v string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(v))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q: a number of bytes with an optional K, M or G", v)
	}
	return n * mult, nil
}

// formatSize writes a size the way parseSize reads it, in the largest exact unit.
func formatSize(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dG", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return strconv.FormatInt(n, 10)
}

// humanBytes writes a byte count for people ("1.5 GiB").
func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// optDuration is a flag that may be given alone (--stats, meaning def) or with a value
// (--stats=5s); "false" or 0 turns it off.
type optDuration struct {
	d   time.Duration
	def time.Duration
}

func (o *optDuration) String() string {
	if o == nil || o.d == 0 {
		return "off"
	}
	return o.d.String()
}

func (o *optDuration) Set(v string) error {
	switch v {
	case "true":
		o.d = o.def
		return nil
	case "false":
		o.d = 0
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		secs, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil {
			return fmt.Errorf("%q: a duration such as 5s", v)
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d < 0 || d > 24*time.Hour {
		return fmt.Errorf("%v: not in [0, 24h]", d)
	}
	o.d = d
	return nil
}

// IsBoolFlag lets the flag stand alone.
func (o *optDuration) IsBoolFlag() bool { return true }
