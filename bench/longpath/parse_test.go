package longpath

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestParseNDK(t *testing.T) {
	out := []byte(`{"command":"write-bw","params":{"tx_depth":128},
	"bandwidth":[{"bytes":65536,"gbit_per_s":0.8,"outstanding":39,"retransmits":3,
	"retransmit_causes":{"loss":1,"timer":1,"timeouts":1,"spurious_timeouts":1,"tail_probes":1,"needless_probes":0,"rnr":0}}],
	"intervals":[{"start_s":0,"end_s":1,"gbit_per_s":0.2},{"start_s":1,"end_s":2,"gbit_per_s":0.9},
	{"start_s":2,"end_s":3,"gbit_per_s":0.7},{"start_s":3,"end_s":3.5,"gbit_per_s":0.1}]}`)
	r, err := parseNDK(out, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(r.gbps-0.8) > 1e-9 || r.outstanding != 39 || r.retransmits != 3 {
		t.Errorf("parseNDK = %+v, want 0.8 Gbit/s over [1, 3], 39 outstanding, 3 retransmits", r)
	}
	if want := (Causes{Loss: 1, Timer: 1, Timeouts: 1, SpuriousTimeouts: 1, TailProbes: 1}); r.causes != want {
		t.Errorf("causes %+v, want %+v", r.causes, want)
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

// The shared window runs from when the line carried both flows, plus skip, until either
// stopped.
func TestSharedRates(t *testing.T) {
	t0 := time.Unix(100, 0)
	var s []lineSample
	var tcp, udp uint64
	for i := range 100 { // 10 s, 100 ms apart
		if i < 90 {
			tcp += 8_000_000 // 0.64 Gbit/s
		}
		if i >= 10 {
			udp += 3_000_000 // 0.24 Gbit/s, from 1 s on
		}
		s = append(s, lineSample{t0.Add(time.Duration(i) * 100 * time.Millisecond), tcp, udp})
	}
	gt, gu, span, ok := sharedRates(s, 2*time.Second)
	if !ok || math.Abs(gt-0.64) > 1e-9 || math.Abs(gu-0.24) > 1e-9 || math.Abs(span-6) > 1e-9 {
		t.Errorf("sharedRates = %v %v %v %v, want 0.64, 0.24 over 6 s", gt, gu, span, ok)
	}
	if _, _, _, ok := sharedRates(s[:5], time.Second); ok {
		t.Error("never both: ok")
	}
}
