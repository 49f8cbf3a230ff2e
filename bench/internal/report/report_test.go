package report

import (
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{5}, 5},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{1e6, -1, 7, 7, 7}, 7},
	} {
		in := append([]float64(nil), tc.in...)
		if got := Median(tc.in); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.in, got, tc.want)
		}
		if !reflect.DeepEqual(in, tc.in) {
			t.Errorf("Median modified its input: %v became %v", in, tc.in)
		}
	}
}

func TestJSONRoundTrip(t *testing.T) {
	type doc struct {
		A int       `json:"a"`
		B []float64 `json:"b"`
	}
	in := doc{A: 3, B: []float64{1, 2.5}}
	path := filepath.Join(t.TempDir(), "out", "x.json") // the directory does not exist yet
	if err := WriteJSON(path, in); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON[doc](path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, *back) {
		t.Errorf("round trip: got %+v, want %+v", back, in)
	}
	if _, err := ReadJSON[doc](filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("ReadJSON of a missing file: no error")
	}
}

func TestThisHost(t *testing.T) {
	h := ThisHost()
	if h.Kernel == "" || h.CPU == "" || h.CPUs < 1 || h.Go == "" {
		t.Errorf("ThisHost() = %+v", h)
	}
}

func TestCell(t *testing.T) {
	if got := Cell(1.5e6, true, 1e-6, 3); got != "1.500" {
		t.Errorf("Cell = %q", got)
	}
	if got := Cell(0, false, 1, 2); got != "-" {
		t.Errorf("Cell(!ok) = %q", got)
	}
}

func TestStartCPUProfileEmpty(t *testing.T) {
	stop, err := StartCPUProfile("")
	if err != nil {
		t.Fatal(err)
	}
	stop()
}

func TestValues(t *testing.T) {
	recs := []Subject{{Benchmark: "a", Size: 9000}, {Benchmark: "b", Size: 1}, {Benchmark: "a", Size: 64}, {Benchmark: "a", Size: 9000}}
	got := Values(recs, func(s Subject) (int, bool) { return s.Size, s.Benchmark == "a" })
	if !reflect.DeepEqual(got, []int{64, 9000}) {
		t.Errorf("Values = %v", got)
	}
}

func TestNewFigure(t *testing.T) {
	f := NewFigure("m", "u", []float64{3, 1, 2})
	if f.Value != 2 || f.Metric != "m" || f.Unit != "u" || len(f.Runs) != 3 {
		t.Errorf("NewFigure = %+v", f)
	}
}

func TestPercentile(t *testing.T) {
	v := make([]int64, 100)
	for i := range v {
		v[i] = int64(i + 1)
	}
	for _, tc := range []struct {
		p    float64
		want int64
	}{{0, 1}, {1, 1}, {50, 50}, {90, 90}, {99, 99}, {99.5, 100}, {100, 100}} {
		if got := Percentile(v, tc.p); got != tc.want {
			t.Errorf("Percentile(1..100, %v) = %d, want %d", tc.p, got, tc.want)
		}
	}
	if Percentile(nil, 50) != 0 || Percentile([]int64{7}, 99) != 7 {
		t.Error("Percentile of an empty or one-element slice")
	}
}

func TestSummarize(t *testing.T) {
	s := Summarize([]int64{5000, 1000, 3000, 2000, 4000})
	want := Latency{N: 5, P50: 3, P90: 5, P99: 5, Max: 5, Mean: 3}
	if s != want {
		t.Errorf("Summarize = %+v, want %+v", s, want)
	}
	if (Summarize(nil) != Latency{}) {
		t.Error("Summarize(nil) is not zero")
	}
}

func TestFailedNote(t *testing.T) {
	n := FailedNote(errors.New("ping-pong, repetition 2: timeout"))
	if n != "FAILED: ping-pong, repetition 2: timeout" || !IsFailed(n) || IsFailed("kernel 6.18") {
		t.Fatalf("FailedNote = %q, IsFailed(it) = %v", n, IsFailed(n))
	}
}

func TestParseSizes(t *testing.T) {
	got, err := ParseSizes(" 64, 4K,,1m,65507 ")
	if err != nil || !slices.Equal(got, []int{64, 4096, 1 << 20, 65507}) {
		t.Errorf("ParseSizes: %v, %v", got, err)
	}
	for _, bad := range []string{"", " , ", "x", "4G", "-1", "+4", "0", "1.5K", "64K0", "K", "3000M", "99999999999"} {
		if got, err := ParseSizes(bad); err == nil {
			t.Errorf("ParseSizes(%q) = %v, accepted", bad, got)
		}
	}
}
