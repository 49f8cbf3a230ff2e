package longpath

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
)

// Fixed parameters.
const (
	// MTU of every veth end.
	MTU = 1500
	// MessageSize is ndkpeer's message size (-s).
	MessageSize = 64 << 10
	// NDKPort is ndkpeer's UDP port, IperfPort iperf3's TCP port.
	NDKPort   = 4793
	IperfPort = 5201
)

// Goal thresholds.
const (
	GoalAlone  = 0.9  // ndk alone / tcp alone
	GoalShared = 0.25 // each flow's share of the rate when sharing
)

// Options configures Run. Start from DefaultOptions.
type Options struct {
	// RTTs are the round trips of the paths (the delay line's one-way delay is half).
	RTTs []time.Duration
	// Rate is the delay line's rate in bit/s; QueueBytes its queue (0: one BDP of the
	// round trip).
	Rate       uint64
	QueueBytes int
	// Ops are "write" (write-bw, iperf3 A to B) and "read" (read-bw, iperf3 -R).
	Ops []string
	// Runs is how many times every measurement is repeated (medians reported).
	Runs int
	// Duration of every run (whole seconds); Skip is cut from its start.
	Duration, Skip time.Duration
	// Ndkpeer is the ndkpeer binary; Depth, if not 0, is passed as -t.
	Ndkpeer string
	Depth   int
	// Progress, if not nil, gets a line per measurement.
	Progress io.Writer
}

// DefaultOptions: 2 ms and 10 ms at 1 Gbit/s, write and read, 3 runs of 8 s, the first
// 2 s cut: about 8 minutes.
func DefaultOptions() Options {
	return Options{RTTs: []time.Duration{2 * time.Millisecond, 10 * time.Millisecond}, Rate: 1e9,
		Ops: []string{"write", "read"}, Runs: 3, Duration: 8 * time.Second, Skip: 2 * time.Second}
}

// ErrInvalidOptions is wrapped by the errors Run returns for bad Options.
var ErrInvalidOptions = errors.New("invalid longpath options")

func (o Options) validate() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: %s", ErrInvalidOptions, fmt.Sprintf(f, a...)) }
	switch {
	case len(o.RTTs) == 0:
		return bad("no round trip")
	case o.Runs < 1 || o.Runs > 10:
		return bad("runs %d not in [1, 10]", o.Runs)
	case o.Duration < 2*time.Second || o.Duration > time.Minute || o.Duration%time.Second != 0:
		return bad("duration %v not whole seconds in [2s, 1m]", o.Duration)
	case o.Skip < 0 || o.Skip > o.Duration-time.Second:
		return bad("skip %v leaves less than a second of %v", o.Skip, o.Duration)
	case o.Ndkpeer == "":
		return bad("no ndkpeer binary")
	case o.Depth < 0 || o.Depth > 2048:
		return bad("depth %d not in [0, 2048]", o.Depth)
	}
	for _, r := range o.RTTs {
		if r < 0 || r > time.Second {
			return bad("round trip %v not in [0, 1s]", r)
		}
	}
	for _, op := range o.Ops {
		if op != "write" && op != "read" {
			return bad("op %q: write or read", op)
		}
	}
	return nil
}

// Figure is one measured quantity at one path: its runs and their median.
type Figure struct {
	RTTMS    float64   `json:"rtt_ms"`
	Op       string    `json:"op"`       // write, read
	Scenario string    `json:"scenario"` // alone, shared
	System   string    `json:"system"`   // ndk, tcp
	Metric   string    `json:"metric"`   // gbps, retransmits, ...
	Median   float64   `json:"median"`
	Runs     []float64 `json:"runs"`
}

// Goal is one goal and whether it was met.
type Goal struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Target float64 `json:"target"`
	Met    bool    `json:"met"`
}

// Results are a Run's figures.
type Results struct {
	Date    string     `json:"date"`
	Options OptionsDoc `json:"options"`
	Paths   []PathDoc  `json:"paths"`
	Figures []Figure   `json:"figures"`
	Goals   []Goal     `json:"goals"`
	Notes   []string   `json:"notes"`
}

// OptionsDoc records the options in the results.
type OptionsDoc struct {
	RateBps     uint64  `json:"rate_bps"`
	QueueBytes  int     `json:"queue_bytes"`
	MTU         int     `json:"mtu"`
	Runs        int     `json:"runs"`
	DurationS   float64 `json:"duration_s"`
	SkipS       float64 `json:"skip_s"`
	MessageSize int     `json:"message_size"`
	Depth       int     `json:"ndkpeer_depth"` // 0: ndkpeer's default
}

// PathDoc is what was measured of one path before the runs: ping's round trip.
type PathDoc struct {
	RTTMS       float64 `json:"rtt_ms"`
	PingP50MS   float64 `json:"ping_p50_ms"`
	PingP99MS   float64 `json:"ping_p99_ms"`
	QueueBytes  int     `json:"queue_bytes"`
	LineDropped uint64  `json:"line_dropped"` // both directions' queue drops over every run
}

// add records run values of a figure (appending to an existing one).
func (r *Results) add(rtt time.Duration, op, sc, sys, metric string, v float64) {
	ms := float64(rtt) / 1e6
	for i := range r.Figures {
		f := &r.Figures[i]
		if f.RTTMS == ms && f.Op == op && f.Scenario == sc && f.System == sys && f.Metric == metric {
			f.Runs = append(f.Runs, v)
			f.Median = median(f.Runs)
			return
		}
	}
	r.Figures = append(r.Figures, Figure{RTTMS: ms, Op: op, Scenario: sc, System: sys, Metric: metric, Median: v, Runs: []float64{v}})
}

// Get returns a figure's median.
func (r *Results) Get(rttMS float64, op, sc, sys, metric string) (float64, bool) {
	for _, f := range r.Figures {
		if f.RTTMS == rttMS && f.Op == op && f.Scenario == sc && f.System == sys && f.Metric == metric {
			return f.Median, true
		}
	}
	return 0, false
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// evaluate fills r.Goals from the figures: per path and op, ndk alone / tcp alone
// (medians of the per-run ratios) and each flow's share when sharing.
func (r *Results) evaluate(rate uint64) {
	r.Goals = nil
	for _, p := range r.Paths {
		for _, op := range []string{"write", "read"} {
			if v, ok := r.Get(p.RTTMS, op, "alone", "ndk", "ratio_to_tcp"); ok {
				r.Goals = append(r.Goals, Goal{Name: fmt.Sprintf("%g ms %s: ndk alone / tcp alone", p.RTTMS, op), Value: v, Target: GoalAlone, Met: v >= GoalAlone})
			}
			for _, sys := range []string{"ndk", "tcp"} {
				if v, ok := r.Get(p.RTTMS, op, "shared", sys, "gbps"); ok {
					s := v * 1e9 / float64(rate)
					r.Goals = append(r.Goals, Goal{Name: fmt.Sprintf("%g ms %s: %s's share when sharing", p.RTTMS, op, sys), Value: s, Target: GoalShared, Met: s >= GoalShared})
				}
			}
		}
	}
}

// Print writes the figures and goals as a table.
func (r *Results) Print(w io.Writer) {
	fmt.Fprintf(w, "%-7s %-6s %-7s %-4s %-14s %10s  runs\n", "rtt", "op", "scen", "sys", "metric", "median")
	for _, f := range r.Figures {
		fmt.Fprintf(w, "%-7s %-6s %-7s %-4s %-14s %10.3f  %v\n", fmt.Sprintf("%gms", f.RTTMS), f.Op, f.Scenario, f.System, f.Metric, f.Median, f.Runs)
	}
	for _, g := range r.Goals {
		v := "met"
		if !g.Met {
			v = "NOT met"
		}
		fmt.Fprintf(w, "goal %-42s %.3f (>= %.2f) %s\n", g.Name, g.Value, g.Target, v)
	}
}

// ndkDoc is the part of ndkpeer's --json document read here.
type ndkDoc struct {
	Params struct {
		TxDepth int `json:"tx_depth"`
	} `json:"params"`
	Bandwidth []struct {
		Gbps        float64 `json:"gbit_per_s"`
		Outstanding int     `json:"outstanding"`
		Retransmits uint64  `json:"retransmits"`
		Causes      Causes  `json:"retransmit_causes"`
	} `json:"bandwidth"`
	Intervals []struct {
		StartS float64 `json:"start_s"`
		EndS   float64 `json:"end_s"`
		Gbps   float64 `json:"gbit_per_s"`
	} `json:"intervals"`
}

// ival is one interval report of a tool: [start, end) seconds and its rate in Gbit/s.
type ival struct{ start, end, gbps float64 }

// average returns the time-weighted mean rate of the intervals that lie within [from, to]
// (10 ms of slack at each end).
func average(ivs []ival, from, to float64) (float64, bool) {
	var sum, span float64
	for _, iv := range ivs {
		if iv.start+0.01 < from || iv.end-0.01 > to || iv.end <= iv.start {
			continue
		}
		sum += iv.gbps * (iv.end - iv.start)
		span += iv.end - iv.start
	}
	if span == 0 {
		return 0, false
	}
	return sum / span, true
}

// Causes is why ndkpeer's client QPs retransmitted (its --json retransmit_causes):
// packets found lost, sent by the timer and after an RNR wait, and tail probes; the
// timeouts, the spurious ones among them, and the probes that were needless.
type Causes struct {
	Loss             uint64 `json:"loss"`
	Timer            uint64 `json:"timer"`
	Timeouts         uint64 `json:"timeouts"`
	SpuriousTimeouts uint64 `json:"spurious_timeouts"`
	TailProbes       uint64 `json:"tail_probes"`
	NeedlessProbes   uint64 `json:"needless_probes"`
	RNR              uint64 `json:"rnr"`
}

// String says the causes in a few words, for progress lines.
func (c Causes) String() string {
	return fmt.Sprintf("loss %d, timer %d in %d timeouts (%d spurious), %d tail probes (%d needless), rnr %d",
		c.Loss, c.Timer, c.Timeouts, c.SpuriousTimeouts, c.TailProbes, c.NeedlessProbes, c.RNR)
}

// ndkResult is what one ndkpeer run gave.
type ndkResult struct {
	gbps        float64 // over the window
	outstanding int
	retransmits uint64
	causes      Causes
	ivs         []ival
}

// parseNDK decodes ndkpeer's --json and averages its intervals within [from, to] s.
func parseNDK(out []byte, from, to float64) (ndkResult, error) {
	var d ndkDoc
	if err := json.Unmarshal(out, &d); err != nil {
		return ndkResult{}, fmt.Errorf("decode ndkpeer's --json: %w", err)
	}
	if len(d.Bandwidth) != 1 {
		return ndkResult{}, fmt.Errorf("ndkpeer reported %d bandwidth results, want 1", len(d.Bandwidth))
	}
	b := d.Bandwidth[0]
	r := ndkResult{outstanding: b.Outstanding, retransmits: b.Retransmits, causes: b.Causes}
	for _, iv := range d.Intervals {
		r.ivs = append(r.ivs, ival{iv.StartS, iv.EndS, iv.Gbps})
	}
	g, ok := average(r.ivs, from, to)
	if !ok {
		return ndkResult{}, fmt.Errorf("ndkpeer reported no interval within [%g, %g] s", from, to)
	}
	r.gbps = g
	return r, nil
}

// iperfResult is what one iperf3 client run gave.
type iperfResult struct {
	gbps        float64 // over the window
	retransmits uint64  // the sender's (iperf3's sum_sent.retransmits)
	ivs         []ival
}

// parseIperf decodes an iperf3 client's -J output and averages its intervals within
// [from, to] s: the bytes the client wrote (A to B) or, with -R, received.
func parseIperf(out []byte, from, to float64) (iperfResult, error) {
	var v struct {
		Intervals []struct {
			Sum struct {
				Start float64 `json:"start"`
				End   float64 `json:"end"`
				Bytes uint64  `json:"bytes"`
			} `json:"sum"`
		} `json:"intervals"`
		End struct {
			SumSent struct {
				Retransmits uint64 `json:"retransmits"`
			} `json:"sum_sent"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return iperfResult{}, fmt.Errorf("decode iperf3's -J: %w", err)
	}
	if v.Error != "" {
		return iperfResult{}, fmt.Errorf("iperf3: %s", v.Error)
	}
	r := iperfResult{retransmits: v.End.SumSent.Retransmits}
	for _, iv := range v.Intervals {
		if s := iv.Sum; s.End > s.Start {
			r.ivs = append(r.ivs, ival{s.Start, s.End, float64(s.Bytes) * 8 / (s.End - s.Start) / 1e9})
		}
	}
	g, ok := average(r.ivs, from, to)
	if !ok {
		return iperfResult{}, fmt.Errorf("iperf3 reported no interval within [%g, %g] s", from, to)
	}
	r.gbps = g
	return r, nil
}

// lineSample is the delay line's TCP and UDP bytes forwarded in one direction at t.
type lineSample struct {
	t        time.Time
	tcp, udp uint64
}

// sharedRates returns the rates (Gbit/s of Ethernet frames) of TCP and UDP over the
// window from the first sample after which both were carried, plus skip, to the last
// sample before either stopped, and the window's length in seconds.
func sharedRates(s []lineSample, skip time.Duration) (tcp, udp, span float64, ok bool) {
	first, last := -1, -1
	for i := 1; i < len(s); i++ {
		if s[i].tcp > s[i-1].tcp && s[i].udp > s[i-1].udp {
			if first < 0 {
				first = i - 1
			}
			last = i
		}
	}
	if first < 0 {
		return 0, 0, 0, false
	}
	from := first
	for from < last && s[from].t.Sub(s[first].t) < skip {
		from++
	}
	if from >= last {
		return 0, 0, 0, false
	}
	dt := s[last].t.Sub(s[from].t).Seconds()
	return float64(s[last].tcp-s[from].tcp) * 8 / dt / 1e9, float64(s[last].udp-s[from].udp) * 8 / dt / 1e9, dt, true
}
