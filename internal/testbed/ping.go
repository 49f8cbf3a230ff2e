package testbed

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// MaxPings bounds Ping's count.
const MaxPings = 10_000

// Ping sends count ICMP echo requests (ping(8), at most MaxPings) from h to dst, one every
// interval (at least 1 ms), and returns the round trips of the replies, in the order they
// came; lost requests have none. ctx bounds the run, which lasts about count x interval.
func (h *Host) Ping(ctx context.Context, dst netip.Addr, count int, interval time.Duration) ([]time.Duration, error) {
	if count < 1 || count > MaxPings || interval < time.Millisecond {
		return nil, fmt.Errorf("%w: ping count %d not in [1, %d] or interval %v below 1ms", ErrInvalidOptions, count, MaxPings, interval)
	}
	wait := time.Duration(count)*interval + 5*time.Second
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	cmd := h.Command(ctx, "ping", "-n", "-c", strconv.Itoa(count), "-i", strconv.FormatFloat(interval.Seconds(), 'f', 3, 64),
		"-W", "2", dst.String())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	rtts := parsePing(out.Bytes())
	if err != nil && len(rtts) == 0 {
		return nil, fmt.Errorf("ping %v from %s: %w: %s", dst, h.NS, err, strings.TrimSpace(errb.String()))
	}
	return rtts, nil
}

// parsePing returns the "time=" figures of ping(8)'s reply lines ("64 bytes from ...:
// icmp_seq=1 ttl=63 time=2.13 ms").
func parsePing(out []byte) []time.Duration {
	var rtts []time.Duration
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		i := strings.Index(line, "time=")
		if i < 0 {
			continue
		}
		f := strings.Fields(line[i+len("time="):])
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		unit := time.Millisecond
		if f[1] == "us" || f[1] == "µs" {
			unit = time.Microsecond
		}
		rtts = append(rtts, time.Duration(v*float64(unit)))
	}
	return rtts
}
