package ndk

import (
	"context"
	"log/slog"

	"github.com/xdpndk/xdpndk/transport"
)

// The adapter's events go to Options.Logger, at most a few per connection (never per
// packet or per request), and never from the engine goroutine: a handler that blocks
// (a slow terminal, a full pipe) delays only the event goroutine. With no logger nothing
// is formatted.

// logEnabled reports whether events at level are logged.
func (a *Adapter) logEnabled(level slog.Level) bool {
	return a.log != nil && a.log.Enabled(context.Background(), level)
}

// logEvent logs msg with args at level, on the caller's goroutine (not the engine's).
func (a *Adapter) logEvent(level slog.Level, msg string, args ...any) {
	if a.logEnabled(level) {
		a.log.Log(context.Background(), level, msg, append(args, "local", a.LocalAddr())...)
	}
}

// logQPFailed logs, from the event goroutine, that q's connection ended other than by
// this side, with the engine's reason. Engine goroutine.
func (q *QP) logQPFailed() {
	a := q.a
	if !a.logEnabled(slog.LevelWarn) {
		return
	}
	tq := q.tq
	a.event(func() {
		level, msg := slog.LevelWarn, "connection aborted"
		if tq.State() == transport.QPDisconnected {
			level, msg = slog.LevelInfo, "connection closed by the peer"
		}
		a.logEvent(level, msg, "qpn", tq.QPN(), "peer", tq.Peer(), "cause", tq.Cause())
	})
}
