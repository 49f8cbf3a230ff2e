package tools

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Iperf3CPU is iperf3's own CPU report (end.cpu_utilization_percent): each process's
// getrusage user and system time over the test's wall time, in percent of one CPU. Host is
// the client, Remote the server.
type Iperf3CPU struct {
	HostTotal    float64 `json:"host_total"`
	HostUser     float64 `json:"host_user"`
	HostSystem   float64 `json:"host_system"`
	RemoteTotal  float64 `json:"remote_total"`
	RemoteUser   float64 `json:"remote_user"`
	RemoteSystem float64 `json:"remote_system"`
}

// Iperf3 is the result of one iperf3 TCP test from A to B (bulk transfer for a fixed time,
// Streams connections, each writing Size bytes per write).
type Iperf3 struct {
	// Version is iperf3's version as its report says (start.version).
	Version string `json:"version"`
	// Streams is the number of connections (start.test_start.num_streams).
	Streams int `json:"streams"`
	// Size is the length of each write (-l; start.test_start.blksize), in bytes.
	Size int `json:"size"`
	// Congestion and ReceiverCongestion are the sender's and the receiver's TCP congestion
	// control (end.sender_tcp_congestion, end.receiver_tcp_congestion).
	Congestion         string `json:"congestion"`
	ReceiverCongestion string `json:"receiver_congestion"`
	// SentBytes, SentSeconds and SentBPS are end.sum_sent: what all streams sent, over how
	// long, in bits per second.
	SentBytes   int64   `json:"sent_bytes"`
	SentSeconds float64 `json:"sent_seconds"`
	SentBPS     float64 `json:"sent_bits_per_s"`
	// Retransmits is end.sum_sent.retransmits: TCP segments retransmitted.
	Retransmits int64 `json:"retransmits"`
	// ReceivedBytes, ReceivedSeconds and ReceivedBPS are end.sum_received: what the server
	// received — the goodput.
	ReceivedBytes   int64   `json:"received_bytes"`
	ReceivedSeconds float64 `json:"received_seconds"`
	ReceivedBPS     float64 `json:"received_bits_per_s"`
	// CPU is iperf3's CPU report of both processes.
	CPU Iperf3CPU `json:"cpu"`
	// Run is how it was run; Run.Usage.Messages is ReceivedBytes / Size: the Size-byte
	// writes whose bytes were delivered (TCP keeps no message boundary).
	Run
}

// ParseIperf3 parses an iperf3 client's JSON report (-J). A report with an "error" member
// (iperf3 can exit 0 after "unable to connect") or without the end sums is an error.
func ParseIperf3(out []byte) (*Iperf3, error) {
	var v struct {
		Start struct {
			Version   string `json:"version"`
			TestStart *struct {
				Protocol   string `json:"protocol"`
				NumStreams int    `json:"num_streams"`
				Blksize    int    `json:"blksize"`
			} `json:"test_start"`
		} `json:"start"`
		End struct {
			SumSent *struct {
				Seconds       float64 `json:"seconds"`
				Bytes         int64   `json:"bytes"`
				BitsPerSecond float64 `json:"bits_per_second"`
				Retransmits   *int64  `json:"retransmits"`
			} `json:"sum_sent"`
			SumReceived *struct {
				Seconds       float64 `json:"seconds"`
				Bytes         int64   `json:"bytes"`
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
			CPU                *Iperf3CPU `json:"cpu_utilization_percent"`
			SenderCongestion   string     `json:"sender_tcp_congestion"`
			ReceiverCongestion string     `json:"receiver_tcp_congestion"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return nil, fmt.Errorf("decode the iperf3 client's report: %w", err)
	}
	if v.Error != "" {
		return nil, fmt.Errorf("iperf3: %s", v.Error)
	}
	ts, e := v.Start.TestStart, v.End
	switch {
	case ts == nil:
		return nil, errors.New("iperf3 report has no start.test_start")
	case ts.Protocol != "TCP":
		return nil, fmt.Errorf("iperf3 report is of a %q test, not TCP", ts.Protocol)
	case e.SumSent == nil || e.SumReceived == nil:
		return nil, errors.New("iperf3 report has no end.sum_sent or end.sum_received")
	case e.SumSent.Retransmits == nil:
		return nil, errors.New("iperf3 report has no end.sum_sent.retransmits")
	case e.CPU == nil:
		return nil, errors.New("iperf3 report has no end.cpu_utilization_percent")
	case ts.NumStreams < 1 || ts.Blksize < 1:
		return nil, fmt.Errorf("iperf3 report: %d streams of %d-byte writes", ts.NumStreams, ts.Blksize)
	case !(e.SumReceived.Bytes > 0 && e.SumReceived.Seconds > 0 && e.SumReceived.BitsPerSecond > 0):
		return nil, fmt.Errorf("iperf3: the server received %d bytes in %v s: no measurement", e.SumReceived.Bytes, e.SumReceived.Seconds)
	}
	return &Iperf3{
		Version:            v.Start.Version,
		Streams:            ts.NumStreams,
		Size:               ts.Blksize,
		Congestion:         e.SenderCongestion,
		ReceiverCongestion: e.ReceiverCongestion,
		SentBytes:          e.SumSent.Bytes,
		SentSeconds:        e.SumSent.Seconds,
		SentBPS:            e.SumSent.BitsPerSecond,
		Retransmits:        *e.SumSent.Retransmits,
		ReceivedBytes:      e.SumReceived.Bytes,
		ReceivedSeconds:    e.SumReceived.Seconds,
		ReceivedBPS:        e.SumReceived.BitsPerSecond,
		CPU:                *e.CPU,
	}, nil
}
