package ndk

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/simlink"
)

// logBuffer is an io.Writer for a test's slog handler, safe for the adapter's goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// The adapter's open event names its progress mode ("progress=inline"), not the number
// of a constant whose order has changed before.
func TestLogAdapterOpenProgress(t *testing.T) {
	for _, p := range []Progress{ProgressInline, ProgressAdaptive, ProgressBusy} {
		var out logBuffer
		opts := DefaultOptions()
		opts.Progress = p
		opts.Logger = slog.New(slog.NewTextHandler(&out, nil))
		link, _ := simlink.Pair(simlink.Config{})
		a, err := OpenLink(link, opts)
		if err != nil {
			t.Fatal(err)
		}
		_ = a.Close(context.Background())
		if s := out.String(); !strings.Contains(s, `msg="adapter open"`) || !strings.Contains(s, " progress="+p.String()+" ") {
			t.Errorf("%v: the open event does not name the mode:\n%s", p, s)
		}
		if s := out.String(); !strings.Contains(s, `msg="adapter closed"`) {
			t.Errorf("%v: no close event:\n%s", p, s)
		}
	}
}

// The connection events are logged with their time and a level that says how much they
// matter: established and closed at info, a refused connect and a connection that failed
// (with its cause) at warn. Nothing is logged per request.
func TestLogConnectionEvents(t *testing.T) {
	var outA, outB logBuffer
	opts := DefaultOptions()
	opts.RetryTimeout = 50 * time.Millisecond
	la, lb := simlink.Pair(simlink.Config{Seed: 1, MaxPayload: 8972})
	oa, ob := withUMEM(t, opts), withUMEM(t, opts)
	oa.Logger = slog.New(slog.NewTextHandler(&outA, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ob.Logger = slog.New(slog.NewTextHandler(&outB, &slog.HandlerOptions{Level: slog.LevelDebug}))
	x, y := openT(t, la, oa), openT(t, lb, ob)
	a, b := idleSide(t, x), idleSide(t, y)

	refuse := true
	onConnect, accepted := acceptor(b, 16, 16, nil, nil)
	b.listen(t, func(c *Connector) {
		if refuse {
			_ = c.Reject([]byte("no"))
			return
		}
		onConnect(c)
	})
	if _, err := a.dial(t, b, servicePort, 16, 16, nil); StatusOf(err) != StatusConnectionRefused {
		t.Fatalf("refused connect: %v", err)
	}
	refuse = false
	a.qp = mustQP(t, a)
	c, err := a.dial(t, b, servicePort, 16, 16, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CompleteConnect(bg, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	// Traffic logs nothing.
	before := outA.String()
	src, smr := a.region(t, 4096, MRAllowLocalWrite)
	_, tmr := b.region(t, 4096, MRAllowLocalWrite|MRAllowRemoteWrite)
	for i := range 20 {
		if err := a.qp.Write(i, []SGE{smr.SGE(src[:64])}, tmr.VA(), tmr.RemoteToken(), 0); err != nil {
			t.Fatal(err)
		}
	}
	results(t, a.icq, 20)
	if after := outA.String(); after != before {
		t.Errorf("Writes logged:\n%s", strings.TrimPrefix(after, before))
	}
	// B vanishes: A's next Write times out and the QP fails, with its cause.
	vanish(y)
	if err := a.qp.Write("lost", []SGE{smr.SGE(src[:64])}, tmr.VA(), tmr.RemoteToken(), 0); err != nil {
		t.Fatal(err)
	}
	if r := results(t, a.icq, 1); r[0].Status != StatusIOTimeout {
		t.Fatalf("write to a vanished peer: %+v", r[0])
	}
	testbedWait(t, "the failure logged", func() bool { return strings.Contains(outA.String(), `msg="connection aborted"`) })

	for _, w := range []struct {
		out   *logBuffer
		level string
		msg   string
	}{
		{&outA, "WARN", `msg="connection refused"`},
		{&outA, "INFO", `msg="connection established"`},
		{&outB, "INFO", `msg="connection established"`},
		{&outA, "WARN", `msg="connection aborted"`},
	} {
		line := lineWith(w.out.String(), w.msg)
		if line == "" {
			t.Errorf("no %s in\n%s", w.msg, w.out.String())
			continue
		}
		if !strings.Contains(line, "level="+w.level) || !timeRFC3339ms.MatchString(line) {
			t.Errorf("%s: want level %s and a time to the millisecond: %s", w.msg, w.level, line)
		}
	}
	if l := lineWith(outA.String(), `msg="connection aborted"`); !strings.Contains(l, "cause=") || !strings.Contains(l, "qpn=") {
		t.Errorf("the failure names neither its QP nor its cause: %s", l)
	}
}

// timeRFC3339ms matches slog's time attribute: RFC 3339 with milliseconds.
var timeRFC3339ms = regexp.MustCompile(`^time=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d) `)

func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

func mustQP(t *testing.T, s *side) *QP {
	t.Helper()
	q, err := s.pd.NewQP(QPConfig{ReceiveCQ: s.rcq, InitiatorCQ: s.icq})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func testbedWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within 10 s", what)
		}
	}
}
