package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
)

// SchemaVersion is the version of the Document format that WriteJSON writes. It changes
// when a field is renamed or removed or its meaning changes; a new optional field does not
// change it.
const SchemaVersion = 1

// Document is what every benchmark command writes (bench/out/<bench>.json) and what
// Merge makes of several of them (bench/out/results.json): a header saying where, when and
// how, one Record per measured figure, and the goals evaluated against them.
type Document struct {
	// SchemaVersion is the SchemaVersion the document was written with.
	SchemaVersion int `json:"schema_version"`
	// Header describes the run: the command, the build, the machine, the test bed.
	Header Header `json:"header"`
	// Records are the figures, in the order the command measured them.
	Records []Record `json:"records"`
	// Goals are every goal of the run, met or not, required or only reported.
	Goals []Goal `json:"goals"`
	// Sources are the headers of the documents a merged document was made of (Merge),
	// in order; empty for a single command's document.
	Sources []Header `json:"sources,omitempty"`
}

// Header describes where, when and how the figures of a Document were measured.
type Header struct {
	// Tool is the command that wrote the document (linkbench, transportbench, ndkbench,
	// pathbench), or "merge" for a merged document.
	Tool string `json:"tool"`
	// Benches are the tools of a merged document's sources, in order.
	Benches []string `json:"benches,omitempty"`
	Build
	// Time is when the run started, RFC 3339 in UTC.
	Time string `json:"time"`
	Host
	// Bed is the test bed the figures were measured on.
	Bed Bed `json:"bed"`
	// Modes maps a system to what it ran with (XDP and AF_XDP modes, progress mode, ...).
	Modes map[string]string `json:"modes,omitempty"`
	// Params are the command's options that shape the figures (its own names and units).
	Params map[string]any `json:"params,omitempty"`
	// Notes are definitions and anything unusual; a failed measurement's note starts with
	// "FAILED: " (FailedNote).
	Notes []string `json:"notes"`
}

// Build identifies the xdpndk code that measured.
type Build struct {
	// Version is the main module's version from debug.ReadBuildInfo: "(devel)" for a
	// build in a checkout without VCS stamping, a pseudo-version with it.
	Version string `json:"version"`
	// Commit is the VCS revision (vcs.revision of the build info, else what git says in the
	// working directory), "" if unknown.
	Commit string `json:"commit"`
	// Modified reports uncommitted changes to tracked files at build time (vcs.modified).
	Modified bool `json:"modified"`
}

// String describes b: "commit 0123456789ab", with " (version v1.2.3)" for a released
// version and " with uncommitted changes" when Modified.
func (b Build) String() string {
	s := "an unknown commit"
	if b.Commit != "" {
		s = "commit " + b.Commit[:min(12, len(b.Commit))]
	}
	if b.Version != "" && b.Version != "(devel)" && b.Version != "unknown" {
		s += " (version " + b.Version + ")"
	}
	if b.Modified {
		s += " with uncommitted changes"
	}
	return s
}

// Bed describes the test bed: the link between the hosts and its configuration.
type Bed struct {
	// Link is the kind of link: "veth" (two network namespaces), "simlink" (the simulated
	// network of transport/simlink, virtual time), a NIC's driver name, or "mixed" for a
	// merged document whose sources differ (their headers say).
	Link string `json:"link"`
	// MTU is the link's MTU in bytes.
	MTU int `json:"mtu"`
	// Queues is the number of queues per link end.
	Queues int `json:"queues"`
	// Detail says what else shapes the path: a router, a bottleneck, injected loss.
	Detail string `json:"detail,omitempty"`
}

// Record is one measured figure: one metric of one system doing one operation at one
// size, in one scenario of one bench; Value is the median of Runs.
type Record struct {
	// Bench is the command that measured it (the Tool of its document's header).
	Bench string `json:"bench"`
	// Scenario is the part of the bench: "oneway", "pingpong", "latency", "msgrate",
	// "goodput", a congestion scenario, ...
	Scenario string `json:"scenario"`
	// System is what was measured: "raw-xdpndk", "raw-asavie", "xdpndk-inline",
	// "kernel-tcp", "iperf3-tcp", a retransmission mode, a ratio's name, ...
	System string `json:"system"`
	// Operation is what was timed: "send", "ping-pong", "send/recv", "write", "read", ...
	Operation string `json:"operation"`
	// Size is the message size in bytes (what it counts, for instance the IP packet or the
	// payload, is the bench's to say in its notes); 0 when there is none.
	Size int `json:"size"`
	// Params are the other conditions of the figure besides its size, by name with the
	// unit in the name: "loss_pct" (random loss of each direction), "rtt_us", "flows".
	Params map[string]float64 `json:"params,omitempty"`
	// Metric names the figure; the shared ones are the Metric* constants, whose names end
	// in their unit. A bench's own metrics keep the bench's names.
	Metric string `json:"metric"`
	// Unit is Value's unit: "us", "msg/s", "Gbit/s", "%", "count", "1" (a ratio), ...
	Unit string `json:"unit"`
	// Value is the median of Runs (for a ratio of medians, that ratio).
	Value float64 `json:"value"`
	// Runs holds every run's value, in run order; empty when there is none (an
	// unsupported figure).
	Runs []float64 `json:"runs"`
	// Reps, when present, holds the repetition (0-based) each value of Runs comes from, so
	// that figures of one repetition pair up even when a repetition failed for one system.
	Reps []int `json:"reps,omitempty"`
	// Note says what a reader needs to know to read the figure right ("both sides poll: a
	// whole core each"), or why it is missing (MetricUnsupported).
	Note string `json:"note,omitempty"`
}

// Key names a figure: a Record without its params and values.
type Key struct {
	Bench, Scenario, System, Operation string
	Size                               int
	Metric                             string
}

// Key returns the key of r.
func (r *Record) Key() Key {
	return Key{r.Bench, r.Scenario, r.System, r.Operation, r.Size, r.Metric}
}

// Goal is a target on a figure or on a ratio of figures, evaluated.
type Goal struct {
	// Bench is the command that evaluated it; Scenario the part of the bench it is about,
	// if one.
	Bench    string `json:"bench"`
	Scenario string `json:"scenario,omitempty"`
	// Name says what is compared, for people.
	Name string `json:"name"`
	// Compared names the figure or the ratio of figures compared (records as "system
	// scenario operation size metric [params]").
	Compared string `json:"compared"`
	// Comparison is "<=" or ">=" (or the strict "<" or ">"): Value Comparison Limit is met.
	Comparison string  `json:"comparison"`
	Limit      float64 `json:"limit"`
	// Unit is the unit of Value and Limit ("1" for a ratio).
	Unit string `json:"unit"`
	// Evaluated is false when a figure it needs is missing (a failed or skipped
	// measurement); Value and Met are then zero.
	Evaluated bool    `json:"evaluated"`
	Value     float64 `json:"value"`
	// Runs, when present, are the per-run values Value is the median of.
	Runs []float64 `json:"runs,omitempty"`
	// Met says whether Value satisfies Comparison Limit.
	Met bool `json:"met"`
	// Required is true for a goal the figures must meet; false for one reported beside
	// them, for context, whose Reason says why it is not required.
	Required bool   `json:"required"`
	Reason   string `json:"reason,omitempty"`
	// Note is anything else about the outcome ("go-back-N moved nothing").
	Note string `json:"note,omitempty"`
}

// Comparisons of a Goal.
const (
	AtMost  = "<="
	AtLeast = ">="
	Below   = "<"
	Above   = ">"
)

// Meets reports whether v satisfies cmp limit (cmp one of AtMost, AtLeast, Below, Above;
// false for anything else).
func Meets(v float64, cmp string, limit float64) bool {
	switch cmp {
	case AtMost:
		return v <= limit
	case AtLeast:
		return v >= limit
	case Below:
		return v < limit
	case Above:
		return v > limit
	}
	return false
}

// Verdict is the goal's word in the tables: "met", "NOT met" or "not evaluated".
func (g *Goal) Verdict() string { return Verdict(g.Evaluated, g.Met) }

// The metrics several benches (and the plots) share. A name ends in its unit.
const (
	// Latency is always a round trip: a ping-pong's, or an operation's from its post to
	// its completion (which waits for the peer's answer); a tool that reports half of it
	// is doubled, and the record's note says so.
	MetricRTTP50  = "rtt_p50_us"     // round trip, median, µs
	MetricRTTP90  = "rtt_p90_us"     // round trip, 90th percentile, µs
	MetricRTTP99  = "rtt_p99_us"     // round trip, 99th percentile, µs
	MetricRTTMean = "rtt_mean_us"    // round trip, mean, µs
	MetricMsgRate = "msg_per_s"      // messages (datagrams, operations) completed per second
	MetricGbps    = "gbit_per_s"     // bytes × 8 per second, in Gbit/s (what bytes: the bench's notes)
	MetricCPUMsg  = "cpu_us_per_msg" // CPU time (both sides unless the note says otherwise) per message, µs
	MetricCores   = "cpu_cores"      // CPU time / wall time: cores kept busy
	MetricUnsup   = "unsupported"    // the system cannot do this; Note says why, Runs is empty

	UnitMicros  = "us"
	UnitMsgRate = "msg/s"
	UnitGbps    = "Gbit/s"
	UnitCores   = "cores"
	UnitRatio   = "1"
	UnitCount   = "count"
	UnitCPUMsg  = "us/msg"
)

// NewHeader returns the header of a document tool writes about a run starting now, on
// this machine and with this build.
func NewHeader(tool string) Header {
	return Header{
		Tool:  tool,
		Build: ThisBuild(),
		Time:  time.Now().UTC().Format(time.RFC3339),
		Host:  ThisHost(),
		Modes: map[string]string{},
		Notes: []string{},
	}
}

// NewDocument returns an empty document of the current SchemaVersion with header h.
func NewDocument(h Header) *Document {
	return &Document{SchemaVersion: SchemaVersion, Header: h, Records: []Record{}, Goals: []Goal{}}
}

var (
	buildOnce sync.Once
	buildInfo Build
)

// ThisBuild returns the Build of this process, found on the first call (a command makes
// it before its run): the main module's version and VCS settings from debug.ReadBuildInfo. A build without VCS stamping (go run, a git
// worktree, -buildvcs=false) has no revision; then the commit is what `git rev-parse HEAD`
// says in the working directory, if git is there, and Modified what `git status` says of
// tracked files.
func ThisBuild() Build {
	buildOnce.Do(func() {
		buildInfo = Build{Version: "unknown"}
		if bi, ok := debug.ReadBuildInfo(); ok {
			if bi.Main.Version != "" {
				buildInfo.Version = bi.Main.Version
			}
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					buildInfo.Commit = s.Value
				case "vcs.modified":
					buildInfo.Modified = s.Value == "true"
				}
			}
		}
		if buildInfo.Commit == "" {
			buildInfo.Commit, buildInfo.Modified = gitCommit()
		}
	})
	return buildInfo
}

// gitCommit asks git for the commit of the working directory and whether tracked files
// changed since; "" when git or the repository is not there.
func gitCommit() (string, bool) {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "", false
	}
	commit := strings.TrimSpace(string(out))
	st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output()
	return commit, err == nil && len(bytes.TrimSpace(st)) > 0
}

// ParamsOf returns v (a struct of options with JSON tags) as the map Header.Params holds,
// in the types a JSON round trip gives (numbers as float64), so that a document read back
// equals the one written.
func ParamsOf(v any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("report.ParamsOf(%T): %v", v, err))
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic(fmt.Sprintf("report.ParamsOf(%T): not an object: %v", v, err))
	}
	return m
}

// Canonical sets d's empty optional fields (maps, and slices the JSON leaves out when
// empty) to nil and its empty lists to empty, as a JSON round trip leaves them, so that a
// document read back equals the one written; it returns d.
func (d *Document) Canonical() *Document {
	canonHeader := func(h *Header) {
		if len(h.Benches) == 0 {
			h.Benches = nil
		}
		if len(h.Modes) == 0 {
			h.Modes = nil
		}
		if len(h.Params) == 0 {
			h.Params = nil
		}
		if h.Notes == nil {
			h.Notes = []string{}
		}
	}
	canonHeader(&d.Header)
	for i := range d.Sources {
		canonHeader(&d.Sources[i])
	}
	if len(d.Sources) == 0 {
		d.Sources = nil
	}
	if d.Records == nil {
		d.Records = []Record{}
	}
	for i := range d.Records {
		r := &d.Records[i]
		if len(r.Params) == 0 {
			r.Params = nil
		}
		if r.Runs == nil {
			r.Runs = []float64{}
		}
		if len(r.Reps) == 0 {
			r.Reps = nil
		}
	}
	if d.Goals == nil {
		d.Goals = []Goal{}
	}
	for i := range d.Goals {
		if len(d.Goals[i].Runs) == 0 {
			d.Goals[i].Runs = nil
		}
	}
	return d
}

// WriteJSON writes d as indented JSON to path (WriteJSON), with SchemaVersion set.
func (d *Document) WriteJSON(path string) error {
	d.SchemaVersion = SchemaVersion
	return WriteJSON(path, d)
}

// ErrSchema reports a document of another schema version than this code reads.
var ErrSchema = errors.New("unsupported schema version")

// ReadDocument reads a Document written by WriteJSON, refusing one of another
// SchemaVersion.
func ReadDocument(path string) (*Document, error) {
	d, err := ReadJSON[Document](path)
	if err != nil {
		return nil, err
	}
	if d.SchemaVersion != SchemaVersion {
		return nil, fmt.Errorf("%s: %w %d (this code reads %d)", path, ErrSchema, d.SchemaVersion, SchemaVersion)
	}
	return d, nil
}

// Find returns the first record with key k (whatever its params), or nil.
func (d *Document) Find(k Key) *Record {
	for i := range d.Records {
		if d.Records[i].Key() == k {
			return &d.Records[i]
		}
	}
	return nil
}

// Tools returns the tools whose records or goals the document holds: the header's tool,
// or a merged document's benches.
func (d *Document) Tools() []string {
	if len(d.Header.Benches) > 0 {
		return d.Header.Benches
	}
	return []string{d.Header.Tool}
}

// HeaderOf returns the header that describes tool's figures: the source of that tool in a
// merged document, else the document's own header.
func (d *Document) HeaderOf(tool string) Header {
	for _, h := range d.Sources {
		if h.Tool == tool {
			return h
		}
	}
	return d.Header
}

// MergeTool is the Tool of a merged document.
const MergeTool = "merge"

// Merge returns one document holding the records and goals of docs, each from a different
// tool (a merged document may be merged again: its sources count). The header is the first
// document's (build, time, machine) with Tool MergeTool and Benches the tools in order;
// the bed is theirs when they agree, else "mixed"; Sources holds every source header, and a
// note says when the sources' machines or commits differ.
func Merge(docs ...*Document) (*Document, error) {
	if len(docs) == 0 {
		return nil, errors.New("merge: no documents")
	}
	var sources []Header
	for _, d := range docs {
		if d.SchemaVersion != SchemaVersion {
			return nil, fmt.Errorf("merge %s: %w %d (this code reads %d)", d.Header.Tool, ErrSchema, d.SchemaVersion, SchemaVersion)
		}
		if len(d.Sources) > 0 {
			sources = append(sources, d.Sources...)
		} else {
			sources = append(sources, d.Header)
		}
	}
	h := sources[0]
	h.Tool, h.Modes, h.Params, h.Notes, h.Benches = MergeTool, nil, nil, []string{}, nil
	for _, s := range sources {
		if slices.Contains(h.Benches, s.Tool) {
			return nil, fmt.Errorf("merge: two documents of %s", s.Tool)
		}
		h.Benches = append(h.Benches, s.Tool)
		if s.Time < h.Time {
			h.Time = s.Time
		}
		if s.Bed != h.Bed {
			h.Bed = Bed{Link: "mixed", Detail: "the beds differ: see each source's header"}
		}
		if s.Host != sources[0].Host {
			h.Notes = append(h.Notes, fmt.Sprintf("%s ran on %s, %s on %s", s.Tool, s.Host, sources[0].Tool, sources[0].Host))
		}
		if s.Build != sources[0].Build {
			h.Notes = append(h.Notes, fmt.Sprintf("%s ran %s, %s %s", s.Tool, s.Build, sources[0].Tool, sources[0].Build))
		}
	}
	out := NewDocument(h)
	out.Sources = sources
	for _, d := range docs {
		out.Records = append(out.Records, d.Records...)
		out.Goals = append(out.Goals, d.Goals...)
	}
	return out.Canonical(), nil
}

// sortedKeys returns m's keys, sorted.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// ReadDocuments reads every path with ReadDocument.
func ReadDocuments(paths ...string) ([]*Document, error) {
	var docs []*Document
	for _, p := range paths {
		d, err := ReadDocument(p)
		if err != nil {
			return nil, err
		}
		docs = append(docs, d)
	}
	return docs, nil
}

// hostname returns the machine's host name, or "unknown".
func hostname() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "unknown"
}
