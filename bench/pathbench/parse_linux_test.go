//go:build linux

package pathbench

import (
	"math"
	"testing"
)

func TestParseServer(t *testing.T) {
	out := []byte(`{"start":{},"intervals":[
		{"streams":[],"sum":{"start":0,"end":0.5,"seconds":0.5,"bytes":100000000}},
		{"streams":[],"sum":{"start":0.5,"end":1.0,"seconds":0.5,"bytes":50000000}},
		{"streams":[],"sum":{"start":1.0,"end":1.5,"seconds":0.5,"bytes":75000000}},
		{"streams":[],"sum":{"start":1.5,"end":1.52,"seconds":0.02,"bytes":1000}}],"end":{}}`)
	iv, err := parseServer(out)
	if err != nil || len(iv) != 4 {
		t.Fatalf("parseServer: %v, %+v", err, iv)
	}
	g, span, ok := tcpGoodput(iv, 0.5, 1.5)
	if !ok || span != 1 || math.Abs(g-1.0) > 1e-9 { // 125 MB in 1 s
		t.Errorf("tcpGoodput = %v Gbit/s over %v s (%v), want 1 over 1", g, span, ok)
	}
	if _, _, ok := tcpGoodput(iv, 5, 6); ok {
		t.Error("tcpGoodput of an empty window is ok")
	}
	for _, bad := range []string{`{"error":"unable to connect"}`, `{"intervals":[]}`, `not json`} {
		if _, err := parseServer([]byte(bad)); err == nil {
			t.Errorf("parseServer(%s): no error", bad)
		}
	}
	if errorOf([]byte(`{"error":"x"}`)) != "x" || errorOf([]byte(`x`)) != "" {
		t.Error("errorOf")
	}
}

func TestWindow(t *testing.T) {
	s := []sample{{at: 0, bytes: []uint64{0}}, {at: 100, bytes: []uint64{1000}}, {at: 200, bytes: []uint64{3000}}, {at: 250, bytes: []uint64{4000}}}
	a, b, ok := window(s, 100, 250)
	if !ok || a.at != 100 || b.at != 250 {
		t.Fatalf("window = %v %v %v", a.at, b.at, ok)
	}
	if g := gbps(a, b, 0); math.Abs(g-3000*8/150.0) > 1e-9 {
		t.Errorf("gbps = %v", g)
	}
	if a, b, ok := window(s, 100, -1); !ok || a.at != 100 || b.at != 250 {
		t.Errorf("window to the end = %v %v %v", a.at, b.at, ok)
	}
	if _, _, ok := window(s, 240, 250); ok {
		t.Error("a window without two samples is ok")
	}
}
