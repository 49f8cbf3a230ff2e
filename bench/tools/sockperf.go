package tools

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Message sizes sockperf accepts over UDP: its minimum (it carries a header of its own)
// and the largest UDP payload.
const (
	SockperfMinSize = 14
	SockperfMaxSize = 65507
)

// SockperfLatency is sockperf's latency distribution, in µs: as sockperf prints it (half
// the round trip), or doubled (the round trip).
type SockperfLatency struct {
	Avg    float64 `json:"avg"`
	StdDev float64 `json:"std_dev"`
	Min    float64 `json:"min"`
	P25    float64 `json:"p25"`
	P50    float64 `json:"p50"`
	P75    float64 `json:"p75"`
	P90    float64 `json:"p90"`
	P99    float64 `json:"p99"`
	P999   float64 `json:"p99_9"`
	P9999  float64 `json:"p99_99"`
	P99999 float64 `json:"p99_999"`
	Max    float64 `json:"max"`
}

// scaled returns l with every figure multiplied by k.
func (l SockperfLatency) scaled(k float64) SockperfLatency {
	return SockperfLatency{l.Avg * k, l.StdDev * k, l.Min * k, l.P25 * k, l.P50 * k, l.P75 * k, l.P90 * k,
		l.P99 * k, l.P999 * k, l.P9999 * k, l.P99999 * k, l.Max * k}
}

// SockperfPingPong is the result of `sockperf ping-pong` over UDP: the client sends one
// Size-byte message, waits for the server's echo, and repeats for a fixed time. sockperf
// discards a warm-up at the start and a cool-down at the end: its statistics cover the
// "valid duration".
type SockperfPingPong struct {
	// Size is the message size asked for (-m; sockperf's report does not repeat it), in
	// bytes: the UDP payload.
	Size int `json:"size"`
	// Polling is whether both sides ran with non-blocking sockets (--nonblocked), spinning
	// on recvfrom.
	Polling bool `json:"polling"`
	// RunSeconds, WarmupMS, Sent and Received are the [Total Run] line: the whole test,
	// warm-up included.
	RunSeconds float64 `json:"run_seconds"`
	WarmupMS   float64 `json:"warmup_ms"`
	Sent       int64   `json:"sent"`
	Received   int64   `json:"received"`
	// ValidSeconds, ValidSent and ValidReceived are the [Valid Duration] line: the part the
	// statistics cover.
	ValidSeconds  float64 `json:"valid_seconds"`
	ValidSent     int64   `json:"valid_sent"`
	ValidReceived int64   `json:"valid_received"`
	// ServerReceived is the server's "Total N messages received and handled", printed when
	// it is stopped: every request it got, warm-up included.
	ServerReceived int64 `json:"server_received"`
	// Observations is the number of round trips the percentiles are over.
	Observations int64 `json:"observations"`
	// Dropped, Duplicated and OutOfOrder are the messages sockperf counted as such.
	Dropped    int64 `json:"dropped"`
	Duplicated int64 `json:"duplicated"`
	OutOfOrder int64 `json:"out_of_order"`
	// Latency is sockperf's figures: half the round trip.
	Latency SockperfLatency `json:"latency_us"`
	// RTT is the round trip: Latency doubled (sockperf halves each measured round trip).
	RTT SockperfLatency `json:"rtt_us"`
	// Run is how it was run; Run.Usage.Messages is ServerReceived + Received: the requests
	// the server got and the replies the client got. Run.Usage.Window is the test phase
	// (from "Starting test..." to "Test end", warm-up included); its Messages is
	// 2 × Received (each reply received means its request was delivered).
	Run
}

// SockperfThroughput is the result of `sockperf throughput` over UDP: the client sends
// Size-byte messages as fast as it can for a fixed time; the server counts them.
type SockperfThroughput struct {
	// Size is the message size asked for (-m), in bytes: the UDP payload.
	Size int `json:"size"`
	// Polling is whether both sides ran with non-blocking sockets (--nonblocked).
	Polling bool `json:"polling"`
	// Sent and SendSeconds are the client's "Total of N messages sent in T sec".
	Sent        int64   `json:"sent"`
	SendSeconds float64 `json:"send_seconds"`
	// SendRate is the client's "Message Rate" in messages per second: what it sent, not
	// what arrived.
	SendRate float64 `json:"send_rate"`
	// SendMBps is the client's "BandWidth" in MB per second, as printed (sockperf's MB is
	// 2^20 bytes), of what it sent.
	SendMBps float64 `json:"send_mbytes_per_s"`
	// Received is the server's "Total N messages received and handled", printed when it
	// is stopped: warm-up messages included.
	Received int64 `json:"received"`
	// Run is how it was run; Run.Usage.Messages is Received, and so is the Messages of
	// Run.Usage.Window, the test phase (the few warm-up messages, sent before it, are
	// counted in it too).
	Run
}

// ReceivedRate is Received / SendSeconds: the messages the server got per second of the
// client's test (a few warm-up messages included).
func (t *SockperfThroughput) ReceivedRate() float64 {
	if t.SendSeconds <= 0 {
		return 0
	}
	return float64(t.Received) / t.SendSeconds
}

var (
	spTotalRun  = regexp.MustCompile(`\[Total Run\] RunTime=([0-9.]+) sec; Warm up time=([0-9.]+) msec; SentMessages=([0-9]+); ReceivedMessages=([0-9]+)`)
	spValid     = regexp.MustCompile(`\[Valid Duration\] RunTime=([0-9.]+) sec; SentMessages=([0-9]+); ReceivedMessages=([0-9]+)`)
	spAvg       = regexp.MustCompile(`avg-latency=([0-9.]+) \(std-dev=([0-9.]+)\)`)
	spSummary   = regexp.MustCompile(`Summary: (\S+(?: \S+)*) is ([0-9.]+) usec`)
	spCounts    = regexp.MustCompile(`# dropped messages = ([0-9]+); # duplicated messages = ([0-9]+); # out-of-order messages = ([0-9]+)`)
	spObs       = regexp.MustCompile(`Total ([0-9]+) observations`)
	spPct       = regexp.MustCompile(`---> percentile ([0-9.]+) = *([0-9.]+)`)
	spExtreme   = regexp.MustCompile(`---> <(MIN|MAX)> observation = *([0-9.]+)`)
	spSent      = regexp.MustCompile(`Total of ([0-9]+) messages sent in ([0-9.]+) sec`)
	spRate      = regexp.MustCompile(`Summary: Message Rate is ([0-9.]+) \[msg/sec\]`)
	spBandwidth = regexp.MustCompile(`Summary: BandWidth is ([0-9.]+) MBps`)
	spHandled   = regexp.MustCompile(`Total ([0-9]+) messages received and handled`)
)

// sockperfText is sockperf's output without colour codes.
type sockperfText string

// find returns the submatches of re in t as numbers, or an error naming what is missing.
func (t sockperfText) find(re *regexp.Regexp, what string) ([]float64, error) {
	m := re.FindStringSubmatch(string(t))
	if m == nil {
		return nil, fmt.Errorf("sockperf printed no %s%s", what, t.complaint())
	}
	v := make([]float64, len(m)-1)
	for i, s := range m[1:] {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("sockperf %s: %q: %w", what, s, err)
		}
		v[i] = f
	}
	return v, nil
}

// complaint returns what sockperf said went wrong, if it said something (": " first), or "".
func (t sockperfText) complaint() string {
	var said []string
	for _, l := range strings.Split(string(t), "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "sockperf:"))
		low := strings.ToLower(l)
		if strings.Contains(low, "error") || strings.Contains(low, "no messages") || strings.Contains(low, "invalid") ||
			strings.Contains(low, "should have") || strings.Contains(low, "must be") || strings.Contains(low, "failed") {
			said = append(said, l)
		}
	}
	if len(said) == 0 {
		return ""
	}
	return ": " + strings.Join(said, "; ")
}

// ParseSockperfPingPong parses the client's and the server's output of a `sockperf
// ping-pong` test: the client's totals, average, percentiles 25 to 99.999, minimum and
// maximum, and the count the server printed when stopped, all required. Size, Polling and
// Run are left for the caller.
func ParseSockperfPingPong(client, server []byte) (*SockperfPingPong, error) {
	t := sockperfText(stripANSI(string(client)))
	if c := t.complaint(); c != "" && strings.Contains(c, "No messages") {
		return nil, errors.New("sockperf" + c)
	}
	r := &SockperfPingPong{}
	var errs []error
	need := func(re *regexp.Regexp, what string) []float64 {
		v, err := t.find(re, what)
		if err != nil {
			errs = append(errs, err)
			return make([]float64, re.NumSubexp())
		}
		return v
	}
	v := need(spTotalRun, "[Total Run] line")
	r.RunSeconds, r.WarmupMS, r.Sent, r.Received = v[0], v[1], int64(v[2]), int64(v[3])
	v = need(spValid, "[Valid Duration] line")
	r.ValidSeconds, r.ValidSent, r.ValidReceived = v[0], int64(v[1]), int64(v[2])
	v = need(spAvg, "avg-latency")
	r.Latency.Avg, r.Latency.StdDev = v[0], v[1]
	v = need(spCounts, "dropped/duplicated/out-of-order counts")
	r.Dropped, r.Duplicated, r.OutOfOrder = int64(v[0]), int64(v[1]), int64(v[2])
	r.Observations = int64(need(spObs, "observation count")[0])
	if v, err := sockperfText(stripANSI(string(server))).find(spHandled, "count of messages received (server)"); err == nil {
		r.ServerReceived = int64(v[0])
	} else {
		errs = append(errs, err)
	}
	if m := spSummary.FindStringSubmatch(string(t)); m != nil && m[1] != "Latency" {
		// --full-rtt prints the round trip; the halving below would then be wrong.
		errs = append(errs, fmt.Errorf("sockperf summarised %q, not the latency (half round trip)", m[1]))
	}
	pct := map[string]*float64{"25.000": &r.Latency.P25, "50.000": &r.Latency.P50, "75.000": &r.Latency.P75,
		"90.000": &r.Latency.P90, "99.000": &r.Latency.P99, "99.900": &r.Latency.P999, "99.990": &r.Latency.P9999,
		"99.999": &r.Latency.P99999}
	seen := map[string]bool{}
	for _, m := range spPct.FindAllStringSubmatch(string(t), -1) {
		if p, ok := pct[m[1]]; ok {
			f, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				errs = append(errs, fmt.Errorf("sockperf percentile %s: %w", m[1], err))
			}
			*p, seen[m[1]] = f, true
		}
	}
	for _, m := range spExtreme.FindAllStringSubmatch(string(t), -1) {
		f, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("sockperf %s: %w", m[1], err))
		}
		if m[1] == "MIN" {
			r.Latency.Min = f
		} else {
			r.Latency.Max = f
		}
		seen[m[1]] = true
	}
	keys := append([]string{"MIN", "MAX"}, mapKeys(pct)...)
	for _, k := range keys {
		if !seen[k] {
			what := "percentile " + k
			if k == "MIN" || k == "MAX" {
				what = "<" + k + "> observation"
			}
			errs = append(errs, fmt.Errorf("sockperf printed no %s%s", what, t.complaint()))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if r.Received <= 0 || r.ServerReceived <= 0 || r.Observations <= 0 || !(r.Latency.P50 > 0) {
		return nil, fmt.Errorf("sockperf: %d requests received, %d replies, %d observations, median %v µs: no measurement",
			r.ServerReceived, r.Received, r.Observations, r.Latency.P50)
	}
	r.RTT = r.Latency.scaled(2)
	return r, nil
}

// mapKeys returns m's keys, sorted.
func mapKeys[V any](m map[string]V) []string {
	k := make([]string, 0, len(m))
	for s := range m {
		k = append(k, s)
	}
	slices.Sort(k)
	return k
}

// ParseSockperfThroughput parses the client's and the server's output of a `sockperf
// throughput` test: the client's totals, rate and bandwidth, and the count the server
// printed when stopped, all required. Size, Polling and Run are left for the caller.
func ParseSockperfThroughput(client, server []byte) (*SockperfThroughput, error) {
	c := sockperfText(stripANSI(string(client)))
	s := sockperfText(stripANSI(string(server)))
	r := &SockperfThroughput{}
	var errs []error
	if v, err := c.find(spSent, "count of messages sent"); err == nil {
		r.Sent, r.SendSeconds = int64(v[0]), v[1]
	} else {
		errs = append(errs, err)
	}
	if v, err := c.find(spRate, "message rate"); err == nil {
		r.SendRate = v[0]
	} else {
		errs = append(errs, err)
	}
	if v, err := c.find(spBandwidth, "bandwidth"); err == nil {
		r.SendMBps = v[0]
	} else {
		errs = append(errs, err)
	}
	if v, err := s.find(spHandled, "count of messages received (server)"); err == nil {
		r.Received = int64(v[0])
	} else {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if r.Sent <= 0 || r.Received <= 0 || !(r.SendSeconds > 0) {
		return nil, fmt.Errorf("sockperf: %d messages sent, %d received in %v s: no measurement", r.Sent, r.Received, r.SendSeconds)
	}
	return r, nil
}
