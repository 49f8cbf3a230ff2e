//go:build linux

package main

import (
	"fmt"
	"io"

	"github.com/xdpndk/xdpndk/cmd/ndkpeer/internal/proto"
)

// clientDoc is a test's --json document.
type clientDoc struct {
	Command    string      `json:"command"`
	Op         string      `json:"op"`
	Measure    string      `json:"measure"`
	Local      modeJSON    `json:"local"`
	Server     modeJSON    `json:"server"`
	ServerAddr string      `json:"server_address"`
	Service    uint16      `json:"service"`
	Params     paramsJSON  `json:"params"`
	Latency    []latResult `json:"latency,omitempty"`
	Bandwidth  []bwResult  `json:"bandwidth,omitempty"`
	Intervals  []interval  `json:"intervals,omitempty"`
}

// paramsJSON are a run's parameters.
type paramsJSON struct {
	QPs        int     `json:"qps"`
	TxDepth    int     `json:"tx_depth"`
	Iterations int     `json:"iterations,omitempty"` // per size before -a scaling; 0 with a duration
	DurationS  float64 `json:"duration_s,omitempty"`
	InlineSize int     `json:"inline_size"` // 0: inline data off
	Sizes      []int   `json:"sizes"`
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

// document starts the run's JSON document.
func (s *session) document() *clientDoc {
	o := s.o
	d := &clientDoc{Command: o.kind.String(), Op: o.kind.Op(), Measure: measureText(o.kind),
		Local: s.n.localJSON(), Server: toModeJSON(s.reply.Server), ServerAddr: s.dest.Addr().String(),
		Service: s.dest.Port(),
		Params: paramsJSON{QPs: len(s.qps), TxDepth: 1, Iterations: o.iters, DurationS: o.duration.Seconds(),
			InlineSize: o.inlineSize, Sizes: o.sizes}}
	if !o.kind.Latency() {
		d.Params.TxDepth = o.txDepth
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
	if o.duration > 0 {
		count = fmt.Sprintf("%v per size", o.duration)
	} else if len(o.sizes) > 1 && !o.itersSet {
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
	fmt.Fprintf(w, " measure: %s\n", measureText(o.kind))
	if o.duration == 0 {
		columns(w, o.kind)
	}
}

// columns writes the column titles of the result lines.
func columns(w io.Writer, k proto.Kind) {
	if k.Latency() {
		fmt.Fprintf(w, "%10s %12s %10s %10s %10s %10s %10s %10s\n", "#bytes", "#iterations", "t_min", "t_p50", "t_p99", "t_p99.9", "t_max", "t_mean")
		return
	}
	fmt.Fprintf(w, "%10s %12s %12s %15s\n", "#bytes", "#iterations", "BW[Gbit/s]", "MsgRate[Mmsg/s]")
}

// printResult writes one size's line.
func printResult(w io.Writer, k proto.Kind, r sizeResult, duration bool) {
	if duration {
		columns(w, k)
	}
	if k.Latency() {
		l := r.lat
		fmt.Fprintf(w, "%10d %12d %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f\n", l.Bytes, l.Iterations, l.MinUS, l.P50US, l.P99US, l.P999US, l.MaxUS, l.MeanUS)
		retransmissions(w, r)
		return
	}
	b := r.bw
	fmt.Fprintf(w, "%10d %12d %12.3f %15.6f\n", b.Bytes, b.Iterations, b.Gbps, b.Mmsgs)
	retransmissions(w, r)
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
func printInterval(w io.Writer, k proto.Kind, iv interval) {
	span := fmt.Sprintf("%6.2f-%-6.2f sec", iv.StartS, iv.EndS)
	if k.Latency() {
		fmt.Fprintf(w, "[%8d B] %s %10d iterations   p50 %8.2f us   p99 %8.2f us   max %8.2f us\n", iv.Bytes, span, iv.Iterations, iv.P50US, iv.P99US, iv.MaxUS)
		return
	}
	fmt.Fprintf(w, "[%8d B] %s %10s  %8.3f Gbit/s  %10.6f Mmsg/s\n", iv.Bytes, span, humanBytes(uint64(iv.Iterations)*uint64(iv.Bytes)), iv.Gbps, iv.Mmsgs)
}
