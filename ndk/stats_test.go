package ndk

import (
	"context"
	"encoding/json"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/simlink"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of the tests")

// writes posts n Writes of size bytes each from p.A to a region of p.B and waits for their
// completions; it returns once A has nothing in flight.
func writes(t *testing.T, p *pair, n, size int) {
	t.Helper()
	src, smr := p.A.region(t, n*size, MRAllowLocalWrite)
	fill(src, 3)
	_, tmr := p.B.region(t, n*size, MRAllowLocalWrite|MRAllowRemoteWrite)
	for i := range n {
		sge := []SGE{smr.SGE(src[i*size : (i+1)*size])}
		if err := p.A.qp.Write(i, sge, tmr.VA()+uint64(i*size), tmr.RemoteToken(), 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range results(t, p.A.icq, n) {
		if r.Status != StatusSuccess {
			t.Fatalf("write: %+v", r)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.A.qp.Stats().InFlight != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("bytes still in flight after the completions: %+v", p.A.qp.Stats())
		}
		p.A.a.Poll()
		time.Sleep(100 * time.Microsecond)
	}
}

// Known traffic over simlink moves the counters by what it is: n Writes of one packet each
// arrive as exactly n new data packets of their bytes; the sender's data packets are the n
// and its retransmissions; the adapter's totals are its QP's, and stay when the QP closes.
func TestStatsAfterWrites(t *testing.T) {
	p := newPair(t, linkKinds()[0], pairOpts{})
	const n, size = 10, 100
	before := p.A.qp.Stats()
	if before.State != "connected" || before.TxPackets != 0 || before.RxPackets != 0 {
		t.Fatalf("a new connection's stats: %+v", before)
	}
	writes(t, p, n, size)

	a, b := p.A.qp.Stats(), p.B.qp.Stats()
	if b.RxPackets != n || b.RxBytes != n*size {
		t.Errorf("B received %d packets, %d bytes; want %d, %d", b.RxPackets, b.RxBytes, n, n*size)
	}
	if a.TxPackets-a.Retransmits != n || a.TxBytes != a.TxPackets*size {
		t.Errorf("A sent %d packets (%d retransmissions), %d bytes; want %d and the retransmissions, %d bytes each",
			a.TxPackets, a.Retransmits, a.TxBytes, n, size)
	}
	if q := a.RetransmitsQueued; a.Retransmits > q.Timer+q.Loss+q.TailProbe+q.RNR {
		t.Errorf("%d retransmissions, fewer queued: %+v", a.Retransmits, q)
	}
	if a.TxPackets != 0 && b.Duplicates > a.Retransmits {
		t.Errorf("B saw %d duplicates of A's %d retransmissions", b.Duplicates, a.Retransmits)
	}
	if a.SRTT <= 0 || a.RTO < a.SRTT || a.CongestionWindow <= 0 || a.InFlight != 0 {
		t.Errorf("A's estimates: srtt %v µs, rto %v µs, cwnd %d, in flight %d", a.SRTT, a.RTO, a.CongestionWindow, a.InFlight)
	}
	if a.QPN != p.A.qp.tq.QPN() || a.State != "connected" || a.Cause != "" || a.Engine != 0 {
		t.Errorf("A's identity: %+v", a)
	}
	if a.Peer != p.A.qp.tq.Peer() || a.Peer.Addr() != p.B.a.LocalAddr().Addr() {
		t.Errorf("A's peer %v, want B's address %v", a.Peer, p.B.a.LocalAddr())
	}
	if b.AcksSent+b.AcksPiggybacked == 0 {
		t.Errorf("B acknowledged nothing: %+v", b)
	}

	sa, sb := p.A.a.Stats(), p.B.a.Stats()
	if sa.QPs.Live != 1 || sa.QPs.Created != 1 || sa.QPs.Closed != 0 || sa.QPs.TxPackets != a.TxPackets || sa.QPs.TxBytes != a.TxBytes {
		t.Errorf("A's QP totals %+v, want its one QP's %+v", sa.QPs, a.QPCounters)
	}
	if sb.QPs.RxPackets != n || sb.QPs.RxBytes != n*size {
		t.Errorf("B's QP totals %+v", sb.QPs)
	}
	if sa.Engines != 1 || len(sa.Queues) != 1 || sa.Queues[0].Engine != 0 || sa.Queues[0].Socket != nil || sa.Socket != nil {
		t.Errorf("A's queues: %+v", sa)
	}
	if sa.Steering != nil || sa.Neighbours != nil {
		t.Errorf("a simlink adapter has no XDP program or next-hop table: %+v %+v", sa.Steering, sa.Neighbours)
	}
	// Small packets of one moment leave packed in Bundles: a Bundle is one datagram of
	// several data packets.
	ea, eb := sa.Engine, sb.Engine
	if ea.TxDatagrams-ea.BundlesSent+ea.BundledSent < n || eb.RxDatagrams-eb.BundlesReceived+eb.BundledReceived < n ||
		ea.BundledSent != eb.BundledReceived || sa.Link != sa.Queues[0].Link || sa.Link.TxPackets == 0 {
		t.Errorf("datagrams: A's engine sent %+v, link %+v; B's engine received %+v", ea, sa.Link, eb)
	}
	if d := sa.Engine.Malformed + sa.Engine.NoQP + sa.Engine.BadSource + sa.Engine.BadCookie + sa.Engine.OutOfWindow; d != 0 {
		t.Errorf("A's engine dropped %d datagrams of a healthy connection: %+v", d, sa.Engine)
	}
	m := sa.Memory
	if m.UMEMSize <= 0 || m.Frames != 16 || m.FrameSize <= 0 || m.HeapSize != 8<<20 || m.HeapUsed < n*size || m.HeapBuffers != 1 ||
		m.Regions != 1 || m.Windows != 0 || m.FastRegisterRegions != 0 || m.MaxEntries != DefaultOptions().MaxMemoryEntries || m.Pinned != 0 {
		t.Errorf("A's memory: %+v", m)
	}

	// Closing the QP keeps its counters in the adapter's totals.
	final := p.A.qp.Stats()
	if err := p.A.qp.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := p.A.a.Stats().QPs
	if after.Live != 0 || after.Created != 1 || after.Closed != 1 || after.TxPackets != final.TxPackets || after.TxBytes != final.TxBytes {
		t.Errorf("after the close: totals %+v, want the QP's last %+v", after, final.QPCounters)
	}
	if err := p.A.qp.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if again := p.A.a.Stats().QPs; again.Closed != 1 || again.TxPackets != final.TxPackets {
		t.Errorf("a second Close counted the QP again: %+v", again)
	}
	if got := p.A.a.QPStats(); len(got) != 0 {
		t.Errorf("QPStats of an adapter with no QP: %+v", got)
	}
}

// Once the engines stopped, what the engine sent and received is what its link did.
func TestStatsEngineMatchesLink(t *testing.T) {
	p := newPair(t, linkKinds()[0], pairOpts{})
	writes(t, p, 20, 1000)
	vanish(p.A.a)
	vanish(p.B.a)
	for _, s := range []AdapterStats{p.A.a.Stats(), p.B.a.Stats()} {
		if s.Engine.TxDatagrams != s.Link.TxPackets || s.Engine.RxDatagrams != s.Link.RxPackets || s.Engine.RxDatagrams == 0 {
			t.Errorf("engine sent %d, received %d datagrams; link %d, %d", s.Engine.TxDatagrams, s.Engine.RxDatagrams, s.Link.TxPackets, s.Link.RxPackets)
		}
	}
}

// Two engines of two queues: each queue is listed under its engine, the engines' counters
// are summed, and each QP names its engine.
func TestStatsSeveralEngines(t *testing.T) {
	k := linkKinds()[2]
	if k.name != "simlink-2engines" {
		t.Fatalf("link kind %q", k.name)
	}
	p := newPair(t, k, pairOpts{})
	writes(t, p, 10, 100)
	s := p.A.a.Stats()
	if s.Engines != 2 || len(s.Queues) != 2 || s.Queues[0].Engine != 0 || s.Queues[1].Engine != 1 || s.Queues[1].Queue != 1 {
		t.Fatalf("engines %d, queues %+v", s.Engines, s.Queues)
	}
	var tx uint64
	var sum LinkStats
	for i, e := range p.A.a.engs {
		tx += e.eng.Stats().TxPackets
		if got, after := s.Queues[i].Link, e.link.Stats(); got.TxPackets > after.TxPackets || got.RxPackets > after.RxPackets {
			t.Errorf("queue %d: %+v, its link read after %+v", i, got, after)
		}
		sum = sumCounters(sum, s.Queues[i].Link)
	}
	if s.Engine.TxDatagrams > tx || s.Engine.TxDatagrams == 0 {
		t.Errorf("summed engines sent %d datagrams, the engines %d read after", s.Engine.TxDatagrams, tx)
	}
	if s.Link != sum || sum.TxPackets == 0 {
		t.Errorf("link sum %+v of %+v", s.Link, s.Queues)
	}
	q := p.A.qp.Stats()
	if q.Engine != p.A.qp.tq.Engine().Index() {
		t.Errorf("QP on engine %d, stats say %d", p.A.qp.tq.Engine().Index(), q.Engine)
	}
}

// QPStats lists every QP, oldest first, idle ones too; Stats counts them.
func TestAdapterQPStats(t *testing.T) {
	la, _ := simlink.Pair(simlink.Config{Seed: 1, MaxPayload: 8972})
	a := openT(t, la, withUMEM(t, DefaultOptions()))
	pd, err := a.NewPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := a.NewCQ(64, nil)
	if err != nil {
		t.Fatal(err)
	}
	var qps []*QP
	for range 5 {
		q, err := pd.NewQP(QPConfig{ReceiveCQ: cq, InitiatorCQ: cq})
		if err != nil {
			t.Fatal(err)
		}
		qps = append(qps, q)
	}
	if err := qps[1].Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := a.QPStats()
	want := []*QP{qps[0], qps[2], qps[3], qps[4]}
	if len(got) != len(want) {
		t.Fatalf("%d QPs listed, want %d", len(got), len(want))
	}
	for i, q := range want {
		if got[i].QPN != q.tq.QPN() || got[i].State != "idle" || got[i].Peer.IsValid() {
			t.Errorf("QP %d: %+v, want QPN %d idle without a peer", i, got[i], q.tq.QPN())
		}
	}
	if s := a.Stats().QPs; s.Live != 4 || s.Created != 5 || s.Closed != 1 {
		t.Errorf("QP counts %+v", s)
	}
}

// Stats and QPStats are read while traffic runs, from several goroutines (the race
// detector checks them under make test's race pass).
func TestStatsConcurrent(t *testing.T) {
	p := newPair(t, linkKinds()[0], pairOpts{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = p.A.a.Stats()
				_ = p.B.a.QPStats()
				_ = p.A.qp.Stats()
				time.Sleep(50 * time.Microsecond)
			}
		}()
	}
	writes(t, p, 200, 4000)
	close(stop)
	wg.Wait()
	if s := p.B.qp.Stats(); s.RxPackets != 200 {
		t.Errorf("B received %d packets, want 200", s.RxPackets)
	}
}

// fillDistinct sets every unsigned and signed integer field (and array element) of the
// struct v points to a distinct power of two, and returns their sum.
func fillDistinct(t *testing.T, v reflect.Value, bit *uint) uint64 {
	t.Helper()
	sum := uint64(0)
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			sum += fillDistinct(t, v.Field(i), bit)
		}
	case reflect.Array:
		for i := range v.Len() {
			sum += fillDistinct(t, v.Index(i), bit)
		}
	case reflect.Uint64, reflect.Uint32, reflect.Uint:
		if *bit >= 62 {
			t.Fatal("too many fields for distinct bits")
		}
		v.SetUint(1 << *bit)
		sum, *bit = 1<<*bit, *bit+1
	case reflect.Int, reflect.Int64:
		if *bit >= 62 {
			t.Fatal("too many fields for distinct bits")
		}
		v.SetInt(1 << *bit)
		sum, *bit = 1<<*bit, *bit+1
	}
	return sum
}

// sumFields returns the sum of every integer field of v (recursively) and how many there
// are.
func sumFields(v reflect.Value) (sum uint64, n int) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			s, k := sumFields(v.Field(i))
			sum, n = sum+s, n+k
		}
	case reflect.Array:
		for i := range v.Len() {
			s, k := sumFields(v.Index(i))
			sum, n = sum+s, n+k
		}
	case reflect.Uint64, reflect.Uint32, reflect.Uint:
		return v.Uint(), 1
	case reflect.Int, reflect.Int64:
		return uint64(v.Int()), 1
	}
	return sum, n
}

// mapsEveryCounter checks that mapping a lower layer's counters (each set to its own power
// of two) carries every one of them into the public view exactly once: the public
// fields' sum is the source's. Fields named in skip (not counters) stay zero.
func mapsEveryCounter[S, D any](t *testing.T, name string, conv func(S) D, skip ...string) {
	t.Helper()
	var src S
	v := reflect.ValueOf(&src).Elem()
	bit := uint(0)
	fillDistinct(t, v, &bit)
	for _, f := range skip {
		fv := v.FieldByName(f)
		if !fv.IsValid() {
			t.Fatalf("%s has no field %s", name, f)
		}
		fv.SetZero()
	}
	want, n := sumFields(v)
	got, _ := sumFields(reflect.ValueOf(conv(src)))
	if n < 5 || got != want {
		t.Errorf("%s: the public fields sum to %#x, the source's %d to %#x: a counter is missing (bits %#x) or mapped twice (%#x)",
			name, got, n, want, want&^got, got&^want)
	}
}

// Every counter the engine, the link and the QP keep reaches ndk's view, exactly once
// (a new counter in a lower layer fails this until it is mapped).
func TestStatsMapEveryCounter(t *testing.T) {
	mapsEveryCounter(t, "transport.GroupStats", engineStats)
	mapsEveryCounter(t, "link.Stats", linkStats)
	// The estimates and the state are not counters: QP.Stats maps them (TestStatsAfterWrites).
	mapsEveryCounter(t, "transport.QPStats", qpCounters, "SRTT", "RTTVar", "RTO", "CongestionWindow", "InFlight", "State")
	if s := micros(1500); s != 1.5 {
		t.Errorf("1500 ns is %v µs", s)
	}
}

// The sums add every field.
func TestStatsAddEveryField(t *testing.T) {
	addsAll(t, "QPCounters", QPCounters.Add)
	addsAll(t, "LinkStats", sumCounters[LinkStats])
	addsAll(t, "SocketStats", sumCounters[SocketStats])
	addsAll(t, "NakCounts", sumCounters[NakCounts])
}

func addsAll[T any](t *testing.T, name string, add func(s, x T) T) {
	t.Helper()
	var x T
	bit := uint(0)
	want := fillDistinct(t, reflect.ValueOf(&x).Elem(), &bit)
	var zero T
	if got, _ := sumFields(reflect.ValueOf(add(zero, x))); got != want {
		t.Errorf("%s: 0 + x sums to %#x, x to %#x", name, got, want)
	}
	if got, _ := sumFields(reflect.ValueOf(add(x, x))); got != 2*want {
		t.Errorf("%s: x + x sums to %#x, want %#x", name, got, 2*want)
	}
}

// jsonNames lists the JSON names of t's fields, as paths (nested objects with a dot,
// arrays with []), embedded structs flattened as encoding/json does.
func jsonNames(t reflect.Type, prefix string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			jsonNames(f.Type, prefix, out)
			continue
		}
		if name == "" || name == "-" {
			*out = append(*out, prefix+"!untagged:"+f.Name)
			continue
		}
		path := prefix + name
		*out = append(*out, path)
		ft := f.Type
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
			if ft.Kind() == reflect.Slice {
				path += "[]"
			}
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft.PkgPath() == reflect.TypeFor[AdapterStats]().PkgPath() {
			jsonNames(ft, path+".", out)
		}
	}
}

var jsonName = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// The JSON names of the stats are one style (snake_case; counters end in _total, sizes
// in _bytes, times in _us) and are pinned by a golden list (testdata/stats-json.golden;
// go test -update rewrites it): a renamed or dropped field is a change of the documented
// format.
func TestStatsJSONNames(t *testing.T) {
	var names []string
	jsonNames(reflect.TypeFor[AdapterStats](), "adapter.", &names)
	jsonNames(reflect.TypeFor[QPStats](), "qp.", &names)
	for _, n := range names {
		leaf := n[strings.LastIndexAny(n, ".]")+1:]
		if !jsonName.MatchString(leaf) {
			t.Errorf("%s: not snake_case", n)
		}
	}
	// Every uint64 leaf is a counter (…_total), but the sizes of things present now.
	checkUnits(t, reflect.TypeFor[AdapterStats]())
	checkUnits(t, reflect.TypeFor[QPStats]())

	golden := filepath.Join("testdata", "stats-json.golden")
	got := strings.Join(names, "\n") + "\n"
	if *updateGolden {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test ./ndk -run TestStatsJSONNames -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("JSON names changed (go test -update rewrites %s once the change is meant):\n%s", golden, diffLines(string(want), got))
	}

	// And the documents carry those names: a marshalled snapshot has each of them.
	p := newPair(t, linkKinds()[0], pairOpts{})
	b, err := json.Marshal(p.A.a.Stats())
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"engines", "engine", "link", "queues", "memory", "qps"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("adapter stats lack %q: %s", k, b)
		}
	}
	qp := doc["qps"].(map[string]any)
	for _, k := range []string{"live", "created_total", "tx_packets_total", "retransmits_queued", "naks_sent_by_kind"} {
		if _, ok := qp[k]; !ok {
			t.Errorf("qps lack %q: %v", k, qp)
		}
	}
	b, err = json.Marshal(p.A.qp.Stats())
	if err != nil {
		t.Fatal(err)
	}
	var back QPStats
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Peer != p.A.qp.Stats().Peer || back.QPN != p.A.qp.tq.QPN() || !strings.Contains(string(b), `"peer":"198.18.0.`) {
		t.Errorf("QP stats do not round-trip: %s -> %+v", b, back)
	}
}

// checkUnits checks the units rule on t's fields: an unsigned 64-bit field is a counter
// (name ending in _total) unless it is a size in bytes of something present now; a
// float is a time in µs.
func checkUnits(t *testing.T, typ reflect.Type) {
	t.Helper()
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
		typ = typ.Elem()
	}
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch f.Type.Kind() {
		case reflect.Struct, reflect.Pointer, reflect.Slice:
			if f.Type != reflect.TypeFor[netip.AddrPort]() {
				checkUnits(t, f.Type)
			}
		case reflect.Uint64:
			if !strings.HasSuffix(name, "_total") && !strings.HasSuffix(name, "_bytes") {
				t.Errorf("%s.%s (%s): a uint64 is a counter (_total) or a size (_bytes)", typ.Name(), f.Name, name)
			}
		case reflect.Float64:
			if !strings.HasSuffix(name, "_us") {
				t.Errorf("%s.%s (%s): a float is a time in µs (_us)", typ.Name(), f.Name, name)
			}
		case reflect.Int:
			if strings.HasSuffix(name, "_total") {
				t.Errorf("%s.%s (%s): a counter is a uint64", typ.Name(), f.Name, name)
			}
		}
	}
}

// diffLines shows the lines only in want (-) and only in got (+).
func diffLines(want, got string) string {
	w, g := map[string]bool{}, map[string]bool{}
	for _, l := range strings.Split(want, "\n") {
		w[l] = true
	}
	for _, l := range strings.Split(got, "\n") {
		g[l] = true
	}
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
