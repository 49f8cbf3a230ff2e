package congestion

import "math"

// maxPacingGap bounds the gap NextSendTime puts between two packets, in ns.
const maxPacingGap = 100 * MaxDelay

// Swift is a delay-based AIMD congestion controller after Swift (Kumar et al., SIGCOMM
// 2020; see the package documentation). It keeps a fractional window in packets of MSS
// bytes, grows it additively while the fabric delay is below a target, shrinks it
// multiplicatively when the delay is above the target or a loss or timeout happens (at
// most once per round trip), and paces packets when the window is below one packet.
//
// A Swift belongs to one QP direction and is driven by the engine goroutine; it is not
// safe for concurrent use. Create it with NewSwift.
type Swift struct {
	window // cwnd within [cfg.MinCwnd, cfg.MaxCwnd]; the minimum over BaseDelayWindow
	cfg    SwiftConfig
	target target

	retx int // consecutive timeouts since the last ack or loss event
	// the window before the first timeout of the current run, for OnSpuriousTimeout
	undoCwnd  float64
	undoValid bool

	stats Stats // counters only; the state fields are filled in by Stats
}

var _ Controller = (*Swift)(nil)

// NewSwift returns a Swift controller with configuration cfg, or an error wrapping
// ErrInvalidConfig that names the first invalid field.
func NewSwift(cfg SwiftConfig) (*Swift, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Swift{
		window: newWindow(cfg.MSS, cfg.InitialCwnd, cfg.MinCwnd, cfg.InitialRTT),
		cfg:    cfg,
		target: newTarget(&cfg),
	}, nil
}

// Config returns the configuration s was created with.
func (s *Swift) Config() SwiftConfig { return s.cfg }

// OnSent records bytes sent at now; Swift uses it only for pacing and counters.
func (s *Swift) OnSent(now int64, bytes int) {
	if bytes <= 0 {
		return
	}
	s.stats.SentBytes += uint64(bytes)
	s.sent(now)
}

// OnAck applies one acknowledgement of acked bytes with fabric delay sample delay (ns).
// A delay below the target delay grows the window by AI packets per round trip (by
// AI*acked/MSS/cwnd packets, or AI*acked/MSS while cwnd < 1). A delay above the target
// shrinks it by the factor max(1 - Beta*(delay-target)/delay, 1 - MaxMDF), unless the
// window already decreased within the last round trip. Any ack ends a run of timeouts.
//
// delay <= 0 means no sample: the bytes are counted but the window is left alone.
// Samples above MaxDelay are clamped to MaxDelay. acked <= 0 is ignored.
func (s *Swift) OnAck(now int64, acked int, delay int64) {
	if acked <= 0 {
		return
	}
	s.stats.AckedBytes += uint64(acked)
	s.retx = 0
	if delay <= 0 {
		return
	}
	delay = min(delay, MaxDelay)
	s.sample(delay)
	s.learnBase(now, delay)

	t := s.targetDelay()
	d := float64(delay)
	switch {
	case d < t:
		pkts := float64(acked) / s.mss
		if s.cwnd >= 1 {
			s.cwnd += s.cfg.AI * pkts / s.cwnd
		} else {
			s.cwnd += s.cfg.AI * pkts
		}
		s.cwnd = min(s.cwnd, s.cfg.MaxCwnd)
	case d > t && s.canDecrease(now):
		f := max(1-s.cfg.Beta*(d-t)/d, 1-s.cfg.MaxMDF)
		s.decrease(now, f, &s.stats.DelayDecreases)
	}
}

// OnLoss applies one loss event: the window shrinks by MaxMDF unless it already
// decreased within the last round trip. lost is only counted (negative counts as 0).
func (s *Swift) OnLoss(now int64, lost int) {
	s.stats.LossEvents++
	if lost > 0 {
		s.stats.LostBytes += uint64(lost)
	}
	s.retx = 0
	if s.canDecrease(now) {
		s.decrease(now, 1-s.cfg.MaxMDF, &s.stats.LossDecreases)
	}
}

// OnTimeout applies one retransmission timeout. The RetxResetThreshold-th consecutive
// timeout (and every later one) without an ack or loss event in between sets the window
// to MinCwnd; earlier ones shrink it by MaxMDF unless it already decreased within the
// last round trip.
func (s *Swift) OnTimeout(now int64) {
	s.stats.Timeouts++
	if s.retx == 0 {
		s.undoCwnd, s.undoValid = s.cwnd, true
	}
	if s.retx < s.cfg.RetxResetThreshold {
		s.retx++
	}
	if s.retx >= s.cfg.RetxResetThreshold {
		s.stats.WindowResets++
		s.cwnd = s.cfg.MinCwnd
		s.decreased, s.lastDecrease = true, now
		return
	}
	if s.canDecrease(now) {
		s.decrease(now, 1-s.cfg.MaxMDF, &s.stats.RTODecreases)
	}
}

// OnSpuriousTimeout restores the window from before the run of timeouts that proved
// spurious; without one to undo it only counts.
func (s *Swift) OnSpuriousTimeout(now int64) {
	s.stats.SpuriousTimeouts++
	if !s.undoValid {
		return
	}
	s.cwnd = max(s.cwnd, s.undoCwnd)
	s.undoValid = false
	s.retx = 0
}

// Stats returns a snapshot of s.
func (s *Swift) Stats() Stats {
	st := s.stats
	s.fill(&st)
	st.TargetDelay = int64(s.targetDelay())
	return st
}

// learnBase keeps the windowed minimum delay (the path's unloaded delay) when learning.
func (s *Swift) learnBase(now, delay int64) {
	if w := s.cfg.BaseDelayWindow; w != 0 {
		s.learnMin(now, delay, w)
	}
}

// targetDelay is the target for the current window: the configured target (with flow
// scaling), above the path's learned unloaded delay when learning (0 otherwise).
func (s *Swift) targetDelay() float64 {
	return s.target.at(s.cwnd) + float64(s.baseDelay())
}

// satAdd returns a+b for b >= 0, saturating at math.MaxInt64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
