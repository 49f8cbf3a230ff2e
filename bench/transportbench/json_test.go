package transportbench

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// goalKeys are the keys of every goal of a Document (bench/internal/report's Goal; the
// omitempty ones, runs, reason and note, left out when empty).
var goalKeys = []string{"bench", "scenario", "name", "compared", "comparison", "limit", "unit", "evaluated", "value", "met", "required"}

// readGoals writes a document with write, reads the file back as generic JSON and returns
// its goals, failing unless they are a list of objects with booleans where booleans belong.
func readGoals(t *testing.T, write func(path string) error) (doc map[string]any, goals []map[string]any) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "out.json")
	if err := write(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	list, ok := doc["goals"].([]any)
	if !ok {
		t.Fatalf("goals is %T, want a list: %s", doc["goals"], b)
	}
	for i, g := range list {
		obj, ok := g.(map[string]any)
		if !ok {
			t.Fatalf("goal %d is %T, want an object", i, g)
		}
		if keys := slices.Sorted(maps.Keys(obj)); !slices.Equal(keys, slices.Sorted(slices.Values(goalKeys))) {
			t.Errorf("goal %d keys %v, want %v", i, keys, goalKeys)
		}
		for _, k := range []string{"evaluated", "met", "required"} {
			if _, ok := obj[k].(bool); !ok {
				t.Errorf("goal %d: %s is %v (%T), want a boolean", i, k, obj[k], obj[k])
			}
		}
		goals = append(goals, obj)
	}
	return doc, goals
}

// TestGoalsJSON: the goodput-under-loss Results and the command's Suite both write every
// goal into the document's goals in the shared schema: a goal whose ratio was not measured
// is listed with evaluated and met false (not null), one that was measured with its value
// and verdict; the Suite's goals include the loss goals, and its records the loss records.
func TestGoalsJSON(t *testing.T) {
	o := DefaultOptions()
	o.Seeds = []uint64{1}
	o.Losses = []float64{0, 0.01} // no 0.1% run: that goal is not evaluated
	runs := []CaseResult{
		{Case: Case{Loss: 0, Mode: ModeSelective, Seed: 1}, GoodputGbps: 10},
		{Case: Case{Loss: 0, Mode: ModeGoBackN, Seed: 1}, GoodputGbps: 10},
		{Case: Case{Loss: 0.01, Mode: ModeSelective, Seed: 1}, GoodputGbps: 8},
		{Case: Case{Loss: 0.01, Mode: ModeGoBackN, Seed: 1}, GoodputGbps: 5},
	}
	res := Collect(o, runs)
	_, goals := readGoals(t, res.WriteJSON)
	if len(goals) != len(Goals) {
		t.Fatalf("%d goals in the JSON, want all %d", len(goals), len(Goals))
	}
	want := []map[string]any{
		{"name": Goals[0].Name, "scenario": ScenarioLoss, "comparison": AtLeast, "limit": 0.7, "evaluated": true, "value": 0.8, "met": true},
		{"name": Goals[1].Name, "scenario": ScenarioLoss, "comparison": AtLeast, "limit": 2.0, "evaluated": true, "value": 1.6, "met": false},
		{"name": Goals[2].Name, "scenario": ScenarioLoss, "comparison": AtLeast, "limit": 0.9, "evaluated": false, "value": 0.0, "met": false},
	}
	for i, g := range goals {
		if g["bench"] != Tool || g["required"] != true || g["unit"] != UnitRatio || g["compared"] != Goals[i].compared(o.MsgSize) {
			t.Errorf("goal %d: %v", i, g)
		}
		for k, v := range want[i] {
			if f, ok := v.(float64); ok {
				if got, ok := g[k].(float64); !ok || got < f-1e-9 || got > f+1e-9 {
					t.Errorf("goal %d: %s = %v, want %v", i, k, g[k], v)
				}
			} else if g[k] != v {
				t.Errorf("goal %d: %s = %v, want %v", i, k, g[k], v)
			}
		}
	}

	// The command writes a Suite: its goals hold the loss goals beside the scenarios', in
	// the same shape, and its records the loss records.
	su := &Suite{Header: SuiteHeader{Goals: []ScenarioGoal{}, Notes: []string{}}, Records: []ScenarioRecord{}}
	su.AddLoss(res)
	doc, sgoals := readGoals(t, su.WriteJSON)
	if len(sgoals) != len(Goals) {
		t.Fatalf("suite: %d goals, want %d", len(sgoals), len(Goals))
	}
	for i, g := range sgoals {
		if g["scenario"] != ScenarioLoss || g["name"] != Goals[i].Name || g["evaluated"] != want[i]["evaluated"] || g["met"] != want[i]["met"] {
			t.Errorf("suite goal %d: %v, want scenario %q and evaluated, met as %v", i, g, ScenarioLoss, want[i])
		}
	}
	if recs, ok := doc["records"].([]any); !ok || len(recs) != len(res.Records) {
		t.Errorf("suite: records %v, want the %d loss records", doc["records"], len(res.Records))
	}
}
