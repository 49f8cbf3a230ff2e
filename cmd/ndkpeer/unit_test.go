//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpndk/xdpndk/cmd/ndkpeer/internal/proto"
	"github.com/xdpndk/xdpndk/ndk"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"64", 64, true}, {"64K", 64 << 10, true}, {"64k", 64 << 10, true}, {"8MiB", 8 << 20, true},
		{"1G", 1 << 30, true}, {"2KB", 2 << 10, true}, {"10B", 10, true}, {" 3M ", 3 << 20, true},
		{"", 0, false}, {"K", 0, false}, {"-1", 0, false}, {"1.5M", 0, false}, {"99999999999G", 0, false}, {"12Q", 0, false},
	} {
		got, err := parseSize(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("parseSize(%q) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if tc.ok {
			back, err := parseSize(formatSize(got))
			if err != nil || back != got {
				t.Errorf("formatSize(%d) = %q does not parse back (%d, %v)", got, formatSize(got), back, err)
			}
		}
	}
}

func TestPercentileNearestRank(t *testing.T) {
	s := []int32{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}
	for _, tc := range []struct {
		p    float64
		want int32
	}{{0, 10}, {10, 10}, {11, 20}, {50, 50}, {99, 100}, {99.9, 100}, {100, 100}} {
		if got := percentile(s, tc.p); got != tc.want {
			t.Errorf("percentile(%v) = %d, want %d", tc.p, got, tc.want)
		}
	}
	if percentile(nil, 50) != 0 {
		t.Error("percentile of no samples is not 0")
	}
}

func TestSummarize(t *testing.T) {
	samples := make([]int32, 0, 1000)
	for i := 1000; i >= 1; i-- { // 1..1000 µs, reversed: summarize sorts
		samples = append(samples, int32(i*1000))
	}
	l := summarize(64, samples)
	want := latResult{Bytes: 64, Iterations: 1000, MinUS: 1, P50US: 500, P99US: 990, P999US: 999, MaxUS: 1000, MeanUS: 500.5}
	if l != want {
		t.Fatalf("summarize = %+v, want %+v", l, want)
	}
	if !slices.IsSorted(samples) {
		t.Error("samples not sorted in place")
	}
	if e := summarize(8, nil); e.Iterations != 0 || e.MaxUS != 0 {
		t.Errorf("summarize of no samples = %+v", e)
	}
}

func TestIterationsDepthWarmup(t *testing.T) {
	lat := clientOptions{kind: proto.KindWriteLat, iters: 1000, sizes: []int{2, 64 << 10, 128 << 10, 8 << 20}, txDepth: 128}
	for _, tc := range []struct{ size, iters, warm int }{{2, 1000, 100}, {64 << 10, 1000, 100}, {128 << 10, 500, 50}, {8 << 20, 16, 1}} {
		if got := lat.itersFor(tc.size); got != tc.iters {
			t.Errorf("latency -a: itersFor(%d) = %d, want %d", tc.size, got, tc.iters)
		}
		if got := lat.warmupFor(tc.size); got != tc.warm {
			t.Errorf("latency -a: warmupFor(%d) = %d, want %d", tc.size, got, tc.warm)
		}
		if got := lat.depthFor(tc.size); got != 1 {
			t.Errorf("latency: depthFor(%d) = %d, want 1", tc.size, got)
		}
	}
	lat.itersSet = true
	if got := lat.itersFor(8 << 20); got != 1000 {
		t.Errorf("-n given: itersFor(8M) = %d, want 1000", got)
	}
	bw := clientOptions{kind: proto.KindWriteBW, iters: 5000, sizes: []int{64, 64 << 10, 8 << 20}, txDepth: 128}
	for _, tc := range []struct{ size, depth, iters int }{{64, 128, 5000}, {8 << 10, 128, 5000}, {64 << 10, 16, 5000}, {8 << 20, 2, 64}} {
		if got := bw.depthFor(tc.size); got != tc.depth {
			t.Errorf("bandwidth: depthFor(%d) = %d, want %d", tc.size, got, tc.depth)
		}
		if got := bw.itersFor(tc.size); got != tc.iters {
			t.Errorf("bandwidth -a: itersFor(%d) = %d, want %d", tc.size, got, tc.iters)
		}
	}
	bw.txDepthSet = true
	if got := bw.depthFor(8 << 20); got != 128 {
		t.Errorf("-t given: depthFor(8M) = %d, want 128", got)
	}
	dur := clientOptions{kind: proto.KindSendBW, sizes: []int{64}, duration: 2 * time.Second}
	if dur.itersFor(64) != 0 || dur.warmupFor(64) != 500 {
		t.Errorf("duration mode: itersFor %d, warmupFor %d; want 0, 500", dur.itersFor(64), dur.warmupFor(64))
	}
	// A duration run's warm-up moves about as many bytes above 64 KiB as at 64 KiB, with -a
	// or one size: 500 Sends of 64 KiB, 62 of 512 KiB, at least 1 of 8 MiB.
	for _, tc := range []struct{ size, warm int }{{64 << 10, 500}, {512 << 10, 62}, {8 << 20, 3}} {
		if got := dur.warmupFor(tc.size); got != tc.warm {
			t.Errorf("duration mode: warmupFor(%d) = %d, want %d", tc.size, got, tc.warm)
		}
	}
	durLat := clientOptions{kind: proto.KindReadLat, sizes: []int{2, 8 << 20}, duration: time.Second}
	if got := durLat.warmupFor(8 << 20); got != 1 {
		t.Errorf("duration mode latency: warmupFor(8M) = %d, want 1", got)
	}
}

func TestParseLoad(t *testing.T) {
	for v, want := range map[string]loadFlag{
		"write:64K": {proto.KindWriteBW, 65536}, "read:1M": {proto.KindReadBW, 1 << 20}, "Write:100": {proto.KindWriteBW, 100},
	} {
		var l loadFlag
		if err := l.Set(v); err != nil || l != want {
			t.Errorf("--load %q: %+v, %v; want %+v", v, l, err, want)
		}
	}
	for _, v := range []string{"", "write", "send:64K", "write:", "write:0", "read:1G", "write:-1"} {
		var l loadFlag
		if err := l.Set(v); err == nil {
			t.Errorf("--load %q accepted: %+v", v, l)
		}
	}
	if s := (&loadFlag{proto.KindReadBW, 16384}).String(); s != "read:16K" {
		t.Errorf("String = %q", s)
	}
	o, cfg, code := parseClient("send-lat", proto.KindSendLat, []string{"-i", "eth1", "--load", "write:64K", "h"}, io.Discard)
	if code != -1 || o.loadKind != proto.KindWriteBW || o.loadSize != 65536 || o.loadDepth() != 16 || cfg.heap < 64<<10+64 {
		t.Errorf("send-lat --load: code %d, %+v, heap %d", code, o, cfg.heap)
	}
	o.txDepth, o.txDepthSet = 4, true
	if o.loadDepth() != 4 {
		t.Errorf("-t 4: load depth %d", o.loadDepth())
	}
	if _, _, code := parseClient("write-bw", proto.KindWriteBW, []string{"-i", "eth1", "--load", "write:64K", "h"}, io.Discard); code != exitUsage {
		t.Errorf("write-bw --load: exit %d, want %d", code, exitUsage)
	}
}

func TestParseClient(t *testing.T) {
	o, cfg, code := parseClient("write-bw", proto.KindWriteBW, []string{"-i", "eth1", "198.18.0.2", "-s", "4K", "-q", "2", "--json", "-t", "8"}, io.Discard)
	if code != -1 {
		t.Fatalf("valid arguments: exit %d", code)
	}
	if o.host != "198.18.0.2" || !slices.Equal(o.sizes, []int{4096}) || o.qps != 2 || !o.jsonOut || o.txDepth != 8 || !o.txDepthSet ||
		o.iters != defaultBWIters || cfg.iface != "eth1" || cfg.port != 4793 || cfg.service != ServiceID || cfg.progress != ndk.ProgressInline {
		t.Fatalf("parsed %+v, %+v", o, cfg)
	}
	o, _, code = parseClient("send-lat", proto.KindSendLat, []string{"--interface=eth1", "-a", "--max-size", "1K", "--inline", "h"}, io.Discard)
	if code != -1 || !slices.Equal(o.sizes, []int{2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}) || o.inlineSize != defaultInline || o.iters != defaultLatIters {
		t.Fatalf("-a: code %d, %+v", code, o)
	}
	o, _, code = parseClient("read-lat", proto.KindReadLat, []string{"-i", "x", "-D", "1.5", "h"}, io.Discard)
	if code != -1 || o.duration != 1500*time.Millisecond || o.iters != 0 {
		t.Fatalf("-D 1.5: code %d, %+v", code, o)
	}
	for _, args := range [][]string{
		{"198.18.0.2"},                         // no -i
		{"-i", "x"},                            // no host
		{"-i", "x", "a", "b"},                  // two hosts
		{"-i", "x", "-s", "0", "h"},            // size 0
		{"-i", "x", "-s", "1G", "h"},           // over the client's limit
		{"-i", "x", "-n", "0", "h"},            // no iterations
		{"-i", "x", "-n", "5", "-D", "2", "h"}, // both
		{"-i", "x", "-D", "0.01", "h"},         // too short
		{"-i", "x", "-q", "0", "h"},            // no QP
		{"-i", "x", "-q", "65", "h"},           // too many
		{"-i", "x", "--inline", "--inline-size", "5000", "h"},
		{"-i", "x", "-a", "--min-size", "8K", "--max-size", "4K", "h"},
		{"-i", "x", "--port", "0", "h"},
		{"-i", "x", "--progress", "lazy", "h"},
		{"-i", "x", "--xdp-mode", "hw", "h"},
		{"-i", "x", "--timeout", "1ms", "h"},
		{"-i", "x", "--no-such-flag", "h"},
	} {
		if _, _, code := parseClient("write-lat", proto.KindWriteLat, args, io.Discard); code != exitUsage {
			t.Errorf("parseClient(%q) = exit %d, want %d", args, code, exitUsage)
		}
	}
}

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		st   ndk.Status
		code int
		text string
	}{
		{ndk.StatusConnectionRefused, exitRefused, "STATUS_CONNECTION_REFUSED"},
		{ndk.StatusIOTimeout, exitTimeout, "STATUS_IO_TIMEOUT"},
		{ndk.StatusHostUnreachable, exitUnreachable, "STATUS_HOST_UNREACHABLE"},
		{ndk.StatusNetworkUnreachable, exitUnreachable, "STATUS_NETWORK_UNREACHABLE"},
		{ndk.StatusInvalidParameter, exitFailed, "connect to"},
	} {
		err := connectError(fmt.Errorf("connect: %w", tc.st), "198.18.0.2:4800", 4793)
		if got := exitCode(err); got != tc.code || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%v: exit %d (%v), want %d with %q", tc.st, got, err, tc.code, tc.text)
		}
	}
	cancelled := fmt.Errorf("%w: %w", ndk.StatusCancelled, context.DeadlineExceeded)
	if got := exitCode(connectError(cancelled, "h", 1)); got != exitTimeout {
		t.Errorf("connect past its deadline: exit %d, want %d", got, exitTimeout)
	}
	interrupted := fmt.Errorf("%w: %w", ndk.StatusCancelled, context.Canceled)
	if got := exitCode(connectError(interrupted, "h", 1)); got != exitInterrupted {
		t.Errorf("interrupted connect: exit %d, want %d", got, exitInterrupted)
	}
	if exitCode(nil) != exitOK || exitCode(errors.New("x")) != exitFailed || exitCode(context.Canceled) != exitInterrupted {
		t.Error("exitCode of nil, a plain error or context.Canceled is wrong")
	}
	wrapped := fmt.Errorf("outer: %w", fail(exitMemlock, "memlock"))
	if exitCode(wrapped) != exitMemlock {
		t.Error("a wrapped cliError loses its code")
	}
}

func TestPrivilegesMissing(t *testing.T) {
	all := privileges{caps: 1<<capNetAdmin | 1<<capNetRaw | 1<<capBPF}
	if m := all.missing(); len(m) != 0 {
		t.Errorf("all capabilities: missing %v", m)
	}
	sysAdmin := privileges{caps: 1<<capNetAdmin | 1<<capNetRaw | 1<<capSysAdmin}
	if m := sysAdmin.missing(); len(m) != 0 {
		t.Errorf("CAP_SYS_ADMIN instead of CAP_BPF: missing %v", m)
	}
	none := privileges{euid: 1000}
	if m := none.missing(); !slices.Equal(m, []string{"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_BPF"}) {
		t.Errorf("no capabilities: missing %v", m)
	}
}

func TestLeadingInt(t *testing.T) {
	for in, want := range map[string]int{"18": 18, "6-rc1": 6, "": 0, "x1": 0, "44-fc-v657": 44} {
		if got := leadingInt(in); got != want {
			t.Errorf("leadingInt(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestOptDuration(t *testing.T) {
	o := optDuration{def: 10 * time.Second}
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{{"true", 10 * time.Second, true}, {"5s", 5 * time.Second, true}, {"2", 2 * time.Second, true},
		{"false", 0, true}, {"-1s", 0, false}, {"soon", 0, false}} {
		err := o.Set(tc.in)
		if (err == nil) != tc.ok || (tc.ok && o.d != tc.want) {
			t.Errorf("Set(%q): %v, %v; want %v", tc.in, o.d, err, tc.want)
		}
	}
}

func TestModeLine(t *testing.T) {
	m := proto.Mode{Attach: proto.AttachGeneric, Progress: proto.ProgressBusy, ZeroCopy: true, NeedWakeup: true,
		MTU: 1500, MaxPayload: 1472, Served: 1, Queues: 4}
	line := modeLine(m)
	for _, want := range []string{"XDP generic", "AF_XDP zero-copy", "multi-buffer off", "need_wakeup on", "busy-poll off",
		"MTU 1500 (payload 1472)", "queues served 1 of 4", "progress busy"} {
		if !strings.Contains(line, want) {
			t.Errorf("modeLine %q lacks %q", line, want)
		}
	}
}

func TestOpenErrorMapping(t *testing.T) {
	cfg := adapterConfig{iface: "xdpndkno0", queue: 1} // no such interface: nothing attached to look at
	for _, tc := range []struct {
		err  error
		code int
		text string
	}{
		{fmt.Errorf("bind af_xdp socket: %w", unix.EBUSY), exitBusy, "queue 1 of xdpndkno0 is busy"},
		{fmt.Errorf("load xdp program: %w", unix.EPERM), exitPrivilege, "run it as root"},
		{fmt.Errorf("pin 1 bytes of umem (mlock; needs CAP_IPC_LOCK or RLIMIT_MEMLOCK room): %w", unix.ENOMEM), exitMemlock, "RLIMIT_MEMLOCK"},
		{fmt.Errorf("pin 1 bytes of umem (mlock): %w", unix.EPERM), exitMemlock, "CAP_IPC_LOCK"},
		{errors.New("something else"), exitFailed, "open the adapter on xdpndkno0"},
	} {
		err := openError(fmt.Errorf("%w: %w", ndk.StatusDeviceNotReady, tc.err), cfg)
		if got := exitCode(err); got != tc.code || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%v: exit %d (%v), want %d with %q", tc.err, got, err, tc.code, tc.text)
		}
	}
}

// Without -t a bandwidth test keeps twice the path's bandwidth-delay product outstanding
// once the warm-up has shown the round trip: unchanged on a short path, what a long one
// needs, bounded.
func TestDepthForPath(t *testing.T) {
	bw := clientOptions{kind: proto.KindWriteBW, txDepth: 128}
	for _, tc := range []struct {
		size  int
		rtt   time.Duration
		rate  float64
		depth int
	}{
		{64 << 10, 30 * time.Microsecond, 10e9, 16},     // the plain bed: 1 MiB as before
		{64 << 10, 10 * time.Millisecond, 1e9, 39},      // 2 x 1.25 MB / 64 KiB
		{64 << 10, 10 * time.Millisecond, 10e9, 382},    // 2 x 12.5 MB / 64 KiB
		{64 << 10, 100 * time.Millisecond, 100e9, 1024}, // capped at 64 MiB
		{64, 10 * time.Millisecond, 10e9, 1024},         // capped at 1024 operations
		{8 << 20, 10 * time.Millisecond, 10e9, 3},       // 2 x 12.5 MB / 8 MiB
		{8 << 20, time.Second, 100e9, 8},                // 64 MiB / 8 MiB
		{64 << 10, 0, 10e9, 16},                         // no round trip known
	} {
		if got := bw.depthForPath(tc.size, tc.rtt, tc.rate); got != tc.depth {
			t.Errorf("depthForPath(%d, %v, %g) = %d, want %d", tc.size, tc.rtt, tc.rate, got, tc.depth)
		}
	}
	bw.txDepthSet = true
	if got := bw.depthForPath(64<<10, 10*time.Millisecond, 10e9); got != 128 {
		t.Errorf("-t given: depthForPath = %d, want 128", got)
	}
	lat := clientOptions{kind: proto.KindWriteLat, txDepth: 128}
	if got := lat.depthForPath(64<<10, 10*time.Millisecond, 10e9); got != 1 {
		t.Errorf("latency: depthForPath = %d, want 1", got)
	}
}
