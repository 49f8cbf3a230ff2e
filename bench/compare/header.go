package compare

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/xdpndk/xdpndk/bench/internal/report"
	"github.com/xdpndk/xdpndk/bench/tools"
)

// Config is the part of Options that shapes the figures: the Document's params.
type Config struct {
	Runs            int       `json:"runs"`
	Quick           bool      `json:"quick"`
	Systems         []string  `json:"systems"`
	Sizes           []int     `json:"sizes"`
	Iperf3Sizes     []int     `json:"iperf3_sizes"`
	SockperfSizes   []int     `json:"sockperf_sizes"`
	FabricSizes     []int     `json:"fabric_sizes"`
	CPUSizes        []int     `json:"cpu_sizes"`
	NdkpeerWindowMS int64     `json:"ndkpeer_window_ms"`
	ToolTimeS       float64   `json:"tool_time_s"`
	FabricTargetMS  int64     `json:"fabric_target_ms"`
	FabricCPUMS     int64     `json:"fabric_cpu_target_ms"`
	LinkWindowMS    int64     `json:"link_window_ms"`
	LinkWarmupMS    int64     `json:"link_warmup_ms"`
	LinkPingPongN   int       `json:"link_pingpong_n"`
	LoadTimeS       float64   `json:"load_time_s"`
	LoadBytes       int       `json:"load_bytes"`
	LongPath        bool      `json:"longpath"`
	LongPathRTTsMS  []float64 `json:"longpath_rtts_ms,omitempty"`
	LongPathOps     []string  `json:"longpath_ops,omitempty"`
	LongPathRuns    int       `json:"longpath_runs,omitempty"`
	LongPathS       float64   `json:"longpath_duration_s,omitempty"`
	LongPathSkipS   float64   `json:"longpath_skip_s,omitempty"`
	LongPathRateBps uint64    `json:"longpath_rate_bps,omitempty"`
	ElapsedS        float64   `json:"elapsed_s"`
}

// config returns o's Config.
func (o Options) config() Config {
	c := Config{
		Runs: o.Runs, Quick: o.Quick, Systems: slices.Clone(o.Systems), Sizes: slices.Clone(o.Sizes),
		Iperf3Sizes: slices.Clone(o.Iperf3Sizes), SockperfSizes: slices.Clone(o.SockperfSizes),
		FabricSizes: slices.Clone(o.FabricSizes), CPUSizes: slices.Clone(CPUSizes),
		NdkpeerWindowMS: o.NdkpeerWindow.Milliseconds(), ToolTimeS: o.ToolTime.Seconds(),
		FabricTargetMS: o.FabricTarget.Milliseconds(), FabricCPUMS: o.FabricCPUTarget.Milliseconds(),
		LinkWindowMS: o.LinkWindow.Milliseconds(), LinkWarmupMS: o.LinkWarmup.Milliseconds(),
		LinkPingPongN: o.LinkPingPongN, LoadTimeS: o.LoadTime.Seconds(), LoadBytes: LoadSize,
	}
	if o.LongPath {
		c.LongPath, c.LongPathOps, c.LongPathRuns = true, slices.Clone(o.LongPathOps), o.LongPathRuns
		for _, r := range o.LongPathRTTs {
			c.LongPathRTTsMS = append(c.LongPathRTTsMS, float64(r)/1e6)
		}
		c.LongPathS, c.LongPathSkipS, c.LongPathRateBps = o.LongPathDuration.Seconds(), o.LongPathSkip.Seconds(), o.LongPathRate
	}
	return c
}

// newResults assembles a run's results: the header (machine, bed, modes, params, the
// definitions and the run's notes), the records and the goals evaluated against them, then
// the goals evaluated elsewhere (the long paths').
func newResults(o Options, start time.Time, elapsed time.Duration, queues int, modes map[string]string, notes []string, records []report.Record, goals ...report.Goal) *Results {
	h := report.NewHeader(Tool)
	h.Time = start.UTC().Format(time.RFC3339)
	h.Bed = report.Bed{Link: "veth", MTU: 9000, Queues: queues,
		Detail: "two network namespaces, static neighbours; xdpndk and the raw xdpndk link on queue 0, each repetition's asavie/xdp sockets on a queue of their own"}
	h.Modes = maps.Clone(modes)
	cfg := o.config()
	cfg.ElapsedS = elapsed.Round(time.Second).Seconds()
	h.Params = report.ParamsOf(cfg)
	h.Notes = append(definitionNotes(o), notes...)
	records = sortRecords(records)
	return &Results{Header: h, Records: records, Goals: append(Evaluate(DefaultGoals(), records), goals...)}
}

// scenarioOrder is the order of the scenarios in the records (and so in the tables).
var scenarioOrder = []string{ScenarioPingPong, ScenarioLatency, ScenarioStream, ScenarioLoaded, ScenarioLongPath, ScenarioLongPathShared}

// sortRecords orders records by system (AllSystems), then scenario (scenarioOrder), each
// system's records of a scenario in the order they were measured: the Markdown table's
// columns and rows follow, whatever order the rotation measured the systems in.
func sortRecords(records []report.Record) []report.Record {
	rank := func(list []string, s string) int {
		if i := slices.Index(list, s); i >= 0 {
			return i
		}
		return len(list)
	}
	out := slices.Clone(records)
	slices.SortStableFunc(out, func(a, b report.Record) int {
		if c := rank(AllSystems, a.System) - rank(AllSystems, b.System); c != 0 {
			return c
		}
		return rank(scenarioOrder, a.Scenario) - rank(scenarioOrder, b.Scenario)
	})
	return out
}

// definitionNotes are the header notes that say what the figures are.
func definitionNotes(o Options) []string {
	sizes := func(s []int) string {
		var p []string
		for _, n := range s {
			p = append(p, sizeName(n))
		}
		return strings.Join(p, ", ")
	}
	var fab []string
	for what, why := range tools.FabricUnavailable {
		fab = append(fab, what+": "+why)
	}
	slices.Sort(fab)
	return []string{
		"hosts A (client, sender) and B (server, receiver) are network namespaces on one machine joined by a veth pair, MTU 9000; every system is measured in every repetition, " +
			"repetition r in the order of the first rotated by r places; value is the median over the repetitions, runs every repetition's value and reps its repetition",
		"size is the message size in bytes (the application's payload); the raw link's is the IP packet length (UDP payload = size - 28)",
		"pingpong: one message each way at a time, the round trip (a tool that prints half of it is doubled): ndkpeer send-lat (a Send answered by a Send), " +
			"the raw link's datagram echo, qperf tcp_lat, sockperf ping-pong, fi_pingpong; qperf and fi_pingpong print only a mean",
		"latency: xdpndk's Write and Read from post to completion (ndkpeer write-lat, read-lat: a Write completes when B acknowledged it)",
		"stream: one way as fast as it goes, what B received: ndkpeer send-bw, write-bw, read-bw (Gbit/s of payload), the raw link one-way (IP packets), " +
			"qperf tcp_bw -m SIZE, iperf3 -l SIZE (TCP keeps no message boundary: msg_per_s is bytes / SIZE), sockperf throughput",
		fmt.Sprintf("loaded: a %d B ping-pong while a %s stream runs beside it between the same hosts: xdpndk's Sends while 64 KiB Writes stream on another QP of the same adapters "+
			"(ndkpeer send-lat --load write:64K: one client process, whose one loop polls both QPs), TCP's qperf tcp_lat while iperf3 -l 64K streams over another connection",
			PingSize, sizeName(LoadSize)),
		"cpu_us_per_msg and cpu_cores (pingpong and stream, at " + sizes(CPUSizes) + "; sockperf at 65507 B for 64 KiB; the raw link at 64 and 9000 B): user+system CPU of both processes " +
			"(the raw link: of the one process that runs both hosts) per message delivered, each way (a round trip is two messages), and in cores; " +
			"each record's note says how it was measured; a polling system spends a whole core per side whatever the rate",
		fmt.Sprintf("sizes: xdpndk and qperf %s; iperf3 %s; sockperf %s (about 2 s of warm-up idle per run); fi_pingpong %s (about 0.1 s of CPU per process to start)",
			sizes(o.Sizes), sizes(o.Iperf3Sizes), sizes(o.SockperfSizes), sizes(o.FabricSizes)),
		"ndkpeer serve runs in B only during each xdpndk system's turn, not for the whole run: an XDP program on B's veth end put iperf3 at 10.6-20.5 Gbit/s against " +
			"26.6-32.8 Gbit/s without it (here, alternating), and the raw link attaches its own program",
		"libfabric: no bandwidth figure, Debian packages only fi_pingpong of fabtests (" + strings.Join(fab, "; ") + ")",
		"longpath, longpath-shared (params rtt_us, rate_gbit_per_s; size 0: ndkpeer's 64 KiB messages, iperf3's default writes): bench/longpath after the repetitions, on a routed bed " +
			"of its own whose router is a delay line (MTU 1500, a queue of one bandwidth-delay product): ndkpeer write-bw or read-bw against iperf3 (A to B, or -R) alone, " +
			"then both started together; its runs are the records' runs; goals: xdpndk alone >= 0.9 x iperf3 alone, sharing each >= 0.25 of the rate",
	}
}
