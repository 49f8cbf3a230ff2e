package longpath

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestParseNDK(t *testing.T) {
	out := []byte(`{"command":"write-bw","params":{"tx_depth":128},
	"bandwidth":[{"bytes":65536,"gbit_per_s":0.8,"outstanding":39,"retransmits":3}],
	"intervals":[{"start_s":0,"end_s":1,"gbit_per_s":0.2},{"start_s":1,"end_s":2,"gbit_per_s":0.9},
	{"start_s":2,"end_s":3,"gbit_per_s":0.7},{"start_s":3,"end_s":3.5,"gbit_per_s":0.1}]}`)
	r, err := parseNDK(out, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(r.gbps-0.8) > 1e-9 || r.outstanding != 39 || r.retransmits != 3 {
		t.Errorf("parseNDK = %+v, want 0.8 Gbit/s over [1, 3], 39 outstanding, 3 retransmits", r)
	}
	if _, err := parseNDK(out, 5, 8); err == nil {
		t.Error("no interval in the window: no error")
	}
}

func TestParseIperf(t *testing.T) {
	out := []byte(`{"intervals":[{"sum":{"start":0,"end":1,"bytes":1000}},{"sum":{"start":1,"end":2,"bytes":125000000}},
	{"sum":{"start":2,"end":3,"bytes":100000000}}],"end":{"sum_sent":{"retransmits":7}}}`)
	r, err := parseIperf(out, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(r.gbps-0.9) > 1e-9 || r.retransmits != 7 {
		t.Errorf("parseIperf = %+v, want 0.9 Gbit/s, 7 retransmits", r)
	}
	if _, err := parseIperf([]byte(`{"error":"unable to connect"}`), 0, 1); err == nil {
		t.Error("iperf3's error: no error")
	}
}

func TestGoals(t *testing.T) {
	r := &Results{Paths: []PathDoc{{RTTMS: 10}}}
	r.add(10*time.Millisecond, "write", "alone", "ndk", "ratio_to_tcp", 0.95)
	r.add(10*time.Millisecond, "write", "alone", "ndk", "ratio_to_tcp", 0.5)
	r.add(10*time.Millisecond, "write", "alone", "ndk", "ratio_to_tcp", 0.92)
	r.add(10*time.Millisecond, "write", "shared", "ndk", "gbps", 0.2)
	r.add(10*time.Millisecond, "write", "shared", "tcp", "gbps", 0.7)
	r.evaluate(1e9)
	want := []bool{true, false, true}
	if len(r.Goals) != 3 {
		t.Fatalf("goals %+v", r.Goals)
	}
	for i, g := range r.Goals {
		if g.Met != want[i] {
			t.Errorf("goal %s: met %v, want %v", g.Name, g.Met, want[i])
		}
	}
	if r.Goals[0].Value != 0.92 {
		t.Errorf("ratio median %v, want 0.92", r.Goals[0].Value)
	}
}

func TestValidate(t *testing.T) {
	o := DefaultOptions()
	o.Ndkpeer = "/bin/true"
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []func(*Options){
		func(o *Options) { o.Runs = 0 },
		func(o *Options) { o.Duration = 1500 * time.Millisecond },
		func(o *Options) { o.Skip = o.Duration },
		func(o *Options) { o.Ops = []string{"send"} },
		func(o *Options) { o.Ndkpeer = "" },
	} {
		x := o
		f(&x)
		if err := x.validate(); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%+v: %v, want ErrInvalidOptions", x, err)
		}
	}
}

// The shared window is the span both tools reported, on one clock, less skip: ndkpeer
// started a second after iperf3 (its warm-up) and ended a second later.
func TestSharedWindow(t *testing.T) {
	var tcp, ndk []ival
	for i := range 8 {
		g := 0.9
		if i >= 1 {
			g = 0.6 // ndk runs from the tcp clock's second 1 on
		}
		tcp = append(tcp, ival{float64(i), float64(i + 1), g})
		ndk = append(ndk, ival{float64(i), float64(i + 1), 0.35})
	}
	// tcp exits at 108 s, ndk at 109 s of the common clock.
	gn, gt, span, ok := sharedWindow(ndk, 109, tcp, 108, 2)
	if !ok || math.Abs(span-5) > 1e-9 || math.Abs(gt-0.6) > 1e-9 || math.Abs(gn-0.35) > 1e-9 {
		t.Errorf("sharedWindow = %v %v %v %v, want ndk 0.35, tcp 0.6 over 5 s", gn, gt, span, ok)
	}
}
