package congestion

import "fmt"

// Fixed is a Controller with a constant window and no pacing: it never reacts to delay,
// loss or timeouts. Use it in tests, and as the baseline in comparisons (for example
// against go-back-N). Not safe for concurrent use.
type Fixed struct {
	window int
	stats  Stats
}

var _ Controller = (*Fixed)(nil)

// NewFixed returns a Fixed controller whose window is window bytes, or an error wrapping
// ErrInvalidConfig if window is not positive.
func NewFixed(window int) (*Fixed, error) {
	if window < 1 {
		return nil, fmt.Errorf("congestion: fixed window = %d bytes, want >= 1: %w", window, ErrInvalidConfig)
	}
	return &Fixed{window: window}, nil
}

// Window returns the constant window in bytes.
func (f *Fixed) Window() int { return f.window }

// OnSent counts bytes sent (non-positive bytes are ignored).
func (f *Fixed) OnSent(now int64, bytes int) {
	if bytes > 0 {
		f.stats.SentBytes += uint64(bytes)
	}
}

// OnAck counts acked bytes and keeps the last valid delay sample (ns); the window does
// not change.
func (f *Fixed) OnAck(now int64, acked int, delay int64) {
	if acked <= 0 {
		return
	}
	f.stats.AckedBytes += uint64(acked)
	if delay > 0 {
		f.stats.LastDelay = min(delay, MaxDelay)
	}
}

// OnLoss counts the loss event and its lost bytes; the window does not change.
func (f *Fixed) OnLoss(now int64, lost int) {
	f.stats.LossEvents++
	if lost > 0 {
		f.stats.LostBytes += uint64(lost)
	}
}

// OnTimeout counts the timeout; the window does not change.
func (f *Fixed) OnTimeout(now int64) { f.stats.Timeouts++ }

// OnSpuriousTimeout only counts: a fixed window has nothing to undo.
func (f *Fixed) OnSpuriousTimeout(now int64) { f.stats.SpuriousTimeouts++ }

// NextSendTime returns now: Fixed does not pace.
func (f *Fixed) NextSendTime(now int64, bytes int) int64 { return now }

// Stats returns the window (as Window and Cwnd) and the counters.
func (f *Fixed) Stats() Stats {
	st := f.stats
	st.Window = f.window
	st.Cwnd = f.window
	return st
}
