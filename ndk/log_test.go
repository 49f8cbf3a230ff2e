package ndk

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

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
	}
}
