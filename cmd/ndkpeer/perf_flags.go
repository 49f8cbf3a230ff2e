//go:build linux

package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/xdpndk/xdpndk/cmd/ndkpeer/internal/proto"
)

// perfFlags are the options that make a test measure what perftest's users expect: the
// CPU of both sides, event mode, both directions at once, a held rate and a run until
// Ctrl-C.
type perfFlags struct {
	cpuUtil  bool
	events   bool
	bidir    bool
	rate     rateFlag
	infinite bool
	load     loadFlag
}

// maxRate bounds --rate (messages per second).
const maxRate = 100_000_000

// define adds the options to fs.
func (p *perfFlags) define(fs *flag.FlagSet) {
	fs.BoolVar(&p.cpuUtil, "cpu-util", false, "report the CPU time of both sides (getrusage, the server's over the same window) per message and as cores")
	fs.BoolVar(&p.events, "e", false, "wait for completions on notifications (Arm and the CQs' FDs) instead of busy polling, as perftest's event mode; the server sleeps on notifications too")
	fs.BoolVar(&p.events, "events", false, "same as -e")
	fs.BoolVar(&p.bidir, "b", false, "bandwidth tests: both directions at once (the server runs the same test towards the client)")
	fs.BoolVar(&p.bidir, "bidirectional", false, "same as -b")
	fs.Var(&p.rate, "rate", "hold `MSGS_PER_S` messages per second over all QPs (paced posting; K and M suffixes, 1000s): latency under that load, or a bandwidth cap")
	fs.BoolVar(&p.infinite, "infinite", false, "run until Ctrl-C (SIGINT or SIGTERM), a line per second, then the summary; same as -D 0")
	fs.Var(&p.load, "load", "latency tests: stream `OP:SIZE` (write or read, SIZE bytes with K and M suffixes) on one more QP while measuring: latency under that load")
}

// apply checks the options against the rest of the test's and sets them in o. durGiven
// says whether -D was given (then -D 0 means --infinite).
func (p *perfFlags) apply(o *clientOptions, durGiven bool) error {
	o.cpuUtil, o.events, o.bidir, o.rate = p.cpuUtil, p.events, p.bidir, p.rate.n
	o.infinite = p.infinite || (durGiven && o.duration == 0)
	o.loadKind, o.loadSize = p.load.kind, p.load.size
	switch {
	case o.loadKind != 0 && !o.kind.Latency():
		return errors.New("--load is for the latency tests (send-lat, write-lat, read-lat)")
	case o.bidir && !o.kind.Bandwidth():
		return errors.New("-b is for the bandwidth tests (send-bw, write-bw, read-bw)")
	case o.infinite && p.infinite && durGiven && o.duration > 0:
		return errors.New("--infinite and -D SECONDS exclude each other")
	case o.infinite && o.itersSet:
		return errors.New("-n and -D 0 (--infinite) exclude each other")
	case o.infinite && len(o.sizes) > 1:
		return errors.New("-D 0 (--infinite) runs one size: give -s, not -a")
	}
	return nil
}

// rateFlag is a message rate: a whole number with an optional K or M suffix (10^3, 10^6).
type rateFlag struct{ n int64 }

func (r *rateFlag) String() string {
	if r == nil || r.n == 0 {
		return "0"
	}
	return strconv.FormatInt(r.n, 10)
}

func (r *rateFlag) Set(v string) error {
	n, err := parseRate(v)
	if err != nil {
		return err
	}
	r.n = n
	return nil
}

// parseRate parses a message rate ("2000", "50k", "1.5M"); 0 means unpaced.
func parseRate(v string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(v))
	mult := 1.0
	switch {
	case strings.HasSuffix(t, "K"):
		t, mult = strings.TrimSuffix(t, "K"), 1e3
	case strings.HasSuffix(t, "M"):
		t, mult = strings.TrimSuffix(t, "M"), 1e6
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || f*mult > maxRate || f != f {
		return 0, fmt.Errorf("rate %q: messages per second, 0 to %d (K and M suffixes)", v, maxRate)
	}
	n := int64(f*mult + 0.5)
	if n == 0 && f > 0 {
		return 0, fmt.Errorf("rate %q: at least 1 message per second", v)
	}
	return n, nil
}

// loadFlag is --load's OP:SIZE: the bandwidth test streamed beside a latency test.
type loadFlag struct {
	kind proto.Kind // KindWriteBW or KindReadBW; 0 without --load
	size int
}

func (l *loadFlag) String() string {
	if l == nil || l.kind == 0 {
		return ""
	}
	return strings.ToLower(l.kind.Op()) + ":" + formatSize(int64(l.size))
}

func (l *loadFlag) Set(v string) error {
	k, size, err := parseLoad(v)
	if err != nil {
		return err
	}
	l.kind, l.size = k, size
	return nil
}

// parseLoad parses --load's OP:SIZE ("write:64K", "read:1M").
func parseLoad(v string) (proto.Kind, int, error) {
	op, sz, ok := strings.Cut(strings.TrimSpace(v), ":")
	var k proto.Kind
	switch strings.ToLower(op) {
	case "write":
		k = proto.KindWriteBW
	case "read":
		k = proto.KindReadBW
	default:
		ok = false
	}
	if !ok {
		return 0, 0, fmt.Errorf("load %q: OP:SIZE, OP write or read (write:64K)", v)
	}
	n, err := parseSize(sz)
	if err != nil || n < 1 || n > maxClientSize {
		return 0, 0, fmt.Errorf("load %q: SIZE from 1 to %s", v, formatSize(maxClientSize))
	}
	return k, int(n), nil
}
