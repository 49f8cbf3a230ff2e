package transport

import (
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Every test of the package (package transport_test's too: one binary) runs with the
// scheduler's check on: after each round, the QPs the round left out are polled as well,
// and the engine panics if one of them had work or a deadline the heap did not hold
// (schedVerify). The semantics, scenario, liveness and fuzz tests thereby check that no
// poll the old loop (every QP, every round) would have made was needed. Benchmarks run
// without it.
func init() { schedVerify = !benchmarking() }

// benchmarking reports whether the test binary was asked to run benchmarks: a non-empty
// -test.bench, as "-test.bench=RE" (go test) or "-test.bench RE" (the binary run by hand).
func benchmarking() bool {
	args := os.Args[1:]
	for i, a := range args {
		a = "-" + strings.TrimLeft(a, "-") // -flag and --flag alike
		if v, ok := strings.CutPrefix(a, "-test.bench="); ok {
			return v != ""
		}
		if a == "-test.bench" && i+1 < len(args) {
			return args[i+1] != ""
		}
	}
	return false
}

// schedQPs returns an engine of n polled QPs (doorbell slot i*stride for QP i) with
// nothing else: enough for its scheduler.
func schedQPs(n int, stride uint32) (*Engine, []*QP) {
	e := &Engine{}
	e.sched.init(int(stride)*n + 1)
	qps := make([]*QP, n)
	for i := range qps {
		qps[i] = &QP{sendQ: &spsc[WorkRequest, *WorkRequest]{}, bellSlot: uint32(i) * stride, connIndex: -1}
		e.activate(qps[i])
	}
	for _, q := range e.sched.round() { // the activation marks
		e.sched.ent[q.connIndex].queued = false
	}
	return e, qps
}

// TestSchedHeap drives the deadline heap with random updates (earlier, later, none) and
// removals of QPs (which move the last one into the hole) and checks, after each, that
// every QP with a deadline is in the heap keyed no later than it, that the heap is in
// order, that earliest is the earliest deadline, and that expire pops what is due, in
// order.
func TestSchedHeap(t *testing.T) {
	const n = 200
	e, qps := schedQPs(n, 1)
	s := &e.sched
	rng := rand.New(rand.NewPCG(1, 2))
	want := map[*QP]int64{}
	check := func() {
		t.Helper()
		if len(s.ent) != len(e.active) {
			t.Fatalf("entries %d, active %d", len(s.ent), len(e.active))
		}
		for i, h := range s.heap {
			if s.ent[h.i].pos != int32(i) {
				t.Fatalf("heap %d holds qp %d whose pos is %d", i, h.i, s.ent[h.i].pos)
			}
			if i > 0 && s.less(i, (i-1)/2) {
				t.Fatalf("heap order broken at %d", i)
			}
		}
		earliest := int64(0)
		for i, q := range e.active {
			en := s.ent[i]
			if en.want != want[q] {
				t.Fatalf("qp %d: deadline %d, want %d", i, en.want, want[q])
			}
			if en.want == 0 {
				continue
			}
			if en.pos < 0 || s.heap[en.pos].at > en.want {
				t.Fatalf("qp %d with deadline %d: heap position %d, key %v", i, en.want, en.pos, s.heap[max(en.pos, 0)])
			}
			earliest = earlier(earliest, en.want)
		}
		if got := s.earliest(); got != earliest {
			t.Fatalf("earliest %d, want %d", got, earliest)
		}
	}
	for k := range 20000 {
		if k%500 == 499 && len(e.active) > n/2 { // remove one
			q := e.active[rng.IntN(len(e.active))]
			e.deactivate(q)
			delete(want, q)
			check()
			continue
		}
		i := rng.IntN(len(e.active))
		at := int64(0)
		if rng.IntN(4) != 0 {
			at = 1 + rng.Int64N(1000)
		}
		s.setDeadline(i, at)
		if at == 0 {
			delete(want, e.active[i])
		} else {
			want[e.active[i]] = at
		}
		check()
	}
	var due []int64
	for _, at := range want {
		if at <= 500 {
			due = append(due, at)
		}
	}
	slices.Sort(due)
	s.expire(500, e.active)
	got := s.round()
	if len(got) != len(due) {
		t.Fatalf("expire(500) marked %d QPs, want %d", len(got), len(due))
	}
	for i, q := range got {
		if w := want[q]; w != due[i] {
			t.Fatalf("expired %d-th: deadline %d, want %d", i, w, due[i])
		}
		delete(want, q)
	}
	check()
	if at := s.earliest(); len(want) > 0 && at <= 500 {
		t.Fatalf("earliest %d after expire(500)", at)
	}
	_ = qps
}

// TestSchedDoorbells checks that no ring is lost: posters on their own goroutines each
// publish a sequence number, ring their slot and wait until the engine's loop, which
// takes the doorbells and reads the numbers of the QPs that rang, has seen it; a lost
// ring would leave a poster waiting (the test's deadline fails it).
func TestSchedDoorbells(t *testing.T) {
	const posters, rings, stride = 8, 3000, 8191 // slots in different words and summaries
	e, qps := schedQPs(posters, stride)
	s := &e.sched
	var posted, acked [posters]atomic.Int64
	deadline := time.Now().Add(20 * time.Second)
	var wg sync.WaitGroup
	failed := make(chan int, posters)
	for i := range posters {
		wg.Go(func() {
			for seq := int64(1); seq <= rings; seq++ {
				posted[i].Store(seq)
				bell := s.bells.bell(qps[i].schedSlot())
				bell.ring()
				for acked[i].Load() != seq {
					if time.Now().After(deadline) {
						failed <- i
						return
					}
					runtime.Gosched()
				}
			}
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	for rounds, loop := 0, true; loop; rounds++ {
		select {
		case <-finished:
			loop = false
		default:
		}
		s.takeBells()
		for _, q := range s.round() {
			s.ent[q.connIndex].queued = false
			i := q.schedSlot() / stride
			acked[i].Store(posted[i].Load())
		}
		if rounds&63 == 0 {
			runtime.Gosched()
		}
	}
	close(failed)
	for i := range failed {
		t.Errorf("poster %d: ring of %d not seen (acked %d)", i, posted[i].Load(), acked[i].Load())
	}
	if s.bells.any() {
		t.Error("bits left after the last take")
	}
}

// TestSchedVerifyOn checks that the package's tests run with the scheduler's check (but for
// a run that also measures benchmarks: all of it then runs without).
func TestSchedVerifyOn(t *testing.T) {
	if benchmarking() {
		t.Skip("benchmarks run without the check")
	}
	if !schedVerify {
		t.Fatal("schedVerify is off in a test run")
	}
}
