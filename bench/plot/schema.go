package main

import (
	"encoding/json"
	"fmt"
	"os"
)

// The part of the results schema this command reads: a copy of what it needs of the types
// of bench/internal/report in the main module (an internal package, which another module
// cannot import). plot_test.go checks them against the sample document report writes
// (bench/internal/report/testdata/sample.json): every field here has the JSON name and
// type the schema gives it.

// schemaVersion is the version of the schema this copy follows (report.SchemaVersion).
const schemaVersion = 1

// document is report.Document without its goals.
type document struct {
	SchemaVersion int      `json:"schema_version"`
	Header        header   `json:"header"`
	Records       []record `json:"records"`
	Sources       []header `json:"sources,omitempty"`
}

// header is report.Header without its modes, params and notes.
type header struct {
	Tool     string   `json:"tool"`
	Benches  []string `json:"benches,omitempty"`
	Version  string   `json:"version"`
	Commit   string   `json:"commit"`
	Modified bool     `json:"modified"`
	Time     string   `json:"time"`
	Host     string   `json:"host"`
	Kernel   string   `json:"kernel"`
	CPU      string   `json:"cpu"`
	CPUs     int      `json:"cpus"`
	Go       string   `json:"go"`
	Bed      bed      `json:"bed"`
}

// bed is report.Bed.
type bed struct {
	Link   string `json:"link"`
	MTU    int    `json:"mtu"`
	Queues int    `json:"queues"`
	Detail string `json:"detail,omitempty"`
}

// record is report.Record without its reps.
type record struct {
	Bench     string             `json:"bench"`
	Scenario  string             `json:"scenario"`
	System    string             `json:"system"`
	Operation string             `json:"operation"`
	Size      int                `json:"size"`
	Params    map[string]float64 `json:"params,omitempty"`
	Metric    string             `json:"metric"`
	Unit      string             `json:"unit"`
	Value     float64            `json:"value"`
	Runs      []float64          `json:"runs"`
	Note      string             `json:"note,omitempty"`
}

// The shared metrics this command plots (report's Metric* constants).
const (
	metricRTTP50 = "rtt_p50_us"
	metricRTTAvg = "rtt_mean_us"
	metricMsg    = "msg_per_s"
	metricGbps   = "gbit_per_s"
	metricCPUMsg = "cpu_us_per_msg"
)

// readDocument reads a results document, refusing another schema version.
func readDocument(path string) (*document, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d document
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("decode %s: %w", path, err)
	}
	if d.SchemaVersion != schemaVersion {
		return nil, fmt.Errorf("%s: schema version %d, this command reads %d", path, d.SchemaVersion, schemaVersion)
	}
	return &d, nil
}
