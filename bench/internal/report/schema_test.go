package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

// update rewrites testdata/sample.json: go test ./bench/internal/report -run TestSampleGolden -update
var update = flag.Bool("update", false, "rewrite testdata/sample.json from sampleDocument")

// samplePath is the sample document the plot module's test reads too
// (bench/plot/plot_test.go), so that its copy of the schema's types is checked against
// what this package writes.
const samplePath = "testdata/sample.json"

// sampleHeader is a fixed header: the golden file must not depend on the machine.
func sampleHeader(tool string, bed Bed) Header {
	return Header{
		Tool:  tool,
		Build: Build{Version: "(devel)", Commit: "0123456789abcdef0123456789abcdef01234567"},
		Time:  "2025-01-02T03:04:05Z",
		Host:  Host{Name: "benchhost", Kernel: "6.18.0", CPU: "Example CPU @ 3.0GHz", CPUs: 2, Go: "go1.26.0"},
		Bed:   bed,
		Modes: map[string]string{"xdpndk-inline": "xdp=native af_xdp=copy progress=inline"},
		Params: map[string]any{
			"runs": 3.0, "sizes": []any{64.0, 65536.0}, "quick": false,
		},
		Notes: []string{"a fabricated document for tests: the figures mean nothing"},
	}
}

// sampleDocument is a fabricated merged document with every field of the schema in use:
// two sources, latency, bandwidth, message rate and CPU over sizes for several systems,
// an unsupported figure, params, reps, notes, and required, failed and reported goals.
func sampleDocument() *Document {
	veth := Bed{Link: "veth", MTU: 9000, Queues: 2, Detail: "two network namespaces"}
	cmp := NewDocument(sampleHeader("comparebench", veth))
	sizes := []int{64, 256, 1024, 4096, 16384, 65536}
	type sys struct {
		name, op       string
		rtt, gbps, cpu float64 // at 64 B; they scale with size below
		note           string
	}
	systems := []sys{
		{"xdpndk-inline", "send/recv", 9, 0.4, 1.2, "both sides poll: a whole core each"},
		{"raw-xdpndk", "ping-pong", 7, 0.5, 0.9, ""},
		{"qperf-tcp", "tcp_lat", 30, 0.3, 2.5, "half RTT as the tool reports it, doubled"},
		{"sockperf-udp", "ping-pong", 25, 0.2, 3.0, ""},
	}
	for _, s := range systems {
		for i, size := range sizes {
			f := float64(int(1) << (2 * i)) // size / 64
			rtt := s.rtt * (1 + 0.05*f)
			rec := func(metric, unit string, v float64) Record {
				return Record{Bench: "comparebench", Scenario: "pingpong", System: s.name, Operation: s.op, Size: size,
					Metric: metric, Unit: unit, Value: v, Runs: []float64{v * 1.02, v, v * 0.97}, Note: s.note}
			}
			gbps := min(s.gbps*f, 25)
			cmp.Records = append(cmp.Records,
				rec(MetricRTTP50, UnitMicros, rtt),
				rec(MetricRTTP99, UnitMicros, 2.5*rtt),
				rec(MetricGbps, UnitGbps, gbps),
				rec(MetricMsgRate, UnitMsgRate, gbps*1e9/8/float64(size)),
			)
			if size == 64 || size == 65536 {
				cmp.Records = append(cmp.Records,
					rec(MetricCPUMsg, UnitCPUMsg, s.cpu*(1+f/64)),
					rec(MetricCores, UnitCores, 1.6))
			}
		}
	}
	cmp.Records = append(cmp.Records, Record{Bench: "comparebench", Scenario: "pingpong", System: "raw-asavie", Operation: "ping-pong",
		Size: 16384, Metric: MetricUnsup, Unit: "", Runs: []float64{}, Note: "no multi-buffer: a packet must fit one 4 KiB frame"})
	cmp.Records = append(cmp.Records, Record{Bench: "comparebench", Scenario: "pingpong", System: "raw-asavie", Operation: "ping-pong",
		Size: 64, Metric: MetricRTTP50, Unit: UnitMicros, Value: 8, Runs: []float64{8, 8.5}, Reps: []int{0, 2}})
	cmp.Goals = append(cmp.Goals,
		Goal{Bench: "comparebench", Scenario: "pingpong", Name: "ndk ping-pong p50 / raw ping-pong p50",
			Compared:   "xdpndk-inline pingpong send/recv 64 B rtt_p50_us / raw-xdpndk pingpong ping-pong 64 B rtt_p50_us",
			Comparison: AtMost, Limit: 1.5, Unit: UnitRatio, Evaluated: true, Value: 1.29, Runs: []float64{1.3, 1.29, 1.2}, Met: true, Required: true},
		Goal{Bench: "comparebench", Scenario: "pingpong", Name: "ndk 64 KiB goodput / iperf3 TCP goodput",
			Compared:   "xdpndk-inline pingpong send/recv 65536 B gbit_per_s / iperf3-tcp stream write 65536 B gbit_per_s",
			Comparison: AtLeast, Limit: 1, Unit: UnitRatio, Evaluated: true, Value: 0.4, Met: false, Required: false,
			Reason: "TCP coalesces small messages into one segment and sends 64 KiB GSO super-packets across veth; AF_XDP copy mode pays per frame"},
		Goal{Bench: "comparebench", Name: "ndk 64 B msg/s / raw msg/s", Compared: "xdpndk-inline ... / raw-xdpndk ...",
			Comparison: AtLeast, Limit: 0.7, Unit: UnitRatio, Evaluated: true, Value: 0.5, Met: false, Required: true},
		Goal{Bench: "comparebench", Name: "idle CPU", Compared: "xdpndk-inline idle wait 0 B cpu_cores",
			Comparison: Below, Limit: 0.01, Unit: UnitCores, Required: true, Note: "the idle figure failed"},
	)

	sim := Bed{Link: "simlink", MTU: 1500, Queues: 1, Detail: "virtual time"}
	tr := NewDocument(sampleHeader("transportbench", sim))
	tr.Header.Modes = nil
	for _, loss := range []float64{0, 1} {
		tr.Records = append(tr.Records, Record{Bench: "transportbench", Scenario: "goodput", System: "selective", Operation: "write",
			Size: 65536, Params: map[string]float64{"loss_pct": loss}, Metric: MetricGbps, Unit: UnitGbps, Value: 9 - loss, Runs: []float64{9 - loss}})
	}
	d, err := Merge(cmp, tr)
	if err != nil {
		panic(err)
	}
	return d
}

func TestSampleGolden(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sample.json")
	if err := sampleDocument().WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(samplePath, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(samplePath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not what sampleDocument writes: run go test ./bench/internal/report -run TestSampleGolden -update (and cd bench/plot && go test ./...)", samplePath)
	}
}

// keysOf returns the sorted keys of a JSON object.
func keysOf(t *testing.T, v any, what string) []string {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s is %T, want an object", what, v)
	}
	return slices.Sorted(maps.Keys(m))
}

// TestDocumentJSONShape pins the JSON keys of the schema: a change here is a change of
// schema (SchemaVersion, bench/README.md, bench/plot's types).
func TestDocumentJSONShape(t *testing.T) {
	b, err := json.Marshal(sampleDocument())
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"document":                    {"goals", "header", "records", "schema_version", "sources"},
		"header":                      {"bed", "benches", "commit", "cpu", "cpus", "go", "host", "kernel", "modified", "notes", "time", "tool", "version"},
		"source":                      {"bed", "commit", "cpu", "cpus", "go", "host", "kernel", "modes", "modified", "notes", "params", "time", "tool", "version"},
		"bed":                         {"detail", "link", "mtu", "queues"},
		"record":                      {"bench", "metric", "note", "operation", "runs", "scenario", "size", "system", "unit", "value"},
		"record with params and reps": {"bench", "metric", "operation", "params", "reps", "runs", "scenario", "size", "system", "unit", "value"},
		"goal":                        {"bench", "compared", "comparison", "evaluated", "limit", "met", "name", "required", "runs", "scenario", "unit", "value"},
		"reported goal":               {"bench", "compared", "comparison", "evaluated", "limit", "met", "name", "reason", "required", "scenario", "unit", "value"},
	}
	records := doc["records"].([]any)
	goals := doc["goals"].([]any)
	var withReps any
	for _, r := range records {
		if _, ok := r.(map[string]any)["reps"]; ok {
			withReps = r
		}
	}
	if withReps != nil {
		// The sample's record with reps has no params; add a transport record's params.
		withReps.(map[string]any)["params"] = records[len(records)-1].(map[string]any)["params"]
	}
	header := doc["header"].(map[string]any)
	for what, v := range map[string]any{
		"document":                    doc,
		"header":                      header,
		"source":                      doc["sources"].([]any)[0],
		"bed":                         header["bed"],
		"record":                      records[0],
		"record with params and reps": withReps,
		"goal":                        goals[0],
		"reported goal":               goals[1],
	} {
		if got := keysOf(t, v, what); !slices.Equal(got, want[what]) {
			t.Errorf("%s keys:\n got %v\nwant %v", what, got, want[what])
		}
	}
	if doc["schema_version"] != float64(SchemaVersion) {
		t.Errorf("schema_version = %v", doc["schema_version"])
	}
	for _, k := range []string{"evaluated", "met", "required"} {
		if _, ok := goals[3].(map[string]any)[k].(bool); !ok {
			t.Errorf("goal %s is not a boolean: %v", k, goals[3])
		}
	}
	if runs, ok := records[0].(map[string]any)["runs"].([]any); !ok || len(runs) != 3 {
		t.Errorf("record runs = %v", records[0].(map[string]any)["runs"])
	}
}

func TestDocumentRoundTrip(t *testing.T) {
	h := NewHeader("linkbench") // this machine, this build
	h.Bed = Bed{Link: "veth", MTU: 9000, Queues: 2}
	h.Params = ParamsOf(struct {
		Runs  int     `json:"runs"`
		Sizes []int   `json:"sizes"`
		Loss  float64 `json:"loss"`
	}{3, []int{64, 9000}, 0.5})
	d := NewDocument(h)
	d.Records = append(d.Records,
		Record{Bench: "linkbench", Scenario: "oneway", System: "raw-xdpndk", Operation: "send", Size: 64, Metric: MetricMsgRate, Unit: UnitMsgRate, Value: 2, Runs: []float64{1, 2, 3}},
		Record{Bench: "linkbench", Scenario: "oneway", System: "raw-asavie", Operation: "send", Size: 9000, Metric: MetricUnsup, Runs: []float64{}, Note: "no multi-buffer"})
	d.Canonical()
	path := filepath.Join(t.TempDir(), "out", "link.json")
	if err := d.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadDocument(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, d) {
		t.Errorf("round trip:\n got %+v\nwant %+v", back, d)
	}
	if h := back.Header; h.Host.Name == "" || h.Kernel == "" || h.CPUs < 1 || h.Go == "" || h.Version == "" || h.Time == "" {
		t.Errorf("header incomplete: %+v", h)
	}
	if r := back.Find(Key{"linkbench", "oneway", "raw-xdpndk", "send", 64, MetricMsgRate}); r == nil || r.Value != 2 {
		t.Errorf("Find = %+v", r)
	}
	if back.Find(Key{Bench: "linkbench"}) != nil {
		t.Error("Find of a missing key found something")
	}

	// Another schema version is refused.
	d.SchemaVersion = SchemaVersion + 1
	if err := WriteJSON(path, d); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadDocument(path); !errors.Is(err, ErrSchema) {
		t.Errorf("ReadDocument of version %d: %v, want ErrSchema", SchemaVersion+1, err)
	}
}

func TestMerge(t *testing.T) {
	d := sampleDocument()
	if d.Header.Tool != MergeTool || !slices.Equal(d.Header.Benches, []string{"comparebench", "transportbench"}) || len(d.Sources) != 2 {
		t.Fatalf("merged header %+v, %d sources", d.Header, len(d.Sources))
	}
	if d.Header.Bed.Link != "mixed" || d.Header.Host.Name != "benchhost" || len(d.Header.Notes) != 0 {
		t.Errorf("merged header %+v", d.Header)
	}
	if h := d.HeaderOf("transportbench"); h.Bed.Link != "simlink" {
		t.Errorf("HeaderOf(transportbench) = %+v", h)
	}
	if !slices.Equal(d.Tools(), d.Header.Benches) {
		t.Errorf("Tools = %v", d.Tools())
	}

	// A merged document merges again: its sources count, and a tool may not come twice.
	extra := NewDocument(sampleHeader("pathbench", Bed{Link: "veth", MTU: 9000, Queues: 1}))
	extra.Header.Host.Name = "otherhost"
	m, err := Merge(d, extra)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Sources) != 3 || len(m.Records) != len(d.Records) || len(m.Goals) != len(d.Goals) {
		t.Errorf("merge of a merge: %d sources, %d records, %d goals", len(m.Sources), len(m.Records), len(m.Goals))
	}
	if len(m.Header.Notes) != 1 || m.Header.Notes[0] != "pathbench ran on otherhost (Example CPU @ 3.0GHz, 2 CPUs, Linux 6.18.0, go1.26.0), comparebench on benchhost (Example CPU @ 3.0GHz, 2 CPUs, Linux 6.18.0, go1.26.0)" {
		t.Errorf("notes %q, want one about the other machine", m.Header.Notes)
	}
	extra = NewDocument(sampleHeader("pathbench", Bed{}))
	extra.Header.Build.Modified = true
	if m, err = Merge(d, extra); err != nil || len(m.Header.Notes) != 1 ||
		m.Header.Notes[0] != "pathbench ran commit 0123456789ab with uncommitted changes, comparebench commit 0123456789ab" {
		t.Errorf("merge of another build: %v, notes %q", err, m.Header.Notes)
	}
	if _, err := Merge(d, sampleDocument()); err == nil {
		t.Error("merging two documents of the same tools: no error")
	}
	old := NewDocument(sampleHeader("old", Bed{}))
	old.SchemaVersion = 0
	if _, err := Merge(old); !errors.Is(err, ErrSchema) {
		t.Errorf("merging schema 0: %v", err)
	}
	if _, err := Merge(); err == nil {
		t.Error("Merge(): no error")
	}
}

func TestMeets(t *testing.T) {
	for _, tc := range []struct {
		v     float64
		cmp   string
		limit float64
		want  bool
	}{
		{1, AtMost, 1, true}, {1.1, AtMost, 1, false},
		{1, AtLeast, 1, true}, {0.9, AtLeast, 1, false},
		{1, Below, 1, false}, {0.9, Below, 1, true},
		{1, Above, 1, false}, {1.1, Above, 1, true},
		{1, "==", 1, false},
	} {
		if got := Meets(tc.v, tc.cmp, tc.limit); got != tc.want {
			t.Errorf("Meets(%v %s %v) = %v", tc.v, tc.cmp, tc.limit, got)
		}
	}
}

func TestThisBuild(t *testing.T) {
	if b := ThisBuild(); b.Version == "" {
		t.Errorf("ThisBuild() = %+v", b)
	}
}
