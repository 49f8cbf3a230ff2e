package ndk

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/simlink"
)

// CQ notification rules of NDKPI NdkArmCq and NDKPI Completion Handling Requirements,
// driven by pushing results directly.

func cqAdapter(t *testing.T) *Adapter {
	t.Helper()
	la, _ := simlink.Pair(simlink.Config{Seed: 1})
	return openT(t, la, DefaultOptions())
}

// notes returns a NotifyFunc that records statuses on a channel.
func notes() (NotifyFunc, chan Status) {
	ch := make(chan Status, 64)
	return func(s Status) { ch <- s }, ch
}

func expectNote(t *testing.T, ch chan Status, want Status) {
	t.Helper()
	select {
	case s := <-ch:
		if s != want {
			t.Fatalf("notification %v, want %v", s, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no notification (want %v)", want)
	}
}

func expectNoNote(t *testing.T, ch chan Status) {
	t.Helper()
	select {
	case s := <-ch:
		t.Fatalf("unexpected notification %v", s)
	case <-time.After(20 * time.Millisecond):
	}
}

func push(cq *CQ, st Status, solicited bool) {
	cq.push(&ResultEx{Result: Result{Status: st}, Type: OpTypeReceive}, solicited)
}

func TestArmMergeTable(t *testing.T) {
	a := cqAdapter(t)
	// NDKPI Completion Handling Requirements: the effective type when re-arming before the
	// first arm fired.
	for _, c := range []struct{ first, second, eff NotifyType }{
		{NotifyAny, NotifyAny, NotifyAny}, {NotifyAny, NotifyErrors, NotifyAny}, {NotifyAny, NotifySolicited, NotifyAny},
		{NotifyErrors, NotifyAny, NotifyAny}, {NotifyErrors, NotifyErrors, NotifyErrors}, {NotifyErrors, NotifySolicited, NotifySolicited},
		{NotifySolicited, NotifyAny, NotifyAny}, {NotifySolicited, NotifyErrors, NotifySolicited}, {NotifySolicited, NotifySolicited, NotifySolicited},
	} {
		cq, err := a.NewCQ(8, func(Status) {})
		if err != nil {
			t.Fatal(err)
		}
		cq.Arm(c.first)
		cq.Arm(c.second)
		if got := NotifyType(cq.arm.Load() - 1); got != c.eff {
			t.Errorf("arm %v then %v: %v, want %v", c.first, c.second, got, c.eff)
		}
	}
}

func TestArmOneShotAndImmediate(t *testing.T) {
	a := cqAdapter(t)
	fn, ch := notes()
	cq, _ := a.NewCQ(8, fn)
	push(cq, StatusSuccess, false)
	expectNoNote(t, ch) // not armed: the callback is invoked only after Arm
	cq.Arm(NotifyAny)   // a completion arrived since the last callback: satisfied at once
	expectNote(t, ch, StatusSuccess)
	push(cq, StatusSuccess, false)
	expectNoNote(t, ch) // one-shot: the arm was consumed
	cq.Arm(NotifyAny)
	expectNote(t, ch, StatusSuccess)
	cq.Arm(NotifyAny) // both queued results were present at the last callback: may wait
	expectNoNote(t, ch)
	push(cq, StatusSuccess, false)
	expectNote(t, ch, StatusSuccess)
	var r [8]Result
	if n := cq.GetResults(r[:]); n != 3 {
		t.Fatalf("%d results, want 3", n)
	}
}

func TestArmSolicited(t *testing.T) {
	a := cqAdapter(t)
	fn, ch := notes()
	cq, _ := a.NewCQ(16, fn)
	cq.Arm(NotifySolicited)
	push(cq, StatusSuccess, false)
	expectNoNote(t, ch)
	push(cq, StatusSuccess, true)
	expectNote(t, ch, StatusSuccess)
	cq.Arm(NotifySolicited)
	push(cq, StatusSuccess, false)
	expectNoNote(t, ch)
	push(cq, StatusCancelled, false) // a completion in error always satisfies SOLICITED
	expectNote(t, ch, StatusSuccess)
	cq.Arm(NotifyErrors) // completions never satisfy ERRORS
	push(cq, StatusAccessViolation, false)
	push(cq, StatusSuccess, true)
	expectNoNote(t, ch)
}

func TestCQOverrun(t *testing.T) {
	la, _ := simlink.Pair(simlink.Config{Seed: 1})
	a := openT(t, la, DefaultOptions())
	fn, ch := notes()
	cq, _ := a.NewCQ(2, fn)
	pd, _ := a.NewPD()
	qp, err := pd.NewQP(QPConfig{ReceiveCQ: cq, InitiatorCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	cq.Arm(NotifyErrors)
	push(cq, StatusSuccess, false)
	push(cq, StatusSuccess, false)
	expectNoNote(t, ch)
	push(cq, StatusSuccess, false) // the third overruns a CQ of depth 2
	expectNote(t, ch, StatusBufferOverflow)
	if !cq.Overrun() {
		t.Fatal("not overrun")
	}
	var r [4]Result
	if n := cq.GetResults(r[:]); n != 0 {
		t.Fatalf("an overrun CQ returned %d results", n)
	}
	b := make([]byte, 8)
	mr, _ := pd.RegisterMR(b, MRAllowLocalWrite)
	if err := qp.Receive(1, []SGE{mr.SGE(b)}); !errors.Is(err, StatusInvalidDeviceState) {
		t.Fatalf("receive on a QP of an overrun CQ: %v", err)
	}
	cq.Arm(NotifyAny)
	expectNoNote(t, ch) // the overflow is told once
}

func TestOverrunToldOnArm(t *testing.T) {
	a := cqAdapter(t)
	fn, ch := notes()
	cq, _ := a.NewCQ(1, fn)
	push(cq, StatusSuccess, false)
	push(cq, StatusSuccess, false)
	expectNoNote(t, ch) // not armed yet
	cq.Arm(NotifyErrors)
	expectNote(t, ch, StatusBufferOverflow)
}

func TestInterruptModeration(t *testing.T) {
	a := cqAdapter(t)
	fn, ch := notes()
	cq, _ := a.NewCQ(64, fn)
	if err := cq.ControlInterruptModeration(math.MaxUint32, math.MaxUint32); !errors.Is(err, StatusInvalidParameterMix) {
		t.Fatalf("MAXULONG/MAXULONG: %v", err)
	}
	if err := cq.ControlInterruptModeration(math.MaxUint32, 65); !errors.Is(err, StatusInvalidParameterMix) {
		t.Fatalf("MAXULONG interval with a count over the depth: %v", err)
	}
	// Count alone: the notification waits for 3 completions.
	if err := cq.ControlInterruptModeration(math.MaxUint32, 3); err != nil {
		t.Fatal(err)
	}
	cq.Arm(NotifyAny)
	push(cq, StatusSuccess, false)
	push(cq, StatusSuccess, false)
	expectNoNote(t, ch)
	push(cq, StatusSuccess, false)
	expectNote(t, ch, StatusSuccess)
	// Interval alone: it comes after the interval even with one completion.
	if err := cq.ControlInterruptModeration(2000, math.MaxUint32); err != nil {
		t.Fatal(err)
	}
	var r [8]Result
	cq.GetResults(r[:])
	cq.Arm(NotifyAny)
	push(cq, StatusSuccess, false)
	select {
	case s := <-ch:
		t.Fatalf("moderated notification %v came before its 2 ms interval could pass", s)
	default:
	}
	expectNote(t, ch, StatusSuccess)
	// Off again: immediate.
	if err := cq.ControlInterruptModeration(0, 0); err != nil {
		t.Fatal(err)
	}
	cq.Arm(NotifyAny)
	push(cq, StatusSuccess, false)
	expectNote(t, ch, StatusSuccess)
}

// Callbacks are serialized: never two at once, across CQs of an adapter; Close waits for
// a callback in progress and none follows it.
func TestNotificationSerializedAndClose(t *testing.T) {
	a := cqAdapter(t)
	var in, overlaps, calls atomic.Int32
	var cqs []*CQ
	var mu sync.Mutex
	for i := 0; i < 8; i++ {
		cq, err := a.NewCQ(256, func(Status) {
			if in.Add(1) > 1 {
				overlaps.Add(1)
			}
			time.Sleep(200 * time.Microsecond)
			calls.Add(1)
			in.Add(-1)
		})
		if err != nil {
			t.Fatal(err)
		}
		cqs = append(cqs, cq)
	}
	var wg sync.WaitGroup
	for _, cq := range cqs {
		wg.Go(func() {
			for j := 0; j < 20; j++ {
				mu.Lock() // push is the engine's: one producer at a time
				push(cq, StatusSuccess, false)
				mu.Unlock()
				cq.Arm(NotifyAny)
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for calls.Load() < 8 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if calls.Load() < 8 || overlaps.Load() != 0 {
		t.Fatalf("%d callbacks, %d overlapping", calls.Load(), overlaps.Load())
	}
	for _, cq := range cqs {
		if err := cq.Close(bg); err != nil {
			t.Fatal(err)
		}
	}
	after := calls.Load()
	for _, cq := range cqs {
		push(cq, StatusSuccess, false)
		cq.Arm(NotifyAny)
	}
	time.Sleep(20 * time.Millisecond)
	if calls.Load() != after {
		t.Fatal("a callback ran after Close")
	}
}

func TestNewCQLimits(t *testing.T) {
	a := cqAdapter(t)
	for _, d := range []int{0, -1, maxCQDepth + 1} {
		if _, err := a.NewCQ(d, nil); !errors.Is(err, StatusInvalidParameter) {
			t.Errorf("depth %d: %v", d, err)
		}
	}
}
