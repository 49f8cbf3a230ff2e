//go:build linux

package main

import (
	"fmt"
	"io"

	"github.com/xdpndk/xdpndk/cmd/ndkpeer/internal/hist"
	"github.com/xdpndk/xdpndk/cmd/ndkpeer/internal/proto"
)

// schemaVersion is the version of the --json documents' layout (schema_version): 2 added
// schema_version, record, latency_timed, completions, the perftest_ latency figures, the
// rates, the reverse_ and sum_ figures of -b, cpu, and intervals whose every field is
// always present.
const schemaVersion = 2

// clientDoc is a test's --json document (go doc ./cmd/ndkpeer, "JSON" lists its fields).
type clientDoc struct {
	SchemaVersion int    `json:"schema_version"`
	Record        string `json:"record"` // "result"
	Command       string `json:"command"`
	Op            string `json:"op"`
	Measure       string `json:"measure"`
	// LatencyTimed says what the latency figures time: "round_trip" (send-lat) or
	// "post_to_completion" (write-lat, read-lat); "" for bandwidth tests.
	LatencyTimed string `json:"latency_timed"`
	// Completions is how the client takes its completions: "polling" or "events" (-e).
	Completions       string      `json:"completions"`
	NdkpeerVersion    string      `json:"ndkpeer_version"`
	Protocol          uint8       `json:"protocol"` // the protocol version spoken with the server
	Local             modeJSON    `json:"local"`
	Server            modeJSON    `json:"server"`
	ServerAddr        string      `json:"server_address"`
	Service           uint16      `json:"service"`
	Params            paramsJSON  `json:"params"`
	Latency           []latResult `json:"latency,omitempty"`
	Bandwidth         []bwResult  `json:"bandwidth,omitempty"`
	Intervals         []interval  `json:"intervals"`
	IntervalsStreamed bool        `json:"intervals_streamed"` // -D 0 --json: they came one a line before
}

// intervalRecord is one line of a -D 0 --json run: an interval as it ends.
type intervalRecord struct {
	SchemaVersion int    `json:"schema_version"`
	Record        string `json:"record"` // "interval"
	interval
}

// paramsJSON are a run's parameters.
type paramsJSON struct {
	QPs        int     `json:"qps"`
	TxDepth    int     `json:"tx_depth"`
	Iterations int     `json:"iterations,omitempty"` // per size before -a scaling; 0 with a duration
	DurationS  float64 `json:"duration_s,omitempty"`
	InlineSize int     `json:"inline_size"` // 0: inline data off
	Sizes      []int   `json:"sizes"`

	Infinite      bool  `json:"infinite"`       // -D 0: until SIGINT/SIGTERM
	RateMsgPerS   int64 `json:"rate_msg_per_s"` // --rate asked; 0 unpaced
	Bidirectional bool  `json:"bidirectional"`  // -b
	CPUUtil       bool  `json:"cpu_util"`       // --cpu-util
	Events        bool  `json:"events"`         // -e
	// Load is --load's OP:SIZE ("write:64K"); "" without.
	Load string `json:"load"`
	// Percentiles says how latency percentiles are computed: "exact" (nearest-rank over
	// every sample, -n runs) or "histogram" (duration runs: within
	// percentile_relative_error of nearest-rank); "" for bandwidth tests.
	Percentiles             string  `json:"percentiles"`
	PercentileRelativeError float64 `json:"percentile_relative_error"`
}

// measureText says what a test's numbers are.
func measureText(k proto.Kind) string {
	switch k {
	case proto.KindSendLat:
		return "round trip: a Send posted until the receive of the server's echo completes (bench/ndkbench's ping-pong), in µs"
	case proto.KindWriteLat:
		return "a Write posted until its completion (acknowledged by the server; bench/ndkbench's latency), in µs"
	case proto.KindReadLat:
		return "a Read posted until its completion (the data placed; bench/ndkbench's latency), in µs"
	}
	return "payload bytes of completed " + k.Op() + "s x 8 / time, 10^9 bit/s; messages completed per second, 10^6/s"
}

// latencyTimed is the latency_timed of a test.
func latencyTimed(k proto.Kind) string {
	switch k {
	case proto.KindSendLat:
		return "round_trip"
	case proto.KindWriteLat, proto.KindReadLat:
		return "post_to_completion"
	}
	return ""
}

// completionsMode is the completions of the options.
func (o *clientOptions) completionsMode() string {
	if o.events {
		return "events"
	}
	return "polling"
}

// document starts the run's JSON document.
func (s *session) document() *clientDoc {
	o := s.o
	d := &clientDoc{SchemaVersion: schemaVersion, Record: "result", Command: o.kind.String(), Op: o.kind.Op(),
		Measure: measureText(o.kind), LatencyTimed: latencyTimed(o.kind), Completions: o.completionsMode(),
		NdkpeerVersion: readVersion().Version, Protocol: s.reply.Version,
		Local: s.n.localJSON(), Server: toModeJSON(s.reply.Server), ServerAddr: s.dest.Addr().String(),
		Service: s.dest.Port(), Intervals: []interval{},
		Params: paramsJSON{QPs: len(s.qps), TxDepth: 1, Iterations: o.iters, DurationS: o.duration.Seconds(),
			InlineSize: o.inlineSize, Sizes: o.sizes, Infinite: o.infinite, RateMsgPerS: o.rate,
			Bidirectional: o.bidir, CPUUtil: o.cpuUtil, Events: o.events,
			Load: (&loadFlag{o.loadKind, o.loadSize}).String()}}
	switch {
	case !o.kind.Latency():
		d.Params.TxDepth = o.txDepth
	case o.iters == 0:
		d.Params.Percentiles, d.Params.PercentileRelativeError = "histogram", hist.RelativeError
	default:
		d.Params.Percentiles = "exact"
	}
	return d
}

// printHeader states what the run measures and the mode each side runs with.
func (s *session) printHeader() {
	o, w := s.o, s.out
	qps := "1 QP"
	if len(s.qps) > 1 {
		qps = fmt.Sprintf("%d QPs", len(s.qps))
	}
	fmt.Fprintf(w, "ndkpeer %s: %v -> %v, UDP port %d, service %d, %s\n", o.kind, s.n.a.LocalAddr().Addr(), s.dest.Addr(),
		s.n.cfg.port, s.dest.Port(), qps)
	fmt.Fprintf(w, " local  (%s): %s; UMEM pages %s\n", s.n.cfg.iface, modeLine(s.n.mode), s.n.pages)
	fmt.Fprintf(w, " server       : %s\n", modeLine(s.reply.Server))
	for _, n := range s.n.notes {
		fmt.Fprintf(w, " note: %s\n", n)
	}
	inline := "off"
	if o.inlineSize > 0 {
		inline = fmt.Sprintf("Sends and Writes up to %d bytes", o.inlineSize)
	}
	count := fmt.Sprintf("%d iterations per size", o.iters)
	switch {
	case o.infinite:
		count = "until Ctrl-C (SIGINT or SIGTERM), a line per second"
	case o.duration > 0:
		count = fmt.Sprintf("%v per size", o.duration)
	case len(o.sizes) > 1 && !o.itersSet:
		count += fmt.Sprintf(" (fewer above %s)", humanBytes(scaleAbove))
	}
	depth := ""
	switch {
	case o.kind.Latency():
	case o.txDepthSet:
		depth = fmt.Sprintf(", %d outstanding per QP", o.txDepth)
	case len(o.sizes) == 1:
		depth = fmt.Sprintf(", %d outstanding per QP in the warm-up, then twice the path's bandwidth-delay product (--json: outstanding)", o.depthFor(o.sizes[0]))
	default:
		depth = fmt.Sprintf(", %d outstanding per QP in the warm-up (fewer above %s: at most %s outstanding), then twice the path's bandwidth-delay product", o.txDepth, humanBytes(uint64(maxOutstanding/o.txDepth)), humanBytes(maxOutstanding))
	}
	fmt.Fprintf(w, " %s after a warm-up%s, inline data %s\n", count, depth, inline)
	s.printOptions()
	fmt.Fprintf(w, " measure: %s\n", measureText(o.kind))
	if o.kind.Latency() {
		fmt.Fprintf(w, " columns: %s\n", columnsText(o.kind))
	}
	if o.duration == 0 && !o.infinite {
		columns(w, o.kind, o.bidir)
	}
}

// printOptions states the perftest options in effect: how completions are taken, the
// rate, both directions, CPU.
func (s *session) printOptions() {
	o, w := s.o, s.out
	if o.events {
		fmt.Fprintf(w, " completions: events (-e): the loop arms its CQs and sleeps in epoll on their notification FDs; the server sleeps on notifications too\n")
	} else {
		fmt.Fprintf(w, " completions: busy polling (the client's loop spins on its CQs: a whole core whatever the rate; -e waits on notifications)\n")
	}
	if o.rate > 0 {
		what := "bandwidth capped at it"
		if o.kind.Latency() {
			what = "latency measured under that load"
		}
		dir := ""
		if o.bidir {
			dir = ", each direction"
		}
		fmt.Fprintf(w, " rate: %d msg/s over all QPs%s, paced posting (--rate): %s\n", o.rate, dir, what)
	}
	if o.bidir {
		fmt.Fprintf(w, " bidirectional (-b): the server runs %s towards us at the same time, over our window; it counts its own direction\n", o.kind)
	}
	if o.loadKind != 0 {
		fmt.Fprintf(w, " load (--load): %ss of %s streamed on one more QP, %d outstanding, not paced, while the latency is measured; the loop polls both\n",
			o.loadKind.Op(), humanBytes(uint64(o.loadSize)), o.loadDepth())
	}
	if o.cpuUtil {
		fmt.Fprintf(w, " CPU (--cpu-util): getrusage of each process (all its threads) over the measured window, the server's reported over the control connection\n")
	}
	if o.kind.Latency() && o.iters == 0 {
		fmt.Fprintf(w, " percentiles: from a log-linear histogram of fixed size, within %.2f%% of the exact ones; min, max and mean exact\n", 100*hist.RelativeError)
	}
}

// columnsText says what a latency test's columns time.
func columnsText(k proto.Kind) string {
	switch k {
	case proto.KindSendLat:
		return "rtt_* are round trips in µs, a Send posted until the receive of the echo completes (ndkpeer's measure); " +
			"t_typical and t_avg are perftest's convention, half the round trip (ib_send_lat's median and mean)"
	case proto.KindWriteLat:
		return "op_* time one Write in µs, from its post to its completion, which waits for the server's acknowledgement (ndkpeer's measure); " +
			"t_typical and t_avg are half of it, the convention of ib_write_lat (half a Write ping-pong)"
	}
	return "op_* time one Read in µs, from its post to its completion, the data placed (ndkpeer's measure); " +
		"t_typical and t_avg are the same, the convention of ib_read_lat (the whole Read)"
}

// columns writes the column titles of the result lines.
func columns(w io.Writer, k proto.Kind, bidir bool) {
	if k.Latency() {
		p := "op_"
		if k == proto.KindSendLat {
			p = "rtt_"
		}
		fmt.Fprintf(w, "%10s %12s %10s %10s %10s %10s %10s %10s %10s %10s\n", "#bytes", "#iterations",
			p+"min", p+"p50", p+"p99", p+"p99.9", p+"max", p+"mean", "t_typical", "t_avg")
		return
	}
	if bidir {
		fmt.Fprintf(w, "%10s %12s %12s %15s   %s\n", "#bytes", "#iterations", "BW[Gbit/s]", "MsgRate[Mmsg/s]", "direction")
		return
	}
	fmt.Fprintf(w, "%10s %12s %12s %15s\n", "#bytes", "#iterations", "BW[Gbit/s]", "MsgRate[Mmsg/s]")
}

// printResult writes one size's lines.
func (s *session) printResult(r sizeResult) {
	o, w, k := s.o, s.out, s.o.kind
	if o.duration > 0 || o.infinite {
		columns(w, k, o.bidir)
	}
	if k.Latency() {
		l := r.lat
		fmt.Fprintf(w, "%10d %12d %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f\n", l.Bytes, l.Iterations,
			l.MinUS, l.P50US, l.P99US, l.P999US, l.MaxUS, l.MeanUS, l.PerftestTypicalUS, l.PerftestAvgUS)
		retransmissions(w, r)
		if l.LoadOp != "" {
			fmt.Fprintf(w, "%10s (load: %d %ss of %s completed in the window, %.3f Gbit/s, %.0f msg/s)\n", "",
				l.LoadIterations, l.LoadOp, humanBytes(uint64(l.LoadBytes)), l.LoadGbps, l.LoadMsgPerS)
		}
		s.printRate(r.lat.MsgPerS, int64(l.Iterations), l.Seconds)
		printCPU(w, l.CPU)
		s.printSleeps(r)
		return
	}
	b := r.bw
	if o.bidir {
		fmt.Fprintf(w, "%10d %12d %12.3f %15.6f   client -> server\n", b.Bytes, b.Iterations, b.Gbps, b.Mmsgs)
		fmt.Fprintf(w, "%10d %12d %12.3f %15.6f   server -> client (as the server counted it, over %.3f s)\n", b.Bytes, b.ReverseIterations, b.ReverseGbps, b.ReverseMmsgs, b.ReverseSeconds)
		fmt.Fprintf(w, "%10d %12d %12.3f %15.6f   both directions\n", b.Bytes, b.Iterations+b.ReverseIterations, b.SumGbps, b.SumMmsgs)
	} else {
		fmt.Fprintf(w, "%10d %12d %12.3f %15.6f\n", b.Bytes, b.Iterations, b.Gbps, b.Mmsgs)
	}
	retransmissions(w, r)
	s.printRate(b.MsgPerS, b.Iterations, b.Seconds)
	printCPU(w, b.CPU)
	s.printSleeps(r)
}

// printSleeps notes how often an -e run's loop slept on a notification or its timer.
func (s *session) printSleeps(r sizeResult) {
	if s.o.events {
		fmt.Fprintf(s.out, "%10s (-e: the loop slept %d times on notifications or its timer)\n", "", r.sleeps)
	}
}

// printRate notes, under a result of a paced run, the rate achieved against the one asked.
func (s *session) printRate(achieved float64, n int64, secs float64) {
	if s.o.rate == 0 {
		return
	}
	fmt.Fprintf(s.out, "%10s (rate: %d msg/s asked, %.1f achieved: %d messages in %.3f s)\n", "", s.o.rate, achieved, n, secs)
}

// polls says beside a CPU figure that its side polls.
func polls(p bool) string {
	if p {
		return ", polls: a whole core whatever the rate"
	}
	return ", waits on notifications"
}

// printCPU writes --cpu-util's line.
func printCPU(w io.Writer, c cpuJSON) {
	if !c.Measured {
		return
	}
	fmt.Fprintf(w, "%10s CPU per message: client %.2f µs (%.2f cores%s), server %.2f µs (%.2f cores%s), both %.2f µs (%.2f cores); %d messages\n",
		"", c.ClientUSPerMsg, c.ClientCores, polls(c.ClientPolls), c.ServerUSPerMsg, c.ServerCores, polls(c.ServerPolls),
		c.BothUSPerMsg, c.BothCores, c.Messages)
}

// retransmissions notes, under a result line, the packets the client sent again, and why:
// the retransmission timer (and how many of its expiries proved spurious), tail loss
// probes (and how many were needless), the rest loss detection and RNR retries.
func retransmissions(w io.Writer, r sizeResult) {
	c := r.retx
	if c.retransmits > 0 || c.timeouts > 0 {
		fmt.Fprintf(w, "%10s (%d packets retransmitted: %d by the timer in %d expiries, %d of them spurious; %d tail probes, %d needless)\n",
			"", c.retransmits, c.byTimer, c.timeouts, c.spurious, c.probes, c.needless)
	}
}

// printInterval writes one second of a -D run, as iperf3 does.
func (s *session) printInterval(iv interval) {
	w, k := s.out, s.o.kind
	span := fmt.Sprintf("%6.2f-%-6.2f sec", iv.StartS, iv.EndS)
	cpu := ""
	if iv.CPU.Measured {
		cpu = fmt.Sprintf("   CPU/msg client %.2f server %.2f us (%.2f+%.2f cores)", iv.CPU.ClientUSPerMsg, iv.CPU.ServerUSPerMsg, iv.CPU.ClientCores, iv.CPU.ServerCores)
	}
	if k.Latency() {
		p := "op"
		if k == proto.KindSendLat {
			p = "rtt"
		}
		fmt.Fprintf(w, "[%8d B] %s %10d iterations %10.1f msg/s   %s p50 %8.2f us   p99 %8.2f us   max %8.2f us   t_typical %8.2f us%s\n",
			iv.Bytes, span, iv.Iterations, iv.MsgPerS, p, iv.P50US, iv.P99US, iv.MaxUS, iv.PerftestTypicalUS, cpu)
		return
	}
	rev := ""
	if s.o.bidir {
		rev = fmt.Sprintf("   reverse %8.3f Gbit/s, sum %8.3f Gbit/s", iv.ReverseGbps, iv.SumGbps)
	}
	fmt.Fprintf(w, "[%8d B] %s %10s  %8.3f Gbit/s  %10.6f Mmsg/s%s%s\n", iv.Bytes, span, humanBytes(uint64(iv.Iterations)*uint64(iv.Bytes)), iv.Gbps, iv.Mmsgs, rev, cpu)
}
